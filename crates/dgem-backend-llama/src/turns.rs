//! A GGUF model's [`ChatTurns`]: the seams its chat format writes around
//! the user text, derived once at load.
//!
//! The GGUF's own chat template (`tokenizer.chat_template`) is applied by
//! llama.cpp (`llama_chat_apply_template`, which recognises the template
//! families it knows by their markers: ChatML, Llama 3, Phi-3, Gemma, Mistral
//! and ~40 more) to one user message holding a sentinel text, with the model's
//! turn opened after it; the text before the sentinel is the user-turn opener,
//! the text after it closes that turn and opens the model's. A leading BOS
//! written by the template is dropped (the prompt builder adds BOS itself).
//!
//! Without a template llama.cpp can apply (none in the GGUF, or one it does
//! not recognise, which is logged as a warning at load):
//! - a **Gemma** family model (`general.architecture` `gemma*`) whose
//!   vocabulary has `<start_of_turn>` as one token gets llama.cpp's `gemma`
//!   template. Gemma's base checkpoints (the embedded 270M among them) ship
//!   no template, but their vocabulary holds the instruction-tuned markers and
//!   reading with them was measured better (engine-notes.md §2: 27 → 33 of 60
//!   with calibration). These are exactly [`ChatTurns::gemma`];
//! - any other model gets [`ChatTurns::plain`]: the user text, a blank line,
//!   the answers.

use std::panic::{catch_unwind, AssertUnwindSafe};

use dgem_core::prompt::ChatTurns;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};

/// Stands for the user text while a chat template is applied.
const SENTINEL: &str = "DGEM-USER-TEXT-5c1e";
/// The Gemma turn opener that must be one token for the Gemma default.
const GEMMA_MARKER: &str = "<start_of_turn>";

/// Where a model's [`ChatTurns`] came from (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnsOrigin {
    /// The GGUF's `tokenizer.chat_template`, applied by llama.cpp.
    Template,
    /// No usable template; a Gemma family vocabulary: llama.cpp's `gemma` template.
    GemmaFamily,
    /// No usable template: no turn markers ([`ChatTurns::plain`]).
    Plain,
}

impl TurnsOrigin {
    /// A short name for logs and diagnostics: `template`, `gemma`, `plain`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Template => "template",
            Self::GemmaFamily => "gemma",
            Self::Plain => "plain",
        }
    }
}

/// The turns of `model` and where they came from (see the module docs).
pub(crate) fn chat_turns(model: &LlamaModel) -> (ChatTurns, TurnsOrigin) {
    match model.chat_template(None) {
        Ok(tmpl) => match apply(model, &tmpl) {
            Ok(turns) => return (turns, TurnsOrigin::Template),
            // A template llama.cpp does not recognise: said once, at load.
            Err(why) => tracing::warn!(
                %why,
                "the GGUF's chat template cannot be applied by llama.cpp; prompts use the fallback turns"
            ),
        },
        Err(e) => tracing::debug!(%e, "the GGUF has no chat template"),
    }
    if is_gemma_family(model) {
        match LlamaChatTemplate::new("gemma")
            .map_err(|e| e.to_string())
            .and_then(|tmpl| apply(model, &tmpl))
        {
            Ok(turns) => return (turns, TurnsOrigin::GemmaFamily),
            Err(why) => tracing::warn!(%why, "llama.cpp's gemma template failed"),
        }
    }
    (ChatTurns::plain(), TurnsOrigin::Plain)
}

/// `general.architecture` starts with `gemma` and `<start_of_turn>` is one token.
fn is_gemma_family(model: &LlamaModel) -> bool {
    let arch = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    arch.starts_with("gemma")
        && model
            .vocab()
            .tokenize(GEMMA_MARKER.as_bytes(), false, true)
            .len()
            == 1
}

/// The turns `tmpl` writes around one user message, split at the sentinel.
fn apply(model: &LlamaModel, tmpl: &LlamaChatTemplate) -> Result<ChatTurns, String> {
    let rendered = catch_unwind(AssertUnwindSafe(|| -> Result<String, String> {
        let msg = LlamaChatMessage::new("user".into(), SENTINEL.into())
            .map_err(|e| format!("message: {e}"))?;
        model
            .apply_chat_template(tmpl, &[msg], true)
            .map_err(|e| format!("llama.cpp cannot apply the template: {e}"))
    }))
    .unwrap_or_else(|_| Err("applying the template panicked".into()))?;
    split(&rendered, bos_text(model).as_deref())
}

/// The text of the BOS token the tokenizer adds itself, if it adds one.
fn bos_text(model: &LlamaModel) -> Option<String> {
    let vocab = model.vocab();
    let bos = vocab.bos();
    let valid = (0..vocab.n_tokens()).contains(&bos.0);
    if !vocab.should_add_bos() || !valid {
        return None;
    }
    vocab
        .text(bos)
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| !t.is_empty())
}

/// Split a template's rendering of the sentinel message into its turns,
/// dropping a leading `bos` (the prompt builder writes BOS itself).
fn split(rendered: &str, bos: Option<&str>) -> Result<ChatTurns, String> {
    let (before, after) = rendered
        .split_once(SENTINEL)
        .ok_or_else(|| format!("the template dropped the user text: {rendered:?}"))?;
    if after.is_empty() {
        return Err(format!(
            "the template opens no model turn after the user text: {rendered:?}"
        ));
    }
    let before = bos.and_then(|b| before.strip_prefix(b)).unwrap_or(before);
    Ok(ChatTurns {
        user_open: before.to_owned(),
        model_open: after.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_cuts_at_the_sentinel_and_drops_a_leading_bos() {
        let chatml = format!("<|im_start|>user\n{SENTINEL}<|im_end|>\n<|im_start|>assistant\n");
        let t = split(&chatml, None).expect("splits");
        assert_eq!(t.user_open, "<|im_start|>user\n");
        assert_eq!(t.model_open, "<|im_end|>\n<|im_start|>assistant\n");

        let llama2 = format!("<s>[INST] {SENTINEL} [/INST]");
        let t = split(&llama2, Some("<s>")).expect("splits");
        assert_eq!(t.user_open, "[INST] ");
        assert_eq!(t.model_open, " [/INST]");
    }

    #[test]
    fn split_refuses_a_rendering_without_the_text_or_a_model_turn() {
        assert!(split("<|user|>\n", None)
            .expect_err("no sentinel")
            .contains("dropped the user text"));
        assert!(split(&format!("<|user|>{SENTINEL}"), None)
            .expect_err("no model turn")
            .contains("opens no model turn"));
    }
}
