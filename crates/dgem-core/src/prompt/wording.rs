//! The question block's fixed sentences, replaceable from an operator's file.
//!
//! The block a read sends is: the lead sentence, the global instructions, one
//! paragraph per question with its labelled alternatives, the format line, and
//! (when a read covers only some questions) the chunk sentence. The lead, the
//! format lines and the chunk sentence are fixed text; [`Wording`] holds them.
//! dgem's own sentences are [`Wording::default`]. An operator can supply others
//! from a JSON file (`--prompt-file`) to A/B a wording or to hold one fixed
//! across releases:
//!
//! ```json
//! {
//!   "lead": "Answer a fixed set of questions about the state the user provides.",
//!   "format_lines": "Reply with one line per question, in this order, formatted as \"id: {label}\".",
//!   "format_indexed": "Reply on one line with each question's id followed by its label.",
//!   "chunk": "A reply may cover only some of the questions; answer every line that is present."
//! }
//! ```
//!
//! Every key is optional (a missing one keeps dgem's sentence); no other key is
//! allowed. The one placeholder is `{label}`, in `format_lines` only: it becomes
//! `label` when answers are letters and `answer` when they are option words.
//! Values are non-empty, at most [`MAX_SENTENCE_CHARS`] characters.
//! [`Wording::hash`] (`sha256:` + 16 hex digits of the four final sentences) is
//! echoed in diagnostics, so a decision says which wording produced it.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::labels::LabelMode;
use crate::schema::AnswerFormat;
use crate::SchemaError;

/// Longest sentence a wording file may give, in characters.
pub const MAX_SENTENCE_CHARS: usize = 2000;
/// The keys of a wording file.
pub const WORDING_KEYS: [&str; 4] = ["lead", "format_lines", "format_indexed", "chunk"];

/// The fixed sentences of the question block (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wording {
    /// The first sentence(s), before the instructions and questions.
    pub lead: String,
    /// The format line of the `lines` answer format; `{label}` is replaced by
    /// `label` or `answer` by label mode.
    pub format_lines: String,
    /// The format line of the `indexed` answer format.
    pub format_indexed: String,
    /// Appended (after one space) when a read covers only some questions.
    pub chunk: String,
}

impl Default for Wording {
    /// dgem's own sentences.
    fn default() -> Self {
        Self {
            lead: "Decide a fixed list of questions about the material supplied by the user. \
                   Every question names its permitted answers; give exactly one of them per question."
                .into(),
            format_lines:
                "Answer with one line per question, in the order above, written as \"id: {label}\"."
                    .into(),
            format_indexed: "Answer on a single line: each question id directly followed by its \
                             label, separated by single spaces."
                .into(),
            chunk: "Some questions may be missing from the answer; fill every line that is there."
                .into(),
        }
    }
}

impl Wording {
    /// The embedded engine's short-tail sentences: dgem's own, with the
    /// answer format stated once in the lead, before the questions, and
    /// "Answer now." after them.
    ///
    /// Why: a causal model reads the text after a question's listing again
    /// for every listing of that question (cyclic order debiasing reads up to
    /// six), because that text follows the options it attends to. With
    /// [`Wording::default`] that tail held the whole format sentence, about
    /// twenty tokens of a listing's forty on a four-level score. Measured on
    /// Qwen2.5-Coder 1.5B (`support_triage`, a 120-character ticket,
    /// `document_first`): a cold one-read decision evaluates 298 tokens
    /// instead of 330, the first decision of a new policy (every listing)
    /// 546 instead of 674. The lead takes no placeholder, so it says
    /// `"id: answer"` under letter labels too (the answer is then a letter),
    /// and it names the `lines` format: a read in the `indexed` format (more
    /// than ten questions on one prompt) keeps [`Wording::default`]. A
    /// catalogued model reads with it where that was measured
    /// (`ModelCard::compact_wording` in dgem-model: on Qwen2.5-Coder 1.5B the
    /// eval set's accuracy moved by one slot of 60, its ECE and Brier
    /// improved); the vLLM path keeps [`Wording::default`] (or an operator's
    /// wording file) and never uses this one.
    pub fn compact() -> Self {
        Self {
            lead: "Decide a fixed list of questions about the material supplied by the user. \
                   Every question names its permitted answers; give exactly one of them per \
                   question, one line per question in the order given, written as \
                   \"id: answer\"."
                .into(),
            format_lines: "Answer now.".into(),
            ..Self::default()
        }
    }

