//! Per-stage wall times of the operator backward of either form (`grad::op_gdn::GdnBackward`,
//! `grad::op_m2::M2Backward`), each dispatch submitted alone and waited for (median of `--iters`
//! runs after one warm-up).
//!
//! ```text
//! cargo run -p loglinear-host-gpu --release --example bwd_profile -- \
//!     [--form gdn|mamba2] [--t 2048] [--heads 2] [--dk 128] [--dv 64] [--iters 3]
//! ```
//!
//! Inputs are random (fixed seed); λ columns = levels = bitlen(T − 1) + 1 (exact training
//! levels). On lavapipe the figures are CPU times: only a proxy for a real GPU's stage costs.

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use loglinear_host_gpu::chunk_scan::{Form, ScanInputs, ScanShape};
use loglinear_host_gpu::grad::op_gdn::GdnBackward;
use loglinear_host_gpu::grad::op_m2::M2Backward;
use loglinear_host_gpu::grad::HostBuffers;
use loglinear_host_gpu::{Gpu, GpuError};
use loglinear_tests::random::{uniform_f32, SplitMix64};

#[derive(Parser)]
#[command(about = "Per-stage wall times of the operator backward")]
struct Args {
    /// Operator form: gdn or mamba2 (m2).
    #[arg(long, default_value = "gdn")]
    form: Form,
    /// Sequence length T.
    #[arg(long = "t", default_value_t = 2048)]
    t: usize,
    /// Heads.
    #[arg(long, default_value_t = 2)]
    heads: usize,
    /// State (key) dimension.
    #[arg(long, default_value_t = 128)]
    dk: usize,
    /// Value dimension.
    #[arg(long, default_value_t = 64)]
    dv: usize,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    iters: usize,
}

/// Stage times of `iters` runs of `profile` after one warm-up.
fn timed_runs(
    iters: usize,
    profile: impl Fn() -> Result<StageTimes, GpuError>,
) -> Result<Vec<StageTimes>, GpuError> {
    profile()?;
    (0..iters).map(|_| profile()).collect()
}

/// Wall ms per stage label, in dispatch order.
type StageTimes = Vec<(&'static str, f64)>;

/// Deterministic values in [-1, 1).
fn random(n: usize, seed: u64) -> Vec<f32> {
    uniform_f32(&mut SplitMix64::new(seed), n, 1.0)
}

fn main() -> Result<(), GpuError> {
    let Args {
        form,
        t,
        heads: h,
        dk,
        dv,
        iters,
    } = Args::parse();
    let levels = (usize::BITS - (t.max(2) - 1).leading_zeros()) as usize + 1;
    let shape = ScanShape {
        form,
        t,
        heads: h,
        qk_heads: h,
        dk,
        dv,
        lambda_cols: levels,
        levels,
    };
    let gpu = Gpu::new()?;
    println!("{}", gpu.describe());
    // q, k unit rows (as the operator sees them), β in (0, 1), g < 0, λ in (0, 1).
    let unit = |mut x: Vec<f32>| {
        for row in x.chunks_mut(dk) {
            let n = row.iter().map(|a| a * a).sum::<f32>().sqrt().max(1e-6);
            row.iter_mut().for_each(|a| *a /= n);
        }
        x
    };
    let q = unit(random(t * h * dk, 1));
    let k = unit(random(t * h * dk, 2));
    let v = random(t * h * dv, 3);
    let g: Vec<f32> = random(t * h, 4).iter().map(|a| -0.05 * (a + 1.5)).collect();
    let beta: Vec<f32> = random(t * h, 5).iter().map(|a| 0.5 + 0.4 * a).collect();
    let lam: Vec<f32> = random(t * h * levels, 6)
        .iter()
        .map(|a| 0.5 + 0.4 * a)
        .collect();
    let d_o = random(t * h * dv, 7);
    let inputs = ScanInputs {
        q: &q,
        k: &k,
        v: &v,
        g: &g,
        beta: &beta,
        lam: &lam,
    };
    let bufs = HostBuffers::new(&gpu, &shape, &inputs, &d_o)?;
    let (runs, groups) = match form {
        Form::Gdn => {
            let bwd = GdnBackward::new(&gpu, shape, bufs.io())?;
            (timed_runs(iters, || bwd.profile_steps(&gpu))?, bwd.groups())
        }
        Form::Mamba2 => {
            let bwd = M2Backward::new(&gpu, shape, bufs.io())?;
            (timed_runs(iters, || bwd.profile_steps(&gpu))?, 1)
        }
    };
    println!(
        "T={t} heads={h} dk={dk} dv={dv} levels={levels} groups={groups} ({iters} runs, median ms)"
    );
    let mut total = 0.0;
    for (i, (label, _)) in runs[0].iter().enumerate() {
        let mut ms: Vec<f64> = runs.iter().map(|r| r[i].1).collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        let med = ms[ms.len() / 2];
        total += med;
        println!("{label:>16} {med:10.1}");
    }
    println!("{:>16} {total:10.1}", "total");
    // Checksums of the gradients (Σ|x| of each), to see that a change, or another adapter,
    // kept the results.
    let mut sum = 0.0f64;
    let mut each = String::new();
    let grads = bufs.read(&gpu)?;
    for (name, x) in [
        ("dq", &grads.dq),
        ("dk", &grads.dk),
        ("dv", &grads.dv),
        ("dg", &grads.dg),
        ("dbeta", &grads.dbeta),
        ("dlam", &grads.dlam),
    ] {
        if x.is_empty() {
            continue; // dbeta: Mamba-2 has no β
        }
        let s: f64 = x.iter().map(|&a| f64::from(a).abs()).sum();
        each += &format!(" {name} {s:.6e}");
        sum += s;
    }
    println!("checksum {sum:.6e} ({})", each.trim());
    Ok(())
}
