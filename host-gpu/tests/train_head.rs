//! The head (final RMSNorm, LM head, masked cross-entropy and their backward) in tiles of rows:
//! 1. forced small tiles (a small `max_tile_bytes`), with a last tile shorter than the others
//!    and with the head on scored rows only (`rows: Some(cap)`), against one tile: losses and
//!    correctness bit for bit, dL/dx, the norm's and the LM head's gradients to fp32 rounding;
//! 2. rows × vocab logits over the adapter's own storage-binding limit (lavapipe: 128 MiB)
//!    build and run a forward and backward in tiles, the losses and the LM head's gradient
//!    against an f64 CPU reference;
//! 3. the tile choice ([`tile_rows`]);
//! 4. the compact head's row levels ([`row_levels`], `Head::set_scored_rows`): the smallest
//!    level that holds the scored rows matches the full capacity, and a level below them turns
//!    the rows beyond it into NaN.

use loglinear_host_gpu::train::head::{
    row_levels, tile_rows, Head, HeadIo, HeadOptions, HeadShape,
};
use loglinear_host_gpu::train::kernels::TrainKernels;
use loglinear_host_gpu::train::IGNORED_TARGET;
use loglinear_host_gpu::{Gpu, GpuError};
use loglinear_tests::random::{uniform_f32, SplitMix64};

const EPS: f32 = 1e-5;
/// The backward's loss scale.
const SCALE: f32 = 0.5;

/// The f32 adapter the tests run on (lavapipe in CI).
fn gpu() -> Gpu {
    Gpu::new_fp32().expect("GPU adapter (lavapipe)")
}

/// The head's inputs: x_last `[rows][d]`, the norm weight, the LM head `[vocab][d]` and the
/// targets `[batch][t]` (every third one ignored).
struct Case {
    shape: HeadShape,
    x: Vec<f32>,
    norm_w: Vec<f32>,
    lm_head: Vec<f32>,
    targets: Vec<u32>,
}

impl Case {
    fn new(t: usize, batch: usize, d: usize, vocab: usize) -> Self {
        let mut r = SplitMix64::new(11);
        let rows = t * batch;
        Self {
            shape: HeadShape {
                seq_len: t,
                batch,
                d,
                vocab,
                eps: EPS,
            },
            x: uniform_f32(&mut r, rows * d, 1.0),
            norm_w: uniform_f32(&mut r, d, 0.2)
                .iter()
                .map(|w| 1.0 + w)
                .collect(),
            lm_head: uniform_f32(&mut r, vocab * d, 0.5),
            targets: (0..rows)
                .map(|i| match i % 3 {
                    0 => IGNORED_TARGET,
                    _ => ((i * 7919 + 13) % vocab) as u32,
                })
                .collect(),
        }
    }

    fn rows(&self) -> usize {
        self.shape.seq_len * self.shape.batch
    }
}

/// One forward and backward: losses, correctness, dL/dx_last, the norm's and the LM head's
/// gradients, and the head's tile rows.
struct Out {
    losses: Vec<f32>,
    correct: Vec<f32>,
    dx: Vec<f32>,
    norm_g: Vec<f32>,
    lm_head_g: Vec<f32>,
    tile: usize,
    /// The rows the head ran on.
    rows_in_use: usize,
}

fn run(gpu: &Gpu, k: &TrainKernels, c: &Case, options: HeadOptions) -> Result<Out, GpuError> {
    run_scored(gpu, k, c, options, None)
}

/// [`run`], with `Head::set_scored_rows(scored)` before recording when given.
fn run_scored(
    gpu: &Gpu,
    k: &TrainKernels,
    c: &Case,
    options: HeadOptions,
    scored: Option<usize>,
) -> Result<Out, GpuError> {
    let (rows, d, vocab) = (c.rows(), c.shape.d, c.shape.vocab);
    let zeros = |label: &str, len: usize| gpu.storage_zeroed(label, 4 * len as u64);
    let x_last = gpu.storage_from("x_last", &c.x)?;
    let norm_w = gpu.storage_from("norm w", &c.norm_w)?;
    let lm_head_w = gpu.storage_from("lm_head w", &c.lm_head)?;
    let targets = gpu.storage_from("targets", &c.targets)?;
    let scale = gpu.storage_from("scale", &[SCALE])?;
    let (norm_g, lm_head_g) = (zeros("norm g", d)?, zeros("lm_head g", vocab * d)?);
    let (losses, correct, dx) = (
        zeros("losses", rows)?,
        zeros("correct", rows)?,
        zeros("dx", rows * d)?,
    );
    let io = HeadIo {
        x_last: &x_last,
        norm_w: &norm_w,
        norm_g: &norm_g,
        lm_head_w: &lm_head_w,
        lm_head_g: &lm_head_g,
        targets: &targets,
        losses: &losses,
        correct: &correct,
        scale: &scale,
        dx: &dx,
    };
    let head = Head::with_options(gpu, k, &io, c.shape, options)?;
    if let Some(n) = scored {
        head.set_scored_rows(n);
    }
    let mut enc = gpu.encoder("head");
    head.encode_forward(&mut enc);
    head.encode_backward(&mut enc);
    gpu.submit_and_wait(enc)?;
    let read = |b: &wgpu::Buffer, n: usize| {
        let mut v = gpu.read_f32(b)?;
        v.truncate(n);
        Ok::<_, GpuError>(v)
    };
    Ok(Out {
        losses: read(&losses, rows)?,
        correct: read(&correct, rows)?,
        dx: read(&dx, rows * d)?,
        norm_g: read(&norm_g, d)?,
        lm_head_g: read(&lm_head_g, vocab * d)?,
        tile: head.tile_rows(),
        rows_in_use: head.rows_in_use(),
    })
}

