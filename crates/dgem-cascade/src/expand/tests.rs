use std::sync::Mutex;

use async_trait::async_trait;
use dgem_core::schema::SchemaDefaults;
use serde_json::json;

use super::*;
use crate::after::AfterRequest;
use crate::error::Stage2Error;
use crate::provider::Stage2Reply;
use crate::testutil::{answer, decision};

const SECOND: Duration = Duration::from_secs(1);

/// A support-ticket policy: `team` gets a catch-all injected (it has an
/// object option), `region` already has `other`.
fn raw_policy() -> Value {
    json!({
        "instructions": "Route support tickets.",
        "questions": [
            {"id": "urgent", "type": "boolean", "instructions": "Is it urgent?"},
            {"id": "team", "type": "choice", "instructions": "Which team?",
             "options": [{"name": "billing", "description": "money"}, "engineering", "sales"]},
            {"id": "region", "type": "choice", "instructions": "Which region?",
             "options": ["emea", "apac", "other"]},
            {"id": "sev", "type": "score", "levels": ["low", "mid", "high"]}
        ]
    })
}

/// The injected policy, validated, and the ids injected.
fn policy() -> (ValidSchema, Vec<String>) {
    let (raw, ids) = inject_catch_all(&raw_policy());
    let s = ValidSchema::from_value(&raw, &SchemaDefaults::default()).expect("valid schema");
    (s, ids)
}

fn opts() -> ExpansionOptions {
    ExpansionOptions::default()
}

/// A provider that answers `reply` after `delay` and records its requests.
#[derive(Debug)]
struct Fake {
    reply: Result<Value, Stage2Error>,
    delay: Duration,
    seen: Mutex<Vec<Stage2Request>>,
}

impl Fake {
    fn new(reply: Result<Value, Stage2Error>) -> Self {
        Self {
            reply,
            delay: Duration::ZERO,
            seen: Mutex::new(Vec::new()),
        }
    }

    fn requests(&self) -> Vec<Stage2Request> {
        self.seen.lock().expect("lock").clone()
    }
}

#[async_trait]
impl Stage2 for Fake {
    fn name(&self) -> &str {
        "fake"
    }

    async fn resolve(&self, req: &Stage2Request) -> Result<Stage2Reply, Stage2Error> {
        self.seen.lock().expect("lock").push(req.clone());
        tokio::time::sleep(self.delay).await;
        let slots = self.reply.clone()?;
        Ok(Stage2Reply {
            model: "big-model".into(),
            slots: slots.as_object().expect("object").clone(),
        })
    }
}

fn option_names(v: &Value, i: usize) -> Vec<Value> {
    v["questions"][i]["options"]
        .as_array()
        .expect("options")
        .clone()
}

#[test]
fn injection_keeps_the_form_and_returns_the_ids() {
    let raw = raw_policy();
    let (out, ids) = inject_catch_all(&raw);
    assert_eq!(ids, ["team"]);
    assert_eq!(raw, raw_policy(), "the input is not changed");
    assert_eq!(
        option_names(&out, 1),
        [
            json!({"name": "billing", "description": "money"}),
            json!("engineering"),
            json!("sales"),
            json!({"name": "other_unclassified", "description": CATCH_ALL_DESCRIPTION}),
        ]
    );
    // region already has `other`; boolean and score questions are untouched.
    assert_eq!(out["questions"][2], raw["questions"][2]);
    assert_eq!(out["questions"][0], raw["questions"][0]);
    assert_eq!(out["questions"][3], raw["questions"][3]);

    let (out, ids) = inject_catch_all(&json!({"questions": [
        {"id": "plain", "type": "choice", "options": ["a", "b"]},
        {"id": 7, "type": "choice", "options": ["a", "b", "c"]}
    ]}));
    assert_eq!(ids, ["plain", "7"]);
    assert_eq!(
        option_names(&out, 0),
        [json!("a"), json!("b"), json!("other_unclassified")]
    );
    assert_eq!(option_names(&out, 1).len(), 4);
}

