//! The tokenizer seam used for slot resolution.
//!
//! Slot resolution (serving.md §4.6) needs to encode candidate answer texts and
//! compare token sequences; it never needs a model. Backends hand the engine an
//! implementation backed by the model's own vocabulary (for Gemma: the
//! SentencePiece-BPE tables in the GGUF metadata, 262,144 ids).

use thiserror::Error;

/// Token id in the model vocabulary.
pub type TokenId = u32;

/// Failure to tokenize or detokenize.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("tokenizer: {0}")]
pub struct TokenizeError(pub String);

/// Text ↔ token ids for one model vocabulary.
///
/// `encode` adds **no** BOS/EOS of its own but must parse special-token strings
/// that appear literally in the text (e.g. Gemma's `<start_of_turn>` → id 105),
/// as Hugging Face `encode(text, add_special_tokens=False)` does for added tokens.
pub trait Tokenizer: Send + Sync {
    /// Encode `text` to ids, without adding BOS/EOS.
    ///
    /// # Errors
    /// [`TokenizeError`] when the underlying tokenizer fails.
    fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError>;

    /// Decode ids back to text (lossy for partial UTF-8 sequences).
    fn decode(&self, ids: &[TokenId]) -> String;

    /// The beginning-of-sequence id to prepend to a whole prompt, if the model uses one
    /// (Gemma: 2).
    fn bos_id(&self) -> Option<TokenId>;

    /// Number of ids in the vocabulary (Gemma 3: 262,144).
    fn vocab_size(&self) -> usize;
}
