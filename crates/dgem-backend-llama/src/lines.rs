//! [`LineCache`]: encodes a text line by line, with the token ids of each line
//! cached, so the policy text that every prompt of a policy repeats is
//! tokenized once.
//!
//! Why it is exact: llama.cpp's tokenizer first cuts the text at every special
//! token written in it (longest first) and then runs SentencePiece on each
//! piece between them on its own. In Gemma 3 the newline runs `\n` … `\n`×31
//! are special (user-defined) tokens, so a line never merges with the next
//! one: encoding the lines and the newline runs one by one gives the ids of
//! one encode of the whole text, provided no special token holds a newline
//! next to other bytes and none strips the whitespace around it
//! (`LSTRIP`/`RSTRIP`). [`LineCache::new`] checks exactly that and returns
//! `None` otherwise (the tokenizer then encodes whole texts). A test compares
//! both encodes on real prompts and on random texts built from token fragments.
//!
//! Why it is needed: one llama.cpp encode of the ~1,000-character cold prompt
//! took 2.2–2.9 ms median (`dgem bench-speed`, row `tokenize_llama`), the
//! largest part of a decision's time outside the model; most of that text is
//! the policy, the same for every state.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token_type::LlamaTokenAttr;
use llama_cpp_2::vocab::LlamaVocab;
use lru::LruCache;

/// Lines (and newline runs) kept: ~200 policies of 40 lines. A line is a few
/// dozen bytes and its ids, so the cache stays well under 2 MB.
const CACHED_PIECES: usize = 8192;

/// A line's bytes → its token ids.
type Pieces = LruCache<Box<[u8]>, Arc<[LlamaToken]>>;

/// Token ids of text lines, least recently used evicted first.
#[derive(Debug)]
pub(crate) struct LineCache {
    pieces: Mutex<Pieces>,
}

impl LineCache {
    /// The cache for `model`'s vocabulary, or `None` when a line-by-line
    /// encode could differ from a whole-text one there (see the module doc).
    pub(crate) fn new(model: &LlamaModel) -> Option<Self> {
        let vocab = model.vocab();
        let mut newline_is_special = false;
        for id in 0..vocab.n_tokens() {
            let token = LlamaToken(id);
            let attr = vocab.attr(token);
            let special = attr.contains(LlamaTokenAttr::Control)
                || attr.contains(LlamaTokenAttr::UserDefined)
                || attr.contains(LlamaTokenAttr::Unknown);
            if !special {
                continue;
            }
            if attr.contains(LlamaTokenAttr::LStrip) || attr.contains(LlamaTokenAttr::RStrip) {
                return None;
            }
            let text = vocab.text(token)?.to_bytes();
            if text.contains(&b'\n') {
                if text.iter().any(|&b| b != b'\n') {
                    return None;
                }
                newline_is_special |= text == b"\n";
            }
        }
        if !newline_is_special {
            return None;
        }
        Some(Self {
            pieces: Mutex::new(LruCache::new(NonZeroUsize::new(CACHED_PIECES)?)),
        })
    }

    /// Append the ids of `text` (no BOS, special tokens parsed) to `out`.
    pub(crate) fn encode(&self, vocab: &LlamaVocab<'_>, text: &[u8], out: &mut Vec<LlamaToken>) {
        for piece in lines(text) {
            let cached = self
                .pieces
                .lock()
                .ok()
                .and_then(|mut c| c.get(piece).cloned());
            let ids = cached.unwrap_or_else(|| {
                let ids: Arc<[LlamaToken]> = vocab.tokenize(piece, false, true).into();
                if let Ok(mut c) = self.pieces.lock() {
                    c.put(piece.into(), Arc::clone(&ids));
                }
                ids
            });
            out.extend_from_slice(&ids);
        }
    }
}

/// `text` cut into its lines and its newline runs, in order, none empty.
fn lines(text: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = *rest.first()?;
        let is_newline = first == b'\n';
        let len = rest
            .iter()
            .position(|&b| (b == b'\n') != is_newline)
            .unwrap_or(rest.len());
        let (piece, tail) = rest.split_at(len);
        rest = tail;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::lines;

    #[test]
    fn lines_alternate_text_and_newline_runs() {
        let got: Vec<&[u8]> = lines(b"ab\n\ncd\ne\n").collect();
        assert_eq!(got, vec![&b"ab"[..], b"\n\n", b"cd", b"\n", b"e", b"\n"]);
        assert_eq!(lines(b"").count(), 0);
        let got: Vec<&[u8]> = lines(b"\n\n\nx").collect();
        assert_eq!(got, vec![&b"\n\n\n"[..], b"x"]);
    }
}
