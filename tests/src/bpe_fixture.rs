//! A small GPT-2-style byte-level BPE tokenizer trained with Hugging Face `tokenizers`, and a
//! model folder that carries it (a golden checkpoint grown to its vocabulary): the fixture of
//! the BPE tests (`tests/bpe_tokenizer.rs`, and the CLI's `bpe_cli.rs`).

use crate::{golden_dir, read_arrays};
use std::collections::HashMap;
use std::path::Path;
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::AddedToken;

/// The trained tokenizer's type, for tests that compare with it.
pub use tokenizers::Tokenizer;

/// The trained vocabulary's size; the model has room for a few unused ids more.
pub const TRAINED_VOCAB: usize = 400;
pub const MODEL_VOCAB: usize = 416;
pub const END: &str = "<|endoftext|>";

/// Training text: prose, contractions, code, numbers, white space runs, accents, CJK, emoji.
pub const CORPUS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog. The dog didn't care; it's a lazy dog.",
    "We're sure they'll say you've been there, and I'm sure she'd agree that's the thing.",
    "Log-linear attention keeps a logarithmic number of states: one per Fenwick level.",
    "In 2025, 1.5 million tokens cost $3.20; 42 is the answer, 3.14159 is pi, 1e-6 is small.",
    "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{:?}\", x);\n}\n",
    "def f(a, b):\n\treturn a + b  # add\n\n\nclass Model:\n    pass\n",
    "    indented    text   with   runs   of   spaces\n\n\n\ttabs\t\tand\r\nnewlines  \n",
    "Café, naïve, résumé, Zürich, São Paulo, Ærøskøbing, Kraków, İstanbul, straße.",
    "日本語のテキストと中文文本，还有한국어 텍스트。東京は大きい。",
    "Emoji: 😀 🎉 👍🏽 ❤️ 🇫🇷 — and symbols: © ® ™ € £ ¥ § ¶ • … ± × ÷ ≠ ≤ ≥ ∞.",
    "Combining marks: e\u{301} a\u{308} n\u{303}; Greek: αβγ δέλτα; Cyrillic: привет мир.",
    "the the the there then them these those other another mother brother weather",
    "token tokens tokenizer tokenization merge merges merged merging rank ranks",
];

/// A byte-level BPE of [`TRAINED_VOCAB`] tokens trained on [`CORPUS`].
pub fn train() -> tokenizers::Tokenizer {
    let mut trainer: TrainerWrapper = BpeTrainer::builder()
        .show_progress(false)
        .vocab_size(TRAINED_VOCAB)
        .special_tokens(vec![AddedToken::from(END, true)])
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build()
        .into();
    let mut tokenizer = tokenizers::Tokenizer::new(BPE::default());
    tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tokenizer.with_decoder(Some(ByteLevel::new(false, true, true)));
    tokenizer.train(&mut trainer, CORPUS.iter()).unwrap();
    assert_eq!(
        tokenizer.get_vocab_size(true),
        TRAINED_VOCAB,
        "trained fully"
    );
    tokenizer
}

/// A golden checkpoint in `dir`, resized to [`MODEL_VOCAB`] embedding and head rows (its rows
/// repeated in order), whatever the golden set's vocabulary.
pub fn write_checkpoint(dir: &std::path::Path) {
    let src = golden_dir().join("model/h_gated_deltanet_stress");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    config["vocab_size"] = MODEL_VOCAB.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tensors: HashMap<String, (Vec<usize>, Vec<u8>)> =
        read_arrays(&src.join("model.safetensors"))
            .into_iter()
            .map(|(k, a)| {
                let mut data = a.f32();
                let mut shape = a.shape.clone();
                if k == "lm_head.weight" || k == "model.embeddings.weight" {
                    let (rows, row) = (shape[0], shape[1]);
                    data = (0..MODEL_VOCAB)
                        .flat_map(|i| data[(i % rows) * row..][..row].to_vec())
                        .collect();
                    shape[0] = MODEL_VOCAB;
                }
                (
                    k,
                    (shape, data.iter().flat_map(|x| x.to_le_bytes()).collect()),
                )
            })
            .collect();
    let views = tensors.iter().map(|(k, (shape, bytes))| {
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes);
        (k.clone(), view.unwrap())
    });
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

/// A checkpoint folder in `dir` with the trained tokenizer (`tokenizer.json`, and
/// `tokenizer_config.json` naming [`END`] as bos and eos); returns the tokenizer.
pub fn write_model_folder(dir: &Path) -> tokenizers::Tokenizer {
    write_checkpoint(dir);
    let trained = train();
    trained.save(dir.join("tokenizer.json"), true).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        format!(r#"{{"bos_token": "{END}", "eos_token": {{"content": "{END}"}}}}"#),
    )
    .unwrap();
    trained
}
