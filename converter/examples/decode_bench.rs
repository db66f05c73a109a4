//! Host decode benchmark: tokens/s on one core with an f32 and an f16 state, and the state
//! bytes (allocated and live) at t = 1024, 16384 and 1,048,576.
//!
//! ```text
//! cargo run --release -p loglinear-converter --example decode_bench [-- [--step-1m] MODEL_DIR...]
//! ```
//!
//! With no folder it runs the three shipped models in `models/`. The text fed is the bytes of
//! `models/ll-gdn-mcu/TRAINING.md`, repeated as needed (the state sizes do not depend on it).
//!
//! * Throughput: a fresh session per repetition, [`WARMUP`] tokens of warm-up, then [`TIMED`]
//!   tokens timed with `Instant`; the median of [`REPS`] repetitions is reported (min and max
//!   alongside). Single thread: the decoder never spawns.
//! * State bytes: an f32 session is stepped to t = 16384, reading `live_state_bytes()` and
//!   `allocated_state_bytes()` at t = 1024 and 16384 (and checking them against the formula
//!   below). t = 1,048,576 is **computed, not stepped**, unless `--step-1m` is given: live bytes
//!   = layers × (`LevelPolicy::live_count(t − 1)` × level bytes + conv bytes), the same formula
//!   `Session::live_state_bytes` uses. The time that stepping would take is estimated from the
//!   measured long-context rate. f16 bytes are computed the same way (conv states stay f32).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use half::f16;
use loglinear_converter::Checkpoint;
use loglinear_runtime::{LevelPolicy, Model, Session, SessionConfig, StateElem};

/// Tokens fed before timing.
const WARMUP: usize = 256;
/// Tokens timed per repetition.
const TIMED: usize = 2000;
/// Repetitions (median reported).
const REPS: usize = 3;
/// Where the state bytes are reported.
const POINTS: [u64; 3] = [1 << 10, 1 << 14, 1 << 20];
/// Positions up to here are stepped; beyond it computed (unless `--step-1m`).
const STEP_LIMIT: u64 = 1 << 14;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text() -> Vec<u8> {
    let path = repo_root().join("models/ll-gdn-mcu/TRAINING.md");
    match std::fs::read(&path) {
        Ok(t) if !t.is_empty() => t,
        _ => {
            eprintln!(
                "note: {} not readable, feeding a byte ramp instead",
                path.display()
            );
            (0..=255u8).collect()
        }
    }
}

/// Feeds `n` tokens of `text` (cyclically, starting at `*pos`) and returns the time taken.
fn feed<E: StateElem>(s: &mut Session<'_, E>, text: &[u8], pos: &mut usize, n: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        let tok = u32::from(text[*pos % text.len()]);
        *pos += 1;
        let logits = s.step(tok).expect("step");
        black_box(logits[0]);
    }
    start.elapsed()
}

/// tokens/s of each repetition, sorted.
fn throughput<E: StateElem>(model: &Model<'_>, text: &[u8]) -> Vec<f64> {
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<E>::arena_bytes(model, &cfg).expect("arena size")];
    let mut rates = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let mut s = Session::<E>::new(model, &mut arena, cfg).expect("session");
        let mut pos = 0;
        feed(&mut s, text, &mut pos, WARMUP);
        let d = feed(&mut s, text, &mut pos, TIMED);
        rates.push(TIMED as f64 / d.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    rates
}

/// Bytes of one level of one layer (all heads) with elements of `elem` bytes.
fn level_bytes(model: &Model<'_>, elem: usize) -> usize {
    let c = model.config();
    c.num_heads * c.head_k_dim * c.head_v_dim * elem
}

fn conv_bytes(model: &Model<'_>) -> usize {
    let c = model.config();
    c.conv_channels() * c.conv_kernel * 4
}

/// Live state bytes after `t` tokens (levels live at the last consumed position t − 1).
fn computed_live(model: &Model<'_>, policy: LevelPolicy, elem: usize, t: u64) -> usize {
    let live = if t == 0 { 0 } else { policy.live_count(t - 1) };
    model.config().num_layers * (live * level_bytes(model, elem) + conv_bytes(model))
}

fn computed_allocated(model: &Model<'_>, policy: LevelPolicy, elem: usize) -> usize {
    model.config().num_layers * (policy.levels() * level_bytes(model, elem) + conv_bytes(model))
}

struct Point {
    t: u64,
    stepped: bool,
    live_f32: usize,
    alloc_f32: usize,
    live_f16: usize,
    alloc_f16: usize,
}

struct Report {
    name: String,
    arch: String,
    levels: usize,
    f32_rates: Vec<f64>,
    f16_rates: Vec<f64>,
    long_rate: f64,
    long_tokens: u64,
    points: Vec<Point>,
}

