//! A BPE tokenizer trained here with Hugging Face `tokenizers` (byte-level, GPT-2 style) goes
//! through a checkpoint folder and `convert` into a model file; then the runtime's `no_std`
//! encoder and the host's `HostTokenizer` must give `tokenizers`' ids on varied and arbitrary
//! text, decode must give back the exact bytes (invalid UTF-8 included), full buffers must be
//! errors and hostile vocabulary data must be errors, never panics.

use loglinear_converter::export::{ExportOptions, ExportedModel};
use loglinear_converter::model_source::{AlignedBytes, ModelSource};
use loglinear_converter::tokenize::HostTokenizer;
use loglinear_converter::vocab::Vocabulary;
use loglinear_converter::{Checkpoint, GgufWriter, Value};
use loglinear_runtime::gguf::format::tokenizer as key;
use loglinear_runtime::gguf::GgufFile;
use loglinear_runtime::tokenizer::pretokenize::pieces;
use loglinear_runtime::tokenizer::{DecodeError, EncodeError, Tokenizer, TokenizerError};
use loglinear_tests::bpe_fixture::{write_model_folder, CORPUS, END, MODEL_VOCAB};
use proptest::prelude::*;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The runtime encoder's longest piece in these tests, in bytes.
const PIECE: usize = 1024;
/// Text the tests encode: the corpus's kinds of text, and some it never saw.
const SAMPLES: &[&str] = &[
    "",
    " ",
    "a",
    "Hello, world! The lazy dog didn't jump.",
    "It's, it'S, I'LL, we've, they're, she'd, 'tis, don't, can't'nt'''s",
    "int main(void) { return 0; }\n",
    "x = [1, 22, 333, 4444, 55555]; y = -0.5e+10",
    "   leading and trailing spaces   ",
    "\n\n\nthree newlines\r\n\r\ncrlf\t\ttabs \t mixed \u{a0}nbsp \u{3000}ideographic",
    "Zürich café naïve ÆØÅ",
    "東京タワーは高い。中文，한국어",
    "😀🎉 👍🏽 family: 👨‍👩‍👧 flag: 🇯🇵",
    "e\u{301}\u{302} combining marks on nothing: \u{301}\u{301}",
    "numbers ١٢٣ Ⅻ ½ and letters ǅ ʰ",
    "a     b",
    "\u{0}\u{1}\u{7f} control \u{200b}zero width\u{feff}",
];

/// Everything the tests share: the trained tokenizer, its folder and the model file.
struct Fixture {
    trained: tokenizers::Tokenizer,
    dir: PathBuf,
    gguf: AlignedBytes,
    host: HostTokenizer,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("loglinear-bpe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trained = write_model_folder(&dir);
        let ckpt = Checkpoint::load(&dir).unwrap();
        let gguf = ExportedModel::from_checkpoint(&ckpt, &ExportOptions::default())
            .unwrap()
            .to_gguf()
            .unwrap();
        let path = dir.join("model.gguf");
        std::fs::write(&path, &gguf).unwrap();
        let host = ModelSource::open(&path)
            .unwrap()
            .host_tokenizer(&path)
            .unwrap();
        Fixture {
            trained,
            dir,
            gguf: AlignedBytes::from_slice(&gguf),
            host,
        }
    })
}

fn runtime_tokenizer(bytes: &[u8]) -> Tokenizer<'_> {
    Tokenizer::from_gguf(&GgufFile::parse(bytes).unwrap()).unwrap()
}

fn runtime_encode(t: &Tokenizer<'_>, text: &[u8]) -> Result<Vec<u32>, EncodeError> {
    let mut ids = vec![0u32; text.len()];
    let n = t.encode::<PIECE>(text, &mut ids)?;
    ids.truncate(n);
    Ok(ids)
}

fn runtime_decode(t: &Tokenizer<'_>, ids: &[u32]) -> Result<Vec<u8>, DecodeError> {
    let mut text = Vec::new();
    let mut buf = [0u8; 64];
    for &id in ids {
        let n = t.decode(id, &mut buf)?;
        text.extend_from_slice(&buf[..n]);
    }
    Ok(text)
}

