//! The model benchmark: tokens/s of whole optimizer steps, and with `--stages` where a step's
//! GPU time and its dispatches go.

use crate::{scoped, Args};
use loglinear_converter::{parse_config, parse_lenient_json};
use loglinear_host_gpu::chunk_scan::Form;
use loglinear_host_gpu::gpu::recorded_dispatches;
use loglinear_host_gpu::timestamps::{median, Timestamps};
use loglinear_host_gpu::train::optim::{AdamW, AdamWConfig};
use loglinear_host_gpu::{wgpu, Gpu, GpuError};
use loglinear_runtime::rng::SplitMix64;
use loglinear_runtime::ModelConfig;
use loglinear_train::model::{new_train_graph, Stage, TrainGraph};
use std::time::Instant;

/// The shipped models' configs (compiled in, so a binary carried to another machine needs no
/// checkout).
const LL_GDN_CONFIG: &str = include_str!("../../../models/ll-gdn-mcu/config.json");
const LL_M2_CONFIG: &str = include_str!("../../../models/ll-mamba2-mcu/config.json");

/// One model to benchmark.
struct ModelCase {
    name: &'static str,
    config: Result<ModelConfig, String>,
}

pub struct ModelRow {
    pub name: &'static str,
    pub config: Option<ModelConfig>,
    pub result: Result<StepTimes, String>,
}

pub struct StepTimes {
    pub params: usize,
    pub step: f64,
    /// GPU ms of forward, backward and optimizer inside one step.
    pub gpu: Option<[f64; 3]>,
    /// Kernel dispatches recorded for one step.
    pub dispatches: u64,
    /// With `--stages`: each part of a step (a block stage summed over the layers).
    pub stages: Vec<StageTimes>,
    /// Mean loss of the first and the last step (a sanity check: it should fall).
    pub loss: (f64, f64),
}

/// One part of a step in the `--stages` table.
pub struct StageTimes {
    pub label: &'static str,
    /// Median GPU ms (none without TIMESTAMP_QUERY).
    pub gpu_ms: Option<f64>,
    /// Kernel dispatches it records.
    pub dispatches: u64,
}

fn config_from_json(
    text: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> Result<ModelConfig, String> {
    let mut json = parse_lenient_json(text).map_err(|e| e.to_string())?;
    edit(&mut json);
    parse_config(&json)
        .map(|(c, _)| c)
        .map_err(|e| e.to_string())
}

/// The models of the `--form`s: the shipped LL-GDN (or `--config`, of any architecture) and an
/// MCU-sized LL-GDN for GDN; the shipped LL-Mamba-2 for Mamba-2.
fn model_cases(a: &Args) -> Vec<ModelCase> {
    let mut cases = Vec::new();
    if let Some(path) = &a.config {
        cases.push(ModelCase {
            name: "--config",
            config: std::fs::read_to_string(path)
                .map_err(|e| format!("{path}: {e}"))
                .and_then(|t| config_from_json(&t, |_| {})),
        });
    }
    if a.forms().contains(&Form::Gdn) {
        if a.config.is_none() {
            cases.push(ModelCase {
                name: "ll-gdn-mcu (shipped)",
                config: config_from_json(LL_GDN_CONFIG, |_| {}),
            });
        }
        cases.push(ModelCase {
            name: "ll-gdn h4 dk16 dv32",
            config: config_from_json(LL_GDN_CONFIG, |j| {
                j["hidden_size"] = 128.into();
                j["num_hidden_layers"] = 4.into();
                j["num_heads"] = 4.into();
                j["head_dim"] = 16.into();
                j["expand_v"] = 2.into();
                j["hidden_ratio"] = 4.into();
                j["vocab_size"] = 256.into();
            }),
        });
    }
    if a.forms().contains(&Form::Mamba2) {
        cases.push(ModelCase {
            name: "ll-mamba2-mcu (shipped)",
            config: config_from_json(LL_M2_CONFIG, |_| {}),
        });
    }
    cases
}

fn mean_loss(gpu: &Gpu, m: &dyn TrainGraph) -> Result<f64, GpuError> {
    let l = gpu.read_f32(m.losses())?;
    Ok(l.iter().map(|&x| f64::from(x)).sum::<f64>() / l.len().max(1) as f64)
}

/// An interval between two marks of a step: its label, its phase (`FORWARD`, `BACKWARD` or
/// `OPTIMIZER`) and the dispatches recorded in it.
type Interval = (&'static str, usize, u64);

/// The marks of one step: a timestamp at each (where the adapter has them), and what each
/// interval from the previous mark was.
struct Marks<'a> {
    timer: Option<&'a Timestamps>,
    labels: Vec<Interval>,
    /// [`recorded_dispatches`] at the previous mark.
    dispatches_before: u64,
}

impl Marks<'_> {
    fn mark(&mut self, enc: &mut wgpu::CommandEncoder, label: &'static str, phase: usize) {
        if let Some(t) = self.timer {
            t.mark(enc, self.labels.len() as u32 + 1);
        }
        let now = recorded_dispatches();
        self.labels
            .push((label, phase, now - self.dispatches_before));
        self.dispatches_before = now;
    }
}

