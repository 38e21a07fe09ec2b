//! Prompt text: the question block, the state text and the two layouts.
//!
//! The structure follows serving.md §4.2–4.3 (a lead paragraph, the global
//! instructions, one block per question with its labelled alternatives, then a
//! format line); the wording is dgem-rs's own. Under [`LabelMode::Words`] the
//! alternatives are listed by name and the reply asks for the name itself.

mod turns;
mod wording;

use std::fmt::Write as _;
use std::sync::OnceLock;

pub use turns::{ChatTurns, GEMMA_MODEL_TURN, GEMMA_USER_TURN, PLAIN_MODEL_TURN};
pub use wording::{Wording, MAX_SENTENCE_CHARS, WORDING_KEYS};

use serde::Serialize;
use serde_json::Value;

use crate::labels::{labels_for, LabelMode};
use crate::schema::{AnswerFormat, Layout, Question, QuestionKind};

/// Inputs of [`system_text`].
#[derive(Debug, Clone, Copy)]
pub struct SystemTextSpec<'a> {
    /// Questions of this read, in order.
    pub questions: &'a [&'a Question],
    /// Global rubric, if any.
    pub instructions: Option<&'a str>,
    /// Answer template format.
    pub format: AnswerFormat,
    /// Label mode (letters or option words).
    pub mode: LabelMode,
    /// Whether the read covers only part of the questions.
    pub chunked: bool,
    /// The fixed sentences; `None` is dgem's own ([`Wording::default`]).
    pub wording: Option<&'a Wording>,
}

/// dgem's own wording, built once.
fn default_wording() -> &'static Wording {
    static DEFAULT: OnceLock<Wording> = OnceLock::new();
    DEFAULT.get_or_init(Wording::default)
}

/// The head of the question block: the lead sentence, then the policy's own
/// instructions when it has any. Every question block of one policy begins
/// with it, whichever questions the block lists.
pub fn system_head(wording: Option<&Wording>, instructions: Option<&str>) -> String {
    let w = wording.unwrap_or_else(|| default_wording());
    let mut out = format!("{}\n", w.lead);
    if let Some(ins) = instructions.map(str::trim).filter(|s| !s.is_empty()) {
        let _ = write!(out, "\n{ins}\n");
    }
    out
}

/// The question block for one read: [`system_head`], one paragraph per
/// question with its labelled alternatives, the format line.
pub fn system_text(spec: &SystemTextSpec<'_>) -> String {
    let w = spec.wording.unwrap_or_else(|| default_wording());
    let mut out = system_head(spec.wording, spec.instructions);
    for q in spec.questions {
        let _ = write!(out, "\nQuestion {}: {}\n", q.id, q.instructions.trim());
        let labels = labels_for(q, spec.mode);
        for (alt, label) in q.alternatives.iter().zip(&labels) {
            let desc = alt
                .description
                .as_deref()
                .map(str::trim)
                .filter(|d| !d.is_empty());
            let named = q.kind != QuestionKind::Boolean && spec.mode == LabelMode::Letters;
            match (named, desc) {
                (true, Some(d)) => {
                    let _ = writeln!(out, "  {label}: {} ({d})", alt.name);
                }
                (true, None) => {
                    let _ = writeln!(out, "  {label}: {}", alt.name);
                }
                (false, Some(d)) => {
                    let _ = writeln!(out, "  {label}: {d}");
                }
                (false, None) => {
                    let _ = writeln!(out, "  {label}");
                }
            }
        }
    }
    out.push('\n');
    out.push_str(&w.format_line(spec.format, spec.mode));
    if spec.chunked {
        out.push(' ');
        out.push_str(&w.chunk);
    }
    out
}

/// The one user message of a `document_first` text read (serving.md §4.3):
/// the state inside `<user_text>` tags, then the question block inside
/// `<instructions>`.
pub fn document_first_content(system: &str, state: &str) -> String {
    format!("<user_text>\n{state}\n</user_text>\n\n<instructions>\n{system}\n</instructions>")
}

