//! `loglinear train` end to end on a tiny Log-Linear Gated DeltaNet (hidden 16, 1 layer,
//! 2 heads of dk 8 / dv 16, byte vocabulary) on lavapipe: the loss falls, the checkpoint
//! converts, resuming gives the same bits as an uninterrupted run, the export loads in the
//! runtime and the trainer's validation equals the CPU runtime's bits per byte; bad input is a
//! clear error, not a panic.

use loglinear_converter::model_source::{AlignedBytes, IndexedGguf};
use loglinear_converter::Checkpoint;
use loglinear_train::eval;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CONFIG: &str = r#"{
  "architectures": ["HGatedDeltaNetForCausalLM"],
  "model_type": "h_gated_deltanet",
  "attn": null,
  "conv_size": 4,
  "expand_v": 2,
  "head_dim": 8,
  "hidden_size": 16,
  "intermediate_size": 32,
  "norm_eps": 1e-06,
  "num_heads": 2,
  "num_hidden_layers": 1,
  "tie_word_embeddings": false,
  "use_gate": true,
  "use_short_conv": true,
  "vocab_size": 256
}"#;

const SEQ_LEN: usize = 32;

/// A fresh scratch folder with the config, the training text and the validation text.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loglinear-train-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tiny.json"), CONFIG).unwrap();
    let text = include_str!("../src/cmd/eval_text.txt").as_bytes();
    let (train, val) = text.split_at(text.len() - 8 * SEQ_LEN - 1);
    std::fs::write(dir.join("train.txt"), train).unwrap();
    std::fs::write(dir.join("val.txt"), val).unwrap();
    dir
}

fn loglinear(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(dir)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .args(args)
        .output()
        .expect("run loglinear")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = loglinear(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "loglinear {args:?} failed:\n{stderr}");
    stderr
}

/// `loglinear train` with the flag groups `groups`, in order.
fn train<'a>(groups: &[&[&'a str]]) -> Vec<&'a str> {
    std::iter::once("train")
        .chain(groups.iter().flat_map(|g| g.iter().copied()))
        .collect()
}

/// The tiny config.
const TINY: [&str; 2] = ["--config", "tiny.json"];

/// The training text, in windows of `SEQ_LEN`.
const TEXT: [&str; 4] = ["--data", "train.txt", "--seq-len", "32"];

/// The validation text.
const VAL: [&str; 2] = ["--val", "val.txt"];

/// One step at lr 1e-20 with no warmup: the weights stay as they were.
const FROZEN: [&str; 6] = ["--steps", "1", "--lr", "1e-20", "--warmup", "0"];

/// One training step at lr 1e-20 from `--init init` into `out`, so the logged validation is
/// the initial model's.
fn frozen_step_from(dir: &Path, init: &str, out: &str) {
    let rest = ["--batch", "2", "--schedule", "constant", "--out", out];
    ok(
        dir,
        &train(&[&["--init", init], &TEXT, &VAL, &FROZEN, &rest]),
    );
}

/// Fails with a message containing `want`, without panicking.
fn fails(dir: &Path, args: &[&str], want: &str) {
    let out = loglinear(dir, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "loglinear {args:?} should fail");
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    assert!(
        stderr.contains(want),
        "{args:?}: expected `{want}` in:\n{stderr}"
    );
}

