//! `generate` and `eval` on a model with a BPE vocabulary: the prompt and the text are encoded
//! by the `tokenizers` crate from the model file's vocabulary, generated tokens are written as
//! their bytes, and eval reports bits per byte over the bytes the tokens stand for.

mod common;

use common::{assert_ok, loglinear};
use loglinear_tests::bpe_fixture::{write_model_folder, Tokenizer};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;

/// A BPE model file (converted from the fixture's folder) and its trained tokenizer.
fn model() -> &'static (PathBuf, Tokenizer) {
    static MODEL: OnceLock<(PathBuf, Tokenizer)> = OnceLock::new();
    MODEL.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("loglinear-bpe-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trained = write_model_folder(&dir);
        let gguf = dir.join("model.gguf");
        let out = loglinear(&[
            "convert",
            dir.to_str().unwrap(),
            "-o",
            gguf.to_str().unwrap(),
            "--no-eval",
        ]);
        assert_ok(&out);
        (gguf, trained)
    })
}

/// `loglinear generate -m <the BPE model> <args>`.
fn generate(args: &[&str]) -> Output {
    let gguf = model().0.to_str().unwrap();
    loglinear(&[&["generate", "-m", gguf][..], args].concat())
}

#[test]
fn generate_encodes_the_prompt_and_writes_token_bytes() {
    let prompt = "The quick brown fox, café 東京";
    let out = generate(&["--prompt", prompt, "-n", "12", "--temperature", "0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(out.stdout.starts_with(prompt.as_bytes()), "{stderr}");
    assert!(out.stdout.len() > prompt.len() + 1, "nothing generated");
    // The summary counts the prompt in BPE tokens, fewer than its bytes.
    let tokens: usize = stderr
        .split("prompt ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("prompt token count");
    let ids = model().1.encode(prompt, false).unwrap().get_ids().len();
    assert_eq!(tokens, ids, "{stderr}");
    assert!(tokens < prompt.len());
}

#[test]
fn generation_never_picks_a_padding_id() {
    // The fixture's model has MODEL_VOCAB embedding rows for TRAINED_VOCAB tokens: the rest
    // are padding, named "[PAD<id>]" in the file. Sampled at temperature 1 from a model that
    // is not trained on them, 300 tokens would pick one of 16 in 416 almost surely.
    let out = generate(&[
        "--prompt",
        "The quick brown fox",
        "-n",
        "300",
        "--temperature",
        "1",
        "--seed",
        "3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("[PAD"), "a padding id was generated: {text}");
}

#[test]
fn train_refuses_raw_text_for_a_bpe_model() {
    let (gguf, _) = model();
    let dir = gguf.parent().unwrap().join("train-text");
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("text.txt");
    std::fs::write(
        &data,
        "The quick brown fox jumps over the lazy dog. ".repeat(40),
    )
    .unwrap();
    // The GGUF file and the checkpoint folder it was converted from.
    let folder = gguf.parent().unwrap();
    for (model, run) in [(gguf.as_path(), "run-gguf"), (folder, "run-folder")] {
        let out = loglinear(&[
            "train",
            "-m",
            model.to_str().unwrap(),
            "--data",
            data.to_str().unwrap(),
            "-o",
            dir.join(run).to_str().unwrap(),
            "--steps",
            "1",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{run}: trained on byte ids: {stderr}"
        );
        assert!(
            stderr.contains("text.txt")
                && stderr.contains("BPE vocabulary")
                && stderr.contains(".u16"),
            "{run}: {stderr}"
        );
    }
}

#[test]
fn a_prompt_that_is_not_text_is_refused_for_a_bpe_model() {
    let out = generate(&["--prompt", "ab\\xff"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("not UTF-8") && stderr.contains("byte 2"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn eval_reports_bits_per_byte_over_the_tokens_bytes() {
    let (gguf, trained) = model();
    let text = "The quick brown fox jumps over the lazy dog. We're sure they'll say so. ".repeat(8);
    let file = gguf.with_file_name("text.txt");
    std::fs::write(&file, &text).unwrap();
    let out = loglinear(&[
        "eval",
        "-m",
        gguf.to_str().unwrap(),
        "--text",
        file.to_str().unwrap(),
        "--context",
        "16",
        "--json",
    ]);
    assert_ok(&out);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids = trained.encode(text.as_str(), false).unwrap();
    let windows = (ids.get_ids().len() - 1) / 16;
    assert_eq!(v["windows"], windows);
    assert_eq!(v["predictions"], windows * 16);
    let bytes = v["predicted_bytes"].as_u64().unwrap() as f64;
    assert!(
        bytes > (windows * 16) as f64,
        "BPE tokens stand for more than a byte"
    );
    let (per_byte, per_token) = (
        v["bits_per_byte"].as_f64().unwrap(),
        v["bits_per_token"].as_f64().unwrap(),
    );
    let want = per_token * (windows * 16) as f64 / bytes;
    assert!((per_byte - want).abs() < 1e-9 * want, "{v}");
}

#[test]
fn convert_measures_a_bpe_model_on_its_tokens() {
    let (gguf, _) = model();
    let dir = gguf.parent().unwrap();
    let out_file = dir.join("model-q8_0.gguf");
    let out = loglinear(&[
        "convert",
        dir.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
        "--type",
        "q8_0",
        "--eval-bytes",
        "2048",
        "--eval-context",
        "64",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_ok(&out);
    assert!(stdout.contains("bits/token f32 checkpoint"), "{stdout}");
}
