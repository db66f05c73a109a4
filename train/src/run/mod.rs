//! The training loop: one command encoder per optimizer step (zero the gradients; per
//! micro-batch the forward, a copy of its losses and the backward; then AdamW), one submit,
//! one read-back of the losses and the gradient norm.

use crate::args::{ScheduleArg, TrainArgs};
use crate::checkpoint_dir::{self, CheckpointData, TrainerState};
use crate::data;
use crate::model::{new_train_graph, TrainGraph};
use crate::schedule::{Decay, LrSchedule};
use crate::train_log::{LogRow, HEADER};
use fnv::FnvHasher;
use indicatif::{ProgressBar, ProgressStyle};
use loglinear_converter::checkpoint::Checkpoint;
use loglinear_converter::config_json::{parse_config, parse_lenient_json};
use loglinear_converter::export::{dequantize, ExportOptions, ExportedModel};
use loglinear_converter::layout::Layout;
use loglinear_converter::model_source::{is_gguf, AlignedBytes, IndexedGguf, LoadError};
use loglinear_converter::vocab::Vocabulary;
use loglinear_host_gpu::train::optim::{AdamW, AdamWConfig};
use loglinear_host_gpu::Gpu;
use loglinear_runtime::rng::SplitMix64;
use loglinear_runtime::{ModelConfig, WeightSource};
use serde_json::{json, Value};
use std::hash::Hasher;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod error;
pub use error::TrainError;

type Res<T = ()> = Result<T, TrainError>;

/// Weights by official key.
type WeightLookup = Box<dyn Fn(&str) -> Option<Vec<f32>>>;

/// Where the model's config and first weights come from.
enum Start {
    /// `--config`: official initialisation.
    Fresh,
    /// `--model` folder or GGUF: these weights by official key.
    Weights(WeightLookup),
    /// `--resume`: the saved checkpoint folder (loaded by key once the graph gives the
    /// parameter order).
    Resume(PathBuf),
}

fn read_text(path: &Path) -> Res<String> {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|source| TrainError::Read {
            path: path.to_path_buf(),
            source,
        })
}

fn parse_config_text(path: &Path, text: &str) -> Res<(ModelConfig, Layout)> {
    let path = path.to_path_buf();
    let json = parse_lenient_json(text).map_err(|source| TrainError::ConfigJson {
        path: path.clone(),
        source,
    })?;
    parse_config(&json).map_err(|source| TrainError::Config { path, source })
}

/// Imports the checkpoint folder `path`.
fn load_checkpoint(path: &Path) -> Res<Checkpoint> {
    Checkpoint::load(path).map_err(|source| {
        TrainError::Model(LoadError::Checkpoint {
            path: path.to_path_buf(),
            source,
        })
    })
}

/// What the model source gives: the config.json text, the config, the starting point and,
/// for a `--model` that has one, its vocabulary.
struct Source {
    config_json: String,
    config: ModelConfig,
    start: Start,
    vocabulary: Option<Vocabulary>,
}

