//! Post-hoc temperature scaling of an answer's distribution.
//!
//! Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural
//! Networks") divides the logits by one scalar `T` fitted on held-out data; here
//! the logits are the log-probabilities of the restricted softmax, so
//! `p_k ← exp(ln max(p_k, 1e-12) / T)`, renormalized. `T > 1` flattens a
//! distribution (an over-confident model), `T < 1` sharpens it, `T = 1` is a
//! no-op. The argmax never changes. The value is a number for every question or
//! an object by question type, as the original client's `temperature` reads it:
//! keys `noul|bool|boolean|yes_no|yesno`, `choice`, `score|scale|rating`
//! (case-insensitive), each in [0, 20], where 0 means "not set".

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::by_key::{self, Checks, OneOrByKey};

use crate::envelope::AnswerOut;
use crate::error::SchemaError;
use crate::readout::{entropy, normalized_entropy, Aggregate, PROB_FLOOR};
use crate::schema::{ByKind, QuestionKind};

/// Largest accepted temperature (the original client's bound).
pub const MAX_TEMPERATURE: f64 = 20.0;

/// A temperature per question type; `None` = not set. Its JSON form is an
/// object keyed by canonical type name (`{"boolean": 1.5, "choice": null,
/// "score": null}`), the form calibration files and envelopes carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Temperature(pub ByKind<Option<f64>>);

/// Spellings a temperature object takes besides each type's own aliases
/// ([`QuestionKind::aliases`]): the original client's `yes_no`, `yesno`,
/// `scale` and `rating`.
const EXTRA_KEYS: [(&str, QuestionKind); 4] = [
    ("yes_no", QuestionKind::Boolean),
    ("yesno", QuestionKind::Boolean),
    ("scale", QuestionKind::Score),
    ("rating", QuestionKind::Score),
];

/// The question type a temperature key names (any case), or `None`.
/// `multi` names no temperature of its own (its options are yes/no reads,
/// scaled by the `boolean` one), so it is not a key.
fn kind_of_key(key: &str) -> Option<QuestionKind> {
    let key = key.to_ascii_lowercase();
    let own = QuestionKind::parse(&key).filter(|k| k.slot_kind() == *k);
    own.or_else(|| {
        EXTRA_KEYS
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, kind)| *kind)
    })
}

