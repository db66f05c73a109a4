//! Quantized matvec kernels and whole-model decode against the memory-bandwidth bound.
//!
//! ```text
//! cargo run --release -p loglinear-converter --example kernel_bench [-- [--model FILE] [--quick]]
//! ```
//!
//! Three tables, all measured in one run on this machine (median of [`REPS`] repetitions, the
//! 1-minute load average printed beside each, since the host may be shared):
//!
//! 1. **memcpy bandwidth**: `copy_from_slice` of 4 MiB (cache), 64 MiB and 1 GiB (memory)
//!    buffers; GB/s = bytes copied / s (each byte read once and written once).
//! 2. **matvec kernels**: every quantized matrix shape of the model (default
//!    `models/ll-gdn-mcu-q8_0.gguf`) and 4096×4096, in Q8_0 and Q4_0 (random weights), on
//!    `f32-act` (f32 activations, [`TensorView::matvec`]: the pre-Q8 baseline) and on every
//!    [`KernelPath`] this CPU runs with Q8 activations (the activation quantization is timed
//!    apart, as `quantize`). GB/s counts the weight bytes read, GMAC/s rows × cols. Ratios are
//!    against `portable` (the reference integer kernel) and `f32-act`.
//! 3. **decode**: the model's tokens/s with f32 activations and with Q8 activations on each
//!    kernel path (forced with [`quant::set_forced_path`]), from a fresh session, [`WARMUP`]
//!    tokens, then [`TIMED`] tokens timed. The memory-bandwidth bound is
//!    `memcpy GB/s / bytes per token`, bytes per token = the weights a step reads (every
//!    tensor but the embedding, of which one row) + 2 × the mean live state bytes over the
//!    timed tokens (every live Fenwick level is read and written by the transition, spec §4.2).
//!
//! `--quick` shortens every measurement (for a smoke run; the numbers are then noisy).

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use loglinear_converter::model_source::{AlignedBytes, IndexedGguf};
use loglinear_runtime::quant::{
    self, quantize_activations, ActBlock, Activations, BlockQ4_0, BlockQ8_0, KernelPath, QK,
};
use loglinear_runtime::{DType, Session, SessionConfig, TensorData, TensorView};

/// Repetitions of every measurement (median reported).
const REPS: usize = 5;
/// Decode tokens fed before timing.
const WARMUP: usize = 256;
/// Decode tokens timed per repetition.
const TIMED: usize = 1000;

#[derive(Parser)]
#[command(about = "Quantized matvec kernels and decode against the memory-bandwidth bound")]
struct Opts {
    /// The model file whose shapes and decode are measured.
    #[arg(long, value_name = "FILE", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/ll-gdn-mcu-q8_0.gguf"))]
    model: PathBuf,
    /// Shorter measurements, for a smoke run (the numbers are then noisy).
    #[arg(long)]
    quick: bool,
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds per call of `f`: calls batched to about `min` per repetition, median of [`REPS`].
fn time_per_call(min: Duration, mut f: impl FnMut()) -> f64 {
    f();
    let mut n = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..n {
            f();
        }
        let e = t.elapsed();
        if e >= min / 8 {
            n = (n as f64 * min.as_secs_f64() / e.as_secs_f64()).ceil() as usize;
            break;
        }
        n *= 2;
    }
    median(
        (0..REPS)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..n {
                    f();
                }
                t.elapsed().as_secs_f64() / n as f64
            })
            .collect(),
    )
}

/// A deterministic pseudo-random f32 in [−0.5, 0.5).
struct Noise(u32);

impl Noise {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (self.0 >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    }
    fn block(&mut self) -> [f32; QK] {
        core::array::from_fn(|_| self.next())
    }
}

/// memcpy GB/s for buffers of `bytes`.
fn memcpy_gbs(bytes: usize, min: Duration) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let s = time_per_call(min, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    });
    bytes as f64 / s / 1e9
}

/// One kernel-table row.
struct KernelRow {
    shape: String,
    wtype: &'static str,
    path: String,
    seconds: f64,
    weight_bytes: usize,
    macs: usize,
}

