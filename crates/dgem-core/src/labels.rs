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
/// alternative names themselves.
pub fn labels_for(q: &Question, mode: LabelMode) -> Vec<String> {
    let k = q.alternatives.len();
    match (mode, q.kind) {
        (_, QuestionKind::Boolean) => vec!["yes".to_owned(), "no".to_owned()],
        (LabelMode::Words, _) => q.alternatives.iter().map(|a| a.name.clone()).collect(),
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
}
