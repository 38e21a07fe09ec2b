//! `multi` questions (multi-select): one yes/no slot per option.
//!
//! A `multi` question asks which of its options apply. Every reader reads
//! it the same way: [`expand`] replaces it with one yes/no sub-question per
//! option ([`option_question`], id `<question>__<option>`), the reader reads
//! those like any other yes/no question (calibration, order debiasing and
//! samples included), and [`collapse`] turns their answers back into one
//! answer: each option's probability of applying is its sub-question's
//! `p(yes)`, and [`select`] picks the options selected.
//!
//! Figures of the set, treating the options as read independently (each has
//! a slot of its own):
//! - `confidence` = `Π_{i∈S} p_i · Π_{i∉S} (1 − p_i)`, the probability of
//!   exactly the selected set `S`;
//! - `entropy` = `Σ_i H(p_i)` in nats, the entropy of the set (a sum of
//!   Bernoulli entropies), and `normalized_entropy` = `entropy / (K·ln 2)` in
//!   [0, 1], the set's hesitation over `K` options;
//! - per option, its own entropy `H(p_i)` and hesitation `H(p_i)/ln 2`.

mod read;

pub use read::MultiRead;

use indexmap::IndexMap;
use serde_json::{json, Map, Value};

use super::choice::{options_adhoc, options_of, options_wire};
use super::reply::ReplyFault;
use super::{AdhocAt, Kind, Names};
use crate::envelope::AnswerOut;
use crate::error::AdhocError;
use crate::error::SchemaError;
use crate::readout::{argmax, entropy, Aggregate};
use crate::schema::{Alternative, Question, QuestionKind, Selection, ValidSchema, MAX_ID_CHARS};

/// Separator between a `multi` question's id and its option in the id of
/// the option's yes/no sub-question.
pub const OPTION_ID_SEPARATOR: &str = "__";

/// The options selected from `p` (each option's probability of applying):
///
/// 1. an exclusive "none" option (`none`) is selected alone when its
///    probability reaches the threshold and no other option's is higher;
/// 2. otherwise the other options at or above the threshold are selected, the
///    most probable `max` of them; when fewer than `min` are, the most
///    probable others are added up to `min`;
/// 3. when that leaves nothing selected and the question has a "none"
///    option, it is the answer: none of the options applies.
///
/// Returns indices in option order.
pub fn select(sel: &Selection, none: Option<usize>, p: &[f64]) -> Vec<usize> {
    let mut others: Vec<usize> = (0..p.len()).filter(|i| Some(*i) != none).collect();
    others.sort_by(|a, b| p[*b].total_cmp(&p[*a]).then(a.cmp(b)));
    if let Some(n) = none.filter(|n| *n < p.len()) {
        let best_other = others.first().map_or(0.0, |i| p[*i]);
        if p[n] >= sel.threshold && p[n] >= best_other {
            return vec![n];
        }
    }
    let above = others
        .iter()
        .take_while(|i| p[**i] >= sel.threshold)
        .count();
    let mut chosen: Vec<usize> = others
        .into_iter()
        .take(above.min(sel.max).max(sel.min))
        .collect();
    if chosen.is_empty() {
        if let Some(n) = none {
            chosen.push(n);
        }
    }
    chosen.sort_unstable();
    chosen
}

/// The id of option `j`'s sub-question of `q`: `<id>__<option>` with the
/// option's name in lower case, runs of other characters than letters and
/// digits as one `_`, cut so the id stays within [`MAX_ID_CHARS`]. When that
/// is taken, the option's index `j` is added (`<id>__<option>_<j>`, or
/// `<id>__<j>` for a name with no letter or digit), then a count until it is
/// free (`taken` holds every id in use).
pub fn option_id(q: &Question, j: usize, taken: &[String]) -> String {
    let mut slug = String::new();
    for c in q.alternatives[j].name.to_lowercase().chars() {
        if c.is_alphanumeric() {
            slug.push(c);
        } else if !slug.ends_with('_') {
            slug.push('_');
        }
    }
    let slug = slug.trim_matches('_');
    let room = MAX_ID_CHARS.saturating_sub(q.id.chars().count() + OPTION_ID_SEPARATOR.len());
    let slug: String = slug.chars().take(room).collect();
    let id = format!("{}{OPTION_ID_SEPARATOR}{slug}", q.id);
    if !slug.is_empty() && !taken.contains(&id) {
        return id;
    }
    // The name with the option's index (`c_2` for the second `c`), or the
    // index alone for a name with no letter or digit; then a count, until
    // the id is free.
    let base = if slug.is_empty() {
        format!("{}{OPTION_ID_SEPARATOR}{j}", q.id)
    } else {
        let room = room.saturating_sub(j.to_string().len() + 1);
        let cut: String = slug.chars().take(room).collect();
        format!("{}{OPTION_ID_SEPARATOR}{cut}_{j}", q.id)
    };
    let mut id = base.clone();
    let mut n = 1;
    while taken.contains(&id) {
        id = format!("{base}_{n}");
        n += 1;
    }
    id
}

