//! `loglinear generate --save-snapshot` / `--resume`: a stream cut in two and resumed from
//! the file prints exactly the bytes of the uninterrupted run (sampling at temperature 0.9,
//! so the PRNG state matters), for f32 and f16 state, a log-linear GGUF and a plain checkpoint
//! folder; another model's snapshot and a damaged file are refused.

mod common;

use common::repo;
use std::process::{Command, Output};

fn loglinear<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .arg("generate")
        .args(args)
        .output()
        .expect("run loglinear")
}

/// stdout of a successful run.
fn generate<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> Vec<u8> {
    let out = loglinear(args);
    assert!(
        out.status.success(),
        "loglinear generate {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn resumed_stream_is_bit_identical() {
    let dir = std::env::temp_dir().join(format!("loglinear-snapshot-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (model, state, levels) in [
        ("models/ll-gdn-mcu-q8_0.gguf", "f32", "15"),
        ("models/ll-gdn-mcu-q8_0.gguf", "f16", "3"),
        ("models/gdn-mcu", "f16", "1"),
    ] {
        let snap = dir.join(format!("{state}-{levels}.snap"));
        let snap = snap.to_str().unwrap();
        let common = [
            "--model",
            model,
            "--temperature",
            "0.9",
            "--top-p",
            "0.95",
            "--seed",
            "5",
        ];
        let with = |extra: &[&str]| -> Vec<String> {
            common.iter().chain(extra).map(|s| s.to_string()).collect()
        };
        let whole = with(&["--state", state, "--levels", levels, "-n", "70"]);
        let first = with(&[
            "--state",
            state,
            "--levels",
            levels,
            "-n",
            "30",
            "--save-snapshot",
            snap,
        ]);
        // The resume takes state type and levels from the snapshot.
        let second = with(&["-n", "40", "--resume", snap]);
        let whole = generate(&whole);
        let mut cut = generate(&first);
        assert_eq!(cut.pop(), Some(b'\n'));
        cut.extend(generate(&second));
        assert_eq!(
            String::from_utf8_lossy(&cut),
            String::from_utf8_lossy(&whole),
            "{model} {state} levels {levels}"
        );
        // The snapshot was written through a temporary file, which is gone.
        let temporaries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".loglinear-"))
            .collect();
        assert!(temporaries.is_empty(), "{temporaries:?}");
    }
    // Another model file: refused, with the reason.
    let snap = dir.join("f32-15.snap");
    let out = loglinear(&[
        "--model",
        "models/tiny-ll-gdn-microbit-q8_0.gguf",
        "--resume",
        snap.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another model file"), "{err}");
    // A damaged file: refused before anything runs.
    let mut bytes = std::fs::read(&snap).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    let bad = dir.join("bad.snap");
    std::fs::write(&bad, &bytes).unwrap();
    let out = loglinear(&["--resume", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("damaged"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
