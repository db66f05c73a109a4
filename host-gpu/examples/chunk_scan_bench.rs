//! Benchmark of the chunk-scan prefill kernels at the paper's kernel shape (spec §9: 48 heads,
//! head dim dv = 64, state dk = 128; Mamba-2 form with q/k shared by all heads, GDN form with q/k
//! per head), with the CPU decoder (runtime `FenwickState`, one thread) for comparison.
//!
//! ```text
//! cargo run -p loglinear-host-gpu --release --example chunk_scan_bench -- [--quick]
//!     [--t 2048,8192,16384] [--heads 48] [--dk 128] [--dv 64] [--levels 15]
//!     [--warmup 2] [--runs 5] [--cpu-t 1024] [--forms mamba2,gdn] [--breakdown]
//!     [--strategy walk,precomputed]
//! ```
//! `--strategy`: the inter-chunk strategies to run (`ScanStrategy`; both by default). The table
//! names the one that ran (a fallback to the walk shows as `walk (fallback)`) and, for every
//! strategy after the first, the largest difference of `o` and of the final state from the
//! first one's, relative to the largest magnitude (a check at sizes the tests do not reach).
//! `--quick`: T = 256 and 128, 4 heads, 2 runs, CPU T = 128 (for lavapipe).
//! GPU time comes from timestamp queries when the adapter has TIMESTAMP_QUERY, else from wall
//! time around submit-and-wait. GFLOP/s counts the FLOPs the kernels do (`ChunkScan::flops`),
//! GB/s an estimate of the memory traffic (`ChunkScan::bytes`), both summed over the dispatches.
//! `--breakdown` also prints, on stderr, each dispatch's time with the GFLOP/s and GB/s it
//! achieved by its own count (`ChunkScan::dispatch_costs`; needs timestamps).

use clap::builder::RangedU64ValueParser;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use loglinear_host_gpu::chunk_scan::{
    ChunkScan, Form, ScanBuffers, ScanInputs, ScanKernels, ScanShape, ScanStrategy,
};
use loglinear_host_gpu::timestamps::{median, Timestamps};
use loglinear_host_gpu::{Gpu, GpuError};
use loglinear_runtime::rng::SplitMix64;
use loglinear_runtime::{FenwickState, LevelPolicy};
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Chunk-scan prefill kernels against the CPU decoder (see the source's docs)")]
struct Args {
    /// Small shapes for lavapipe: T 128,256, 4 heads, 1 warm-up, 2 runs, CPU T 128 (a flag
    /// given explicitly keeps its value).
    #[arg(long)]
    quick: bool,
    /// Sequence lengths T.
    #[arg(
        long = "t",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "2048,8192,16384"
    )]
    ts: Vec<usize>,
    /// Value heads.
    #[arg(long, default_value_t = 48)]
    heads: usize,
    /// State (key) dimension.
    #[arg(long, default_value_t = 128)]
    dk: usize,
    /// Value dimension.
    #[arg(long, default_value_t = 64)]
    dv: usize,
    /// Fenwick levels.
    #[arg(long, default_value_t = 15)]
    levels: usize,
    /// Warm-up runs before timing.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Timed runs (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    runs: usize,
    /// Tokens the CPU decoder steps.
    #[arg(long, default_value_t = 1024)]
    cpu_t: usize,
    /// Forms to run: mamba2 (or m2), gdn.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "mamba2,gdn"
    )]
    forms: Vec<Form>,
    /// Also print the time of each dispatch (needs GPU timestamps).
    #[arg(long)]
    breakdown: bool,
    /// Inter-chunk strategies to run: walk, precomputed.
    #[arg(long = "strategy", value_name = "LIST", value_delimiter = ',', value_parser = parse_strategy, default_value = "walk,precomputed")]
    strategies: Vec<ScanStrategy>,
}

fn parse_strategy(s: &str) -> Result<ScanStrategy, String> {
    ScanStrategy::parse(s).ok_or(format!("unknown strategy {s} (walk, precomputed)"))
}

/// The flags; with `--quick`, the ones left at their defaults take its smaller values.
fn parse_args() -> Args {
    let m = Args::command().get_matches();
    let mut a = Args::from_arg_matches(&m).unwrap_or_else(|e| e.exit());
    if a.quick {
        let at_default = |id: &str| m.value_source(id) == Some(ValueSource::DefaultValue);
        if at_default("ts") {
            a.ts = vec![128, 256];
        }
        for (id, value, small) in [
            ("heads", &mut a.heads, 4),
            ("runs", &mut a.runs, 2),
            ("warmup", &mut a.warmup, 1),
            ("cpu_t", &mut a.cpu_t, 128),
        ] {
            if at_default(id) {
                *value = small;
            }
        }
    }
    a
}

/// Deterministic inputs shaped like the layer's (GDN: k l2-normalised, q scaled).
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    lam: Vec<f32>,
}

