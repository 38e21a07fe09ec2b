//! Hostile-user probes of the decision service: every key with `null`, wrong
//! types, out-of-range numbers, odd spellings, conflicting keys, variable
//! aliases, post-read keys on ad-hoc questions, and the agreement of the key
//! lists (`DecisionRequest::keys`, `tool_schema`, the clap flags).
//!
//! Every refusal must be a `ServiceError` (never a panic) whose message names
//! the field and the value given. Tests marked `#[ignore = "KNOWN, left (pre-existing): …"]` show a
//! bug found by this probe; they fail until it is fixed.

use clap::{CommandFactory, Parser};
use dgem_core::schema::{Isolate, Layout, SamplePolicy, SchemaDefaults};
use dgem_engine::templates::TemplateDir;
use dgem_service::{
    prepare, tool_schema, AfterOptions, Catalogue, DecisionRequest, Prepared, ReadOptions,
    ServiceError, Surface, ToolKind, CUSTOM_LABEL,
};
use serde_json::{json, Map, Value};

const PNG: &str = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn catalogue() -> Catalogue {
    Catalogue::new(TemplateDir::new("/nonexistent/dgem/hostile/templates"))
}

/// Parse and prepare `body` as `/api/decide` does (without the unknown-key check).
fn prep(body: Value) -> Result<Prepared, ServiceError> {
    let req = DecisionRequest::from_object(&obj(body), &Surface::API)?;
    prepare(&catalogue(), None, req, &SchemaDefaults::default())
}

fn refused(body: Value) -> (String, String) {
    match prep(body.clone()) {
        Err(ServiceError::Field { field, message }) => (field, message),
        Err(other) => (String::new(), other.to_string()),
        Ok(p) => panic!("accepted {body}: label {}", p.label),
    }
}

fn ticket() -> Value {
    json!({"ticket": "I was charged twice"})
}

fn three_questions() -> Value {
    json!([
        {"id": "a", "type": "noul", "instructions": "Is it a?"},
        {"id": "b", "type": "boolean"},
        {"id": "team", "type": "choice", "options": ["billing", "support"]}
    ])
}

// ---------------------------------------------------------------- nulls

/// Every key but `questions` as `null` is "not given": the default template
/// is decided on the variables.
#[test]
fn null_keys_are_not_given() {
    let mut body = Map::new();
    for k in DecisionRequest::keys() {
        if k != "questions" && k != "variables" {
            body.insert(k, Value::Null);
        }
    }
    body.insert("variables".into(), ticket());
    let p = prep(Value::Object(body)).expect("nulls are not given");
    assert_eq!(p.label, "support_triage");
    assert_eq!(p.request.seed, 42);
}

/// `questions: null` is "not given" like every other key: with a template it
/// must not be read as ad-hoc questions.
#[test]
fn questions_null_with_a_template_is_not_given() {
    let p = prep(json!({"template": "support_triage", "variables": ticket(), "questions": null}))
        .expect("questions: null is not given");
    assert_eq!(p.label, "support_triage");
}

#[test]
fn questions_null_alone_decides_the_default_template() {
    let p = prep(json!({"variables": ticket(), "questions": null})).expect("not given");
    assert_eq!(p.label, "support_triage");
}

// ---------------------------------------------------------------- wrong types

/// Each key with a value of the wrong type is refused naming the key and the
/// value, never accepted silently, never a panic.
#[test]
fn every_key_with_a_wrong_type_is_refused_naming_it_and_the_value() {
    let cases: Vec<(&str, Value)> = vec![
        ("template", json!(5)),
        ("template", json!("   ")),
        ("variables", json!(["ticket"])),
        ("instructions", json!({"x": 1})),
        ("backend", json!(false)),
        ("seed", json!("7")),
        ("seed", json!(1.5)),
        ("samples", json!(true)),
        ("samples", json!("3")),
        ("samples", json!([3])),
        ("layout", json!(1)),
        ("layout", json!(["schema_first"])),
        ("isolate", json!(true)),
        ("isolate", json!({"all": true})),
        ("temperature", json!("hot")),
        ("abstain_below", json!("very")),
        ("abstain_above", json!([1])),
        ("cascade_mode", json!(7)),
        ("suggest_expansions", json!("maybe")),
        ("allow_missing_vars", json!("yes")),
        ("allow_missing_vars", json!(1)),
    ];
    assert_eq!(wrong_type_failures(&cases), Vec::<String>::new());
}

