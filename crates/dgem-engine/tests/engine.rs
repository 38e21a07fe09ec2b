//! End-to-end engine tests on the scripted backend of `dgem-testkit`: the
//! numbers that come out are fixed by the script, so they are asserted exactly.

use std::sync::Arc;

use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{CalibrationMode, DecideError, DecideRequest, Engine, EngineConfig};
use dgem_testkit::{scripts, ScriptedBackend, SlotContext};
use serde_json::json;

fn schema(v: serde_json::Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
}

fn triage() -> serde_json::Value {
    json!({"questions": [
        {"id": "urgent", "type": "boolean"},
        {"id": "team", "type": "choice", "options": ["billing", "support", "engineering"]}
    ]})
}

/// `scripts::favour` with half of the vocabulary mass left off the labels, so
/// `label_mass` has a known value (0.5).
fn favour(word: &'static str, p: f64) -> impl Fn(&SlotContext) -> Vec<f64> + Send + Sync {
    let f = scripts::favour(word, p);
    move |ctx| f(ctx).into_iter().map(|x| x * 0.5).collect()
}

fn engine(backend: Arc<ScriptedBackend>, calibration: CalibrationMode) -> Engine {
    Engine::new(
        backend,
        EngineConfig {
            calibration,
            ..EngineConfig::default()
        },
    )
}

#[tokio::test]
async fn answers_follow_the_script_exactly() {
    let b = ScriptedBackend::with_context(4096, favour("engineering", 0.7));
    let d = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: schema(triage()),
            state: json!({"ticket": "down"}),
            seed: 42,
        })
        .await
        .expect("decision");
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "engineering");
    assert!((team.aggregate.confidence - 0.7).abs() < 1e-9);
    let urgent = d.answers["urgent"].as_ref().expect("answered");
    assert!(
        (urgent.aggregate.mean[0] - 0.5).abs() < 1e-9,
        "no preference → 50/50"
    );
    assert!((urgent.aggregate.normalized_entropy - 1.0).abs() < 1e-9);
    // Label tokens only by default: no label_mass without the full vocabulary.
    assert_eq!(d.diagnostics.questions["team"].label_mass, None);
    assert_eq!(d.diagnostics.questions["team"].argmax_is_label, None);
    assert_eq!(d.diagnostics.slot_reading.as_str(), "cloze");
    assert_eq!(d.diagnostics.label_mode.as_str(), "words");
    assert_eq!(d.diagnostics.calibration, None);
}

#[tokio::test]
async fn vocab_diagnostics_add_label_mass_and_keep_the_answer_bits() {
    let read = |vocab_diagnostics: bool| async move {
        let b = ScriptedBackend::with_context(4096, favour("engineering", 0.7));
        Engine::new(
            b,
            EngineConfig {
                calibration: CalibrationMode::Off,
                vocab_diagnostics,
                ..EngineConfig::default()
            },
        )
        .decide(DecideRequest {
            schema: schema(triage()),
            state: json!({"ticket": "down"}),
            seed: 42,
        })
        .await
        .expect("decision")
    };
    let (plain, full) = (read(false).await, read(true).await);
    // label_mass: the script puts half of the vocabulary mass on the labels.
    let q = &full.diagnostics.questions["team"];
    assert!((q.label_mass.expect("asked for") - 0.5).abs() < 1e-9);
    assert_eq!(q.argmax_is_label, Some(true));
    assert_eq!(q.entropy, vec![3.0], "the script's vocabulary entropy");
    for id in ["team", "urgent"] {
        let (a, b) = (plain.answers[id].as_ref(), full.answers[id].as_ref());
        assert_eq!(
            a.map(|a| &a.aggregate.mean),
            b.map(|b| &b.aggregate.mean),
            "{id}: the same bits with and without the vocabulary"
        );
    }
}

#[tokio::test]
async fn permuted_samples_map_back_to_original_options() {
    let b = ScriptedBackend::with_context(4096, favour("support", 0.6));
    let mut s = triage();
    s["samples"] = json!(4);
    let d = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: schema(s),
            state: json!("x"),
            seed: 7,
        })
        .await
        .expect("decision");
    let team = d.answers["team"].as_ref().expect("answered");
    assert_eq!(team.answer_name(), "support");
    assert_eq!(team.aggregate.agreement, Some(1.0));
    assert!(team.aggregate.stderr.expect("n>1").abs() < 1e-9);
    // One part per question: a causal read reads each question apart.
    let parts = &d.diagnostics.samples.parts;
    assert_eq!(parts.len(), 2);
    for part in parts {
        assert_eq!(part.n, 4);
        assert_eq!(part.tops.len(), 4);
    }
}

