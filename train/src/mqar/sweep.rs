//! One sweep on the GPU: the data, the training runs with their evaluations, the wall-clock
//! budget, and checkpoints to pause and resume a run.

use super::*;
use crate::model::{new_train_graph_with, TrainGraph};
use crate::mqar::data::MqarBatch;
use crate::schedule::{Decay, LrSchedule};
use indicatif::{ProgressBar, ProgressStyle};
use loglinear_host_gpu::train::optim::{AdamW, AdamWConfig};
use loglinear_host_gpu::{wgpu, Gpu, GpuError, GpuOptions};
use loglinear_runtime::rng::SplitMix64;
use std::time::Instant;

type Res<T> = Result<T, MqarError>;

/// Training data seed (Zoology's 123), per kv setting apart by 1000; tests add 10.
const DATA_SEED: u64 = 123;
/// Steps between loss read-backs (each waits for the GPU).
const LOG_EVERY: u64 = 10;
/// Steps timed before `--max-seconds-per-run` cuts the step count (a multiple of
/// `LOG_EVERY`, so the GPU has caught up when it is read).
const BUDGET_PROBE: u64 = 20;

/// Examples as the model reads them: inputs and targets (`IGNORED_TARGET` off the queries).
struct Examples {
    inputs: Vec<u32>,
    targets: Vec<u32>,
    /// Scored positions per example.
    scored: Vec<u32>,
}

impl Examples {
    fn from_batch(b: &MqarBatch) -> Self {
        let l = b.seq_len;
        let targets: Vec<u32> = b
            .targets
            .iter()
            .zip(&b.mask)
            .map(|(&t, &m)| if m { t } else { IGNORED_TARGET })
            .collect();
        let scored = b
            .mask
            .chunks(l)
            .map(|m| m.iter().filter(|&&x| x).count() as u32)
            .collect();
        Self {
            inputs: b.inputs.clone(),
            targets,
            scored,
        }
    }

    fn len(&self) -> usize {
        self.scored.len()
    }
}

struct Data {
    train: Examples,
    /// Per kv setting.
    test: Vec<(usize, Examples)>,
}

fn make_data(args: &MqarArgs) -> Res<Data> {
    let counts = train_counts(args)?;
    let mut train = Examples {
        inputs: Vec::new(),
        targets: Vec::new(),
        scored: Vec::new(),
    };
    let mut test = Vec::new();
    for (i, &kv) in args.kv.iter().enumerate() {
        let cfg = data_config(args, kv);
        let count = counts[i];
        let seed = DATA_SEED + 1000 * kv as u64;
        let (tr, te) = crate::mqar::data::train_test(&cfg, seed, count, args.test_examples)?;
        let tr = Examples::from_batch(&tr);
        train.inputs.extend_from_slice(&tr.inputs);
        train.targets.extend_from_slice(&tr.targets);
        train.scored.extend_from_slice(&tr.scored);
        test.push((kv, Examples::from_batch(&te)));
    }
    Ok(Data { train, test })
}

/// A graph of `batch` (the micro-batch) examples with one pair of upload buffers per
/// micro-batch of a step (queued writes land before the submit, so each micro-batch of one
/// encoder needs its own).
struct Runner<'a> {
    gpu: &'a Gpu,
    graph: Box<dyn TrainGraph>,
    inputs: Vec<wgpu::Buffer>,
    targets: Vec<wgpu::Buffer>,
    batch: usize,
    seq_len: usize,
    /// The graph's head capacity: scored positions per micro-batch, at most.
    head_rows: usize,
}

