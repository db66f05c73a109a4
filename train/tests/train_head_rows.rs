//! The head on scored rows only (`GraphOptions::head_rows`), in both training graphs, against
//! the full head (`head_rows: None`) with the same parameters and targets:
//! 1. losses and correctness equal (0 at ignored positions) and every parameter gradient
//!    equal, untied and tied head, with a capacity above the scored count and at it;
//! 2. more scored rows than the capacity: the dropped positions' losses (and correctness) are
//!    NaN, the kept ones still equal the full head's;
//! 3. a capacity of 0 or over batch · seq_len is an error at construction.

use loglinear_host_gpu::train::IGNORED_TARGET;
use loglinear_host_gpu::{Gpu, GpuError};
use loglinear_runtime::{Arch, ModelConfig};
use loglinear_train::model::new_train_graph_with;
use loglinear_train::model::{GraphOptions, InitScheme};

mod common;
use common::{gpu, load_large_params, read, rel_l2, tiny_config};

/// Windows and their length of most cases; `LONG` has more rows than the compaction's 256
/// threads (so each thread owns several rows).
const BATCH: usize = 2;
const T: usize = 20;
const LONG: (usize, usize) = (3, 96);

fn options(tie: bool, head_rows: Option<usize>) -> GraphOptions {
    GraphOptions {
        tie_embeddings: tie,
        init: InitScheme::Official,
        head_rows,
    }
}

/// Inputs and targets `[B][T]`: a few scored positions per sequence (about one in five, at
/// different positions in each), half of them the input token itself (which a tied head
/// tends to predict, so that some correctness flags are 1).
fn data(vocab: usize, (batch, seq): (usize, usize)) -> (Vec<u32>, Vec<u32>) {
    let inputs: Vec<u32> = (0..batch * seq)
        .map(|i| ((i * 13 + i / 3) % vocab) as u32)
        .collect();
    let targets = (0..batch * seq)
        .map(|i| {
            let (b, t) = (i / seq, i % seq);
            match (t * 3 + b * 2) % 5 {
                0 => inputs[i],
                _ if (t * 7 + b) % 11 == 3 => ((i * 5 + 1) % vocab) as u32,
                _ => IGNORED_TARGET,
            }
        })
        .collect();
    (inputs, targets)
}

/// One forward + backward (scale 1): losses, correctness and every parameter's gradient.
struct Run {
    losses: Vec<f32>,
    correct: Vec<f32>,
    grads: Vec<Vec<f32>>,
}

fn run(
    gpu: &Gpu,
    c: &ModelConfig,
    (batch, seq): (usize, usize),
    opts: GraphOptions,
    inputs: &[u32],
    targets: &[u32],
) -> Run {
    let m = new_train_graph_with(gpu, c, batch, seq, opts).unwrap();
    load_large_params(gpu, &*m);
    let ib = gpu.storage_from("inputs", inputs).unwrap();
    let tb = gpu.storage_from("targets", targets).unwrap();
    let mut enc = gpu.encoder("step");
    m.encode_zero_grads(&mut enc);
    m.encode_forward_targets(&mut enc, &ib, &tb).unwrap();
    m.encode_backward(&mut enc, 1.0);
    gpu.submit_and_wait(enc).unwrap();
    Run {
        losses: read(gpu, m.losses(), batch * seq),
        correct: read(gpu, m.correct(), batch * seq),
        grads: m.read_grads(gpu).unwrap(),
    }
}

/// Per position: |a − b| ≤ 1e-6·|b| (0 = 0 included).
fn assert_close(what: &str, a: &[f32], b: &[f32]) {
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let err = (x as f64 - y as f64).abs();
        assert!(
            err <= 1e-6 * (y as f64).abs(),
            "{what} {i}: {x} vs full head {y}"
        );
    }
}

