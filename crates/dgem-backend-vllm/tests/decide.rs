//! Decisions end to end against the in-process fake vLLM: the requests sent
//! (canvas, seeds, xargs, routes) and the probabilities read back.
#![allow(clippy::unwrap_used)]

mod common;

use common::{canvas, close, config, decide, decider, env, fake_with, ids};
use serde_json::json;

// CPython `random.Random(s).randrange(262144)` for the seeds the spec derives
// from the request seed 42 (serving.md §6.2).
const CELL_42: u64 = 58369; // group 0, read 0
const CELL_42_R1: u64 = 256_703; // 42 + 7919
const CELL_42_R2: u64 = 260_857; // 42 + 2·7919
const CELL_43: u64 = 20212; // auto extension base 42 + 1
const CELL_43_R1: u64 = 65753;
const CELL_43_R2: u64 = 27145;
const CELL_K1: u64 = 220_972; // group 1: 42 + 104729
const CELL_K2: u64 = 77429; // group 2: 42 + 2·104729

#[tokio::test]
async fn one_read_sends_the_spec_request_and_reads_the_scripted_probabilities() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(&d, json!({"questions": [{"id": "urgent", "type": "noul"}]}))
        .await
        .unwrap();
    let e = env(&dec);
    assert!(close(
        e["answers"]["urgent"]["noul"].as_f64().unwrap(),
        0.75
    ));
    assert!(close(
        e["answers"]["urgent"]["probabilities"]["no"]
            .as_f64()
            .unwrap(),
        0.25
    ));
    assert_eq!(e["answers"]["urgent"]["label"], "yes");
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/chat/completions");
    let mut want_ids = vec![ids.yes, ids.no];
    want_ids.sort_unstable();
    assert_eq!(r.body["logprob_token_ids"], json!(want_ids));
    assert_eq!(r.body["top_logprobs"], 20);
    assert_eq!(
        r.body["chat_template_kwargs"],
        json!({"enable_thinking": false})
    );
    let c = canvas(r);
    let width = r.body["vllm_xargs"]["diffusion_canvas_length"]
        .as_u64()
        .unwrap() as usize;
    assert_eq!(c.len(), width);
    assert_eq!(width % 16, 0);
    let max_tokens = r.body["max_tokens"].as_u64().unwrap() as usize;
    assert!(
        width >= max_tokens && width < max_tokens + 16,
        "width {width} rounds {max_tokens} up"
    );
    assert_eq!(c[max_tokens - 1], 106, "end-of-turn after the template");
    assert!(c[max_tokens..].iter().all(|&t| t == 0), "padding");
    let pos = dec.diagnostics.questions["urgent"].pos;
    assert_eq!(c[pos], CELL_42);
    assert_eq!(r.body["vllm_xargs"]["diffusion_constrained"], true);
    assert!(r.body["vllm_xargs"].get("diffusion_pinned").is_none());
    let content = r.body["messages"][0]["content"].as_str().unwrap();
    assert!(content.contains("Question urgent") && content.contains("charged twice"));
    let diag = &e["diagnostics"];
    assert_eq!(diag["engine"], "vllm");
    assert_eq!(diag["slot_reading"], "joint");
    assert_eq!(diag["constrained"], true);
    assert_eq!(diag["timing"]["reads"], 1);
    assert_eq!(diag["samples"]["policy"]["mode"], "fixed");
}