/// The phases of a step, as indices of `StepTimes::gpu` (zeroing counts as forward).
const FORWARD: usize = 0;
const BACKWARD: usize = 1;
const OPTIMIZER: usize = 2;

/// The phase of a stage.
fn phase_of(s: Stage) -> usize {
    if s.is_backward() {
        BACKWARD
    } else {
        FORWARD
    }
}

fn bench_model(gpu: &Gpu, a: &Args, c: &ModelConfig) -> Result<StepTimes, GpuError> {
    let m = new_train_graph(gpu, c, a.batch, a.seq)?;
    // Marks: the start, then per stage (zeroing, embedding, 3 per layer, head; the same
    // backward; AdamW) or per phase (forward, backward, AdamW).
    let marks = if a.stages { 7 + 6 * c.num_layers } else { 4 };
    let timer = Timestamps::new(gpu, marks as u32);
    m.init_params(gpu, 1)?;
    let mut opt = AdamW::new(gpu, m.params(), AdamWConfig::default())?;
    let mut rng = SplitMix64::new(0x0dd_ba11_cafe_f00d);
    let tokens: Vec<u32> = (0..a.batch * (a.seq + 1))
        .map(|_| ((rng.unit_f32() * c.vocab_size as f32) as u32).min(c.vocab_size as u32 - 1))
        .collect();
    let tokens = gpu.storage_from("tokens", &tokens)?;
    let scale = 1.0 / (a.batch * a.seq) as f32;
    let step = |opt: &mut AdamW| -> Result<(f64, Vec<Interval>), GpuError> {
        let mut enc = gpu.encoder("train step");
        let mut marks = Marks {
            timer: timer.as_ref(),
            labels: Vec::new(),
            dispatches_before: recorded_dispatches(),
        };
        if let Some(t) = &timer {
            t.mark(&mut enc, 0);
        }
        m.encode_zero_grads(&mut enc);
        let stages = a.stages;
        if stages {
            marks.mark(&mut enc, "zero gradients", FORWARD);
        }
        m.encode_forward_marked(&mut enc, &tokens, &mut |e, s| {
            if stages {
                marks.mark(e, s.name(), phase_of(s));
            }
        });
        if !stages {
            marks.mark(&mut enc, "forward", FORWARD);
        }
        m.encode_backward_marked(&mut enc, scale, &mut |e, s| {
            if stages {
                marks.mark(e, s.name(), phase_of(s));
            }
        });
        if !stages {
            marks.mark(&mut enc, "backward", BACKWARD);
        }
        opt.encode_step(gpu, &mut enc, 1e-3, Some(1.0))?;
        marks.mark(&mut enc, "AdamW", OPTIMIZER);
        if let Some(t) = &timer {
            t.resolve(&mut enc);
        }
        let start = Instant::now();
        gpu.submit_and_wait(enc)?;
        Ok((start.elapsed().as_secs_f64() * 1e3, marks.labels))
    };
    let mut first_loss = None;
    for _ in 0..a.warmup {
        step(&mut opt)?;
        first_loss.get_or_insert(mean_loss(gpu, m.as_ref())?);
    }
    // Per label (in first-seen order): its phase and the per-iteration sums of its intervals.
    let mut wall = vec![];
    let mut per_label: Vec<(&'static str, usize, Vec<f64>)> = Vec::new();
    // Per label (in first-seen order): the dispatches of one step (the same every step).
    let mut dispatches: Vec<(&'static str, u64)> = Vec::new();
    for _ in 0..a.iters {
        let (ms, labels) = step(&mut opt)?;
        wall.push(ms);
        dispatches.clear();
        for &(label, _, n) in &labels {
            match dispatches.iter_mut().find(|(l, _)| *l == label) {
                Some((_, sum)) => *sum += n,
                None => dispatches.push((label, n)),
            }
        }
        if let Some(t) = &timer {
            let mut sums: Vec<(&'static str, usize, f64)> = Vec::new();
            for (&(label, phase, _), v) in labels.iter().zip(t.intervals_ms(gpu)?) {
                match sums.iter_mut().find(|(l, _, _)| *l == label) {
                    Some((_, _, sum)) => *sum += v,
                    None => sums.push((label, phase, v)),
                }
            }
            for (label, phase, v) in sums {
                match per_label.iter_mut().find(|(l, _, _)| *l == label) {
                    Some((_, _, all)) => all.push(v),
                    None => per_label.push((label, phase, vec![v])),
                }
            }
        }
        if first_loss.is_none() {
            first_loss = Some(mean_loss(gpu, m.as_ref())?);
        }
    }
    let last = mean_loss(gpu, m.as_ref())?;
    let medians: Vec<(&'static str, usize, f64)> = per_label
        .into_iter()
        .map(|(l, phase, v)| (l, phase, median(v)))
        .collect();
    let gpu_phases = timer.as_ref().map(|_| {
        let mut g = [0.0; 3];
        for &(_, phase, v) in &medians {
            g[phase] += v;
        }
        g
    });
    Ok(StepTimes {
        params: m.params().iter().map(|p| p.len).sum(),
        step: median(wall),
        gpu: gpu_phases,
        dispatches: dispatches.iter().map(|(_, n)| n).sum(),
        stages: if a.stages {
            dispatches
                .iter()
                .map(|&(label, dispatches)| StageTimes {
                    label,
                    gpu_ms: medians.iter().find(|m| m.0 == label).map(|m| m.2),
                    dispatches,
                })
                .collect()
        } else {
            Vec::new()
        },
        loss: (first_loss.unwrap_or(last), last),
    })
}

pub fn run_models(gpu: &Gpu, a: &Args, adapter: &str) -> Vec<ModelRow> {
    let timestamps = gpu.features.contains(wgpu::Features::TIMESTAMP_QUERY);
    println!(
        "## Training step (zero grads + forward + backward + AdamW), seq {} × batch {}; wall ms \
         per step, median of {} after {} warm-up; GPU stage times: {}",
        a.seq,
        a.batch,
        a.iters,
        a.warmup,
        if timestamps {
            "timestamps"
        } else {
            "n/a (no TIMESTAMP_QUERY)"
        }
    );
    println!();
    println!(
        "| adapter | model | arch | params | layers | d | heads | dk | dv | seq | batch | step ms | \
         GPU fwd | GPU bwd | GPU opt | tokens/s | loss first → last |"
    );
    println!(
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | \
         ---: | ---: | ---: | --- |"
    );
    let mut rows = Vec::new();
    for case in model_cases(a) {
        let result = match &case.config {
            Err(e) => Err(format!("config: {e}")),
            Ok(c) => scoped(gpu, || bench_model(gpu, a, c)),
        };
        let row = ModelRow {
            name: case.name,
            config: case.config.ok(),
            result,
        };
        print_model_row(adapter, a, &row);
        rows.push(row);
    }
    println!();
    for r in &rows {
        if let Ok(x) = &r.result {
            print_stages(r.name, x);
        }
    }
    rows
}

/// The `--stages` table of one model: GPU ms per part of a step and its share.
fn print_stages(name: &str, x: &StepTimes) {
    if x.stages.is_empty() {
        return;
    }
    let total: f64 = x.stages.iter().filter_map(|s| s.gpu_ms).sum();
    println!("### {name}: GPU time and dispatches per stage (block stages summed over the layers)");
    println!();
    println!("| stage | GPU ms | share | dispatches |");
    println!("| --- | ---: | ---: | ---: |");
    for s in &x.stages {
        let (ms, share) = match s.gpu_ms {
            Some(v) => (
                format!("{v:.3}"),
                format!("{:.1} %", 100.0 * v / total.max(f64::MIN_POSITIVE)),
            ),
            None => ("n/a".into(), String::new()),
        };
        println!("| {} | {ms} | {share} | {} |", s.label, s.dispatches);
    }
    println!("| all | {total:.3} | | {} |", x.dispatches);
    println!();
}

fn print_model_row(adapter: &str, a: &Args, r: &ModelRow) {
    let arch = r.config.map(|c| c.arch.name()).unwrap_or_default();
    let shape = match &r.config {
        Some(c) => format!(
            "{} | {} | {} | {} | {}",
            c.num_layers, c.hidden_size, c.num_heads, c.head_k_dim, c.head_v_dim
        ),
        None => " | | | | ".into(),
    };
    match &r.result {
        Err(e) => println!(
            "| {adapter} | {} | {arch} | | {shape} | {} | {} | error: {} | | | | | |",
            r.name,
            a.seq,
            a.batch,
            e.replace('\n', " ").replace('|', "/")
        ),
        Ok(x) => {
            let g = match x.gpu {
                Some(g) => g.map(|v| format!("{v:.3}")),
                None => Default::default(),
            };
            println!(
                "| {adapter} | {} | {arch} | {} | {shape} | {} | {} | {:.3} | {} | {} | {} | {:.0} | \
                 {:.4} → {:.4} |",
                r.name,
                x.params,
                a.seq,
                a.batch,
                x.step,
                g[0],
                g[1],
                g[2],
                (a.seq * a.batch) as f64 / (x.step / 1e3),
                x.loss.0,
                x.loss.1
            );
        }
    }
}
