//! `--mqar DIMS`: the MQAR protocol's training step, as `loglinear mqar` takes it, for the four
//! architectures at each width: where a step's wall time goes (CPU recording, GPU time) and
//! how many dispatches it records.

use crate::model::{print_stages, Interval, StageSums, StageTimes, StepRecorder};
use crate::{scoped, Args};
use loglinear_host_gpu::timestamps::{median, Timestamps};
use loglinear_host_gpu::train::optim::{AdamW, AdamWConfig};
use loglinear_host_gpu::{wgpu, Gpu, GpuError};
use loglinear_train::model::{new_train_graph_with, GraphOptions, InitScheme};
use loglinear_train::mqar::data::{generate, MqarConfig, ZOOLOGY_KV_PAIRS, ZOOLOGY_TRAIN_EXAMPLES};
use loglinear_train::mqar::{model_config, MqarArch, GDN_EXPAND_V, IGNORED_TARGET};
use std::time::Instant;

/// The sweep's architectures, in its order.
const ARCHS: [MqarArch; 4] = [
    MqarArch::LlGdn,
    MqarArch::Gdn,
    MqarArch::LlMamba2,
    MqarArch::Mamba2,
];

/// One architecture at one width.
pub struct MqarRow {
    pub arch: &'static str,
    pub dim: usize,
    pub result: Result<MqarStep, String>,
}

/// A step's cost, medians over `--iters`.
pub struct MqarStep {
    pub params: usize,
    /// CPU ms to record one step (zero grads, forward, backward, AdamW) and finish it.
    pub record_ms: f64,
    /// Wall ms per step with the steps submitted back to back, as the sweep runs them.
    pub pipelined_ms: f64,
    /// Wall ms of one step submitted alone and waited for.
    pub alone_ms: f64,
    /// GPU ms of forward, backward and AdamW (with TIMESTAMP_QUERY).
    pub gpu: Option<[f64; 3]>,
    pub dispatches: u64,
    /// With `--stages`: each part of a step (a block stage summed over the layers).
    pub stages: Vec<StageTimes>,
}

/// A batch as the sweep draws it: `batch` examples in Zoology's kv proportions, flattened to
/// inputs and targets (`IGNORED_TARGET` off the queries); and the scored positions.
fn mqar_batch(batch: usize, seq_len: usize) -> Result<(Vec<u32>, Vec<u32>, usize), String> {
    let total: usize = ZOOLOGY_TRAIN_EXAMPLES.iter().sum();
    let mut counts: Vec<usize> = ZOOLOGY_TRAIN_EXAMPLES
        .iter()
        .map(|&n| batch * n / total)
        .collect();
    counts[0] += batch - counts.iter().sum::<usize>();
    let (mut inputs, mut targets, mut scored) = (Vec::new(), Vec::new(), 0);
    for (i, (&kv, &count)) in ZOOLOGY_KV_PAIRS.iter().zip(&counts).enumerate() {
        let cfg = MqarConfig {
            seq_len,
            ..MqarConfig::zoology(kv)
        };
        let b = generate(&cfg, 1 + i as u64, count).map_err(|e| e.to_string())?;
        inputs.extend_from_slice(&b.inputs);
        for (&t, &m) in b.targets.iter().zip(&b.mask) {
            targets.push(if m { t } else { IGNORED_TARGET });
            scored += usize::from(m);
        }
    }
    Ok((inputs, targets, scored))
}