fn reference_ids(text: &str) -> Vec<u32> {
    let encoding = fixture().trained.encode(text, false).unwrap();
    encoding.get_ids().to_vec()
}

/// Both encoders give `tokenizers`' ids for `text`, and both decode them back to it.
fn check_text(t: &Tokenizer<'_>, text: &str) {
    let want = reference_ids(text);
    let ours = runtime_encode(t, text.as_bytes()).unwrap();
    assert_eq!(ours, want, "runtime on {text:?}");
    let host = fixture().host.encode(text).unwrap();
    assert_eq!(host, want, "host on {text:?}");
    assert_eq!(runtime_decode(t, &ours).unwrap(), text.as_bytes());
    assert_eq!(fixture().host.decode(&host).unwrap(), text.as_bytes());
}

#[test]
fn the_model_file_carries_the_trained_vocabulary() {
    let f = fixture();
    let t = runtime_tokenizer(f.gguf.as_bytes());
    let end = f.trained.token_to_id(END).unwrap();
    assert_eq!(t.vocab_len() as usize, MODEL_VOCAB);
    assert_eq!((t.bos(), t.eos()), (Some(end), Some(end)));
    assert_eq!((f.host.bos(), f.host.eos()), (Some(end), Some(end)));
    // The checkpoint folder gives the same host tokenizer as the model file.
    let from_folder = ModelSource::open(&f.dir)
        .unwrap()
        .host_tokenizer(&f.dir)
        .unwrap();
    assert_eq!(
        from_folder.encode(CORPUS[0]).unwrap(),
        reference_ids(CORPUS[0])
    );
    // Decoding a special token gives its text; unused ids decode to their padding text.
    assert_eq!(runtime_decode(&t, &[end]).unwrap(), END.as_bytes());
    assert_eq!(f.host.decode(&[end]).unwrap(), END.as_bytes());
    let past = MODEL_VOCAB as u32;
    assert_eq!(
        runtime_decode(&t, &[past]),
        Err(DecodeError::UnknownToken(past))
    );
    assert!(f.host.decode(&[past]).is_err());
}

#[test]
fn encoders_match_tokenizers_on_varied_text() {
    let f = fixture();
    let t = runtime_tokenizer(f.gguf.as_bytes());
    for text in CORPUS.iter().chain(SAMPLES) {
        check_text(&t, text);
    }
    // The merges do work: the corpus takes fewer tokens than bytes.
    let text = CORPUS.concat();
    let ids = runtime_encode(&t, text.as_bytes()).unwrap();
    assert!(
        ids.len() * 3 < text.len() * 2,
        "{} ids for {} bytes",
        ids.len(),
        text.len()
    );
}

/// GPT-2's pre-tokenization expression, as `tokenizers`' `ByteLevel` compiles it.
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

#[test]
fn pieces_match_the_gpt2_expression_on_every_character() {
    // Each character after a letter, between digits and before a symbol: where the pieces end
    // shows which of \p{L}, \p{N}, \s or none the character is, to both implementations (the
    // regex engine and the Unicode tables are `tokenizers`' own).
    let re = fancy_regex::Regex::new(GPT2_PATTERN).unwrap();
    // Unicode assigns characters in planes 0 to 3 and 14 only; the other planes are checked
    // sparsely, to keep the test fast.
    let codes = (0..0x40000)
        .chain(0xE0000..0xE1000)
        .chain((0x40000..=0x10FFFF).step_by(997));
    let chars: Vec<char> = codes.filter_map(char::from_u32).collect();
    for chunk in chars.chunks(8192) {
        let mut text = String::new();
        for &c in chunk {
            text.extend(['x', c, '5', c, '#']);
        }
        let want: Vec<(usize, usize)> = re
            .find_iter(&text)
            .map(|m| m.map(|m| (m.start(), m.end())).unwrap())
            .collect();
        let mut at = 0;
        let ours: Vec<(usize, usize)> = pieces(text.as_bytes())
            .map(|p| {
                at += p.len();
                (at - p.len(), at)
            })
            .collect();
        if ours != want {
            let i = ours.iter().zip(&want).take_while(|(a, b)| a == b).count();
            let (from, _) = want[i.min(want.len() - 1)];
            let context: String = text[from..].chars().take(12).collect();
            panic!("pieces differ at byte {from}: {context:?}");
        }
    }
}