#[test]
fn injection_sees_existing_catch_alls_and_bounds() {
    let names: Vec<String> = (0..26).map(|i| format!("o{i}")).collect();
    let raw = json!({"questions": [
        {"id": "a", "type": "choice", "options": ["x", "OTHER"]},
        {"id": "b", "type": "choice", "options": ["x", {"name": "Unknown_Region"}]},
        {"id": "c", "type": "choice", "options": ["x", "unclassified_misc"]},
        {"id": "d", "type": "choice", "options": ["x", "other_stuff"]},
        {"id": "e", "type": "choice", "options": ["x", "None_Of_The_Above"]},
        {"id": "f", "type": "choice", "options": ["x", "oos"]},
        {"id": "one", "type": "choice", "options": ["x"]},
        {"id": "max", "type": "choice", "options": names[..25]},
        {"id": "over", "type": "choice", "options": names},
        {"id": "yn", "type": "noul"},
        {"id": "lvl", "type": "score", "levels": ["1", "2"]},
        {"id": "odd", "type": "choices", "options": ["x", "y"]}
    ]});
    let (out, ids) = inject_catch_all(&raw);
    assert_eq!(ids, ["max"]);
    assert_eq!(option_names(&out, 7).len(), 26);
    for i in (0..12).filter(|i| *i != 7) {
        assert_eq!(out["questions"][i], raw["questions"][i], "question {i}");
    }
    // Not a policy: returned as is.
    assert_eq!(inject_catch_all(&json!([1])), (json!([1]), vec![]));
}

#[test]
fn catch_all_names() {
    for n in [
        "other",
        " None ",
        "Other_Unclassified",
        "unknown_x",
        "OOS",
        "unclassified_",
    ] {
        assert!(is_catch_all(n), "{n}");
    }
    for n in [
        "others",
        "otherwise",
        "not_other",
        "billing",
        "",
        "nonexistent",
    ] {
        assert!(!is_catch_all(n), "{n}");
    }
}

#[test]
fn trigger_reasons_exactly() {
    assert_eq!(
        trigger_reason("other_unclassified", 0.42, 0.2, 0.35).as_deref(),
        Some("selected catch-all \"other_unclassified\" (conf=42.0%)")
    );
    assert_eq!(
        trigger_reason("billing", 0.6, 0.41, 0.35).as_deref(),
        Some("high entropy H=0.4100 nats >= 0.35")
    );
    assert_eq!(
        trigger_reason("Other", 0.375, 0.9, 0.5).as_deref(),
        Some("selected catch-all \"Other\" (conf=37.5%) + high entropy H=0.9000 nats >= 0.50")
    );
    assert_eq!(trigger_reason("billing", 0.9, 0.2, 0.35), None);
    // At the threshold itself the slot is flagged (>=).
    assert!(trigger_reason("billing", 0.9, 0.35, 0.35).is_some());
}

#[test]
fn names_are_sanitized() {
    assert_eq!(
        sanitize_option_name("Billing / Refunds!", &[]),
        "billing_refunds"
    );
    assert_eq!(
        sanitize_option_name("Refund-Request  Flow", &[]),
        "refund_request_flow"
    );
    assert_eq!(sanitize_option_name("__a__b__", &[]), "a_b");
    assert_eq!(sanitize_option_name("Café 2", &[]), "caf_2");
    assert_eq!(sanitize_option_name("", &[]), "proposed_category");
    assert_eq!(sanitize_option_name("!!! ", &[]), "proposed_category");
    assert_eq!(
        sanitize_option_name("Billing", &["billing", "sales"]),
        "billing_new"
    );
    assert_eq!(
        sanitize_option_name("billing", &["Billing", "billing_new"]),
        "billing_new_new"
    );
    assert_eq!(fallback_name("team"), "specialized_team_extension");
}

