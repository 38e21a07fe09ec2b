//! The body of `POST /api/decide[/{template}]` turned into a validated call:
//! either a policy template with variables, or ad-hoc questions with a state.
//! Every error names the field, the allowed values and the value received.

use dgem_cascade::Hesitation;
use dgem_core::schema::{SchemaDefaults, ValidSchema, MAX_SAMPLES};
use dgem_engine::templates::{template_variables, TemplateDir, TemplateError};
use dgem_engine::DecideRequest;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ErrorKind};

/// Template used when neither the body nor the path names one.
pub const DEFAULT_TEMPLATE: &str = "support_triage";

/// Label of a decision made from ad-hoc questions.
pub const CUSTOM_LABEL: &str = "custom_questions";

/// A parsed `/api/decide` request.
#[derive(Debug, Clone)]
pub struct ApiDecide {
    /// Template id, or [`CUSTOM_LABEL`].
    pub template: String,
    /// The decision to make: the schema validated once, here.
    pub request: DecideRequest,
    /// Backend named in the body, if any.
    pub backend: Option<String>,
    /// What to do after the read: cascade, temperature, abstention.
    pub hesitation: Hesitation,
}

fn bad(msg: String) -> ApiError {
    ApiError::invalid_field(msg)
}

fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 {
        format!("{}…", &s[..s.floor_char_boundary(80)])
    } else {
        s
    }
}

/// Top-level keys of a `/api/decide` body.
pub const API_KEYS: &[&str] = &[
    "template",
    "variables",
    "questions",
    "state",
    "images",
    "instructions",
    "backend",
    "seed",
    "samples",
    "temperature",
    "abstain_below",
    "abstain_above",
    "cascade_mode",
    "cascade_threshold",
    "cascade_threshold_mode",
    "cascade_model",
    "stage2_prior",
    "expected_answers",
    "suggest_expansions",
    "expansion_entropy",
    "allow_missing_vars",
];

/// Why a key the original's decision API has is not read here.
fn not_served(key: &str) -> Option<&'static str> {
    Some(match key {
        "image" | "image_url" => "send images as `images`: a list of data:image/...;base64 URLs",
        "custom_template" => {
            "send ad-hoc `questions` with a `state`, or a `template` id from GET /api/templates"
        }
        "layout" => "set `layout` in the policy's schema",
        "vertex_url" => "pick the backend with `backend` or the X-DGem-Backend header",
        _ => return None,
    })
}

/// Refuse keys this route does not read: a misspelled `temprature` or
/// `abstain_belw` would otherwise switch a setting off without a word.
fn check_keys(obj: &Map<String, Value>) -> Result<(), ApiError> {
    for key in obj.keys() {
        if API_KEYS.contains(&key.as_str()) {
            continue;
        }
        let mut shown: String = key.chars().take(64).collect();
        if shown.len() < key.len() {
            shown.push('…');
        }
        let why = match not_served(key) {
            Some(why) => why.to_string(),
            None => {
                let hint = dgem_engine::builtin::closest(key, API_KEYS.iter().copied())
                    .map(|c| format!("did you mean `{c}`? "))
                    .unwrap_or_default();
                format!("{hint}the fields are [{}]", API_KEYS.join(", "))
            }
        };
        return Err(
            bad(format!("`{shown}` is not a field of /api/decide: {why}")).with_param(shown),
        );
    }
    Ok(())
}