#[tokio::test]
async fn calibration_removes_a_constant_preference() {
    // The model always prefers billing 0.6 / support 0.3 / engineering 0.1, whatever
    // the state: calibration divides that out and leaves a uniform answer.
    let script = |ctx: &SlotContext| -> Vec<f64> {
        let pref = [
            ("billing", 0.6),
            ("support", 0.3),
            ("engineering", 0.1),
            ("yes", 0.8),
            ("no", 0.2),
        ];
        ctx.labels
            .iter()
            .map(|l| pref.iter().find(|(w, _)| w == l).map_or(0.01, |(_, p)| *p))
            .collect()
    };
    let b = ScriptedBackend::with_context(4096, script);
    let d = engine(b.clone(), CalibrationMode::On)
        .decide(DecideRequest {
            schema: schema(triage()),
            state: json!("anything"),
            seed: 42,
        })
        .await
        .expect("decision");
    let team = d.answers["team"].as_ref().expect("answered");
    for p in &team.aggregate.mean {
        assert!(
            (p - 1.0 / 3.0).abs() < 1e-9,
            "calibrated distribution is uniform: {p}"
        );
    }
    let raw = d.diagnostics.questions["team"]
        .uncalibrated
        .as_ref()
        .expect("raw kept");
    assert!((raw[0] - 0.6).abs() < 1e-9);
    assert_eq!(
        d.diagnostics
            .calibration
            .as_ref()
            .and_then(|c| c.contextual.as_ref())
            .map(Vec::len),
        Some(3)
    );
}

#[tokio::test]
async fn calibration_priors_are_cached_between_decisions() {
    let b = ScriptedBackend::with_context(4096, favour("billing", 0.5));
    let e = engine(b.clone(), CalibrationMode::On);
    let req = DecideRequest {
        schema: schema(triage()),
        state: json!("one"),
        seed: 42,
    };
    e.decide(req.clone()).await.expect("first");
    let after_first = b.calls();
    let mut second = req;
    second.state = json!("two");
    let d = e.decide(second).await.expect("second");
    // One real read per question (each is read apart), no calibration read.
    assert_eq!(b.calls() - after_first, 2, "only the real reads run");
    assert_eq!(d.diagnostics.timing.calibration_ms, 0.0);
}

#[tokio::test]
async fn ask_if_skips_and_later_stage_sees_prefill() {
    let b = ScriptedBackend::with_context(4096, favour("no", 0.9));
    let s = schema(json!({"questions": [
        {"id": "breach", "type": "boolean"},
        {"id": "action", "type": "choice", "options": ["revoke", "monitor"],
         "ask_if": {"breach": ["yes"]}}
    ]}));
    let d = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: s,
            state: json!("alert"),
            seed: 42,
        })
        .await
        .expect("decision");
    assert_eq!(
        d.answers["breach"]
            .as_ref()
            .expect("answered")
            .answer_name(),
        "no"
    );
    assert!(d.answers["action"].is_none());
    let skip = &d.diagnostics.skipped["action"];
    assert_eq!(skip.because, "breach");
    assert_eq!(skip.was.as_deref(), Some("no"));
    assert_eq!(skip.wanted, ["yes"]);
    let env = d.envelope();
    assert!(env["answers"]["action"].is_null());
}

#[tokio::test]
async fn state_longer_than_context_is_a_user_error() {
    let b = ScriptedBackend::with_context(32, favour("yes", 0.9));
    let err = engine(b, CalibrationMode::Off)
        .decide(DecideRequest {
            schema: schema(triage()),
            state: json!("a long state ".repeat(20)),
            seed: 42,
        })
        .await
        .expect_err("too long");
    assert!(err.is_user_error());
    assert!(matches!(err, DecideError::Schema(ref s) if s.field == "state"));
    assert!(err.to_string().contains("the context holds 32"));
}

/// Found by a hostile-input run: a 7 MiB state was tokenized in full (11.9 s
/// of CPU) before the context check refused it. A state that cannot fit is
/// refused before any tokenizing or model call.
#[tokio::test]
async fn state_too_large_for_the_context_is_refused_before_reading() {
    let backend = ScriptedBackend::with_context(100, scripts::want_marker(0.8));
    let e = dgem_testkit::engine(backend.clone());
    let schema = schema(json!({"questions": [{"id": "urgent", "type": "boolean"}]}));
    let err = e
        .decide(DecideRequest {
            schema,
            state: json!("x".repeat(100 * dgem_engine::MAX_STATE_BYTES_PER_TOKEN + 1)),
            seed: 42,
        })
        .await
        .expect_err("refused");
    assert!(err.is_user_error(), "{err}");
    assert!(err.to_string().contains("the state is 6401 bytes"), "{err}");
    assert_eq!(backend.calls(), 0);
}

