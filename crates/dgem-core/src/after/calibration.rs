//! Calibration files: post-hoc temperatures fitted by `dgem calibrate`, bound to
//! the model and the policies they were fitted on.
//!
//! A temperature (see [`super::temperature`]) is only right for the model that
//! produced the probabilities and the questions that were asked: another model,
//! or a policy whose questions, options or instructions changed, reads
//! differently. So a file names the model's sha256 and the [`policy_hash`] of
//! every policy it was fitted on, and [`CalibrationFile::temperature_for`]
//! refuses to hand a temperature to anything else.
//!
//! The file is JSON, format tag [`CALIBRATION_FORMAT`]:
//!
//! ```json
//! {"format": "dgem-calibration/1", "model_id": "…", "model_sha256": "…",
//!  "policies": [{"template": "templates/support_triage.json.tmpl", "policy_hash": "…"}],
//!  "temperature": {"boolean": 1.7, "choice": 2.3, "score": null},
//!  "k": 5, "rows": 30, "fitted_at_unix": 1700000000,
//!  "held_out": {"method": "cross_validated", …, "boolean": {…}, "choice": {…}, "score": {…}}}
//! ```
//!
//! `null` temperature = not fitted for that type (too few labelled slots; the
//! reason is in `held_out.<type>.unset_reason`), which leaves that type unscaled.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::temperature::{Temperature, MAX_TEMPERATURE};
use crate::schema::{ByKind, ValidSchema};

/// Format tag of a calibration file.
pub const CALIBRATION_FORMAT: &str = "dgem-calibration/1";

/// Smallest temperature a fit may return (and a file may hold): below it the
/// answers are sharpened so far that any probability is 0 or 1.
pub const MIN_FITTED_TEMPERATURE: f64 = 0.05;

/// Hex sha256 (64 lowercase digits) of the compact JSON of `schema.to_wire()`.
///
/// The wire form holds the schema-level instructions, every question (id, type,
/// instructions, criteria, options with descriptions, levels, ask rules) and the
/// read settings (samples, steps, layout, isolation, chunking), so the hash
/// changes whenever questions, options or instructions change (or the read
/// settings do); the state (the document decided on) is not part of it.
/// Key order is the fixed order `to_wire` writes, so the hash is stable across
/// runs and machines.
pub fn policy_hash(schema: &ValidSchema) -> String {
    hex::encode(Sha256::digest(schema.to_wire().to_string().as_bytes()))
}

/// Everything that can go wrong reading or using a calibration file.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// The file cannot be read.
    #[error("cannot read calibration file `{path}`: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file cannot be written.
    #[error("cannot write calibration file `{path}`: {source}")]
    Unwritable {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON, or not the shape of a calibration file.
    #[error("calibration file `{path}` is not valid: {detail}")]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the line and column or the field).
        detail: String,
    },
    /// The file's `format` is not [`CALIBRATION_FORMAT`].
    #[error("calibration file `{path}`: `format` must be `{CALIBRATION_FORMAT}`. Given: {found}")]
    WrongFormat {
        /// The file.
        path: PathBuf,
        /// The `format` value found (JSON), `missing` when absent.
        found: String,
    },
    /// A field holds a value outside its range.
    #[error("calibration file `{path}`: `{field}` {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field, e.g. `temperature.choice`.
        field: String,
        /// Allowed values and the value given.
        message: String,
    },
    /// The file was fitted on another model.
    #[error("the calibration file was fitted on model sha256 {fitted}, but this model's sha256 is {given}; its temperatures do not apply to another model: refit with `dgem calibrate` on this model")]
    ModelMismatch {
        /// The file's model sha256 (`unknown` when the file has none).
        fitted: String,
        /// The running model's sha256 (`unknown` when the backend reports none).
        given: String,
    },
    /// The policy was not among those the file was fitted on.
    #[error("the calibration file has no temperature for this policy: its policy hash `{given}` is not one of the fitted policies [{known}] (the questions, options, instructions or read settings changed since fitting); refit with `dgem calibrate`")]
    PolicyMismatch {
        /// The policy hash asked for.
        given: String,
        /// The fitted policies, as `template (hash)`, comma-separated.
        known: String,
    },
}

/// One policy a calibration was fitted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRef {
    /// The template as the labelled rows named it (path or name).
    pub template: String,
    /// [`policy_hash`] of the rendered, validated schema.
    pub policy_hash: String,
}

