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
use loglinear_train::model::{new_train_graph, Stage, StageMark, TrainGraph};
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
pub type Interval = (&'static str, usize, u64);

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
pub const FORWARD: usize = 0;
pub const BACKWARD: usize = 1;
pub const OPTIMIZER: usize = 2;

/// The phase of a stage.
fn phase_of(s: Stage) -> usize {
    if s.is_backward() {
        BACKWARD
    } else {
        FORWARD
    }
}

/// What every recorded training step of one model shares: all but its forward.
pub struct StepRecorder<'a> {
    pub gpu: &'a Gpu,
    pub model: &'a dyn TrainGraph,
    /// The command encoder's label.
    pub label: &'static str,
    /// Mark each stage (`--stages`), else each phase.
    pub stages: bool,
    /// The backward's loss scale: one over the scored positions.
    pub loss_scale: f32,
    /// AdamW's gradient clipping.
    pub max_norm: Option<f32>,
}

impl StepRecorder<'_> {
    /// Records one step (zero gradients, `forward`, backward, AdamW) with a mark after each
    /// stage or phase, timestamped where `timer` is given; returns the unsubmitted encoder and
    /// the marks' intervals. `forward` records the model's forward, calling its mark after
    /// each stage.
    pub fn record(
        &self,
        opt: &mut AdamW,
        timer: Option<&Timestamps>,
        forward: impl FnOnce(&mut wgpu::CommandEncoder, StageMark) -> Result<(), GpuError>,
    ) -> Result<(wgpu::CommandEncoder, Vec<Interval>), GpuError> {
        let mut enc = self.gpu.encoder(self.label);
        let mut marks = Marks {
            timer,
            labels: Vec::new(),
            dispatches_before: recorded_dispatches(),
        };
        if let Some(t) = timer {
            t.mark(&mut enc, 0);
        }
        self.model.encode_zero_grads(&mut enc);
        let stages = self.stages;
        if stages {
            marks.mark(&mut enc, "zero gradients", FORWARD);
        }
        forward(&mut enc, &mut |e, s| {
            if stages {
                marks.mark(e, s.name(), phase_of(s));
            }
        })?;
        if !stages {
            marks.mark(&mut enc, "forward", FORWARD);
        }
        self.model
            .encode_backward_marked(&mut enc, self.loss_scale, &mut |e, s| {
                if stages {
                    marks.mark(e, s.name(), phase_of(s));
                }
            });
        if !stages {
            marks.mark(&mut enc, "backward", BACKWARD);
        }
        opt.encode_step(self.gpu, &mut enc, 1e-3, self.max_norm)?;
        marks.mark(&mut enc, "AdamW", OPTIMIZER);
        if let Some(t) = timer {
            t.resolve(&mut enc);
        }
        Ok((enc, marks.labels))
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
    let recorder = StepRecorder {
        gpu,
        model: m.as_ref(),
        label: "train step",
        stages: a.stages,
        loss_scale: 1.0 / (a.batch * a.seq) as f32,
        max_norm: Some(1.0),
    };
    let step = |opt: &mut AdamW| -> Result<(f64, Vec<Interval>), GpuError> {
        let (enc, labels) = recorder.record(opt, timer.as_ref(), |enc, mark| {
            m.encode_forward_marked(enc, &tokens, mark);
            Ok(())
        })?;
        let start = Instant::now();
        gpu.submit_and_wait(enc)?;
        Ok((start.elapsed().as_secs_f64() * 1e3, labels))
    };
    let mut first_loss = None;
    for _ in 0..a.warmup {
        step(&mut opt)?;
        first_loss.get_or_insert(mean_loss(gpu, m.as_ref())?);
    }
    let mut wall = vec![];
    let mut sums = StageSums::default();
    for _ in 0..a.iters {
        let (ms, labels) = step(&mut opt)?;
        wall.push(ms);
        let gpu_ms = match &timer {
            Some(t) => Some(t.intervals_ms(gpu)?),
            None => None,
        };
        sums.add(&labels, gpu_ms.as_deref());
        if first_loss.is_none() {
            first_loss = Some(mean_loss(gpu, m.as_ref())?);
        }
    }
    let last = mean_loss(gpu, m.as_ref())?;
    Ok(StepTimes {
        params: m.params().iter().map(|p| p.len).sum(),
        step: median(wall),
        gpu: timer.as_ref().map(|_| sums.phases()),
        dispatches: sums.dispatches(),
        stages: if a.stages {
            sums.stages(timer.is_some())
        } else {
            Vec::new()
        },
        loss: (first_loss.unwrap_or(last), last),
    })
}