/// The user-turn text of a text read under `layout`, as an OpenAI-style
/// client sends it through Gemma's chat template (serving.md §4.3); every
/// model gets the same user text, only its [`ChatTurns`] differ.
///
/// - `document_first` is one user message, [`document_first_content`].
/// - `schema_first` is two messages, `[system: question block, user: state]`,
///   as the original structured server sends them. Gemma's chat template has
///   no system turn: it writes the system text, a blank line, then the user
///   text (trimmed) in the first user turn. So the question block is a prefix
///   shared by every decision of a policy.
pub fn user_content(layout: Layout, system: &str, state: &str) -> String {
    match layout {
        Layout::DocumentFirst => document_first_content(system, state),
        Layout::SchemaFirst => format!("{system}\n\n{}", state.trim()),
    }
}

/// Where the state lies in a [`chat_prompt`] of `system` and `state` under
/// `layout` and `turns`: its byte range (the trimmed state for
/// `schema_first`, whose user message is trimmed). The engine encodes it as
/// ordinary text ([`crate::tokenizer::encode_with_plain_span`]).
pub fn state_range(
    turns: &ChatTurns,
    layout: Layout,
    system: &str,
    state: &str,
) -> std::ops::Range<usize> {
    match layout {
        Layout::DocumentFirst => {
            let start = turns.user_open.len() + "<user_text>\n".len();
            start..start + state.len()
        }
        Layout::SchemaFirst => {
            let start = turns.user_open.len() + system.len() + "\n\n".len();
            start..start + state.trim().len()
        }
    }
}

/// Length in bytes of the leading text every [`chat_prompt`] of `state`
/// under `layout` and `turns` shares whatever the questions: for
/// `document_first` the user-turn opener, then the state in its tags, up to
/// and including the `<instructions>` line; `None` for `schema_first`, whose
/// questions come first. [`head_prefix_len`] extends it past the question
/// block's head, where a causal reader that reads each question on a prompt
/// of its own forks. It is `prompt[..len]` of any such prompt.
pub fn state_prefix_len(turns: &ChatTurns, layout: Layout, state: &str) -> Option<usize> {
    match layout {
        Layout::DocumentFirst => {
            let content = document_first_content("", state);
            Some(turns.user_open.len() + content.len() - "\n</instructions>".len())
        }
        Layout::SchemaFirst => None,
    }
}

/// Length in bytes of the leading text every `document_first`
/// [`chat_prompt`] of `state` under one policy shares whatever questions it
/// lists: [`state_prefix_len`], then the question block's `head`
/// ([`system_head`]) without its last newline (a blank line follows it, and a
/// tokenizer may write the two newlines as one token). `None` for
/// `schema_first`, whose policy prefix ([`policy_prefix_len`]) already holds
/// the head. A causal reader that reads each question on a prompt of its own
/// forks here rather than at the state's end, so the policy's lead and
/// instructions are read once per decision too.
pub fn head_prefix_len(
    turns: &ChatTurns,
    layout: Layout,
    state: &str,
    head: &str,
) -> Option<usize> {
    state_prefix_len(turns, layout, state).map(|n| n + head.trim_end_matches('\n').len())
}

/// Length in bytes of the leading text every [`chat_prompt`] of `system`
/// under `layout` and `turns` shares whatever the state: for `schema_first`
/// the user-turn opener, the question block and the blank line after it;
/// `None` for `document_first` (the state comes first, so decisions of one
/// policy share only the opener). A prefix cache can keep exactly this part
/// between decisions of a policy: it is `prompt[..len]` of any such prompt.
pub fn policy_prefix_len(turns: &ChatTurns, layout: Layout, system: &str) -> Option<usize> {
    match layout {
        Layout::DocumentFirst => None,
        Layout::SchemaFirst => Some(turns.user_open.len() + system.len() + "\n\n".len()),
    }
}

