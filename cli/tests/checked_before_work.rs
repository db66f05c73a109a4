//! Output paths and conflicting flags are refused before any work starts, naming what the
//! user gave: nothing is generated, measured or converted first.

mod common;

use common::{loglinear, repo};
use std::path::PathBuf;

const TINY: &str = "models/tiny-ll-gdn-microbit-q8_0.gguf";

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "loglinear-before-work-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn unwritable_outputs_are_refused_before_any_work() {
    let d = temp("outputs");
    let missing = d.join("no-such-folder").join("out");
    let missing = missing.to_str().unwrap();
    let folder = d.to_str().unwrap();
    for args in [
        &[
            "generate",
            "--model",
            TINY,
            "-n",
            "8",
            "--save-snapshot",
            missing,
        ][..],
        &[
            "generate",
            "--model",
            TINY,
            "-n",
            "8",
            "--save-snapshot",
            folder,
        ][..],
        &["quantize", TINY, "-o", missing, "--type", "q8_0"][..],
        &[
            "eval",
            TINY,
            "--text",
            "README.md",
            "--per-position",
            missing,
        ][..],
    ] {
        let out = loglinear(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?} worked first: {err}");
        assert!(err.contains("cannot write"), "{args:?}: {err}");
    }
}

#[test]
fn resume_refuses_levels_or_state_that_contradict_the_snapshot() {
    let d = temp("resume");
    let snap = d.join("s.snap");
    let snap = snap.to_str().unwrap();
    let save = [
        "generate", "--model", TINY, "-n", "4", "--levels", "3", "--state", "f16",
    ];
    let out = loglinear(&[&save[..], &["--save-snapshot", snap]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for extra in [&["--levels", "4"][..], &["--state", "f32"][..]] {
        let args = [
            &["generate", "--model", TINY, "-n", "4", "--resume", snap][..],
            extra,
        ]
        .concat();
        let out = loglinear(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?}");
        assert!(err.contains("3 levels and f16 state"), "{extra:?}: {err}");
    }
    // Flags that agree with it, or none, resume.
    for extra in [&["--levels", "3", "--state", "f16"][..], &[][..]] {
        let args = [
            &["generate", "--model", TINY, "-n", "4", "--resume", snap][..],
            extra,
        ]
        .concat();
        let out = loglinear(&args);
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_context_beyond_the_text_or_usize_is_refused_with_the_largest_that_fits() {
    let len = std::fs::metadata(repo().join("README.md")).unwrap().len();
    for ctx in ["18446744073709551615", &len.to_string(), "0"] {
        let out = loglinear(&["eval", TINY, "--text", "README.md", "--context", ctx]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--context {ctx}");
        assert!(out.stdout.is_empty(), "--context {ctx}: {err}");
        let want = if ctx == "0" {
            "the context must be at least 1 token".to_string()
        } else {
            format!("give a context of {} or less", len - 1)
        };
        assert!(err.contains(&want), "--context {ctx}: {err}");
        assert!(
            err.contains(&format!("--context {ctx}")),
            "names the flag: {err}"
        );
        assert!(!err.contains("0 windows"), "--context {ctx}: {err}");
    }
}

#[test]
fn prompt_escapes_give_the_bytes_they_name_and_bad_ones_are_refused() {
    let greedy = |prompt: &str| {
        loglinear(&[
            "generate",
            "--model",
            TINY,
            "-n",
            "8",
            "--temperature",
            "0",
            "--prompt",
            prompt,
        ])
    };
    let escaped = greedy(r"a\tb\x41\u{e9}");
    let literal = greedy("a\tbAé");
    assert!(escaped.status.success());
    assert_eq!(escaped.stdout, literal.stdout);
    assert!(escaped.stdout.starts_with("a\tbAé".as_bytes()));
    // `\\` is one backslash: `\\n` is a backslash and an n, not a newline.
    let backslash = greedy(r"x\\n");
    assert!(
        backslash.stdout.starts_with(br"x\n"),
        "{:?}",
        backslash.stdout
    );
    let bad = greedy(r"ROMEO:\q");
    assert!(!bad.status.success());
    assert!(bad.stdout.is_empty());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains(r"`\q` at byte 6: not an escape"), "{err}");
}