/// The yes/no sub-question that reads whether option `j` of `q` applies,
/// under id `id`. It keeps `q`'s dependencies and `alone`; its text asks
/// about the option by name, with the option's description as what "yes"
/// means.
pub fn option_question(q: &Question, j: usize, id: String) -> Question {
    let option = &q.alternatives[j];
    let ask = if q.none_option == Some(j) {
        let others: Vec<&str> = q
            .alternatives
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != j)
            .map(|(_, a)| a.name.as_str())
            .collect();
        format!("Does none of these apply: {}?", others.join(", "))
    } else {
        format!("Does \"{}\" apply?", option.name)
    };
    let instructions = if q.instructions.trim().is_empty() {
        ask
    } else {
        format!("{} {ask}", q.instructions.trim_end())
    };
    Question {
        id,
        kind: QuestionKind::Boolean,
        instructions,
        alternatives: vec![
            Alternative {
                name: "yes".into(),
                description: option.description.clone(),
            },
            Alternative {
                name: "no".into(),
                description: None,
            },
        ],
        depends_on: q.depends_on.clone(),
        ask_if: q.ask_if.clone(),
        alone: q.alone,
        alone_auto: q.alone_auto,
        none_option: None,
        select: None,
    }
}

/// A schema with its `multi` questions read as yes/no sub-questions.
#[derive(Debug, Clone)]
pub struct Expansion {
    /// The schema to read: the asked questions, each `multi` one replaced by
    /// its sub-questions in place; no rules (they apply to the answers).
    pub schema: ValidSchema,
    /// Per asked `multi` question (by id): its sub-question ids, in option order.
    pub slots: IndexMap<String, Vec<String>>,
}

/// Whether `schema` asks a `multi` question.
pub fn expands(schema: &ValidSchema) -> bool {
    schema.asked().iter().any(|q| q.kind == QuestionKind::Multi)
}

/// Replace the asked `multi` questions of `schema` with their yes/no
/// sub-questions ([`option_question`]).
///
/// # Errors
/// [`SchemaError`] when the expanded schema breaks a schema rule
/// ([`ValidSchema::with_questions`]); validation keeps the slot count
/// within bounds, so this is not expected.
pub fn expand(schema: &ValidSchema) -> Result<Expansion, SchemaError> {
    let asked = schema.asked();
    let mut taken: Vec<String> = asked.iter().map(|q| q.id.clone()).collect();
    let mut questions = Vec::new();
    let mut slots = IndexMap::new();
    for q in asked {
        if q.kind != QuestionKind::Multi {
            questions.push(q.clone());
            continue;
        }
        let mut ids = Vec::with_capacity(q.alternatives.len());
        for j in 0..q.alternatives.len() {
            let id = option_id(q, j, &taken);
            taken.push(id.clone());
            questions.push(option_question(q, j, id.clone()));
            ids.push(id);
        }
        slots.insert(q.id.clone(), ids);
    }
    Ok(Expansion {
        schema: schema.with_questions(questions)?,
        slots,
    })
}

/// The answer of `multi` question `q` from its options' yes/no answers
/// (`options`, in option order). See the module docs for the figures.
pub fn collapse(q: &Question, options: Vec<Aggregate>) -> AnswerOut {
    let p: Vec<f64> = options
        .iter()
        .map(|a| a.mean.first().copied().unwrap_or(0.0))
        .collect();
    let sel = q.select.unwrap_or(Selection {
        min: 0,
        max: p.len(),
        threshold: crate::schema::DEFAULT_SELECT_THRESHOLD,
    });
    let selected = select(&sel, q.none_option, &p);
    let confidence: f64 = p
        .iter()
        .enumerate()
        .map(|(i, pi)| if selected.contains(&i) { *pi } else { 1.0 - pi })
        .product();
    let h: f64 = p.iter().map(|pi| bernoulli_entropy(*pi)).sum();
    let k = p.len().max(1) as f64;
    let aggregate = Aggregate {
        top: argmax(&p),
        confidence,
        entropy: h,
        normalized_entropy: (h / (k * std::f64::consts::LN_2)).clamp(0.0, 1.0),
        mean: p,
        stderr: None,
        agreement: None,
    };
    let labels = q.alternatives.iter().map(|a| a.name.clone()).collect();
    let mut out = AnswerOut::new(q.clone(), labels, aggregate);
    out.multi = Some(MultiRead { options, selected });
    out
}

/// The answer of `multi` question `q` from each option's probability of
/// applying (`p`, in option order), each taken as one yes/no read: what an
/// upstream reply or a test states without the reads themselves.
pub fn collapse_probabilities(q: &Question, p: &[f64]) -> AnswerOut {
    let options = p
        .iter()
        .map(|x| crate::readout::aggregate(&[vec![*x, 1.0 - x]]))
        .collect();
    collapse(q, options)
}

/// Entropy of a yes/no read with `p(yes) = p`, in nats.
pub fn bernoulli_entropy(p: f64) -> f64 {
    entropy(&[p, 1.0 - p])
}