/// (step, bits per token, validation bits per token) of every row of train_log.csv.
fn log_rows(path: &Path) -> Vec<(u64, f64, Option<f64>)> {
    let text = std::fs::read_to_string(path).unwrap();
    assert_eq!(
        text.lines().next(),
        Some("step,tokens,lr,loss,bits_per_token,grad_norm,val_bits_per_token,seconds")
    );
    loglinear_train::train_log::read(path)
        .unwrap()
        .iter()
        .map(|r| (r.step, r.bits_per_token(), r.val_bits_per_token))
        .collect()
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// The common settings of the runs below besides the data (constant schedule, so a run to
/// step 10 and one to step 20 share their first 10 steps exactly).
const RUN: [&str; 12] = [
    "--batch",
    "2",
    "--accum",
    "2",
    "--lr",
    "1e-2",
    "--warmup",
    "3",
    "--schedule",
    "constant",
    "--eval-every",
    "10",
];

#[test]
fn train_converts_resumes_exactly_and_exports() {
    let dir = scratch("run");
    let with = |extra: &[&'static str]| train(&[&TINY, &TEXT, &VAL, &RUN, extra]);
    let resume = |extra: &[&'static str]| train(&[&["--resume"], &TEXT, &VAL, &RUN, extra]);

    // 30 steps straight, exporting an f32 GGUF at the end.
    let full = with(&[
        "--steps",
        "30",
        "--out",
        "full",
        "--export",
        "full.gguf",
        "--export-type",
        "f32",
    ]);
    ok(&dir, &full);
    let rows = log_rows(&dir.join("full/train_log.csv"));
    assert_eq!(rows.len(), 30);
    let bits: Vec<f64> = rows.iter().map(|r| r.1).collect();
    let (first, last) = (mean(&bits[..5]), mean(&bits[25..]));
    eprintln!("bits per token: first 5 steps {first:.3}, last 5 steps {last:.3}");
    assert!(
        (bits[0] - 8.0).abs() < 0.05,
        "an untrained byte model starts near 8 bits: {}",
        bits[0]
    );
    assert!(last < first - 1.5, "the loss falls: {first} -> {last}");
    let vals: Vec<f64> = rows.iter().filter_map(|r| r.2).collect();
    assert_eq!(vals.len(), 3, "validated at steps 10, 20, 30");
    assert!(vals[2] < vals[0], "validation improves: {vals:?}");

    // A new run does not overwrite a checkpoint.
    fails(&dir, &full, "pass --resume");

    // The checkpoint folder is an official checkpoint: it imports and converts.
    let ckpt = Checkpoint::load(dir.join("full/checkpoint")).expect("checkpoint imports");
    assert_eq!(ckpt.config.hidden_size, 16);
    ok(
        &dir,
        &[
            "convert",
            "full/checkpoint",
            "-o",
            "converted.gguf",
            "--no-eval",
        ],
    );

    // The export loads in the runtime, and its bits per byte on the validation text (CPU
    // decoder, the same windows) equal the trainer's last validation.
    let bytes = AlignedBytes::read(&dir.join("full.gguf")).unwrap();
    let g = IndexedGguf::parse(bytes.as_bytes()).expect("the export parses");
    let model = g.model().expect("the runtime loads the export");
    let val = std::fs::read(dir.join("val.txt")).unwrap();
    let cpu = eval::bits_per_byte(&model, &val, SEQ_LEN, &mut |_| {}).unwrap();
    let rel = (cpu.bpb() - vals[2]).abs() / cpu.bpb();
    eprintln!(
        "validation: trainer {:.6}, CPU runtime {:.6} bits (rel {rel:.1e})",
        vals[2],
        cpu.bpb()
    );
    assert!(rel < 1e-4, "trainer {} vs runtime {}", vals[2], cpu.bpb());
    // Fine-tuning starts from the given weights, from the GGUF file (a generated official
    // config) or the checkpoint folder: a step at lr 1e-20 leaves them as they are, so the
    // validation is the trained model's.
    for (init, out) in [("full.gguf", "ft-gguf"), ("full/checkpoint", "ft-folder")] {
        frozen_step_from(&dir, init, out);
        let rows = log_rows(&dir.join(out).join("train_log.csv"));
        assert_eq!(rows[0].2, Some(vals[2]), "--init {init}");
        Checkpoint::load(dir.join(out).join("checkpoint")).expect("fine-tuned checkpoint imports");
    }
    // A quantized export through the same path.
    ok(
        &dir,
        &resume(&["--steps", "31", "--out", "full", "--export", "q8.gguf"]),
    );
    let q8 = AlignedBytes::read(&dir.join("q8.gguf")).unwrap();
    IndexedGguf::parse(q8.as_bytes())
        .expect("the q8_0 export parses")
        .model()
        .expect("the runtime loads the q8_0 export");

    // 10 steps, then resumed to 20, equals 20 steps straight, bit for bit.
    ok(&dir, &with(&["--steps", "20", "--out", "straight"]));
    ok(
        &dir,
        &with(&["--steps", "10", "--out", "split", "--save-every", "5"]),
    );
    let resumed = resume(&["--steps", "20", "--out", "split"]);
    let stderr = ok(&dir, &resumed);
    assert!(stderr.contains("steps 11..20"), "{stderr}");
    for file in ["model.safetensors", "optimizer.safetensors"] {
        let a = std::fs::read(dir.join("straight/checkpoint").join(file)).unwrap();
        let b = std::fs::read(dir.join("split/checkpoint").join(file)).unwrap();
        assert!(a == b, "{file} differs after resuming");
    }
    let straight = log_rows(&dir.join("straight/train_log.csv"));
    let split = log_rows(&dir.join("split/train_log.csv"));
    assert_eq!(split.len(), 20);
    for (a, b) in straight.iter().zip(&split) {
        assert_eq!((a.0, a.1), (b.0, b.1), "same step and loss");
    }

    // Resuming with other settings is refused, naming the setting.
    let mut other = resumed.clone();
    let i = other.iter().position(|s| *s == "--batch").unwrap();
    other[i + 1] = "3";
    other
        .iter_mut()
        .filter(|s| **s == "20")
        .for_each(|s| *s = "25");
    fails(&dir, &other, "`batch`");

    // The curves of both runs in one chart: the table has a row per run, and the resumed
    // run's curves are the straight run's exactly.
    let out = loglinear(
        &dir,
        &[
            "loss-plot",
            "straight",
            "resumed=split/train_log.csv",
            "full",
            "-o",
            "curves.png",
            "--smooth",
            "5",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let png = std::fs::read(dir.join("curves.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
        .collect();
    assert_eq!(rows.len(), 4, "header and three runs:\n{stdout}");
    assert!(rows[0].contains("validation − straight"), "{}", rows[0]);
    let resumed_row = rows.iter().find(|r| r.starts_with("| resumed |")).unwrap();
    assert!(
        resumed_row.contains("| 20 |") && resumed_row.matches("+0.0000 (0.0000)").count() == 2,
        "{resumed_row}"
    );
    // The full run's first 20 steps are the straight run's (a constant schedule), so its
    // validations at steps 10 and 20 are the same too.
    let full_row = rows.iter().find(|r| r.starts_with("| full |")).unwrap();
    assert!(
        full_row.contains("| 31 |") && full_row.contains("| +0.0000 (0.0000) |"),
        "{full_row}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = scratch("errors");
    let base = [
        "train",
        "--config",
        "tiny.json",
        "--seq-len",
        "32",
        "--steps",
        "1",
    ];
    let run = |extra: &[&str], want: &str| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        fails(&dir, &args, want);
    };
    run(&["--data", "missing.txt", "--out", "o"], "missing.txt");
    std::fs::write(dir.join("short.txt"), b"tiny").unwrap();
    run(&["--data", "short.txt", "--out", "o"], "need at least");
    std::fs::write(dir.join("big.u16"), [0u8, 1, 0, 2]).unwrap();
    run(
        &["--data", "big.u16", "--out", "o"],
        "outside the model's vocabulary",
    );
    std::fs::write(dir.join("odd.u32"), [0u8; 6]).unwrap();
    run(&["--data", "odd.u32", "--out", "o"], "whole number");
    run(
        &["--data", "train.txt", "--out", "o", "--val-fraction", "1.5"],
        "--val-fraction",
    );
    run(
        &["--data", "train.txt", "--out", "o", "--batch", "0"],
        "at least 1",
    );
    // Validation data too short for one window, or empty: an error, not a silent run
    // without validation.
    run(
        &["--data", "train.txt", "--val", "short.txt", "--out", "o"],
        "fewer than one window",
    );
    std::fs::write(dir.join("empty.txt"), b"").unwrap();
    run(
        &["--data", "train.txt", "--val", "empty.txt", "--out", "o"],
        "the validation data has 0 tokens",
    );
    run(
        &["--data", "train.txt", "--out", "o", "--lr=-1"],
        "learning rate",
    );
    let diverging = [
        "--batch",
        "2",
        "--steps",
        "4",
        "--lr",
        "1e30",
        "--warmup",
        "0",
        "--schedule",
        "constant",
        "--out",
        "diverged",
    ];
    fails(
        &dir,
        &train(&[&TINY, &TEXT, &diverging]),
        "training diverged at step",
    );
    assert!(
        !dir.join("diverged/checkpoint").exists(),
        "no checkpoint of NaN weights"
    );
    std::fs::write(dir.join("bad.json"), "{\"model_type\": \"llama\"}").unwrap();
    fails(
        &dir,
        &[
            "train",
            "--config",
            "bad.json",
            "--data",
            "train.txt",
            "--out",
            "o",
        ],
        "llama",
    );
    fails(
        &dir,
        &[
            "train",
            "--data",
            "train.txt",
            "--out",
            "nothing",
            "--resume",
        ],
        "no checkpoint",
    );
    fails(
        &dir,
        &[
            "train",
            "--init",
            "train.txt",
            "--data",
            "train.txt",
            "--out",
            "o",
        ],
        "neither a checkpoint folder nor a GGUF file",
    );
    // loss-plot names the run or the file at fault.
    let plot = |run: &str, out: &str, want: &str| {
        fails(&dir, &["loss-plot", run, "-o", out], want);
    };
    plot("nowhere", "c.png", "RUN nowhere: no such file");
    plot(
        "train.txt",
        "c.png",
        "train.txt: not a `loglinear train` log",
    );
    let header = "step,tokens,lr,loss,bits_per_token,grad_norm,val_bits_per_token,seconds";
    std::fs::write(
        dir.join("cut.csv"),
        format!("{header}\n1,64,1e-3,5.5,7.9,1.0,,0.1\n2,128"),
    )
    .unwrap();
    plot("cut.csv", "c.png", "cut.csv, line 3: 2 fields");
    std::fs::write(
        dir.join("log.csv"),
        format!("{header}\n1,64,1e-3,5.5,7.9,1.0,,0.1\n"),
    )
    .unwrap();
    plot("log.csv", "c.svg", "c.svg: the plot is written as PNG");
    plot(
        "log.csv",
        "no/c.png",
        "--output: cannot write no/c.png: no such folder no",
    );
    assert!(!dir.join("c.png").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn accumulating_two_micro_batches_equals_one_batch_twice_as_large() {
    let dir = scratch("accum");
    // The sampler draws windows in the same order either way, so both runs see the same data
    // in each step; the gradients differ only in summation order.
    let run = |batch: &str, accum: &str, out: &str| {
        let rest = [
            "--batch", batch, "--accum", accum, "--steps", "6", "--lr", "1e-2", "--warmup", "2",
            "--out", out,
        ];
        ok(&dir, &train(&[&TINY, &TEXT, &rest]));
        log_rows(&dir.join(out).join("train_log.csv"))
    };
    let one = run("4", "1", "one");
    let two = run("2", "2", "two");
    let mut worst = 0.0f64;
    for (a, b) in one.iter().zip(&two) {
        worst = worst.max((a.1 - b.1).abs() / a.1);
    }
    eprintln!("batch 4 vs 2 x accum 2: worst relative loss difference {worst:.1e} over 6 steps");
    assert!(worst < 1e-4, "{one:?}\n{two:?}");
    // And the weights after six steps agree.
    let a = Checkpoint::load(dir.join("one/checkpoint")).unwrap();
    let b = Checkpoint::load(dir.join("two/checkpoint")).unwrap();
    let mut worst = 0.0f64;
    for (name, ta) in a.store.iter() {
        let tb = b.store.iter().find(|(n, _)| *n == name).unwrap().1;
        let den = ta.data.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
        let num = ta
            .data
            .iter()
            .zip(&tb.data)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs())) as f64;
        worst = worst.max(num / den.max(1e-30));
    }
    // Adam divides by |g|: where a gradient is near zero, its rounding moves the update by up
    // to 2·lr, so the weights agree less closely than the losses (measured 1.1e-4, against
    // ~1e-2 if a micro-batch were dropped).
    eprintln!("weights after 6 steps: worst relative difference {worst:.1e}");
    assert!(worst < 1e-3, "weights differ by {worst:e}");
    // Adam is blind to a gradient scale; the gradient norm is not: the loss scale
    // 1/(batch·seq_len·accum) gives the same mean-loss gradient both ways.
    let norms = |out: &str| -> Vec<f64> {
        let text = std::fs::read_to_string(dir.join(out).join("train_log.csv")).unwrap();
        text.lines()
            .skip(1)
            .map(|l| l.split(',').nth(5).unwrap().parse().unwrap())
            .collect()
    };
    let (na, nb) = (norms("one"), norms("two"));
    assert!(
        (na[0] - nb[0]).abs() <= 1e-5 * na[0],
        "gradient norms {na:?} vs {nb:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Fine-tuning the shipped model writes a checkpoint with the official file's keys, dtypes and
/// shapes and its config (a step at lr 1e-20 leaves every value bit-identical), so the PyTorch
/// stack loads it as it loads the shipped one.
#[test]
fn checkpoints_have_the_official_layout() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/ll-gdn-mcu");
    if !shipped.join("model.safetensors").exists() {
        eprintln!("skipped: {} is not here", shipped.display());
        return;
    }
    let dir = scratch("layout");
    let init = ["--init", shipped.to_str().unwrap()];
    let data = ["--data", "train.txt", "--seq-len", "16", "--batch", "1"];
    ok(&dir, &train(&[&init, &data, &FROZEN, &["--out", "ft"]]));
    let a = std::fs::read(shipped.join("model.safetensors")).unwrap();
    let b = std::fs::read(dir.join("ft/checkpoint/model.safetensors")).unwrap();
    let a = safetensors::SafeTensors::deserialize(&a).unwrap();
    let b = safetensors::SafeTensors::deserialize(&b).unwrap();
    let mut names = a.names();
    names.sort();
    let mut names_b = b.names();
    names_b.sort();
    assert_eq!(names, names_b);
    for name in names {
        let (ta, tb) = (a.tensor(name).unwrap(), b.tensor(name).unwrap());
        assert_eq!((ta.dtype(), ta.shape()), (tb.dtype(), tb.shape()), "{name}");
        assert!(ta.data() == tb.data(), "{name} changed");
    }
    let json = |p: PathBuf| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    assert_eq!(
        json(shipped.join("config.json")),
        json(dir.join("ft/checkpoint/config.json"))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tiny log-linear Mamba-2 (`hattention`, hidden 16, 2 heads of 16, state 8) through the same
/// trainer: the loss falls, the trainer's validation equals the CPU runtime's bits per byte
/// on the export, and fine-tuning from that GGUF (with a generated official config) keeps it.
#[test]
fn mamba2_trains_exports_and_fine_tunes() {
    let dir = scratch("mamba2");
    std::fs::write(
        dir.join("m2.json"),
        r#"{"architectures": ["HAttentionForCausalLM"], "model_type": "hattention",
            "conv_kernel": 4, "expand": 2, "head_dim": 16, "hidden_size": 16,
            "intermediate_size": 32, "layer_norm_epsilon": 1e-05, "n_groups": 1,
            "num_heads": 2, "num_hidden_layers": 1, "residual_in_fp32": false, "state_size": 8,
            "tie_word_embeddings": false, "use_bias": false, "use_conv_bias": true,
            "vocab_size": 256}"#,
    )
    .unwrap();
    let run = [
        "--batch",
        "2",
        "--steps",
        "30",
        "--lr",
        "1e-2",
        "--warmup",
        "3",
        "--out",
        "m2",
        "--export",
        "m2.gguf",
        "--export-type",
        "f32",
    ];
    ok(&dir, &train(&[&["--config", "m2.json"], &TEXT, &VAL, &run]));
    let rows = log_rows(&dir.join("m2/train_log.csv"));
    let bits: Vec<f64> = rows.iter().map(|r| r.1).collect();
    assert!((bits[0] - 8.0).abs() < 0.05, "{}", bits[0]);
    assert!(
        mean(&bits[25..]) < bits[0] - 1.5,
        "the loss falls: {bits:?}"
    );
    let val = rows[29].2.expect("validated at the last step");
    let bytes = AlignedBytes::read(&dir.join("m2.gguf")).unwrap();
    let g = IndexedGguf::parse(bytes.as_bytes()).expect("the export parses");
    let text = std::fs::read(dir.join("val.txt")).unwrap();
    let cpu = eval::bits_per_byte(&g.model().unwrap(), &text, SEQ_LEN, &mut |_| {}).unwrap();
    eprintln!(
        "Mamba-2 validation: trainer {val:.6}, CPU runtime {:.6}",
        cpu.bpb()
    );
    assert!((cpu.bpb() - val).abs() < 1e-4 * cpu.bpb());
    frozen_step_from(&dir, "m2.gguf", "ft");
    assert_eq!(log_rows(&dir.join("ft/train_log.csv"))[0].2, Some(val));
    let ckpt = Checkpoint::load(dir.join("ft/checkpoint")).expect("hattention checkpoint");
    assert_eq!(ckpt.layout, loglinear_converter::Layout::Hattention);
    std::fs::remove_dir_all(&dir).unwrap();
}
