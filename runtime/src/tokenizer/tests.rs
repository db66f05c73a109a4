//! The tokenizer on small hand-written model files (metadata only). The comparison with
//! `tokenizers` on a trained vocabulary is `tests/tests/bpe_tokenizer.rs`.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::byte_level::byte_to_char;
use super::*;
use crate::gguf::format::{ValueType, MAGIC, VERSION};
use std::string::{String, ToString};
use std::vec::Vec;

/// A metadata value of the test files.
enum V {
    Str(&'static str),
    Strs(Vec<String>),
    U32(u32),
    U32s(Vec<u32>),
}

/// A GGUF file with these metadata and no tensors.
fn gguf(kv: Vec<(&str, V)>) -> Vec<u8> {
    fn s(b: &mut Vec<u8>, x: &str) {
        b.extend_from_slice(&(x.len() as u64).to_le_bytes());
        b.extend_from_slice(x.as_bytes());
    }
    let mut b = Vec::new();
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        s(&mut b, k);
        match v {
            V::Str(x) => {
                b.extend_from_slice(&ValueType::String.id().to_le_bytes());
                s(&mut b, x);
            }
            V::U32(x) => {
                b.extend_from_slice(&ValueType::U32.id().to_le_bytes());
                b.extend_from_slice(&x.to_le_bytes());
            }
            V::Strs(xs) => {
                b.extend_from_slice(&ValueType::Array.id().to_le_bytes());
                b.extend_from_slice(&ValueType::String.id().to_le_bytes());
                b.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                for x in xs {
                    s(&mut b, &x);
                }
            }
            V::U32s(xs) => {
                b.extend_from_slice(&ValueType::Array.id().to_le_bytes());
                b.extend_from_slice(&ValueType::U32.id().to_le_bytes());
                b.extend_from_slice(&(xs.len() as u64).to_le_bytes());
                for x in xs {
                    b.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    b
}

/// The 256 byte tokens (id = byte), then these.
fn tokens(extra: &[&str]) -> Vec<String> {
    (0..=255u8)
        .map(|b| byte_to_char(b).to_string())
        .chain(extra.iter().map(|t| t.to_string()))
        .collect()
}

const MERGES: [&str; 5] = ["Ġ t", "h e", "Ġt he", "l l", "x y"];
const EXTRA: [&str; 6] = ["Ġt", "he", "Ġthe", "ll", "<|endoftext|>", "日"];
const THE: u32 = 258;
const HE: u32 = 257;
const LL: u32 = 259;
const END: u32 = 260;

fn bpe_file() -> Vec<u8> {
    gguf(std::vec![
        (key::MODEL, V::Str("gpt2")),
        (key::TOKENS, V::Strs(tokens(&EXTRA))),
        (
            key::MERGES,
            V::Strs(MERGES.iter().map(|m| m.to_string()).collect())
        ),
        (key::EOS_ID, V::U32(END)),
    ])
}

fn encode_all<const PIECE: usize>(t: &Tokenizer<'_>, text: &[u8]) -> Result<Vec<u32>, EncodeError> {
    let mut out = [0u32; 64];
    let n = t.encode::<PIECE>(text, &mut out)?;
    Ok(out[..n].to_vec())
}

fn decode_all(t: &Tokenizer<'_>, ids: &[u32]) -> Vec<u8> {
    let mut text = Vec::new();
    for &id in ids {
        let mut buf = [0u8; 16];
        let n = t.decode(id, &mut buf).unwrap();
        text.extend_from_slice(&buf[..n]);
    }
    text
}

#[test]
fn merges_lowest_rank_first_then_leftmost() {
    let bytes = bpe_file();
    let file = GgufFile::parse(&bytes).unwrap();
    let t = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!((t.vocab_len(), t.bos(), t.eos()), (262, None, Some(END)));
    // " the": Ġ+t (rank 0), h+e (1), then Ġt+he (2).
    // " hello": h+e, then l+l; the ranks leave "Ġ" alone.
    assert_eq!(
        encode_all::<16>(&t, b" the hello").unwrap(),
        [THE, 0x20, HE, LL, u32::from(b'o')]
    );
    // Three l: the leftmost pair merges.
    assert_eq!(encode_all::<16>(&t, b"lll").unwrap(), [LL, u32::from(b'l')]);
    assert_eq!(encode_all::<16>(&t, b"").unwrap(), []);
    for text in [&b" the hello"[..], b"lll", b"a\xff\xc3 \n\n x", b"'s 12"] {
        let ids = encode_all::<16>(&t, text).unwrap();
        assert_eq!(decode_all(&t, &ids), text);
    }
}

#[test]
fn decodes_special_and_non_byte_tokens_as_their_text() {
    let bytes = bpe_file();
    let file = GgufFile::parse(&bytes).unwrap();
    let t = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(decode_all(&t, &[END]), b"<|endoftext|>");
    assert_eq!(decode_all(&t, &[END + 1]), "日".as_bytes());
    let mut buf = [0u8; 4];
    assert_eq!(
        t.decode(END + 2, &mut buf),
        Err(DecodeError::UnknownToken(END + 2))
    );
    assert_eq!(
        t.decode(THE, &mut buf[..3]),
        Err(DecodeError::BufferTooSmall {
            needed: 4,
            capacity: 3
        })
    );
}

#[test]
fn full_buffers_and_missing_tokens_are_errors() {
    let bytes = bpe_file();
    let file = GgufFile::parse(&bytes).unwrap();
    let t = Tokenizer::from_gguf(&file).unwrap();
    let mut one = [0u32; 1];
    assert_eq!(
        t.encode::<16>(b" the hello", &mut one),
        Err(EncodeError::OutputFull { capacity: 1 })
    );
    assert_eq!(
        encode_all::<3>(&t, b"ab the"),
        Err(EncodeError::PieceTooLong { at: 2, limit: 3 })
    );
    // "x y" merges into "xy", which is not a token.
    assert_eq!(
        encode_all::<16>(&t, b"axy"),
        Err(EncodeError::NoToken { at: 1, len: 2 })
    );
    // A vocabulary without the byte tokens cannot spell a byte.
    let bytes = gguf(std::vec![
        (key::MODEL, V::Str("gpt2")),
        (key::TOKENS, V::Strs(std::vec!["a".to_string()])),
    ]);
    let file = GgufFile::parse(&bytes).unwrap();
    let t = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(
        encode_all::<16>(&t, b"ab"),
        Err(EncodeError::NoToken { at: 1, len: 1 })
    );
}

#[test]
fn byte_level_files_keep_token_equals_byte() {
    let bytes = gguf(std::vec![(key::MODEL, V::Str(TOKENIZER_BYTES))]);
    let file = GgufFile::parse(&bytes).unwrap();
    let t = Tokenizer::from_gguf(&file).unwrap();
    assert!(matches!(t, Tokenizer::Bytes));
    let text = b"hi \xff";
    assert_eq!(encode_all::<1>(&t, text).unwrap(), [104, 105, 32, 255]);
    assert_eq!(decode_all(&t, &[104, 255]), b"h\xff");
    let mut buf = [0u8; 1];
    assert_eq!(t.decode(256, &mut buf), Err(DecodeError::UnknownToken(256)));
    let mut out = [0u32; 3];
    assert_eq!(
        t.encode::<1>(text, &mut out),
        Err(EncodeError::OutputFull { capacity: 3 })
    );
}

#[test]
fn hostile_tokenizer_keys_are_typed_errors() {
    let cases: Vec<(Vec<(&str, V)>, TokenizerError)> = std::vec![
        (std::vec![], TokenizerError::Missing),
        (
            std::vec![(key::MODEL, V::U32(2))],
            TokenizerError::BadValue(key::MODEL)
        ),
        (
            std::vec![(key::MODEL, V::Str("llama"))],
            TokenizerError::Unsupported
        ),
        (
            std::vec![(key::MODEL, V::Str("gpt2"))],
            TokenizerError::BadValue(key::TOKENS)
        ),
        (
            std::vec![
                (key::MODEL, V::Str("gpt2")),
                (key::TOKENS, V::U32s(std::vec![1, 2]))
            ],
            TokenizerError::BadValue(key::TOKENS)
        ),
        (
            std::vec![
                (key::MODEL, V::Str("gpt2")),
                (key::TOKENS, V::Strs(Vec::new()))
            ],
            TokenizerError::BadValue(key::TOKENS)
        ),
        (
            std::vec![
                (key::MODEL, V::Str("gpt2")),
                (key::TOKENS, V::Strs(tokens(&[]))),
                (key::MERGES, V::U32(0))
            ],
            TokenizerError::BadValue(key::MERGES)
        ),
        (
            std::vec![
                (key::MODEL, V::Str("gpt2")),
                (key::TOKENS, V::Strs(tokens(&[]))),
                (key::BOS_ID, V::U32(256))
            ],
            TokenizerError::BadValue(key::BOS_ID)
        ),
        (
            std::vec![
                (key::MODEL, V::Str("gpt2")),
                (key::TOKENS, V::Strs(tokens(&[]))),
                (key::EOS_ID, V::Str("</s>"))
            ],
            TokenizerError::BadValue(key::EOS_ID)
        ),
    ];
    for (kv, want) in cases {
        let bytes = gguf(kv);
        let file = GgufFile::parse(&bytes).unwrap();
        assert_eq!(Tokenizer::from_gguf(&file).unwrap_err(), want);
    }
}

#[test]
fn merges_that_spell_nothing_never_match() {
    // Malformed merges (no space, two spaces, characters that stand for no byte) are never
    // applied; the text still encodes byte by byte.
    let bytes = gguf(std::vec![
        (key::MODEL, V::Str("gpt2")),
        (key::TOKENS, V::Strs(tokens(&["ab"]))),
        (
            key::MERGES,
            V::Strs(std::vec![
                "ab".into(),
                "a  b".into(),
                "日 b".into(),
                "".into()
            ])
        ),
    ]);
    let file = GgufFile::parse(&bytes).unwrap();
    let t = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(encode_all::<16>(&t, b"ab").unwrap(), [97, 98]);
}