#[tokio::test]
async fn fallback_without_a_provider() {
    let (s, injected) = policy();
    let d = decision(
        &s,
        vec![
            ("urgent", Some(vec![0.5, 0.5])),
            ("team", Some(vec![0.3, 0.02, 0.5, 0.18])),
            ("region", Some(vec![0.02, 0.01, 0.97])),
            ("sev", Some(vec![0.3, 0.4, 0.3])),
        ],
    );
    let state = json!("refund my duplicate charge");
    let out = suggest(
        &d,
        &s,
        &state,
        "support.json",
        &injected,
        &opts(),
        None,
        SECOND,
    )
    .await;
    // Boolean and score slots are never flagged, however hesitant.
    let ids: Vec<&str> = out.iter().map(|x| x.question_id.as_str()).collect();
    assert_eq!(ids, ["team", "region"]);

    let team = &out[0];
    let h = d.answers["team"]
        .as_ref()
        .expect("answered")
        .aggregate
        .entropy;
    assert_eq!(
        team.trigger_reason,
        format!("high entropy H={h:.4} nats >= 0.35")
    );
    assert_eq!(team.stage1_choice, "sales");
    assert_eq!(team.stage1_confidence, 0.5);
    assert_eq!(team.stage1_entropy, h);
    let cands: Vec<(&str, f64)> = team
        .top_candidates
        .iter()
        .map(|c| (c.name.as_str(), c.probability))
        .collect();
    assert_eq!(
        cands,
        [
            ("sales", 0.5),
            ("billing", 0.3),
            ("other_unclassified", 0.18)
        ],
        "engineering at 2% is below the 3% floor"
    );
    assert!(team.injected_catch_all);
    assert_eq!(team.source, SuggestionSource::Fallback);
    assert_eq!(team.error, None);
    assert_eq!(team.suggested_option.name, "specialized_team_extension");
    let desc = "Placeholder: no model proposed an option. Rename it after the kind of case \
                that fits none of the options of `team`.";
    assert_eq!(team.suggested_option.description, desc);
    assert_eq!(
        team.template_patch_hint,
        format!(
            "Append to support.json -> questions[id=\"team\"].options: \
             {{\"name\":\"specialized_team_extension\",\"description\":\"{desc}\"}}"
        )
    );
    let wire = serde_json::to_value(team).expect("serializes");
    assert_eq!(wire["source"], "fallback");
    assert!(wire.get("error").is_none());
    assert_eq!(
        wire["top_candidates"][0],
        json!({"name": "sales", "probability": 0.5})
    );

    let region = &out[1];
    assert_eq!(
        region.trigger_reason,
        "selected catch-all \"other\" (conf=97.0%)"
    );
    assert!(!region.injected_catch_all);
    assert_eq!(region.suggested_option.name, "specialized_region_extension");
}

#[tokio::test]
async fn candidate_floor_is_inclusive_and_ties_keep_template_order() {
    let (s, injected) = policy();
    let d = decision(&s, vec![("team", Some(vec![0.03, 0.4, 0.4, 0.17]))]);
    let out = suggest(&d, &s, &json!("x"), "t", &injected, &opts(), None, SECOND).await;
    let names: Vec<&str> = out[0]
        .top_candidates
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        names,
        ["engineering", "sales", "other_unclassified", "billing"]
    );
}

