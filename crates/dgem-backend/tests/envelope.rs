//! `Decision::from_envelope`: the envelope a decision writes reads back to the
//! same decision, and a reply that does not answer the request is refused.

use dgem_backend::{DecideError, Decision};
use dgem_core::envelope::{ChunkPromptUsed, Scoring, SlotReading};
use dgem_core::labels::LabelMode;
use dgem_core::readout::SlotRead;
use dgem_core::schema::{SamplePolicy, SchemaDefaults, ValidSchema};
use dgem_core::walk::{policy_json, GroupReads, ReaderFacts, Walk};
use serde_json::{json, Value};

fn schema() -> ValidSchema {
    ValidSchema::from_value(
        &json!({"questions": [
            {"id": "urgent", "type": "noul"},
            {"id": "team", "type": "choice", "options": ["billing", "support"]},
            {"id": "refund", "type": "noul", "ask_if": {"urgent": ["yes"]}}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid")
}

fn read(p: Vec<f64>) -> SlotRead {
    SlotRead {
        probs: p,
        label_mass: Some(0.4),
        entropy: 2.5,
        argmax_is_label: Some(true),
    }
}

fn decision(s: &ValidSchema) -> Decision {
    let mut walk = Walk::new();
    let stages = dgem_core::stages::schedule(s).expect("stages");
    let asked = walk.ask(s, &stages[0]);
    walk.absorb(
        GroupReads {
            questions: asked.iter().map(|q| (*q).clone()).collect(),
            labels: asked
                .iter()
                .map(|q| q.alternatives.iter().map(|a| a.name.clone()).collect())
                .collect(),
            reads: vec![
                vec![read(vec![0.3, 0.7]), read(vec![0.6, 0.4])],
                vec![read(vec![0.1, 0.9]), read(vec![0.8, 0.2])],
            ],
            pos: vec![12, 30],
            scoring: vec![Scoring::FirstToken, Scoring::Sequence],
            uncalibrated: vec![None, None],
            order_reads: vec![Vec::new(), Vec::new()],
            order_prior: false,
            policy: policy_json(SamplePolicy::Fixed { n: 2 }, false, &[]),
            thought: None,
            queue_ms: 1.0,
            forward_ms: 5.0,
            calibration_ms: 0.0,
            prompt_tokens: 40,
            cached_tokens: 8,
            rows: 4,
        },
        s.format,
    );
    assert!(walk.ask(s, &stages[1]).is_empty(), "urgent said no");
    let (answers, diagnostics) = walk.finish(
        s,
        ReaderFacts {
            restated: false,
            prompt_wording: None,
            runtime: "test".into(),
            model: "m".into(),
            model_sha256: Some("abc".into()),
            label_mode: LabelMode::Words,
            slot_reading: SlotReading::Cloze,
            constrained: false,
            calibration: None,
            chained: true,
            prefix_thought: None,
            state_tokens: 9,
        },
    );
    Decision {
        answers,
        diagnostics,
    }
}

fn refused(envelope: &Value) -> String {
    match Decision::from_envelope(&schema(), envelope) {
        Err(DecideError::Backend(e)) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_envelope_reads_back_to_the_same_decision() {
    let s = schema();
    let d = decision(&s);
    let back = Decision::from_envelope(&s, &d.envelope()).expect("reads back");
    assert_eq!(
        back.diagnostics, d.diagnostics,
        "every diagnostics key kept"
    );
    assert_eq!(back.diagnostics.chunk_prompt, ChunkPromptUsed::Full);
    assert_eq!(
        back.diagnostics.questions["team"].scoring,
        Scoring::Sequence
    );
    assert_eq!(back.answers.len(), 3);
    assert!(back.answers["refund"].is_none());
    for id in ["urgent", "team"] {
        let (a, b) = (
            d.answers[id].as_ref().expect("a"),
            back.answers[id].as_ref().expect("b"),
        );
        assert_eq!(a.answer_name(), b.answer_name());
        for (x, y) in a.aggregate.mean.iter().zip(&b.aggregate.mean) {
            assert!((x - y).abs() < 1e-12);
        }
        assert_eq!(a.aggregate.agreement, b.aggregate.agreement);
        assert_eq!(a.aggregate.stderr, b.aggregate.stderr);
    }
    assert_eq!(back.envelope(), d.envelope());
}

#[test]
fn a_reply_that_does_not_answer_the_request_is_refused() {
    let ok = decision(&schema()).envelope();
    let mut other_ids = ok.clone();
    other_ids["answers"] = json!({"something": {"probabilities": {"yes": 1.0, "no": 0.0}}});
    assert!(refused(&other_ids).contains("`answers.urgent`: no answer"));
    let mut negative = ok.clone();
    negative["answers"]["team"]["probabilities"] = json!({"billing": -0.2, "support": 1.2});
    assert!(refused(&negative)
        .contains("`answers.team.probabilities.billing`: must be a number in [0, 1]"));
    let mut half = ok.clone();
    half["answers"]["team"]["probabilities"] = json!({"billing": 0.25, "support": 0.25});
    assert!(refused(&half).contains("must sum to 1"));
    let mut extra = ok.clone();
    extra["answers"]["team"]["probabilities"]["other"] = json!(0.0);
    assert!(refused(&extra).contains("3 keys for 2 alternatives"));
    let mut wrong_name = ok.clone();
    wrong_name["answers"]["team"]["probabilities"] = json!({"billing": 0.5, "sales": 0.5});
    assert!(refused(&wrong_name)
        .contains("no probability for 'support' (allowed keys: billing, support)"));
    assert!(refused(&json!({"success": false})).contains("`answers`"));
    let mut bad_diag = ok;
    bad_diag["diagnostics"]["layout"] = json!("sideways");
    assert!(refused(&bad_diag).contains("`diagnostics`"));
}

#[test]
fn yes_no_answers_keyed_true_false_are_read() {
    let mut env = decision(&schema()).envelope();
    env["answers"]["urgent"]["probabilities"] = json!({"true": 0.8, "false": 0.2});
    env["answers"]["urgent"]["label"] = json!("true");
    let d = Decision::from_envelope(&schema(), &env).expect("reads");
    let u = d.answers["urgent"].as_ref().expect("answered");
    assert_eq!(u.answer_name(), "yes");
    assert!((u.aggregate.confidence - 0.8).abs() < 1e-12);
}

/// Found by the envelope property test: a reply of `null` for every question
/// was read as "all skipped", though only a question with `ask_if` can be
/// skipped, so a reply that answered nothing passed as a decision.
#[test]
fn null_for_a_question_without_ask_if_is_refused() {
    let env = json!({"answers": {"urgent": null, "team": null, "refund": null}});
    let err = Decision::from_envelope(&schema(), &env).expect_err("refused");
    assert!(
        err.to_string().contains("answers.urgent") && err.to_string().contains("cannot be skipped"),
        "{err}"
    );
}

/// Issue 27: an upstream that rounds probabilities to two decimals (sums 0.99,
/// 1.01) was refused as malformed (tolerance 0.001); within 0.02 the answer is
/// renormalized and the sum recorded in `diagnostics.renormalized`, beyond
/// that it is still refused.
#[test]
fn probabilities_rounded_to_two_decimals_are_renormalized_and_recorded() {
    let mut env = decision(&schema()).envelope();
    env["answers"]["urgent"]["probabilities"] = json!({"yes": 0.67, "no": 0.32});
    env["answers"]["team"]["probabilities"] = json!({"billing": 0.51, "support": 0.5});
    // The stated answers follow the new numbers.
    env["answers"]["urgent"]["label"] = json!("yes");
    env["answers"]["team"]["label"] = json!("billing");
    env["answers"]["team"]["choice"] = json!("billing");
    let d = Decision::from_envelope(&schema(), &env).expect("reads");
    let u = d.answers["urgent"].as_ref().expect("answered");
    assert!((u.aggregate.mean[0] - 0.67 / 0.99).abs() < 1e-12);
    assert!((d.diagnostics.renormalized["urgent"] - 0.99).abs() < 1e-12);
    assert!((d.diagnostics.renormalized["team"] - 1.01).abs() < 1e-12);
    assert_eq!(
        d.envelope()["diagnostics"]["renormalized"]["urgent"],
        json!(0.99)
    );
    env["answers"]["urgent"]["probabilities"] = json!({"yes": 0.67, "no": 0.30});
    let err = Decision::from_envelope(&schema(), &env).expect_err("0.97 is refused");
    assert!(
        err.to_string().contains("answers.urgent.probabilities"),
        "{err}"
    );
    assert!(err.to_string().contains("within 0.02"), "{err}");
    // An exact reply records nothing.
    let d = Decision::from_envelope(&schema(), &decision(&schema()).envelope()).expect("reads");
    assert!(d.diagnostics.renormalized.is_empty());
}

/// Issue 27: an answer with `refusal` was a malformed reply (no
/// probabilities); it is an abstention carrying the upstream's reason.
#[test]
fn a_refusal_answer_is_an_abstention_with_its_reason() {
    let mut env = decision(&schema()).envelope();
    env["answers"]["urgent"] = json!({"refusal": "not enough context"});
    let d = Decision::from_envelope(&schema(), &env).expect("reads");
    let u = d.answers["urgent"].as_ref().expect("answered");
    assert_eq!(
        u.abstained.as_deref(),
        Some("the upstream refused: not enough context")
    );
    assert!((u.aggregate.mean[0] - 0.5).abs() < 1e-12);
    assert_eq!(d.envelope()["answers"]["urgent"]["abstained"], json!(true));
}

/// Issue 38: the gateway passed a reply whose stated answer contradicted its
/// own probabilities.
#[test]
fn a_stated_answer_that_contradicts_the_probabilities_is_refused() {
    let mut env = decision(&schema()).envelope();
    env["answers"]["team"]["probabilities"] = json!({"billing": 0.9, "support": 0.1});
    env["answers"]["team"]["label"] = json!("support");
    let err = Decision::from_envelope(&schema(), &env)
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("answers.team.label") && err.contains("states `support`"),
        "{err}"
    );
    env["answers"]["team"]["label"] = json!("sales");
    let err = Decision::from_envelope(&schema(), &env)
        .expect_err("refused")
        .to_string();
    assert!(err.contains("names no alternative"), "{err}");
    // A Stage-2 answer keeps the Stage-1 numbers under another choice.
    env["answers"]["team"]["label"] = json!("support");
    env["answers"]["team"]["choice"] = json!("support");
    env["answers"]["team"]["resolved_by"] = json!("gemini");
    Decision::from_envelope(&schema(), &env).expect("a resolved answer reads");
}

/// Issue 40: a multi answer (each option's own probability, the selected
/// list) and a constrained answer read back as written; a multi list that
/// is not the set its probabilities select is a malformed reply.
#[test]
fn multi_and_constrained_answers_read_back_and_a_wrong_set_is_refused() {
    let s = ValidSchema::from_value(
        &json!({"questions": [
            {"id": "tags", "type": "multi", "options": ["refund", "outage"]},
            {"id": "urgent", "type": "noul"}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    let tags = dgem_core::multi::collapse_probabilities(&s.questions[0], &[0.8, 0.3]);
    let mut urgent = dgem_core::envelope::AnswerOut::new(
        s.questions[1].clone(),
        vec!["yes".into(), "no".into()],
        dgem_core::readout::aggregate(&[vec![0.6, 0.4]]),
    );
    urgent.constrained = Some(0.25);
    let d = Decision {
        answers: [
            ("tags".to_string(), Some(tags)),
            ("urgent".to_string(), Some(urgent)),
        ]
        .into_iter()
        .collect(),
        diagnostics: Default::default(),
    };
    let env = d.envelope();
    let back = Decision::from_envelope(&s, &env).expect("reads back");
    let t = back.answers["tags"].as_ref().expect("tags");
    assert_eq!(t.selected_names(), ["refund"]);
    assert_eq!(t.to_chat_json(), env["answers"]["tags"]);
    assert_eq!(
        back.answers["urgent"].as_ref().expect("urgent").constrained,
        Some(0.25)
    );
    let mut wrong = env.clone();
    wrong["answers"]["tags"]["multi"] = json!(["refund", "outage"]);
    match Decision::from_envelope(&s, &wrong) {
        Err(DecideError::Backend(e)) => {
            let msg = e.to_string();
            assert!(msg.contains("answers.tags.multi"), "{msg}");
        }
        other => panic!("not refused: {other:?}"),
    }
}

/// Review of issue 40: a refused multi answer with no probabilities kept no
/// multi shape (the first option read as selected).
#[test]
fn a_refused_multi_answer_selects_nothing() {
    let s = ValidSchema::from_value(
        &json!({"questions": [{"id": "tags", "type": "multi", "options": ["refund", "outage"]}]}),
        &SchemaDefaults::default(),
    )
    .expect("valid");
    let env = json!({"answers": {"tags": {"refusal": "policy"}}});
    let d = Decision::from_envelope(&s, &env).expect("an abstention");
    let a = d.answers["tags"].as_ref().expect("answered");
    assert!(a.abstained.is_some());
    assert!(a.selected_names().is_empty());
    assert_eq!(a.to_chat_json()["multi"], json!([]));
}

/// Moved from the `/api` reply's JSON reader (now gone): the largest answer
/// entropy comes from the typed answers, each its restricted softmax's
/// entropy; a skipped question and the diagnostics' whole-vocabulary
/// entropy (2.5 nats here) never count.
#[test]
fn max_entropy_is_the_largest_answer_entropy() {
    let s = schema();
    let d = decision(&s);
    let answered: Vec<f64> = d
        .answers
        .values()
        .flatten()
        .map(|a| a.aggregate.entropy)
        .collect();
    assert!(!answered.is_empty());
    let want = answered.iter().copied().fold(0.0, f64::max);
    assert!(want > 0.0 && want < 2.5, "{answered:?}");
    assert_eq!(d.max_entropy(), want);
    // The `answers` object a surface writes is the envelope's.
    assert_eq!(d.answers_json(), d.envelope()["answers"]);
    assert_eq!(d.diagnostics_json(), d.envelope()["diagnostics"]);
    let none = Decision {
        answers: Default::default(),
        diagnostics: Default::default(),
    };
    assert_eq!(none.max_entropy(), 0.0);
}