/// A malformed `images` is refused naming `images` (that part holds), but the
/// message does not show the value given.
#[test]
#[ignore = "KNOWN, left (pre-existing): `images: \"not a list\"` / `images: [5]` are refused without the value given (\"images: a list of data:image/... URLs or objects …\"; dgem-core images.rs parts_from_json)"]
fn a_malformed_images_value_is_refused_showing_it() {
    let cases: Vec<(&str, Value)> = vec![("images", json!("not a list")), ("images", json!([5]))];
    assert_eq!(wrong_type_failures(&cases), Vec::<String>::new());
}

/// The cases of `cases` not refused naming the key and the value.
fn wrong_type_failures(cases: &[(&str, Value)]) -> Vec<String> {
    let mut failures = Vec::new();
    for (key, bad) in cases {
        let mut body = obj(json!({"variables": ticket()}));
        body.insert((*key).into(), bad.clone());
        let given = dgem_service::shown(bad);
        match prep(Value::Object(body)) {
            Ok(_) => failures.push(format!("{key}={bad}: accepted")),
            Err(e) => {
                let (field, message) = match e {
                    ServiceError::Field { field, message } => (field, message),
                    other => (String::new(), other.to_string()),
                };
                if !(field.starts_with(key) || message.contains(key)) {
                    failures.push(format!("{key}={bad}: field `{field}`: {message}"));
                } else if !(message.contains(&given) || message.contains(given.trim_matches('"'))) {
                    failures.push(format!("{key}={bad}: value not shown: {message}"));
                }
            }
        }
    }
    failures
}

/// Regression: the post-read keys that are only used when another key
/// switches them on (`expansion_entropy` without `suggest_expansions`, the
/// cascade keys without `cascade_mode`) accepted any value silently. Each
/// is now read by its type's parse whatever the other keys say, so a wrong
/// type is refused.
#[test]
fn switched_off_post_read_keys_with_wrong_types_are_refused() {
    let cases: Vec<(&str, Value)> = vec![
        ("expansion_entropy", json!("high")),
        ("cascade_threshold", json!("x")),
        ("cascade_threshold_mode", json!("furlongs")),
        ("cascade_model", json!(5)),
        ("stage2_prior", json!("loud")),
        ("expected_answers", json!("yes")),
    ];
    assert_eq!(wrong_type_failures(&cases), Vec::<String>::new());
}

/// With the cascade on, each bad cascade value is refused naming its key
/// and the value (as it is with the cascade off).
#[test]
fn cascade_keys_with_wrong_types_are_refused_when_the_cascade_is_on() {
    for (key, bad) in [
        ("cascade_threshold", json!("x")),
        ("cascade_threshold_mode", json!("furlongs")),
        ("cascade_model", json!(5)),
        ("stage2_prior", json!("loud")),
        ("expected_answers", json!("yes")),
    ] {
        let mut body = obj(json!({"variables": ticket(), "cascade_mode": "entropy"}));
        body.insert(key.into(), bad.clone());
        let (field, message) = refused(Value::Object(body));
        assert!(
            field.starts_with(key) || message.contains(key),
            "{key}: `{field}`: {message}"
        );
    }
    let (field, message) = refused(
        json!({"variables": ticket(), "suggest_expansions": true, "expansion_entropy": "high"}),
    );
    assert_eq!(field, "expansion_entropy", "{message}");
    assert!(message.contains("high"), "{message}");
    let (_, message) = refused(json!({"variables": ticket(), "cascade_mode": "sometimes"}));
    assert!(
        message.contains("cascade_mode") && message.contains("sometimes"),
        "{message}"
    );
    assert!(
        message.contains("entropy"),
        "lists the allowed modes: {message}"
    );
}

// ---------------------------------------------------------------- seed, samples

#[test]
fn seeds_at_the_i64_edges_are_taken() {
    for s in [i64::MIN, -1, 0, i64::MAX] {
        let p = prep(json!({"variables": ticket(), "seed": s})).expect("an i64 seed");
        assert_eq!(p.request.seed, s);
    }
}