#[tokio::test]
async fn calm_slots_give_nothing_and_call_nobody() {
    let (s, injected) = policy();
    let d = decision(
        &s,
        vec![
            ("team", Some(vec![0.97, 0.01, 0.01, 0.01])),
            ("region", None),
        ],
    );
    let fake = Fake::new(Ok(json!({})));
    let out = suggest(
        &d,
        &s,
        &json!("x"),
        "t",
        &injected,
        &opts(),
        Some(&fake),
        SECOND,
    )
    .await;
    assert!(out.is_empty());
    assert!(fake.requests().is_empty());
    // A higher threshold keeps a hesitant slot calm too.
    let d = decision(&s, vec![("team", Some(vec![0.6, 0.3, 0.05, 0.05]))]);
    let high = ExpansionOptions {
        entropy: 1.5,
        ..opts()
    };
    assert!(
        suggest(&d, &s, &json!("x"), "t", &injected, &high, None, SECOND)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn stage1_reading_is_used_after_a_cascade() {
    let (s, injected) = policy();
    let mut a = answer(&s, "region", vec![0.02, 0.01, 0.97]);
    a.resolve(0, 0.9, "big-model", "Paris office.");
    let mut d = decision(&s, vec![]);
    d.answers.insert("region".into(), Some(a));
    let out = suggest(&d, &s, &json!("x"), "t", &injected, &opts(), None, SECOND).await;
    assert_eq!(out[0].stage1_choice, "other");
    assert_eq!(out[0].stage1_confidence, 0.97);
}

#[tokio::test]
async fn stage2_proposes_one_option_per_slot_in_one_call() {
    let (s, injected) = policy();
    let d = decision(
        &s,
        vec![
            ("team", Some(vec![0.6, 0.3, 0.05, 0.05])),
            ("region", Some(vec![0.1, 0.1, 0.8])),
        ],
    );
    let fake = Fake::new(Ok(json!({
        "team": {"name": "Refund Request", "description": " Money back for a charge. "},
        "region": {"name": "APAC", "description": "Asia again."}
    })));
    let o = ExpansionOptions {
        model: "gemini-pro".into(),
        ..opts()
    };
    let state = json!({"ticket": "refund my duplicate charge"});
    let out = suggest(
        &d,
        &s,
        &state,
        "support.json",
        &injected,
        &o,
        Some(&fake),
        SECOND,
    )
    .await;

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1, "one call for all flagged slots");
    let req = &reqs[0];
    assert_eq!(req.model, "gemini-pro");
    assert_eq!(req.timeout, SECOND);
    assert!(req.images.is_empty());
    let one = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "description": {"type": "string"}},
        "required": ["name", "description"],
        "additionalProperties": false
    });
    assert_eq!(
        req.response_schema,
        json!({
            "type": "object",
            "properties": {"team": one, "region": one},
            "required": ["team", "region"],
            "additionalProperties": false
        })
    );
    let p = &req.prompt;
    for part in [
        "Propose ONE new option per question",
        "Policy guidance:\nRoute support tickets.\n",
        "<<<\n{\"ticket\": \"refund my duplicate charge\"}\n>>>",
        "- team: Which team?\n  Current options: billing (money), engineering, sales, \
         other_unclassified (None of the other options fits",
        "First-stage candidates: billing 60.0%, engineering 30.0%, sales 5.0%, \
         other_unclassified 5.0%",
        "- region: Which region?\n  Current options: emea, apac, other\n",
        "Flagged because: selected catch-all \"other\" (conf=80.0%) + high entropy",
        "\"name\"",
        "\"description\"",
    ] {
        assert!(p.contains(part), "prompt lacks {part:?}:\n{p}");
    }

    assert_eq!(out.len(), 2);
    assert_eq!(out[0].source, SuggestionSource::Stage2);
    assert_eq!(out[0].error, None);
    assert_eq!(
        out[0].suggested_option,
        SuggestedOption {
            name: "refund_request".into(),
            description: "Money back for a charge.".into(),
        }
    );
    assert_eq!(
        out[0].template_patch_hint,
        "Append to support.json -> questions[id=\"team\"].options: \
         {\"name\":\"refund_request\",\"description\":\"Money back for a charge.\"}"
    );
    // A proposal that repeats an existing option is renamed.
    assert_eq!(out[1].suggested_option.name, "apac_new");
    assert_eq!(
        serde_json::to_value(&out[1]).expect("wire")["source"],
        "stage2"
    );
}

#[tokio::test]
async fn a_failed_call_falls_back_with_its_error() {
    let (s, injected) = policy();
    let d = decision(&s, vec![("team", Some(vec![0.6, 0.3, 0.05, 0.05]))]);
    let fake = Fake::new(Err(Stage2Error::Status {
        provider: "fake".into(),
        model: "m".into(),
        status: 503,
        body: "busy".into(),
    }));
    let out = suggest(
        &d,
        &s,
        &json!("x"),
        "t",
        &injected,
        &opts(),
        Some(&fake),
        SECOND,
    )
    .await;
    assert_eq!(out[0].source, SuggestionSource::Fallback);
    assert_eq!(out[0].suggested_option.name, "specialized_team_extension");
    assert_eq!(
        out[0].error.as_deref(),
        Some("fake: model m answered HTTP 503: busy")
    );
    let wire = serde_json::to_value(&out[0]).expect("wire");
    assert_eq!(wire["error"], "fake: model m answered HTTP 503: busy");
}

#[tokio::test(start_paused = true)]
async fn a_late_call_falls_back() {
    let (s, injected) = policy();
    let d = decision(&s, vec![("team", Some(vec![0.6, 0.3, 0.05, 0.05]))]);
    let mut fake = Fake::new(Ok(json!({"team": {"name": "late", "description": ""}})));
    fake.delay = Duration::from_secs(5);
    let out = suggest(
        &d,
        &s,
        &json!("x"),
        "t",
        &injected,
        &opts(),
        Some(&fake),
        SECOND,
    )
    .await;
    assert_eq!(out[0].source, SuggestionSource::Fallback);
    assert_eq!(
        out[0].error.as_deref(),
        Some("stage-2 call timed out after 1000 ms (deadline)")
    );
}

