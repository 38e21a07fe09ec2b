//! Temperatures shipped for one model and applied to every decision it makes.
//!
//! `dgem calibrate` fits a post-hoc temperature per question type
//! (temperature scaling, Guo et al. 2017: `p_k ← exp(ln p_k / T)`,
//! renormalised; the answer never changes, only how sure it is). A file fitted
//! for the small embedded model (Gemma 3 270M) ships with dgem; [`ModelTemperature`] holds
//! it, bound to that model's sha256, and the engine applies it after every
//! read (and says so in `diagnostics.calibration`). A model with another
//! sha256 is refused: [`ModelTemperature::for_model`] says why, and nothing is
//! applied. Bracket-routed questions are scaled in their brackets' reads.

use dgem_core::after::calibration::CalibrationFile;
use dgem_core::after::temperature::{rescale, Temperature};
use dgem_core::envelope::CalibrationDiagnostics;

use crate::Decision;

/// Temperatures per question type for the model whose sha256 is `sha256`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelTemperature {
    /// Per question type; `None` for a type that was not fitted (left as read).
    pub temperature: Temperature,
    /// What they were fitted on, in words (rows, folds, template).
    pub fitted_on: String,
    /// The model file's sha256 (64 hex digits) they were fitted for.
    pub sha256: String,
}

impl ModelTemperature {
    /// The temperatures of `file` when it was fitted for the model with
    /// sha256 `model_sha256`.
    ///
    /// # Errors
    /// A plain-words reason when the file names no model sha256, or another
    /// model's (the temperatures of one model do not carry to another).
    pub fn for_model(file: &CalibrationFile, model_sha256: Option<&str>) -> Result<Self, String> {
        let Some(fitted) = file.model_sha256.as_deref() else {
            return Err("the shipped temperatures name no model sha256".into());
        };
        match model_sha256 {
            Some(m) if m.eq_ignore_ascii_case(fitted) => {}
            other => {
                return Err(format!(
                    "the shipped temperatures were fitted for {} (sha256 {fitted}); this model's sha256 is {}, so they are not applied (fit your own with `dgem calibrate`)",
                    file.model_id,
                    other.unwrap_or("unknown")
                ))
            }
        }
        let templates: std::collections::BTreeSet<&str> =
            file.policies.iter().map(|p| p.template.as_str()).collect();
        let templates = templates.into_iter().collect::<Vec<_>>().join(", ");
        Ok(Self {
            temperature: file.temperature,
            fitted_on: format!(
                "{} rows, {}-fold cross-validated, {} policies from {templates}",
                file.rows,
                file.k,
                file.policies.len()
            ),
            sha256: fitted.to_ascii_lowercase(),
        })
    }

    /// Scale every answer of `decision` by its type's temperature and record
    /// the temperatures in `diagnostics.calibration`. Confidence, entropy
    /// (nats) and hesitation are recomputed; the chosen answer, standard
    /// error and agreement are kept.
    pub fn apply(&self, decision: &mut Decision) {
        for answer in decision.answers.values_mut().flatten() {
            let Some(t) = self.temperature.for_kind(answer.question.kind) else {
                continue;
            };
            rescale(&mut answer.aggregate, t);
        }
        let c = decision
            .diagnostics
            .calibration
            .get_or_insert_with(CalibrationDiagnostics::default);
        c.temperature = Some(self.temperature);
        c.fitted_on = Some(self.fitted_on.clone());
        c.sha256 = Some(self.sha256.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgem_core::after::calibration::{FittedTemperature, CALIBRATION_FORMAT};
    use dgem_core::schema::QuestionKind;

    fn file(sha: Option<&str>) -> CalibrationFile {
        let text = include_str!("../../dgem-model/calibration/gemma-3-270m-q4_k_m.json");
        let mut f = CalibrationFile::parse(text, std::path::Path::new("shipped")).expect("parses");
        assert_eq!(f.format, CALIBRATION_FORMAT);
        f.model_sha256 = sha.map(str::to_owned);
        f.temperature = FittedTemperature::default()
            .with(QuestionKind::Boolean, Some(2.0))
            .with(QuestionKind::Score, Some(0.5));
        f
    }

    #[test]
    fn another_model_is_refused_with_the_reason() {
        let f = file(Some(&"ab".repeat(32)));
        let err = ModelTemperature::for_model(&f, Some(&"cd".repeat(32))).expect_err("other");
        assert!(
            err.contains(&"ab".repeat(32)) && err.contains(&"cd".repeat(32)),
            "{err}"
        );
        let err = ModelTemperature::for_model(&f, None).expect_err("unknown");
        assert!(
            err.contains("unknown") && err.contains("not applied"),
            "{err}"
        );
        let err = ModelTemperature::for_model(&file(None), Some("ab")).expect_err("none");
        assert!(err.contains("name no model"), "{err}");
        let ok = ModelTemperature::for_model(&f, Some(&"AB".repeat(32))).expect("same model");
        assert_eq!(ok.temperature.of(QuestionKind::Boolean), Some(2.0));
        assert_eq!(ok.sha256, "ab".repeat(32));
    }

    #[test]
    fn the_shipped_file_is_pinned_to_the_small_model() {
        let text = include_str!("../../dgem-model/calibration/gemma-3-270m-q4_k_m.json");
        let f = CalibrationFile::parse(text, std::path::Path::new("shipped")).expect("parses");
        assert_eq!(
            f.model_sha256.as_deref(),
            Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")
        );
        // The per-type values are read by type name (`ByKind`) and written
        // back as the file has them, field for field.
        let written = serde_json::to_value(&f).expect("serializes");
        let original: serde_json::Value = serde_json::from_str(text).expect("json");
        assert_eq!(written, original);
    }
}