impl Runner<'_> {
    /// Uploads examples `idx` (at most one micro-batch, padded with ignored rows) into
    /// upload slot `slot` and records their forward.
    fn load(
        &self,
        enc: &mut wgpu::CommandEncoder,
        ex: &Examples,
        idx: &[usize],
        slot: usize,
    ) -> Res<u64> {
        let l = self.seq_len;
        let mut inputs = Vec::with_capacity(self.batch * l);
        let mut targets = Vec::with_capacity(self.batch * l);
        let mut scored = 0u64;
        for &i in idx {
            inputs.extend_from_slice(&ex.inputs[i * l..(i + 1) * l]);
            targets.extend_from_slice(&ex.targets[i * l..(i + 1) * l]);
            scored += u64::from(ex.scored[i]);
        }
        // The head runs on at most `head_rows` rows; more would be NaN losses.
        if scored > self.head_rows as u64 {
            return Err(MqarError::HeadCapacity {
                scored,
                capacity: self.head_rows,
            });
        }
        inputs.resize(self.batch * l, 0);
        targets.resize(self.batch * l, IGNORED_TARGET);
        let (ib, tb) = (&self.inputs[slot], &self.targets[slot]);
        self.gpu.write(ib, &inputs);
        self.gpu.write(tb, &targets);
        // The head runs on the fewest of its row levels that hold this batch's scored rows.
        self.graph.set_scored_rows(scored as usize);
        self.graph.encode_forward_targets(enc, ib, tb)?;
        Ok(scored)
    }

    fn read(&self, buf: &wgpu::Buffer) -> Res<Vec<f32>> {
        let n = self.batch * self.seq_len;
        Ok(bytemuck::pod_collect_to_vec(
            &self.gpu.read_bytes(buf, 4 * n as u64)?,
        ))
    }

    /// Test accuracy per kv setting: (kv, correct, scored).
    fn evaluate(&self, data: &Data) -> Res<Vec<(usize, u64, u64)>> {
        let mut out = Vec::new();
        for (kv, ex) in &data.test {
            let (mut correct, mut scored) = (0u64, 0u64);
            let all: Vec<usize> = (0..ex.len()).collect();
            for idx in all.chunks(self.batch) {
                let mut enc = self.gpu.encoder("mqar eval");
                scored += self.load(&mut enc, ex, idx, 0)?;
                self.gpu.submit_and_wait(enc)?;
                let c = self.read(self.graph.correct())?;
                correct += c.iter().map(|&x| x as f64).sum::<f64>().round() as u64;
            }
            out.push((*kv, correct, scored));
        }
        Ok(out)
    }
}

fn summarize(acc: &[(usize, u64, u64)]) -> (f64, f64, Vec<(usize, f64)>) {
    let per_kv: Vec<(usize, f64)> = acc
        .iter()
        .map(|&(kv, c, s)| (kv, c as f64 / s.max(1) as f64))
        .collect();
    let mean = per_kv.iter().map(|p| p.1).sum::<f64>() / per_kv.len().max(1) as f64;
    let (c, s) = acc
        .iter()
        .fold((0u64, 0u64), |(c, s), &(_, a, b)| (c + a, s + b));
    (mean, c as f64 / s.max(1) as f64, per_kv)
}

/// When this command stops to be continued later: `--max-seconds` and
/// `--pause-after-steps`. Only after a step of this command, so every command makes
/// progress.
struct Budget {
    start: Instant,
    max_seconds: Option<f64>,
    pause_after_steps: Option<u64>,
    /// Steps taken by this command, over all its runs.
    steps_done: u64,
}

impl Budget {
    fn spent(&self) -> bool {
        self.steps_done > 0
            && (self.pause_after_steps.is_some_and(|n| self.steps_done >= n)
                || self
                    .max_seconds
                    .is_some_and(|m| self.start.elapsed().as_secs_f64() >= m))
    }
}

/// One run of the sweep: what the results file tells runs apart by.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct RunId {
    pub arch: MqarArch,
    pub dim: usize,
    pub lr: f64,
    pub seed: u64,
}

impl RunId {
    /// Whether `r` is a record of this run.
    pub fn recorded_by(&self, r: &RunRecord) -> bool {
        r.same_run(self.arch, self.dim, self.lr, self.seed)
    }
}

/// Every run of the sweep, in its order: by architecture, then width, learning rate and seed.
pub(super) fn sweep_runs(args: &MqarArgs) -> Vec<RunId> {
    let mut all = Vec::new();
    for &arch in &args.archs {
        for &dim in &args.dims {
            for &lr in &args.lrs {
                for &seed in &args.seeds {
                    all.push(RunId {
                        arch,
                        dim,
                        lr,
                        seed,
                    });
                }
            }
        }
    }
    all
}

/// How a run of this command ended.
enum Outcome {
    Done(RunRecord),
    /// Checkpointed at `step` of `steps`, to be continued by the next command.
    Paused {
        step: u64,
        steps: u64,
    },
}