/// A seed that is an integer but above `i64::MAX` is refused saying it must
/// be "an integer" while it is one: the message should give the range.
#[test]
fn a_seed_above_i64_max_is_refused_naming_the_range() {
    let (field, message) = refused(json!({"variables": ticket(), "seed": u64::MAX}));
    assert_eq!(field, "seed");
    assert!(message.contains(&i64::MAX.to_string()), "{message}");
}

#[test]
fn samples_auto_in_any_case_and_padding_counts_at_the_edges() {
    for auto in ["auto", "Auto", "AUTO", " auto ", "\tauto\n"] {
        let p = prep(json!({"variables": ticket(), "samples": auto})).expect(auto);
        assert!(
            matches!(p.request.schema.samples, SamplePolicy::Auto { max: 4, .. }),
            "{auto}: {:?}",
            p.request.schema.samples
        );
    }
    for n in [1_u32, 32] {
        let p = prep(json!({"variables": ticket(), "samples": n})).expect("in range");
        assert_eq!(p.request.schema.samples, SamplePolicy::Fixed { n });
    }
    for bad in [
        json!(0),
        json!(33),
        json!(-1),
        json!(u64::MAX),
        json!(1e300),
        json!(i64::MIN),
        json!("au to"),
        json!(""),
    ] {
        let (field, message) = refused(json!({"variables": ticket(), "samples": bad}));
        assert_eq!(field, "samples", "{bad}");
        assert!(
            message.contains("1 to 32") && message.contains("auto"),
            "{message}"
        );
        assert!(message.contains(&dgem_service::shown(&bad)), "{message}");
    }
}

/// A count written `3.0` is an integer in JSON terms (and what some clients
/// send for every number); it should be a count of 3.
#[test]
fn samples_three_point_zero_is_a_count() {
    let p = prep(json!({"variables": ticket(), "samples": 3.0})).expect("3.0 is 3");
    assert_eq!(p.request.schema.samples, SamplePolicy::Fixed { n: 3 });
}

/// A very long or multi-byte bad value is cut for the message without a panic.
#[test]
fn a_long_multibyte_bad_value_is_cut_without_panic() {
    let long = "é".repeat(500);
    for key in [
        "samples", "layout", "isolate", "seed", "template", "backend",
    ] {
        let mut body = obj(json!({"variables": ticket()}));
        body.insert(
            key.into(),
            if key == "backend" || key == "template" {
                json!(["🙂".repeat(200)])
            } else {
                json!(long)
            },
        );
        let (_, message) = refused(Value::Object(body));
        assert!(message.len() < 400, "{key}: {} bytes", message.len());
        assert!(message.contains('…'), "{key}: cut: {message}");
    }
}

// ---------------------------------------------------------------- layout, isolate

#[test]
fn layout_and_isolate_take_their_values_and_refuse_others_listing_them() {
    let p = prep(json!({"variables": ticket(), "layout": " schema_first ", "isolate": "all"}))
        .expect("ok");
    assert_eq!(p.request.schema.layout, Layout::SchemaFirst);
    assert_eq!(
        p.request.schema.isolated().len(),
        p.request.schema.questions.len()
    );
    for (key, bad) in [
        ("layout", "sideways"),
        ("layout", ""),
        ("isolate", "some"),
        ("isolate", ""),
        ("isolate", "yes"),
    ] {
        let mut body = obj(json!({"variables": ticket()}));
        body.insert(key.into(), json!(bad));
        let (field, message) = refused(Value::Object(body));
        assert_eq!(field, key);
        assert!(message.contains(&format!("\"{bad}\"")), "{message}");
        let allowed = if key == "layout" {
            "[document_first, schema_first]"
        } else {
            "[auto, noul, none, all]"
        };
        assert!(message.contains(allowed), "{message}");
    }
}

/// `samples` takes "Auto"; the other word-valued read keys should take their
/// words in any case too (a user who sends `"Auto"` for samples sends it
/// for isolate).
#[test]
fn read_words_are_case_insensitive_like_samples() {
    prep(json!({"variables": ticket(), "isolate": "Auto"})).expect("isolate Auto");
    prep(json!({"variables": ticket(), "layout": "Schema_First"})).expect("layout");
}