#[tokio::test]
async fn a_missing_or_malformed_slot_falls_back_alone() {
    let (s, injected) = policy();
    let d = decision(
        &s,
        vec![
            ("team", Some(vec![0.6, 0.3, 0.05, 0.05])),
            ("region", Some(vec![0.1, 0.1, 0.8])),
        ],
    );
    let fake = Fake::new(Ok(json!({"team": {"name": 3}})));
    let out = suggest(
        &d,
        &s,
        &json!("x"),
        "t",
        &injected,
        &opts(),
        Some(&fake),
        SECOND,
    )
    .await;
    assert_eq!(out[0].source, SuggestionSource::Fallback);
    assert_eq!(
        out[0].error.as_deref(),
        Some("stage-2 option must be an object with a string `name`, got {\"name\":3}")
    );
    assert_eq!(out[1].source, SuggestionSource::Fallback);
    assert_eq!(
        out[1].error.as_deref(),
        Some("stage-2 proposed no option for this slot")
    );
    // A name with nothing usable left still makes an option.
    let fake = Fake::new(Ok(json!({
        "team": {"name": "???", "description": "d"},
        "region": {"name": "latam", "description": "d"}
    })));
    let out = suggest(
        &d,
        &s,
        &json!("x"),
        "t",
        &injected,
        &opts(),
        Some(&fake),
        SECOND,
    )
    .await;
    assert_eq!(out[0].suggested_option.name, "proposed_category");
    assert_eq!(out[0].source, SuggestionSource::Stage2);
}

fn read(v: Value) -> Result<Option<ExpansionOptions>, dgem_core::SchemaError> {
    crate::AfterOptions::from_object(v.as_object().expect("object")).map(|keys| keys.expansion())
}

#[test]
fn options_are_read() {
    for off in [
        json!({}),
        json!({"suggest_expansions": null}),
        json!({"suggest_expansions": false}),
        json!({"suggest_expansions": "0"}),
        json!({"suggest_expansions": " False "}),
    ] {
        assert_eq!(read(off.clone()), Ok(None), "{off}");
    }
    for on in [
        json!({"suggest_expansions": true}),
        json!({"suggest_expansions": "1"}),
        json!({"suggest_expansions": "TRUE"}),
        json!({"suggest_expansions": true, "expansion_entropy": null}),
    ] {
        assert_eq!(read(on.clone()), Ok(Some(opts())), "{on}");
    }
    let o = read(json!({"suggest_expansions": true, "expansion_entropy": 0.5}))
        .expect("ok")
        .expect("on");
    assert_eq!(o.entropy, 0.5);
    assert_eq!(o.model, "");
}

#[test]
fn option_errors_name_the_key_the_allowed_values_and_the_value() {
    let err = |v: Value| read(v).expect_err("invalid").message;
    assert_eq!(
        err(json!({"suggest_expansions": "yes"})),
        "`suggest_expansions` must be true or false (or one of \"true\", \"1\", \"false\", \"0\"). Given: \"yes\""
    );
    assert_eq!(
        err(json!({"suggest_expansions": 1})),
        "`suggest_expansions` must be true or false (or one of \"true\", \"1\", \"false\", \"0\"). Given: 1"
    );
    for (bad, shown) in [
        (json!(0), "0"),
        (json!(-1.5), "-1.5"),
        (json!("0.5"), "\"0.5\""),
    ] {
        assert_eq!(
            err(json!({"suggest_expansions": true, "expansion_entropy": bad})),
            format!("`expansion_entropy` must be a number of nats above 0 (absent uses 0.35). Given: {shown}")
        );
    }
    // A bad entropy is refused with expansion off too, as every post-read
    // key is checked whether or not it is used.
    assert!(
        err(json!({"suggest_expansions": false, "expansion_entropy": "nonsense"}))
            .starts_with("`expansion_entropy` must be")
    );
}

#[test]
fn after_request_reads_the_expansion_keys() {
    let (s, _) = policy();
    let obj = json!({"suggest_expansions": true, "expansion_entropy": 0.6});
    let h = AfterRequest::from_object(obj.as_object().expect("object"), &s).expect("valid");
    assert_eq!(h.expansion.as_ref().map(|e| e.entropy), Some(0.6));
    assert!(h.is_empty(), "run_after has nothing to do for expansion");
    let bad = json!({"suggest_expansions": "maybe"});
    let e = AfterRequest::from_object(bad.as_object().expect("object"), &s).expect_err("invalid");
    assert_eq!(e.field, "suggest_expansions");
    assert!(e.message.contains("Given: \"maybe\""), "{}", e.message);
    let none = AfterRequest::from_object(&Map::new(), &s).expect("valid");
    assert_eq!(none.expansion, None);
}
