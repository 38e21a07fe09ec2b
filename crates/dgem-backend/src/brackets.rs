//! Bracket routing over any [`Decider`]: choice questions with 27..=300 options.
//!
//! A reader reads at most 26 labels per slot. [`decide`] answers a schema that
//! holds wider choice questions by asking the same decider smaller schemas: the
//! ordinary questions as one part, then for each wide question its round-1
//! brackets (up to 8 sub-questions per decision) and its final round, and fuses
//! the two rounds into one distribution over all options
//! ([`dgem_core::brackets`] has the rules). Every reader calls it from its
//! `decide` when [`routes`] says so, so every surface (HTTP, MCP, `decide`,
//! benchmarks) takes wide questions the same way.
//!
//! A routed question is read in rounds of its own, so it may not take part in
//! `depends_on` / `ask_if` (either side); that is refused with a message naming it.

use std::time::Instant;

use dgem_core::brackets::{
    bracket_question, final_question, finalists, fuse, needs_brackets, split, BRACKETS_PER_PASS,
    BRACKET_SIZE,
};
use dgem_core::envelope::{AnswerOut, BracketDiagnostics, PartSamples, SamplesDiagnostics};
use dgem_core::readout::aggregate;
use dgem_core::schema::{Question, ValidSchema};
use dgem_core::SchemaError;

use crate::{DecideError, DecideRequest, Decider, Decision};

/// Whether `schema` asks a question that needs bracket routing.
pub fn routes(schema: &ValidSchema) -> bool {
    schema.asked().iter().any(|q| needs_brackets(q))
}

fn refuse(schema: &ValidSchema, q: &Question, why: &str) -> DecideError {
    let i = schema
        .questions
        .iter()
        .position(|x| x.id == q.id)
        .unwrap_or(0);
    DecideError::Schema(SchemaError::new(
        format!("questions[{i}]"),
        format!(
            "question '{}' {why}; a choice with more than 26 options is answered through brackets in rounds of its own, so it cannot take part in depends_on or ask_if",
            q.id
        ),
    ))
}

/// One sub-decision's answer distribution for `id`.
fn mean_of(d: &Decision, id: &str) -> Result<Vec<f64>, DecideError> {
    d.answers
        .get(id)
        .and_then(Option::as_ref)
        .map(|a| a.aggregate.mean.clone())
        .ok_or_else(|| {
            DecideError::Backend(crate::BackendError::Model(format!(
                "bracket round returned no answer for '{id}'"
            )))
        })
}

/// Add a sub-decision's reads into the running diagnostics: timing, cached
/// tokens, output rows (`usage.completion_tokens` / `output_tokens`) and the
/// longest prompt (`usage.prompt_tokens`), so usage counts every round.
fn absorb_reads(into: &mut Option<Decision>, d: &Decision) {
    if let Some(base) = into.as_mut() {
        let (b, s) = (&mut base.diagnostics, &d.diagnostics);
        b.timing.reads += s.timing.reads;
        b.timing.queue_ms += s.timing.queue_ms;
        b.timing.forward_ms += s.timing.forward_ms;
        b.timing.calibration_ms += s.timing.calibration_ms;
        b.cached_tokens += s.cached_tokens;
        b.rows += s.rows;
        b.prompt_tokens = b.prompt_tokens.max(s.prompt_tokens);
    }
}

/// The final round's samples parts with its sub-question's tops filed under
/// the routed question's id: each read's `[label, max probability, entropy]`
/// as the final read them (the final decides the answer).
fn final_parts(d: &Decision, final_id: &str, id: &str) -> Vec<PartSamples> {
    d.diagnostics
        .samples
        .parts
        .iter()
        .map(|p| PartSamples {
            n: p.n,
            tops: p
                .tops
                .iter()
                .map(|t| {
                    t.get(final_id)
                        .map(|top| std::iter::once((id.to_owned(), top.clone())).collect())
                        .unwrap_or_default()
                })
                .collect(),
            policy: p.policy.clone(),
        })
        .collect()
}