/// Fitted temperature per question type; `None` (JSON `null`) = not fitted.
/// The file's `temperature` object is a [`Temperature`] (keyed by type name).
pub type FittedTemperature = Temperature;

/// How the held-out figures were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Evaluation {
    /// k-fold cross-validation: each slot is scored with the temperature fitted
    /// on the other k − 1 folds (out-of-fold predictions).
    CrossValidated,
    /// Fitted and scored on the same rows (`--in-sample`): optimistic.
    InSample,
}

/// A figure with its 95% bootstrap percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The figure on all slots.
    pub value: f64,
    /// 2.5th percentile over the bootstrap resamples.
    pub low: f64,
    /// 97.5th percentile over the bootstrap resamples.
    pub high: f64,
}

/// One metric before and after the temperature, and the paired change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// On the probabilities as read (T = 1).
    pub before: Estimate,
    /// On the scaled probabilities.
    pub after: Estimate,
    /// `after − before`, its interval from the same (paired) resamples: an
    /// interval wholly below 0 is a reliable improvement for these
    /// lower-is-better metrics.
    pub change: Estimate,
}

/// Held-out scores of one question type.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// Share of slots whose top answer is the gold one (T does not change it).
    pub accuracy: f64,
    /// 10-bin ECE of the top answer's confidence against its correctness
    /// (Guo et al. 2017).
    pub ece_10bin: Compared,
    /// Multi-class Brier score Σ_k (p_k − y_k)², in [0, 2] (Brier 1950).
    pub brier: Compared,
    /// Mean negative log-likelihood −ln max(p_gold, 1e-12), nats.
    pub nll: Compared,
}

/// The fit and held-out figures of one question type (the default: no
/// slots, nothing fitted, what a file written before a type existed holds
/// for it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TypeCalibration {
    /// Labelled slots of this type.
    pub slots: usize,
    /// Rows those slots came from.
    pub rows: usize,
    /// Temperature fitted on all slots; `None` when not fitted.
    pub temperature: Option<f64>,
    /// Why no temperature was fitted (`None` when one was).
    pub unset_reason: Option<String>,
    /// Temperature fitted without each fold, in fold order (empty in-sample or unset).
    pub fold_temperatures: Vec<f64>,
    /// A remark on the fit, e.g. that it reached a bound of the search.
    pub note: Option<String>,
    /// Held-out scores (`None` when not fitted).
    pub scores: Option<Scores>,
}

/// How the figures were computed and the figures per type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOut {
    /// Cross-validated or in-sample.
    pub method: Evaluation,
    /// Bootstrap resamples behind every interval.
    pub bootstrap_resamples: usize,
    /// Seed of the bootstrap (fixed, so reruns give the same intervals).
    pub bootstrap_seed: i64,
    /// Coverage of the intervals (0.95).
    pub confidence_level: f64,
    /// The figures of each question type, keyed by its name (`boolean`,
    /// `choice`, `score`) beside the fields above.
    #[serde(flatten)]
    pub types: ByKind<TypeCalibration>,
}

/// A calibration file (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationFile {
    /// [`CALIBRATION_FORMAT`].
    pub format: String,
    /// The model's id as its backend reports it.
    pub model_id: String,
    /// sha256 of the model file, `None` when the backend reports none.
    pub model_sha256: Option<String>,
    /// The policies fitted on.
    pub policies: Vec<PolicyRef>,
    /// Fitted temperature per type (each in [0.05, 20] or `null`).
    pub temperature: FittedTemperature,
    /// Folds of the cross-validation (1 for an in-sample fit).
    pub k: usize,
    /// Labelled rows used.
    pub rows: usize,
    /// When the fit was made, Unix seconds.
    pub fitted_at_unix: u64,
    /// Held-out (or in-sample) figures.
    pub held_out: HeldOut,
}

