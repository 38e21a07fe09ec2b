//! Tests of the stage walker's bookkeeping.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::envelope::{ChunkPromptUsed, SlotReading};
use crate::schema::SchemaDefaults;
use crate::stages::schedule;

fn valid(v: Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
}

fn ids(groups: &[Vec<&Question>]) -> Vec<Vec<String>> {
    groups
        .iter()
        .map(|g| g.iter().map(|q| q.id.clone()).collect())
        .collect()
}

fn read(probs: Vec<f64>) -> SlotRead {
    SlotRead {
        probs,
        label_mass: Some(0.9),
        entropy: 0.5,
        argmax_is_label: Some(true),
    }
}

fn group(questions: &[&Question], reads: Vec<Vec<SlotRead>>) -> GroupReads {
    GroupReads {
        questions: questions.iter().map(|q| (*q).clone()).collect(),
        labels: questions
            .iter()
            .map(|q| q.alternatives.iter().map(|a| a.name.clone()).collect())
            .collect(),
        reads,
        pos: vec![7; questions.len()],
        scoring: vec![Scoring::FirstToken; questions.len()],
        uncalibrated: vec![None; questions.len()],
        order_reads: vec![Vec::new(); questions.len()],
        order_prior: false,
        policy: policy_json(SamplePolicy::Fixed { n: 1 }, false, &[]),
        thought: None,
        queue_ms: 1.0,
        forward_ms: 2.0,
        calibration_ms: 0.0,
        prompt_tokens: 40,
        cached_tokens: 3,
        rows: 5,
    }
}

fn facts(chained: bool) -> ReaderFacts {
    ReaderFacts {
        restated: false,
        prompt_wording: None,
        runtime: "test".into(),
        model: "m".into(),
        model_sha256: None,
        label_mode: crate::labels::LabelMode::Words,
        slot_reading: SlotReading::Cloze,
        constrained: false,
        calibration: None,
        chained,
        prefix_thought: None,
        state_tokens: 5,
    }
}

#[test]
fn alone_questions_close_the_group_and_fits_splits_the_rest() {
    let s = valid(json!({"questions": [
        {"id": "a", "type": "choice", "options": ["x", "y"]},
        {"id": "b", "type": "choice", "options": ["x", "y"]},
        {"id": "c", "type": "choice", "options": ["x", "y"], "alone": true},
        {"id": "d", "type": "choice", "options": ["x", "y"]},
        {"id": "e", "type": "choice", "options": ["x", "y"]},
        {"id": "f", "type": "choice", "options": ["x", "y"]}]}));
    let asked: Vec<&Question> = s.questions.iter().collect();
    let all = chunk_groups(&asked, |_| Ok::<_, ()>(true)).expect("groups");
    assert_eq!(ids(&all), [vec!["a", "b"], vec!["c"], vec!["d", "e", "f"]]);
    // At most two questions per group.
    let two = chunk_groups(&asked, |g| Ok::<_, ()>(g.len() <= 2)).expect("groups");
    assert_eq!(
        ids(&two),
        [vec!["a", "b"], vec!["c"], vec!["d", "e"], vec!["f"]]
    );
    // Nothing fits with another: one group each, and a single question still
    // forms a group.
    let none = chunk_groups(&asked, |_| Ok::<_, ()>(false)).expect("groups");
    assert_eq!(none.len(), 6);
    let err = chunk_groups(&asked, |_| Err::<bool, _>("boom"));
    assert_eq!(err.err(), Some("boom"));
}

#[test]
fn ask_if_skips_are_recorded_with_the_dependency_answer() {
    let s = valid(json!({"questions": [
        {"id": "a", "type": "noul"},
        {"id": "b", "type": "noul", "ask_if": {"a": ["yes"]}},
        {"id": "c", "type": "noul", "ask_if": {"b": ["no"]}}]}));
    let stages = schedule(&s).expect("stages");
    let mut w = Walk::new();
    let first = w.ask(&s, &stages[0]);
    assert_eq!(first.len(), 1);
    w.absorb(group(&first, vec![vec![read(vec![0.2, 0.8])]]), s.format);
    assert_eq!(w.lines(), ["a: no"]);
    assert!(w.ask(&s, &stages[1]).is_empty(), "a said no: b is skipped");
    assert!(w.ask(&s, &stages[2]).is_empty(), "b was skipped: c is too");
    let (answers, d) = w.finish(&s, facts(true));
    assert_eq!(answers.len(), 3);
    assert!(answers["b"].is_none() && answers["c"].is_none());
    let skipped = serde_json::to_value(&d.skipped).expect("json");
    assert_eq!(
        skipped,
        json!({"b": {"because": "a", "was": "no", "wanted": ["yes"]},
               "c": {"because": "b", "was": null, "wanted": ["no"]}})
    );
    assert_eq!(d.stages, vec![vec!["a".to_owned()]]);
    assert_eq!(d.conditioning, None, "every later stage was skipped");
    assert_eq!(d.chunk_prompt, ChunkPromptUsed::Full);
}

