//! Helpers the `loglinear mqar` tests share (`mod common;` in each test file).

use std::path::PathBuf;
use std::process::{Command, Output};

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
