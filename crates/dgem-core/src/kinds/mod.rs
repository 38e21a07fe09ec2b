//! One module per question type: everything that differs by type lives in
//! its file, behind one small crate-private trait (`Kind`).
//!
//! A type's file holds its names (canonical, wire, aliases, a summary), how
//! its alternatives are read from a policy, its fields in the wire form of a
//! schema, how an ad-hoc question of the type is converted, the shape of its
//! answer on the chat route and on `/v1/systemone`, and how that answer is
//! read back from an upstream's reply ([`reply`]: other names of its
//! alternatives, the key that states its pick, whether it picks one). A type
//! that needs a read of its own keeps it there too ([`multi`]). `of` is the
//! one place that maps a [`QuestionKind`] to its module.
//!
//! ## Adding a type
//!
//! A type whose one slot is read as an existing type's slot (its answer
//! shape, names, policy fields and widget its own) is five files written by
//! hand:
//! 1. its module here (`kinds/<name>.rs`, implementing `Kind`);
//! 2. this file: its `mod` line, its arm in `of`, and its names in the test
//!    below, the one place the accepted type names are written out;
//! 3. `schema/mod.rs`: its [`QuestionKind`] variant, its place in
//!    [`QuestionKind::ALL`], and its arm in [`QuestionKind::slot_kind`]
//!    naming the type its slot is read as (the arm is required: without it
//!    the type would be its own slot type, see below);
//! 4. its Studio widget, an entry in `crates/dgem-studio/assets/kinds.js`;
//! 5. its row in the question-type table of `docs/policy.md`.
//!
//! Two snapshots that list the accepted type names in an error message
//! (`chat_errors` and `systemone_errors` in dgem-server's tests) are then
//! re-accepted with `cargo insta`. Every surface (CLI, `/api`, chat,
//! `/v1/systemone`, MCP, the gateway, the OpenAPI and tool descriptions)
//! takes the type with no change of its own. This was measured on
//! 2026-12-07 with a trial type built from `choice` (slot read as a
//! `choice`) with an answer key of its own: with those files, the
//! workspace's tests passed and `dgem decide` answered it.
//!
//! What a new type does not get by itself: features keyed on `choice` by
//! name (brackets over 26 options, `none_of_these`, the cascade's taxonomy
//! expansion, score-style listing orders) apply to it only where their
//! checks name it.
//!
//! A type that is a new kind of slot read also goes into
//! [`QuestionKind::SLOT_KINDS`]. That adds a key to everything kept per
//! slot type ([`crate::schema::ByKind`]: temperatures, calibration fits and
//! the files that store them), so its own figures must be measured. A type
//! read as several slots (as `multi`, one yes/no slot per option) also needs
//! its expansion and fold (`kinds/multi/read.rs`, called from dgem-backend's
//! `shape.rs`) and the validation of its own fields
//! (`schema/validate/select.rs`).

mod boolean;
mod choice;
pub mod multi;
pub mod reply;
mod score;

use serde_json::{json, Map, Value};

use crate::envelope::AnswerOut;
use crate::error::AdhocError;
use crate::error::SchemaError;
use crate::schema::{Alternative, Question, QuestionKind, MAX_ALTERNATIVES};

/// The names of a question type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    /// The canonical name in policies (`boolean`, `choice`, …).
    pub canonical: &'static str,
    /// The name written in answers on the chat route (`noul` for yes/no).
    pub wire: &'static str,
    /// Every accepted spelling, canonical name first.
    pub aliases: &'static [&'static str],
    /// What an ad-hoc question of this type answers, in a few words.
    pub summary: &'static str,
}

/// Where an ad-hoc question is being converted: its id and its path in the
/// request (`questions.urgent`, `questions[2]`), for messages.
pub(crate) struct AdhocAt<'a> {
    /// The question's id.
    pub id: &'a str,
    /// Its path in the request.
    pub field: &'a str,
}

/// What one question type is (see the module docs).
pub(crate) trait Kind: Sync {
    /// The type's names.
    fn names(&self) -> Names;

    /// Most alternatives a question of this type may have.
    fn max_alternatives(&self) -> usize {
        MAX_ALTERNATIVES
    }

