//! [`LlamaTokenizer`]: the GGUF's own vocabulary (`tokenizer.ggml.*` metadata) as
//! a [`dgem_core::tokenizer::Tokenizer`].

use std::path::Path;
use std::sync::Arc;

use dgem_core::tokenizer::{TokenId, TokenizeError, Tokenizer};
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use crate::runtime::runtime;
use crate::LlamaError;

/// Text ↔ token ids through llama.cpp's tokenizer for one GGUF model.
///
/// `encode` adds no BOS and parses special tokens written literally
/// (`<start_of_turn>` → 105 for Gemma 3). Cheap to clone (shares the model handle).
#[derive(Clone)]
pub struct LlamaTokenizer {
    model: Arc<LlamaModel>,
    vocab_size: usize,
    bos: Option<TokenId>,
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
        Ok(Self {
            model,
            vocab_size,
            bos,
        })
    }

    /// The shared model handle (used by the backend's worker thread).
    pub(crate) fn model(&self) -> Arc<LlamaModel> {
        Arc::clone(&self.model)
    }
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
        if text.len() > i32::MAX as usize / 2 {
            return Err(TokenizeError(format!(
                "text too long: {} bytes",
                text.len()
            )));
        }
        let tokens = self.model.vocab().tokenize(text.as_bytes(), false, true);
        tokens
            .into_iter()
            .map(|LlamaToken(id)| {
                u32::try_from(id).map_err(|_| TokenizeError(format!("negative token id {id}")))
            })
            .collect()
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