/// The model's config.json text, config, starting point and vocabulary.
fn model_source(args: &TrainArgs, ckpt_dir: &Path) -> Res<Source> {
    if args.resume {
        if args.config.is_some() || args.init.is_some() {
            return Err(TrainError::Flag(
                "--resume takes the model from OUT/checkpoint: drop --config/--model",
            ));
        }
        let dir = checkpoint_dir::find(ckpt_dir)
            .ok_or_else(|| TrainError::NoCheckpoint(ckpt_dir.to_path_buf()))?;
        let cfg_path = dir.join("config.json");
        let text = read_text(&cfg_path)?;
        let (config, _) = parse_config_text(&cfg_path, &text)?;
        return Ok(Source {
            config_json: text,
            config,
            start: Start::Resume(dir),
            vocabulary: None,
        });
    }
    match (&args.config, &args.init) {
        (Some(path), None) => {
            let text = read_text(path)?;
            let (config, _) = parse_config_text(path, &text)?;
            Ok(Source {
                config_json: text,
                config,
                start: Start::Fresh,
                vocabulary: None,
            })
        }
        (None, Some(path)) if path.is_dir() => {
            let ckpt = load_checkpoint(path)?;
            let text = read_text(&path.join("config.json"))?;
            let config = ckpt.config;
            let layout = ckpt.layout;
            let vocabulary = ckpt.vocabulary.clone();
            let get = move |key: &str| {
                let name = layout.parse_key(key)?;
                ckpt.store.tensor(name).map(|v| dequantize(&v))
            };
            Ok(Source {
                config_json: text,
                config,
                start: Start::Weights(Box::new(get)),
                vocabulary,
            })
        }
        (None, Some(path)) if is_gguf(path) => {
            let bytes = AlignedBytes::read(path)?;
            let g = IndexedGguf::parse(bytes.as_bytes()).map_err(|source| TrainError::Gguf {
                path: path.clone(),
                source,
            })?;
            let config = *g.config();
            let vocabulary = Vocabulary::from_gguf(g.gguf().file());
            let (json, layout) = checkpoint_dir::official_config(&config)?;
            // Dequantize everything now: the parsed file borrows `bytes`.
            let mut weights = std::collections::HashMap::new();
            for name in config.tensor_names() {
                if let (Some(key), Some(view)) = (layout.key(name), g.tensor(name)) {
                    weights.insert(key, dequantize(&view));
                }
            }
            let text = serde_json::to_string_pretty(&json)?;
            let get = move |key: &str| weights.get(key).cloned();
            Ok(Source {
                config_json: text,
                config,
                start: Start::Weights(Box::new(get)),
                vocabulary,
            })
        }
        (None, Some(path)) => Err(TrainError::NotAModel(path.clone())),
        (None, None) => Err(TrainError::Flag(
            "give --config (new model), --model (fine-tune) or --resume",
        )),
        (Some(_), Some(_)) => Err(TrainError::Flag("--config and --model exclude each other")),
    }
}

/// Raw text is one token per byte, which is right only for a byte-level model: a text file
/// for a `--model` with a BPE vocabulary is refused before any work.
fn check_text_data(args: &TrainArgs, vocabulary: Option<&Vocabulary>) -> Res {
    let (Some(model), Some(Vocabulary::Bpe { .. })) = (&args.init, vocabulary) else {
        return Ok(());
    };
    let text = std::iter::once(&args.data)
        .chain(&args.val)
        .find(|p| data::TokenFormat::of_path(p) == data::TokenFormat::Bytes);
    match text {
        Some(text) => Err(TrainError::TextForBpe {
            data: text.clone(),
            model: model.clone(),
        }),
        None => Ok(()),
    }
}

/// FNV-1a-64 over the tokens' little-endian bytes: identifies the data a run was trained on,
/// wherever the file is.
fn fingerprint(tokens: &[u32]) -> String {
    let mut h = FnvHasher::default();
    for t in tokens {
        h.write(&t.to_le_bytes());
    }
    format!("{:016x}", h.finish())
}

/// The settings a resumed run must share with the saved one. The data are identified by
/// their tokens (count and fingerprint), not by their paths.
fn settings(args: &TrainArgs, train: &[u32], val: &[u32]) -> Value {
    json!({
        "train_tokens": train.len(),
        "train_fingerprint": fingerprint(train),
        "val_tokens": val.len(),
        "val_fingerprint": fingerprint(val),
        "val_windows": args.val_windows,
        "seq_len": args.seq_len,
        "batch": args.batch,
        "accum": args.accum,
        "lr": args.lr,
        "min_lr": args.min_lr(),
        "warmup": args.warmup,
        "schedule": format!("{:?}", args.schedule).to_lowercase(),
        "weight_decay": args.weight_decay,
        "beta1": args.beta1,
        "beta2": args.beta2,
        "eps": args.eps,
        "clip": args.clip,
        "seed": args.seed,
    })
}

