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

    /// Whether `text` holds a string this tokenizer would encode as a
    /// special token: its [`Self::encode`] and [`Self::encode_ordinary`]
    /// differ (the default compares them; a tokenizer that knows its
    /// special-token texts may answer `false` sooner).
    ///
    /// # Errors
    /// [`TokenizeError`] when the tokenizer fails.
    fn holds_special(&self, text: &str) -> Result<bool, TokenizeError> {
        Ok(!text.is_empty() && self.encode(text)? != self.encode_ordinary(text)?)
    }

    /// Decode ids back to text (lossy for partial UTF-8 sequences).
    fn decode(&self, ids: &[TokenId]) -> String;

    /// The beginning-of-sequence id to prepend to a whole prompt, if the model uses one
    /// (Gemma: 2).
    fn bos_id(&self) -> Option<TokenId>;

    /// Number of ids in the vocabulary (Gemma 3: 262,144).
    fn vocab_size(&self) -> usize;
}

/// Encode `text` with its bytes `plain` (a decision's state) as ordinary
/// text ([`Tokenizer::encode_ordinary`]) and the rest as [`Tokenizer::encode`]
/// does, the three parts apart. Used only for a state that holds special
/// strings ([`Tokenizer::holds_special`]): splitting may change the tokens at the two
/// seams, so a state without them is encoded with the whole prompt as before.
///
/// # Errors
/// [`TokenizeError`] when the tokenizer fails, or when `plain` is out of
/// `text`'s bounds or not on character boundaries (naming the range and
/// the length).
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
        return Err(TokenizeError(format!(
            "the state's byte range {}..{} is not a span of the {}-byte prompt",
            plain.start,
            plain.end,
            text.len()
        )));
    };
    let mut out = tok.encode(before)?;
    out.extend(tok.encode_ordinary(state)?);
    out.extend(tok.encode(after)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// One id per byte (its value + 10), and `<s>` as special token 1 when
    /// special strings are parsed.
    struct Marked;

    impl Tokenizer for Marked {
        fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
            let mut out = Vec::new();
            for (i, piece) in text.split("<s>").enumerate() {
                if i > 0 {
                    out.push(1);
                }
                out.extend(self.encode_ordinary(piece)?);
            }
            Ok(out)
        }

        fn encode_ordinary(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
            Ok(text.bytes().map(|b| TokenId::from(b) + 10).collect())
        }

        fn decode(&self, _ids: &[TokenId]) -> String {
            String::new()
        }

        fn bos_id(&self) -> Option<TokenId> {
            None
        }

        fn vocab_size(&self) -> usize {
            266
        }
    }

    #[test]
    fn a_special_string_in_the_plain_span_is_spelled_and_the_rest_parsed() {
        let tok = Marked;
        assert!(tok.holds_special("a<s>b").unwrap());
        assert!(!tok.holds_special("a<b").unwrap());
        assert!(!tok.holds_special("").unwrap());
        let text = "<s>[x<s>]<s>";
        let got = encode_with_plain_span(&tok, text, 4..8).unwrap();
        // The markers outside the span are token 1; the one inside is its
        // four characters.
        assert_eq!(got.iter().filter(|&&t| t == 1).count(), 2);
        assert_eq!(got.len(), 2 + 4 + 2);
        // Without a special string the split encodes what one encode does.
        let plain = "ab[cd]ef";
        assert_eq!(
            encode_with_plain_span(&tok, plain, 3..5).unwrap(),
            tok.encode(plain).unwrap()
        );
        // A range that is not a span of the text is an error naming it.
        let e = encode_with_plain_span(&tok, text, 4..99).unwrap_err();
        assert!(e.0.contains("4..99") && e.0.contains("12-byte"), "{}", e.0);
    }
}