    /// The alternatives of a policy question `q` (its id shown as `name`, its
    /// path made by `at`) and the field that holds them (`.options`, …).
    ///
    /// # Errors
    /// [`SchemaError`] naming the field, what it allows and the value given.
    fn alternatives(
        &self,
        q: &Map<String, Value>,
        name: &str,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(Vec<Alternative>, &'static str), SchemaError>;

    /// The type's own fields of `q` in the wire form of a schema.
    fn wire(&self, q: &Question, m: &mut Map<String, Value>);

    /// The keys an ad-hoc question of this type may give its alternatives
    /// in, in the order [`Self::adhoc`] looks for them; one of them at most
    /// (the converter refuses two, and any other type's).
    fn adhoc_alternative_keys(&self) -> &'static [&'static str];

    /// Convert the alternatives of an ad-hoc question `q` (whose `criteria`
    /// is `criteria`) into the policy form, in `out`.
    ///
    /// # Errors
    /// [`AdhocError`] when they are missing or of the wrong shape.
    fn adhoc(
        &self,
        at: &AdhocAt<'_>,
        q: &Map<String, Value>,
        criteria: Option<&Value>,
        out: &mut Map<String, Value>,
    ) -> Result<(), AdhocError>;

    /// The answer object of `a` on the chat route: the common keys around
    /// this type's own ([`Self::chat_keys`]).
    fn chat_json(&self, a: &AnswerOut) -> Value {
        a.chat_shape(&|m| self.chat_keys(a, m))
    }

    /// This type's own keys of a chat-route answer (`noul`, `choice`, …).
    fn chat_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>);

    /// This type's own keys of a `/v1/systemone` answer (the value and its
    /// `probabilities`).
    fn jev_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>);

    /// Whether a `/v1/systemone` answer of this type keys its
    /// `probabilities` by alternative index (`"0"`, `"1"`, …) rather than
    /// by name ([`Self::jev_keys`]); read back by
    /// [`reply::jev_probabilities_by_name`].
    fn jev_keys_by_index(&self) -> bool {
        false
    }

    /// Whether an answer of this type is one of its alternatives, its
    /// probabilities one distribution summing to 1: `true` for every type but
    /// `multi`, whose options each have their own probability of applying
    /// (rules, the cascade's Stage 2 and benchmark scoring take one pick).
    fn picks_one(&self) -> bool {
        true
    }

    /// The key of a chat-route answer that states the pick by name
    /// (`choice`, `level`), besides `label`; `None` when there is none.
    fn answer_key(&self) -> Option<&'static str> {
        None
    }

    /// The other name a reply may key alternative `index` by (`true` /
    /// `false` for yes/no); `None` when it has none.
    fn reply_alias(&self, _index: usize) -> Option<&'static str> {
        None
    }

    /// The answer of `q` when a reader declines and gives no probabilities:
    /// every alternative at even odds.
    fn even_odds(&self, q: &Question) -> AnswerOut {
        let k = q.alternatives.len().max(1);
        AnswerOut::new(
            q.clone(),
            q.alternatives.iter().map(|alt| alt.name.clone()).collect(),
            crate::readout::aggregate(&[vec![1.0 / k as f64; k]]),
        )
    }

    /// For a type that does not pick one ([`Self::picks_one`] is false):
    /// its answer from a reply `entry` whose probabilities, in alternative
    /// order, are `p`. Never called for a type that picks one (its
    /// probabilities are one distribution, checked and renormalized by
    /// [`reply`]); a type that does not pick one and does not say how its
    /// answer is read gets a fault naming its type, not a wrong answer.
    ///
    /// # Errors
    /// [`reply::ReplyFault`] when the entry does not hold this type's answer.
    fn own_reply_answer(
        &self,
        _q: &Question,
        _entry: &Value,
        _p: &[f64],
    ) -> Result<AnswerOut, reply::ReplyFault> {
        Err(reply::ReplyFault::new(
            "",
            format!(
                "an answer of type `{}` cannot be read from a reply",
                self.names().canonical
            ),
        ))
    }
}

