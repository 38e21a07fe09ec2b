//! [`LlamaTokenizer`]: the GGUF's own vocabulary (`tokenizer.ggml.*` metadata) as
//! a [`dgem_core::tokenizer::Tokenizer`].

use std::path::Path;
use std::sync::Arc;

use dgem_core::tokenizer::{TokenId, TokenizeError, Tokenizer};
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token_type::LlamaTokenAttr;

use crate::lines::LineCache;
use crate::runtime::runtime;
use crate::LlamaError;

/// Text ↔ token ids through llama.cpp's tokenizer for one GGUF model.
///
/// `encode` adds no BOS and parses special tokens written literally
/// (`<start_of_turn>` → 105 for Gemma 3). Lines are encoded one by one with
/// their ids cached ([`LineCache`]), which gives the ids of one llama.cpp
/// encode of the whole text. Cheap to clone (shares the model handle and the
/// cache).
#[derive(Clone)]
pub struct LlamaTokenizer {
    model: Arc<LlamaModel>,
    vocab_size: usize,
    bos: Option<TokenId>,
    /// `None` when a line-by-line encode could differ from a whole-text one
    /// in this vocabulary: then every encode is one llama.cpp call.
    lines: Option<Arc<LineCache>>,
    /// Per byte value: whether some control or unknown token's text (what
    /// llama.cpp parses as a special token) begins with it. A text holding
    /// none of these bytes holds no special-token string, which spares
    /// [`Tokenizer::holds_special`] its two encodes for most states.
    special_first: [bool; 256],
}

impl std::fmt::Debug for LlamaTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaTokenizer")
            .field("vocab_size", &self.vocab_size)
            .field("bos", &self.bos)
            .finish_non_exhaustive()
    }
}

impl LlamaTokenizer {
    /// Load only the vocabulary of the GGUF at `path` (no weights are read).
    ///
    /// # Errors
    /// [`LlamaError`] when the file is missing or llama.cpp cannot read it.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, LlamaError> {
        let params = LlamaModelParams::default().with_vocab_only(true);
        let model = load_model(path.as_ref(), &params)?;
        Self::from_model(Arc::new(model))
    }

    /// Wrap an already loaded model (full or vocab-only).
    pub(crate) fn from_model(model: Arc<LlamaModel>) -> Result<Self, LlamaError> {
        let vocab = model.vocab();
        let n = vocab.n_tokens();
        let vocab_size = usize::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| LlamaError::Unsupported(format!("vocabulary size {n}")))?;
        let bos_raw = vocab.bos().0;
        let bos = if vocab.should_add_bos() {
            u32::try_from(bos_raw).ok()
        } else {
            None
        };
        let mut special_first = [false; 256];
        for id in 0..n {
            let token = LlamaToken(id);
            let attr = vocab.attr(token);
            if !(attr.contains(LlamaTokenAttr::Control) || attr.contains(LlamaTokenAttr::Unknown)) {
                continue;
            }
            if let Some(&b) = vocab.text(token).and_then(|t| t.to_bytes().first()) {
                special_first[usize::from(b)] = true;
            }
        }
        let lines = LineCache::new(&model).map(Arc::new);
        if lines.is_none() {
            tracing::debug!("newlines are not special tokens here: texts are encoded whole");
        }
        Ok(Self {
            model,
            vocab_size,
            bos,
            lines,
            special_first,
        })
    }

    /// Whether [`Tokenizer::encode`] encodes line by line through the cache
    /// (`true` for Gemma 3) rather than whole texts.
    #[must_use]
    pub fn caches_lines(&self) -> bool {
        self.lines.is_some()
    }

    /// Token ids of `text` from one llama.cpp encode of the whole text, no
    /// cache: the reference [`Tokenizer::encode`] must equal.
    ///
    /// # Errors
    /// As [`Tokenizer::encode`].
    pub fn encode_reference(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        check_len(text)?;
        ids(self.model.vocab().tokenize(text.as_bytes(), false, true))
    }

    /// The shared model handle (used by the backend's worker thread).
    pub(crate) fn model(&self) -> Arc<LlamaModel> {
        Arc::clone(&self.model)
    }
}

/// llama.cpp counts tokens in an `i32`: refuse texts that could overflow it.
fn check_len(text: &str) -> Result<(), TokenizeError> {
    if text.len() > i32::MAX as usize / 2 {
        return Err(TokenizeError(format!(
            "text too long: {} bytes",
            text.len()
        )));
    }
    Ok(())
}

/// llama.cpp's token ids as dgem's.
fn ids(tokens: Vec<LlamaToken>) -> Result<Vec<TokenId>, TokenizeError> {
    tokens
        .into_iter()
        .map(|LlamaToken(id)| {
            u32::try_from(id).map_err(|_| TokenizeError(format!("negative token id {id}")))
        })
        .collect()
}

/// Load a model with `params`, mapping failures to [`LlamaError`].
pub(crate) fn load_model(path: &Path, params: &LlamaModelParams) -> Result<LlamaModel, LlamaError> {
    if !path.is_file() {
        return Err(LlamaError::ModelNotFound(path.to_path_buf()));
    }
    let rt = runtime()?;
    LlamaModel::load_from_file(rt, path, params).map_err(|e| LlamaError::Load {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

impl Tokenizer for LlamaTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        check_len(text)?;
        let vocab = self.model.vocab();
        let Some(lines) = &self.lines else {
            return ids(vocab.tokenize(text.as_bytes(), false, true));
        };
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        lines.encode(&vocab, text.as_bytes(), &mut out);
        ids(out)
    }

    /// Only where a byte of `text` can begin a control or unknown token's
    /// text are the two encodes compared.
    fn holds_special(&self, text: &str) -> Result<bool, TokenizeError> {
        if !text.bytes().any(|b| self.special_first[usize::from(b)]) {
            return Ok(false);
        }
        Ok(self.encode(text)? != self.encode_ordinary(text)?)
    }

    /// llama.cpp's tokenizer with `parse_special` off: a control token's
    /// text (`<start_of_turn>`) is split like any other text. No line cache:
    /// states are encoded this way only to check them
    /// ([`Tokenizer::holds_special`]) and when they hold such a string.
    fn encode_ordinary(&self, text: &str) -> Result<Vec<TokenId>, TokenizeError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        check_len(text)?;
        ids(self.model.vocab().tokenize(text.as_bytes(), false, false))
    }

    fn decode(&self, ids: &[TokenId]) -> String {
        // llama.cpp indexes its tables with these ids unchecked: drop invalid ones.
        let tokens: Vec<LlamaToken> = ids
            .iter()
            .filter(|&&id| (id as usize) < self.vocab_size)
            .filter_map(|&id| i32::try_from(id).ok().map(LlamaToken))
            .collect();
        if tokens.is_empty() {
            return String::new();
        }
        let bytes = self.model.vocab().detokenize(&tokens, false, true);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn bos_id(&self) -> Option<TokenId> {
        self.bos
    }

    fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}