/// The intervals of the timed steps, summed per label (a block stage over the layers) in
/// first-seen order: each label's phase, its dispatches in one step (the same every step)
/// and its GPU ms in each step.
#[derive(Default)]
pub struct StageSums {
    labels: Vec<(&'static str, usize, u64, Vec<f64>)>,
}

impl StageSums {
    /// Adds one step: its intervals, and their GPU ms where the adapter has timestamps.
    pub fn add(&mut self, intervals: &[Interval], gpu_ms: Option<&[f64]>) {
        let mut step: Vec<(&'static str, usize, u64, f64)> = Vec::new();
        for (i, &(label, phase, n)) in intervals.iter().enumerate() {
            let v = gpu_ms.and_then(|g| g.get(i)).copied().unwrap_or(0.0);
            match step.iter_mut().find(|s| s.0 == label) {
                Some(s) => (s.2, s.3) = (s.2 + n, s.3 + v),
                None => step.push((label, phase, n, v)),
            }
        }
        for (label, phase, n, v) in step {
            match self.labels.iter_mut().find(|s| s.0 == label) {
                Some(s) => {
                    s.2 = n;
                    s.3.push(v);
                }
                None => self.labels.push((label, phase, n, vec![v])),
            }
        }
    }

    /// Each label's dispatches, and its median GPU ms where the steps were `timed`.
    pub fn stages(&self, timed: bool) -> Vec<StageTimes> {
        self.labels
            .iter()
            .map(|(label, _, n, v)| StageTimes {
                label,
                gpu_ms: timed.then(|| median(v.clone())),
                dispatches: *n,
            })
            .collect()
    }

    /// Median GPU ms of the forward, backward and optimizer phases.
    pub fn phases(&self) -> [f64; 3] {
        let mut g = [0.0; 3];
        for (_, phase, _, v) in &self.labels {
            g[*phase] += median(v.clone());
        }
        g
    }

    /// Dispatches of one step.
    pub fn dispatches(&self) -> u64 {
        self.labels.iter().map(|s| s.2).sum()
    }
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
            print_stages(r.name, &x.stages);
        }
    }
    rows
}

/// The `--stages` table of one model: GPU ms per part of a step and its share.
pub fn print_stages(name: &str, stages: &[StageTimes]) {
    if stages.is_empty() {
        return;
    }
    let total: f64 = stages.iter().filter_map(|s| s.gpu_ms).sum();
    println!("### {name}: GPU time and dispatches per stage (block stages summed over the layers)");
    println!();
    println!("| stage | GPU ms | share | dispatches |");
    println!("| --- | ---: | ---: | ---: |");
    for s in stages {
        let (ms, share) = match s.gpu_ms {
            Some(v) => (
                format!("{v:.3}"),
                format!("{:.1} %", 100.0 * v / total.max(f64::MIN_POSITIVE)),
            ),
            None => ("n/a".into(), String::new()),
        };
        println!("| {} | {ms} | {share} | {} |", s.label, s.dispatches);
    }
    let dispatches: u64 = stages.iter().map(|s| s.dispatches).sum();
    println!("| all | {total:.3} | | {dispatches} |");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_sums_add_a_label_over_the_layers_and_take_medians_over_steps() {
        let step = [
            ("embedding", FORWARD, 2),
            ("operator", FORWARD, 5),
            ("operator", FORWARD, 5),
            ("AdamW", OPTIMIZER, 3),
        ];
        let mut sums = StageSums::default();
        sums.add(&step, Some(&[1.0, 2.0, 3.0, 0.5]));
        sums.add(&step, Some(&[1.0, 4.0, 4.0, 0.5]));
        sums.add(&step, Some(&[3.0, 2.0, 2.0, 0.5]));
        let stages = sums.stages(true);
        let got: Vec<_> = stages
            .iter()
            .map(|s| (s.label, s.gpu_ms, s.dispatches))
            .collect();
        assert_eq!(
            got,
            [
                ("embedding", Some(1.0), 2),
                ("operator", Some(5.0), 10),
                ("AdamW", Some(0.5), 3)
            ]
        );
        assert_eq!(sums.dispatches(), 15);
        assert_eq!(sums.phases(), [6.0, 0.0, 0.5]);
        assert!(sums.stages(false).iter().all(|s| s.gpu_ms.is_none()));
    }
}
