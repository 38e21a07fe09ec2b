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