fn inputs(s: &ScanShape) -> Inputs {
    let mut rng = SplitMix64::new(0x1234_5678_9abc_def1);
    let mut uni = move || rng.unit_f32();
    let nqk = s.t * s.qk_heads * s.dk;
    let mut q: Vec<f32> = (0..nqk).map(|_| uni() - 0.5).collect();
    let mut k: Vec<f32> = (0..nqk).map(|_| uni() - 0.5).collect();
    for row in k.chunks_mut(s.dk) {
        let n = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        row.iter_mut().for_each(|x| *x /= n);
    }
    q.iter_mut().for_each(|x| *x /= (s.dk as f32).sqrt());
    Inputs {
        q,
        k,
        v: (0..s.t * s.heads * s.dv).map(|_| uni() - 0.5).collect(),
        g: (0..s.t * s.heads).map(|_| -0.05 * uni()).collect(),
        beta: (0..s.t * s.heads).map(|_| uni()).collect(),
        lam: (0..s.t * s.heads * s.lambda_cols)
            .map(|_| 0.5 + uni())
            .collect(),
    }
}

/// One timed run in milliseconds.
fn time_once(gpu: &Gpu, scan: &ChunkScan, timer: Option<&Timestamps>) -> Result<f64, GpuError> {
    let mut enc = gpu.encoder("bench");
    if let Some(t) = timer {
        t.mark(&mut enc, 0);
    }
    scan.encode(&mut enc);
    if let Some(t) = timer {
        t.mark(&mut enc, 1);
        t.resolve(&mut enc);
    }
    let start = Instant::now();
    gpu.submit_and_wait(enc)?;
    let wall = start.elapsed().as_secs_f64() * 1e3;
    match timer {
        Some(t) => Ok(t.intervals_ms(gpu)?[0]),
        None => Ok(wall),
    }
}

struct Row {
    form: Form,
    t: usize,
    /// The strategy asked for and the one that ran.
    asked: ScanStrategy,
    ran: ScanStrategy,
    ms: f64,
    flops: f64,
    bytes: f64,
    /// Outputs of the last run, for the comparison between strategies.
    o: Vec<f32>,
    state: Vec<f32>,
}

fn bench_gpu(
    gpu: &Gpu,
    a: &Args,
    shape: ScanShape,
    strategy: ScanStrategy,
    x: &Inputs,
    kernels: &ScanKernels,
    timer: Option<&Timestamps>,
) -> Result<Row, GpuError> {
    let (form, t) = (shape.form, shape.t);
    let inputs = ScanInputs {
        q: &x.q,
        k: &x.k,
        v: &x.v,
        g: &x.g,
        beta: &x.beta,
        lam: &x.lam,
    };
    let bufs = ScanBuffers::new(gpu, &shape, &inputs)?;
    let scan = ChunkScan::with_strategy(gpu, kernels, shape, bufs.io(), strategy)?;
    for _ in 0..a.warmup {
        time_once(gpu, &scan, timer)?;
    }
    let times: Vec<f64> = (0..a.runs)
        .map(|_| time_once(gpu, &scan, timer))
        .collect::<Result<_, _>>()?;
    if a.breakdown && timer.is_some() {
        print_breakdown(gpu, &scan, form, t)?;
    }
    let (o, state) = bufs.read(gpu)?;
    Ok(Row {
        form,
        t,
        asked: strategy,
        ran: scan.strategy(),
        ms: median(times),
        flops: scan.flops(),
        bytes: scan.bytes(),
        o,
        state,
    })
}

/// Each dispatch of one timed run, as a table on stderr: its time, and the FLOP/s and bandwidth
/// it achieved by its own cost (`ChunkScan::dispatch_costs`).
fn print_breakdown(gpu: &Gpu, scan: &ChunkScan, form: Form, t: usize) -> Result<(), GpuError> {
    let costs = scan.dispatch_costs();
    let Some(timer) = Timestamps::new(gpu, 2 * costs.len() as u32) else {
        return Ok(());
    };
    let mut enc = gpu.encoder("breakdown");
    scan.encode_timed(&mut enc, timer.query_set());
    timer.resolve(&mut enc);
    gpu.submit_and_wait(enc)?;
    // Pass i writes timestamps 2i (start) and 2i + 1 (end).
    let between = timer.intervals_ms(gpu)?;
    eprintln!(
        "\n{} {} T={t}, each dispatch of one run:\n",
        form.name(),
        scan.strategy().name()
    );
    eprintln!("| dispatch | ms | GFLOP | GFLOP/s | MB | GB/s |");
    eprintln!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (i, (label, cost)) in costs.iter().enumerate() {
        let ms = between[2 * i];
        let per_second = |x: f64| {
            if x > 0.0 && ms > 0.0 {
                format!("{:.1}", x / 1e9 / (ms / 1e3))
            } else {
                "–".to_string()
            }
        };
        eprintln!(
            "| {label} | {ms:.3} | {:.3} | {} | {:.1} | {} |",
            cost.flops / 1e9,
            per_second(cost.flops),
            cost.bytes / 1e6,
            per_second(cost.bytes)
        );
    }
    eprintln!();
    Ok(())
}