pub(super) fn run(args: &MqarArgs) -> Res<()> {
    let mut budget = Budget {
        start: Instant::now(),
        max_seconds: args.max_seconds,
        pause_after_steps: args.pause_after_steps,
        steps_done: 0,
    };
    check_args(args)?;
    let mut runs = load_results(args)?;
    let mine = match args.share {
        Some(share) => share.of(&sweep_runs(args)),
        None => sweep_runs(args),
    };
    let total = mine.len();
    let mut todo: Vec<RunId> = mine
        .into_iter()
        .filter(|id| !runs.iter().any(|r| id.recorded_by(r)))
        .collect();
    // A paused run (same settings, else an error) goes first.
    let run_dir = resume::run_dir(&args.out);
    let mut paused = resume::find_paused(&run_dir, args)?;
    if let Some(p) = &paused {
        let s = &p.state;
        if runs.iter().any(|r| r.same_run(s.arch, s.dim, s.lr, s.seed)) {
            // A crash came between recording the run and removing its checkpoint.
            eprintln!(
                "mqar: {} is already in {}; removing its checkpoint {}",
                s.label(),
                args.out.display(),
                run_dir.display()
            );
            resume::remove(&run_dir)?;
            paused = None;
        } else if let Some(i) = todo
            .iter()
            .position(|r| (r.arch, r.dim, r.seed) == (s.arch, s.dim, s.seed) && same_lr(r.lr, s.lr))
        {
            let run = todo.remove(i);
            todo.insert(0, run);
            eprintln!(
                "mqar: resuming {} at step {} of {} from {}",
                s.label(),
                s.step,
                s.steps,
                p.dir.display()
            );
        } else {
            return Err(MqarError::PausedRunNotInSweep {
                dir: p.dir.clone(),
                run: s.label(),
            });
        }
    }
    eprintln!(
        "mqar: {} runs to do, {} already in {}",
        todo.len(),
        total - todo.len(),
        args.out.display()
    );
    if todo.is_empty() {
        // Nothing to record: the JSON stays as it is.
        if let Some(md) = &args.md {
            write_atomic(md, &markdown(args, &runs))?;
        }
        print!("{}", markdown(args, &runs));
        return Ok(());
    }
    let t0 = Instant::now();
    let data = make_data(args)?;
    eprintln!(
        "mqar: data made in {:.1} s ({} training examples, {} test settings)",
        t0.elapsed().as_secs_f64(),
        data.train.len(),
        data.test.len()
    );
    let gpu = Gpu::new_with(GpuOptions {
        adapter: args.gpu,
        ..GpuOptions::from_env()
    })?;
    eprintln!("mqar: GPU {}", gpu.describe_for_training());
    let steps = args
        .steps
        .unwrap_or(steps_per_epoch(args) * args.epochs as u64);
    let eval_every = args.eval_every.unwrap_or(steps_per_epoch(args));
    let mut micro = args.micro_batch.unwrap_or(args.batch);
    // The head runs on the scored rows only: a micro-batch has at most micro × this many.
    let max_scored = data
        .test
        .iter()
        .flat_map(|(_, ex)| &ex.scored)
        .chain(&data.train.scored)
        .map(|&s| s as usize)
        .max()
        .unwrap_or(0)
        .max(1);
    // One graph per (arch, dim), reused by its learning rates and seeds.
    let mut current: Option<((MqarArch, usize), Runner)> = None;
    let runs_left = todo.len();
    for (done, run) in todo.into_iter().enumerate() {
        let RunId {
            arch,
            dim,
            lr,
            seed,
        } = run;
        if budget.spent() {
            eprintln!(
                "mqar: this command's budget is spent with {} runs left; run the same \
                 command again to continue",
                runs_left - done
            );
            return Ok(());
        }
        if current.as_ref().map(|c| c.0) != Some((arch, dim)) {
            drop(current.take()); // free the old graph first
            let cfg = model_config(arch, dim, args.vocab, args.gdn_expand_v)?;
            // A graph over the GPU's buffer limit is retried with half the micro-batch.
            let graph = loop {
                let options = graph_options(args.head, args.init, micro * max_scored);
                match new_train_graph_with(&gpu, &cfg, micro, args.seq_len, options) {
                    Err(GpuError::TooLarge { label, bytes, .. })
                        if micro % 2 == 0 && args.batch % (micro / 2) == 0 =>
                    {
                        eprintln!(
                            "mqar: {label} ({bytes} bytes) is over this GPU's limit; \
                             micro-batch {micro} -> {}",
                            micro / 2
                        );
                        micro /= 2;
                    }
                    other => break other?,
                }
            };
            let n = micro * args.seq_len;
            let z = |label: &str| gpu.storage_zeroed(label, 4 * n as u64);
            let slots = args.batch / micro;
            current = Some((
                (arch, dim),
                Runner {
                    gpu: &gpu,
                    graph,
                    inputs: (0..slots)
                        .map(|_| z("mqar inputs"))
                        .collect::<Result<_, _>>()?,
                    targets: (0..slots)
                        .map(|_| z("mqar targets"))
                        .collect::<Result<_, _>>()?,
                    batch: micro,
                    seq_len: args.seq_len,
                    head_rows: micro * max_scored,
                },
            ));
        }
        let Some((_, runner)) = current.as_ref() else {
            continue;
        };
        // Only the first run can be the paused one (it was put first).
        let from = paused.take();
        let label = run_label(arch, dim, lr, seed);
        let plan = Plan {
            steps,
            eval_every,
            checkpoint_every: args.checkpoint_every.unwrap_or(eval_every),
            run_dir: &run_dir,
        };
        let rec = match train_one(args, runner, &data, &run, &plan, from, &mut budget)? {
            Outcome::Done(rec) => rec,
            Outcome::Paused { step, steps } => {
                eprintln!(
                    "mqar: paused {label} at step {step} of {steps} (checkpoint in {}); run \
                     the same command again to continue",
                    run_dir.display()
                );
                return Ok(());
            }
        };
        eprintln!(
            "mqar: {label}: mean accuracy {} (pooled {}), {} steps, {}, {:.1} s",
            pct(rec.accuracy),
            pct(rec.pooled),
            rec.steps,
            rec.stopped,
            rec.seconds
        );
        runs.push(rec);
        save_results(args, &runs)?;
        // Recorded: its checkpoint (if it paused) is done with.
        resume::remove(&run_dir)?;
    }
    print!("{}", markdown(args, &runs));
    Ok(())
}

