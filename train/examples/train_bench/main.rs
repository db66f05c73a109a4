//! Training-throughput benchmark: the log-linear operator's forward + backward at the paper's
//! kernel shape, and whole-model optimizer steps (forward + backward + AdamW).
//!
//! ```text
//! cargo run -p loglinear-train --release --example train_bench -- [--quick]
//!     [--t 2048,8192,16384] [--tokens 32768] [--heads 48] [--dk 128] [--dv 64] [--levels 15]
//!     [--form m2|gdn|both] [--warmup 2] [--iters 5] [--op-only | --model-only]
//!     [--seq 512] [--batch 32] [--config PATH] [--stages] [--json FILE] [--sub-calls 1]
//!     [--anchors FILE]... [--mqar 32,64]
//! ```
//!
//! 1. Operator (spec §9 shape): `--tokens` tokens per call, split into batch = tokens / T
//!    sequences of T tokens folded into the heads (heads·batch operator heads, q and k per head),
//!    exact training levels (levels = λ columns = 15). Mamba-2 form: `ChunkScan` forward +
//!    `grad::op_m2::M2Backward` (kernels compiled once); GDN form: `ChunkScan` forward +
//!    `grad::op_gdn::GdnBackward`. Each of fwd, bwd and fwd+bwd is submitted alone and timed
//!    by wall clock around submit-and-wait (median of `--iters` after `--warmup`); with
//!    TIMESTAMP_QUERY the fwd+bwd submission also gives GPU times of its two stages, and the
//!    forward's FLOP/s and bytes/s (`ChunkScan::flops`, `ChunkScan::bytes`).
//!    Anchors (other implementations at the same shape) come from `--anchors FILE`, JSON lines
//!    as `../shared/bench/fla_anchor.py` prints them (fla, measured in the same GPU run) or as
//!    `anchors-official-h200.jsonl` beside this file holds them (the official Triton kernels'
//!    fixed figures, whose code is not run here). Each operator row shows the fastest anchor of
//!    the same form and shape for fwd and for fwd+bwd, who it is, and our time over it
//!    (`×`, > 1: slower).
//!    When the forward scan or the backward cannot take all operator heads at once (a buffer
//!    over the adapter's limits), the call is split into n sub-calls over head groups (fewer
//!    sequences folded per sub-call; n the smallest divisor of the op heads that fits, shown as
//!    `sub-calls`; `--sub-calls N` starts the search at N) and the whole sequence of sub-calls
//!    is timed.
//! 2. Models: tokens/s of a full optimizer step (zero grads, forward, backward, AdamW with
//!    clipping at 1.0, lr 1e-3), `--batch` windows of `--seq` tokens of one fixed random batch,
//!    for the shipped LL-GDN (`models/ll-gdn-mcu/config.json`; `--config PATH` replaces it with
//!    any GDN or Mamba-2 config.json), an MCU-sized LL-GDN (hidden 128, 4 layers, 4 heads,
//!    head_dim 16, expand_v 2, MLP ratio 4, vocab 256) and the shipped LL-Mamba-2
//!    (`models/ll-mamba2-mcu/config.json`); `--form` picks the GDN and/or Mamba-2 ones. The
//!    mean loss of the first and last step is printed as a sanity check (it should fall).
//!    `--stages` also times each part of a step with GPU timestamps (`train::graph::Stage`:
//!    embedding, per layer mixer in / operator / mixer out + MLP, head, and their backwards;
//!    zeroing and AdamW) and prints a table per model, the block stages summed over layers:
//!    where a step's time goes, and how many kernel dispatches each part records
//!    (`host_gpu::gpu::recorded_dispatches`; the GPU times need TIMESTAMP_QUERY, the counts
//!    do not). The marks are empty passes between stages, so the stages' sum can exceed the
//!    plain step a little.
//!
//! 3. `--mqar DIMS` (alone): the step of `loglinear mqar` (vocabulary 8192, tied head on the
//!    scored rows, Zoology's init, AdamW) for LL-GDN, GDN, LL-Mamba-2 and Mamba-2 at each
//!    width, on one batch drawn in Zoology's kv proportions (`--seq` and `--batch` default to
//!    256). Per step: wall ms with the steps submitted back to back (as the sweep runs them),
//!    wall ms of one step alone, the CPU ms to record it, GPU ms per phase and dispatches.
//!
//! A row whose setup or run fails (a buffer over the adapter's limits, say) prints the error in
//! the table instead of ending the run. `--quick`: tiny shapes for lavapipe (operator heads 2,
//! dk 32, dv 16, T 128 and 256, 512 tokens per call; models seq 64, batch 2).

mod anchors;
mod model;
mod mqar;
mod op;
mod report;

