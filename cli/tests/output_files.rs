//! Files the CLI writes: an output that is an input by any spelling is refused before any work,
//! a failed write names the path and destroys nothing, and a replaced file leaves no temporary
//! file behind (every write goes through `loglinear_converter::output_file`).

mod common;

use common::repo;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh folder holding a copy of the test-sized model as `model.gguf`.
fn folder(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("loglinear-outputs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::copy(
        repo().join("models/tiny-ll-gdn-microbit-q8_0.gguf"),
        d.join("model.gguf"),
    )
    .unwrap();
    d
}

fn quantize(input: &Path, output: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .arg("quantize")
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(["--type", "q8_0", "--no-eval"])
        .args(extra)
        .output()
        .expect("run loglinear")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_output_that_is_an_input_is_refused_by_any_spelling() {
    let d = folder("same");
    let input = d.join("model.gguf");
    let before = std::fs::read(&input).unwrap();
    let hard = d.join("hard.gguf");
    std::fs::hard_link(&input, &hard).unwrap();
    let mut spellings = vec![input.clone(), d.join("sub/../model.gguf"), hard];
    #[cfg(unix)]
    {
        let link = d.join("link.gguf");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        spellings.push(link);
    }
    for output in &spellings {
        let out = quantize(&input, output, &[]);
        assert!(!out.status.success(), "{}", output.display());
        assert!(stderr(&out).contains("is the input"), "{}", stderr(&out));
        assert_eq!(std::fs::read(&input).unwrap(), before);
    }
    // The evaluation text is an input too.
    let text = d.join("text.txt");
    std::fs::write(&text, b"To be, or not to be").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .arg("quantize")
        .arg(&input)
        .arg("-o")
        .arg(&text)
        .arg("--eval-text")
        .arg(&text)
        .args(["--type", "q8_0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is the input"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&text).unwrap(), b"To be, or not to be");
}

#[test]
fn quantize_without_a_type_is_refused_and_writes_nothing() {
    let d = folder("no-type");
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .arg("quantize")
        .arg(d.join("model.gguf"))
        .arg("-o")
        .arg(d.join("out.gguf"))
        .arg("--no-eval")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--type"), "{}", stderr(&out));
    assert!(!d.join("out.gguf").exists());
}

#[test]
fn an_output_under_a_regular_file_is_named_and_nothing_is_lost() {
    let d = folder("under-file");
    let input = d.join("model.gguf");
    let plain = d.join("notes.txt");
    std::fs::write(&plain, b"keep me").unwrap();
    let out = quantize(&input, &plain.join("out.gguf"), &[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("notes.txt") && err.contains("out.gguf"),
        "{err}"
    );
    assert_eq!(std::fs::read(&plain).unwrap(), b"keep me");
}

#[test]
fn a_replaced_output_is_whole_and_leaves_no_temporary_file() {
    let d = folder("replace");
    let input = d.join("model.gguf");
    let output = d.join("sub").join("out.gguf");
    std::fs::write(&output, b"an older file").unwrap();
    let out = quantize(&input, &output, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let written = std::fs::read(&output).unwrap();
    assert_eq!(&written[..4], b"GGUF");
    let names: Vec<String> = std::fs::read_dir(d.join("sub"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["out.gguf"]);
}

#[test]
fn convert_refuses_a_config_the_reader_would_refuse_before_writing() {
    let d = folder("bad-config");
    let ckpt = d.join("ckpt");
    std::fs::create_dir_all(&ckpt).unwrap();
    let src = repo().join("models/ll-gdn-mcu");
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    let key = "\"norm_eps\":";
    let at = config.find(key).expect("norm_eps in config.json") + key.len();
    let end = at + config[at..].find([',', '\n', '}']).unwrap();
    for bad in ["-1e-5", "1e300"] {
        let patched = format!("{} {bad}{}", &config[..at], &config[end..]);
        std::fs::write(ckpt.join("config.json"), patched).unwrap();
        std::fs::copy(
            src.join("model.safetensors"),
            ckpt.join("model.safetensors"),
        )
        .unwrap();
        let output = d.join("out.gguf");
        let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
            .arg("convert")
            .arg(&ckpt)
            .arg("-o")
            .arg(&output)
            .arg("--no-eval")
            .output()
            .unwrap();
        assert!(!out.status.success(), "norm_eps {bad} accepted");
        assert!(stderr(&out).contains("norm epsilon"), "{}", stderr(&out));
        assert!(!output.exists(), "norm_eps {bad}: a file was written");
    }
}
