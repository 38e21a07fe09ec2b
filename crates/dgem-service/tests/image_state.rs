//! An image is a state (`dgem_core::image_state`): a policy that reads images
//! decides on an image given with the request even when none of its text
//! state variables is given, without sending their placeholder text as fact;
//! a text policy keeps its refusal; a policy that reads images given neither
//! is refused naming both.

use dgem_core::schema::SchemaDefaults;
use dgem_engine::templates::TemplateDir;
use dgem_service::{prepare, Catalogue, DecisionRequest, ServiceError};
use serde_json::{json, Value};

const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// A detection policy: its questions are about the photo, its one text
/// variable is optional context with a placeholder.
const DETECTION: &str = r#"{"schema": {"questions": [
  {"id": "forklift", "type": "boolean", "instructions": "Is a forklift visible in the photo?"},
  {"id": "hazard", "type": "choice", "options": ["none", "spill", "blocked_exit"]}
]},
"state": {"scene_description": {{ default "No description of the scene was given." .scene_description | toJson }}, "site": {{ default "unknown site" .site | toJson }}}}"#;

/// The same policy flagged with `requires_image`, and no image word.
const FLAGGED: &str = r#"{"schema": {"requires_image": true, "questions": [
  {"id": "ok", "type": "boolean"}
]},
"state": {{ default "No notes." .notes | toJson }}}"#;

/// A text policy.
const TEXT: &str = r#"{"schema": {"questions": [{"id": "urgent", "type": "boolean"}]},
"state": {"ticket": {{ default "No ticket text was provided." .ticket | toJson }}}}"#;

fn decide(
    name: &str,
    text: &str,
    vars: Value,
    images: bool,
) -> Result<dgem_service::Prepared, ServiceError> {
    let cat = Catalogue::new(TemplateDir::new("/nonexistent/dgem/templates"))
        .with_policy_text(name, text);
    let req = DecisionRequest {
        template: Some(name.to_owned()),
        variables: vars.as_object().cloned(),
        images: images.then(|| json!([PNG])),
        ..DecisionRequest::default()
    };
    prepare(&cat, None, req, &SchemaDefaults::default())
}

fn text_parts(state: &Value) -> Vec<String> {
    state
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn an_image_stands_in_for_the_state_of_a_policy_that_reads_images() {
    let p = decide("detect", DETECTION, json!({}), true).expect("the image is the state");
    // The state is the image alone: both variables were left at their
    // placeholders, so neither placeholder is sent.
    let state = &p.request.state;
    assert_eq!(state.as_array().map(Vec::len), Some(1), "{state}");
    assert_eq!(state[0]["type"], "image_url");
    assert!(!state.to_string().contains("No description"), "{state}");
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    let w = &p.warnings[0];
    assert!(
        w.contains("`scene_description`") && w.contains("`site`") && w.contains("left out"),
        "{w}"
    );
}

#[test]
fn given_context_is_kept_and_only_the_unset_placeholders_are_dropped() {
    // `site` given, `scene_description` not: with an image, the unset one's
    // placeholder is left out and the given context kept.
    let p = decide("detect", DETECTION, json!({"site": "Dock 4"}), true).expect("decides");
    let texts = text_parts(&p.request.state);
    assert_eq!(texts.len(), 1);
    assert!(texts[0].contains("Dock 4"), "{texts:?}");
    assert!(!texts[0].contains("No description"), "{texts:?}");
    assert_eq!(p.warnings.len(), 1);
    assert!(
        p.warnings[0].contains("`scene_description`"),
        "{:?}",
        p.warnings
    );
    assert!(!p.warnings[0].contains("`site`"), "{:?}", p.warnings);
    // Without an image the same request is a text request: `site` is state
    // enough, and the placeholder is what the policy says it is.
    let p = decide("detect", DETECTION, json!({"site": "Dock 4"}), false).expect("decides");
    assert!(p.warnings.is_empty());
    assert!(p.request.state.to_string().contains("No description"));
}

#[test]
fn a_text_policy_whose_variable_sounds_like_an_image_keeps_its_refusal() {
    let scan = r#"{"schema": {"questions": [{"id": "clean", "type": "boolean",
      "instructions": "Did the security scan find nothing?"}]},
      "state": {"scan_output": {{ default "No scan output." .scan_output | toJson }}}}"#;
    for images in [false, true] {
        match decide("scan", scan, json!({}), images) {
            Err(ServiceError::NoState(d)) => assert_eq!(
                d,
                "template `scan` needs its state: give at least one of [scan_output]; without one it would decide on its placeholder text"
            ),
            other => panic!("images {images}: {other:?}"),
        }
    }
}

#[test]
fn requires_image_marks_a_policy_that_reads_images() {
    let p = decide("flagged", FLAGGED, json!({}), true).expect("the image is the state");
    assert!(!p.request.state.to_string().contains("No notes"));
    assert!(p.warnings[0].contains("`notes`"), "{:?}", p.warnings);
    assert!(
        p.warnings[0].contains("`state`"),
        "the whole text state: {:?}",
        p.warnings
    );
}

#[test]
fn a_policy_that_reads_images_given_neither_is_refused_naming_both() {
    match decide("detect", DETECTION, json!({}), false) {
        Err(ServiceError::NoState(d)) => {
            assert!(d.contains("give an image"), "{d}");
            assert!(d.contains("scene_description") && d.contains("site"), "{d}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_text_policy_keeps_its_refusal_with_or_without_an_image() {
    for images in [false, true] {
        match decide("text", TEXT, json!({}), images) {
            Err(ServiceError::NoState(d)) => {
                assert!(d.contains("give at least one of [ticket]"), "{d}");
                assert!(!d.contains("image"), "{d}");
            }
            other => panic!("images {images}: {other:?}"),
        }
    }
}

#[test]
fn a_variable_the_questions_read_cannot_be_stood_in_for() {
    let asks = r#"{"schema": {"questions": [{"id": "match", "type": "boolean",
      "instructions": {{ printf "Does the photo show %s?" (default "the item" .item) | toJson }}}]},
      "state": {"item": {{ default "" .item | toJson }}}}"#;
    match decide("asks", asks, json!({}), true) {
        Err(ServiceError::NoState(d)) => assert!(d.contains("questions read [item]"), "{d}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn ad_hoc_questions_with_only_images_are_read_on_the_images() {
    let cat = Catalogue::new(TemplateDir::new("/nonexistent/dgem/templates"));
    let req = DecisionRequest {
        questions: Some(json!([{"id": "damaged", "type": "boolean"}])),
        images: Some(json!([PNG])),
        ..DecisionRequest::default()
    };
    let p = prepare(&cat, None, req, &SchemaDefaults::default()).expect("images alone");
    assert_eq!(p.request.state.as_array().map(Vec::len), Some(1));
    // Without images, `state` is still required.
    let req = DecisionRequest {
        questions: Some(json!([{"id": "damaged", "type": "boolean"}])),
        ..DecisionRequest::default()
    };
    match prepare(&cat, None, req, &SchemaDefaults::default()) {
        Err(ServiceError::Field { field, .. }) => assert_eq!(field, "state"),
        other => panic!("{other:?}"),
    }
}