fn check_args(args: &TrainArgs) -> Res {
    if args.seq_len == 0 || args.batch == 0 || args.accum == 0 {
        return Err(TrainError::Flag(
            "--context, --batch and --accum must be at least 1",
        ));
    }
    if args.steps == 0 {
        return Err(TrainError::Flag("--steps must be at least 1"));
    }
    if !(args.clip >= 0.0 && args.clip.is_finite()) {
        return Err(TrainError::Clip(args.clip));
    }
    let unit = |x: f64| (0.0..1.0).contains(&x);
    if !(unit(args.beta1) && unit(args.beta2)) {
        return Err(TrainError::Flag("--beta1 and --beta2 must be in [0, 1)"));
    }
    if !(args.eps > 0.0 && args.weight_decay >= 0.0 && args.weight_decay.is_finite()) {
        return Err(TrainError::Flag(
            "--eps must be positive and --weight-decay non-negative",
        ));
    }
    if let Some(p) = &args.export {
        if p.is_dir() {
            return Err(TrainError::ExportIsFolder(p.clone()));
        }
    }
    Ok(())
}

/// The training log, `step,tokens,lr,loss,bits_per_token,grad_norm,val_bits_per_token,seconds`.
struct Log {
    path: PathBuf,
    file: std::fs::File,
}

impl Log {
    /// Opens the log; on resume keeps only the rows up to `step` (a crash may have logged
    /// steps after the last checkpoint).
    fn open(path: PathBuf, resume_step: Option<u64>) -> Res<Self> {
        let mut kept = format!("{HEADER}\n");
        if let (Some(step), Ok(old)) = (resume_step, std::fs::read_to_string(&path)) {
            for line in old.lines().skip(1) {
                let s = line.split(',').next().and_then(|s| s.parse::<u64>().ok());
                if s.is_some_and(|s| s <= step) {
                    kept.push_str(line);
                    kept.push('\n');
                }
            }
        }
        checkpoint_dir::write_atomic(&path, kept.as_bytes())?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|source| TrainError::Log {
                action: "open",
                path: path.clone(),
                source,
            })?;
        Ok(Self { path, file })
    }

    fn row(&mut self, row: &LogRow) -> Res {
        writeln!(self.file, "{}", row.csv()).map_err(|source| TrainError::Log {
            action: "write",
            path: self.path.clone(),
            source,
        })
    }
}

/// The GPU side of a run.
struct Trainer<'g> {
    gpu: &'g Gpu,
    model: Box<dyn TrainGraph>,
    opt: AdamW,
    /// One token buffer per micro-batch (the forward copies from it inside the encoder).
    tokens: Vec<loglinear_host_gpu::wgpu::Buffer>,
    /// The losses of every micro-batch of a step, `[accum][batch][seq_len]`, then the
    /// optimizer's `[gradient norm, clip factor]`.
    losses: loglinear_host_gpu::wgpu::Buffer,
    batch: usize,
    seq_len: usize,
}