impl CalibrationFile {
    /// Read and check a calibration file.
    ///
    /// # Errors
    /// [`CalibrationError::Unreadable`], [`CalibrationError::NotJson`] (also for
    /// a missing or mistyped field), [`CalibrationError::WrongFormat`], or
    /// [`CalibrationError::Invalid`] for a temperature outside [0.05, 20].
    pub fn load(path: &Path) -> Result<Self, CalibrationError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| CalibrationError::Unreadable {
                path: path.to_path_buf(),
                source,
            })?;
        Self::parse(&text, path)
    }

    /// Parse and check the text of a calibration file; `path` names it in
    /// errors (a file built into the binary names where it came from).
    ///
    /// # Errors
    /// As [`Self::load`], less [`CalibrationError::Unreadable`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, CalibrationError> {
        let not_json = |e: serde_json::Error| CalibrationError::NotJson {
            path: path.to_path_buf(),
            detail: e.to_string(),
        };
        let value: Value = serde_json::from_str(text).map_err(not_json)?;
        match value.get("format") {
            Some(Value::String(f)) if f == CALIBRATION_FORMAT => {}
            other => {
                return Err(CalibrationError::WrongFormat {
                    path: path.to_path_buf(),
                    found: other.map_or_else(|| "missing".to_owned(), Value::to_string),
                })
            }
        }
        let file: Self = serde_json::from_value(value).map_err(not_json)?;
        file.check(path)?;
        Ok(file)
    }

    fn check(&self, path: &Path) -> Result<(), CalibrationError> {
        for (kind, v) in self.temperature.0.iter() {
            let name = kind.as_str();
            if let Some(v) = *v {
                if !(MIN_FITTED_TEMPERATURE..=MAX_TEMPERATURE).contains(&v) {
                    return Err(CalibrationError::Invalid {
                        path: path.to_path_buf(),
                        field: format!("temperature.{name}"),
                        message: format!(
                            "must be null or a number from {MIN_FITTED_TEMPERATURE} to {MAX_TEMPERATURE}. Given: {v}"
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Write the file as pretty JSON (via a temporary file, then rename).
    ///
    /// # Errors
    /// [`CalibrationError::Unwritable`].
    pub fn save(&self, path: &Path) -> Result<(), CalibrationError> {
        let unwritable = |source| CalibrationError::Unwritable {
            path: path.to_path_buf(),
            source,
        };
        let text =
            serde_json::to_string_pretty(self).map_err(|e| unwritable(std::io::Error::other(e)))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, text + "\n").map_err(unwritable)?;
        std::fs::rename(&tmp, path).map_err(unwritable)
    }

    /// The temperatures for a decision by the model with `model_sha256` on the
    /// policy with `policy_hash` ([`policy_hash`] of its validated schema).
    ///
    /// The model check compares the two sha256 values (case-insensitive); a
    /// file without one matches only a model that reports none either.
    ///
    /// # Errors
    /// [`CalibrationError::ModelMismatch`] when the sha256 values differ;
    /// [`CalibrationError::PolicyMismatch`] when `policy_hash` is not among
    /// `policies`. Both name the two values.
    pub fn temperature_for(
        &self,
        model_sha256: Option<&str>,
        policy_hash: &str,
    ) -> Result<Temperature, CalibrationError> {
        let same_model = match (self.model_sha256.as_deref(), model_sha256) {
            (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
            (None, None) => true,
            _ => false,
        };
        if !same_model {
            let shown =
                |s: Option<&str>| s.map_or_else(|| "unknown".to_owned(), |s| format!("`{s}`"));
            return Err(CalibrationError::ModelMismatch {
                fitted: shown(self.model_sha256.as_deref()),
                given: shown(model_sha256),
            });
        }
        if !self.policies.iter().any(|p| p.policy_hash == policy_hash) {
            let known = self
                .policies
                .iter()
                .map(|p| format!("{} ({})", p.template, p.policy_hash))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(CalibrationError::PolicyMismatch {
                given: policy_hash.to_owned(),
                known,
            });
        }
        Ok(self.temperature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{QuestionKind, SchemaDefaults};
    use serde_json::json;

    fn schema(v: Value) -> ValidSchema {
        ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid")
    }

    fn base() -> Value {
        json!({"instructions": "Sort tickets.", "questions": [
            {"id": "urgent", "type": "boolean", "instructions": "Urgent?"},
            {"id": "team", "type": "choice", "options": ["billing", "support"]}
        ]})
    }

    fn held(reason: &str) -> TypeCalibration {
        TypeCalibration {
            slots: 0,
            rows: 0,
            temperature: None,
            unset_reason: Some(reason.to_owned()),
            fold_temperatures: Vec::new(),
            note: None,
            scores: None,
        }
    }

    fn file(hash: &str) -> CalibrationFile {
        CalibrationFile {
            format: CALIBRATION_FORMAT.to_owned(),
            model_id: "toy".to_owned(),
            model_sha256: Some("ab".repeat(32)),
            policies: vec![PolicyRef {
                template: "t.json.tmpl".to_owned(),
                policy_hash: hash.to_owned(),
            }],
            temperature: FittedTemperature::default()
                .with(QuestionKind::Boolean, Some(1.5))
                .with(QuestionKind::Choice, Some(2.5)),
            k: 5,
            rows: 10,
            fitted_at_unix: 1,
            held_out: HeldOut {
                method: Evaluation::CrossValidated,
                bootstrap_resamples: 1000,
                bootstrap_seed: 42,
                confidence_level: 0.95,
                types: ByKind::from_fn(|_| held("none")),
            },
        }
    }

    #[test]
    fn policy_hash_is_stable_and_follows_questions_options_and_instructions() {
        let h = policy_hash(&schema(base()));
        assert_eq!(h.len(), 64);
        assert!(h
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(h, policy_hash(&schema(base())), "same schema, same hash");
        let mut v = base();
        v["questions"][1]["options"] = json!(["billing", "support", "sales"]);
        assert_ne!(h, policy_hash(&schema(v)), "an option changed");
        let mut v = base();
        v["instructions"] = json!("Sort tickets carefully.");
        assert_ne!(h, policy_hash(&schema(v)), "instructions changed");
        let mut v = base();
        v["questions"][0]["instructions"] = json!("Needs someone today?");
        assert_ne!(h, policy_hash(&schema(v)), "a question changed");
    }

    #[test]
    fn temperature_for_refuses_another_model_or_policy() {
        let f = file("feed");
        let sha = "ab".repeat(32);
        let t = f
            .temperature_for(Some(&sha.to_uppercase()), "feed")
            .expect("match");
        assert_eq!(
            QuestionKind::SLOT_KINDS.map(|k| t.of(k)),
            [Some(1.5), Some(2.5), None]
        );
        let e = f
            .temperature_for(Some("cd"), "feed")
            .expect_err("other model");
        let m = e.to_string();
        assert!(m.contains(&format!("`{sha}`")) && m.contains("`cd`"), "{m}");
        let e = f.temperature_for(None, "feed").expect_err("unknown model");
        assert!(e.to_string().contains("is unknown"), "{e}");
        let e = f
            .temperature_for(Some(&sha), "beef")
            .expect_err("other policy");
        let m = e.to_string();
        assert!(
            m.contains("`beef`") && m.contains("t.json.tmpl (feed)"),
            "{m}"
        );
    }

    fn temp(name: &str, text: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("dgem-cal-{}-{name}", std::process::id()));
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn load_round_trips_and_names_what_is_wrong() {
        let p = temp("ok.json", "");
        let f = file("feed");
        f.save(&p).expect("save");
        assert_eq!(CalibrationFile::load(&p).expect("load"), f);

        let missing = std::env::temp_dir().join("dgem-cal-no-such-file.json");
        let e = CalibrationFile::load(&missing).expect_err("missing");
        assert!(matches!(e, CalibrationError::Unreadable { .. }), "{e}");

        let p = temp("bad.json", "{oops");
        let e = CalibrationFile::load(&p).expect_err("not json");
        assert!(matches!(e, CalibrationError::NotJson { .. }), "{e}");

        let p = temp("fmt.json", r#"{"format": "dgem.bench.receipt/v1"}"#);
        let e = CalibrationFile::load(&p).expect_err("format");
        let m = e.to_string();
        assert!(
            m.contains("`dgem-calibration/1`") && m.contains("\"dgem.bench.receipt/v1\""),
            "{m}"
        );

        let mut hot = serde_json::to_value(file("feed")).expect("json");
        hot["temperature"]["choice"] = json!(25.0);
        let p = temp("hot.json", &hot.to_string());
        let e = CalibrationFile::load(&p).expect_err("range");
        let m = e.to_string();
        assert!(
            m.contains("`temperature.choice`") && m.contains("Given: 25"),
            "{m}"
        );

        let mut short = serde_json::to_value(file("feed")).expect("json");
        short.as_object_mut().expect("obj").remove("k");
        let p = temp("short.json", &short.to_string());
        let e = CalibrationFile::load(&p).expect_err("field");
        assert!(e.to_string().contains("missing field `k`"), "{e}");
    }
}