/// Characters that exercise the pre-tokenizer's rules, more often than uniform ones would.
const TRICKY: &[char] = &[
    ' ', ' ', ' ', '\n', '\t', '\r', '\'', 's', 't', 'r', 'e', 'v', 'l', 'd', 'm', 'T', 'h', 'o',
    '1', '9', '.', ',', '!', '-', 'é', 'ß', '日', '本', '😀', '\u{301}', '\u{a0}', '\u{3000}',
    '\u{85}', '٣', 'Ⅻ', '½', '\u{200d}',
];

fn text_strategy() -> impl Strategy<Value = String> {
    let c = prop_oneof![2 => any::<char>(), 5 => prop::sample::select(TRICKY)];
    prop::collection::vec(c, 0..48).prop_map(String::from_iter)
}

fn bytes_strategy() -> impl Strategy<Value = Vec<u8>> {
    let b = prop_oneof![
        2 => any::<u8>(),
        3 => prop::sample::select(&b"ab 's\n\t\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\x80\xff"[..]),
    ];
    prop::collection::vec(b, 0..64)
}

proptest! {
    #[test]
    fn encoders_match_tokenizers_on_arbitrary_text(text in text_strategy()) {
        let t = runtime_tokenizer(fixture().gguf.as_bytes());
        check_text(&t, &text);
    }

    #[test]
    fn any_bytes_decode_back_to_themselves(bytes in bytes_strategy()) {
        let t = runtime_tokenizer(fixture().gguf.as_bytes());
        let ids = runtime_encode(&t, &bytes).unwrap();
        prop_assert_eq!(runtime_decode(&t, &ids).unwrap(), bytes.clone());
        // Where the bytes are UTF-8, the ids are `tokenizers`' too.
        if let Ok(text) = std::str::from_utf8(&bytes) {
            prop_assert_eq!(ids, reference_ids(text));
        }
    }
}

#[test]
fn full_buffers_are_errors() {
    let t = runtime_tokenizer(fixture().gguf.as_bytes());
    let text = SAMPLES[3].as_bytes();
    let n = runtime_encode(&t, text).unwrap().len();
    let mut ids = vec![0u32; n];
    assert_eq!(t.encode::<PIECE>(text, &mut ids), Ok(n));
    for capacity in 0..n {
        assert_eq!(
            t.encode::<PIECE>(text, &mut ids[..capacity]),
            Err(EncodeError::OutputFull { capacity })
        );
    }
    // "Hello," starts with a 5-byte piece.
    assert_eq!(
        t.encode::<4>(text, &mut ids),
        Err(EncodeError::PieceTooLong { at: 0, limit: 4 })
    );
    let mut buf = [0u8; 0];
    assert!(matches!(
        t.decode(u32::from(b'a'), &mut buf),
        Err(DecodeError::BufferTooSmall { .. })
    ));
}

/// A model file with only these tokenizer keys.
fn tokenizer_file(pairs: Vec<(String, Value)>) -> AlignedBytes {
    let mut w = GgufWriter::new(32);
    for (k, v) in pairs {
        w.add(k, v).unwrap();
    }
    AlignedBytes::from_slice(&w.to_bytes())
}

fn trained_vocabulary() -> (Vec<String>, Vec<i32>, Vec<String>) {
    let file = GgufFile::parse(fixture().gguf.as_bytes()).unwrap();
    match Vocabulary::from_gguf(&file) {
        Some(Vocabulary::Bpe {
            tokens,
            token_types,
            merges,
            ..
        }) => (tokens, token_types, merges),
        other => panic!("{other:?}"),
    }
}

