//! [`ChatTurns`]: the text a model's chat format writes around the one user
//! turn of a prompt.
//!
//! dgem's prompts are one user message (the question block and the state,
//! [`super::user_content`]) followed by the opening of the model's turn, where
//! the answer slots begin. Only the two seams differ between models: what opens
//! the user turn, and what closes it and opens the model's. A backend derives
//! them from its model (the embedded one from the GGUF's chat template) and
//! carries them in its info; the prompt builder only concatenates.

/// Gemma's user-turn opener (special id 105 followed by `user\n`).
pub const GEMMA_USER_TURN: &str = "<start_of_turn>user\n";
/// Gemma's turn closer plus the model-turn opener.
pub const GEMMA_MODEL_TURN: &str = "<end_of_turn>\n<start_of_turn>model\n";
/// What separates the state from the answers in a [`ChatTurns::plain`] prompt.
pub const PLAIN_MODEL_TURN: &str = "\n\n";

/// The two seams of a chat prompt around its user text: `user_open`, the user
/// text, then `model_open` (which ends where the model starts to answer).
///
/// ```
/// use dgem_core::prompt::ChatTurns;
/// let t = ChatTurns::gemma();
/// assert_eq!(t.wrap("Hi"), "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
/// assert_eq!(ChatTurns::plain().wrap("Hi"), "Hi\n\n");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChatTurns {
    /// Text before the user's message, e.g. `<|im_start|>user\n`.
    pub user_open: String,
    /// Text after the user's message up to the model's first token: the
    /// user-turn closer and the model-turn opener, e.g.
    /// `<|im_end|>\n<|im_start|>assistant\n`.
    pub model_open: String,
}

impl ChatTurns {
    /// Gemma's turn markers ([`GEMMA_USER_TURN`], [`GEMMA_MODEL_TURN`]): what
    /// the small embedded model (Gemma 3 270M) and DiffusionGemma read.
    pub fn gemma() -> Self {
        Self {
            user_open: GEMMA_USER_TURN.to_owned(),
            model_open: GEMMA_MODEL_TURN.to_owned(),
        }
    }

    /// No turn markers, for a base model without a chat format: the user text,
    /// then a blank line ([`PLAIN_MODEL_TURN`]) before the answers.
    pub fn plain() -> Self {
        Self {
            user_open: String::new(),
            model_open: PLAIN_MODEL_TURN.to_owned(),
        }
    }

    /// Whether these are [`ChatTurns::plain`].
    pub fn is_plain(&self) -> bool {
        self.user_open.is_empty() && self.model_open == PLAIN_MODEL_TURN
    }

    /// `user` inside the turns: `user_open`, `user`, `model_open`.
    pub fn wrap(&self, user: &str) -> String {
        let mut out =
            String::with_capacity(self.user_open.len() + user.len() + self.model_open.len());
        out.push_str(&self.user_open);
        out.push_str(user);
        out.push_str(&self.model_open);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemma_turns_are_the_gemma_markers_byte_for_byte() {
        let t = ChatTurns::gemma();
        assert_eq!(t.user_open, "<start_of_turn>user\n");
        assert_eq!(t.model_open, "<end_of_turn>\n<start_of_turn>model\n");
        assert!(!t.is_plain());
    }

    #[test]
    fn plain_turns_only_separate_the_answers() {
        let t = ChatTurns::plain();
        assert!(t.is_plain());
        assert_eq!(t.wrap("Q\n\nS"), "Q\n\nS\n\n");
    }
}