fn shape(a: &Args, form: Form, t: usize) -> ScanShape {
    ScanShape {
        form,
        t,
        heads: a.heads,
        qk_heads: if form == Form::Mamba2 { 1 } else { a.heads },
        dk: a.dk,
        dv: a.dv,
        lambda_cols: 15.max(a.levels),
        levels: a.levels,
    }
}

/// Tokens per second of the runtime decoder on one thread (the same operator, token by token).
fn bench_cpu(a: &Args, form: Form) -> f64 {
    let s = shape(a, form, a.cpu_t);
    let x = inputs(&s);
    let policy = LevelPolicy::new(s.levels).expect("levels");
    let mut data = vec![0f32; s.levels * s.heads * s.dk * s.dv];
    let mut st = FenwickState::new(&mut data, policy, s.heads, s.dk, s.dv).expect("state");
    let mut out = vec![0f32; s.dv];
    let mut u = vec![0f32; s.dv];
    let start = Instant::now();
    for t in 0..s.t {
        st.merge(t as u64);
        for h in 0..s.heads {
            let th = t * s.heads + h;
            let qk = (t * s.qk_heads + if s.qk_heads == 1 { 0 } else { h }) * s.dk;
            let (q, k) = (&x.q[qk..][..s.dk], &x.k[qk..][..s.dk]);
            let alpha = x.g[th].exp();
            let beta = if form == Form::Gdn { x.beta[th] } else { 1.0 };
            match form {
                Form::Gdn => st.transition_delta(t as u64, h, alpha, beta, k, &mut u),
                Form::Mamba2 => st.transition_decay(t as u64, h, alpha),
            }
            st.insert(h, k, &x.v[th * s.dv..][..s.dv], beta);
            let lam = &x.lam[th * s.lambda_cols..][..s.lambda_cols];
            st.read(t as u64, h, q, |l| lam[l as usize], &mut out);
        }
    }
    std::hint::black_box(&out);
    s.t as f64 / start.elapsed().as_secs_f64()
}

/// max |a − b| / max |b| (0 for an all-zero b equal to a).
fn rel_diff(a: &[f32], b: &[f32]) -> f64 {
    let diff = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max);
    let scale = b.iter().map(|y| f64::from(y.abs())).fold(0.0, f64::max);
    if diff == 0.0 {
        0.0
    } else {
        diff / scale
    }
}

fn main() {
    let a = parse_args();
    let gpu = match Gpu::new() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let timer = Timestamps::new(&gpu, 2);
    let adapter = gpu.info.name.clone();
    println!(
        "adapter: {} ; timing: {} ; heads {} dk {} dv {} levels {} ; median of {} runs after {} warm-up",
        gpu.describe(),
        if timer.is_some() { "GPU timestamps" } else { "wall clock (submit and wait)" },
        a.heads,
        a.dk,
        a.dv,
        a.levels,
        a.runs,
        a.warmup
    );
    println!();
    println!(
        "| adapter | form | strategy | T | ms | tokens/s | GFLOP/s | GB/s | o diff | state diff |"
    );
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &form in &a.forms {
        let kernels = match ScanKernels::new(&gpu, form) {
            Ok(k) => k,
            Err(e) => {
                println!("| {adapter} | {} | | | error: {e} | | | | | |", form.name());
                continue;
            }
        };
        for &t in &a.ts {
            let s = shape(&a, form, t);
            let x = inputs(&s);
            let mut first: Option<Row> = None;
            for &strategy in &a.strategies {
                match bench_gpu(&gpu, &a, s, strategy, &x, &kernels, timer.as_ref()) {
                    Ok(r) => {
                        let (o_diff, s_diff) = match &first {
                            Some(f) => (
                                format!("{:.2e}", rel_diff(&r.o, &f.o)),
                                format!("{:.2e}", rel_diff(&r.state, &f.state)),
                            ),
                            None => (String::new(), String::new()),
                        };
                        let name = if r.ran == r.asked {
                            r.ran.name().to_string()
                        } else {
                            format!("{} (fallback)", r.ran.name())
                        };
                        println!(
                            "| {adapter} | {} | {name} | {} | {:.3} | {:.0} | {:.1} | {:.2} | {o_diff} | {s_diff} |",
                            r.form.name(),
                            r.t,
                            r.ms,
                            r.t as f64 / (r.ms / 1e3),
                            r.flops / (r.ms / 1e3) / 1e9,
                            r.bytes / (r.ms / 1e3) / 1e9
                        );
                        if first.is_none() {
                            first = Some(r);
                        }
                    }
                    Err(e) => println!(
                        "| {adapter} | {} | {} | {t} | error: {e} | | | | | |",
                        form.name(),
                        strategy.name()
                    ),
                }
            }
        }
    }
    println!();
    println!("CPU decoder (runtime FenwickState, one thread, token by token, same shape):");
    println!();
    println!("| form | T | tokens/s |");
    println!("| --- | ---: | ---: |");
    for &form in &a.forms {
        if a.cpu_t > 0 {
            println!(
                "| {} | {} | {:.1} |",
                form.name(),
                a.cpu_t,
                bench_cpu(&a, form)
            );
        }
    }
}
