//! `loglinear eval --per-position FILE.csv --plot FILE.png [--baseline MODEL]` on a small slice
//! of text with the shipped models: the CSV has one row per position with the reference
//! columns, its mean is the plain bits per byte of the same windows, the chunkwise windows give
//! the stepped ones' losses, the PNG is a valid PNG of the requested size, and bad paths are
//! refused with errors that name them.

mod common;

use common::repo;
use loglinear_converter::model_source::ModelSource;
use loglinear_runtime::snapshot::Crc32;
use loglinear_train::eval::bits_per_byte;
use loglinear_train::per_position::{per_position_loss, PerPosition, StepState, WindowRunner};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Predictions per window, and windows: small, so that stepping is quick on two cores.
const CTX: usize = 24;
const WINDOWS: usize = 4;

/// The text the tests read: the built-in held-out text (Hamlet), 5 windows and a bit, so the
/// `--bytes` cut decides the windows.
fn text_path() -> PathBuf {
    repo().join("cli/src/cmd/eval_text.txt")
}

fn text() -> Vec<u8> {
    let mut t = std::fs::read(text_path()).unwrap();
    t.truncate(WINDOWS * CTX + 1);
    t
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loglinear-eval-pp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn loglinear(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .arg("eval")
        .args(args)
        .output()
        .expect("run loglinear")
}

/// `loglinear eval <model> <args>` on the first `bytes` bytes of the tests' text, in windows of
/// `context` tokens.
fn eval_text(model: &str, context: usize, bytes: usize, args: &[&str]) -> Output {
    let text = text_path();
    let (context, bytes) = (context.to_string(), bytes.to_string());
    let mut all = vec![
        model,
        "--text",
        text.to_str().unwrap(),
        "--context",
        &context,
        "--bytes",
        &bytes,
    ];
    all.extend_from_slice(args);
    loglinear(&all)
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// `f` on the model at `path` (relative to the repository).
fn with_model<R>(path: &str, f: impl FnOnce(&loglinear_runtime::Model<'_>) -> R) -> R {
    let path = repo().join(path);
    let source = ModelSource::open(&path).unwrap();
    source.with_model(&path, f).unwrap()
}

fn per_position(model: &loglinear_runtime::Model<'_>, runner: WindowRunner) -> PerPosition {
    per_position_loss(model, &text(), CTX, runner, &mut |_| {}).unwrap()
}

#[test]
fn per_position_mean_is_the_plain_bits_per_byte() {
    with_model("models/ll-gdn-mcu-q8_0.gguf", |m| {
        let plain = bits_per_byte(m, &text(), CTX, &mut |_| {}).unwrap();
        let step = per_position(m, WindowRunner::Step(StepState::default()));
        assert_eq!(step.ctx(), CTX);
        assert_eq!(step.windows, WINDOWS);
        let means = step.mean_bits();
        let mean = means.iter().sum::<f64>() / CTX as f64;
        let e = rel(mean, plain.bpb());
        println!(
            "plain {:.9} bits/byte, per-position mean {mean:.9}: rel {e:.1e}",
            plain.bpb()
        );
        assert!(e < 1e-9, "rel {e:e}");
        assert_eq!(step.total().predictions, plain.predictions);
        assert!(rel(step.total().bpb(), plain.bpb()) < 1e-9);

        // The chunkwise windows: same losses up to f32 rounding of the logits.
        let chunk = per_position(m, WindowRunner::Chunkwise { threads: None });
        let worst = chunk
            .mean_bits()
            .iter()
            .zip(&means)
            .map(|(&c, &s)| rel(c, s))
            .fold(0.0, f64::max);
        println!("chunkwise vs step, worst per-position relative difference {worst:.1e}");
        assert!(worst < 1e-4, "chunkwise vs step: {worst:e}");
    });
}

/// `--levels` / `--state`: the board's decoder state. Levels that hold the whole window exactly
/// give the full state's losses bit for bit; fewer saturate and change them; f16 changes them
/// slightly. Chunkwise refuses both (it computes the full f32 state).
#[test]
fn levels_and_state_run_the_boards_decoder() {
    with_model("models/ll-gdn-mcu16k-q8_0.gguf", |m| {
        let step = |levels, f16| {
            per_position(m, WindowRunner::Step(StepState { levels, f16 }))
                .total()
                .bpb()
        };
        let full = step(None, false);
        // 6 levels are exact up to 2^5 = 32 tokens, more than a window of CTX + 1 = 25.
        assert_eq!(step(Some(6), false), full);
        let saturated = step(Some(3), false);
        let f16 = step(None, true);
        println!("bits per byte: full {full:.6}, 3 levels {saturated:.6}, f16 state {f16:.6}");
        assert_ne!(saturated, full);
        assert_ne!(f16, full);
        assert!(rel(f16, full) < 1e-2, "f16 state {f16} vs f32 {full}");
    });
    let shipped = |args: &[&str]| {
        eval_text(
            "models/ll-gdn-mcu16k-q8_0.gguf",
            24,
            WINDOWS * CTX + 1,
            args,
        )
    };
    let out = shipped(&["--levels", "3", "--state", "f16"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(", step"), "{err}");
    let out = shipped(&["--levels", "3", "--prefill", "chunkwise"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--prefill chunkwise") && err.contains("--levels"),
        "{err}"
    );
}

/// (width, height) of a PNG, after checking its signature, every chunk's CRC, and that it
/// starts with IHDR and ends with IEND.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let (mut at, mut kinds) = (8, Vec::new());
    while at < bytes.len() {
        let len = be(&bytes[at..]) as usize;
        let body = &bytes[at + 4..at + 8 + len];
        // PNG's chunk CRC is the snapshots' CRC-32 (ISO-HDLC).
        assert_eq!(Crc32::of(body), be(&bytes[at + 8 + len..]), "chunk CRC");
        kinds.push(body[..4].to_vec());
        at += 12 + len;
    }
    assert_eq!(at, bytes.len());
    assert_eq!(kinds.first().map(Vec::as_slice), Some(&b"IHDR"[..]));
    assert_eq!(kinds.last().map(Vec::as_slice), Some(&b"IEND"[..]));
    assert!(kinds.iter().any(|k| k == b"IDAT"));
    (be(&bytes[16..]), be(&bytes[20..]))
}

/// The CSV's rows as (position, nats, bits), after checking the header.
fn read_csv(path: &Path) -> Vec<(usize, f64, f64)> {
    let csv = std::fs::read_to_string(path).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("position,val_loss_nats,val_loss_bits"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 3, "{l}");
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn cli_writes_csv_and_png_with_a_baseline() {
    let csv = scratch("ll.csv");
    let png = scratch("ll.png");
    let out = eval_text(
        "models/ll-gdn-mcu-q8_0.gguf",
        CTX,
        WINDOWS * CTX + 1,
        &[
            "--prefill",
            "step",
            "--per-position",
            csv.to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
            "--plot-size",
            "480x320",
            "--baseline",
            "models/gdn-mcu",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.starts_with("bits per byte: "), "{stdout}");
    assert!(stdout.contains("\nbaseline bits per byte: "), "{stdout}");

    let rows = read_csv(&csv);
    assert_eq!(rows.len(), CTX);
    for (p, &(pos, nats, bits)) in rows.iter().enumerate() {
        assert_eq!(pos, p);
        assert!(bits > 0.0 && bits.is_finite());
        assert!(
            (nats - bits * std::f64::consts::LN_2).abs() < 2e-9,
            "{nats} {bits}"
        );
    }
    let mean = rows.iter().map(|r| r.2).sum::<f64>() / CTX as f64;
    let plain = with_model("models/ll-gdn-mcu-q8_0.gguf", |m| {
        bits_per_byte(m, &text(), CTX, &mut |_| {}).unwrap()
    });
    let e = rel(mean, plain.bpb());
    println!(
        "CSV mean {mean:.9} vs plain eval {:.9}: rel {e:.1e}",
        plain.bpb()
    );
    assert!(e < 1e-9, "rel {e:e}");

    assert_eq!(png_size(&std::fs::read(&png).unwrap()), (480, 320));
}

#[test]
fn cli_default_runs_windows_chunkwise() {
    let csv = scratch("chunkwise.csv");
    let out = eval_text(
        "models/gdn-mcu",
        CTX,
        WINDOWS * CTX + 1,
        &["--per-position", csv.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("chunkwise"), "{stderr}");
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), CTX);
    let lib = with_model("models/gdn-mcu", |m| {
        per_position(m, WindowRunner::Chunkwise { threads: None })
    });
    for (&(_, _, bits), want) in rows.iter().zip(lib.mean_bits()) {
        assert!((bits - want).abs() < 1e-9, "{bits} vs {want}");
    }
}

/// A run that must fail fast, with an error naming `needle`.
fn refused(args: &[&str], needle: &str) {
    let out = eval_text("models/ll-gdn-mcu-q8_0.gguf", 8, 9, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(stderr.contains("error: "), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    // Refused before evaluating anything.
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[test]
fn bad_paths_are_refused_with_clear_errors() {
    let missing = scratch("no-such-folder");
    let in_missing = |f: &str| missing.join(f).to_str().unwrap().to_string();
    let csv = in_missing("x.csv");
    refused(&["--per-position", &csv], "no such folder");
    let png = in_missing("x.png");
    refused(&["--plot", &png], "no such folder");
    let jpg = scratch("x.jpg");
    refused(&["--plot", jpg.to_str().unwrap()], "ending in .png");
    refused(
        &["--baseline", "models/no-such-model"],
        "models/no-such-model",
    );
    refused(&["--plot-size", "12"], "WIDTHxHEIGHT");
    refused(&["--plot-size", "20x9000"], "64..=8192");
    refused(&["--activations", "q8", "--prefill", "chunkwise"], "f32");
    // A text that is not there.
    let out = loglinear(&["models/ll-gdn-mcu-q8_0.gguf", "--text", "no-such-text.txt"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-text.txt"));
}