/// ‖a − b‖ / ‖b‖.
fn rel_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum();
    let den: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
    (num / den.max(1e-300)).sqrt()
}

/// `got` against the one-tile `want`: losses and correctness equal, gradients within 1e-5
/// relative (the tiles add dW_head in another order).
fn assert_matches(what: &str, got: &Out, want: &Out) {
    assert_eq!(got.losses, want.losses, "{what}: losses");
    assert_eq!(got.correct, want.correct, "{what}: correctness");
    for (name, a, b) in [
        ("dx", &got.dx, &want.dx),
        ("norm gradient", &got.norm_g, &want.norm_g),
        ("LM head gradient", &got.lm_head_g, &want.lm_head_g),
    ] {
        assert!(b.iter().any(|&v| v != 0.0), "{what}: {name} is zero");
        let e = rel_l2(a, b);
        eprintln!("{what}: {name} rel L2 {e:.2e}");
        assert!(e <= 1e-5, "{what}: {name} rel L2 {e:.3e}");
    }
}

/// Bytes of `rows` rows of logits.
fn tile_bytes(c: &Case, rows: usize) -> u64 {
    (4 * rows * c.shape.vocab) as u64
}

#[test]
fn small_tiles_match_one_tile() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    // 60 rows: tiles of 16 (the last one 12 rows) and of 4; vocab over the split-k threshold
    // of the dx product.
    let c = Case::new(15, 4, 24, 1100);
    let rows = c.rows();
    let scored = c.targets.iter().filter(|&&t| t != IGNORED_TARGET).count();
    let options = |head_rows: Option<usize>, tile: Option<usize>| HeadOptions {
        rows: head_rows,
        max_tile_bytes: tile.map(|r| tile_bytes(&c, r)),
    };
    for head_rows in [None, Some(scored + 3)] {
        let one = run(&gpu, &k, &c, options(head_rows, None)).unwrap();
        assert_eq!(one.tile, head_rows.unwrap_or(rows), "one tile");
        for (tile, limit_rows) in [(16, 16), (16, 31), (4, 4), (4, 7)] {
            let what = format!("head_rows {head_rows:?}, tiles of {tile} rows");
            let tiled = run(&gpu, &k, &c, options(head_rows, Some(limit_rows))).unwrap();
            assert_eq!(tiled.tile, tile, "{what}");
            assert_matches(&what, &tiled, &one);
        }
    }
}

/// Loss, and ∂(SCALE · Σ loss)/∂W_head, of `c` in f64, a row at a time.
fn reference(c: &Case) -> (Vec<f64>, Vec<f64>) {
    let HeadShape {
        seq_len: t,
        batch,
        d,
        vocab,
        eps,
    } = c.shape;
    let mut losses = vec![0.0; c.rows()];
    let mut dw = vec![0.0; vocab * d];
    let mut logits = vec![0.0; vocab];
    for r in 0..c.rows() {
        let i = (r % batch) * t + r / batch;
        if c.targets[i] == IGNORED_TARGET {
            continue;
        }
        let x = &c.x[r * d..(r + 1) * d];
        let ms = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
        let rstd = 1.0 / (ms + eps as f64).sqrt();
        let h: Vec<f64> = (0..d)
            .map(|j| x[j] as f64 * rstd * c.norm_w[j] as f64)
            .collect();
        for (v, l) in logits.iter_mut().enumerate() {
            let w = &c.lm_head[v * d..(v + 1) * d];
            *l = (0..d).map(|j| w[j] as f64 * h[j]).sum();
        }
        let m = logits.iter().cloned().fold(f64::MIN, f64::max);
        let lse = m + logits.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
        let tg = c.targets[i] as usize;
        losses[i] = lse - logits[tg];
        for (v, &l) in logits.iter().enumerate() {
            let g = SCALE as f64 * ((l - lse).exp() - if v == tg { 1.0 } else { 0.0 });
            for j in 0..d {
                dw[v * d + j] += g * h[j];
            }
        }
    }
    (losses, dw)
}