use anchors::Anchors;
use clap::builder::RangedU64ValueParser;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use loglinear_host_gpu::chunk_scan::Form;
use loglinear_host_gpu::{wgpu, Gpu, GpuError};
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Training operator and model-step benchmark (see the source's docs)")]
struct Args {
    /// Tiny shapes for lavapipe: T 128,256, 512 tokens, heads 2, dk 32, dv 16, 1 warm-up,
    /// 2 iters, seq 64, batch 2 (a flag given explicitly keeps its value).
    #[arg(long, alias = "sizes")]
    quick: bool,
    /// Operator sequence lengths T.
    #[arg(
        long = "t",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "2048,8192,16384"
    )]
    ts: Vec<usize>,
    /// Operator tokens per call (batch = tokens / T).
    #[arg(long, default_value_t = 32768)]
    tokens: usize,
    /// Operator heads.
    #[arg(long, default_value_t = 48)]
    heads: usize,
    /// Operator state (key) dimension.
    #[arg(long, default_value_t = 128)]
    dk: usize,
    /// Operator value dimension.
    #[arg(long, default_value_t = 64)]
    dv: usize,
    /// Operator Fenwick levels.
    #[arg(long, default_value_t = 15)]
    levels: usize,
    /// Forms: m2 (or mamba2), gdn or both.
    #[arg(long, value_enum, default_value_t = FormArg::Both)]
    form: FormArg,
    /// Warm-up calls before timing.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// Timed calls (the median is reported).
    #[arg(long, default_value_t = 5, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    iters: usize,
    /// Only the operator benchmark.
    #[arg(long, conflicts_with = "model_only")]
    op_only: bool,
    /// Only the model-step benchmark.
    #[arg(long, conflicts_with = "mqar")]
    model_only: bool,
    /// Only the MQAR step benchmark, at these widths (the four architectures of
    /// `loglinear mqar` each; `--seq` and `--batch` default to the protocol's 256 and 256).
    #[arg(
        long,
        value_name = "DIMS",
        value_delimiter = ',',
        conflicts_with = "op_only"
    )]
    mqar: Vec<usize>,
    /// Model step: tokens per window.
    #[arg(long, default_value_t = 512)]
    seq: usize,
    /// Model step: windows per batch.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// A config.json to bench instead of the shipped LL-GDN.
    #[arg(long, value_name = "PATH")]
    config: Option<String>,
    /// Writes the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Time every stage of a model step, not just forward / backward / AdamW.
    #[arg(long)]
    stages: bool,
    /// Fewest sub-calls per operator call (more are used where the limits need them).
    #[arg(long = "sub-calls", value_name = "N", default_value_t = 1, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    min_sub_calls: usize,
    /// JSON lines of anchor timings (fla_anchor.py's output, or the official fixed figures);
    /// may be given more than once.
    #[arg(long = "anchors", value_name = "FILE")]
    anchors: Vec<std::path::PathBuf>,
}

/// `--form`.
#[derive(Clone, Copy, ValueEnum)]
enum FormArg {
    #[value(alias = "mamba2")]
    M2,
    Gdn,
    Both,
}

impl Args {
    /// The forms `--form` picks.
    fn forms(&self) -> Vec<Form> {
        match self.form {
            FormArg::M2 => vec![Form::Mamba2],
            FormArg::Gdn => vec![Form::Gdn],
            FormArg::Both => vec![Form::Mamba2, Form::Gdn],
        }
    }
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
            ("tokens", &mut a.tokens, 512),
            ("heads", &mut a.heads, 2),
            ("dk", &mut a.dk, 32),
            ("dv", &mut a.dv, 16),
            ("warmup", &mut a.warmup, 1),
            ("iters", &mut a.iters, 2),
            ("seq", &mut a.seq, 64),
            ("batch", &mut a.batch, 2),
        ] {
            if at_default(id) {
                *value = small;
            }
        }
    }
    if !a.mqar.is_empty() {
        let at_default = |id: &str| m.value_source(id) == Some(ValueSource::DefaultValue);
        for (id, value) in [("seq", &mut a.seq), ("batch", &mut a.batch)] {
            if at_default(id) {
                *value = 256;
            }
        }
    }
    a
}

/// Runs `f` inside validation and out-of-memory error scopes, so that a wgpu error becomes this
/// row's error instead of the process's panic.
fn scoped<T>(gpu: &Gpu, f: impl FnOnce() -> Result<T, GpuError>) -> Result<T, String> {
    let oom = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = gpu.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let r = f();
    let v = pollster::block_on(validation.pop());
    let o = pollster::block_on(oom.pop());
    match (v.or(o), r) {
        (Some(e), _) => Err(e.to_string()),
        (None, r) => r.map_err(|e| e.to_string()),
    }
}

/// Wall milliseconds of one submit-and-wait of what `record` records.
fn wall_ms(gpu: &Gpu, record: impl Fn(&mut wgpu::CommandEncoder)) -> Result<f64, GpuError> {
    let mut enc = gpu.encoder("train bench");
    record(&mut enc);
    let start = Instant::now();
    gpu.submit_and_wait(enc)?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}

fn main() {
    let a = parse_args();
    // Anchor files are read before the GPU work, so that a bad path fails at once.
    let anchors = Anchors::read(&a.anchors).unwrap_or_else(|e| fail(e));
    let gpu = Gpu::new().unwrap_or_else(|e| fail(e));
    println!("adapter: {}", gpu.describe_for_training());
    if !a.anchors.is_empty() {
        println!(
            "anchors: {} timings from {} file(s)",
            anchors.len(),
            a.anchors.len()
        );
    }
    println!();
    let adapter = gpu.info.name.clone();
    let mqar_only = !a.mqar.is_empty();
    let ops = if !a.model_only && !mqar_only {
        op::run_op(&gpu, &a, &adapter, &anchors)
    } else {
        vec![]
    };
    let models = if !a.op_only && !mqar_only {
        model::run_models(&gpu, &a, &adapter)
    } else {
        vec![]
    };
    let mqar = mqar::run_mqar(&gpu, &a, &adapter);
    if let Some(path) = &a.json {
        let report = report::json_report(&gpu, &a, &ops, &models, &mqar);
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(path, text) {
            fail(format!("{path}: {e}"));
        }
        println!("wrote {path}");
    }
}
