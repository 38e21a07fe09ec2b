//! The load-time check of the label-row readout: one short decode with the
//! output head on, and the label-row logits of a spread of token ids compared
//! with llama.cpp's own.
//!
//! The label rows reproduce a head that is `h · W` (plus `output.bias`,
//! softcapped as the GGUF says). An architecture whose graph does more after
//! the product (a logit scale, a mask over part of the vocabulary) or names
//! no `result_norm` node would give plausible but wrong probabilities; this
//! check catches that before the first request and switches the context to
//! llama.cpp's logits ([`Readout::FullHead`]). The KV cache is emptied
//! afterwards, so the check leaves no trace in later reads.

use dgem_backend::BackendError;
use dgem_core::tokenizer::TokenId;

use super::{model_err, pos_i32, token, KvContext};
use crate::labels::Readout;

/// Tokens decoded by the check.
const PROBE_TOKENS: usize = 4;
/// Token ids whose logits are compared (spread over the vocabulary).
const PROBE_IDS: usize = 64;
/// Largest accepted difference: absolute part (an `f32` head against the
/// `f64` sums here)…
const TOLERANCE_ABS: f64 = 1e-3;
/// …plus this share of the largest logit compared (a quantized head: ggml
/// quantizes the hidden state to 8 bits per block before its dot products).
const TOLERANCE_REL: f64 = 0.05;

impl KvContext<'_> {
    /// Check the label-row readout against llama.cpp's logits and choose the
    /// readout from then on (see the module docs); the cache is emptied.
    pub(crate) fn check_readout(&mut self) -> Readout {
        let compared = self.compare_readouts();
        self.reset();
        let reason = match compared {
            Ok((max_error, scale)) if max_error <= TOLERANCE_ABS + TOLERANCE_REL * scale => {
                return Readout::LabelRows {
                    max_error,
                    largest_logit: scale,
                };
            }
            Ok((max_error, scale)) => format!(
                "the label rows differ from llama.cpp's logits by up to {max_error:.4} \
                 (largest logit {scale:.4})"
            ),
            Err(e) => e.to_string(),
        };
        self.read_from_head();
        Readout::FullHead { reason }
    }

    /// Read label logits from llama.cpp's logits from now on.
    pub(crate) fn read_from_head(&mut self) {
        self.head_readout = true;
    }

    /// `(largest difference, largest |logit|)` over the compared ids.
    fn compare_readouts(&mut self) -> Result<(f64, f64), BackendError> {
        let n = self.rows.n_rows();
        if n == 0 {
            return Err(BackendError::Model("the output matrix has no rows".into()));
        }
        let at = |k: usize, of: usize| TokenId::try_from(k * n / of).unwrap_or(0);
        let tokens: Vec<TokenId> = (1..=PROBE_TOKENS)
            .map(|k| at(k, PROBE_TOKENS + 1))
            .collect();
        let last = tokens.len() - 1;
        self.batch.clear();
        self.outputs.clear();
        for (p, &t) in tokens.iter().enumerate() {
            self.batch
                .add(token(t)?, pos_i32(p)?, &[0], p == last)
                .map_err(|e| model_err("batch", e))?;
        }
        self.outputs.push(last);
        self.decode(true)?;
        let hidden = self
            .capture
            .get()
            .row(0)
            .map(<[f32]>::to_vec)
            .ok_or_else(|| {
                BackendError::Model(
                    "the graph has no `result_norm` node of the model's width".into(),
                )
            })?;
        let logits = self
            .ctx
            .get_logits_ith(pos_i32(last)?)
            .iter()
            .map(|&l| f64::from(l))
            .collect::<Vec<_>>();
        let argmax = logits
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(i, _)| i);
        let ids = (0..PROBE_IDS)
            .map(|k| at(k, PROBE_IDS))
            .chain(TokenId::try_from(argmax).ok());
        let (mut max_error, mut scale) = (0.0f64, 0.0f64);
        for id in ids {
            let head = logits.get(id as usize).copied().unwrap_or(f64::NAN);
            let rows = self.rows.logit(&hidden, id)?.unwrap_or(f64::NAN);
            let error = (rows - head).abs();
            if !error.is_finite() {
                return Err(BackendError::Model(format!(
                    "token {id}: label row {rows}, llama.cpp {head}"
                )));
            }
            max_error = max_error.max(error);
            scale = scale.max(head.abs());
        }
        tracing::debug!(max_error, scale, "label-row readout checked");
        Ok((max_error, scale))
    }
}
