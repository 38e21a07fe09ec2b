//! From a [`DecisionRequest`] to a validated decision: the policy rendered
//! from the catalogue (or built from ad-hoc questions), images joined to the
//! state, catch-all options injected when expansion is asked for, the schema
//! validated once under the deployment's defaults, and the post-read options
//! checked against it.

use dgem_cascade::AfterRequest;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::templates::TEMPLATE_SUFFIX;
use dgem_engine::DecideRequest;
use serde_json::{Map, Value};

use crate::catalogue::Catalogue;
use crate::error::ServiceError;
use crate::read::ReadOptions;
use crate::request::{shown, DecisionRequest, CUSTOM_LABEL, DEFAULT_SEED, DEFAULT_TEMPLATE};

/// A request ready to read.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The template id, or [`CUSTOM_LABEL`] for ad-hoc questions.
    pub label: String,
    /// The decision to make: the schema validated once, here.
    pub request: DecideRequest,
    /// The backend the request named, if any.
    pub backend: Option<String>,
    /// What to do after the read: cascade, temperature, abstention, expansion.
    pub after: AfterRequest,
    /// Warnings for the decision's `diagnostics.warnings`, added after the
    /// read (e.g. the text variables an image stood in for).
    pub warnings: Vec<String>,
    /// Whether the post-read runs only when the request asks for one (a
    /// cascade, a temperature, an abstention rule, expansion). Set for a
    /// policy given inline in the structured server's protocol (the chat
    /// and `/v1/systemone` routes), whose own post-read keys are its
    /// client's to apply; otherwise the post-read always runs (the policy's
    /// own keys, the deployment's calibration file).
    pub after_when_asked: bool,
}

/// Prepare `req` on `catalogue` under the deployment's `defaults`.
/// `route_template` is the template a route names (`/api/decide/{template}`),
/// used when the request names none.
///
/// # Errors
/// A [`ServiceError`] naming the field at fault: both `template` and
/// `questions`; `questions` without `state`; a malformed question, image,
/// variable or post-read option; a template that does not resolve or render;
/// a policy that is not a valid schema.
pub fn prepare(
    catalogue: &Catalogue,
    route_template: Option<&str>,
    req: DecisionRequest,
    defaults: &SchemaDefaults,
) -> Result<Prepared, ServiceError> {
    if let Some(inline) = req.inline {
        return prepare_inline(inline, req.state, req.read.seed, req.backend, &req.after);
    }
    let custom = req.is_custom();
    // Whether the request gives an image, which may stand in for the state
    // (`dgem_core::image_state`); each image is checked below, as before.
    let gives_images = req.gives_images();
    let DecisionRequest {
        template,
        variables,
        questions,
        state,
        images,
        instructions,
        rules,
        backend,
        read,
        after,
        allow_missing_vars,
        inline: _,
    } = req;
    if let (false, Some(_)) = (custom, &rules) {
        return Err(ServiceError::field(
            "rules",
            "`rules` go with ad-hoc `questions`; a template states its own rules in its schema"
                .into(),
        ));
    }
    if let (true, Some(t)) = (custom, &template) {
        return Err(ServiceError::field(
            "template",
            format!(
                "send either `template` (with `variables`) or ad-hoc `questions` (with `state`), not both. Given: `template` {} and `questions`",
                shown(&Value::String(t.clone()))
            ),
        ));
    }
    let count = read.count();
    let ReadOptions {
        seed,
        samples,
        layout,
        isolate,
    } = read;
    let (label, mut schema, state, warnings) = if custom {
        let (mut schema, state) =
            custom_policy(questions, state, instructions.as_deref(), gives_images)?;
        if let (Some(r), Value::Object(m)) = (rules, &mut schema) {
            m.insert("rules".into(), r);
        }
        (CUSTOM_LABEL.to_string(), schema, state, Vec::new())
    } else {
        let name = template
            .or_else(|| route_template.filter(|p| !p.is_empty()).map(str::to_string))
            .unwrap_or_else(|| DEFAULT_TEMPLATE.to_string());
        let rendered = catalogue.render_for(
            &name,
            variables.unwrap_or_default(),
            allow_missing_vars.unwrap_or(false),
            count,
            gives_images,
        )?;
        let payload = rendered.payload;
        (name, payload.schema, payload.state, rendered.warnings)
    };
    // Images join the state as content parts ahead of its text; each is
    // checked (type, size, inline) before any read.
    let images = dgem_core::images::parts_from_json(images.as_ref())
        .map_err(ServiceError::from_schema_error)?;
    let state =
        dgem_core::images::with_images(state, images).map_err(ServiceError::from_schema_error)?;
    // The isolation rule decides, at validation, which questions are read
    // alone: it joins the raw policy, over the policy's own.
    if let (Some(rule), Some(s)) = (isolate, schema.as_object_mut()) {
        s.insert("isolate".into(), Value::from(rule.as_str()));
    }
    let (schema, injected) = dgem_cascade::inject_if_asked(&after, &schema);
    let mut schema = ValidSchema::from_value(&schema, defaults)
        .map_err(|e| ServiceError::Schema {
            policy: label.clone(),
            detail: e.to_string(),
        })?
        .with_policy(label.trim_end_matches(TEMPLATE_SUFFIX));
    if let Some(s) = samples {
        schema = schema.with_samples(s);
    }
    if let Some(l) = layout {
        schema = schema.with_layout(l);
    }

    let request_after = AfterRequest::from_options(&after, &schema)
        .map_err(ServiceError::from_schema_error)?
        .for_policy(&label, injected);
    Ok(Prepared {
        label,
        request: DecideRequest {
            schema,
            state,
            seed: seed.unwrap_or(DEFAULT_SEED),
        },
        backend: backend.filter(|b| !b.is_empty()),
        after: request_after,
        warnings,
        after_when_asked: false,
    })
}