/// Hesitation of a yes/no read with `p(yes) = p`: its entropy over ln 2,
/// in [0, 1].
pub fn bernoulli_hesitation(p: f64) -> f64 {
    bernoulli_entropy(p) / std::f64::consts::LN_2
}

/// The multi-select type.
pub(crate) struct Multi;

impl Kind for Multi {
    fn names(&self) -> Names {
        Names {
            canonical: "multi",
            wire: "multi",
            aliases: &["multi"],
            summary: "any of `options`, each with its own probability",
        }
    }

    fn alternatives(
        &self,
        q: &Map<String, Value>,
        name: &str,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(Vec<Alternative>, &'static str), SchemaError> {
        Ok((options_of(q, name, at)?, ".options"))
    }

    fn wire(&self, q: &Question, m: &mut Map<String, Value>) {
        options_wire(q, m);
    }

    fn adhoc_alternative_keys(&self) -> &'static [&'static str] {
        &["options", "criteria", "choices"]
    }

    fn adhoc(
        &self,
        at: &AdhocAt<'_>,
        q: &Map<String, Value>,
        criteria: Option<&Value>,
        out: &mut Map<String, Value>,
    ) -> Result<(), AdhocError> {
        options_adhoc(QuestionKind::Multi, at, q, criteria, out)
    }

    /// `type`, then `label` and `multi` (the selected option names),
    /// `confidence` (probability of that set), `probabilities` (each
    /// option's probability of applying), `none_of_these` when it won, the
    /// set's `entropy` (nats) and `normalized_entropy`, then per option
    /// `option_entropy` (nats) and `option_hesitation`; after the read,
    /// `temperature`, `abstained` and `constrained` where they apply.
    fn chat_json(&self, a: &AnswerOut) -> Value {
        let Some(multi) = &a.multi else {
            // A multi answer without its per-option reads has only its
            // distribution to show.
            return a.chat_shape(&|_| {});
        };
        let agg = &a.aggregate;
        let names: Vec<&str> = a.selected_names();
        let by_option = |f: &dyn Fn(f64) -> f64| -> Value {
            a.question
                .alternatives
                .iter()
                .zip(multi.applies())
                .map(|(alt, p)| (alt.name.clone(), json!(f(p))))
                .collect::<Map<String, Value>>()
                .into()
        };
        let mut m = Map::new();
        m.insert("type".into(), json!(a.question.kind.wire_name()));
        m.insert("label".into(), json!(names));
        m.insert("confidence".into(), json!(agg.confidence));
        m.insert("probabilities".into(), by_option(&|p| p));
        m.insert("multi".into(), json!(names));
        if a.is_none_of_these() {
            m.insert("none_of_these".into(), json!(true));
        }
        m.insert("entropy".into(), json!(agg.entropy));
        m.insert("normalized_entropy".into(), json!(agg.normalized_entropy));
        m.insert("option_entropy".into(), by_option(&bernoulli_entropy));
        m.insert("option_hesitation".into(), by_option(&bernoulli_hesitation));
        if let Some(t) = a.temperature {
            m.insert("temperature".into(), json!(t));
        }
        if let Some(reason) = &a.abstained {
            m.insert("abstained".into(), json!(true));
            m.insert("abstain_reason".into(), json!(reason));
        }
        a.constrained_json(&mut m);
        Value::Object(m)
    }

    fn chat_keys(&self, _a: &AnswerOut, _m: &mut Map<String, Value>) {}

    fn picks_one(&self) -> bool {
        false
    }

    /// Every option at even odds, and nothing selected.
    fn even_odds(&self, q: &Question) -> AnswerOut {
        let mut out = collapse_probabilities(q, &vec![0.5; q.alternatives.len().max(1)]);
        if let Some(m) = out.multi.as_mut() {
            m.selected.clear();
        }
        out
    }

    /// `p` holds each option's probability of applying, in option order.
    /// The entry's `multi` list must be the selection those probabilities
    /// give ([`select`]); a fault at `.multi` when it is missing or names
    /// another set.
    fn own_reply_answer(
        &self,
        q: &Question,
        entry: &Value,
        p: &[f64],
    ) -> Result<AnswerOut, ReplyFault> {
        let out = collapse_probabilities(q, p);
        let stated: Option<Vec<&str>> = entry
            .get("multi")
            .and_then(Value::as_array)
            .map(|l| l.iter().filter_map(Value::as_str).collect());
        let want = out.selected_names();
        if stated.as_ref() != Some(&want) {
            return Err(ReplyFault::new(
                ".multi",
                format!(
                    "must list the options its probabilities select ({want:?}). Given: {}",
                    entry
                        .get("multi")
                        .map_or_else(|| "nothing".into(), Value::to_string)
                ),
            ));
        }
        Ok(out)
    }

    fn jev_keys(&self, a: &AnswerOut, m: &mut Map<String, Value>) {
        // The selected options; each probability is that option's own.
        m.insert("multi".into(), json!(a.selected_names()));
        if a.is_none_of_these() {
            m.insert("none_of_these".into(), json!(true));
        }
        m.insert("probabilities".into(), super::by_name(a));
    }
}

#[cfg(test)]
mod tests;
