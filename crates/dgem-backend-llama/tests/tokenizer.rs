//! Tokenizer ids of the Gemma 3 vocabulary read from the GGUF (vocab only).
#![allow(clippy::print_stderr)]

mod common;

use dgem_backend_llama::LlamaTokenizer;
use dgem_core::tokenizer::Tokenizer;

#[test]
fn gemma_special_and_word_ids() {
    let Some(path) = common::model_path("gemma_special_and_word_ids") else {
        return;
    };
    let tok = LlamaTokenizer::load(&path).expect("vocab loads");
    assert_eq!(tok.bos_id(), Some(2));
    assert_eq!(tok.vocab_size(), 262_144);
    assert_eq!(tok.encode("<start_of_turn>").expect("encodes"), vec![105]);
    assert_eq!(tok.encode("<end_of_turn>").expect("encodes"), vec![106]);
    assert_eq!(tok.encode("").expect("encodes"), Vec::<u32>::new());
    let turn = tok
        .encode("<start_of_turn>user\nHello<end_of_turn>\n")
        .expect("encodes");
    assert_eq!(turn.first(), Some(&105));
    assert!(turn.contains(&106), "{turn:?}");
    assert!(!turn.contains(&2), "encode adds no BOS: {turn:?}");
    // Known ids (cross-checked against `tokenizer.ggml.tokens` read from the GGUF).
    assert_eq!(tok.encode("Hello").expect("encodes"), vec![9259]);
    assert_eq!(tok.encode(" billing").expect("encodes"), vec![47764]);
    assert_eq!(tok.encode("billing").expect("encodes"), vec![103547]);
    assert_eq!(tok.encode(" Paris").expect("encodes"), vec![9079]);
    assert_eq!(tok.encode(" yes").expect("encodes"), vec![11262]);
    let spaced = tok.encode(" billing").expect("encodes");
    let bare = tok.encode("billing").expect("encodes");
    assert_ne!(
        spaced[0], bare[0],
        "`▁billing` and `billing` are different ids"
    );
}

#[test]
fn encode_decode_round_trips() {
    let Some(path) = common::model_path("encode_decode_round_trips") else {
        return;
    };
    let tok = LlamaTokenizer::load(&path).expect("vocab loads");
    for text in [
        "Hello world, this is a billing question.",
        "<start_of_turn>user\nIs it urgent? yes/no<end_of_turn>\n<start_of_turn>model\n",
        "Ünïcödé — 日本語 ✓ 42 + 7 = 49",
        "  leading spaces and\ttabs\n\nnewlines",
    ] {
        let ids = tok.encode(text).expect("encodes");
        assert!(!ids.is_empty());
        assert_eq!(tok.decode(&ids), text);
    }
    // Invalid ids are skipped, never a crash.
    assert_eq!(tok.decode(&[u32::MAX]), "");
    assert_eq!(tok.decode(&[]), "");
}

/// Texts made of pieces that stress special-token parsing and line cuts: every kind of
/// control token, broken markers, user-defined tokens (whitespace runs, HTML
/// tags), plain words and non-ASCII text.
const PIECES: [&str; 27] = [
    "<start_of_turn>",
    "<end_of_turn>",
    "<bos>",
    "<eos>",
    "<pad>",
    "<unk>",
    "<mask>",
    "<unused0>",
    "<unused42>",
    "</s>",
    "<s>",
    "<start_of_",
    "turn>",
    "<",
    ">",
    "<table>",
    "</td>",
    "[multimodal]",
    "\n\n",
    "\n",
    "\r\n",
    " \n ",
    "   ",
    "\t\t",
    "user\n",
    " billing question",
    "Ünïcödé 日本語",
];

fn reference_tokenizer() -> Option<&'static LlamaTokenizer> {
    static TOK: std::sync::OnceLock<Option<LlamaTokenizer>> = std::sync::OnceLock::new();
    TOK.get_or_init(|| {
        common::model_path("line_cached_encode_equals_llama_cpp_special_parsing")
            .map(|p| LlamaTokenizer::load(&p).expect("vocab loads"))
    })
    .as_ref()
}

#[test]
fn line_cached_encode_equals_llama_cpp_special_parsing() {
    let Some(tok) = reference_tokenizer() else {
        return;
    };
    assert!(
        tok.caches_lines(),
        "Gemma 3's newline runs are special tokens: the line cache must be on"
    );
    let prompt = include_str!("prompt.txt");
    let mut texts: Vec<String> = vec![
        prompt.to_owned(),
        format!("{prompt}<unused17>{prompt}"),
        "<start_of_turn>user\nIs it urgent?<end_of_turn>\n<start_of_turn>model\n".into(),
        "<start_of_turn><end_of_turn><start_of_turn>".into(),
        "<<start_of_turn>>".into(),
        "<start_of_turn".into(),
        "</s></sub><s><strong>".into(),
        "\n".repeat(40),
        format!("a{}b", "\n".repeat(63)),
    ];
    texts.extend(PIECES.iter().map(|p| (*p).to_owned()));
    // Twice: the second encode of each text comes from the line cache.
    for text in texts.iter().chain(texts.iter()) {
        assert_eq!(
            tok.encode(text).expect("encodes"),
            tok.encode_reference(text).expect("encodes"),
            "{text:?}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    #[test]
    fn line_cached_encode_equals_llama_cpp_on_random_texts(
        picks in proptest::collection::vec(0..PIECES.len(), 0..24)
    ) {
        if let Some(tok) = reference_tokenizer() {
            let text: String = picks.iter().map(|&i| PIECES[i]).collect();
            proptest::prop_assert_eq!(
                tok.encode(&text).expect("encodes"),
                tok.encode_reference(&text).expect("encodes"),
                "{:?}", text
            );
        }
    }
}