/// Length in bytes of the leading text a `schema_first` [`chat_prompt`] of
/// `system` shares with the prompts of every state whose JSON object begins
/// with the same key: [`policy_prefix_len`], then the state's opening brace,
/// its first key and the `": "` after it (`{"ticket": ` of
/// `{"ticket": "…"}`). Decisions of one policy usually send states of one
/// shape, so a prefix cache can keep this part too and a new state's read
/// starts at its first value. `None` for `document_first`, or when the state
/// is not text of a JSON object with a first key and a value after it.
pub fn state_head_len(
    turns: &ChatTurns,
    layout: Layout,
    system: &str,
    state: &str,
) -> Option<usize> {
    let prefix = policy_prefix_len(turns, layout, system)?;
    let state = state.trim();
    let rest = state.strip_prefix("{\"")?;
    // The first key is a JSON string: its end is the first quote that no
    // backslash escapes.
    let mut escaped = false;
    let close = rest.char_indices().find_map(|(i, c)| match c {
        _ if escaped => {
            escaped = false;
            None
        }
        '\\' => {
            escaped = true;
            None
        }
        '"' => Some(i),
        _ => None,
    })?;
    let head = "{\"".len() + close + "\": ".len();
    let after = state.get(head..)?;
    (state.get(head - "\": ".len()..head) == Some("\": ") && !after.is_empty())
        .then_some(prefix + head)
}

/// A whole chat prompt ending where the model starts to answer: the user
/// turn of [`user_content`] inside `turns`.
pub fn chat_prompt(turns: &ChatTurns, layout: Layout, system: &str, state: &str) -> String {
    turns.wrap(&user_content(layout, system, state))
}

/// [`chat_prompt`] with Gemma's turns ([`ChatTurns::gemma`]): the prompt of
/// DiffusionGemma (vLLM) and of the embedded Gemma 3 default.
pub fn gemma_chat_prompt(layout: Layout, system: &str, state: &str) -> String {
    chat_prompt(&ChatTurns::gemma(), layout, system, state)
}

/// The state as prompt text: a string as is; any other JSON value encoded the way
/// Python's `json.dumps(v, ensure_ascii=False)` does (separators `", "` and
/// `": "`), so prompts stay byte-identical with the original server (serving.md §3.3).
pub fn state_text(state: &Value) -> String {
    match state {
        Value::String(s) => s.clone(),
        other => python_json(other),
    }
}

/// Encode `v` as Python's `json.dumps(v, ensure_ascii=False)` would.
pub fn python_json(v: &Value) -> String {
    let mut buf = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, PythonFormatter);
    // Serializing a Value into a Vec cannot fail.
    if v.serialize(&mut ser).is_err() {
        return v.to_string();
    }
    String::from_utf8(buf).unwrap_or_else(|_| v.to_string())
}

/// serde_json formatter with Python's default separators.
struct PythonFormatter;

impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{SchemaDefaults, ValidSchema};

    fn triage() -> ValidSchema {
        let v = serde_json::json!({
            "instructions": "Route support tickets.",
            "questions": [
                {"id": "urgent", "type": "boolean", "instructions": "Same-day escalation?",
                 "criteria": {"true": "needs action today", "false": "can wait"}},
                {"id": "team", "type": "choice", "instructions": "Owning team?",
                 "options": [{"name": "billing", "description": "charges"}, "support"]}
            ]
        });
        ValidSchema::from_value(&v, &SchemaDefaults::default()).expect("valid")
    }

    #[test]
    fn state_range_is_where_the_state_lies_in_the_chat_prompt() {
        let turns = ChatTurns::gemma();
        for layout in [Layout::DocumentFirst, Layout::SchemaFirst] {
            for state in ["x <start_of_turn> y", "  padded  ", ""] {
                let prompt = chat_prompt(&turns, layout, "Questions.", state);
                let want = match layout {
                    Layout::DocumentFirst => state,
                    Layout::SchemaFirst => state.trim(),
                };
                let range = state_range(&turns, layout, "Questions.", state);
                assert_eq!(&prompt[range], want, "{layout:?} {state:?}");
            }
        }
    }

    #[test]
    fn python_json_uses_python_separators_and_keeps_unicode() {
        let v = serde_json::json!({"ticket": "café", "n": [1, 2]});
        assert_eq!(python_json(&v), r#"{"ticket": "café", "n": [1, 2]}"#);
        assert_eq!(state_text(&serde_json::json!("plain")), "plain");
    }

    #[test]
    fn system_text_letters_snapshot() {
        let s = triage();
        let qs: Vec<&Question> = s.questions.iter().collect();
        let text = system_text(&SystemTextSpec {
            questions: &qs,
            instructions: s.instructions.as_deref(),
            format: s.format,
            mode: LabelMode::Letters,
            chunked: false,
            wording: None,
        });
        insta::assert_snapshot!(text);
    }

    #[test]
    fn system_text_words_lists_names() {
        let s = triage();
        let qs: Vec<&Question> = s.questions.iter().collect();
        let text = system_text(&SystemTextSpec {
            questions: &qs,
            instructions: None,
            format: s.format,
            mode: LabelMode::Words,
            chunked: false,
            wording: None,
        });
        assert!(text.contains("  billing: charges\n  support\n"));
        assert!(text.ends_with("written as \"id: answer\"."));
    }

    #[test]
    fn layouts_order_state_and_schema() {
        let d = gemma_chat_prompt(Layout::DocumentFirst, "SYS", "STATE");
        assert_eq!(
            d,
            "<start_of_turn>user\n<user_text>\nSTATE\n</user_text>\n\n<instructions>\nSYS\n</instructions><end_of_turn>\n<start_of_turn>model\n"
        );
        // [system, user] as Gemma's chat template joins them: system, blank
        // line, the trimmed user text, in one user turn.
        let s = gemma_chat_prompt(Layout::SchemaFirst, "SYS", " STATE\n");
        let gemma = ChatTurns::gemma();
        let len = policy_prefix_len(&gemma, Layout::SchemaFirst, "SYS").unwrap_or_default();
        assert_eq!(&s[..len], "<start_of_turn>user\nSYS\n\n");
        assert_eq!(
            gemma_chat_prompt(Layout::SchemaFirst, "SYS", "other")[..len],
            s[..len]
        );
        assert_eq!(
            policy_prefix_len(&gemma, Layout::DocumentFirst, "SYS"),
            None
        );
        assert_eq!(
            s,
            "<start_of_turn>user\nSYS\n\nSTATE<end_of_turn>\n<start_of_turn>model\n"
        );
    }

    #[test]
    fn the_state_prefix_ends_at_the_instructions_line_whatever_the_questions() {
        let chatml = ChatTurns {
            user_open: "<|im_start|>user\n".into(),
            model_open: "<|im_end|>\n<|im_start|>assistant\n".into(),
        };
        for turns in [ChatTurns::gemma(), chatml, ChatTurns::plain()] {
            let len = state_prefix_len(&turns, Layout::DocumentFirst, "STATE").unwrap_or_default();
            let a = chat_prompt(&turns, Layout::DocumentFirst, "ONE QUESTION", "STATE");
            let b = chat_prompt(&turns, Layout::DocumentFirst, "ANOTHER", "STATE");
            assert_eq!(a[..len], b[..len]);
            assert_eq!(
                &a[..len],
                format!(
                    "{}<user_text>\nSTATE\n</user_text>\n\n<instructions>\n",
                    turns.user_open
                )
            );
            assert!(a[len..].starts_with("ONE QUESTION"), "{a}");
            assert_eq!(state_prefix_len(&turns, Layout::SchemaFirst, "STATE"), None);
        }
    }

    #[test]
    fn the_head_prefix_ends_before_the_first_question_whichever_are_listed() {
        let s = triage();
        let block = |qs: &[&Question], instructions: Option<&str>| {
            system_text(&SystemTextSpec {
                questions: qs,
                instructions,
                format: AnswerFormat::for_count(qs.len()),
                mode: LabelMode::Letters,
                chunked: false,
                wording: None,
            })
        };
        let (urgent, team) = (&s.questions[0], &s.questions[1]);
        for instructions in [s.instructions.as_deref(), None] {
            let head = system_head(None, instructions);
            let turns = ChatTurns::gemma();
            let len =
                head_prefix_len(&turns, Layout::DocumentFirst, "STATE", &head).unwrap_or_default();
            let prompts: Vec<String> = [vec![urgent], vec![team], vec![urgent, team]]
                .iter()
                .map(|qs| {
                    let sys = block(qs, instructions);
                    assert!(sys.starts_with(&head), "{sys}");
                    chat_prompt(&turns, Layout::DocumentFirst, &sys, "STATE")
                })
                .collect();
            for p in &prompts {
                assert_eq!(p[..len], prompts[0][..len]);
                // The blank line before the first question is left out: a
                // tokenizer may write its two newlines as one token.
                assert!(p[len..].starts_with("\n\nQuestion "), "{p}");
            }
            let state_len = state_prefix_len(&turns, Layout::DocumentFirst, "STATE");
            assert_eq!(
                state_len.map(|n| &prompts[0][n..len]),
                Some(head.trim_end())
            );
            assert_eq!(
                head_prefix_len(&turns, Layout::SchemaFirst, "STATE", &head),
                None
            );
        }
        assert_eq!(
            system_head(None, Some("  Route support tickets. ")),
            format!("{}\n\nRoute support tickets.\n", Wording::default().lead)
        );
    }

    #[test]
    fn chat_prompt_wraps_any_turns_and_the_policy_prefix_follows_them() {
        let chatml = ChatTurns {
            user_open: "<|im_start|>user\n".into(),
            model_open: "<|im_end|>\n<|im_start|>assistant\n".into(),
        };
        let p = chat_prompt(&chatml, Layout::SchemaFirst, "SYS", "STATE");
        assert_eq!(
            p,
            "<|im_start|>user\nSYS\n\nSTATE<|im_end|>\n<|im_start|>assistant\n"
        );
        let len = policy_prefix_len(&chatml, Layout::SchemaFirst, "SYS").unwrap_or_default();
        assert_eq!(&p[..len], "<|im_start|>user\nSYS\n\n");
        // A base model without a chat format: no markers, a blank line before the answers.
        let plain = ChatTurns::plain();
        let p = chat_prompt(&plain, Layout::SchemaFirst, "SYS", "STATE");
        assert_eq!(p, "SYS\n\nSTATE\n\n");
        assert_eq!(
            policy_prefix_len(&plain, Layout::SchemaFirst, "SYS"),
            Some(5)
        );
        // Gemma's turns give exactly the Gemma prompt.
        assert_eq!(
            chat_prompt(&ChatTurns::gemma(), Layout::DocumentFirst, "SYS", "S"),
            gemma_chat_prompt(Layout::DocumentFirst, "SYS", "S")
        );
    }

    #[test]
    fn the_state_head_ends_after_the_first_key_of_a_schema_first_json_state() {
        let turns = ChatTurns::gemma();
        let head = |layout, state: &str| {
            state_head_len(&turns, layout, "SYS", state)
                .map(|n| chat_prompt(&turns, layout, "SYS", state)[..n].to_owned())
        };
        let policy = "<start_of_turn>user\nSYS\n\n";
        assert_eq!(
            head(Layout::SchemaFirst, r#"{"ticket": "The export fails."}"#).as_deref(),
            Some(format!("{policy}{{\"ticket\": ").as_str())
        );
        // An escaped quote belongs to the key; leading blanks are trimmed as
        // the prompt trims them.
        assert_eq!(
            head(Layout::SchemaFirst, r#"  {"a \"b\"": 1}"#).as_deref(),
            Some(format!(r#"{policy}{{"a \"b\"": "#).as_str())
        );
        for state in [
            "plain text",
            "{}",
            r#"{"ticket": "#,
            r#"{"ticket":"x"}"#,
            r#"{"unterminated"#,
        ] {
            assert_eq!(head(Layout::SchemaFirst, state), None, "{state}");
        }
        assert_eq!(head(Layout::DocumentFirst, r#"{"ticket": "x"}"#), None);
    }
}