#[test]
fn hostile_vocabularies_are_errors_not_panics() {
    let (tokens, types, merges) = trained_vocabulary();
    let bpe = |tokens: &[String], merges: &[String]| {
        Vocabulary::Bpe {
            tokens: tokens.to_vec(),
            token_types: types[..tokens.len().min(types.len())].to_vec(),
            merges: merges.to_vec(),
            bos: None,
            eos: None,
        }
        .metadata()
    };

    // A merge whose result is not a token: the runtime cannot spell the piece; `tokenizers`
    // refuses the vocabulary.
    assert!(!tokens.iter().any(|t| t == "qz"));
    let mut bad = merges.clone();
    bad.insert(0, "q z".into());
    let file = tokenizer_file(bpe(&tokens, &bad));
    let t = runtime_tokenizer(file.as_bytes());
    assert_eq!(
        runtime_encode(&t, b"aqz"),
        Err(EncodeError::NoToken { at: 1, len: 2 })
    );
    let v = Vocabulary::from_gguf(&GgufFile::parse(file.as_bytes()).unwrap()).unwrap();
    assert!(HostTokenizer::new(&v).is_err());

    // Tokens that are not byte-level strings decode as their text; no byte token: an error.
    let odd: Vec<String> = vec!["日本".into(), String::new(), "a".into()];
    let file = tokenizer_file(bpe(&odd, &["a a".into(), "日 本".into(), "x".into()]));
    let t = runtime_tokenizer(file.as_bytes());
    assert_eq!(runtime_decode(&t, &[0, 1, 2]).unwrap(), "日本a".as_bytes());
    assert_eq!(
        runtime_encode(&t, "a日".as_bytes()),
        Err(EncodeError::NoToken { at: 1, len: 1 })
    );

    // Out-of-range or mistyped keys.
    let mut pairs = bpe(&tokens, &merges);
    pairs.push((key::BOS_ID.into(), Value::U32(tokens.len() as u32)));
    let file = tokenizer_file(pairs);
    let file = GgufFile::parse(file.as_bytes()).unwrap();
    assert_eq!(
        Tokenizer::from_gguf(&file).unwrap_err(),
        TokenizerError::BadValue(key::BOS_ID)
    );
    let file = tokenizer_file(vec![
        (key::MODEL.into(), Value::string(key::MODEL_GPT2)),
        (key::TOKENS.into(), Value::i32s([1, 2, 3])),
    ]);
    let file = GgufFile::parse(file.as_bytes()).unwrap();
    assert_eq!(
        Tokenizer::from_gguf(&file).unwrap_err(),
        TokenizerError::BadValue(key::TOKENS)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any byte changes to the tokenizer keys: the file or the tokenizer is refused, or every
    /// encode and decode ends in a value or a typed error.
    #[test]
    fn damaged_tokenizer_keys_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        text in text_strategy(),
    ) {
        let (tokens, types, merges) = trained_vocabulary();
        let vocabulary = Vocabulary::Bpe { tokens, token_types: types, merges, bos: Some(0), eos: Some(0) };
        let mut bytes = tokenizer_file(vocabulary.metadata()).as_bytes().to_vec();
        for (i, b) in edits {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let bytes = AlignedBytes::from_slice(&bytes);
        let Ok(file) = GgufFile::parse(bytes.as_bytes()) else { return Ok(()) };
        let Ok(t) = Tokenizer::from_gguf(&file) else { return Ok(()) };
        let _ = runtime_encode(&t, text.as_bytes());
        for id in 0..t.vocab_len().saturating_add(2) {
            let _ = runtime_decode(&t, &[id]);
        }
        if let Some(v) = Vocabulary::from_gguf(&file) {
            if let Ok(host) = HostTokenizer::new(&v) {
                let _ = host.encode(&text);
            }
        }
    }
}
