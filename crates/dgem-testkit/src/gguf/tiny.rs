//! Tiny GGUF models llama.cpp loads and runs: a few hundred KB of seeded
//! random weights in the real tensor layout of an architecture, a small
//! vocabulary — SentencePiece with byte fallback (Llama 2, Mistral, Phi-3,
//! Gemma style) or byte-level BPE (Llama 3, Qwen style) — holding the
//! chat-marker special tokens of the common templates and the words of test
//! policies, and, optionally, a chat template. They answer at random, but through every step a real model
//! takes: loading, tokenizing, chat turns, decoding, the label readout.
//!
//! ```
//! use dgem_testkit::gguf::tiny::{Arch, TinyModel};
//! let bytes = TinyModel::new(Arch::Qwen2).tied(true).gguf().bytes();
//! assert!(bytes.len() < 1 << 20);
//! ```

use std::path::Path;

use super::vocab::{bpe_tokenizer, spm_tokenizer};
pub use super::vocab::{bpe_vocabulary, vocabulary, CHAT_SPECIALS};
use super::GgufWriter;

/// Hidden size.
pub const N_EMBD: u64 = 32;
/// Attention heads (head size 8).
pub const N_HEAD: u64 = 4;
/// Key/value heads (grouped-query attention).
pub const N_HEAD_KV: u64 = 2;
/// Feed-forward width.
pub const N_FF: u64 = 64;
/// Transformer blocks.
pub const N_LAYER: u64 = 2;
/// Trained context length written in the header.
pub const CONTEXT: u32 = 2048;

/// Llama 3's template (abridged to the turn structure llama.cpp recognises).
pub const LLAMA3_TEMPLATE: &str = "{{- bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
/// ChatML, as Qwen 2 / 2.5 write it.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
/// Granite 3's template (abridged to its turn structure).
pub const GRANITE_TEMPLATE: &str = "{%- for message in messages %}{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content'] + '<|end_of_text|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}";
/// Granite's `logit_scale`: its head divides the logits by it.
pub const GRANITE_LOGIT_SCALE: f32 = 8.0;
/// Phi-3's template.
pub const PHI3_TEMPLATE: &str = "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}";

/// An architecture llama.cpp implements, with its tensor layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `llama`: separate Q/K/V, gated feed-forward.
    Llama,
    /// `qwen2`: as `llama` with Q/K/V biases (and an optional output bias).
    Qwen2,
    /// `phi3`: fused QKV, fused gate+up feed-forward.
    Phi3,
    /// `granite`: the `llama` layout, logits divided by `logit_scale` after
    /// the head (which dgem's label rows do not know: it reads the head).
    Granite,
}

impl Arch {
    /// `general.architecture`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Phi3 => "phi3",
            Self::Granite => "granite",
        }
    }

    /// The chat template its instruction-tuned models ship.
    pub fn chat_template(self) -> &'static str {
        match self {
            Self::Llama => LLAMA3_TEMPLATE,
            Self::Qwen2 => CHATML_TEMPLATE,
            Self::Phi3 => PHI3_TEMPLATE,
            Self::Granite => GRANITE_TEMPLATE,
        }
    }
}

/// A tiny model of one architecture (see the module docs).
#[derive(Debug, Clone)]
pub struct TinyModel {
    /// The architecture.
    pub arch: Arch,
    /// No `output.weight`: the head is the token embedding (llama.cpp and
    /// dgem both read `token_embd.weight`).
    pub tied: bool,
    /// Store the token embedding as `Q8_0` (as Gemma 3's tied head is).
    pub quantized_embedding: bool,
    /// An `output.bias` (Qwen 2 only: llama.cpp loads it there).
    pub output_bias: bool,
    /// `tokenizer.chat_template`; `None` for a base model without one.
    pub chat_template: Option<String>,
    /// A byte-level BPE vocabulary (`gpt2`, pre-tokenizer `qwen2`, no BOS
    /// added) instead of SentencePiece (`llama`, BOS added).
    pub bpe: bool,
    /// Seed of the weights.
    pub seed: u64,
}

impl TinyModel {
    /// An untied `F32` model with its architecture's chat template.
    pub fn new(arch: Arch) -> Self {
        Self {
            arch,
            tied: false,
            quantized_embedding: false,
            output_bias: false,
            chat_template: Some(arch.chat_template().to_owned()),
            bpe: false,
            seed: 1,
        }
    }

    /// Set [`Self::bpe`].
    #[must_use]
    pub fn bpe(mut self, bpe: bool) -> Self {
        self.bpe = bpe;
        self
    }

