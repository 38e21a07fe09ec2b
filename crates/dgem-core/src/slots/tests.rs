use std::collections::HashMap;
use std::sync::Mutex;

use super::*;
use crate::labels::{labels_for, LabelMode};
use crate::schema::{SchemaDefaults, ValidSchema};
use crate::tokenizer::TokenizeError;

/// A toy word-level tokenizer: a space joins the following word as `▁word`,
/// punctuation and newlines are tokens of their own, ids are handed out on first use.
#[derive(Default)]
struct WordTokenizer {
    ids: Mutex<HashMap<String, TokenId>>,
}

impl WordTokenizer {
    fn id(&self, piece: &str) -> TokenId {
        let mut ids = self.ids.lock().expect("lock");
        let next = u32::try_from(ids.len()).expect("small") + 10;
        *ids.entry(piece.to_owned()).or_insert(next)
    }
}

impl Tokenizer for WordTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut space = false;
        let flush = |cur: &mut String, space: &mut bool, out: &mut Vec<TokenId>| {
            if !cur.is_empty() {
                let piece = if *space {
                    format!("▁{cur}")
                } else {
                    cur.clone()
                };
                out.push(self.id(&piece));
                cur.clear();
                *space = false;
            }
        };
        for c in text.chars() {
            if c.is_alphanumeric() || c == '_' {
                cur.push(c);
            } else {
                flush(&mut cur, &mut space, &mut out);
                if c == ' ' {
                    if space {
                        out.push(self.id("▁"));
                    }
                    space = true;
                } else {
                    if space {
                        out.push(self.id("▁"));
                        space = false;
                    }
                    out.push(self.id(&c.to_string()));
                }
            }
        }
        flush(&mut cur, &mut space, &mut out);
        if space {
            out.push(self.id("▁"));
        }
        Ok(out)
    }
    fn decode(&self, _ids: &[TokenId]) -> String {
        String::new()
    }
    fn bos_id(&self) -> Option<TokenId> {
        Some(2)
    }
    fn vocab_size(&self) -> usize {
        262_144
    }
}

fn schema(v: serde_json::Value) -> ValidSchema {
    ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid")
}

fn triage() -> ValidSchema {
    schema(serde_json::json!({"questions": [
        {"id": "urgent", "type": "boolean"},
        {"id": "team", "type": "choice", "options": ["billing", "support", "engineering"]},
        {"id": "tone", "type": "score", "levels": ["calm", "annoyed", "furious"]}
    ]}))
}

#[test]
fn answer_text_lines_and_indexed() {
    let s = triage();
    let qs: Vec<&Question> = s.questions.iter().collect();
    let labels: Vec<Vec<String>> = qs
        .iter()
        .map(|q| labels_for(q, LabelMode::Letters))
        .collect();
    assert_eq!(
        answer_text(&qs, &labels, &[0, 2, 1], AnswerFormat::Lines),
        "urgent: yes\nteam: C\ntone: 2"
    );
    assert_eq!(
        answer_text(&qs, &labels, &[1, 0, 0], AnswerFormat::Indexed),
        "urgentno teamA tone1"
    );
}

#[test]
fn resolve_template_finds_one_slot_per_question() {
    let tok = WordTokenizer::default();
    let s = triage();
    let qs: Vec<&Question> = s.questions.iter().collect();
    let labels: Vec<Vec<String>> = qs
        .iter()
        .map(|q| labels_for(q, LabelMode::Letters))
        .collect();
    let r = resolve_template(
        &tok,
        &TemplateSpec {
            questions: &qs,
            labels: &labels,
            head: &[],
            lead: "",
            format: AnswerFormat::Lines,
            canvas_len: 64,
        },
    )
    .expect("resolves");
    // urgent : ▁yes \n team : ▁A \n tone : ▁1
    let positions: Vec<usize> = r.slots.iter().map(|s| s.pos).collect();
    assert_eq!(positions, [2, 6, 10]);
    assert_eq!(r.tokens.len(), 11);
    assert_eq!(r.slots[1].label_ids.len(), 3);
    assert_eq!(r.slots[0].label_ids[0], tok.id("▁yes"));
    assert_eq!(r.slots[0].label_ids[1], tok.id("▁no"));
}