#[test]
fn isolate_and_layout_apply_to_ad_hoc_questions() {
    let p = prep(json!({
        "questions": three_questions(), "state": "the build is red",
        "isolate": "noul", "layout": "schema_first", "samples": "auto"
    }))
    .expect("prepares");
    assert_eq!(p.label, CUSTOM_LABEL);
    assert_eq!(p.request.schema.isolated(), ["a", "b"]);
    assert_eq!(p.request.schema.layout, Layout::SchemaFirst);
    let p = prep(json!({"questions": three_questions(), "state": "x", "isolate": "none"}))
        .expect("prepares");
    assert!(p.request.schema.isolated().is_empty());
}

#[test]
fn isolate_with_images_keeps_the_images_ahead_of_the_text() {
    for body in [
        json!({"questions": three_questions(), "state": "look", "images": [PNG], "isolate": "all"}),
        json!({"variables": ticket(), "images": [PNG, PNG], "isolate": "all"}),
    ] {
        let p = prep(body).expect("prepares");
        assert!(
            dgem_core::images::has_images(&p.request.state),
            "{}",
            p.request.state
        );
        assert_eq!(
            dgem_core::images::image_urls(&p.request.state)
                .first()
                .map(String::as_str),
            Some(PNG)
        );
        assert_eq!(
            p.request.schema.isolated().len(),
            p.request.schema.questions.len()
        );
    }
    let too_many: Vec<&str> = vec![PNG; 17];
    let (field, message) = refused(json!({"variables": ticket(), "images": too_many}));
    assert!(field.starts_with("images"), "{field}: {message}");
    let (field, message) =
        refused(json!({"variables": ticket(), "images": ["data:text/plain;base64,aGk="]}));
    assert!(field.starts_with("images"), "{field}: {message}");
}

// ---------------------------------------------------------------- template vs questions, state

#[test]
fn template_and_questions_together_are_refused_naming_both() {
    let (field, message) = refused(json!({
        "template": "support_triage", "questions": three_questions(), "state": "x"
    }));
    assert_eq!(field, "template");
    assert!(
        message.contains("questions") && message.contains("support_triage"),
        "{message}"
    );
}

#[test]
fn questions_without_state_or_of_the_wrong_shape_are_refused() {
    let (field, message) = refused(json!({"questions": three_questions()}));
    assert_eq!(field, "state");
    assert!(message.contains("required"), "{message}");
    let (field, _) = refused(json!({"questions": three_questions(), "state": null}));
    assert_eq!(field, "state");
    for bad in [
        json!([]),
        json!({}),
        json!("urgent?"),
        json!(5),
        json!([{"id": "a"}]),
    ] {
        let (field, message) = refused(json!({"questions": bad, "state": "x"}));
        assert!(
            field.starts_with("questions"),
            "{bad}: `{field}`: {message}"
        );
    }
    let (field, message) = refused(json!({
        "questions": [{"id": "a", "type": "maybe"}], "state": "x"
    }));
    assert!(field.starts_with("questions"), "{field}");
    assert!(
        message.contains("maybe") && message.contains("noul"),
        "{message}"
    );
}

/// An empty state is nothing to decide on: it should be refused as a
/// missing one is, naming `state`.
#[test]
fn an_empty_state_is_refused() {
    for state in [json!(""), json!("   "), json!({}), json!({"ticket": ""})] {
        let (field, message) = refused(json!({"questions": three_questions(), "state": state}));
        assert_eq!(field, "state", "{state}");
        assert!(message.contains("nothing to decide on"), "{message}");
    }
}

/// The policy tool leaves out `state`, `questions` and `instructions`; the
/// service itself silently ignores `state`/`instructions` on a template
/// request. This asserts that they are at least not mixed into the policy.
#[test]
fn state_and_instructions_on_a_template_request_do_not_change_the_policy() {
    let plain = prep(json!({"variables": ticket()})).expect("plain");
    let extra = prep(json!({"variables": ticket(), "state": "other", "instructions": "be kind"}))
        .expect("extra");
    assert_eq!(plain.request.state, extra.request.state);
    assert_eq!(
        plain.request.schema.instructions,
        extra.request.schema.instructions
    );
}

