//! Projection matmul throughput, Y = X·Wᵀ over T tokens, fp32 kernel vs cooperative matrices
//! (tensor cores) where the adapter has them, at the matrix shapes of a 1536-wide model.
//!
//! ```text
//! cargo run -p loglinear-host-gpu --release --example matmul_bench -- [--quick]
//!     [--t 2048,8192,16384] [--reps 10] [--types f32,f16,q8_0]
//! ```
//! `--quick`: T = 128, one rep (for lavapipe). Time is wall time around one submission of
//! `reps` dispatches, after a warm-up; TFLOP/s counts 2·T·N·K per dispatch. Each line also
//! gives the coop result's rel_max against the fp32 kernel's.

use clap::builder::RangedU64ValueParser;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use loglinear_host_gpu::ops::{encode_steps, Kernels, MatmulPath};
use loglinear_host_gpu::weights::GpuMatrix;
use loglinear_host_gpu::{Gpu, GpuError, Rows};
use loglinear_runtime::quant::{BlockQ8_0, QK};
use loglinear_runtime::DType;
use std::time::Instant;

/// (what, N = output rows of W, K = input columns) for a 1536-wide model.
const SHAPES: [(&str, usize, usize); 3] = [
    ("1536->4096 (MLP up/gate)", 4096, 1536),
    ("4096->1536 (MLP down)", 1536, 4096),
    ("1536->1536 (q/k/v/o)", 1536, 1536),
];

/// A weight type by its ggml name ("f32", "q8_0", ...), any case, as `--types` lists them.
fn parse_dtype(name: &str) -> Result<DType, String> {
    // ggml's type ids are below 64; the runtime's DType says which of them it stores.
    (0..64)
        .filter_map(DType::from_ggml_id)
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| format!("unknown tensor type `{name}`"))
}

struct Lcg(u32);

impl Lcg {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(1664525).wrapping_add(1013904223);
        (self.0 >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
    }
}

fn weight_bytes(dtype: DType, w: &[f32]) -> Vec<u8> {
    match dtype {
        DType::F16 => {
            let h: Vec<half::f16> = w.iter().map(|&v| half::f16::from_f32(v)).collect();
            bytemuck::cast_slice(&h).to_vec()
        }
        DType::Q8_0 => {
            let blocks: Vec<BlockQ8_0> = w
                .chunks_exact(QK)
                .map(|c| BlockQ8_0::quantize(c.try_into().unwrap()))
                .collect();
            bytemuck::cast_slice(&blocks).to_vec()
        }
        _ => bytemuck::cast_slice(w).to_vec(),
    }
}

fn rel_max(a: &[f32], b: &[f32]) -> f64 {
    let num = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - *y as f64).abs())
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| (*y as f64).abs()).fold(0.0, f64::max);
    num / den.max(f64::MIN_POSITIVE)
}

#[derive(Parser)]
#[command(about = "Projection matmul throughput: fp32 kernel against cooperative matrices")]
struct Args {
    /// T = 128 and one rep, for lavapipe (a flag given explicitly keeps its value).
    #[arg(long)]
    quick: bool,
    /// Token counts T.
    #[arg(
        long = "t",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "2048,8192,16384"
    )]
    ts: Vec<usize>,
    /// Dispatches per timed submission.
    #[arg(long, default_value_t = 10, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    reps: usize,
    /// Weight types: f32, f16, q8_0, q4_0.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_dtype, default_value = "f32,f16,q8_0")]
    types: Vec<DType>,
}

/// The flags; with `--quick`, the ones left at their defaults take its smaller values.
fn parse_args() -> Args {
    let m = Args::command().get_matches();
    let mut a = Args::from_arg_matches(&m).unwrap_or_else(|e| e.exit());
    if a.quick {
        let at_default = |id: &str| m.value_source(id) == Some(ValueSource::DefaultValue);
        if at_default("ts") {
            a.ts = vec![128];
        }
        if at_default("reps") {
            a.reps = 1;
        }
    }
    a
}

fn main() -> Result<(), GpuError> {
    let a = parse_args();
    let gpu = Gpu::new()?;
    println!("GPU: {}", gpu.describe());
    println!("adapter cooperative-matrix configurations: {:?}", gpu.coop);
    let fp32 = Kernels::new_with(&gpu, false)?;
    let coop = Kernels::new_with(&gpu, true)?;
    let mut paths = vec![("fp32", &fp32)];
    match coop.matmul_path() {
        MatmulPath::Coop(cfg) => {
            println!("coop kernel: {}", cfg.describe());
            paths.push(("coop", &coop));
        }
        MatmulPath::Fp32 => println!("coop kernel not used: {:?}", coop.coop_note()),
    }
    let mut rng = Lcg(5);
    for &(what, n, k) in &SHAPES {
        let w: Vec<f32> = (0..n * k).map(|_| rng.next() * 0.05).collect();
        for &dtype in &a.types {
            let matrix = GpuMatrix {
                rows: n,
                cols: k,
                dtype,
                buf: gpu.storage_from("w", &weight_bytes(dtype, &w))?,
            };
            for &t in &a.ts {
                let x: Vec<f32> = (0..t * k).map(|_| rng.next()).collect();
                let xb = gpu.storage_from("x", &x)?;
                let mut fp32_y: Option<Vec<f32>> = None;
                for &(name, kernels) in &paths {
                    let yb = gpu.storage_zeroed("y", (t * n * 4) as u64)?;
                    let (x, y) = (Rows::new(&xb, 0, k), Rows::new(&yb, 0, n));
                    let step = kernels.matmul(&gpu, &matrix, x, y, t)?;
                    let mut enc = gpu.encoder("warm-up");
                    step.encode(&mut enc);
                    gpu.submit_and_wait(enc)?;
                    let mut enc = gpu.encoder("timed");
                    encode_steps(&mut enc, "timed", std::iter::repeat_n(&step, a.reps));
                    let start = Instant::now();
                    gpu.submit_and_wait(enc)?;
                    let secs = start.elapsed().as_secs_f64() / a.reps as f64;
                    let tflops = 2.0 * (t * n * k) as f64 / secs / 1e12;
                    let y = gpu.read_f32(&yb)?;
                    let err = match &fp32_y {
                        Some(base) => format!(", rel_max vs fp32 {:.2e}", rel_max(&y, base)),
                        None => String::new(),
                    };
                    if fp32_y.is_none() {
                        fp32_y = Some(y);
                    }
                    println!(
                        "{what} {} T={t} {name}: {:.3} ms, {tflops:.3} TFLOP/s{err}",
                        dtype.name(),
                        secs * 1e3
                    );
                }
            }
        }
    }
    Ok(())
}