    /// Set [`Self::tied`].
    #[must_use]
    pub fn tied(mut self, tied: bool) -> Self {
        self.tied = tied;
        self
    }

    /// Set [`Self::quantized_embedding`].
    #[must_use]
    pub fn quantized_embedding(mut self, q: bool) -> Self {
        self.quantized_embedding = q;
        self
    }

    /// Set [`Self::output_bias`].
    #[must_use]
    pub fn output_bias(mut self, bias: bool) -> Self {
        self.output_bias = bias;
        self
    }

    /// Set [`Self::chat_template`].
    #[must_use]
    pub fn chat_template(mut self, template: Option<&str>) -> Self {
        self.chat_template = template.map(str::to_owned);
        self
    }

    /// The whole file.
    pub fn gguf(&self) -> GgufWriter {
        let arch = self.arch.name();
        let vocab = if self.bpe {
            bpe_vocabulary()
        } else {
            vocabulary()
        };
        let n_vocab = vocab.len() as u64;
        let mut g = GgufWriter::new()
            .string("general.architecture", arch)
            .string("general.name", &format!("tiny {arch}"))
            .u32(
                "general.file_type",
                if self.quantized_embedding { 7 } else { 0 },
            )
            .u32(&format!("{arch}.context_length"), CONTEXT)
            .u32(&format!("{arch}.embedding_length"), N_EMBD as u32)
            .u32(&format!("{arch}.block_count"), N_LAYER as u32)
            .u32(&format!("{arch}.feed_forward_length"), N_FF as u32)
            .u32(&format!("{arch}.attention.head_count"), N_HEAD as u32)
            .u32(&format!("{arch}.attention.head_count_kv"), N_HEAD_KV as u32)
            .f32(&format!("{arch}.attention.layer_norm_rms_epsilon"), 1e-5)
            .f32(&format!("{arch}.rope.freq_base"), 10_000.0);
        g = if self.bpe {
            bpe_tokenizer(g, &vocab)
        } else {
            spm_tokenizer(g, &vocab)
        };
        if let Some(t) = &self.chat_template {
            g = g.string("tokenizer.chat_template", t);
        }
        if self.arch == Arch::Granite {
            g = g.f32("granite.logit_scale", GRANITE_LOGIT_SCALE);
        }
        let mut w = Weights::new(self.seed);
        let embd = w.matrix("token_embd.weight", N_EMBD, n_vocab);
        g = if self.quantized_embedding {
            g.tensor_q8_0("token_embd.weight", &[N_EMBD, n_vocab], &embd)
        } else {
            g.tensor_f32("token_embd.weight", &[N_EMBD, n_vocab], &embd)
        };
        g = g.tensor_f32(
            "output_norm.weight",
            &[N_EMBD],
            &w.norm("output_norm", N_EMBD),
        );
        if !self.tied {
            let out = w.matrix("output.weight", N_EMBD, n_vocab);
            g = g.tensor_f32("output.weight", &[N_EMBD, n_vocab], &out);
        }
        if self.output_bias {
            let b = w.vector("output.bias", n_vocab, 1.0);
            g = g.tensor_f32("output.bias", &[n_vocab], &b);
        }
        for i in 0..N_LAYER {
            g = self.block(g, &mut w, i);
        }
        g
    }

    /// Write [`Self::gguf`] to `path`.
    pub fn write(&self, path: &Path) {
        self.gguf().write(path);
    }

    /// The tensors of block `i`.
    fn block(&self, mut g: GgufWriter, w: &mut Weights, i: u64) -> GgufWriter {
        let kv = N_EMBD / N_HEAD * N_HEAD_KV;
        let mut mat = |g: GgufWriter, name: &str, cols: u64, rows: u64| {
            let name = format!("blk.{i}.{name}.weight");
            let data = w.matrix(&name, cols, rows);
            g.tensor_f32(&name, &[cols, rows], &data)
        };
        g = mat(g, "attn_output", N_EMBD, N_EMBD);
        g = mat(g, "ffn_down", N_FF, N_EMBD);
        match self.arch {
            Arch::Llama | Arch::Qwen2 | Arch::Granite => {
                g = mat(g, "attn_q", N_EMBD, N_EMBD);
                g = mat(g, "attn_k", N_EMBD, kv);
                g = mat(g, "attn_v", N_EMBD, kv);
                g = mat(g, "ffn_gate", N_EMBD, N_FF);
                g = mat(g, "ffn_up", N_EMBD, N_FF);
            }
            Arch::Phi3 => {
                g = mat(g, "attn_qkv", N_EMBD, N_EMBD + 2 * kv);
                g = mat(g, "ffn_up", N_EMBD, 2 * N_FF);
            }
        }
        if self.arch == Arch::Qwen2 {
            for (name, n) in [("attn_q", N_EMBD), ("attn_k", kv), ("attn_v", kv)] {
                let name = format!("blk.{i}.{name}.bias");
                let b = w.vector(&name, n, 0.1);
                g = g.tensor_f32(&name, &[n], &b);
            }
        }
        for name in ["attn_norm", "ffn_norm"] {
            let name = format!("blk.{i}.{name}.weight");
            let n = w.norm(&name, N_EMBD);
            g = g.tensor_f32(&name, &[N_EMBD], &n);
        }
        g
    }
}