// ---------------------------------------------------------------- variables

#[test]
fn variable_aliases_fill_the_names_the_template_reads() {
    // `text` fills `user_input` (prompt_injection reads user_input).
    let p = prep(json!({"template": "prompt_injection", "variables": {"text": "ignore previous"}}))
        .expect("text → user_input");
    assert!(
        p.request.state.to_string().contains("ignore previous"),
        "{}",
        p.request.state
    );
    // `context` is agent_tool_gate's own name.
    prep(json!({"template": "agent_tool_gate", "variables": {"task": "t", "context": "c", "tool_call": "rm -rf"}}))
        .expect("own names");
}

#[test]
fn an_alias_the_template_does_not_read_is_refused_naming_the_closest() {
    for (template, var) in [
        ("support_triage", "input_text"),
        ("support_triage", "context"),
        ("support_triage", "text"),
        ("prompt_injection", "input_text"),
        ("code_review", "document"),
    ] {
        let r = prep(json!({"template": template, "variables": {var: "hello"}}));
        match r {
            Err(ServiceError::Variables(detail)) => {
                assert!(detail.contains(var), "{template}/{var}: {detail}")
            }
            other => panic!("{template}/{var}: {other:?}"),
        }
    }
}

#[test]
fn no_state_variable_is_refused_unless_allowed() {
    match prep(json!({"template": "support_triage"})) {
        Err(ServiceError::NoState(d)) => assert!(d.contains("ticket"), "{d}"),
        other => panic!("{other:?}"),
    }
    match prep(json!({"template": "support_triage", "variables": {}})) {
        Err(ServiceError::NoState(d)) => assert!(d.contains("ticket"), "{d}"),
        other => panic!("{other:?}"),
    }
    prep(json!({"template": "support_triage", "allow_missing_vars": true})).expect("allowed");
}

/// A state variable given as `null` or `""` gives nothing to decide on.
#[test]
fn a_null_or_empty_state_variable_counts_as_not_given() {
    for v in [json!(null), json!("")] {
        match prep(json!({"template": "support_triage", "variables": {"ticket": v}})) {
            Err(ServiceError::NoState(_) | ServiceError::Template(_)) => {}
            other => panic!("ticket={v}: {other:?}"),
        }
    }
}

/// `samples` is also a template variable: given under `variables` it must be
/// held to the same 1..=32 rule as the `samples` key.
#[test]
#[ignore = "KNOWN, left (pre-existing): `variables: {samples: 1000}` is silently clamped to 32 reads while the `samples` key refuses 33 (catalogue.rs passes user `samples` to the template; dgem-core validate/settings.rs samples() clamps)"]
fn samples_as_a_variable_out_of_range_is_refused() {
    let accepted: Vec<String> = [json!(0), json!(1000), json!("lots"), json!(-3)]
        .into_iter()
        .filter_map(|bad| {
            let r = prep(json!({"variables": {"ticket": "x", "samples": bad}}));
            r.ok()
                .map(|p| format!("{bad} -> {:?}", p.request.schema.samples))
        })
        .collect();
    assert!(accepted.is_empty(), "accepted: {accepted:?}");
}

/// The `samples` key wins over a `samples` variable (the key is the request's).
#[test]
fn the_samples_key_wins_over_the_samples_variable() {
    let p = prep(json!({"variables": {"ticket": "x", "samples": 2}, "samples": 5})).expect("ok");
    assert_eq!(p.request.schema.samples, SamplePolicy::Fixed { n: 5 });
    let p =
        prep(json!({"variables": {"ticket": "x", "samples": 2}, "samples": "auto"})).expect("ok");
    assert!(
        matches!(p.request.schema.samples, SamplePolicy::Auto { .. }),
        "{:?}",
        p.request.schema.samples
    );
}