#[tokio::test]
async fn samples_average_reads_seeded_per_read() {
    let ids = ids();
    let yes = ids.yes;
    // P(yes) depends on the random slot token: weight 1 + cell % 3 against 1.
    let fake = fake_with(&ids, move |cell, id| {
        if id == yes {
            1.0 + f64::from(cell % 3)
        } else {
            1.0
        }
    })
    .await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"samples": 3, "questions": [{"id": "u", "type": "noul"}]}),
    )
    .await
    .unwrap();
    let pos = dec.diagnostics.questions["u"].pos;
    let mut cells: Vec<u64> = fake.requests().iter().map(|r| canvas(r)[pos]).collect();
    cells.sort_unstable();
    let mut want = vec![CELL_42, CELL_42_R1, CELL_42_R2];
    want.sort_unstable();
    assert_eq!(cells, want);
    let p = |c: u64| {
        let w = 1.0 + (c % 3) as f64;
        w / (w + 1.0)
    };
    let mean = (p(CELL_42) + p(CELL_42_R1) + p(CELL_42_R2)) / 3.0;
    let e = env(&dec);
    assert!(close(e["answers"]["u"]["noul"].as_f64().unwrap(), mean));
    assert_eq!(e["answers"]["u"]["agreement"], 1.0);
    assert!(e["answers"]["u"]["stderr"].as_f64().unwrap() > 0.0);
    assert_eq!(e["diagnostics"]["samples"]["n"], 3);
    assert_eq!(
        e["diagnostics"]["samples"]["tops"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[tokio::test]
async fn auto_extends_an_uncertain_first_read_with_seeds_from_s_plus_one() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"samples": "auto", "questions": [{"id": "u", "type": "noul"}]}),
    )
    .await
    .unwrap();
    let pos = dec.diagnostics.questions["u"].pos;
    let cells: Vec<u64> = fake.requests().iter().map(|r| canvas(r)[pos]).collect();
    assert_eq!(cells[0], CELL_42, "the first read comes alone");
    let mut rest = cells[1..].to_vec();
    rest.sort_unstable();
    let mut want = vec![CELL_43, CELL_43_R1, CELL_43_R2];
    want.sort_unstable();
    assert_eq!(rest, want);
    let policy = &env(&dec)["diagnostics"]["samples"]["policy"];
    assert_eq!(policy["extended"], true);
    assert!(close(
        policy["first_read_entropy"]["u"].as_f64().unwrap(),
        2f64.ln()
    ));
    assert_eq!(env(&dec)["diagnostics"]["samples"]["n"], 4);
}

#[tokio::test]
async fn auto_stops_after_a_confident_first_read() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 999.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"samples": "auto", "questions": [{"id": "u", "type": "noul"}]}),
    )
    .await
    .unwrap();
    assert_eq!(fake.requests().len(), 1);
    let e = env(&dec);
    assert_eq!(e["diagnostics"]["samples"]["policy"]["extended"], false);
    assert!(close(e["answers"]["u"]["noul"].as_f64().unwrap(), 0.999));
}

#[tokio::test]
async fn steps_above_one_pin_every_non_slot_position() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"steps": 3, "questions": [{"id": "u", "type": "noul"}]}),
    )
    .await
    .unwrap();
    let r = &fake.requests()[0];
    let width = canvas(r).len();
    let pos = dec.diagnostics.questions["u"].pos;
    let want: Vec<usize> = (0..width).filter(|&p| p != pos).collect();
    assert_eq!(r.body["vllm_xargs"]["diffusion_pinned"], json!(want));
    assert_eq!(r.body["vllm_xargs"]["diffusion_max_steps"], 3);
    assert_eq!(dec.diagnostics.steps, 3);
}

#[tokio::test]
async fn a_second_stage_continues_the_prompt_with_earlier_answers() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 4.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"questions": [
            {"id": "a", "type": "noul"},
            {"id": "b", "type": "noul", "depends_on": ["a"]},
            {"id": "c", "type": "noul", "ask_if": {"a": ["no"]}}]}),
    )
    .await
    .unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2, "c is skipped");
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[1].path, "/v1/completions");
    let prompt: Vec<u32> = reqs[1].body["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let a_line = ids.tok.encode("a: yes").unwrap();
    assert!(prompt.ends_with(&a_line), "earlier answer prefilled");
    assert_eq!(prompt[0], 2, "BOS");
    assert_eq!(
        canvas(&reqs[1])[dec.diagnostics.questions["b"].pos],
        CELL_K1
    );
    let e = env(&dec);
    assert!(e["answers"]["c"].is_null());
    assert_eq!(e["diagnostics"]["skipped"]["c"]["was"], "yes");
    assert_eq!(e["diagnostics"]["conditioning"], "prefill");
    assert_eq!(e["diagnostics"]["chunk_prompt"], "full");
    assert_eq!(e["diagnostics"]["stages"], json!([["a"], ["b"]]));
    assert!(close(e["answers"]["b"]["noul"].as_f64().unwrap(), 0.8));
}

