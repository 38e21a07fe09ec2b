//! The vocabularies of the tiny models ([`super::tiny`]): SentencePiece with
//! byte fallback, or byte-level BPE with merges, each holding the chat markers
//! of the common templates and whole-word tokens for the words of test policies.

use std::collections::HashSet;

use super::GgufWriter;

/// The special tokens of the chat templates the tiny models use (Llama 3,
/// ChatML, Phi-3, Granite 3; llama.cpp's Phi-3 loader also needs
/// `<|endoftext|>`), all in every tiny vocabulary.
pub const CHAT_SPECIALS: &[&str] = &[
    "<|endoftext|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    "<|start_of_role|>",
    "<|end_of_role|>",
    "<|end_of_text|>",
];

/// Words given whole-word tokens (with and without the `▁` space marker).
const WORDS: &[&str] = &[
    "yes",
    "no",
    "true",
    "false",
    "billing",
    "support",
    "sales",
    "engineering",
    "urgent",
    "team",
    "ticket",
    "refund",
    "charged",
    "twice",
    "calm",
    "annoyed",
    "angry",
    "low",
    "high",
    "question",
    "answer",
    "the",
    "is",
    "a",
    "to",
    "of",
    "and",
    "it",
    "user",
    "assistant",
];

/// The SentencePiece tokenizer keys for `vocab` ([`vocabulary`]).
pub(crate) fn spm_tokenizer(g: GgufWriter, vocab: &[(String, f32, i32)]) -> GgufWriter {
    g.string("tokenizer.ggml.model", "llama")
        .string_array(
            "tokenizer.ggml.tokens",
            &vocab.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(),
        )
        .f32_array(
            "tokenizer.ggml.scores",
            &vocab.iter().map(|t| t.1).collect::<Vec<_>>(),
        )
        .i32_array(
            "tokenizer.ggml.token_type",
            &vocab.iter().map(|t| t.2).collect::<Vec<_>>(),
        )
        .u32("tokenizer.ggml.unknown_token_id", 0)
        .u32("tokenizer.ggml.bos_token_id", 1)
        .u32("tokenizer.ggml.eos_token_id", 2)
        .bool("tokenizer.ggml.add_bos_token", true)
        .bool("tokenizer.ggml.add_eos_token", false)
        // As Gemma's: text after a special token gets no space prefix, so
        // decoding a prompt gives back its text byte for byte.
        .bool("tokenizer.ggml.add_space_prefix", false)
}

/// The byte-level BPE tokenizer keys for `vocab` ([`bpe_vocabulary`]): Qwen
/// 2's pre-tokenizer, merges that build every word prefix, `<|endoftext|>`
/// as BOS/EOS and no BOS added (as Qwen 2.5's GGUFs).
pub(crate) fn bpe_tokenizer(g: GgufWriter, vocab: &[(String, f32, i32)]) -> GgufWriter {
    let id = |text: &str| vocab.iter().position(|t| t.0 == text).unwrap_or(0) as u32;
    g.string("tokenizer.ggml.model", "gpt2")
        .string("tokenizer.ggml.pre", "qwen2")
        .string_array(
            "tokenizer.ggml.tokens",
            &vocab.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(),
        )
        .i32_array(
            "tokenizer.ggml.token_type",
            &vocab.iter().map(|t| t.2).collect::<Vec<_>>(),
        )
        .string_array("tokenizer.ggml.merges", &bpe_merges())
        .u32("tokenizer.ggml.bos_token_id", id("<|endoftext|>"))
        .u32("tokenizer.ggml.eos_token_id", id("<|im_end|>"))
        .u32("tokenizer.ggml.padding_token_id", id("<|endoftext|>"))
        .bool("tokenizer.ggml.add_bos_token", false)
}

/// GPT-2's byte → printable character map (`bytes_to_unicode`): bytes that
/// are printable and not a space stand for themselves, the others for the
/// characters from U+0100 on, in byte order (space is `Ġ`, newline `Ċ`).
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, 33..=126 | 161..=172 | 174..=255);
    if printable(b) {
        return char::from(b);
    }
    let rank = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + rank).unwrap_or('?')
}

/// The byte-level forms of each word (with and without a leading space).
fn bpe_forms() -> Vec<Vec<char>> {
    let space = byte_char(b' ');
    // Every spaced form first: its merges then rank before any bare form's,
    // so ` billing` merges left to right into one token.
    let spaced = WORDS.iter().map(|w| {
        std::iter::once(space)
            .chain(w.chars())
            .collect::<Vec<char>>()
    });
    let bare = WORDS.iter().map(|w| w.chars().collect::<Vec<char>>());
    spaced.chain(bare).collect()
}

