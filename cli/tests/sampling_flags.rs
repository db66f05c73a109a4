//! Sampling flags out of range are refused by name before the model is read, and the
//! accepted extremes run.

use std::path::PathBuf;
use std::process::{Command, Output};

fn generate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."))
        .arg("generate")
        .args([
            "--model",
            "models/tiny-ll-gdn-microbit-q8_0.gguf",
            "-n",
            "4",
        ])
        .args(args)
        .output()
        .expect("run loglinear")
}

#[test]
fn out_of_range_sampling_flags_are_refused_by_name() {
    for (flag, named) in [
        ("--temperature=-1", "--temperature"),
        ("--temperature=NaN", "--temperature"),
        ("--temperature=inf", "--temperature"),
        ("--top-p=0", "--top-p"),
        ("--top-p=1.5", "--top-p"),
        ("--top-p=NaN", "--top-p"),
        ("--top-k=0", "--top-k"),
        ("--top-k=-3", "--top-k"),
    ] {
        let out = generate(&[flag]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} was accepted");
        assert!(err.contains(named), "{flag}: {err}");
        assert!(out.stdout.is_empty(), "{flag}: generated before refusing");
    }
}

#[test]
fn the_edges_of_each_range_are_accepted() {
    for args in [
        &["--temperature", "0"][..],
        &["--top-p", "1", "--top-k", "1"][..],
        &["--temperature", "2.5", "--top-p", "0.01"][..],
    ] {
        let out = generate(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn absurd_thread_counts_are_refused_by_name() {
    for threads in ["0", "18446744073709551615", "99999"] {
        let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
            .args(["bench", "--threads", threads])
            .output()
            .expect("run loglinear");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--threads {threads}");
        assert!(err.contains("not a thread count: give 1 to 4096"), "{err}");
    }
}
