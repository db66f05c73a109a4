//! Chunkwise CPU prefill against token-by-token stepping on the shipped models.
//!
//! `cargo run --release -p loglinear-cpu-prefill --example prefill_bench [-- T [repeats]]`
//!
//! The prompt is the bytes of the models' TRAINING.md, repeated up to T tokens (default 4096).
//! Each timing is the best of `repeats` runs (default 3). Prints a markdown table (tokens/s and
//! the speedup over stepping) and the phase breakdown of the fastest prefill, plus the machine's
//! load average before and after, since the machine may be shared.

use loglinear_converter::model_source::{AlignedBytes, IndexedGguf};
use loglinear_converter::Checkpoint;
use loglinear_cpu_prefill::{prefill, Prefill, PrefillOptions};
use loglinear_runtime::{Model, Session, SessionConfig};
use std::path::Path;
use std::time::Instant;

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "n/a".into())
}

/// Seconds to step every token on a fresh session (best of `repeats`).
fn stepping_seconds(model: &Model<'_>, ids: &[u32], repeats: usize) -> f64 {
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(model, &cfg).unwrap()];
    let mut best = f64::INFINITY;
    for _ in 0..repeats {
        let mut s = Session::<f32>::new(model, &mut arena, cfg).unwrap();
        let start = Instant::now();
        for &id in ids {
            s.step(id).unwrap();
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    best
}

/// The fastest of `repeats` prefills with `threads` workers.
fn fastest_prefill(model: &Model<'_>, ids: &[u32], threads: usize, repeats: usize) -> Prefill {
    let opts = PrefillOptions {
        threads: Some(threads),
        ..Default::default()
    };
    let mut best: Option<Prefill> = None;
    for _ in 0..repeats {
        let p = prefill(model, ids, &opts).unwrap();
        if best
            .as_ref()
            .is_none_or(|b| p.timing.seconds < b.timing.seconds)
        {
            best = Some(p);
        }
    }
    best.unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let t: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let repeats: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let models_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    let text = std::fs::read(models_dir.join("ll-gdn-mcu/TRAINING.md")).unwrap();
    let ids: Vec<u32> = text.iter().cycle().take(t).map(|&b| u32::from(b)).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!(
        "T = {t}, best of {repeats}, {cores} cores, load average before: {}",
        load_avg()
    );

    let mut rows = Vec::new();
    let mut breakdowns = Vec::new();
    let mut bench = |name: &str, model: &Model<'_>| {
        let step = stepping_seconds(model, &ids, repeats);
        let p1 = fastest_prefill(model, &ids, 1, repeats);
        let p2 = fastest_prefill(model, &ids, 2, repeats);
        let tps = |s: f64| t as f64 / s;
        rows.push(format!(
            "| {name} | {t} | {:.0} | {:.0} ({:.1}×) | {:.0} ({:.1}×) |",
            tps(step),
            tps(p1.timing.seconds),
            step / p1.timing.seconds,
            tps(p2.timing.seconds),
            step / p2.timing.seconds,
        ));
        let phases: Vec<String> = p2
            .timing
            .phases
            .iter()
            .map(|(n, s)| format!("{n} {:.1} ms", s * 1e3))
            .collect();
        breakdowns.push(format!("{name} (2 threads): {}", phases.join(", ")));
        eprintln!("{name} done");
    };
    for dir in ["ll-gdn-mcu", "ll-mamba2-mcu", "gdn-mcu"] {
        let ckpt = Checkpoint::load(models_dir.join(dir)).unwrap();
        bench(&format!("{dir} (f32)"), &ckpt.model().unwrap());
    }
    let bytes = AlignedBytes::read(&models_dir.join("ll-gdn-mcu-q8_0.gguf")).unwrap();
    let gguf = IndexedGguf::parse(bytes.as_bytes()).unwrap();
    bench("ll-gdn-mcu-q8_0.gguf", &gguf.model().unwrap());

    println!("| model | T | stepping tokens/s | chunkwise 1 thread tokens/s (speedup) | chunkwise 2 threads tokens/s (speedup) |");
    println!("| --- | --- | --- | --- | --- |");
    for r in rows {
        println!("{r}");
    }
    println!();
    for b in breakdowns {
        println!("{b}");
    }
    println!();
    println!("load average after: {}", load_avg());
}