/// Parse `body` (already JSON) for `path_template` (the `{template}` path
/// part), validating the policy under the deployment's `defaults`.
///
/// # Errors
/// [`ApiError::invalid_field`] naming the field at fault.
pub fn parse(
    templates: &TemplateDir,
    path_template: Option<&str>,
    body: &Value,
    defaults: &SchemaDefaults,
) -> Result<ApiDecide, ApiError> {
    let Value::Object(obj) = body else {
        return Err(bad(format!(
            "body must be a JSON object {{\"template\", \"variables\", …}}. Given: {}",
            shown(body)
        )));
    };
    check_keys(obj)?;
    let backend = match obj.get("backend") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(bad(format!(
                "`backend` must be a string. Given: {}",
                shown(other)
            )))
        }
    };
    let seed = match obj.get("seed") {
        None | Some(Value::Null) => 42,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| bad(format!("`seed` must be an integer. Given: {}", shown(v))))?,
    };
    let samples = match obj.get("samples") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if (1..=u64::from(MAX_SAMPLES)).contains(&n) => Some(n),
            _ => {
                return Err(bad(format!(
                    "`samples` must be an integer from 1 to {MAX_SAMPLES}. Given: {}",
                    shown(v)
                )))
            }
        },
    };
    if obj.contains_key("questions") && obj.get("template").is_some_and(|t| !t.is_null()) {
        return Err(bad(format!(
            "send either `template` (with `variables`) or ad-hoc `questions` (with `state`), not both. Given: `template` {} and `questions`",
            shown(obj.get("template").unwrap_or(&Value::Null))
        )));
    }
    let (template, mut schema, state) = if obj.contains_key("questions") {
        let (schema, state) = custom(obj)?;
        (CUSTOM_LABEL.to_string(), schema, state)
    } else {
        let name = match obj.get("template") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            None | Some(Value::Null) => path_template
                .filter(|p| !p.is_empty())
                .unwrap_or(DEFAULT_TEMPLATE)
                .to_string(),
            Some(other) => {
                return Err(bad(format!(
                    "`template` must be a template id from GET /api/templates. Given: {}",
                    shown(other)
                )))
            }
        };
        let mut vars = match obj.get("variables") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "`variables` must be an object of template variables. Given: {}",
                    shown(other)
                )))
            }
        };
        let allow_missing = match obj.get("allow_missing_vars") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(bad(format!(
                    "`allow_missing_vars` must be true or false. Given: {}",
                    shown(other)
                )))
            }
        };
        let text = template_text(templates, &name)?;
        let declared = template_variables(&text);
        check_unknown_variables(&name, &vars, &declared)?;
        alias_variables(&mut vars);
        if !allow_missing {
            if let Some(msg) = dgem_core::vars::missing_state_variables(&name, &vars, &declared) {
                return Err(bad(format!("`variables`: {msg}")));
            }
        }
        if let Some(n) = samples {
            vars.insert("samples".into(), json!(n));
        }
        let payload = templates.render_strict(&name, &vars, allow_missing).map_err(|e| {
            if let TemplateError::Unset { detail, .. } = &e {
                // A well-formed request this policy cannot be decided on
                // without a placeholder: 422, as an image the backend cannot
                // read is.
                return ApiError::new(
                    ErrorKind::Validation,
                    format!(
                        "`variables`: {detail}; send it in `variables`, or set `allow_missing_vars: true` to decide on the placeholder"
                    ),
                )
                .with_param("variables");
            }
            let missing: Vec<&str> = declared
                .iter()
                .map(String::as_str)
                .filter(|v| *v != "samples" && !vars.contains_key(*v))
                .collect();
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
                e.with_list_hint(LIST_HINT)
            ))
        })?;
        (name, payload.schema, payload.state)
    };
    // Images join the state as content parts ahead of its text, as on
    // /v1/systemone; each is checked (type, size, inline) before any read.
    let images = dgem_core::images::parts_from_json(obj.get("images"))
        .map_err(|e| bad(e.message).with_param(e.field))?;
    let state = dgem_core::images::with_images(state, images)
        .map_err(|e| bad(e.message).with_param(e.field))?;
    if let (Some(n), Some(s)) = (samples, schema.as_object_mut()) {
        s.insert("samples".into(), json!(n));
    }
    let field_error =
        |e: dgem_core::SchemaError| bad(e.message.clone()).with_param(e.field.as_str());
    let (schema, injected) = dgem_cascade::inject_if_asked(obj, &schema).map_err(field_error)?;
    let schema = ValidSchema::from_value(&schema, defaults)
        .map_err(|e| bad(format!("policy `{template}` is not a valid schema: {e}")))?
        .with_policy(template.trim_end_matches(dgem_engine::templates::TEMPLATE_SUFFIX));
    let hesitation = Hesitation::from_object(obj, &schema)
        .map_err(field_error)?
        .for_policy(&template, injected);
    Ok(ApiDecide {
        template,
        request: DecideRequest {
            schema,
            state,
            seed,
        },
        backend,
        hesitation,
    })
}

/// How the HTTP API tells a caller where the template names are.
const LIST_HINT: &str = "GET /api/templates lists the names";

/// The text of template `name` from the catalogue (the templates folder, then
/// the built-in policies; a missing folder is an empty one).
///
/// # Errors
/// [`ApiError::invalid_field`] naming `template` when the name does not
/// resolve; [`ApiError::misconfigured`] (500) when the folder's file for it
/// cannot be read (naming the template, not the server's path).
pub fn template_text(templates: &TemplateDir, name: &str) -> Result<String, ApiError> {
    templates.text(name).map_err(|e| match e {
        TemplateError::Unreadable { .. } => ApiError::misconfigured(e),
        _ => bad(format!(
            "`template` `{name}`: {}",
            e.with_list_hint(LIST_HINT)
        )),
    })
}

/// Names a request variable may be sent as besides its own (reference.md
/// §4.3 aliases): `context` fills `document`, `text` fills `user_input`, and
/// `input_text`, `ticket`, `document`, `text`, `context` fill `input`.
fn alias_targets(var: &str) -> &'static [&'static str] {
    match var {
        "context" => &["document", "input"],
        "text" => &["user_input", "input"],
        "input_text" | "ticket" | "document" => &["input"],
        _ => &[],
    }
}