/// A policy given inline ([`crate::InlinePolicy`]): its own post-read keys
/// cleared (they are the client's to apply), the request's post-read keys
/// checked against it, and a post-read only when they ask for one.
///
/// # Errors
/// [`ServiceError::Field`] when a post-read key names no question of the
/// policy (`expected_answers`, `abstain_below`, `abstain_above`).
fn prepare_inline(
    inline: crate::InlinePolicy,
    state: Option<Value>,
    seed: Option<i64>,
    backend: Option<String>,
    after: &dgem_cascade::AfterOptions,
) -> Result<Prepared, ServiceError> {
    let mut schema = inline.schema;
    schema.after = dgem_core::after::AfterRead::default();
    let after = AfterRequest::from_options(after, &schema)
        .map_err(ServiceError::from_schema_error)?
        .for_policy(&inline.label, Vec::new());
    Ok(Prepared {
        label: inline.label,
        request: DecideRequest {
            schema,
            state: state.unwrap_or(Value::Null),
            seed: seed.unwrap_or(DEFAULT_SEED),
        },
        backend: backend.filter(|b| !b.is_empty()),
        after,
        warnings: Vec::new(),
        after_when_asked: true,
    })
}

/// The schema and state of ad-hoc `questions` about `state` (every form
/// [`dgem_core::adhoc`] accepts: a list or a map by id, every type alias).
/// With `images` (the request gives at least one image) and no `state`, the
/// images are the state: ad-hoc questions sent with only images can be about
/// nothing else.
fn custom_policy(
    questions: Option<Value>,
    state: Option<Value>,
    instructions: Option<&str>,
    images: bool,
) -> Result<(Value, Value), ServiceError> {
    let state = match state {
        Some(s) => {
            // A blank text or an object of empty values is nothing to decide
            // on: refused here, before any read, with the check every read
            // makes.
            dgem_core::state::check_informative(&s).map_err(ServiceError::from_schema_error)?;
            s
        }
        None if images => Value::Null,
        None => {
            return Err(ServiceError::field(
                "state",
                "`state` is required with `questions`: the text or JSON object the decision is about (or give `images` when the questions are about an image)"
                    .into(),
            ))
        }
    };
    let questions = questions.unwrap_or(Value::Null);
    let list = dgem_core::adhoc::adhoc_questions(&questions)
        .map_err(|e| ServiceError::field(&e.field, format!("`{}`: {}", e.field, e.message)))?;
    let mut schema = Map::new();
    if let Some(ins) = instructions.filter(|s| !s.trim().is_empty()) {
        schema.insert("instructions".into(), Value::from(ins));
    }
    schema.insert("questions".into(), Value::Array(list));
    Ok((Value::Object(schema), state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dgem_core::schema::Isolate;
    use dgem_engine::templates::TemplateDir;
    use serde_json::json;

    fn request(isolate: Isolate) -> DecisionRequest {
        DecisionRequest {
            questions: Some(json!([
                {"id": "a", "type": "noul"},
                {"id": "b", "type": "noul"},
                {"id": "team", "type": "choice", "options": ["x", "y"]}
            ])),
            state: Some(json!("the build is red")),
            read: ReadOptions {
                isolate: Some(isolate),
                ..ReadOptions::default()
            },
            ..DecisionRequest::default()
        }
    }

    /// The rule is applied where isolation is decided, at validation: set on
    /// the validated schema afterwards it changed the wire's `isolate` but
    /// read nothing alone.
    #[test]
    fn isolate_decides_which_questions_are_read_alone() {
        let cat = Catalogue::new(TemplateDir::new("/nonexistent/dgem/templates"));
        let defaults = SchemaDefaults::default();
        let all = prepare(&cat, None, request(Isolate::All), &defaults).expect("prepares");
        assert_eq!(all.request.schema.isolated(), ["a", "b", "team"]);
        let none = prepare(&cat, None, request(Isolate::None), &defaults).expect("prepares");
        assert!(none.request.schema.isolated().is_empty());
        let auto = prepare(&cat, None, request(Isolate::Auto), &defaults).expect("prepares");
        assert_eq!(auto.request.schema.isolated(), ["a", "b"]);
    }

    /// Moved from the engine's `TemplateDir::render_checked` (now gone):
    /// with no folder, a built-in policy decides, and a request that gives
    /// none of its state variables is refused naming them.
    #[test]
    fn a_built_in_policy_without_its_state_variable_is_refused_naming_it() {
        let cat = Catalogue::new(TemplateDir::new("/nonexistent/dgem/templates"));
        let req = DecisionRequest::default();
        match prepare(&cat, None, req, &SchemaDefaults::default()) {
            Err(ServiceError::NoState(detail)) => {
                assert!(detail.contains("give at least one of [ticket]"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }

    /// Moved from the engine's `TemplateDir::render_schema` (now gone): the
    /// deployment's defaults apply where the policy sets nothing.
    #[test]
    fn the_deployment_defaults_apply_where_the_policy_sets_nothing() {
        let cat = Catalogue::new(TemplateDir::new("/nonexistent/dgem/templates"));
        let defaults = SchemaDefaults {
            samples: dgem_core::schema::SamplePolicy::Fixed { n: 3 },
            ..SchemaDefaults::default()
        };
        let p = prepare(&cat, None, request(Isolate::Auto), &defaults).expect("prepares");
        assert_eq!(
            p.request.schema.samples,
            dgem_core::schema::SamplePolicy::Fixed { n: 3 }
        );
    }
}