    /// Read a wording file's JSON text (see the module docs).
    ///
    /// # Errors
    /// [`SchemaError`] naming the key: not a JSON object, an unknown key, a
    /// value that is not a non-empty string within [`MAX_SENTENCE_CHARS`], or
    /// a placeholder other than `{label}` in `format_lines`.
    pub fn from_json(text: &str) -> Result<Self, SchemaError> {
        // Editors on some systems write a UTF-8 byte-order mark first.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let v = crate::json::parse_strict(text).map_err(|e| {
            SchemaError::new("prompt_file", format!("prompt file: not valid JSON ({e})"))
        })?;
        let Value::Object(obj) = v else {
            return Err(SchemaError::new(
                "prompt_file",
                format!(
                    "prompt file: must be a JSON object with keys among [{}]",
                    WORDING_KEYS.join(", ")
                ),
            ));
        };
        Self::from_object(&obj)
    }

    fn from_object(obj: &Map<String, Value>) -> Result<Self, SchemaError> {
        if let Some(k) = obj.keys().find(|k| !WORDING_KEYS.contains(&k.as_str())) {
            return Err(SchemaError::new(
                k.as_str(),
                format!(
                    "prompt file: unknown key `{}`; the keys are [{}]",
                    k.chars().take(60).collect::<String>(),
                    WORDING_KEYS.join(", ")
                ),
            ));
        }
        let mut w = Self::default();
        for key in WORDING_KEYS {
            let Some(v) = obj.get(key) else { continue };
            let s = v
                .as_str()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    SchemaError::new(
                        key,
                        format!("prompt file: `{key}` must be a non-empty string"),
                    )
                })?;
            if s.chars().count() > MAX_SENTENCE_CHARS {
                return Err(SchemaError::new(
                    key,
                    format!("prompt file: `{key}` is over {MAX_SENTENCE_CHARS} characters"),
                ));
            }
            if s.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
                return Err(SchemaError::new(
                    key,
                    format!("prompt file: `{key}` holds a control character (only newlines and tabs are allowed)"),
                ));
            }
            let allowed: &[&str] = if key == "format_lines" {
                &["label"]
            } else {
                &[]
            };
            check_placeholders(key, s, allowed)?;
            let slot = match key {
                "lead" => &mut w.lead,
                "format_lines" => &mut w.format_lines,
                "format_indexed" => &mut w.format_indexed,
                _ => &mut w.chunk,
            };
            *slot = s.to_owned();
        }
        Ok(w)
    }

    /// The format line for `format` under label `mode`.
    pub fn format_line(&self, format: AnswerFormat, mode: LabelMode) -> String {
        match format {
            AnswerFormat::Lines => {
                let word = match mode {
                    LabelMode::Letters => "label",
                    LabelMode::Words => "answer",
                };
                self.format_lines.replace("{label}", word)
            }
            AnswerFormat::Indexed => self.format_indexed.clone(),
        }
    }

    /// `sha256:` + the first 16 hex digits of the SHA-256 of the four
    /// sentences (each followed by a NUL byte), in [`WORDING_KEYS`] order.
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        for s in [
            &self.lead,
            &self.format_lines,
            &self.format_indexed,
            &self.chunk,
        ] {
            h.update(s.as_bytes());
            h.update([0u8]);
        }
        let hex = hex::encode(h.finalize());
        format!("sha256:{}", &hex[..16])
    }
}