#[test]
fn resolve_template_rejects_multi_token_label() {
    let tok = WordTokenizer::default();
    let s = schema(serde_json::json!({"questions": [
        {"id": "pick", "type": "choice", "options": ["a", "b"]}]}));
    let qs: Vec<&Question> = s.questions.iter().collect();
    let labels = vec![vec!["A".to_owned(), "B C".to_owned()]];
    let err = resolve_template(
        &tok,
        &TemplateSpec {
            questions: &qs,
            labels: &labels,
            head: &[],
            lead: "",
            format: AnswerFormat::Lines,
            canvas_len: 64,
        },
    )
    .expect_err("two tokens");
    assert!(err
        .to_string()
        .starts_with("question 'pick': label 'B C' is not a single token"));
}

#[test]
fn resolve_template_rejects_template_longer_than_canvas() {
    let tok = WordTokenizer::default();
    let s = triage();
    let qs: Vec<&Question> = s.questions.iter().collect();
    let labels: Vec<Vec<String>> = qs
        .iter()
        .map(|q| labels_for(q, LabelMode::Letters))
        .collect();
    let err = resolve_template(
        &tok,
        &TemplateSpec {
            questions: &qs,
            labels: &labels,
            head: &[],
            lead: "",
            format: AnswerFormat::Lines,
            canvas_len: 8,
        },
    )
    .expect_err("too long");
    assert_eq!(
        err.to_string(),
        "answer template is 11 tokens; the canvas holds 7"
    );
}

#[test]
fn canvas_width_rounds_to_step_and_caps() {
    assert_eq!(canvas_width(11, 128, 16), 16);
    assert_eq!(canvas_width(15, 128, 16), 16);
    assert_eq!(canvas_width(16, 128, 16), 32);
    assert_eq!(canvas_width(200, 128, 16), 128);
}

#[test]
fn python_random_matches_cpython_reference_values() {
    // CPython: random.Random(42).getrandbits(32) == 2746317213,
    // random.Random(42).randrange(262144) == 58369 (the first getrandbits(19),
    // 335243, is rejected), random.Random(2**40 + 5).getrandbits(32) == 2166296868.
    let mut r = python_random(42);
    assert_eq!(r.next_u32(), 2_746_317_213);
    let mut r = python_random(42);
    assert_eq!(python_randrange(&mut r, 262_144), 58_369);
    let mut r = python_random((1_i64 << 40) + 5);
    assert_eq!(r.next_u32(), 2_166_296_868);
}

#[test]
fn seed_canvas_only_touches_slots() {
    let tok = WordTokenizer::default();
    let s = triage();
    let qs: Vec<&Question> = s.questions.iter().collect();
    let labels: Vec<Vec<String>> = qs
        .iter()
        .map(|q| labels_for(q, LabelMode::Letters))
        .collect();
    let t = resolve_template(
        &tok,
        &TemplateSpec {
            questions: &qs,
            labels: &labels,
            head: &[],
            lead: "",
            format: AnswerFormat::Lines,
            canvas_len: 64,
        },
    )
    .expect("resolves");
    let ids = CanvasTokens {
        turn_close: 106,
        pad: 0,
        vocab: 262_144,
    };
    let c = seed_canvas(&t, 16, 42, ids);
    assert_eq!(c.len(), 16);
    assert_eq!(c[11], 106);
    assert!(c[12..].iter().all(|&x| x == 0));
    for (i, &tokid) in t.tokens.iter().enumerate() {
        if !t.slots.iter().any(|s| s.pos == i) {
            assert_eq!(c[i], tokid);
        }
    }
    assert_eq!(c[2], 58_369);
    assert_eq!(seed_canvas(&t, 16, 42, ids), c, "same seed, same canvas");
    assert_ne!(seed_canvas(&t, 16, 43, ids), c);
}