#[test]
fn absorb_keeps_tops_per_read_and_schema_order() {
    let s = valid(json!({"questions": [
        {"id": "t", "type": "choice", "options": ["billing", "tech", "other"]},
        {"id": "u", "type": "noul"}], "isolate": "none"}));
    let mut w = Walk::new();
    // Read the second question first: answers still come back in schema order.
    let u = [&s.questions[1]];
    let t = [&s.questions[0]];
    w.absorb(group(&u, vec![vec![read(vec![0.7, 0.3])]]), s.format);
    w.absorb(
        group(
            &t,
            vec![
                vec![read(vec![0.6, 0.3, 0.1])],
                vec![read(vec![0.2, 0.7, 0.1])],
            ],
        ),
        s.format,
    );
    let (answers, d) = w.finish(&s, facts(false));
    let keys: Vec<&String> = answers.keys().collect();
    assert_eq!(keys, ["t", "u"]);
    let t = answers["t"].as_ref().expect("answered");
    assert_eq!(t.answer_name(), "tech", "mean 0.4/0.5/0.1");
    assert_eq!(t.aggregate.agreement, Some(0.5));
    assert_eq!(d.samples.max_n(), 2);
    assert_eq!(d.timing.reads, 3);
    assert_eq!(d.rows, 10, "two parts of 5 rows each");
    // Tops are nested per part: part 0 is `u` (1 read), part 1 is `t` (2 reads).
    let parts = &d.samples.parts;
    assert_eq!(parts.len(), 2);
    assert_eq!((parts[0].n, parts[1].n), (1, 2));
    assert_eq!(parts[0].tops.len(), 1);
    assert!(!parts[0].tops[0].contains_key("t"));
    assert_eq!(parts[1].tops[0]["t"], ("billing".to_owned(), 0.6, 0.5));
    assert_eq!(parts[1].tops[1]["t"].0, "tech");
    let wire = serde_json::to_value(&d.samples).expect("json");
    assert_eq!(wire["n"], json!([1, 2]));
    assert_eq!(wire["tops"][1][1]["t"][0], "tech");
    assert_eq!(d.chunks, vec![vec!["u".to_owned()], vec!["t".to_owned()]]);
    assert_eq!(d.chunk_prompt, ChunkPromptUsed::Own);
    assert_eq!(d.conditioning, None);
    assert_eq!(d.cached_tokens, 6);
    assert_eq!(d.prompt_tokens, Some(40));
    assert_eq!(d.questions["u"].scoring, Scoring::FirstToken);
    assert_eq!(
        wire["policy"].as_array().map(Vec::len),
        Some(2),
        "one policy per part"
    );
}

proptest! {
    /// Groups partition the asked questions in order, `alone` questions are
    /// groups of one, and no group is larger than the fit test allows.
    #[test]
    fn groups_partition_in_order(alone in proptest::collection::vec(any::<bool>(), 1..12), cap in 1usize..5) {
        let qs: Vec<Value> = alone.iter().enumerate().map(|(i, a)| {
            json!({"id": format!("q{i}"), "type": "choice", "options": ["x", "y"], "alone": a})
        }).collect();
        let s = valid(json!({"questions": qs}));
        let asked: Vec<&Question> = s.questions.iter().collect();
        let groups = chunk_groups(&asked, |g| Ok::<_, ()>(g.len() <= cap)).expect("groups");
        let flat: Vec<String> = groups.iter().flatten().map(|q| q.id.clone()).collect();
        let want: Vec<String> = s.questions.iter().map(|q| q.id.clone()).collect();
        prop_assert_eq!(flat, want);
        for g in &groups {
            prop_assert!(!g.is_empty() && g.len() <= cap);
            if g.iter().any(|q| q.is_alone()) {
                prop_assert_eq!(g.len(), 1);
            }
        }
    }
}
