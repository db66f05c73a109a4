//! `loglinear mqar --gpus`: the sweep as one process per adapter, on the tiny MQAR of
//! mqar_resume.rs. Two processes sharing adapter 0 (lavapipe here), paused and continued,
//! record exactly the runs one process does, merged into --output; an adapter index that is
//! not there, a process that fails and flags that do not go together are clear errors.

use std::path::{Path, PathBuf};

mod common;
use common::{mqar_err, mqar_ok, runs_without_seconds, temp, tiny_mqar};

/// The tiny sweep: two runs of 12 steps, evaluated every 4 steps; then `extra`.
fn with(extra: &[&str]) -> Vec<String> {
    tiny_mqar(12, 4, extra)
}

fn results(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Process `k` of 2's results file beside `out`.
fn share_file(out: &Path, k: usize) -> PathBuf {
    out.with_file_name(format!("two.share{k}of2.json"))
}

#[test]
fn two_processes_record_what_one_does() {
    let dir = temp("gpus-equal");
    let one = dir.join("one.json");
    mqar_ok(&with(&["--out", one.to_str().unwrap()]));

    let out = dir.join("two.json");
    let md = dir.join("two.md");
    let (o, m) = (out.to_str().unwrap(), md.to_str().unwrap());
    // Both processes pause mid-epoch, after their first evaluation (--pause-after-steps is
    // passed on to each).
    let (_, stderr) = mqar_ok(&with(&[
        "--gpus",
        "0,0",
        "--out",
        o,
        "--md",
        m,
        "--pause-after-steps",
        "5",
    ]));
    for (k, seed) in [(0, 1), (1, 2)] {
        let want = format!(
            "[gpu 0 share {k}/2] mqar: paused gdn dim 16 lr 2.00e-2 seed {seed} at step 5 of 12"
        );
        assert!(stderr.contains(&want), "{want}: {stderr}");
        let ckpt = format!("{}.run", share_file(&out, k).display());
        assert!(
            Path::new(&ckpt).join("trainer_state.json").is_file(),
            "{ckpt}"
        );
    }
    assert!(results(&out)["runs"].as_array().unwrap().is_empty());

    // The same command continues both runs and merges them into --output.
    let args = with(&["--gpus", "0,0", "--out", o, "--md", m]);
    let (stdout, stderr) = mqar_ok(&args);
    for (k, seed) in [(0, 1), (1, 2)] {
        let want = format!(
            "[gpu 0 share {k}/2] mqar: resuming gdn dim 16 lr 2.00e-2 seed {seed} at step 5"
        );
        assert!(stderr.contains(&want), "{want}: {stderr}");
        let runs = runs_without_seconds(&share_file(&out, k));
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0]["seed"], seed);
        let ckpt = format!("{}.run", share_file(&out, k).display());
        assert!(!Path::new(&ckpt).exists(), "{ckpt} left behind");
    }
    assert_eq!(
        runs_without_seconds(&out),
        runs_without_seconds(&one),
        "the processes' runs differ from one process's"
    );
    assert_eq!(results(&out)["settings"], results(&one)["settings"]);
    assert_eq!(stdout, std::fs::read_to_string(&md).unwrap());
    assert!(stdout.contains("| gdn | 16 | 2.00e-2 | 1 |"), "{stdout}");
    assert!(stdout.contains("| gdn | 16 | 2.00e-2 | 2 |"), "{stdout}");

    // Nothing left: each process skips its recorded run.
    let before = std::fs::read_to_string(&out).unwrap();
    let (_, stderr) = mqar_ok(&args);
    assert!(
        stderr.contains("[gpu 0 share 1/2] mqar: 0 runs to do, 1 already"),
        "{stderr}"
    );
    assert_eq!(runs_without_seconds(&out), runs_without_seconds(&one));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), before);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_adapter_a_failed_process_and_clashing_flags_are_clear_errors() {
    let dir = temp("gpus-bad");
    let out = dir.join("two.json");
    let o = out.to_str().unwrap();
    for flags in [["--gpu", "99"], ["--gpus", "0,99"]] {
        let e = mqar_err(&with(&[flags[0], flags[1], "--out", o]));
        assert!(e.contains("no GPU adapter 99"), "{e}");
        // The adapters found, each by index, name, backend and kind.
        assert!(e.contains("adapters are 0: "), "{e}");
        assert!(!out.exists(), "{flags:?} wrote results");
    }
    for (flags, want) in [
        (vec!["--gpus", "2", "--gpu", "0"], "cannot be used with"),
        (
            vec!["--gpus", "2", "--merge", "a.json"],
            "cannot be used with",
        ),
        (vec!["--gpus=0,,1"], "--gpus 0,,1: an entry is empty"),
        (
            vec!["--gpus", "0"],
            "--gpus 0: the count must be at least 1",
        ),
    ] {
        let mut args = with(&flags);
        args.extend(["--out".to_string(), o.to_string()]);
        let e = mqar_err(&args);
        assert!(e.contains(want), "{flags:?}: {e}");
    }

    // A checkpoint folder that process 1 cannot read: it fails, process 0 still finishes,
    // and the error names the one that failed and its exit status.
    let bad = format!("{}.run", share_file(&out, 1).display());
    std::fs::create_dir_all(&bad).unwrap();
    let e = mqar_err(&with(&["--gpus", "0,0", "--out", o]));
    assert!(
        e.contains("1 of 2 mqar processes failed: share 1/2 on gpu 0 (exit status: 1)"),
        "{e}"
    );
    assert!(
        e.contains(&format!("[gpu 0 share 1/2] error: {bad}")),
        "{e}"
    );
    assert_eq!(runs_without_seconds(&share_file(&out, 0)).len(), 1);
    assert!(!out.exists(), "merged although a process failed");
    let _ = std::fs::remove_dir_all(&dir);
}