#[test]
fn cloze_pools_spaced_and_bare_first_tokens() {
    let tok = WordTokenizer::default();
    let s = schema(serde_json::json!({"questions": [
        {"id": "level", "type": "score", "levels": ["1", "2", "3"]}]}));
    let q = &s.questions[0];
    let slot = resolve_cloze(&tok, q, 0, &labels_for(q, LabelMode::Words)).expect("resolves");
    assert_eq!(slot.cue, vec![tok.id("level"), tok.id(":")]);
    // " 1" → ▁1 (toy tokenizer keeps digits as words), "1" → 1: both kept.
    assert_eq!(slot.labels[0], vec![tok.id("▁1"), tok.id("1")]);
}

#[test]
fn cloze_scores_labels_that_share_a_first_token_by_their_whole_tokenization() {
    let tok = WordTokenizer::default();
    let s = schema(serde_json::json!({"questions": [
        {"id": "pick", "type": "choice", "options": ["data leak", "data loss"]}]}));
    let q = &s.questions[0];
    let slot = resolve_cloze(&tok, q, 0, &labels_for(q, LabelMode::Words)).expect("resolves");
    assert_eq!(slot.scoring, Scoring::Sequence);
    let nl = tok.id("\n");
    assert_eq!(slot.labels[0], vec![tok.id("▁data"), tok.id("▁leak"), nl]);
    assert_eq!(slot.labels[1], vec![tok.id("▁data"), tok.id("▁loss"), nl]);
}

#[test]
fn cloze_keeps_the_one_row_read_when_first_tokens_differ() {
    let tok = WordTokenizer::default();
    let s = schema(serde_json::json!({"questions": [
        {"id": "pick", "type": "choice", "options": ["billing issue", "shipping delay"]}]}));
    let q = &s.questions[0];
    let slot = resolve_cloze(&tok, q, 0, &labels_for(q, LabelMode::Words)).expect("resolves");
    assert_eq!(slot.scoring, Scoring::FirstToken);
    assert_eq!(slot.labels[0], vec![tok.id("▁billing"), tok.id("billing")]);
}

#[test]
fn cloze_refuses_only_labels_with_identical_tokens() {
    // A tokenizer that maps every text to the same tokens: nothing can separate them.
    struct Flat;
    impl Tokenizer for Flat {
        fn encode(&self, _text: &str) -> Result<Vec<TokenId>, TokenizeError> {
            Ok(vec![5, 6])
        }
        fn decode(&self, _ids: &[TokenId]) -> String {
            String::new()
        }
        fn bos_id(&self) -> Option<TokenId> {
            None
        }
        fn vocab_size(&self) -> usize {
            10
        }
    }
    let s = schema(serde_json::json!({"questions": [
        {"id": "pick", "type": "choice", "options": ["left", "right"]}]}));
    let q = &s.questions[0];
    let err = resolve_cloze(&Flat, q, 0, &labels_for(q, LabelMode::Words)).expect_err("same");
    assert!(
        err.to_string()
            .contains("labels 'left' and 'right' tokenize to the same tokens"),
        "{err}"
    );
}

#[test]
fn cloze_levels_one_to_ten_are_scored_as_sequences() {
    // Levels "1".."10" share first tokens ("1" / "10"): each is scored in full,
    // so "1\n" and "10\n" differ in their second token.
    struct DigitTok;
    impl Tokenizer for DigitTok {
        fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
            // Gemma-like: a leading space is its own token (id 1); digits are one token each.
            Ok(text
                .chars()
                .map(|c| {
                    if c == ' ' {
                        1
                    } else {
                        100 + c.to_digit(10).unwrap_or(50)
                    }
                })
                .collect())
        }
        fn decode(&self, _ids: &[TokenId]) -> String {
            String::new()
        }
        fn bos_id(&self) -> Option<TokenId> {
            None
        }
        fn vocab_size(&self) -> usize {
            1000
        }
    }
    let levels: Vec<String> = (1..=10).map(|i| i.to_string()).collect();
    let s = schema(
        serde_json::json!({"questions": [{"id": "grade", "type": "score", "levels": levels}]}),
    );
    let q = &s.questions[0];
    let slot = resolve_cloze(&DigitTok, q, 0, &labels_for(q, LabelMode::Words)).expect("resolves");
    assert_eq!(slot.scoring, Scoring::Sequence);
    // " 1\n" → space, 1, newline; " 10\n" → space, 1, 0, newline.
    assert_eq!(slot.labels[0], vec![1, 101, 150]);
    assert_eq!(slot.labels[9], vec![1, 101, 100, 150]);
}

