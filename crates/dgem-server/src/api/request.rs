//! The body of `POST /api/decide[/{template}]` turned into a validated call
//! by the decision service ([`dgem_service::prepare`]): this file only refuses
//! keys the route does not read and renders the service's errors as this
//! route's (a 400 naming the field in `error.param`; 422 for a variable the
//! policy cannot be decided without; 500 for an unreadable template file).

use dgem_core::schema::SchemaDefaults;
use dgem_engine::templates::{TemplateDir, TemplateError};
use dgem_service::{
    Catalogue, DecisionRequest, Prepared, Service, ServiceError, Surface, TemplateFailure,
};
use serde_json::{Map, Value};

use crate::error::{ApiError, ErrorKind};

pub use dgem_service::{CUSTOM_LABEL, DEFAULT_TEMPLATE};

/// A parsed `/api/decide` request: the service's prepared decision.
pub type ApiDecide = Prepared;

fn bad(msg: String) -> ApiError {
    ApiError::invalid_field(msg)
}

/// Top-level keys of a `/api/decide` body: [`DecisionRequest`]'s, read from
/// its derived schema.
pub fn api_keys() -> &'static [String] {
    static KEYS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    KEYS.get_or_init(DecisionRequest::keys)
}

/// Why a key the original's decision API has is not read here.
fn not_served(key: &str) -> Option<&'static str> {
    Some(match key {
        "image" | "image_url" => "send images as `images`: a list of data:image/...;base64 URLs",
        "custom_template" => {
            "send ad-hoc `questions` with a `state`, or a `template` id from GET /api/templates"
        }
        "vertex_url" => "pick the backend with `backend` or the X-DGem-Backend header",
        _ => return None,
    })
}

/// Refuse keys this route does not read: a misspelled `temprature` or
/// `abstain_belw` would otherwise switch a setting off without a word.
fn check_keys(obj: &Map<String, Value>) -> Result<(), ApiError> {
    let keys = api_keys();
    let Some((shown, closest)) = DecisionRequest::unknown_key(obj, keys) else {
        return Ok(());
    };
    let raw = obj
        .keys()
        .find(|k| !keys.contains(k))
        .map_or("", String::as_str);
    let why = match not_served(raw) {
        Some(why) => why.to_string(),
        None => {
            let hint = closest
                .map(|c| format!("did you mean `{c}`? "))
                .unwrap_or_default();
            format!("{hint}the fields are [{}]", keys.join(", "))
        }
    };
    Err(bad(format!("`{shown}` is not a field of /api/decide: {why}")).with_param(shown))
}

/// How the HTTP API tells a caller where the template names are.
const LIST_HINT: &str = "GET /api/templates lists the names";

/// A service error as this route's error.
pub fn api_error(e: ServiceError) -> ApiError {
    match e {
        ServiceError::Field { field, message } => bad(message).with_param(field),
        ServiceError::Variables(detail) | ServiceError::NoState(detail) => {
            bad(format!("`variables`: {detail}"))
        }
        ServiceError::Template(failure) => {
            let TemplateFailure {
                name,
                error,
                missing,
                declared,
            } = *failure;
            match error {
                TemplateError::Unreadable { .. } => ApiError::misconfigured(error),
                // A well-formed request this policy cannot be decided on
                // without a placeholder: 422, as an image the backend cannot
                // read is.
                TemplateError::Unset { detail, .. } => ApiError::new(
                    ErrorKind::Validation,
                    format!(
                        "`variables`: {detail}; send it in `variables`, or set `allow_missing_vars: true` to decide on the placeholder"
                    ),
                )
                .with_param("variables"),
                other => {
                    let hint = if missing.is_empty() {
                        String::new()
                    } else {
                        format!(
                            ". Missing variable(s): [{}]; the template's variables: [{}]",
                            missing.join(", "),
                            declared.join(", ")
                        )
                    };
                    bad(format!(
                        "`template` `{name}`: {}{hint}",
                        other.with_list_hint(LIST_HINT)
                    ))
                }
            }
        }
        ServiceError::Schema { policy, detail } => {
            bad(format!("policy `{policy}` is not a valid schema: {detail}"))
        }
        other => bad(other.to_string()),
    }
}