/// A run's step plan and where its checkpoint goes.
struct Plan<'a> {
    steps: u64,
    eval_every: u64,
    checkpoint_every: u64,
    run_dir: &'a std::path::Path,
}

/// The epoch's order: the training examples shuffled by `rng`.
fn shuffled(rng: &mut SplitMix64, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// The model's `config.json` for the checkpoint (the official config; the head as trained).
fn checkpoint_config(args: &MqarArgs, cfg: &loglinear_runtime::ModelConfig) -> Res<String> {
    let (mut v, _) = crate::checkpoint_dir::official_config(cfg)?;
    v["tie_word_embeddings"] = serde_json::json!(args.head == MqarHead::Tied);
    Ok(serde_json::to_string_pretty(&v)?)
}

/// Saves the run's parameters, AdamW state and `state` as the checkpoint folder.
fn save_checkpoint(
    args: &MqarArgs,
    gpu: &Gpu,
    r: &Runner,
    opt: &AdamW,
    dir: &std::path::Path,
    state: &resume::RunState,
    lr_now: f64,
) -> Res<()> {
    let data = crate::checkpoint_dir::CheckpointData {
        config_json: checkpoint_config(args, r.graph.config())?,
        params: r.graph.read_params(gpu)?,
        moments: opt.read_moments(gpu)?,
        optimizer_steps: opt.steps(),
        state: state.to_trainer_state(settings_json(args), lr_now),
    };
    crate::checkpoint_dir::save(dir, &data)?;
    Ok(())
}

/// Loads a paused run's parameters and AdamW state into the graph and optimizer.
fn load_checkpoint(gpu: &Gpu, r: &Runner, opt: &mut AdamW, dir: &std::path::Path) -> Res<()> {
    let keys: Vec<String> = r.graph.params().iter().map(|p| p.name.clone()).collect();
    let fail = |source: MqarError| MqarError::Resume {
        dir: dir.to_path_buf(),
        source: Box::new(source),
    };
    let saved = crate::checkpoint_dir::load(dir, &keys).map_err(|e| fail(e.into()))?;
    let by_key: std::collections::HashMap<&str, &Vec<f32>> = saved
        .params
        .iter()
        .map(|(k, _, v)| (k.as_str(), v))
        .collect();
    r.graph
        .load_params(gpu, &|k| by_key.get(k).map(|v| (*v).clone()))
        .map_err(|e| fail(e.into()))?;
    for (i, (m, v)) in saved.moments.iter().enumerate() {
        opt.load_moments(gpu, i, m, v).map_err(|e| fail(e.into()))?;
    }
    opt.set_steps(saved.optimizer_steps);
    Ok(())
}

/// Trains `run` on `r`'s GPU, from scratch or from `from` (its paused state), until it ends or
/// `budget` is spent (then it is checkpointed and `Paused`).
fn train_one(
    args: &MqarArgs,
    r: &Runner,
    data: &Data,
    run: &RunId,
    plan: &Plan,
    from: Option<resume::Paused>,
    budget: &mut Budget,
) -> Res<Outcome> {
    let RunId {
        arch,
        dim,
        lr,
        seed,
    } = *run;
    let gpu = r.gpu;
    let start = Instant::now();
    let adam = AdamWConfig {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
    };
    let mut opt = AdamW::new(gpu, r.graph.params(), adam)?;
    let n_train = data.train.len();
    // The run's state: fresh, or as it was when it paused.
    let mut st = match &from {
        Some(p) => {
            load_checkpoint(gpu, r, &mut opt, &p.dir)?;
            p.state.clone()
        }
        None => {
            r.graph.init_params(gpu, seed)?;
            resume::RunState {
                arch,
                dim,
                lr,
                seed,
                step: 0,
                steps: plan.steps,
                planned: plan.steps,
                epoch_rng: seed ^ 0x6d71_6172,
                epoch_pos: 0,
                evals: Vec::new(),
                last_eval: None,
                loss: f64::NAN,
                train_acc: f64::NAN,
                tokens: 0,
                seconds: 0.0,
            }
        }
    };
    // The record is the identity this command asked for (the checkpoint's lr is equal up
    // to JSON rounding).
    (st.arch, st.dim, st.lr, st.seed) = (arch, dim, lr, seed);
    let earlier_seconds = st.seconds;
    let seconds = || earlier_seconds + start.elapsed().as_secs_f64();
    let mut schedule = LrSchedule {
        peak: lr,
        min: 0.0,
        warmup: args.warmup,
        total: st.steps,
        decay: Decay::Cosine,
    };
    schedule.validate()?;
    let params: usize = r.graph.params().iter().map(|p| p.len).sum();
    let pb = ProgressBar::new(st.steps);
    pb.set_style(
        ProgressStyle::with_template("{prefix} [{bar:25}] {pos}/{len} {msg} ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_position(st.step);
    let label = format!("{} d{} lr {:.1e} s{}", arch.name(), dim, lr, seed);
    pb.set_prefix(label.clone());
    let say = |line: String| {
        if pb.is_hidden() {
            eprintln!("{line}");
        } else {
            pb.println(line);
        }
    };
    // The epoch's order is regenerated from the generator's state before its shuffle, so
    // a resumed run sees the same batches (a fresh run shuffles at its first step).
    let mut rng = SplitMix64::new(st.epoch_rng);
    let mut order: Vec<usize> = if st.step > 0 {
        shuffled(&mut rng, n_train)
    } else {
        Vec::new()
    };
    let mut stopped = "steps";
    while st.step < st.steps {
        // The next batch of the epoch's order; a new shuffle when it runs out.
        if st.epoch_pos >= order.len() {
            st.epoch_rng = rng.state;
            order = shuffled(&mut rng, n_train);
            st.epoch_pos = 0;
        }
        let idx = &order[st.epoch_pos..(st.epoch_pos + args.batch).min(order.len())];
        st.epoch_pos += idx.len();
        let mut enc = gpu.encoder("mqar step");
        r.graph.encode_zero_grads(&mut enc);
        // Zoology's loss: the mean over the step's scored positions.
        let total: u64 = idx.iter().map(|&i| u64::from(data.train.scored[i])).sum();
        let mut scored = 0;
        for (slot, part) in idx.chunks(r.batch).enumerate() {
            scored = r.load(&mut enc, &data.train, part, slot)?;
            r.graph.encode_backward(&mut enc, 1.0 / total.max(1) as f32);
        }
        st.step += 1;
        budget.steps_done += 1;
        let step = st.step;
        st.tokens += (idx.len() * args.seq_len) as u64;
        opt.encode_step(gpu, &mut enc, schedule.lr(step), None)?;
        gpu.queue.submit([enc.finish()]);
        let evaluate = step % plan.eval_every == 0 || step == st.steps;
        if step % LOG_EVERY == 0 || evaluate || step == 1 {
            let l = r.read(r.graph.losses())?;
            let c = r.read(r.graph.correct())?;
            st.loss = l.iter().map(|&x| x as f64).sum::<f64>() / scored.max(1) as f64;
            st.train_acc = c.iter().map(|&x| x as f64).sum::<f64>() / scored.max(1) as f64;
            let secs = seconds();
            pb.set_position(step);
            pb.set_message(format!(
                "loss {:.3} acc {:.1}% {:.0} tok/s",
                st.loss,
                100.0 * st.train_acc,
                st.tokens as f64 / secs
            ));
            if !st.loss.is_finite() {
                stopped = "diverged";
                break;
            }
            if let (Some(m), true) = (args.max_seconds_per_run, step == BUDGET_PROBE) {
                // Steps that fit: the remaining time (less a tenth for evaluations) at the
                // step time so far.
                let per_step = secs / step as f64;
                let fit = step + ((0.9 * m - secs).max(0.0) / per_step) as u64;
                if fit < st.steps {
                    say(format!(
                        "{label}: {:.1} ms per step; {fit} of {} steps fit in {m} s",
                        1e3 * per_step,
                        st.steps
                    ));
                    st.steps = fit.max(step);
                    schedule.total = st.steps;
                    pb.set_length(st.steps);
                }
            }
            if args.max_seconds_per_run.is_some_and(|m| secs >= m) {
                stopped = "time";
                break;
            }
        }
        if evaluate {
            let acc = r.evaluate(data)?;
            let (mean, pooled, per_kv) = summarize(&acc);
            st.evals.push((step, mean));
            say(format!(
                "{label} step {step}/{}: loss {:.4}, train acc {:.1}%, test mean {} pooled {} per kv {}",
                st.steps,
                st.loss,
                100.0 * st.train_acc,
                pct(mean),
                pct(pooled),
                per_kv
                    .iter()
                    .map(|(k, a)| format!("{k}:{}", pct(*a)))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            st.last_eval = Some((step, acc));
            if pooled > args.early_stop {
                stopped = "early-stop";
                break;
            }
        }
        // A checkpoint on schedule or to pause, unless the run ends here anyway.
        if step < st.steps {
            let pause = budget.spent();
            if pause || step % plan.checkpoint_every == 0 {
                st.seconds = seconds();
                let lr_now = schedule.lr(step);
                save_checkpoint(args, gpu, r, &opt, plan.run_dir, &st, lr_now)?;
            }
            if pause {
                pb.finish_and_clear();
                return Ok(Outcome::Paused {
                    step,
                    steps: st.steps,
                });
            }
        }
    }
    let step = st.step;
    if stopped == "steps" && step < st.planned {
        stopped = "time-budget";
    }
    // The final evaluation, unless the last step was just evaluated.
    let (mean, pooled, per_kv) = match &st.last_eval {
        Some((s, acc)) if *s == step => summarize(acc),
        _ => {
            let (mean, pooled, per_kv) = summarize(&r.evaluate(data)?);
            st.evals.push((step, mean));
            (mean, pooled, per_kv)
        }
    };
    pb.finish_and_clear();
    Ok(Outcome::Done(RunRecord {
        arch,
        dim,
        lr,
        seed,
        accuracy: mean,
        pooled,
        per_kv,
        steps: step,
        seconds: seconds(),
        stopped: stopped.to_string(),
        final_loss: st.loss,
        params,
        evals: st.evals,
        file: 0,
    }))
}