/// The names of a kind, each read from its module (`of`), and everything
/// built on them (the parse of a type name, the accepted names), so that
/// `schema/mod.rs` neither calls nor names the kinds' modules (the schema's
/// parse and wire form, in `schema/validate.rs` and `schema/wire.rs`, do).
impl QuestionKind {
    /// The type name written in answers on the chat route (`noul`, `choice`,
    /// `score`, `multi`).
    pub fn wire_name(self) -> &'static str {
        of(self).names().wire
    }

    /// The canonical name in policies (`boolean`, `choice`, `score`, `multi`).
    pub fn as_str(self) -> &'static str {
        of(self).names().canonical
    }

    /// Every accepted spelling of this kind, canonical name first. The single
    /// source of the type names every surface accepts (`boolean`, `bool` and
    /// `noul` are one type).
    pub fn aliases(self) -> &'static [&'static str] {
        of(self).names().aliases
    }

    /// What an ad-hoc question of this kind answers, in a few words, for
    /// schema and tool descriptions (`yes/no`, `one option of \`criteria\``, …).
    pub fn summary(self) -> &'static str {
        of(self).names().summary
    }

    /// Every kind as `wire name (summary)`, joined: the one description of
    /// the question types the request schemas and tools give.
    pub fn described() -> String {
        let parts: Vec<String> = Self::ALL
            .iter()
            .map(|k| format!("{} ({})", k.wire_name(), k.summary()))
            .collect();
        parts.join(", ")
    }

    /// Whether an answer of this kind is one of its alternatives, its
    /// probabilities one distribution summing to 1 (every kind but `multi`,
    /// whose options each have their own probability of applying).
    pub fn picks_one(self) -> bool {
        of(self).picks_one()
    }

    /// The kind a type name (or alias) names, exactly as spelled; `None` otherwise.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.aliases().contains(&name))
    }

    /// All accepted names, comma-separated, for error messages.
    pub fn accepted_names() -> String {
        Self::ALL
            .iter()
            .flat_map(|k| k.aliases().iter().copied())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::str::FromStr for QuestionKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| {
            format!(
                "question type must be one of {}. Given: `{s}`",
                Self::accepted_names()
            )
        })
    }
}

/// The module of `kind`.
pub(crate) fn of(kind: QuestionKind) -> &'static dyn Kind {
    match kind {
        QuestionKind::Boolean => &boolean::Boolean,
        QuestionKind::Choice => &choice::Choice,
        QuestionKind::Score => &score::Score,
        QuestionKind::Multi => &multi::Multi,
    }
}

/// The answer's shapes on the wire, written by its type's module (`of`),
/// so that `crate::envelope` does not depend on the kinds' modules.
impl AnswerOut {
    /// The chat-route answer object: its type's shape
    /// ([`crate::kinds`]).
    ///
    /// For a score question, `score` is the wire's **1-based expected position**
    /// `Σ (i+1)·p_i` (level `i` counted from 0), `level` the most probable level's
    /// name, and — only when every level name parses as a number — `value`, the
    /// expected level **value** `Σ v_i·p_i` (levels `"20".."24"` read near 22, not
    /// near 3). A `multi` answer's shape is written by its type (`kinds/multi.rs`).
    pub fn to_chat_json(&self) -> Value {
        of(self.question.kind).chat_json(self)
    }
}

/// One answer in the `/v1/systemone` shape: `type`, the type's own keys (a
/// 0-based score with its `legend`, yes/no probabilities keyed `true` /
/// `false`, …), then `confidence`, `entropy` (nats) and `normalized_entropy`,
/// and `constrained` / `constraint_mass_removed` when rules changed it.
pub fn jev_answer(a: &AnswerOut) -> Value {
    let agg = &a.aggregate;
    let mut m = Map::new();
    m.insert("type".into(), json!(a.question.kind.wire_name()));
    of(a.question.kind).jev_keys(a, &mut m);
    m.insert("confidence".into(), json!(agg.confidence));
    m.insert("entropy".into(), json!(agg.entropy));
    m.insert("normalized_entropy".into(), json!(agg.normalized_entropy));
    if let Some(removed) = a.constrained {
        m.insert("constrained".into(), json!(true));
        m.insert("constraint_mass_removed".into(), json!(removed));
    }
    Value::Object(m)
}

/// `probabilities` keyed by alternative name, in alternative order.
fn by_name(a: &AnswerOut) -> Value {
    a.question
        .alternatives
        .iter()
        .zip(&a.aggregate.mean)
        .map(|(alt, p)| (alt.name.clone(), json!(p)))
        .collect::<Map<String, Value>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one place the accepted type names are written out: every other
    /// test builds its expected message from [`QuestionKind::accepted_names`],
    /// so a new type changes this list and its own file, not every test.
    #[test]
    fn the_accepted_type_names_are_each_types_aliases_in_order() {
        assert_eq!(
            QuestionKind::accepted_names(),
            "boolean, bool, noul, choice, score, multi"
        );
        assert_eq!(
            QuestionKind::ALL.map(QuestionKind::wire_name),
            ["noul", "choice", "score", "multi"]
        );
        for k in QuestionKind::ALL {
            assert_eq!(QuestionKind::parse(k.as_str()), Some(k));
            assert_eq!(QuestionKind::parse(k.wire_name()), Some(k));
        }
    }
}