/// Merges `prefix[..k-1] prefix[k-1]` building every prefix of every form, once each.
fn bpe_merges() -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for form in bpe_forms() {
        for k in 2..=form.len() {
            let left: String = form[..k - 1].iter().collect();
            let merge = format!("{left} {}", form[k - 1]);
            if seen.insert(merge.clone()) {
                out.push(merge);
            }
        }
    }
    out
}

/// A byte-level BPE vocabulary: the 256 byte characters, every word prefix
/// its merges build, then [`CHAT_SPECIALS`] (control).
pub fn bpe_vocabulary() -> Vec<(String, f32, i32)> {
    const NORMAL: i32 = 1;
    const CONTROL: i32 = 3;
    let mut out: Vec<(String, f32, i32)> = (0..=255u8)
        .map(|b| (byte_char(b).to_string(), 0.0, NORMAL))
        .collect();
    let mut seen: HashSet<String> = out.iter().map(|t| t.0.clone()).collect();
    for form in bpe_forms() {
        for k in 2..=form.len() {
            let piece: String = form[..k].iter().collect();
            if seen.insert(piece.clone()) {
                out.push((piece, 0.0, NORMAL));
            }
        }
    }
    out.extend(
        CHAT_SPECIALS
            .iter()
            .map(|s| ((*s).to_owned(), 0.0, CONTROL)),
    );
    out
}

/// `(text, score, llama.cpp token type)` of every token: `<unk>`, `<s>`,
/// `</s>`, [`CHAT_SPECIALS`] (control), the 256 byte tokens, `▁` and the
/// printable ASCII characters, then every prefix of each word (with and
/// without `▁`), scored by length so SentencePiece merges whole words.
pub fn vocabulary() -> Vec<(String, f32, i32)> {
    const NORMAL: i32 = 1;
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const BYTE: i32 = 6;
    let mut out: Vec<(String, f32, i32)> = vec![
        ("<unk>".into(), 0.0, UNKNOWN),
        ("<s>".into(), 0.0, CONTROL),
        ("</s>".into(), 0.0, CONTROL),
    ];
    out.extend(
        CHAT_SPECIALS
            .iter()
            .map(|s| ((*s).to_owned(), 0.0, CONTROL)),
    );
    out.extend((0..=255u8).map(|b| (format!("<0x{b:02X}>"), 0.0, BYTE)));
    let mut seen: HashSet<String> = out.iter().map(|t| t.0.clone()).collect();
    let mut piece = |text: String, out: &mut Vec<(String, f32, i32)>| {
        if seen.insert(text.clone()) {
            let score = text.chars().count() as f32;
            out.push((text, score, NORMAL));
        }
    };
    piece("▁".into(), &mut out);
    for c in (0x21u8..0x7f).map(char::from) {
        piece(c.to_string(), &mut out);
    }
    for word in WORDS {
        for form in [format!("▁{word}"), (*word).to_owned()] {
            let chars: Vec<char> = form.chars().collect();
            for k in 2..=chars.len() {
                piece(chars[..k].iter().collect(), &mut out);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_has_bytes_specials_and_whole_words_once() {
        let v = vocabulary();
        let texts: HashSet<&str> = v.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(texts.len(), v.len(), "no duplicates");
        for t in [
            "<0x0A>",
            "<0xFF>",
            "<|im_start|>",
            "▁billing",
            "billing",
            "▁no",
        ] {
            assert!(texts.contains(t), "{t}");
        }
        assert!(v.len() < 700, "{}", v.len());
    }

    #[test]
    fn bpe_vocabulary_maps_bytes_like_gpt2_and_merges_whole_words() {
        assert_eq!(byte_char(b' '), 'Ġ');
        assert_eq!(byte_char(b'\n'), 'Ċ');
        assert_eq!(byte_char(b'a'), 'a');
        let v = bpe_vocabulary();
        let texts: HashSet<&str> = v.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(texts.len(), v.len(), "no duplicates");
        for t in ["Ġ", "Ċ", "Ġbilling", "billing", "<|im_start|>"] {
            assert!(texts.contains(t), "{t}");
        }
        // Every merge joins two tokens into a third.
        for m in bpe_merges() {
            let (a, b) = m.split_once(' ').expect("a pair");
            assert!(texts.contains(a) && texts.contains(b), "{m}");
            assert!(texts.contains(format!("{a}{b}").as_str()), "{m}");
        }
    }
}