fn matches_full_head(arch: Arch, shape: (usize, usize), ties: &[bool]) {
    let gpu = gpu();
    let c = tiny_config(arch);
    let n = shape.0 * shape.1;
    let (inputs, targets) = data(c.vocab_size, shape);
    let scored = targets.iter().filter(|&&x| x != IGNORED_TARGET).count();
    assert!(scored > 2 * shape.0 && scored < n / 2, "{scored} scored");
    for &tie in ties {
        let full = run(&gpu, &c, shape, options(tie, None), &inputs, &targets);
        let right = full.correct.iter().filter(|&&x| x == 1.0).count();
        for cap in [scored, scored + 7] {
            let head = run(&gpu, &c, shape, options(tie, Some(cap)), &inputs, &targets);
            let what = format!("{arch:?} {shape:?} tied {tie} cap {cap}");
            assert_close(&format!("{what}: loss"), &head.losses, &full.losses);
            assert_eq!(head.correct, full.correct, "{what}: correct");
            for (i, &tg) in targets.iter().enumerate() {
                if tg == IGNORED_TARGET {
                    assert_eq!(head.losses[i], 0.0, "{what}: ignored loss {i}");
                    assert_eq!(head.correct[i], 0.0, "{what}: ignored correct {i}");
                } else {
                    assert!(head.losses[i] > 0.0, "{what}: scored loss {i}");
                }
            }
            let mut worst = 0.0f64;
            for (g, (a, b)) in head.grads.iter().zip(&full.grads).enumerate() {
                assert!(b.iter().any(|&x| x != 0.0), "{what}: gradient {g} is zero");
                let e = rel_l2(a, b);
                assert!(e <= 1e-5, "{what}: gradient {g} rel L2 {e:.3e}");
                worst = worst.max(e);
            }
            let loss_err = head
                .losses
                .iter()
                .zip(&full.losses)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            eprintln!(
                "{what}: {scored} of {n} rows scored, {right} correct; loss max |diff| \
                 {loss_err:.2e}, worst gradient rel L2 {worst:.2e}"
            );
        }
    }
}

#[test]
fn gdn_head_rows_match_full_head() {
    matches_full_head(Arch::LogLinearGatedDeltaNet, (BATCH, T), &[false, true]);
}

#[test]
fn mamba2_head_rows_match_full_head() {
    matches_full_head(Arch::LogLinearMamba2, (BATCH, T), &[false, true]);
}

#[test]
fn head_rows_over_256_rows_match_full_head() {
    matches_full_head(Arch::LogLinearMamba2, LONG, &[true]);
}

/// Scored rows beyond the capacity, in row order (row = t·B + b), get NaN; the rest are right.
fn overflow_is_nan(arch: Arch) {
    let gpu = gpu();
    let c = tiny_config(arch);
    let (inputs, targets) = data(c.vocab_size, (BATCH, T));
    let mut rows: Vec<usize> = (0..BATCH * T)
        .filter(|&i| targets[i] != IGNORED_TARGET)
        .map(|i| (i % T) * BATCH + i / T)
        .collect();
    rows.sort_unstable();
    let cap = rows.len() - 3;
    let dropped: Vec<usize> = rows[cap..]
        .iter()
        .map(|&r| (r % BATCH) * T + r / BATCH)
        .collect();
    let full = run(
        &gpu,
        &c,
        (BATCH, T),
        options(false, None),
        &inputs,
        &targets,
    );
    let head = run(
        &gpu,
        &c,
        (BATCH, T),
        options(false, Some(cap)),
        &inputs,
        &targets,
    );
    for i in 0..BATCH * T {
        if dropped.contains(&i) {
            assert!(head.losses[i].is_nan(), "{arch:?}: dropped loss {i}");
            assert!(head.correct[i].is_nan(), "{arch:?}: dropped correct {i}");
        } else {
            assert_close(
                &format!("{arch:?}: kept loss"),
                &head.losses[i..=i],
                &full.losses[i..=i],
            );
            assert_eq!(
                head.correct[i], full.correct[i],
                "{arch:?}: kept correct {i}"
            );
        }
    }
}

#[test]
fn gdn_overflow_gives_nan_losses() {
    overflow_is_nan(Arch::LogLinearGatedDeltaNet);
}

#[test]
fn mamba2_overflow_gives_nan_losses() {
    overflow_is_nan(Arch::LogLinearMamba2);
}

#[test]
fn bad_capacity_is_an_error() {
    let gpu = gpu();
    for arch in [Arch::LogLinearGatedDeltaNet, Arch::LogLinearMamba2] {
        let c = tiny_config(arch);
        for cap in [0, BATCH * T + 1] {
            match new_train_graph_with(&gpu, &c, BATCH, T, options(false, Some(cap))) {
                Err(GpuError::Invalid(m)) => assert!(m.contains("head_rows"), "{m}"),
                Err(e) => panic!("{arch:?} cap {cap}: unexpected error {e}"),
                Ok(_) => panic!("{arch:?} cap {cap}: accepted"),
            }
        }
        // The whole range's ends are fine.
        for cap in [1, BATCH * T] {
            assert!(new_train_graph_with(&gpu, &c, BATCH, T, options(false, Some(cap))).is_ok());
        }
    }
}