impl Trainer<'_> {
    fn window_len(&self) -> usize {
        self.batch * (self.seq_len + 1)
    }

    fn loss_bytes(&self) -> u64 {
        4 * (self.batch * self.seq_len) as u64
    }

    /// One optimizer step over `accum` micro-batches drawn from `train`; returns the mean loss
    /// (nats per token) and the gradient norm before clipping.
    fn step(
        &mut self,
        train: &[u32],
        rng: &mut SplitMix64,
        lr: f64,
        clip: Option<f32>,
    ) -> Res<(f64, f32)> {
        let accum = self.tokens.len();
        let scale = 1.0 / (self.batch * self.seq_len * accum) as f32;
        let mut enc = self.gpu.encoder("train_step");
        self.model.encode_zero_grads(&mut enc);
        let mut windows = Vec::with_capacity(self.window_len());
        for (i, buf) in self.tokens.iter().enumerate() {
            windows.clear();
            data::sample_windows(train, self.seq_len, self.batch, rng, &mut windows)?;
            self.gpu.write(buf, &windows);
            self.model.encode_forward(&mut enc, buf);
            let lb = self.loss_bytes();
            enc.copy_buffer_to_buffer(self.model.losses(), 0, &self.losses, i as u64 * lb, lb);
            self.model.encode_backward(&mut enc, scale);
        }
        self.opt.encode_step(self.gpu, &mut enc, lr, clip)?;
        // The gradient norm goes after the losses: one read-back per step.
        let n = accum * self.batch * self.seq_len;
        enc.copy_buffer_to_buffer(self.opt.report_buffer(), 0, &self.losses, 4 * n as u64, 8);
        self.gpu.submit_and_wait(enc)?;
        let words: Vec<f32> =
            bytemuck::pod_collect_to_vec(&self.gpu.read_bytes(&self.losses, 4 * (n + 2) as u64)?);
        let loss = words[..n].iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64;
        let grad_norm = words[n];
        Ok((loss, grad_norm))
    }

    /// Mean bits per token over `windows` (forward only; the gradients are not touched).
    fn validate(&self, windows: &[&[u32]]) -> Res<f64> {
        let mut total = 0.0f64;
        let mut count = 0usize;
        for group in windows.chunks(self.batch) {
            let mut tokens = Vec::with_capacity(self.window_len());
            for w in group {
                tokens.extend_from_slice(w);
            }
            // A short last group is padded with its first window; those rows are not counted.
            while tokens.len() < self.window_len() {
                tokens.extend_from_slice(group[0]);
            }
            let buf = &self.tokens[0];
            self.gpu.write(buf, &tokens);
            let mut enc = self.gpu.encoder("validate");
            self.model.encode_forward(&mut enc, buf);
            self.gpu.submit_and_wait(enc)?;
            let n = group.len() * self.seq_len;
            let losses: Vec<f32> = bytemuck::pod_collect_to_vec(
                &self.gpu.read_bytes(self.model.losses(), 4 * n as u64)?,
            );
            total += losses.iter().map(|&l| f64::from(l)).sum::<f64>();
            count += n;
        }
        Ok(total / count.max(1) as f64 / std::f64::consts::LN_2)
    }

    fn snapshot(&self, config_json: &str, state: TrainerState) -> Res<CheckpointData> {
        Ok(CheckpointData {
            config_json: config_json.to_string(),
            params: self.model.read_params(self.gpu)?,
            moments: self.opt.read_moments(self.gpu)?,
            optimizer_steps: self.opt.steps(),
            state,
        })
    }
}

