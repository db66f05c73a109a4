//! `loglinear mqar` runs that pause and resume (the checkpoint folder `<out>.run/`), on the
//! tiny MQAR of mqar_cli.rs: a sweep paused twice (mid-epoch, and in its second run) records
//! exactly what an uninterrupted one does, and leaves no checkpoint behind; a checkpoint of
//! other settings, of a run not asked for, or that cannot be read is a clear error that keeps
//! the folder.

use std::path::{Path, PathBuf};

mod common;
use common::{mqar_err, mqar_ok, runs_without_seconds, temp, tiny_mqar};

/// The tiny sweep: two runs of 30 steps, evaluated every 10 steps; then `extra`.
fn with(extra: &[&str]) -> Vec<String> {
    tiny_mqar(30, 10, extra)
}

fn run_dir(out: &Path) -> PathBuf {
    PathBuf::from(format!("{}.run", out.display()))
}

#[test]
fn paused_and_resumed_runs_equal_uninterrupted_ones() {
    let dir = temp("resume-equal");
    let full = dir.join("full.json");
    let paused = dir.join("paused.json");
    let ckpt = run_dir(&paused);
    mqar_ok(&with(&["--out", full.to_str().unwrap()]));

    let p = paused.to_str().unwrap();
    // Paused mid-epoch (step 13 = 5 batches into the second epoch), after the first evaluation.
    let stderr = mqar_ok(&with(&["--out", p, "--pause-after-steps", "13"])).1;
    assert!(
        stderr.contains("paused gdn dim 16 lr 2.00e-2 seed 1 at step 13 of 30")
            && stderr.contains("run the same command again to continue"),
        "{stderr}"
    );
    assert!(!paused.exists(), "a paused run was recorded");
    assert!(ckpt.join("trainer_state.json").is_file());
    assert!(ckpt.join("model.safetensors").is_file());
    assert!(ckpt.join("optimizer.safetensors").is_file());

    // Resumed: the first run finishes (17 steps), the second pauses at its step 3.
    let stderr = mqar_ok(&with(&["--out", p, "--pause-after-steps", "20"])).1;
    assert!(stderr.contains("resuming gdn dim 16 lr 2.00e-2 seed 1 at step 13 of 30"));
    assert!(
        stderr.contains("paused gdn dim 16 lr 2.00e-2 seed 2 at step 3 of 30"),
        "{stderr}"
    );
    assert_eq!(runs_without_seconds(&paused).len(), 1);

    // Finished; the checkpoint (and any leftovers of its saves) are gone.
    let stderr = mqar_ok(&with(&["--out", p])).1;
    assert!(stderr.contains("resuming gdn dim 16 lr 2.00e-2 seed 2 at step 3"));
    let (want, got) = (runs_without_seconds(&full), runs_without_seconds(&paused));
    assert_eq!(got.len(), 2);
    assert_eq!(got, want, "a resumed run differs from an uninterrupted one");
    for suffix in ["", ".old", ".tmp"] {
        let d = format!("{}{suffix}", ckpt.display());
        assert!(!Path::new(&d).exists(), "{d} left behind");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_foreign_or_unreadable_checkpoint_is_a_clear_error() {
    let dir = temp("resume-bad");
    let out = dir.join("r.json");
    let o = out.to_str().unwrap();
    let ckpt = run_dir(&out);
    let c = ckpt.display().to_string();
    mqar_ok(&with(&["--out", o, "--pause-after-steps", "2"]));
    let state = std::fs::read(ckpt.join("trainer_state.json")).unwrap();

    // Other settings (a warmup): refused, naming the folder; the checkpoint is kept.
    let e = mqar_err(&with(&["--out", o, "--warmup", "5"]));
    assert!(e.contains(&c) && e.contains("other settings"), "{e}");
    // A run this command does not do.
    let mut args = with(&["--out", o]);
    let seeds = args.iter().position(|a| a == "--seeds").unwrap();
    args[seeds + 1] = "2".into();
    let e = mqar_err(&args);
    assert!(e.contains(&c) && e.contains("not among"), "{e}");
    assert_eq!(
        std::fs::read(ckpt.join("trainer_state.json")).unwrap(),
        state
    );

    // Corrupt parameters: an error naming the file (found once the model is built).
    let model = ckpt.join("model.safetensors");
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&model, &bytes[..bytes.len() / 2]).unwrap();
    let e = mqar_err(&with(&["--out", o]));
    assert!(
        e.contains("cannot resume") && e.contains("model.safetensors"),
        "{e}"
    );
    // A corrupt state, and a folder without one.
    std::fs::write(ckpt.join("trainer_state.json"), "{ not json").unwrap();
    let e = mqar_err(&with(&["--out", o]));
    assert!(e.contains(&c) && e.contains("cannot be read"), "{e}");
    std::fs::remove_file(ckpt.join("trainer_state.json")).unwrap();
    let e = mqar_err(&with(&["--out", o]));
    assert!(e.contains(&c) && e.contains("no trainer_state.json"), "{e}");
    assert!(!out.exists(), "a run was recorded");

    // Bad flags.
    for (flag, value) in [
        ("--checkpoint-every", "0"),
        ("--max-seconds", "0"),
        ("--pause-after-steps", "0"),
    ] {
        let e = mqar_err(&with(&["--out", o, flag, value]));
        assert!(e.contains(flag), "{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