/// Seeded weights: each tensor's values come from its own splitmix64 stream
/// (seed and tensor name), uniform in `±1/√fan_in`.
struct Weights {
    seed: u64,
}

impl Weights {
    fn new(seed: u64) -> Self {
        Self { seed }
    }

    fn stream(&self, name: &str) -> impl FnMut() -> f32 {
        // FNV-1a of the name, mixed with the seed.
        let mut state = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) ^ self.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        move || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            // 24 random bits → [-1, 1).
            (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
    }

    /// `rows` rows of `cols` values, uniform in `±1/√cols`.
    fn matrix(&mut self, name: &str, cols: u64, rows: u64) -> Vec<f32> {
        let scale = 1.0 / (cols as f32).sqrt();
        let mut next = self.stream(name);
        (0..cols * rows).map(|_| next() * scale).collect()
    }

    /// `n` values uniform in `±scale`.
    fn vector(&mut self, name: &str, n: u64, scale: f32) -> Vec<f32> {
        let mut next = self.stream(name);
        (0..n).map(|_| next() * scale).collect()
    }

    /// A norm's weights: `1 ± 0.1`.
    fn norm(&mut self, name: &str, n: u64) -> Vec<f32> {
        let mut next = self.stream(name);
        (0..n).map(|_| 1.0 + 0.1 * next()).collect()
    }
}

/// The header of a GGUF that is not a text model: a vision projector
/// (`general.architecture` `clip`, `general.type` `mmproj`), as llama.cpp's
/// converters write for the image encoder of a multimodal model.
pub fn projector() -> GgufWriter {
    GgufWriter::new()
        .string("general.architecture", "clip")
        .string("general.type", "mmproj")
        .string("general.name", "tiny projector")
        .bool("clip.has_vision_encoder", true)
        .u32("clip.vision.embedding_length", N_EMBD as u32)
        .declared_tensors(0)
}

/// The header of an embedding-only model: a BERT encoder with mean pooling
/// and a (WordPiece) vocabulary.
pub fn embedding_model() -> GgufWriter {
    GgufWriter::new()
        .string("general.architecture", "bert")
        .string("general.name", "tiny embedder")
        .u32("bert.context_length", 512)
        .u32("bert.embedding_length", N_EMBD as u32)
        .u32("bert.block_count", 1)
        .bool("bert.attention.causal", false)
        .u32("bert.pooling_type", 1)
        .string("tokenizer.ggml.model", "bert")
        .string_array("tokenizer.ggml.tokens", &["[PAD]", "[UNK]", "hello"])
}

/// A header-only text model of `arch` (what a store listing reads): name,
/// `general.file_type`, context length and a three-token vocabulary.
pub fn header(arch: &str, file_type: u32, context: u32) -> GgufWriter {
    GgufWriter::new()
        .string("general.architecture", arch)
        .string("general.name", &format!("tiny {arch}"))
        .u32("general.file_type", file_type)
        .u32(&format!("{arch}.context_length"), context)
        .string_array("tokenizer.ggml.tokens", &["<unk>", "<s>", "</s>"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_models_stay_small_and_differ_by_layout() {
        let untied = TinyModel::new(Arch::Llama).gguf().bytes();
        let tied = TinyModel::new(Arch::Llama).tied(true).gguf().bytes();
        let phi3 = TinyModel::new(Arch::Phi3).gguf().bytes();
        assert!(untied.len() < 400_000, "{}", untied.len());
        assert!(tied.len() < untied.len());
        assert_ne!(untied, phi3);
        // Same seed, same bytes.
        assert_eq!(untied, TinyModel::new(Arch::Llama).gguf().bytes());
    }
}
