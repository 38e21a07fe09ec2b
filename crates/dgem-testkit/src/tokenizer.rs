//! A toy tokenizer: words (with `▁` after a space) and single punctuation
//! characters, ids handed out on first use, and an exact inverse.

use std::collections::HashMap;
use std::sync::Mutex;

use dgem_core::tokenizer::{TokenId, TokenizeError, Tokenizer};

/// Whitespace/punctuation tokenizer: `▁word` after a space, one id per new piece.
#[derive(Debug, Default)]
pub struct ToyTokenizer {
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    ids: HashMap<String, TokenId>,
    pieces: Vec<String>,
}

/// Ids below this are reserved (BOS is 2).
const FIRST_ID: TokenId = 10;

impl ToyTokenizer {
    /// The id of `piece`, assigned on first use.
    pub fn id(&self, piece: &str) -> TokenId {
        let mut t = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(id) = t.ids.get(piece) {
            return *id;
        }
        let id = FIRST_ID + TokenId::try_from(t.pieces.len()).unwrap_or(TokenId::MAX - FIRST_ID);
        t.ids.insert(piece.to_owned(), id);
        t.pieces.push(piece.to_owned());
        id
    }
}

impl Tokenizer for ToyTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        let mut out = Vec::new();
        let mut word = String::new();
        let mut space = false;
        for c in text.chars().chain(std::iter::once('\u{0}')) {
            if c.is_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                let piece = if space {
                    format!("▁{word}")
                } else {
                    word.clone()
                };
                out.push(self.id(&piece));
                word.clear();
                space = false;
            }
            match c {
                '\u{0}' => {}
                ' ' => space = true,
                other => out.push(self.id(&other.to_string())),
            }
        }
        Ok(out)
    }

    fn decode(&self, ids: &[TokenId]) -> String {
        let t = self
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        for id in ids {
            let Some(piece) = id
                .checked_sub(FIRST_ID)
                .and_then(|i| t.pieces.get(i as usize))
            else {
                continue;
            };
            match piece.strip_prefix('▁') {
                Some(word) => {
                    out.push(' ');
                    out.push_str(word);
                }
                None => out.push_str(piece),
            }
        }
        out
    }

    fn bos_id(&self) -> Option<TokenId> {
        Some(2)
    }

    fn vocab_size(&self) -> usize {
        100_000
    }
}
