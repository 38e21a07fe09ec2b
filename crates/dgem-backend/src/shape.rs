//! `multi` questions and rules between answers over any [`Decider`].
//!
//! A reader reads single-answer slots. [`decide`] answers a schema that asks
//! `multi` questions or states `rules` by asking the same decider a plain
//! schema: each `multi` question becomes one yes/no sub-question per option
//! ([`dgem_core::multi::expand`]), whose answers are folded back into one
//! answer per `multi` question ([`dgem_core::multi::collapse`]); then the
//! rules are applied to the joint distribution of the questions they tie
//! ([`dgem_core::rules`]). Every reader calls it from its `decide` when
//! [`shapes`] says so (before bracket routing), so every surface (HTTP, MCP,
//! `decide`, batch, benchmarks) reads these the same way.

use indexmap::IndexMap;

use dgem_core::envelope::AnswerOut;
use dgem_core::multi::{collapse, expand, expands};
use dgem_core::rules::Rules;
use dgem_core::schema::ValidSchema;

use crate::{BackendError, DecideError, DecideRequest, Decider, Decision};

/// Whether `schema` asks a `multi` question or states rules, so a reader
/// must answer it through [`decide`].
pub fn shapes(schema: &ValidSchema) -> bool {
    expands(schema) || !schema.rules.is_empty()
}

/// The schema a reader reads for `schema`: `multi` questions expanded into
/// yes/no sub-questions and rules dropped (they apply to the answers), with
/// the expansion's slot ids per `multi` question.
///
/// # Errors
/// [`DecideError::Schema`] when the expansion breaks a schema rule.
pub fn read_schema(
    schema: &ValidSchema,
) -> Result<(ValidSchema, IndexMap<String, Vec<String>>), DecideError> {
    if expands(schema) {
        let e = expand(schema)?;
        Ok((e.schema, e.slots))
    } else {
        let mut plain = schema.clone();
        plain.rules = Rules::default();
        Ok((plain, IndexMap::new()))
    }
}

/// Decide `req` on `inner` (see the module docs). Answers come back in
/// schema order, one per asked question; `diagnostics.multi` names each
/// `multi` question's slots and `diagnostics.constraints` what the rules did.
///
/// # Errors
/// Whatever `inner` returns; [`DecideError::Backend`] when its decision
/// lacks the answer of a slot it was asked.
pub async fn decide(inner: &dyn Decider, req: DecideRequest) -> Result<Decision, DecideError> {
    let schema = req.schema;
    let (read, slots) = read_schema(&schema)?;
    let mut d = inner
        .decide(DecideRequest {
            schema: read,
            state: req.state,
            seed: req.seed,
        })
        .await?;
    if !slots.is_empty() {
        d.answers = fold(&schema, &slots, std::mem::take(&mut d.answers), &mut d)?;
        d.diagnostics.multi = slots;
    }
    let (done, warnings) = schema.rules.apply(&mut d.answers);
    d.diagnostics.constraints = done;
    d.diagnostics.warnings.extend(warnings);
    Ok(d)
}

fn missing(id: &str) -> DecideError {
    DecideError::Backend(BackendError::Model(format!(
        "the read returned no answer for slot '{id}'"
    )))
}

/// The decision's answers with each `multi` question's slots folded into
/// its answer; a `multi` question whose slots were skipped by `ask_if` is
/// skipped itself (and listed in `skipped` under its own id).
fn fold(
    schema: &ValidSchema,
    slots: &IndexMap<String, Vec<String>>,
    mut read: IndexMap<String, Option<AnswerOut>>,
    d: &mut Decision,
) -> Result<IndexMap<String, Option<AnswerOut>>, DecideError> {
    let mut out = IndexMap::with_capacity(schema.asked().len());
    for q in schema.asked() {
        // Only an expanded question has slots of its own.
        let Some(ids) = slots.get(&q.id) else {
            let a = read.shift_remove(&q.id).ok_or_else(|| missing(&q.id))?;
            out.insert(q.id.clone(), a);
            continue;
        };
        let mut options = Vec::with_capacity(ids.len());
        let mut skipped = false;
        for id in ids {
            match read.shift_remove(id).ok_or_else(|| missing(id))? {
                Some(a) => options.push(a.aggregate),
                None => skipped = true,
            }
        }
        if skipped {
            let skip = ids
                .iter()
                .find_map(|id| d.diagnostics.skipped.get(id).cloned());
            for id in ids {
                d.diagnostics.skipped.shift_remove(id);
            }
            if let Some(skip) = skip {
                d.diagnostics.skipped.insert(q.id.clone(), skip);
            }
            out.insert(q.id.clone(), None);
        } else {
            out.insert(q.id.clone(), Some(collapse(q, options)));
        }
    }
    Ok(out)
}