use dgem_core::tokenizer::Tokenizer as _;

#[tokio::test]
async fn alone_questions_read_as_separate_groups_with_group_seeds() {
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        // isolate: none, so only the stated `alone` splits the groups.
        json!({"questions": [
            {"id": "a", "type": "noul"},
            {"id": "b", "type": "noul", "alone": true},
            {"id": "c", "type": "noul"}], "isolate": "none"}),
    )
    .await
    .unwrap();
    assert_eq!(
        dec.diagnostics.chunks,
        vec![vec!["a"], vec!["b"], vec!["c"]]
    );
    assert_eq!(dec.diagnostics.isolated, vec!["b"]);
    let mut cells: Vec<u64> = fake
        .requests()
        .iter()
        .map(|r| {
            let c = canvas(r);
            let q = if r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("Question a")
            {
                "a"
            } else if r.body["messages"][0]["content"]
                .as_str()
                .unwrap()
                .contains("Question b")
            {
                "b"
            } else {
                "c"
            };
            c[dec.diagnostics.questions[q].pos]
        })
        .collect();
    cells.sort_unstable();
    let mut want = vec![CELL_42, CELL_K1, CELL_K2];
    want.sort_unstable();
    assert_eq!(cells, want);
}

#[tokio::test]
async fn isolate_auto_reads_two_yes_no_questions_of_a_three_question_policy_alone() {
    // The original server makes 3 upstream reads for two booleans and a choice:
    // each boolean on its own canvas, the choice on a third.
    let ids = ids();
    let fake = fake_with(&ids, |_, _| 1.0).await;
    let d = decider(&ids, config(&fake));
    let policy = json!({"questions": [
        {"id": "a", "type": "noul"},
        {"id": "b", "type": "noul"},
        {"id": "t", "type": "choice", "options": ["x", "y"]}]});
    let dec = decide(&d, policy.clone()).await.unwrap();
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(dec.diagnostics.isolated, vec!["a", "b"]);
    assert_eq!(
        dec.diagnostics.chunks,
        vec![vec!["a"], vec!["b"], vec!["t"]]
    );
    // Each isolated read's question block lists its own question only.
    let first = fake.requests()[0].body["messages"][0]["content"].to_string();
    assert!(first.contains("Question a") && !first.contains("Question b"));
    // isolate: none reads all three jointly: one more read, four in all.
    let mut joint = policy;
    joint["isolate"] = json!("none");
    let dec = decide(&d, joint).await.unwrap();
    assert_eq!(fake.requests().len(), 4);
    assert!(dec.diagnostics.isolated.is_empty());
    assert_eq!(dec.diagnostics.chunks.len(), 1);
}

#[tokio::test]
async fn a_missing_label_gets_the_floor_of_min_minus_five() {
    let ids = ids();
    let no = ids.no;
    // Unconstrained read whose returned set lacks `no` entirely.
    let fake = fake_with(&ids, move |_, id| if id == no { 0.0 } else { 1.0 }).await;
    let mut cfg = config(&fake);
    cfg.constrained = false;
    let d = decider(&ids, cfg);
    let dec = decide(&d, json!({"questions": [{"id": "u", "type": "noul"}]}))
        .await
        .unwrap();
    assert!(fake.requests()[0].body["vllm_xargs"]
        .get("diffusion_constrained")
        .is_none());
    // top = {yes: ln 1 = 0}; floor = 0 − 5; P(yes) = 1 / (1 + e^−5).
    let want = 1.0 / (1.0 + (-5f64).exp());
    assert!(close(
        env(&dec)["answers"]["u"]["noul"].as_f64().unwrap(),
        want
    ));
    assert_eq!(env(&dec)["diagnostics"]["constrained"], false);
}

