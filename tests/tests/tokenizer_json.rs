//! A checkpoint with a `tokenizer.json` (BPE) carries its vocabulary into the model file's
//! `tokenizer.ggml.*` keys; bad tokenizer files are clear errors; byte-only commands refuse it.

use loglinear_converter::export::{ExportOptions, ExportedModel};
use loglinear_converter::model_source::{AlignedBytes, ModelSource};
use loglinear_converter::vocab::{token_type, Vocabulary};
use loglinear_converter::{Checkpoint, ImportError};
use loglinear_runtime::gguf::{GgufFile, GgufModel, MetaValue};
use loglinear_tests::golden_dir;
use std::path::PathBuf;

/// The golden checkpoint the tests copy.
fn golden_source() -> PathBuf {
    golden_dir().join("model/h_gated_deltanet_stress")
}

/// The vocabulary size of [`golden_source`].
fn golden_vocab() -> usize {
    let text = std::fs::read_to_string(golden_source().join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config["vocab_size"].as_u64().expect("vocab_size") as usize
}

/// A copy of a golden checkpoint with `tokenizer` as its tokenizer.json.
fn checkpoint_with(tag: &str, tokenizer: &str) -> PathBuf {
    let src = golden_source();
    let dir = std::env::temp_dir().join(format!("loglinear-tok-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("tokenizer.json"), tokenizer).unwrap();
    dir
}

const BPE: &str = r#"{
  "version": "1.0",
  "added_tokens": [{"id": 5, "content": "<|endoftext|>", "special": true}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "model": {
    "type": "BPE",
    "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4},
    "merges": ["a b", ["Ġ", "ab"]]
  }
}"#;

#[test]
fn bpe_vocabulary_goes_into_the_model_file() {
    let dir = checkpoint_with("ok", BPE);
    let ckpt = Checkpoint::load(&dir).unwrap();
    let Some(Vocabulary::Bpe {
        tokens,
        token_types,
        merges,
        ..
    }) = &ckpt.vocabulary
    else {
        panic!("{:?}", ckpt.vocabulary)
    };
    assert_eq!(
        tokens.len(),
        golden_vocab(),
        "padded to the model's vocabulary"
    );
    assert_eq!(&tokens[..6], ["a", "b", "ab", "Ġ", "Ġab", "<|endoftext|>"]);
    assert_eq!(tokens[6], "[PAD6]");
    assert_eq!(
        &token_types[..7],
        &[1, 1, 1, 1, 1, token_type::CONTROL, token_type::UNUSED]
    );
    assert_eq!(merges, &["a b", "Ġ ab"]);

    let bytes = ExportedModel::from_checkpoint(&ckpt, &ExportOptions::default())
        .unwrap()
        .to_gguf()
        .unwrap();
    let bytes = AlignedBytes::from_slice(&bytes);
    GgufModel::parse(bytes.as_bytes()).unwrap();
    let file = GgufFile::parse(bytes.as_bytes()).unwrap();
    assert_eq!(
        file.get("tokenizer.ggml.model").and_then(|v| v.as_str()),
        Some("gpt2")
    );
    assert_eq!(
        Vocabulary::from_gguf(&file).as_ref(),
        ckpt.vocabulary.as_ref(),
        "round trip"
    );

    // Both model sources report the BPE vocabulary (what `train` checks before it reads
    // raw text one token per byte).
    let gguf_path = dir.join("model.gguf");
    std::fs::write(&gguf_path, bytes.as_bytes()).unwrap();
    for p in [&dir, &gguf_path] {
        let vocabulary = ModelSource::open(p).unwrap().vocabulary();
        assert!(
            matches!(vocabulary, Some(Vocabulary::Bpe { .. })),
            "{}",
            p.display()
        );
    }
}

#[test]
fn bad_tokenizer_files_are_named_errors() {
    let vocab = golden_vocab();
    let big_id = format!(
        r#"{{"pre_tokenizer": {{"type": "ByteLevel"}}, "model": {{"type": "BPE", "vocab": {{"a": {vocab}}}, "merges": []}}}}"#
    );
    let big_id_message = format!("id {vocab}");
    let cases = [
        (
            "unigram",
            r#"{"model": {"type": "Unigram", "vocab": []}}"#,
            "only BPE",
        ),
        ("big-id", big_id.as_str(), big_id_message.as_str()),
        (
            "dup",
            r#"{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 1, "b": 1}, "merges": []}}"#,
            "id 1 is both",
        ),
        (
            "merge",
            r#"{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}}"#,
            "merge",
        ),
        ("json", r#"{"model": "#, "tokenizer.json"),
        // Text processing other than GPT-2's byte-level BPE would be encoded wrongly.
        (
            "no-pre",
            r#"{"model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
            "pre_tokenizer null",
        ),
        (
            "metaspace",
            r#"{"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
            "Metaspace",
        ),
        (
            "prefix-space",
            r#"{"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}, "model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
            "add_prefix_space",
        ),
        (
            "byte-fallback",
            r#"{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "byte_fallback": true, "vocab": {}, "merges": []}}"#,
            "byte_fallback",
        ),
        (
            "normalizer",
            r#"{"normalizer": {"type": "NFC"}, "pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
            "normalizer",
        ),
    ];
    for (tag, text, want) in cases {
        let dir = checkpoint_with(tag, text);
        match Checkpoint::load(&dir) {
            Err(e @ ImportError::Tokenizer { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(want) && msg.contains("tokenizer.json"),
                    "{tag}: {msg}"
                );
            }
            other => panic!("{tag}: expected a tokenizer error, got {other:?}"),
        }
    }
}

/// A tokenizer.json whose post-processor wraps a sequence in `<s>` ... `</s>`.
const TEMPLATE: &str = r#"{
  "added_tokens": [
    {"id": 3, "content": "<s>", "special": true},
    {"id": 4, "content": "</s>", "special": true}
  ],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
  "post_processor": {"type": "TemplateProcessing", "single": [
    {"SpecialToken": {"id": "<s>", "type_id": 0}},
    {"Sequence": {"id": "A", "type_id": 0}},
    {"SpecialToken": {"id": "</s>", "type_id": 0}}
  ]},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
}"#;

fn specials(v: &Option<Vocabulary>) -> (Option<u32>, Option<u32>) {
    match v {
        Some(Vocabulary::Bpe { bos, eos, .. }) => (*bos, *eos),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bos_and_eos_come_from_the_template_and_tokenizer_config() {
    let dir = checkpoint_with("template", TEMPLATE);
    let _ = std::fs::remove_file(dir.join("tokenizer_config.json"));
    let ckpt = Checkpoint::load(&dir).unwrap();
    assert_eq!(specials(&ckpt.vocabulary), (Some(3), Some(4)));

    // tokenizer_config.json wins; a null field keeps the template's choice.
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"bos_token": {"content": "</s>", "special": true}, "eos_token": null}"#,
    )
    .unwrap();
    let ckpt = Checkpoint::load(&dir).unwrap();
    assert_eq!(specials(&ckpt.vocabulary), (Some(4), Some(4)));

    // The ids travel through the model file as llama.cpp's keys.
    let bytes = ExportedModel::from_checkpoint(&ckpt, &ExportOptions::default())
        .unwrap()
        .to_gguf()
        .unwrap();
    let bytes = AlignedBytes::from_slice(&bytes);
    let file = GgufFile::parse(bytes.as_bytes()).unwrap();
    for key in ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"] {
        assert_eq!(file.get(key), Some(MetaValue::U32(4)), "{key}");
    }
    assert_eq!(Vocabulary::from_gguf(&file), ckpt.vocabulary);

    // A name that is not a token is an error naming the file.
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"eos_token": "<eos>"}"#,
    )
    .unwrap();
    let e = Checkpoint::load(&dir).unwrap_err().to_string();
    assert!(
        e.contains("tokenizer_config.json") && e.contains("\"<eos>\" is not in the vocabulary"),
        "{e}"
    );

    // Without a template or a config nothing is named.
    let dir = checkpoint_with("no-specials", BPE);
    let ckpt = Checkpoint::load(&dir).unwrap();
    assert_eq!(specials(&ckpt.vocabulary), (None, None));
}