fn progress_bar(steps: u64, start: u64) -> ProgressBar {
    let pb = ProgressBar::new(steps);
    pb.set_style(
        ProgressStyle::with_template(
            "training [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb.set_position(start);
    pb
}

/// `loglinear train`.
pub fn train(args: &TrainArgs) -> Res {
    check_args(args)?;
    let schedule = LrSchedule {
        peak: args.lr,
        min: args.min_lr(),
        warmup: args.warmup,
        total: args.steps,
        decay: match args.schedule {
            ScheduleArg::Cosine => Decay::Cosine,
            ScheduleArg::Constant => Decay::Constant,
        },
    };
    schedule.validate()?;
    std::fs::create_dir_all(&args.out).map_err(|source| TrainError::CreateDir {
        path: args.out.clone(),
        source,
    })?;
    let ckpt_dir = args.out.join("checkpoint");
    if !args.resume {
        if let Some(found) = checkpoint_dir::find(&ckpt_dir) {
            return Err(TrainError::CheckpointExists(found));
        }
    }
    let Source {
        config_json,
        config,
        start,
        vocabulary,
    } = model_source(args, &ckpt_dir)?;

    // Data.
    check_text_data(args, vocabulary.as_ref())?;
    let vocab = config.vocab_size;
    let all = data::load_tokens(&args.data, vocab)?;
    let (train, val) = match (&args.val, args.val_fraction) {
        (Some(p), _) => (all, data::load_tokens(p, vocab)?),
        (None, Some(f)) => data::split_tail(all, f)?,
        (None, None) => (all, Vec::new()),
    };
    data::check_len("the training data", &train, args.seq_len)?;
    let val_windows = data::eval_windows(&val, args.seq_len, args.val_windows);
    // Validation asked for but impossible is an error, an empty --val file included (it would
    // otherwise train with no validation and say nothing).
    let val_asked = args.val.is_some() || args.val_fraction.is_some();
    if val_windows.is_empty() && val_asked {
        return Err(TrainError::ValidationTooShort {
            tokens: val.len(),
            window: args.seq_len + 1,
        });
    }
    if val_windows.is_empty() && args.eval_every > 0 {
        eprintln!("warning: no validation data (--val or --val-fraction): --eval-every ignored");
    }
    let settings = settings(args, &train, &val);

    // Model and optimizer.
    let gpu = Gpu::new()?;
    let model = new_train_graph(&gpu, &config, args.batch, args.seq_len)?;
    let keys: Vec<String> = model.params().iter().map(|p| p.name.clone()).collect();
    let adam = AdamWConfig {
        beta1: args.beta1,
        beta2: args.beta2,
        eps: args.eps,
        weight_decay: args.weight_decay,
    };
    let mut opt = AdamW::new(&gpu, model.params(), adam)?;
    let mut state = TrainerState {
        step: 0,
        rng_state: args.seed,
        tokens_seen: 0,
        lr: 0.0,
        loss: f64::NAN,
        last_val_bpt: None,
        best_val_bpt: None,
        settings: settings.clone(),
    };
    match start {
        Start::Fresh => model.init_params(&gpu, args.seed)?,
        Start::Weights(get) => model.load_params(&gpu, &*get)?,
        Start::Resume(dir) => {
            let saved = checkpoint_dir::load(&dir, &keys)?;
            check_settings(&saved.state.settings, &settings)?;
            let by_key: std::collections::HashMap<&str, &Vec<f32>> = saved
                .params
                .iter()
                .map(|(k, _, v)| (k.as_str(), v))
                .collect();
            model.load_params(&gpu, &|k| by_key.get(k).map(|v| (*v).clone()))?;
            for (i, (m, v)) in saved.moments.iter().enumerate() {
                opt.load_moments(&gpu, i, m, v)?;
            }
            opt.set_steps(saved.optimizer_steps);
            state = saved.state;
            state.settings = settings.clone();
            if state.step >= args.steps {
                return Err(TrainError::ResumeAtEnd(state.step));
            }
        }
    }
    let tokens = (0..args.accum)
        .map(|_| gpu.storage_zeroed("train_tokens", 4 * (args.batch * (args.seq_len + 1)) as u64))
        .collect::<Result<Vec<_>, _>>()?;
    let losses = gpu.storage_zeroed(
        "train_losses",
        4 * (args.accum * args.batch * args.seq_len + 2) as u64,
    )?;
    let mut trainer = Trainer {
        gpu: &gpu,
        model,
        opt,
        tokens,
        losses,
        batch: args.batch,
        seq_len: args.seq_len,
    };

    let clip = (args.clip > 0.0).then_some(args.clip);
    let params: usize = trainer.model.params().iter().map(|p| p.len).sum();
    eprintln!(
        "training {} ({params} parameters) on {}: {} training tokens, {} validation windows; \
         {} x {} x {} tokens per step; steps {}..{}",
        config.arch.name(),
        gpu.describe_for_training(),
        train.len(),
        val_windows.len(),
        args.accum,
        args.batch,
        args.seq_len,
        state.step + 1,
        args.steps
    );

    let mut log = Log::open(
        args.out.join("train_log.csv"),
        args.resume.then_some(state.step),
    )?;
    let mut rng = SplitMix64::new(state.rng_state);
    let pb = progress_bar(args.steps, state.step);
    let started = Instant::now();
    let first_step = state.step;
    while state.step < args.steps {
        let step = state.step + 1;
        let lr = schedule.lr(step);
        let (loss, grad_norm) = trainer.step(&train, &mut rng, lr, clip)?;
        if !loss.is_finite() || !grad_norm.is_finite() {
            pb.abandon();
            return Err(TrainError::Diverged {
                step,
                loss,
                grad_norm,
            });
        }
        state.step = step;
        state.rng_state = rng.state;
        state.tokens_seen += (args.accum * args.batch * args.seq_len) as u64;
        state.lr = lr;
        state.loss = loss;
        let mut val_bits_per_token = None;
        let last = step == args.steps;
        if !val_windows.is_empty() && ((args.eval_every > 0 && step % args.eval_every == 0) || last)
        {
            let bpt = trainer.validate(&val_windows)?;
            state.last_val_bpt = Some(bpt);
            if state.best_val_bpt.is_none_or(|b| bpt < b) {
                state.best_val_bpt = Some(bpt);
            }
            val_bits_per_token = Some(bpt);
            pb.println(format!(
                "step {step}: train loss {loss:.4} nats ({:.4} bits/token), validation {bpt:.4} bits/token",
                loss / std::f64::consts::LN_2
            ));
        }
        let secs = started.elapsed().as_secs_f64();
        log.row(&LogRow {
            step,
            tokens: state.tokens_seen,
            lr,
            loss,
            grad_norm: f64::from(grad_norm),
            val_bits_per_token,
            seconds: secs,
        })?;
        let rate = (step - first_step) as f64 * (args.accum * args.batch * args.seq_len) as f64
            / secs.max(1e-9);
        pb.set_position(step);
        pb.set_message(format!("loss {loss:.4} lr {lr:.2e} {rate:.0} tok/s"));
        if (args.save_every > 0 && step % args.save_every == 0) || last {
            checkpoint_dir::save(&ckpt_dir, &trainer.snapshot(&config_json, state.clone())?)?;
        }
    }
    pb.finish_and_clear();
    eprintln!(
        "step {}: loss {:.4} nats/token{}; checkpoint in {}",
        state.step,
        state.loss,
        state
            .last_val_bpt
            .map(|b| format!(", validation {b:.4} bits/token"))
            .unwrap_or_default(),
        ckpt_dir.display()
    );
    if let Some(path) = &args.export {
        export(&ckpt_dir, path, args.export_type)?;
    }
    Ok(())
}

/// Fails naming the first setting that differs from the saved run's (`steps` and the per-run
/// options are not settings).
fn check_settings(saved: &Value, now: &Value) -> Res {
    let (Some(saved), Some(now)) = (saved.as_object(), now.as_object()) else {
        return Err(TrainError::NoSettings);
    };
    for (k, v) in now {
        let old = saved.get(k).unwrap_or(&Value::Null);
        if old != v {
            return Err(TrainError::SettingChanged {
                key: k.clone(),
                now: v.clone(),
                saved: old.clone(),
            });
        }
    }
    Ok(())
}

/// Exports the checkpoint folder to a GGUF file through the converter's path, checking that
/// the runtime reads it back.
fn export(ckpt_dir: &Path, path: &Path, matrix_type: loglinear_runtime::DType) -> Res {
    let ckpt = load_checkpoint(ckpt_dir)?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let opts = ExportOptions {
        name,
        matrix_type,
        overrides: Vec::new(),
    };
    let bytes = ExportedModel::from_checkpoint(&ckpt, &opts)?.to_gguf()?;
    let aligned = AlignedBytes::from_slice(&bytes);
    let g = IndexedGguf::parse(aligned.as_bytes()).map_err(TrainError::ExportReadBack)?;
    g.model().map_err(TrainError::ExportLoad)?;
    checkpoint_dir::write_atomic(path, &bytes)?;
    eprintln!(
        "exported {} ({} matrices, {} bytes)",
        path.display(),
        matrix_type.name(),
        bytes.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::fingerprint;

    /// A saved run's data fingerprint must not change, or resuming it would refuse the data.
    #[test]
    fn data_fingerprint_is_fnv1a_64_of_the_tokens_bytes() {
        assert_eq!(fingerprint(&[]), "cbf29ce484222325");
        assert_eq!(fingerprint(&[0, 1, 0xdead_beef]), "d6779d43ba4de1ba");
    }
}