fn bench(dir: &Path, text: &[u8], step_1m: bool) -> Report {
    let ckpt = Checkpoint::load(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let model = ckpt.model().expect("model");
    let name = dir
        .file_name()
        .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
    eprintln!("{name}: throughput ...");
    let f32_rates = throughput::<f32>(&model, text);
    let f16_rates = throughput::<f16>(&model, text);

    // State bytes: step one f32 session up to the stepping limit.
    let limit = if step_1m { POINTS[2] } else { STEP_LIMIT };
    eprintln!("{name}: stepping to t = {limit} ...");
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).expect("arena size")];
    let mut s = Session::<f32>::new(&model, &mut arena, cfg).expect("session");
    let policy = s.policy();
    let mut pos = 0;
    let mut elapsed = Duration::ZERO;
    let mut points = Vec::new();
    for &t in &POINTS {
        let stepped = t <= limit;
        if stepped {
            let n = (t - s.t()) as usize;
            elapsed += feed(&mut s, text, &mut pos, n);
            assert_eq!(s.t(), t);
            assert_eq!(s.live_state_bytes(), computed_live(&model, policy, 4, t));
            assert_eq!(
                s.allocated_state_bytes(),
                computed_allocated(&model, policy, 4)
            );
        }
        points.push(Point {
            t,
            stepped,
            live_f32: if stepped {
                s.live_state_bytes()
            } else {
                computed_live(&model, policy, 4, t)
            },
            alloc_f32: s.allocated_state_bytes(),
            live_f16: computed_live(&model, policy, 2, t),
            alloc_f16: computed_allocated(&model, policy, 2),
        });
    }
    let c = model.config();
    Report {
        name,
        arch: format!("{:?}", c.arch),
        levels: policy.levels(),
        f32_rates,
        f16_rates,
        long_rate: s.t() as f64 / elapsed.as_secs_f64(),
        long_tokens: s.t(),
        points,
    }
}

fn kib(b: usize) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

#[derive(Parser)]
#[command(about = "Decode tokens/s and state bytes of checkpoint folders")]
struct Args {
    /// Step up to t = 1,048,576 instead of computing the figures beyond the stepped positions.
    #[arg(long = "step-1m")]
    step_1m: bool,
    /// Checkpoint folders (default: ll-gdn-mcu, ll-mamba2-mcu and gdn-mcu under models/).
    #[arg(value_name = "MODEL_DIR")]
    dirs: Vec<PathBuf>,
}

fn main() {
    let Args { step_1m, mut dirs } = Args::parse();
    if dirs.is_empty() {
        dirs = ["ll-gdn-mcu", "ll-mamba2-mcu", "gdn-mcu"]
            .iter()
            .map(|m| repo_root().join("models").join(m))
            .collect();
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: debug build; run with --release for meaningful figures");
    }
    let text = text();
    let reports: Vec<Report> = dirs.iter().map(|d| bench(d, &text, step_1m)).collect();

    println!("\n## Decode throughput (one core, batch 1)\n");
    println!(
        "{TIMED} tokens timed after {WARMUP} tokens of warm-up (t = {WARMUP}..{}), median of {REPS} runs [min, max].\n",
        WARMUP + TIMED
    );
    println!("| model | arch | levels | f32 state tok/s | f16 state tok/s | f16 / f32 | f32 tok/s over t = 0..{STEP_LIMIT} |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in &reports {
        let med = |v: &[f64]| v[v.len() / 2];
        println!(
            "| {} | {} | {} | {:.0} [{:.0}, {:.0}] | {:.0} [{:.0}, {:.0}] | {:.2} | {:.0} (t = 0..{}) |",
            r.name,
            r.arch,
            r.levels,
            med(&r.f32_rates),
            r.f32_rates[0],
            r.f32_rates[r.f32_rates.len() - 1],
            med(&r.f16_rates),
            r.f16_rates[0],
            r.f16_rates[r.f16_rates.len() - 1],
            med(&r.f16_rates) / med(&r.f32_rates),
            r.long_rate,
            r.long_tokens
        );
    }

    println!("\n## Recurrent state bytes (Fenwick levels + conv states, all layers)\n");
    println!(
        "live = levels holding information after t tokens; allocated = fixed for the session.\n"
    );
    println!("| model | t | how | live f32 | allocated f32 | live f16 | allocated f16 |");
    println!("| --- | ---: | --- | ---: | ---: | ---: | ---: |");
    for r in &reports {
        for p in &r.points {
            println!(
                "| {} | {} | {} | {} ({}) | {} ({}) | {} ({}) | {} ({}) |",
                r.name,
                p.t,
                if p.stepped { "stepped" } else { "computed" },
                p.live_f32,
                kib(p.live_f32),
                p.alloc_f32,
                kib(p.alloc_f32),
                p.live_f16,
                kib(p.live_f16),
                p.alloc_f16,
                kib(p.alloc_f16),
            );
        }
    }
    println!("\nf16 figures are computed (2-byte levels, conv states stay f32); t ≤ {} stepped with an f32 session and checked against the formula.", if step_1m { POINTS[2] } else { STEP_LIMIT });
    if !step_1m {
        println!(
            "\nt = {} was computed, not stepped. Stepping it would take about:",
            POINTS[2]
        );
        for r in &reports {
            println!(
                "  {}: {:.0} s at the measured {:.0} tok/s (f32, t = 0..{})",
                r.name,
                POINTS[2] as f64 / r.long_rate,
                r.long_rate,
                r.long_tokens
            );
        }
    }
}