/// Decide `req` on `inner`, routing wide choice questions through brackets (see
/// the module docs). Answers come back in schema order; `diagnostics.brackets`
/// names every routed question with its bracket sizes and finalists. The
/// samples block lists the ordinary questions' parts, then each routed
/// question's final read under its own id; usage (`rows`, `prompt_tokens`) and
/// timing count every read of every round.
///
/// # Errors
/// [`DecideError::Schema`] when a routed question takes part in `depends_on` /
/// `ask_if`; whatever `inner` returns for a part.
pub async fn decide(inner: &dyn Decider, req: DecideRequest) -> Result<Decision, DecideError> {
    let started = Instant::now();
    let schema = &req.schema;
    let asked = schema.asked();
    let (wide, narrow): (Vec<&Question>, Vec<&Question>) =
        asked.iter().partition(|q| needs_brackets(q));
    for w in &wide {
        if !w.depends_on.is_empty() {
            return Err(refuse(schema, w, "depends on other questions"));
        }
        if let Some(q) = asked.iter().find(|q| q.depends_on.contains(&w.id)) {
            return Err(refuse(schema, w, &format!("is a dependency of '{}'", q.id)));
        }
    }
    let part = |questions: Vec<Question>| -> Result<DecideRequest, DecideError> {
        Ok(DecideRequest {
            schema: schema.with_questions(questions)?,
            state: req.state.clone(),
            seed: req.seed,
        })
    };
    let mut base: Option<Decision> = None;
    // The samples block lists the schema's parts: the ordinary questions' part(s),
    // then each routed question's final read (round-1 reads are internal).
    let mut samples = SamplesDiagnostics {
        parts: Vec::new(),
        flat: true,
    };
    if !narrow.is_empty() {
        let questions = narrow.iter().map(|q| (*q).clone()).collect();
        let d = inner.decide(part(questions)?).await?;
        samples = d.diagnostics.samples.clone();
        base = Some(d);
    }
    let mut routed = Vec::with_capacity(wide.len());
    for w in wide {
        let ranges = split(w.alternatives.len(), BRACKET_SIZE);
        let subs: Vec<Question> = ranges
            .iter()
            .enumerate()
            .map(|(b, r)| bracket_question(w, b, r.clone()))
            .collect();
        let mut round1 = Vec::with_capacity(subs.len());
        for pass in subs.chunks(BRACKETS_PER_PASS) {
            let d = inner.decide(part(pass.to_vec())?).await?;
            for q in pass {
                round1.push(mean_of(&d, &q.id)?);
            }
            if base.is_none() {
                base = Some(d);
            } else {
                absorb_reads(&mut base, &d);
            }
        }
        let picked = finalists(&ranges, &round1);
        let fq = final_question(w, &picked);
        let d = inner.decide(part(vec![fq.clone()])?).await?;
        let p_final = mean_of(&d, &fq.id)?;
        let fused = fuse(w.alternatives.len(), &ranges, &round1, &picked, &p_final);
        let qdiag = d.diagnostics.questions.get(&fq.id).cloned();
        samples.flat &= d.diagnostics.samples.flat;
        samples.parts.extend(final_parts(&d, &fq.id, &w.id));
        absorb_reads(&mut base, &d);
        let mut answer = AnswerOut::new(
            (*w).clone(),
            w.alternatives.iter().map(|a| a.name.clone()).collect(),
            aggregate(&[fused]),
        );
        // How much the final round (the finalists) moved with their listing
        // order, when the reader measured it; round 1 is not summarized.
        answer.order = d
            .answers
            .get(&fq.id)
            .and_then(Option::as_ref)
            .and_then(|a| a.order.clone());
        let info = BracketDiagnostics {
            options: w.alternatives.len(),
            brackets: ranges.iter().map(|r| r.len()).collect(),
            finalists: picked
                .iter()
                .filter_map(|&i| w.alternatives.get(i).map(|a| a.name.clone()))
                .collect(),
            rounds: 2,
        };
        routed.push((answer, info, qdiag));
    }
    let Some(mut out) = base else {
        return Err(DecideError::Schema(SchemaError::new(
            "questions",
            "schema: nothing to ask",
        )));
    };
    let mut answers = std::mem::take(&mut out.answers);
    for (answer, info, qdiag) in routed {
        let id = answer.question.id.clone();
        out.diagnostics.stages.push(vec![id.clone()]);
        out.diagnostics.chunks.push(vec![id.clone()]);
        if let Some(q) = qdiag {
            out.diagnostics.questions.insert(id.clone(), q);
        }
        out.diagnostics.brackets.insert(id.clone(), info);
        answers.insert(id, Some(answer));
    }
    // Round-1 and final sub-questions are internal: keep only schema questions.
    let keep: Vec<String> = asked.iter().map(|q| q.id.clone()).collect();
    out.diagnostics
        .questions
        .retain(|id, _| keep.iter().any(|k| k == id));
    out.diagnostics.samples = samples;
    out.diagnostics
        .stages
        .retain(|s| s.iter().all(|id| keep.contains(id)));
    out.diagnostics
        .chunks
        .retain(|s| s.iter().all(|id| keep.contains(id)));
    out.diagnostics.isolated = schema.isolated();
    out.answers = keep
        .iter()
        .filter_map(|id| answers.shift_remove(id).map(|a| (id.clone(), a)))
        .collect();
    out.diagnostics.timing.total_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(out)
}
