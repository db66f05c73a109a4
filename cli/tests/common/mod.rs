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