/// The keys a temperature object accepts, by type, for error messages:
/// each type's aliases then its extra spellings
/// (`boolean|bool|noul|yes_no|yesno, choice, score|scale|rating`).
pub fn temperature_keys() -> String {
    QuestionKind::SLOT_KINDS
        .iter()
        .map(|kind| {
            let mut names: Vec<&str> = kind.aliases().to_vec();
            names.extend(
                EXTRA_KEYS
                    .iter()
                    .filter(|(_, k)| k == kind)
                    .map(|(n, _)| *n),
            );
            names.join("|")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One temperature value: a number in [0, 20]; 0 is "not set" (`None`).
fn one(v: &Value) -> Result<Option<f64>, String> {
    match v.as_f64().filter(|t| (0.0..=MAX_TEMPERATURE).contains(t)) {
        Some(0.0) => Ok(None),
        Some(t) => Ok(Some(t)),
        None => Err(format!(
            "must be a number from 0 to {MAX_TEMPERATURE} (0 = not set, 1 = no change). Given: {v}"
        )),
    }
}

/// A temperature object's key: a question type with a temperature of its own.
fn type_key(key: &str) -> Result<(), String> {
    if kind_of_key(key).is_some() {
        return Ok(());
    }
    let multi = if key.eq_ignore_ascii_case("multi") {
        " (a multi question's options are yes/no reads: set `boolean`)"
    } else {
        ""
    };
    Err(format!(
        "keys are question types ({}){multi}. Given: `{key}`",
        temperature_keys()
    ))
}

/// `temperature` as a request or a policy writes it: a number for every
/// question type, an object by type (`{"choice": 1.4}`, keys in any case and
/// the spellings of [`temperature_keys`]) or `null`, each value in [0, 20]
/// with 0 meaning "not set". Its serde read is the one parse of that key
/// ([`Temperature::parse`] and the request keys use it); it is not the
/// canonical object form [`Temperature`] itself (de)serializes as.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TemperatureValue(pub Temperature);

/// The request form back: one number when every question type has the same
/// temperature, else an object of the types set (by wire name), so that it
/// reads back as the same value (the form a warm host receives and a batch
/// run's fingerprint records).
impl Serialize for TemperatureValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let set: Vec<(QuestionKind, Option<f64>)> = QuestionKind::SLOT_KINDS
            .iter()
            .map(|k| (*k, self.0.of(*k)))
            .collect();
        if let Some((_, Some(first))) = set.first() {
            if set.iter().all(|(_, t)| *t == Some(*first)) {
                return s.serialize_f64(*first);
            }
        }
        let mut m = s.serialize_map(None)?;
        for (kind, t) in set {
            if let Some(t) = t {
                m.serialize_entry(kind.wire_name(), &t)?;
            }
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for TemperatureValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let read = by_key::read(
            d,
            &Checks {
                one: &one,
                key: &type_key,
                each: &one,
            },
        )?;
        Ok(Self(match read {
            OneOrByKey::Null => Temperature::default(),
            OneOrByKey::One(t) => t.map(Temperature::uniform).unwrap_or_default(),
            OneOrByKey::ByKey(list) => {
                let mut t = Temperature::default();
                let mut seen: Vec<(QuestionKind, String)> = Vec::new();
                for (key, x) in list {
                    let Some(kind) = kind_of_key(&key) else {
                        continue;
                    };
                    // Two spellings of one type (`choice`, `Choice`; `bool`,
                    // `boolean`): the last would win in silence.
                    if let Some((_, first)) = seen.iter().find(|(k, _)| *k == kind) {
                        return Err(serde::de::Error::custom(format!(
                            "keys are question types, each given once ({}). Given: `{first}` and `{key}`",
                            temperature_keys()
                        )));
                    }
                    seen.push((kind, key));
                    *t.0.get_mut(kind) = x;
                }
                t
            }
        }))
    }
}

impl Temperature {
    /// The same temperature for every question type.
    pub fn uniform(t: f64) -> Self {
        Self(ByKind::from_fn(|_| Some(t)))
    }

    /// This temperature with `kind`'s set to `t`.
    #[must_use]
    pub fn with(mut self, kind: QuestionKind, t: Option<f64>) -> Self {
        *self.0.get_mut(kind) = t;
        self
    }

    /// The temperature set for `kind` (1 included), `None` when not set.
    pub fn of(&self, kind: QuestionKind) -> Option<f64> {
        *self.0.get(kind)
    }

    /// Read `v` (a number, an object by type, or null) given as `field`.
    ///
    /// # Errors
    /// [`SchemaError`] naming `field` (or `field.key`) when a value is not a
    /// number in [0, 20], or a key names no question type.
    pub fn parse(field: &str, v: &Value) -> Result<Self, SchemaError> {
        crate::json::from_value_at::<TemperatureValue>(field, v).map(|t| t.0)
    }

    /// The temperature for `kind`, or `None` when it is not set or is 1.
    pub fn for_kind(&self, kind: QuestionKind) -> Option<f64> {
        self.of(kind).filter(|t| *t != 1.0)
    }

    /// These values where set, else `base`'s (a request over its policy).
    pub fn over(self, base: Temperature) -> Temperature {
        Self(ByKind::from_fn(|k| self.of(k).or(base.of(k))))
    }

    /// Whether no type has a temperature other than 1.
    pub fn is_identity(&self) -> bool {
        QuestionKind::SLOT_KINDS
            .iter()
            .all(|k| self.for_kind(*k).is_none())
    }
}

/// `p` scaled by temperature `t` > 0: `exp(ln max(p_k, 1e-12) / t)`, renormalized.
///
/// An empty `p` gives an empty result; the result sums to 1.
pub fn scale(p: &[f64], t: f64) -> Vec<f64> {
    if p.is_empty() || t.is_nan() || t <= 0.0 {
        return p.to_vec();
    }
    // Relative to the largest log-probability, so a tiny T sends the others
    // to −∞ (one-hot on the argmax) instead of every logit to −∞ (uniform).
    let top = p.iter().fold(PROB_FLOOR, |m, &x| m.max(x)).ln();
    let logits: Vec<f64> = p
        .iter()
        .map(|&x| (x.max(PROB_FLOOR).ln() - top) / t)
        .collect();
    crate::readout::restricted_softmax(&logits)
}

/// Scale an aggregate's distribution by `t` and recompute its confidence,
/// entropy (nats) and hesitation; its answer (`top`), standard error and
/// agreement are kept.
pub fn rescale(a: &mut Aggregate, t: f64) {
    a.mean = scale(&a.mean, t);
    a.confidence = a.mean.get(a.top).copied().unwrap_or(0.0);
    a.entropy = entropy(&a.mean);
    a.normalized_entropy = normalized_entropy(&a.mean);
}

/// [`rescale`] `answer`'s distribution by `t` and record `t` as its
/// post-hoc temperature. A `multi` answer rescales each option's yes/no read
/// and selects again ([`crate::multi::collapse`]): its options' probabilities
/// are not one distribution.
pub fn apply(answer: &mut AnswerOut, t: f64) {
    match answer.multi.take() {
        Some(m) => {
            let options = m
                .options
                .into_iter()
                .map(|mut a| {
                    rescale(&mut a, t);
                    a
                })
                .collect();
            let mut again = crate::multi::collapse(&answer.question, options);
            again.abstained = answer.abstained.take();
            again.constrained = answer.constrained;
            again.resolved = answer.resolved.take();
            *answer = again;
        }
        None => rescale(&mut answer.aggregate, t),
    }
    answer.temperature = Some(t);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Regression: two spellings of one type (`choice` and `Choice`,
    /// `bool` and `boolean`) were both taken, and the last won in silence.
    #[test]
    fn two_keys_naming_one_question_type_are_refused() {
        for (v, first, second) in [
            (json!({"choice": 2, "Choice": 1.5}), "choice", "Choice"),
            (json!({"bool": 1.5, "boolean": 3}), "bool", "boolean"),
        ] {
            let e = Temperature::parse("temperature", &v).expect_err("refused");
            assert_eq!(e.field, "temperature");
            assert!(
                e.message
                    .starts_with("`temperature` keys are question types, each given once (")
                    && e.message
                        .ends_with(&format!("Given: `{first}` and `{second}`")),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn parses_numbers_objects_and_aliases() {
        let t = Temperature::parse("temperature", &json!(1.4)).expect("number");
        assert_eq!(t, Temperature::uniform(1.4));
        let t =
            Temperature::parse("temperature", &json!({"YesNo": 2, "rating": 0.5})).expect("object");
        assert_eq!(t.of(QuestionKind::Boolean), Some(2.0));
        assert_eq!(t.of(QuestionKind::Score), Some(0.5));
        assert_eq!(t.of(QuestionKind::Choice), None);
        assert_eq!(
            Temperature::parse("temperature", &json!(0)).expect("0"),
            Temperature::default()
        );
        assert!(Temperature::parse("temperature", &json!(1))
            .expect("1")
            .is_identity());
    }

    #[test]
    fn bad_values_name_the_field_and_the_range() {
        let e = Temperature::parse("temperature", &json!(21)).expect_err("too hot");
        assert_eq!(e.field, "temperature");
        assert!(
            e.message.contains("0 to 20") && e.message.contains("Given: 21"),
            "{e}"
        );
        let e = Temperature::parse("temperature", &json!({"colour": 2})).expect_err("key");
        assert!(
            e.message.contains("`colour`") && e.message.contains("choice"),
            "{e}"
        );
        let e = Temperature::parse("temperature", &json!({"choice": "hot"})).expect_err("str");
        assert_eq!(e.field, "temperature.choice");
        assert!(Temperature::parse("temperature", &json!(-1)).is_err());
        assert!(Temperature::parse("temperature", &json!("2")).is_err());
    }

    #[test]
    fn scaling_flattens_or_sharpens_and_keeps_the_argmax() {
        let p = [0.8, 0.15, 0.05];
        let hot = scale(&p, 2.0);
        // T = 2 is the square root of each probability, renormalized.
        let z: f64 = p.iter().map(|x: &f64| x.sqrt()).sum();
        for (h, x) in hot.iter().zip(p) {
            assert!((h - x.sqrt() / z).abs() < 1e-12);
        }
        let cold = scale(&p, 0.5);
        assert!(cold[0] > 0.8 && hot[0] < 0.8);
        assert!((cold.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let same = scale(&p, 1.0);
        assert!(same.iter().zip(p).all(|(a, b)| (a - b).abs() < 1e-12));
        // Regression: T = 5e-324 sent every logit to −∞ and gave a uniform
        // distribution; T → 0 sharpens to the argmax.
        assert_eq!(scale(&p, 5e-324), vec![1.0, 0.0, 0.0]);
        assert!(scale(&[], 2.0).is_empty());
    }

    #[test]
    fn request_values_win_per_type() {
        let policy = Temperature::uniform(2.0);
        let request = Temperature::default().with(QuestionKind::Choice, Some(0.5));
        let t = request.over(policy);
        assert_eq!(
            QuestionKind::SLOT_KINDS.map(|k| t.of(k)),
            [Some(2.0), Some(0.5), Some(2.0)]
        );
    }
}