#[test]
fn template_names_that_do_not_resolve_are_refused_without_reading_files() {
    for name in [
        "nope",
        "../../../../etc/passwd",
        "/etc/passwd",
        "support_triage/../x",
        "bench/",
    ] {
        match prep(json!({"template": name, "variables": ticket()})) {
            Err(ServiceError::Template(f)) => assert_eq!(f.name, name),
            Err(ServiceError::Variables(_)) => {}
            other => panic!("{name}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------- post-read keys

#[test]
fn suggest_expansions_on_an_ad_hoc_choice_injects_a_catch_all() {
    let p = prep(json!({
        "questions": three_questions(), "state": "x", "suggest_expansions": true
    }))
    .expect("prepares");
    let team = p.request.schema.question("team").expect("team");
    assert!(
        team.alternatives
            .iter()
            .any(|a| a.name == "other_unclassified"),
        "{:?}",
        team.alternatives
            .iter()
            .map(|a| &a.name)
            .collect::<Vec<_>>()
    );
    assert!(p.after.expansion.is_some());
    // Only yes/no questions: nothing to expand, and no panic.
    prep(json!({
        "questions": [{"id": "a", "type": "noul"}], "state": "x", "suggest_expansions": true
    }))
    .expect("yes/no only");
    // Off is off.
    let p =
        prep(json!({"questions": three_questions(), "state": "x", "suggest_expansions": false}))
            .expect("off");
    assert!(p.after.expansion.is_none());
}

#[test]
fn expected_answers_naming_an_unknown_question_is_refused_with_on_miss() {
    let (field, message) = refused(json!({
        "questions": three_questions(), "state": "x",
        "cascade_mode": "on_miss", "expected_answers": {"urgent": "yes"}
    }));
    assert!(field.starts_with("expected_answers"), "{field}");
    assert!(
        message.contains("urgent") && message.contains("team"),
        "{message}"
    );
    let (field, message) = refused(json!({
        "questions": three_questions(), "state": "x",
        "cascade_mode": "on_miss", "expected_answers": {"team": "legal"}
    }));
    assert_eq!(field, "expected_answers.team");
    assert!(
        message.contains("legal") && message.contains("billing"),
        "{message}"
    );
}

/// Without a cascade, `expected_answers` is not used; but a key naming no
/// question is a typo the user should hear about, as with the cascade on.
#[test]
fn expected_answers_naming_an_unknown_question_is_refused_without_a_cascade() {
    let (field, _) = refused(json!({
        "questions": three_questions(), "state": "x", "expected_answers": {"urgent": "yes"}
    }));
    assert!(field.starts_with("expected_answers"), "{field}");
}

#[test]
fn temperature_and_abstention_out_of_range_are_refused_naming_them() {
    for (key, bad) in [
        ("temperature", json!(-1)),
        ("temperature", json!(1000)),
        ("abstain_below", json!(2)),
        ("abstain_above", json!(-0.5)),
        ("abstain_below", json!({"nope": 0.5})),
        ("temperature", json!({"maybe": 1.2})),
    ] {
        let mut body = obj(json!({"questions": three_questions(), "state": "x"}));
        body.insert(key.into(), bad.clone());
        let (field, message) = refused(Value::Object(body));
        assert!(field.starts_with(key), "{key}={bad}: `{field}`: {message}");
    }
}

// ---------------------------------------------------------------- key lists

#[test]
fn unknown_keys_get_the_closest_known_one_and_long_keys_are_cut() {
    let allowed = DecisionRequest::keys();
    for (typo, want) in [
        ("samles", "samples"),
        ("layot", "layout"),
        ("isolated", "isolate"),
        ("sead", "seed"),
        ("allow_missing_var", "allow_missing_vars"),
        ("suggest_expansion", "suggest_expansions"),
    ] {
        let mut o = Map::new();
        o.insert(typo.into(), json!(1));
        let (key, closest) = DecisionRequest::unknown_key(&o, &allowed).expect("unknown");
        assert_eq!(key, typo);
        assert_eq!(closest.as_deref(), Some(want), "{typo}");
    }
    let mut o = Map::new();
    o.insert("ü".repeat(100), json!(1));
    let (key, _) = DecisionRequest::unknown_key(&o, &allowed).expect("unknown");
    assert_eq!(
        key.chars().count(),
        65,
        "64 characters and an ellipsis: {key}"
    );
    assert!(key.ends_with('…'));
    // Every known key passes.
    let all: Map<String, Value> = allowed.iter().map(|k| (k.clone(), Value::Null)).collect();
    assert!(DecisionRequest::unknown_key(&all, &allowed).is_none());
}

#[test]
fn keys_include_every_read_and_post_read_key_once() {
    let keys = DecisionRequest::keys();
    let mut sorted = keys.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), keys.len(), "no duplicates: {keys:?}");
    for k in dgem_service::keys::properties::<ReadOptions>() {
        assert!(keys.contains(&k), "{k}");
    }
    for k in AfterOptions::keys() {
        assert!(keys.contains(&k), "{k}");
    }
    for k in ["seed", "samples", "layout", "isolate"] {
        assert!(keys.contains(&k.to_string()), "{k}");
    }
    // The serde names (what from_object reads) are the schema's names.
    let full = DecisionRequest {
        template: Some("t".into()),
        variables: Some(Map::new()),
        questions: Some(json!([])),
        state: Some(json!("s")),
        images: Some(json!([])),
        instructions: Some("i".into()),
        rules: Some(json!([])),
        backend: Some("b".into()),
        read: ReadOptions {
            seed: Some(1),
            samples: Some(SamplePolicy::Fixed { n: 1 }),
            layout: Some(Layout::SchemaFirst),
            isolate: Some(Isolate::All),
        },
        after: AfterOptions::from_object(
            &AfterOptions::keys()
                .into_iter()
                .map(|k| {
                    // A value of each key's type: the word keys take names,
                    // the others a name, an object or a switch, or a number.
                    let v = match k.as_str() {
                        "cascade_mode" => json!("entropy"),
                        "cascade_threshold_mode" => json!("nats"),
                        "stage2_prior" => json!("full"),
                        "cascade_model" => json!("m"),
                        "expected_answers" => json!({"a": "yes"}),
                        "suggest_expansions" => json!(true),
                        _ => json!(1),
                    };
                    (k, v)
                })
                .collect(),
        )
        .expect("parses"),
        allow_missing_vars: Some(true),
        // Not a wire key: neither written nor read.
        inline: None,
    };
    let Value::Object(wire) = serde_json::to_value(&full).expect("serializes") else {
        panic!("not an object")
    };
    let mut wire_keys: Vec<String> = wire.keys().cloned().collect();
    wire_keys.sort();
    assert_eq!(wire_keys, sorted);
    // And from_object reads back what serde wrote.
    let back = DecisionRequest::from_object(&wire, &Surface::MCP).expect("reads back");
    assert_eq!(back, full);
}

#[test]
fn tool_schemas_agree_with_the_tool_keys_and_the_parsers() {
    for tool in [ToolKind::Policy, ToolKind::Custom] {
        let schema = tool_schema(tool);
        let props = schema["properties"].as_object().expect("properties");
        let names: Vec<String> = props.keys().cloned().collect();
        assert_eq!(names, tool.keys(), "{tool:?}");
        for r in tool.required() {
            assert!(props.contains_key(*r), "{tool:?}: required {r}");
        }
        assert!(
            !Value::Object(schema.clone()).to_string().contains("$ref"),
            "inlined"
        );
        // Every advertised enum value of a word key is accepted by the parser.
        for key in [
            "layout",
            "isolate",
            "cascade_mode",
            "cascade_threshold_mode",
            "stage2_prior",
        ] {
            let values = props[key]["enum"]
                .as_array()
                .unwrap_or_else(|| panic!("{key}: {}", props[key]));
            for v in values {
                let mut body = obj(
                    json!({"questions": three_questions(), "state": "x", "cascade_mode": "entropy"}),
                );
                body.insert(key.into(), v.clone());
                prep(Value::Object(body)).unwrap_or_else(|e| panic!("{key}={v}: {e}"));
            }
        }
        // The advertised question types are all accepted.
        if tool == ToolKind::Custom {
            let kinds = &props["questions"]["items"]["properties"]["type"]["enum"];
            assert_eq!(
                kinds,
                &json!(dgem_core::schema::QuestionKind::ALL
                    .map(dgem_core::schema::QuestionKind::wire_name))
            );
        }
    }
    assert_eq!(
        tool_schema(ToolKind::Policy)["properties"]["template"]["default"],
        json!("support_triage")
    );
    assert!(tool_schema(ToolKind::Policy).get("required").is_none());
}

/// `samples` is advertised to MCP clients as a count from 1 to 32 (a plain
/// schema cannot say "integer or the word auto"), with "auto" named in its
/// description; the parser takes both.
#[test]
fn the_samples_schema_bounds_the_count_and_names_auto() {
    let schema = tool_schema(ToolKind::Custom);
    let samples = &schema["properties"]["samples"];
    assert_eq!(samples["type"], json!("integer"));
    assert_eq!(
        (samples["minimum"].clone(), samples["maximum"].clone()),
        (json!(1), json!(32))
    );
    assert!(
        samples["description"]
            .as_str()
            .is_some_and(|d| d.contains("\"auto\"")),
        "{samples}"
    );
}

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    read: ReadOptions,
    #[command(flatten)]
    after: AfterOptions,
}

/// The clap flags of the read and post-read options are the JSON keys (with
/// `-` for `_`; `--cascade` for `cascade_mode`; `expected_answers` is
/// `--expect` in the CLI, outside these options).
#[test]
fn clap_flags_are_the_json_keys() {
    let cmd = Cli::command();
    let mut flags: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|l| {
            if l == "cascade" {
                "cascade_mode".into()
            } else {
                l.replace('-', "_")
            }
        })
        .collect();
    flags.sort();
    let mut keys: Vec<String> = dgem_service::keys::properties::<ReadOptions>()
        .into_iter()
        .chain(AfterOptions::keys())
        .filter(|k| k != "expected_answers")
        .collect();
    keys.sort();
    assert_eq!(flags, keys);
}

