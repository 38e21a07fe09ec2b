//! Warming calibration priors at start-up (`dgem serve --warm-priors`).
//!
//! The embedded engine calibrates each answer by the distribution the model
//! gives on content-free states ("N/A", "", "[MASK]"; contextual calibration,
//! Zhao et al. 2021). Those three extra prompts are read the first time a
//! policy is seen; with the default `document_first` layout the state comes
//! before the policy, so they share no KV prefix with the real prompt and the
//! first decision of a policy costs about 4× a later one (3.8× to 4.4×
//! measured, benchmarks/results/serve_load.json and speed_embedded.json). The priors are
//! cached in memory and persisted per model, so warming them here moves that
//! cost out of the first request of every template in the folder.
//!
//! A template is warmed by one decision: its policy rendered with no
//! variables, on a fixed placeholder state ([`PLACEHOLDER_STATE`]; the priors
//! do not depend on the state, and a template's own default state may be
//! empty, which a decision refuses). That is only worth doing when the
//! policy text does not depend on the variables: a template that writes a
//! variable into its instructions or questions gets different content-free
//! prompts for every request, so it is skipped, naming the variable.

use std::time::Instant;

use dgem_core::payload::Payload;
use dgem_core::schema::ValidSchema;
use dgem_engine::templates::TemplateDir;
use dgem_engine::DecideRequest;
use serde_json::{Map, Value};

use crate::state::AppState;

/// Seed of the warming decisions (any fixed value: the priors do not depend on it).
const SEED: i64 = 42;

/// The state of every warming decision: content-free prompts replace the
/// state, so any non-empty text gives the same priors.
pub const PLACEHOLDER_STATE: &str =
    "A placeholder state: this decision only reads the policy's calibration priors.";

/// What [`warm`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WarmReport {
    /// Templates whose decision ran, in catalog order.
    pub warmed: Vec<String>,
    /// Templates left out, each with the reason.
    pub skipped: Vec<(String, String)>,
}

/// Run one decision per template of the folder of `dir` (its
/// [`TemplateDir::folder_names`]) whose policy text is the same for
/// every request ([`policy_fixed`]), so that their calibration priors are
/// cached before the first user request. A template that fails to render,
/// validate or decide is skipped with a warning; this never fails as a whole.
pub async fn warm(state: &AppState, dir: &TemplateDir) -> WarmReport {
    let mut report = WarmReport::default();
    // The folder's own templates (`--templates`), not the built-ins it lacks.
    for name in dir.folder_names() {
        let started = Instant::now();
        let outcome = match request(dir, &name, state) {
            Ok(req) => state
                .decider()
                .decide(req)
                .await
                .map(|_| ())
                .map_err(|e| format!("decision failed: {e}")),
            Err(why) => Err(why),
        };
        match outcome {
            Ok(()) => {
                let ms = started.elapsed().as_secs_f64() * 1e3;
                tracing::info!(template = %name, ms, "warm-priors: priors cached");
                report.warmed.push(name);
            }
            Err(why) => {
                tracing::warn!(template = %name, reason = %why, "warm-priors: skipped");
                report.skipped.push((name, why));
            }
        }
    }
    report
}

/// The warming decision of template `name`: its policy rendered with no
/// variables and validated under the deployment's defaults, on
/// [`PLACEHOLDER_STATE`].
///
/// # Errors
/// Why the template cannot be warmed: it does not render or validate, or its
/// policy text depends on a variable ([`policy_fixed`]).
fn request(dir: &TemplateDir, name: &str, state: &AppState) -> Result<DecideRequest, String> {
    let payload = policy_fixed(dir, name)?;
    let schema = ValidSchema::from_value(&payload.schema, &state.config().schema_defaults)
        .map_err(|e| format!("invalid policy: {e}"))?
        .with_policy(name.to_string());
    Ok(DecideRequest {
        schema,
        state: Value::String(PLACEHOLDER_STATE.into()),
        seed: SEED,
    })
}

/// Check that template `name` writes the same policy text whatever its
/// variables are: rendered with each variable set in turn to a marker string,
/// the schema (less `samples`, which changes how many reads run but not the
/// text of the first) must equal the schema rendered with no variables.
///
/// Returns the rendering with no variables (the warming decision's policy).
///
/// # Errors
/// The template does not render with no variables, or names the first variable
/// that changes the policy.
pub fn policy_fixed(dir: &TemplateDir, name: &str) -> Result<Payload, String> {
    const MARKER: &str = "dgem warm-priors marker";
    let text = dir.text(name).map_err(|e| e.to_string())?;
    let payload = dir.render(name, &Map::new()).map_err(|e| e.to_string())?;
    let bare = policy_text(&payload.schema);
    for var in dgem_core::template::template_variables(&text) {
        if var == "samples" {
            continue;
        }
        let mut vars = Map::new();
        vars.insert(var.clone(), Value::String(MARKER.into()));
        // A variable that cannot hold a string (rendering fails) is not text
        // the policy shows; only a rendering that succeeds and differs counts.
        if let Ok(p) = dir.render(name, &vars) {
            if policy_text(&p.schema) != bare {
                return Err(format!(
                    "its policy text depends on the variable `{var}`, so every request has its own priors"
                ));
            }
        }
    }
    Ok(payload)
}

/// The schema without `samples`.
fn policy_text(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(o) = s.as_object_mut() {
        o.remove("samples");
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FIXED: &str = r#"{
  "schema": {"questions": [{"id": "spam", "type": "boolean", "instructions": "Is this message spam?"}],
             "samples": {{ default 1 .samples | toJson }}},
  "state": {"message": {{ default "none" .message | toJson }}}
}"#;

    const VARYING: &str = r#"{
  "schema": {"questions": [{"id": "holds", "type": "boolean", "instructions": {{ printf "Does the text support: %s?" (default "the claim" .claim) | toJson }}}]},
  "state": {"text": {{ default "none" .text | toJson }}}
}"#;

    #[test]
    fn a_policy_that_writes_a_variable_into_its_questions_is_not_fixed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("spam.json.tmpl"), FIXED).unwrap();
        std::fs::write(dir.path().join("claim.json.tmpl"), VARYING).unwrap();
        let templates = TemplateDir::new(dir.path());
        let spam = policy_fixed(&templates, "spam").unwrap();
        assert_eq!(spam.schema["questions"][0]["id"], "spam");
        let err = policy_fixed(&templates, "claim").unwrap_err();
        assert!(err.contains("`claim`"), "{err}");
    }
}