#[test]
fn logits_over_the_binding_limit_run_in_tiles() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let limit = gpu
        .limits
        .max_storage_buffer_binding_size
        .min(gpu.limits.max_buffer_size);
    let (d, vocab) = (8, 4096);
    // 64 rows more than one binding holds, in windows of 64 tokens.
    let fit = (limit / (4 * vocab as u64)) as usize;
    let batch = fit.div_ceil(64) + 1;
    let c = Case::new(64, batch, d, vocab);
    assert!(
        tile_bytes(&c, c.rows()) > limit,
        "the full logits fit the limit"
    );
    let got = run(&gpu, &k, &c, HeadOptions::default()).unwrap();
    assert!(got.tile < c.rows(), "one tile of {} rows", got.tile);
    eprintln!(
        "{} rows × {vocab} vocab ({} bytes of logits, limit {limit}): tiles of {} rows",
        c.rows(),
        tile_bytes(&c, c.rows()),
        got.tile
    );
    let (losses, dw) = reference(&c);
    let worst = got
        .losses
        .iter()
        .zip(&losses)
        .map(|(&a, b)| (a as f64 - b).abs())
        .fold(0.0, f64::max);
    eprintln!("losses: worst abs error {worst:.2e}");
    assert!(worst <= 1e-4, "losses: worst abs error {worst:.3e}");
    let num: f64 = got
        .lm_head_g
        .iter()
        .zip(&dw)
        .map(|(&a, b)| (a as f64 - b).powi(2))
        .sum();
    let e = (num / dw.iter().map(|b| b * b).sum::<f64>()).sqrt();
    eprintln!("LM head gradient: rel L2 {e:.2e}");
    assert!(e <= 1e-5, "LM head gradient rel L2 {e:.3e}");
    assert!(got.dx.iter().all(|v| v.is_finite()) && got.dx.iter().any(|&v| v != 0.0));
}

#[test]
fn tile_choice() {
    // Every row when they fit, else the largest power of two that fits.
    assert_eq!(tile_rows(40, 300, 40 * 1200).unwrap(), 40);
    assert_eq!(tile_rows(40, 300, u64::MAX).unwrap(), 40);
    assert_eq!(tile_rows(40, 300, 40 * 1200 - 1).unwrap(), 32);
    assert_eq!(tile_rows(40, 300, 8 * 1200).unwrap(), 8);
    assert_eq!(tile_rows(40, 300, 8 * 1200 - 1).unwrap(), 4);
    assert_eq!(tile_rows(40, 300, 1200).unwrap(), 1);
    // MQAR at batch 256, seq 256, vocab 8192 under wgpu's 2 GiB − 4: two tiles of 1 GiB.
    assert_eq!(tile_rows(65536, 8192, (2 << 30) - 4).unwrap(), 32768);
    match tile_rows(40, 300, 1199) {
        Err(GpuError::TooLarge { bytes: 1200, .. }) => {}
        other => panic!("one row over the limit: {other:?}"),
    }
}

#[test]
fn row_levels_split_the_capacity_in_eighths() {
    assert_eq!(
        row_levels(16384),
        [2048, 4096, 6144, 8192, 10240, 12288, 14336, 16384]
    );
    assert_eq!(row_levels(9), [2, 4, 6, 8, 9]);
    assert_eq!(row_levels(5), [1, 2, 3, 4, 5]);
    assert_eq!(row_levels(1), [1]);
}

#[test]
fn the_smallest_level_that_holds_the_scored_rows_matches_the_capacity() {
    let gpu = gpu();
    let k = TrainKernels::new(&gpu).unwrap();
    let c = Case::new(15, 8, 24, 1100);
    let scored = c.targets.iter().filter(|&&t| t != IGNORED_TARGET).count();
    // 80 scored rows of 120, capacity 96: levels of 12 rows.
    assert_eq!(scored, 80);
    let options = HeadOptions {
        rows: Some(96),
        max_tile_bytes: None,
    };
    let full = run(&gpu, &k, &c, options).unwrap();
    assert_eq!(full.rows_in_use, 96, "before set_scored_rows: the capacity");
    for (hint, level) in [(80, 84), (84, 84), (85, 96), (96, 96), (1000, 96)] {
        let what = format!("set_scored_rows({hint})");
        let got = run_scored(&gpu, &k, &c, options, Some(hint)).unwrap();
        assert_eq!(got.rows_in_use, level, "{what}");
        assert_matches(&what, &got, &full);
    }
    // A hint below the scored rows: level 72 holds the first 72, the last 8 become NaN.
    let dropped = run_scored(&gpu, &k, &c, options, Some(70)).unwrap();
    assert_eq!(dropped.rows_in_use, 72);
    let nan = dropped.losses.iter().filter(|v| v.is_nan()).count();
    assert_eq!(nan, scored - 72, "scored rows beyond level 72 become NaN");
    let kept: Vec<usize> = (0..c.rows())
        .filter(|&i| !dropped.losses[i].is_nan())
        .collect();
    for &i in &kept {
        assert_eq!(dropped.losses[i], full.losses[i], "loss {i}");
    }
}
