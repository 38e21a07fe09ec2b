//! Label alphabets: which short strings stand for each allowed answer.
//!
//! serving.md §4.1: booleans read `yes`/`no`; choices read `A`–`Z` in option
//! order; scores read `1`–`9` (≤ 9 levels) or `A`–`Z`. That is [`LabelMode::Letters`],
//! what DiffusionGemma answers with. A small causal model answers letters by
//! position only (engine-notes.md §2), so it reads each option by its own word:
//! [`LabelMode::Words`].

use serde::{Deserialize, Serialize};

use crate::schema::{Question, QuestionKind};

/// Which tokens stand for an answer at a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LabelMode {
    /// `A`–`Z`, `yes`/`no`, `1`–`9` (serving.md §4.1).
    #[default]
    Letters,
    /// Each alternative's own name (its first token is read; engine-notes.md §2).
    Words,
}

impl LabelMode {
    /// Wire name: `letters` or `words`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Letters => "letters",
            Self::Words => "words",
        }
    }
}

/// The `i`-th capital letter (`0` → `A`). `i` must be below 26; larger values
/// wrap; only a bracket-routed choice (over 26 options) has that many, and its
/// slots are read in brackets of at most 20.
pub fn letter(i: usize) -> String {
    let c = b'A' + u8::try_from(i % 26).unwrap_or(0);
    char::from(c).to_string()
}

/// Labels of `q` in alternative order under `mode`.
///
/// Letters: booleans `yes`/`no`, choices `A`…, scores `1`…`9` when there are at
/// most 9 levels, else `A`…. Words: booleans `yes`/`no`, otherwise the
/// alternative names themselves, trimmed and in lower case (a leading space
/// or the case a policy writes an option in is spelling, not part of the
/// answer: the prompt lists, and the reader reads, the same label either way;
/// the reader also pools the capitalised form, see
/// [`crate::slots::surface_forms`]).
pub fn labels_for(q: &Question, mode: LabelMode) -> Vec<String> {
    let k = q.alternatives.len();
    match (mode, q.kind) {
        // A boolean's alternatives are named `yes` and `no`; following them
        // (not a fixed `["yes", "no"]`) keeps a read that lists `no` first
        // reading the right label at each position.
        (_, QuestionKind::Boolean) => q.alternatives.iter().map(|a| a.name.clone()).collect(),
        (LabelMode::Words, _) => q
            .alternatives
            .iter()
            .map(|a| a.name.trim().to_lowercase())
            .collect(),
        (LabelMode::Letters, QuestionKind::Score) if k <= 9 => {
            (1..=k).map(|i| i.to_string()).collect()
        }
        (LabelMode::Letters, _) => (0..k).map(letter).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{SchemaDefaults, ValidSchema};

    fn schema() -> ValidSchema {
        let v = serde_json::json!({"questions": [
            {"id": "u", "type": "boolean"},
            {"id": "t", "type": "choice", "options": ["billing", "support", "engineering"]},
            {"id": "s", "type": "score", "levels": ["calm", "frustrated", "furious"]},
            {"id": "w", "type": "score", "levels": ["a","b","c","d","e","f","g","h","i","j"]}
        ]});
        ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid schema")
    }

    #[test]
    fn letters_follow_serving_alphabets() {
        let s = schema();
        assert_eq!(
            labels_for(&s.questions[0], LabelMode::Letters),
            ["yes", "no"]
        );
        assert_eq!(
            labels_for(&s.questions[1], LabelMode::Letters),
            ["A", "B", "C"]
        );
        assert_eq!(
            labels_for(&s.questions[2], LabelMode::Letters),
            ["1", "2", "3"]
        );
        assert_eq!(labels_for(&s.questions[3], LabelMode::Letters)[9], "J");
    }

    /// Regression: a boolean listed `no` first (a permuted sample, or an
    /// order-debiasing rotation) was read with the labels `yes`, `no` in that
    /// order, so its answer came back inverted.
    #[test]
    fn boolean_labels_follow_a_permuted_listing() {
        let s = schema();
        let mut q = s.questions[0].clone();
        q.alternatives.reverse();
        for mode in [LabelMode::Words, LabelMode::Letters] {
            assert_eq!(labels_for(&q, mode), ["no", "yes"]);
        }
    }

    #[test]
    fn words_use_alternative_names() {
        let s = schema();
        assert_eq!(labels_for(&s.questions[0], LabelMode::Words), ["yes", "no"]);
        assert_eq!(
            labels_for(&s.questions[1], LabelMode::Words),
            ["billing", "support", "engineering"]
        );
        assert_eq!(letter(25), "Z");
    }

    /// Regression: `Pasta` and ` pasta` were listed and read as other labels
    /// than `pasta`, so the case or spacing of an option moved its probability.
    #[test]
    fn word_labels_are_trimmed_and_lower_case() {
        let v = serde_json::json!({"questions": [
            {"id": "d", "type": "choice", "options": [" Pasta", "SOUP "]}]});
        let s = ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid");
        assert_eq!(
            labels_for(&s.questions[0], LabelMode::Words),
            ["pasta", "soup"]
        );
    }
}
