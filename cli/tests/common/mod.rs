//! Helpers the CLI tests share (`mod common;` in each test file; a test file uses some of them).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The repository's root: the tests that run the CLI there find the shipped models under
/// `models/`.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `loglinear <args>` in the repository's root, its output captured.
pub fn loglinear(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .args(args)
        .output()
        .expect("run loglinear")
}

/// Asserts that the command behind `out` succeeded, showing its stderr where it did not.
#[track_caller]
pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh scratch folder for one test (named by the test and this process).
pub fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loglinear-mqar-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `loglinear mqar <args>`, its output captured.
pub fn mqar(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .arg("mqar")
        .args(args)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .expect("run loglinear")
}

/// The tiny MQAR sweep of the resume and `--gpus` tests, then `extra`: two runs (GDN at dim 16,
/// seeds 1 and 2) of `steps` steps over 256 examples (8 steps per epoch) of vocabulary 20 and
/// length 16, evaluated every `eval_every` steps.
pub fn tiny_mqar(steps: u64, eval_every: u64, extra: &[&str]) -> Vec<String> {
    let (steps, eval_every) = (steps.to_string(), eval_every.to_string());
    let tiny = [
        "--vocab",
        "20",
        "--seq-len",
        "16",
        "--kv",
        "1",
        "--train-examples",
        "256",
        "--test-examples",
        "64",
        "--batch",
        "32",
        "--dims",
        "16",
        "--archs",
        "gdn",
        "--lrs",
        "2e-2",
        "--seeds",
        "1,2",
        "--steps",
        &steps,
        "--eval-every",
        &eval_every,
    ];
    tiny.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// `loglinear mqar <args>`, which must succeed: its stdout and stderr.
#[track_caller]
pub fn mqar_ok(args: &[String]) -> (String, String) {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = mqar(&a);
    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(r.status.success(), "{args:?}: {stderr}");
    (String::from_utf8_lossy(&r.stdout).into_owned(), stderr)
}

/// `loglinear mqar <args>`, which must fail without a panic: its stderr.
#[track_caller]
pub fn mqar_err(args: &[String]) -> String {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = mqar(&a);
    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
    assert!(!r.status.success(), "{args:?} succeeded: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// A results file's runs without their seconds (the one field that differs between runs of
/// the same settings, paused or not).
pub fn runs_without_seconds(path: &std::path::Path) -> Vec<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut runs = v["runs"].as_array().unwrap().clone();
    for r in &mut runs {
        assert!(r["seconds"].as_f64().unwrap() > 0.0, "{r}");
        r.as_object_mut().unwrap().remove("seconds");
    }
    runs
}