#[tokio::test]
async fn think_writes_one_thought_then_reads_through_the_completions_route() {
    let ids = ids();
    let tok = ids.tok.clone();
    let thought: Vec<u32> = tok.encode("billing issue").unwrap();
    let yes = ids.yes;
    let script =
        dgem_fake_vllm::scripts::weights(move |_, _, id| if id == yes { 2.0 } else { 1.0 });
    let fake = dgem_fake_vllm::FakeVllm::start(dgem_fake_vllm::FakeConfig {
        script: std::sync::Arc::new(script),
        thought: thought.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let d = decider(&ids, config(&fake));
    let dec = decide(
        &d,
        json!({"think": 16, "questions": [{"id": "u", "type": "noul"}]}),
    )
    .await
    .unwrap();
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    let close_ids = tok.encode("<channel|>").unwrap();
    assert_eq!(reqs[0].path, "/v1/completions");
    assert_eq!(reqs[0].body["max_tokens"], 16);
    assert_eq!(reqs[0].body["stop_token_ids"], json!(close_ids));
    assert_eq!(reqs[1].path, "/v1/completions");
    let think_prompt = reqs[0].body["prompt"].as_array().unwrap().clone();
    let read_prompt = reqs[1].body["prompt"].as_array().unwrap().clone();
    let mut want = think_prompt;
    want.extend(thought.iter().map(|&t| json!(t)));
    want.extend(close_ids.iter().map(|&t| json!(t)));
    assert_eq!(read_prompt, want);
    let th = dec.diagnostics.thought.clone().unwrap();
    assert_eq!(th["tokens"], thought.len());
    assert_eq!(th["closed"], true);
    assert_eq!(th["text"], tok.decode(&thought));
    assert!(close(
        env(&dec)["answers"]["u"]["noul"].as_f64().unwrap(),
        2.0 / 3.0
    ));
}

/// Issue 40: a multi question goes upstream as one yes/no question per
/// option (the wire keeps the original's request shape), comes back as one
/// answer, and rules apply to the answers after the read.
#[tokio::test]
async fn a_multi_question_goes_upstream_as_yes_no_questions_and_rules_apply_after() {
    let ids = ids();
    let yes = ids.yes;
    let fake = fake_with(&ids, move |_, id| if id == yes { 3.0 } else { 1.0 }).await;
    let d = decider(&ids, config(&fake));
    let one = decide(&d, json!({"questions": [{"id": "urgent", "type": "noul"}]}))
        .await
        .unwrap();
    let p = env(&one)["answers"]["urgent"]["noul"].as_f64().unwrap();
    let dec = decide(
        &d,
        json!({"questions": [
            {"id": "tags", "type": "multi", "options": ["refund", "outage"]},
            {"id": "urgent", "type": "noul"},
            {"id": "page", "type": "noul"}],
         "isolate": "none",
         "rules": [{"if": {"urgent": "yes"}, "not": {"page": "yes"}}]}),
    )
    .await
    .unwrap();
    let e = env(&dec);
    let tags = &e["answers"]["tags"];
    assert_eq!(tags["type"], "multi");
    assert!(close(tags["probabilities"]["refund"].as_f64().unwrap(), p));
    assert_eq!(tags["multi"], json!(["refund", "outage"]), "p = {p} ≥ 0.5");
    let reqs = fake.requests();
    let content = reqs.last().unwrap().body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        content.contains("Question tags__refund") && content.contains("Does \"outage\" apply?"),
        "{content}"
    );
    assert!(
        !content.contains("multi"),
        "the upstream sees yes/no questions only"
    );
    // urgent = yes excludes page = yes: Z = 1 − p².
    let z = 1.0 - p * p;
    let urgent = &e["answers"]["urgent"];
    assert!(close(urgent["noul"].as_f64().unwrap(), p * (1.0 - p) / z));
    assert_eq!(urgent["constrained"], true);
    assert!(close(
        urgent["constraint_mass_removed"].as_f64().unwrap(),
        p * p
    ));
    assert_eq!(
        e["diagnostics"]["multi"]["tags"],
        json!(["tags__refund", "tags__outage"])
    );
}