/// Refuse variables the template does not read (directly or through an alias),
/// e.g. a misspelled `tickt` that would otherwise run with an empty ticket.
///
/// # Errors
/// [`ApiError::invalid_field`] naming the unknown variable(s) and listing the
/// template's variables.
pub fn check_unknown_variables(
    name: &str,
    vars: &Map<String, Value>,
    declared: &[String],
) -> Result<(), ApiError> {
    let reads = |v: &str| declared.iter().any(|d| d == v);
    let unknown: Vec<&str> = vars
        .keys()
        .map(String::as_str)
        .filter(|k| !reads(k) && !alias_targets(k).iter().any(|t| reads(t)))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    // The shared wording, with the closest declared name for each unknown one.
    let detail = dgem_core::vars::unknown_variables(name, unknown.iter().copied(), declared)
        .unwrap_or_else(|| {
            format!(
                "template `{name}` does not read [{}]; its variables are [{}]",
                unknown.join(", "),
                declared.join(", ")
            )
        });
    Err(bad(format!("`variables`: {detail}")))
}

/// Variable aliasing of reference.md §4.3: `document` ← `context`,
/// `user_input` ← `text`, `input` ← first non-empty of `input_text, ticket,
/// document, text, context`.
pub fn alias_variables(vars: &mut Map<String, Value>) {
    let non_empty = |v: Option<&Value>| v.is_some_and(|v| !v.is_null() && v.as_str() != Some(""));
    if !vars.contains_key("document") {
        if let Some(c) = vars.get("context").cloned() {
            vars.insert("document".into(), c);
        }
    }
    if !vars.contains_key("user_input") {
        if let Some(t) = vars.get("text").cloned() {
            vars.insert("user_input".into(), t);
        }
    }
    if !non_empty(vars.get("input")) {
        let first = ["input_text", "ticket", "document", "text", "context"]
            .iter()
            .find_map(|k| vars.get(*k).filter(|v| non_empty(Some(v))).cloned());
        if let Some(v) = first {
            vars.insert("input".into(), v);
        }
    }
}

/// Ad-hoc questions: `{"state", "questions": [{"id", "type", "question", "options"?}] | {id: {…}}, "instructions"?}`
/// (every form `dgem_core::adhoc` accepts).
fn custom(obj: &Map<String, Value>) -> Result<(Value, Value), ApiError> {
    let state = match obj.get("state") {
        None | Some(Value::Null) => return Err(bad(
            "`state` is required with `questions`: the text or JSON object the decision is about"
                .into(),
        )),
        Some(v) => v.clone(),
    };
    // The one ad-hoc converter every surface uses (map or list, every type alias).
    let out = dgem_core::adhoc::adhoc_questions(obj.get("questions").unwrap_or(&Value::Null))
        .map_err(|e| bad(format!("`{}`: {}", e.field, e.message)))?;
    let mut schema = Map::new();
    if let Some(ins) = obj.get("instructions").and_then(Value::as_str) {
        schema.insert("instructions".into(), json!(ins));
    }
    schema.insert("questions".into(), Value::Array(out));
    Ok((Value::Object(schema), state))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(r.template, "support_triage");
        assert_eq!(r.request.seed, 7);
        assert_eq!(
            r.request.schema.samples,
            dgem_core::schema::SamplePolicy::Fixed { n: 3 }
        );
        assert_eq!(r.request.state["ticket"], "refund me");
        assert_eq!(r.backend.as_deref(), Some("local"));
    }

    #[test]
    fn custom_questions_build_a_schema() {
        let body = json!({"state": "the build is red", "questions": [
            {"id": "urgent", "type": "boolean", "question": "Urgent?"},
            {"id": "team", "type": "choice", "question": "Who?", "options": ["infra", "app"]},
            {"id": "mood", "type": "score", "question": "How bad?", "options": ["fine", "bad", "awful"]}
        ]});
        let r = parse(&dir(), None, &body, &SchemaDefaults::default()).expect("parses");
        assert_eq!(r.template, CUSTOM_LABEL);
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
        let cases = [
            (
                json!({"samples": 0}),
                "`samples` must be an integer from 1 to 32. Given: 0",
            ),
            (
                json!({"seed": "x"}),
                "`seed` must be an integer. Given: \"x\"",
            ),
            (
                json!({"state": "s", "questions": [{"id": "a", "type": "maybe"}]}),
                "`questions[0].type`: question 'a': unknown type 'maybe' (`type` must be one of boolean, bool, noul, choice, score)",
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

    #[test]
    fn aliases() {
        let mut v = Map::new();
        v.insert("context".into(), json!("ctx"));
        v.insert("text".into(), json!("t"));
        alias_variables(&mut v);
        assert_eq!(v["document"], "ctx");
        assert_eq!(v["user_input"], "t");
        assert_eq!(v["input"], "ctx");
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