fn bench_one(gpu: &Gpu, a: &Args, arch: MqarArch, dim: usize) -> Result<MqarStep, String> {
    let cfg = model_config(arch, dim, MqarConfig::zoology(4).vocab_size, GDN_EXPAND_V)
        .map_err(|e| e.to_string())?;
    let (inputs, targets, scored) = mqar_batch(a.batch, a.seq)?;
    let max_kv = ZOOLOGY_KV_PAIRS.iter().max().copied().unwrap_or(1);
    scoped(gpu, || {
        let options = GraphOptions {
            tie_embeddings: true,
            init: InitScheme::Zoology,
            head_rows: Some(a.batch * max_kv),
        };
        let m = new_train_graph_with(gpu, &cfg, a.batch, a.seq, options)?;
        // As the sweep does: the head on the fewest rows that hold the batch's scored ones.
        m.set_scored_rows(scored);
        m.init_params(gpu, 1)?;
        let inputs = gpu.storage_from("mqar inputs", &inputs)?;
        let targets = gpu.storage_from("mqar targets", &targets)?;
        let mut opt = AdamW::new(gpu, m.params(), AdamWConfig::default())?;
        // Marks: the start, then per stage (zeroing, embedding, 3 per layer, head; the same
        // backward; AdamW) or per phase.
        let marks = if a.stages { 7 + 6 * cfg.num_layers } else { 4 };
        let timer = Timestamps::new(gpu, marks as u32);
        let recorder = StepRecorder {
            gpu,
            model: m.as_ref(),
            label: "mqar step",
            stages: a.stages,
            loss_scale: 1.0 / scored.max(1) as f32,
            max_norm: None,
        };
        // Records one step; with `timed`, timestamps between its stages or phases.
        type Recorded = (wgpu::CommandBuffer, Vec<Interval>);
        let record = |opt: &mut AdamW, timed: bool| -> Result<Recorded, GpuError> {
            let timer = timer.as_ref().filter(|_| timed);
            let (enc, labels) = recorder.record(opt, timer, |enc, mark| {
                m.encode_forward_targets_marked(enc, &inputs, &targets, mark)
            })?;
            Ok((enc.finish(), labels))
        };
        let wait = || {
            gpu.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map(|_| ())
                .map_err(|e| GpuError::Invalid(format!("waiting for the GPU: {e}")))
        };
        for _ in 0..a.warmup {
            gpu.queue.submit([record(&mut opt, false)?.0]);
        }
        wait()?;
        let (mut record_ms, mut alone_ms) = (vec![], vec![]);
        let mut sums = StageSums::default();
        for _ in 0..a.iters {
            let start = Instant::now();
            let (cmd, labels) = record(&mut opt, true)?;
            record_ms.push(start.elapsed().as_secs_f64() * 1e3);
            let start = Instant::now();
            gpu.queue.submit([cmd]);
            wait()?;
            alone_ms.push(start.elapsed().as_secs_f64() * 1e3);
            let gpu_ms = match &timer {
                Some(t) => Some(t.intervals_ms(gpu)?),
                None => None,
            };
            sums.add(&labels, gpu_ms.as_deref());
        }
        // Back to back, as the sweep submits them: recording overlaps the GPU's work.
        let start = Instant::now();
        for _ in 0..a.iters {
            gpu.queue.submit([record(&mut opt, false)?.0]);
        }
        wait()?;
        let pipelined_ms = start.elapsed().as_secs_f64() * 1e3 / a.iters as f64;
        Ok(MqarStep {
            params: m.params().iter().map(|p| p.len).sum(),
            record_ms: median(record_ms),
            pipelined_ms,
            alone_ms: median(alone_ms),
            gpu: timer.as_ref().map(|_| sums.phases()),
            dispatches: sums.dispatches(),
            stages: if a.stages {
                sums.stages(timer.is_some())
            } else {
                Vec::new()
            },
        })
    })
}

pub fn run_mqar(gpu: &Gpu, a: &Args, adapter: &str) -> Vec<MqarRow> {
    if a.mqar.is_empty() {
        return Vec::new();
    }
    println!(
        "## MQAR training step (Zoology's protocol: vocab 8192, tied head on the scored rows, \
         AdamW), seq {} × batch {}; ms per step, medians of {} after {} warm-up",
        a.seq, a.batch, a.iters, a.warmup
    );
    println!();
    println!(
        "| adapter | model | dim | params | step ms (back to back) | step ms (alone) | CPU record \
         ms | GPU fwd | GPU bwd | GPU AdamW | dispatches |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut rows = Vec::new();
    for &dim in &a.mqar {
        for arch in ARCHS {
            let row = MqarRow {
                arch: arch.name(),
                dim,
                result: bench_one(gpu, a, arch, dim),
            };
            match &row.result {
                Err(e) => println!(
                    "| {adapter} | {} | {dim} | error: {} | | | | | | | |",
                    row.arch,
                    e.replace('\n', " ").replace('|', "/")
                ),
                Ok(s) => {
                    let g = s.gpu.map(|g| g.map(|v| format!("{v:.3}")));
                    let [f, b, o] = g.unwrap_or_default();
                    println!(
                        "| {adapter} | {} | {dim} | {} | {:.3} | {:.3} | {:.3} | {f} | {b} | {o} \
                         | {} |",
                        row.arch, s.params, s.pipelined_ms, s.alone_ms, s.record_ms, s.dispatches
                    );
                }
            }
            rows.push(row);
        }
    }
    println!();
    for r in &rows {
        if let Ok(x) = &r.result {
            print_stages(&format!("MQAR {} dim {}", r.arch, r.dim), &x.stages);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_follows_zoologys_proportions() {
        let (inputs, targets, scored) = mqar_batch(256, 256).unwrap();
        assert_eq!(inputs.len(), 256 * 256);
        assert_eq!(targets.len(), 256 * 256);
        assert_eq!(
            scored,
            targets.iter().filter(|&&t| t != IGNORED_TARGET).count()
        );
        // Each example is queried once per pair: 144 examples of kv 4 (the rest of the
        // rounding), 28 each of kv 8, 16, 32 and 64.
        assert_eq!(scored, 144 * 4 + 28 * (8 + 16 + 32 + 64));
    }

    #[test]
    fn a_short_sequence_is_refused_by_name() {
        let e = mqar_batch(8, 64).unwrap_err();
        assert!(e.contains("num_kv_pairs"), "{e}");
    }
}