/// Prepare `body` (already JSON) for `path_template` (the `{template}` path
/// part) with the deployment's decision `service`.
///
/// # Errors
/// [`ApiError::invalid_field`] naming the field at fault (see [`api_error`]).
pub fn prepare(
    service: &Service,
    path_template: Option<&str>,
    body: &Value,
) -> Result<ApiDecide, ApiError> {
    let Value::Object(obj) = body else {
        return Err(bad(format!(
            "body must be a JSON object {{\"template\", \"variables\", …}}. Given: {}",
            dgem_service::shown(body)
        )));
    };
    check_keys(obj)?;
    let req = DecisionRequest::from_object(obj, &Surface::API).map_err(api_error)?;
    service.prepare(path_template, req).map_err(api_error)
}

/// [`prepare`] on a service over `templates` (then the built-ins) and
/// `defaults`, without a post-read setup.
///
/// # Errors
/// As [`prepare`].
pub fn parse(
    templates: &TemplateDir,
    path_template: Option<&str>,
    body: &Value,
    defaults: &SchemaDefaults,
) -> Result<ApiDecide, ApiError> {
    let service = Service::new(Catalogue::new(templates.clone())).with_defaults(*defaults);
    prepare(&service, path_template, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dir() -> TemplateDir {
        TemplateDir::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../templates"))
    }

    #[test]
    fn template_with_variables_and_samples() {
        let body = json!({"variables": {"ticket": "refund me"}, "samples": 3, "seed": 7, "backend": "local"});
        let r = parse(
            &dir(),
            Some("support_triage"),
            &body,
            &SchemaDefaults::default(),
        )
        .expect("parses");
        assert_eq!(r.label, "support_triage");
        assert_eq!(r.request.seed, 7);
        assert_eq!(
            r.request.schema.samples,
            dgem_core::schema::SamplePolicy::Fixed { n: 3 }
        );
        assert_eq!(r.request.state["ticket"], "refund me");
        assert_eq!(r.backend.as_deref(), Some("local"));
    }

    /// Issue 30: the OpenAPI document said `samples` takes "a count or
    /// `auto`" while this route refused `auto`, and `layout` was the CLI's
    /// alone. Both are the decision service's read options now, on every
    /// surface.
    #[test]
    fn samples_auto_and_layout_are_taken_as_the_document_says() {
        let body = json!({"variables": {"ticket": "refund me"}, "samples": "auto", "layout": "schema_first"});
        let r = parse(&dir(), None, &body, &SchemaDefaults::default()).expect("parses");
        assert_eq!(
            r.request.schema.samples,
            dgem_core::schema::SamplePolicy::Auto {
                max: 4,
                threshold: 0.1
            }
        );
        assert_eq!(
            r.request.schema.layout,
            dgem_core::schema::Layout::SchemaFirst
        );
        let err = parse(
            &dir(),
            None,
            &json!({"variables": {"ticket": "x"}, "layout": "sideways"}),
            &SchemaDefaults::default(),
        )
        .expect_err("refused");
        assert_eq!(err.param.as_deref(), Some("layout"));
        assert!(
            err.to_string().contains("[document_first, schema_first]"),
            "{err}"
        );
    }

    #[test]
    fn custom_questions_build_a_schema() {
        let body = json!({"state": "the build is red", "questions": [
            {"id": "urgent", "type": "boolean", "question": "Urgent?"},
            {"id": "team", "type": "choice", "question": "Who?", "options": ["infra", "app"]},
            {"id": "mood", "type": "score", "question": "How bad?", "options": ["fine", "bad", "awful"]}
        ]});
        let r = parse(&dir(), None, &body, &SchemaDefaults::default()).expect("parses");
        assert_eq!(r.label, CUSTOM_LABEL);
        let wire = r.request.schema.to_wire();
        assert_eq!(
            wire["questions"][1]["options"],
            json!([{"name": "infra"}, {"name": "app"}])
        );
        assert_eq!(
            wire["questions"][2]["levels"],
            json!(["fine", "bad", "awful"])
        );
        assert_eq!(r.request.state, json!("the build is red"));
    }

    #[test]
    fn custom_questions_take_the_systemone_map_form_and_aliases_too() {
        // The same forms /v1/systemone and MCP take (dgem_core::adhoc).
        let body = json!({"state": "s", "questions": {
            "urgent": {"type": "noul", "instructions": "Urgent?"},
            "ok": {"type": "bool"},
            "team": {"type": "choice", "criteria": {"infra": "servers", "app": "code"}}}});
        let r = parse(&dir(), None, &body, &SchemaDefaults::default()).expect("parses");
        let qs = &r.request.schema.questions;
        assert_eq!(qs[0].id, "urgent");
        assert_eq!(qs[1].kind, dgem_core::schema::QuestionKind::Boolean);
        assert_eq!(qs[2].alternatives[1].name, "app");
    }

    #[test]
    fn errors_name_field_allowed_and_given() {
        let type_message = format!(
            "`questions[0].type`: question 'a': unknown type 'maybe' (`type` must be one of {})",
            dgem_core::schema::QuestionKind::accepted_names()
        );
        let cases = [
            (
                json!({"samples": 0}),
                "`samples` must be a count from 1 to 32 or `auto`. Given: 0",
            ),
            (
                json!({"seed": "x"}),
                "`seed` must be an integer. Given: \"x\"",
            ),
            (
                json!({"state": "s", "questions": [{"id": "a", "type": "maybe"}]}),
                type_message.as_str(),
            ),
            (
                json!({"variables": [1]}),
                "`variables` must be an object of template variables. Given: [1]",
            ),
            (json!([1]), "body must be a JSON object"),
        ];
        for (body, want) in cases {
            let err = parse(&dir(), None, &body, &SchemaDefaults::default())
                .expect_err("refused")
                .to_string();
            assert!(err.contains(want), "{err} !~ {want}");
        }
    }

    #[test]
    fn traversal_refused() {
        for name in [
            "../Cargo.toml",
            "/etc/passwd",
            "bench/../../README",
            "..",
            "a/./b",
        ] {
            let err = parse(
                &dir(),
                None,
                &json!({"template": name}),
                &SchemaDefaults::default(),
            )
            .expect_err("refused");
            assert!(err.to_string().starts_with("`template`"), "{name}: {err}");
        }
    }

    /// Issue 29: with no templates folder (a server started from `/` or
    /// `$HOME`) the built-in policies decide, and a request without the
    /// state is refused naming the variable, as MCP and the CLI refuse it.
    #[test]
    fn a_missing_folder_decides_with_the_built_ins() {
        let gone = TemplateDir::new("/nonexistent/dgem/templates");
        let body = json!({"variables": {"ticket": "refund me"}});
        let r = parse(
            &gone,
            Some("support_triage"),
            &body,
            &SchemaDefaults::default(),
        )
        .expect("parses");
        assert_eq!(r.request.state["ticket"], "refund me");
        let err = parse(&gone, None, &json!({}), &SchemaDefaults::default())
            .expect_err("no state")
            .to_string();
        assert!(
            err.starts_with("`variables`: template `support_triage` needs its state: give at least one of [ticket]"),
            "{err}"
        );
        let err = parse(&gone, Some("nope"), &json!({}), &SchemaDefaults::default())
            .expect_err("unknown")
            .to_string();
        assert!(err.starts_with("`template` `nope`: "), "{err}");
        assert!(!err.contains("/nonexistent"), "{err}");
    }
}