/// Refuse `{name}` placeholders not in `allowed`.
fn check_placeholders(key: &str, s: &str, allowed: &[&str]) -> Result<(), SchemaError> {
    let mut rest = s;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let name = &after[..close];
        if !allowed.contains(&name) {
            let allowed_text = if allowed.is_empty() {
                "none".to_owned()
            } else {
                allowed
                    .iter()
                    .map(|a| format!("{{{a}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(SchemaError::new(
                key,
                format!(
                    "prompt file: `{key}` has the placeholder `{{{}}}`; allowed here: {allowed_text}",
                    name.chars().take(40).collect::<String>()
                ),
            ));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Wording::from_json(text)
            .err()
            .map(|e| e.message)
            .unwrap_or_default()
    }

    #[test]
    fn a_file_replaces_the_sentences_it_names_and_changes_the_hash() {
        let w = Wording::from_json(
            r#"{"lead": "Answer these.", "format_lines": "One line each: \"id: {label}\"."}"#,
        )
        .unwrap_or_default();
        assert_eq!(w.lead, "Answer these.");
        assert_eq!(
            w.chunk,
            Wording::default().chunk,
            "missing keys keep dgem's"
        );
        assert_eq!(
            w.format_line(AnswerFormat::Lines, LabelMode::Words),
            "One line each: \"id: answer\"."
        );
        assert_ne!(w.hash(), Wording::default().hash());
        assert_eq!(w.hash().len(), "sha256:".len() + 16);
        assert_eq!(
            Wording::from_json("{}").unwrap_or_default().hash(),
            Wording::default().hash()
        );
    }

    #[test]
    fn the_compact_wording_states_the_format_before_the_questions() {
        let c = Wording::compact();
        let d = Wording::default();
        // The format moves into the lead; what follows the options is short.
        assert!(
            c.lead.starts_with(&d.lead[..d.lead.len() - 1]),
            "{}",
            c.lead
        );
        assert!(c.lead.ends_with("written as \"id: answer\"."), "{}", c.lead);
        assert_eq!(
            c.format_line(AnswerFormat::Lines, LabelMode::Words),
            "Answer now."
        );
        assert!(c.format_lines.len() * 5 < d.format_lines.len());
        assert_eq!((&c.format_indexed, &c.chunk), (&d.format_indexed, &d.chunk));
        // A decision read with it says so.
        assert_ne!(c.hash(), d.hash());
        // It is a wording a file could give (no placeholder in the lead).
        let json = serde_json::json!({"lead": c.lead, "format_lines": c.format_lines});
        assert_eq!(Wording::from_json(&json.to_string()).ok(), Some(c));
    }

    #[test]
    fn bad_files_are_refused_naming_the_key() {
        assert!(err("not json").starts_with("prompt file: not valid JSON"));
        assert!(err("[1]").contains("must be a JSON object"));
        assert_eq!(
            err(r#"{"leed": "x"}"#),
            "prompt file: unknown key `leed`; the keys are [lead, format_lines, format_indexed, chunk]"
        );
        assert_eq!(
            err(r#"{"chunk": "  "}"#),
            "prompt file: `chunk` must be a non-empty string"
        );
        assert_eq!(
            err(r#"{"lead": "Hello {user}"}"#),
            "prompt file: `lead` has the placeholder `{user}`; allowed here: none"
        );
        assert_eq!(
            err(r#"{"format_lines": "id: {lable}"}"#),
            "prompt file: `format_lines` has the placeholder `{lable}`; allowed here: {label}"
        );
        assert!(err("{\"lead\": \"bell\\u0007\"}").contains("control character"));
        let bom = Wording::from_json("\u{feff}{\"lead\": \"Hi.\"}").map(|w| w.lead);
        assert_eq!(
            bom.ok().as_deref(),
            Some("Hi."),
            "a byte-order mark is skipped"
        );
        let long = format!(r#"{{"lead": "{}"}}"#, "a".repeat(MAX_SENTENCE_CHARS + 1));
        assert!(err(&long).contains("over 2000 characters"));
    }
}
