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

    /// Encode `text` as ordinary text, without adding BOS/EOS: a special-token
    /// string in it (Gemma's `<start_of_turn>`) is encoded as the characters
    /// it is made of, never as the special token (tiktoken's
    /// `encode_ordinary`). A decision's state is untrusted text and goes
    /// through this, so a ticket cannot close the user turn or open a model
    /// turn ([`encode_with_plain_span`]).
    ///
    /// The default is [`Self::encode`]: right for a vocabulary in which no
    /// text encodes to a special token.
    ///
    /// # Errors
    /// [`TokenizeError`] when the underlying tokenizer fails.
    fn encode_ordinary(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        self.encode(text)
    }

    /// Decode ids back to text (lossy for partial UTF-8 sequences).
    fn decode(&self, ids: &[TokenId]) -> String;

    /// The beginning-of-sequence id to prepend to a whole prompt, if the model uses one
    /// (Gemma: 2).
    fn bos_id(&self) -> Option<TokenId>;

    /// Number of ids in the vocabulary (Gemma 3: 262,144).
    fn vocab_size(&self) -> usize;
}

/// Whether `text` holds a string `tok` would encode as a special token
/// (its [`Tokenizer::encode`] and [`Tokenizer::encode_ordinary`] differ).
///
/// # Errors
/// [`TokenizeError`] when the tokenizer fails.
pub fn holds_special(tok: &dyn Tokenizer, text: &str) -> Result<bool, TokenizeError> {
    Ok(!text.is_empty() && tok.encode(text)? != tok.encode_ordinary(text)?)
}

/// Encode `text` with its bytes `plain` (a decision's state) as ordinary
/// text ([`Tokenizer::encode_ordinary`]) and the rest as [`Tokenizer::encode`]
/// does, the three parts apart. Used only for a state that
/// [`holds_special`] strings: splitting may change the tokens at the two
/// seams, so a state without them is encoded with the whole prompt as before.
/// A `plain` range that is out of bounds or not on character boundaries
/// encodes the whole text as ordinary text.
///
/// # Errors
/// [`TokenizeError`] when the tokenizer fails.
pub fn encode_with_plain_span(
    tok: &dyn Tokenizer,
    text: &str,
    plain: std::ops::Range<usize>,
) -> Result<Vec<TokenId>, TokenizeError> {
    let (Some(before), Some(state), Some(after)) = (
        text.get(..plain.start),
        text.get(plain.clone()),
        text.get(plain.end..),
    ) else {
        return tok.encode_ordinary(text);
    };
    let mut out = tok.encode(before)?;
    out.extend(tok.encode_ordinary(state)?);
    out.extend(tok.encode(after)?);
    Ok(out)
}