/// Regression: `think` was silently ignored by the embedded engine, so a
/// caller who asked for a thought budget got an answer read without one and
/// no word about it. It is a user error naming `think` now, before any read.
#[tokio::test]
async fn think_on_an_engine_that_cannot_think_is_refused() {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let e = dgem_testkit::engine(backend.clone());
    let err = e
        .decide(DecideRequest {
            schema: schema(
                json!({"questions": [{"id": "urgent", "type": "boolean"}], "think": 64}),
            ),
            state: json!("a case"),
            seed: 42,
        })
        .await
        .expect_err("refused");
    assert!(err.is_user_error(), "{err}");
    assert!(
        matches!(err, DecideError::Schema(ref s) if s.field == "think"),
        "{err}"
    );
    assert!(err.to_string().contains("Given: `64`"), "{err}");
    assert_eq!(backend.calls(), 0);
    // think 0 (the default) decides as before.
    e.decide(DecideRequest {
        schema: schema(json!({"questions": [{"id": "urgent", "type": "boolean"}], "think": 0})),
        state: json!("a case"),
        seed: 42,
    })
    .await
    .expect("decides");
}

/// Issue 27 item 6: with `think_optional` the engine that cannot think
/// answers without the thought and says so in `diagnostics.warnings`,
/// instead of refusing; the envelope carries the warning.
#[tokio::test]
async fn think_optional_answers_without_thinking_and_warns() {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let e = dgem_testkit::engine(backend.clone());
    let d = e
        .decide(DecideRequest {
            schema: schema(json!({"questions": [{"id": "urgent", "type": "boolean"}],
                                  "think": 64, "think_optional": true})),
            state: json!("a case"),
            seed: 42,
        })
        .await
        .expect("decides without the thought");
    assert!(d.answers["urgent"].is_some());
    assert_eq!(
        d.diagnostics.warnings,
        [dgem_engine::think_skipped(64)],
        "{:?}",
        d.diagnostics.warnings
    );
    assert_eq!(
        d.envelope()["diagnostics"]["warnings"][0],
        "think: this engine cannot think before answering, so the thought budget of 64 tokens was not used (`think_optional` is set); the answers were read straight from the prompt"
    );
    // No thought asked, no warning, and no `warnings` key in the envelope.
    let d = e
        .decide(DecideRequest {
            schema: schema(json!({"questions": [{"id": "urgent", "type": "boolean"}],
                                  "think_optional": true})),
            state: json!("a case"),
            seed: 42,
        })
        .await
        .expect("decides");
    assert!(d.diagnostics.warnings.is_empty());
    assert!(d.envelope()["diagnostics"].get("warnings").is_none());
}

/// Issue 27 item 6: a policy that declares `requires_image` decided on a
/// text state with no word about the missing image. It is a user error on
/// `images` now, before any read.
#[tokio::test]
async fn a_policy_that_requires_an_image_refuses_a_state_without_one() {
    let backend = ScriptedBackend::new(scripts::want_marker(0.8));
    let e = dgem_testkit::engine(backend.clone());
    let err = e
        .decide(DecideRequest {
            schema: schema(json!({"requires_image": true,
                                  "questions": [{"id": "damaged", "type": "boolean"}]}))
            .with_policy("parcel_photo"),
            state: json!({"note": "the parcel"}),
            seed: 42,
        })
        .await
        .expect_err("refused");
    assert!(err.is_user_error(), "{err}");
    assert!(
        matches!(err, DecideError::Schema(ref s) if s.field == "images"),
        "{err}"
    );
    assert!(
        err.to_string().starts_with(
            "images: policy `parcel_photo` declares `requires_image: true`, but the state holds no image"
        ),
        "{err}"
    );
    assert_eq!(backend.calls(), 0);
}

/// A model's own layout (`EngineConfig::model_layout`, from its catalogue
/// entry) applies to a policy that states none, and never over a stated one.
#[tokio::test]
async fn the_model_layout_applies_only_where_no_one_stated_one() {
    use dgem_core::schema::Layout;
    let b = ScriptedBackend::new(scripts::favour("billing", 0.7));
    let e = Engine::new(
        b,
        EngineConfig {
            calibration: CalibrationMode::Off,
            model_layout: Some(Layout::SchemaFirst),
            ..EngineConfig::default()
        },
    );
    let decide = |v: serde_json::Value| {
        let s = schema(v);
        let e = &e;
        async move {
            e.decide(DecideRequest {
                schema: s,
                state: json!("my invoice is wrong"),
                seed: 42,
            })
            .await
            .expect("decision")
            .diagnostics
            .layout
        }
    };
    assert_eq!(decide(triage()).await, Layout::SchemaFirst);
    let mut stated = triage();
    stated["layout"] = json!("document_first");
    assert_eq!(decide(stated).await, Layout::DocumentFirst);
    let overridden = schema(triage()).with_layout(Layout::DocumentFirst);
    let d = e
        .decide(DecideRequest {
            schema: overridden,
            state: json!("my invoice is wrong"),
            seed: 42,
        })
        .await
        .expect("decision");
    assert_eq!(d.diagnostics.layout, Layout::DocumentFirst);
}