/// Every continuation a sequence-scored slot reads for label `i`, sorted.
fn spellings_of(slot: &crate::slots::ClozeSlot, i: usize) -> Vec<Vec<TokenId>> {
    let mut all = vec![slot.labels[i].clone()];
    all.extend(slot.variants[i].iter().cloned());
    all.sort();
    all
}

#[test]
fn sequence_slots_read_the_same_spellings_whatever_the_leading_space_or_case() {
    let tok = WordTokenizer::default();
    let read = |options: serde_json::Value| {
        let s = schema(serde_json::json!({"questions": [
            {"id": "pick", "type": "choice", "options": options}]}));
        let q = &s.questions[0];
        resolve_cloze(&tok, q, 0, &labels_for(q, LabelMode::Words)).expect("resolves")
    };
    let plain = read(serde_json::json!(["data leak", "data loss"]));
    let spaced = read(serde_json::json!([" data leak", "data loss "]));
    let cased = read(serde_json::json!(["Data leak", "Data loss"]));
    let shouted = read(serde_json::json!(["data leak", "DATA LOSS"]));
    assert_eq!(plain.scoring, Scoring::Sequence);
    assert_eq!(
        shouted.scoring,
        Scoring::Sequence,
        "case does not pick the scoring"
    );
    // A leading space and the case are spelling, not the label: every
    // variant reads exactly the same continuations.
    assert_eq!(plain, spaced);
    assert_eq!(plain, cased);
    assert_eq!(plain, shouted);
    // With and without the space after the cue, lower-case and capitalised.
    let nl = tok.id("\n");
    let leak = spellings_of(&plain, 0);
    assert!(leak.contains(&vec![tok.id("▁data"), tok.id("▁leak"), nl]));
    assert!(leak.contains(&vec![tok.id("data"), tok.id("▁leak"), nl]));
    assert!(leak.contains(&vec![tok.id("▁Data"), tok.id("▁leak"), nl]));
}

#[test]
fn boolean_slots_pool_true_and_false_with_yes_and_no() {
    let tok = WordTokenizer::default();
    let s = schema(serde_json::json!({"questions": [{"id": "urgent", "type": "boolean"}]}));
    let q = &s.questions[0];
    for mode in [LabelMode::Words, LabelMode::Letters] {
        let slot = resolve_cloze(&tok, q, 0, &labels_for(q, mode)).expect("resolves");
        assert_eq!(slot.scoring, Scoring::FirstToken);
        assert!(slot.labels[0].contains(&tok.id("▁yes")));
        assert!(slot.labels[0].contains(&tok.id("▁true")));
        assert!(slot.labels[0].contains(&tok.id("Yes")));
        assert!(slot.labels[1].contains(&tok.id("▁false")));
        assert!(!slot.labels[1].contains(&tok.id("▁true")));
    }
}

#[test]
fn letter_labels_are_not_pooled_with_lower_case_words() {
    let tok = WordTokenizer::default();
    let s = schema(serde_json::json!({"questions": [
        {"id": "pick", "type": "choice", "options": ["alpha", "beta"]}]}));
    let q = &s.questions[0];
    let slot = resolve_cloze(&tok, q, 0, &labels_for(q, LabelMode::Letters)).expect("resolves");
    // "a" is the article, not option A.
    assert!(!slot.labels[0].contains(&tok.id("▁a")));
    assert!(!slot.labels[0].contains(&tok.id("a")));
}