fn bench_shape(rows: usize, cols: usize, min: Duration, out: &mut Vec<KernelRow>) {
    let blocks = rows * cols / QK;
    let mut noise = Noise(rows as u32 * 31 + cols as u32);
    let w8: Vec<BlockQ8_0> = (0..blocks)
        .map(|_| BlockQ8_0::quantize(&noise.block()))
        .collect();
    let w4: Vec<BlockQ4_0> = (0..blocks)
        .map(|_| BlockQ4_0::quantize(&noise.block()))
        .collect();
    let x: Vec<f32> = (0..cols).map(|_| 4.0 * noise.next()).collect();
    let mut act = vec![ActBlock::default(); cols / QK];
    let mut y = vec![0f32; rows];
    let shape = format!("{rows}×{cols}");
    let q = time_per_call(min, || {
        black_box(quantize_activations(black_box(&x), &mut act));
    });
    out.push(KernelRow {
        shape: shape.clone(),
        wtype: "-",
        path: "quantize".into(),
        seconds: q,
        weight_bytes: 0,
        macs: 0,
    });
    let act = quantize_activations(&x, &mut act)
        .expect("whole blocks")
        .to_vec();
    for (wtype, data, bytes) in [
        ("q8_0", TensorData::Q8_0(&w8), blocks * 34),
        ("q4_0", TensorData::Q4_0(&w4), blocks * 18),
    ] {
        let view = TensorView::new(rows, cols, data).expect("shape");
        let s = time_per_call(min, || view.matvec(black_box(&x), &mut y));
        let row = |path: String, seconds| KernelRow {
            shape: shape.clone(),
            wtype,
            path,
            seconds,
            weight_bytes: bytes,
            macs: rows * cols,
        };
        out.push(row("f32-act".into(), s));
        for path in KernelPath::available() {
            let s = match data {
                TensorData::Q8_0(w) => time_per_call(min, || {
                    quant::matvec_q8_0_on(path, w, black_box(&act), &mut y)
                }),
                TensorData::Q4_0(w) => time_per_call(min, || {
                    quant::matvec_q4_0_on(path, w, black_box(&act), &mut y)
                }),
                _ => unreachable!(),
            };
            out.push(row(path.name().into(), s));
        }
    }
}

/// Unique (rows, cols) of the model's quantized matrices that a decode step multiplies by.
fn model_shapes(g: &IndexedGguf<'_>) -> Vec<(usize, usize)> {
    let mut shapes: Vec<(usize, usize)> = g
        .gguf()
        .file()
        .tensors()
        .filter(|t| matches!(t.dtype, DType::Q8_0 | DType::Q4_0) && t.name != "token_embd.weight")
        .map(|t| (t.rows(), t.cols()))
        .collect();
    shapes.sort();
    shapes.dedup();
    shapes
}

/// Bytes of weights a decode step reads: every tensor, but one row of the embedding.
fn weight_bytes_per_token(g: &IndexedGguf<'_>) -> usize {
    g.gguf()
        .file()
        .tensors()
        .map(|t| {
            if t.name == "token_embd.weight" {
                t.data.len() / t.rows()
            } else {
                t.data.len()
            }
        })
        .sum()
}

struct DecodeRow {
    name: String,
    tok_s: f64,
    state_bytes: f64,
    load: String,
}

fn bench_decode(
    g: &IndexedGguf<'_>,
    act: Activations,
    path: Option<KernelPath>,
    quick: bool,
) -> DecodeRow {
    assert!(quant::set_forced_path(path), "path not available");
    let model = g.model().expect("model");
    let cfg = SessionConfig {
        activations: Some(act),
        ..SessionConfig::default()
    };
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).expect("arena")];
    let vocab = model.config().vocab_size as u32;
    let (warm, timed) = if quick { (32, 100) } else { (WARMUP, TIMED) };
    let mut rates = Vec::new();
    let mut state = 0f64;
    for _ in 0..REPS {
        let mut s = Session::<f32>::new(&model, &mut arena, cfg).expect("session");
        let mut tok = 1u32;
        for _ in 0..warm {
            tok = (tok * 1_103_515_245 + 12_345) % vocab;
            black_box(s.step(tok).expect("step")[0]);
        }
        let mut live = 0usize;
        let t = Instant::now();
        for _ in 0..timed {
            tok = (tok * 1_103_515_245 + 12_345) % vocab;
            black_box(s.step(tok).expect("step")[0]);
            live += s.live_state_bytes();
        }
        rates.push(timed as f64 / t.elapsed().as_secs_f64());
        state = live as f64 / timed as f64;
    }
    quant::set_forced_path(None);
    let name = match (act, path) {
        (Activations::F32, _) => "f32 activations".to_string(),
        (Activations::Q8, Some(p)) => format!("q8 activations, {}", p.name()),
        (Activations::Q8, None) => "q8 activations, best".to_string(),
    };
    DecodeRow {
        name,
        tok_s: median(rates),
        state_bytes: state,
        load: load(),
    }
}