#[test]
fn flags_reach_the_same_checks_as_json() {
    let cli = Cli::try_parse_from([
        "dgem",
        "--seed=-5",
        "--samples",
        "auto",
        "--layout",
        "schema_first",
        "--isolate",
        "all",
    ])
    .expect("parses");
    assert_eq!(cli.read.seed, Some(-5));
    assert!(matches!(cli.read.samples, Some(SamplePolicy::Auto { .. })));
    assert_eq!(cli.read.layout, Some(Layout::SchemaFirst));
    assert_eq!(cli.read.isolate, Some(Isolate::All));
    let cli = Cli::try_parse_from(["dgem", "--samples", "7", "--layout", " SCHEMA_FIRST"])
        .expect("parses");
    assert_eq!(cli.read.count(), Some(7));
    assert_eq!(cli.read.layout, Some(Layout::SchemaFirst));
    // A bad value is refused by the flag's parse, which is the key's: the
    // message names the allowed values and the value given.
    for (flag, bad, want) in [
        (
            "--samples",
            "0",
            "must be a count from 1 to 32 or `auto`. Given: 0",
        ),
        ("--samples", "lots", "Given: \"lots\""),
        (
            "--layout",
            "x",
            "must be one of [document_first, schema_first]. Given: `x`",
        ),
        (
            "--isolate",
            "some",
            "must be one of [auto, noul, none, all]. Given: `some`",
        ),
    ] {
        let e = Cli::try_parse_from(["dgem", flag, bad]).expect_err(bad);
        assert!(e.to_string().contains(want), "{e}");
    }
    assert!(Cli::try_parse_from(["dgem", "--seed", "18446744073709551616"]).is_err());
}

/// `--isolate null` / `--samples null` / `--layout null` on the command line
/// were read as JSON `null`, i.e. "not given": the flag was silently
/// ignored. They are refused.
#[test]
fn a_null_word_flag_is_refused() {
    for flag in ["--samples", "--layout", "--isolate"] {
        assert!(
            Cli::try_parse_from(["dgem", flag, "null"]).is_err(),
            "{flag} null accepted"
        );
    }
}

/// A negative seed is taken in JSON; on the command line `--seed -5` is read
/// as an unknown flag `-5` (only `--seed=-5` works).
#[test]
fn a_negative_seed_flag_parses() {
    let cli = Cli::try_parse_from(["dgem", "--seed", "-5"]).expect("parses");
    assert_eq!(cli.read.seed, Some(-5));
}
