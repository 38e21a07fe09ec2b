//! [`HfTokenizer`]: a Hugging Face `tokenizer.json` (DiffusionGemma ships one
//! with its weights) as a [`dgem_core::tokenizer::Tokenizer`].
//!
//! Loaded with the `tokenizers` crate built without its C regex engine
//! (`fancy-regex` instead of onig) and without network access.

use std::path::Path;

use dgem_core::tokenizer::{TokenId, TokenizeError, Tokenizer};

use crate::config::VllmError;

/// Text ↔ ids through a `tokenizer.json`.
///
/// `encode` adds no special tokens of its own and parses added tokens written
/// literally, like `encode(text, add_special_tokens=False)`.
pub struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    bos: Option<TokenId>,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .finish_non_exhaustive()
    }
}

impl HfTokenizer {
    /// Load `tokenizer.json` from `path`.
    ///
    /// # Errors
    /// [`VllmError::Tokenizer`] when the file is missing or not a tokenizer.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, VllmError> {
        let path = path.as_ref();
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| VllmError::Tokenizer {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let bos = inner.token_to_id("<bos>");
        Ok(Self { inner, bos })
    }
}

impl Tokenizer for HfTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        self.inner
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizeError(e.to_string()))
    }

    fn decode(&self, ids: &[TokenId]) -> String {
        self.inner.decode(ids, false).unwrap_or_default()
    }

    fn bos_id(&self) -> Option<TokenId> {
        self.bos
    }

    fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A three-word WordLevel tokenizer with one added special token.
    const TINY: &str = r#"{
      "version": "1.0", "truncation": null, "padding": null,
      "added_tokens": [{"id": 3, "content": "<bos>", "single_word": false, "lstrip": false,
                        "rstrip": false, "normalized": false, "special": true}],
      "normalizer": null,
      "pre_tokenizer": {"type": "Whitespace"},
      "post_processor": null, "decoder": null,
      "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "yes": 1, "no": 2, "<bos>": 3},
                "unk_token": "[UNK]"}
    }"#;

    #[test]
    fn loads_tokenizer_json_and_encodes_without_special_tokens() {
        let dir = std::env::temp_dir().join(format!("dgem-hf-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tokenizer.json");
        std::fs::write(&path, TINY).expect("write");
        let tok = HfTokenizer::load(&path).expect("loads");
        assert_eq!(tok.encode("yes no maybe").expect("encodes"), vec![1, 2, 0]);
        assert_eq!(tok.encode("<bos>yes").expect("encodes"), vec![3, 1]);
        assert_eq!(tok.bos_id(), Some(3));
        assert_eq!(tok.vocab_size(), 4);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn missing_file_names_the_path() {
        let err = HfTokenizer::load("/nonexistent/tokenizer.json").expect_err("must fail");
        assert!(
            err.to_string().contains("/nonexistent/tokenizer.json"),
            "{err}"
        );
    }
}