fn main() {
    let o = Opts::parse();
    let min = Duration::from_millis(if o.quick { 5 } else { 60 });
    println!(
        "kernel_bench: {} CPU(s), paths {:?}, load {} at start",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        KernelPath::available()
            .map(KernelPath::name)
            .collect::<Vec<_>>(),
        load()
    );

    println!("\n## memcpy bandwidth\n\n| buffer | GB/s | load |\n|---|---:|---:|");
    let mut big = 0.0;
    for (label, bytes) in [("4 MiB", 4 << 20), ("64 MiB", 64 << 20), ("1 GiB", 1 << 30)] {
        let bytes = if o.quick { bytes.min(64 << 20) } else { bytes };
        let gbs = memcpy_gbs(bytes, min.max(Duration::from_millis(300)));
        big = gbs;
        println!("| {label} | {gbs:.1} | {} |", load());
    }

    let bytes = AlignedBytes::read(&o.model).expect("model file");
    let g = IndexedGguf::parse(bytes.as_bytes()).expect("GGUF model");
    let mut shapes = model_shapes(&g);
    shapes.push((4096, 4096));

    println!(
        "\n## matvec kernels ({})\n\n| shape | weights | path | µs | GB/s | GMAC/s | × portable | × f32-act | load |\n|---|---|---|---:|---:|---:|---:|---:|---:|",
        o.model.display()
    );
    for &(rows, cols) in &shapes {
        let mut rows_out = Vec::new();
        bench_shape(rows, cols, min, &mut rows_out);
        let l = load();
        for r in &rows_out {
            let base = |name: &str| {
                rows_out
                    .iter()
                    .find(|b| b.wtype == r.wtype && b.path == name)
                    .map(|b| b.seconds)
            };
            let ratio = |name: &str| {
                base(name)
                    .filter(|_| r.weight_bytes > 0)
                    .map_or("-".to_string(), |b| format!("{:.2}", b / r.seconds))
            };
            let (gbs, gmac) = if r.weight_bytes > 0 {
                (
                    format!("{:.2}", r.weight_bytes as f64 / r.seconds / 1e9),
                    format!("{:.2}", r.macs as f64 / r.seconds / 1e9),
                )
            } else {
                ("-".into(), "-".into())
            };
            println!(
                "| {} | {} | {} | {:.3} | {gbs} | {gmac} | {} | {} | {l} |",
                r.shape,
                r.wtype,
                r.path,
                r.seconds * 1e6,
                ratio("portable"),
                ratio("f32-act"),
            );
        }
    }

    let wbytes = weight_bytes_per_token(&g);
    let mut rows = vec![bench_decode(&g, Activations::F32, None, o.quick)];
    for path in KernelPath::available() {
        rows.push(bench_decode(&g, Activations::Q8, Some(path), o.quick));
    }
    println!(
        "\n## decode ({}, f32 state, t = {WARMUP}..{})\n\nweights read per token: {wbytes} B; bound = {big:.1} GB/s (1 GiB memcpy) / bytes per token\n\n| activations / path | tok/s | × f32 | × q8 portable | state B/token (2 × live) | bytes/token | bound tok/s | % of bound | load |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        o.model.display(),
        WARMUP + TIMED,
    );
    let f32_rate = rows[0].tok_s;
    let portable_rate = rows.get(1).map_or(f32_rate, |r| r.tok_s);
    for r in &rows {
        let per_token = wbytes as f64 + 2.0 * r.state_bytes;
        let bound = big * 1e9 / per_token;
        println!(
            "| {} | {:.0} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0}% | {} |",
            r.name,
            r.tok_s,
            r.tok_s / f32_rate,
            r.tok_s / portable_rate,
            2.0 * r.state_bytes,
            per_token,
            bound,
            100.0 * r.tok_s / bound,
            r.load
        );
    }
}
