//! The `diagnostics.calibration` block: what calibrated a decision's numbers.

use serde::{Deserialize, Deserializer, Serialize};

use crate::after::temperature::Temperature;

/// How a decision's probabilities were calibrated, written as
/// `diagnostics.calibration`:
///
/// ```json
/// {"contextual": ["N/A", "", "[MASK]"],
///  "temperature": {"boolean": 1.8, "choice": 0.7, "score": null},
///  "fitted_on": "data/calibration/jev_rows.jsonl (…)", "sha256": "a5fd…"}
/// ```
///
/// `contextual` lists the content-free states each read was divided by
/// (contextual calibration, Zhao et al. 2021; `null` when off);
/// `temperature` the per-type temperatures shipped for this model (fitted
/// by `dgem calibrate`, applied to every answer after the read; `null` when
/// none apply), `fitted_on` what they were fitted on and `sha256` the model
/// they were fitted for. An older peer that wrote a bare list of states is
/// read as `contextual`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CalibrationDiagnostics {
    /// Content-free states of contextual calibration; `None` when off.
    pub contextual: Option<Vec<String>>,
    /// Shipped temperatures applied, per question type; `None` when none.
    pub temperature: Option<Temperature>,
    /// The rows the temperatures were fitted on (with folds and count).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fitted_on: Option<String>,
    /// The model sha256 the temperatures were fitted for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl CalibrationDiagnostics {
    /// Contextual calibration only, with these content-free states.
    pub fn contextual(states: Vec<String>) -> Self {
        Self {
            contextual: Some(states),
            ..Self::default()
        }
    }

    /// Whether nothing calibrated the decision.
    pub fn is_off(&self) -> bool {
        self.contextual.is_none() && self.temperature.is_none()
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Wire {
    /// The older shape: the content-free states alone.
    States(Vec<String>),
    Block {
        #[serde(default)]
        contextual: Option<Vec<String>>,
        #[serde(default)]
        temperature: Option<Temperature>,
        #[serde(default)]
        fitted_on: Option<String>,
        #[serde(default)]
        sha256: Option<String>,
    },
}

impl<'de> Deserialize<'de> for CalibrationDiagnostics {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Wire::deserialize(d)? {
            Wire::States(states) => Self::contextual(states),
            Wire::Block {
                contextual,
                temperature,
                fitted_on,
                sha256,
            } => Self {
                contextual,
                temperature,
                fitted_on,
                sha256,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_older_list_and_the_block() {
        let old: CalibrationDiagnostics =
            serde_json::from_value(serde_json::json!(["N/A", ""])).expect("list");
        assert_eq!(
            old,
            CalibrationDiagnostics::contextual(vec!["N/A".into(), String::new()])
        );
        let block = serde_json::json!({"contextual": null,
            "temperature": {"boolean": 1.5, "choice": null, "score": 0.8}, "sha256": "ab"});
        let b: CalibrationDiagnostics = serde_json::from_value(block.clone()).expect("block");
        assert_eq!(
            b.temperature
                .and_then(|t| t.of(crate::schema::QuestionKind::Boolean)),
            Some(1.5)
        );
        assert_eq!(serde_json::to_value(&b).expect("json"), block);
        assert!(!b.is_off());
        assert!(CalibrationDiagnostics::default().is_off());
    }
}
