//! `loglinear mqar`: the paper's MQAR table (spec §9) with our GPU trainer — a sweep over
//! architectures × model widths × learning rates × seeds, each run trained on Zoology's MQAR
//! mixture and tested per key–value setting, with a resumable JSON results file and a
//! markdown table beside the paper's numbers.
//!
//! The protocol (Zoology, Arora et al.; the paper's table note; choices marked *ours*):
//!
//! * data ([`crate::mqar`]): vocabulary 8192, length 256, power-law query gaps (a = 0.01),
//!   random fill; one training set, the mixture of the `--kv` settings, reshuffled every
//!   epoch: `--train-examples` per setting, by default Zoology's `original_mqar_configs.py`
//!   (the config with the paper's learning-rate sweep and 32 epochs): 100 000 examples for kv
//!   4 and 20 000 for each of kv 8–64, 180 000 in all, so 32 epochs at batch 256 are 22 528
//!   steps (a second-hand note of the paper's setup says ~2500 steps, i.e. 20 000 examples in
//!   all; the earlier runs in BENCHMARKS.md used that cut, and it leaves most cells on the
//!   plateau). *Ours*: every setting at length 256, as the paper states; Zoology's file trains
//!   kv 4 at length 64 and kv 8 at 128. `--test-examples` test examples **per setting**. Data
//!   seeds are fixed (123 + 1000·kv for training, +10 for testing, Zoology's split), so every
//!   run sees the same data; `--seeds` seeds the model's initialisation and the shuffling.
//! * models: 2 layers, width (hidden size) = dim, RMSNorm (eps 1e-5) and a SwiGLU MLP of
//!   4·dim after every mixer (*ours*: the official GDN / Mamba-2 LM block; Zoology's MQAR
//!   configs use no MLP, `state_mixer = Identity`, and LayerNorm; no dropout, where Zoology
//!   has 0.1 on the embeddings). As Zoology's `LanguageModel`: the LM head is tied to the
//!   embedding (`--head tied`) and the weights get Zoology's `_init_weights` (`--init
//!   zoology`: Linear and embedding N(0, 0.02), the short convs PyTorch's Conv1d default);
//!   `--head untied --init official` gives the official LMs' head and fla's init instead.
//!   GDN: heads 1 / 2 / 2 at dims 16 / 32 / 64 (1 head below 32, else 2), head_k_dim =
//!   dim / heads, head_v_dim = `--gdn-expand-v` (default 2, as Zoology's GatedDeltaNet mixer
//!   and fla) × head_k_dim, short conv 4 without bias (*ours*: the output gate is kept;
//!   Zoology's MQAR configs turn it off). Mamba-2: expand 2 (d_inner =
//!   2·dim), head_dim 16 (heads = 2·dim / 16), state 16, 1 group, conv 4 with bias, one
//!   gated-norm group. Log-linear variants add the λ projection (15 levels; training uses
//!   exact levels for T = 256).
//! * loss and accuracy: cross-entropy on the query positions only (the others are ignored);
//!   accuracy = argmax = target on query positions, per kv setting; the reported number is the
//!   mean over the kv settings (as the paper's table), the pooled one (Zoology's
//!   `valid/accuracy`) is kept too and decides early stopping (> `--early-stop`).
//! * optimizer: AdamW (betas 0.9 / 0.999, eps 1e-8: torch's defaults, which Zoology uses),
//!   weight decay 0.1 (Zoology's default) on the weight matrices and embeddings (*ours*: the
//!   official no-decay group — norms, A_log, dt_bias, D, L, biases — is kept; Zoology decays
//!   all), no gradient clipping, cosine from the peak to 0 over the run stepped per step
//!   (Zoology steps it per epoch), no warmup unless `--warmup`.
//! * evaluation every `--eval-every` steps (default: once per epoch) and at the end; a run ends
//!   at its step count, on early stop, at `--max-seconds-per-run`, or when its loss is not
//!   finite (reported as diverged). The run's accuracy is its last evaluation's.
//!
//! Per (arch, dim) the table shows the learning rate with the best mean accuracy (mean over
//! seeds; ± their standard deviation when there are several). In a `--merge` only the seeds
//! of one file are pooled, and the file is named, since files may hold other settings.
//!
//! Cost: at the defaults a step is 65K tokens, but only the query positions are scored (4–64
//! of 256 per example, about 25 on average), so the final norm, the 8192-row LM head and the
//! loss run on the scored rows only (`GraphOptions::head_rows` = micro-batch × the most scored
//! positions of any example, 64 at the default kv settings: a quarter of the rows, logits
//! 0.5 GiB at batch 256 instead of 2 GiB). On an H200 that took a batch-128 step at dim 64 from
//! 38.5 to 29 ms (GDN) and from 30.5 to 21 ms (Mamba-2). Within that capacity the head is
//! recorded at eight row levels, and each micro-batch runs the smallest that holds its scored
//! rows (`TrainGraph::set_scored_rows`; about 4,000 of 16,384 at batch 256). The full protocol
//! (22 528 steps × 48 runs per seed) still takes many hours on one GPU. Within a fixed budget use
//! `--max-seconds-per-run` (the cosine is fitted to the steps that fit), one learning rate per
//! pass (results accumulate in `--output`; a second pass with another `--lrs` adds to the table),
//! and possibly a smaller `--batch` (more updates per second; not the protocol's 256), e.g.
//! `loglinear mqar --archs gdn --dims 64 --lrs 1e-3 --batch 128 --max-seconds-per-run 262
//! --eval-every 1000 --output mqar.json --md mqar.md`. Several processes sharing one GPU do not
//! add throughput (12 at once on the H200 each ran 10–13× slower); runs made with different
//! settings go into one table with `--merge a.json,b.json`.
//!
//! Several GPUs: the runs are independent, so `loglinear mqar --gpus 8 --output mqar.json --md
//! mqar.md` runs the sweep as 8 processes of this command, one per adapter (`--gpu INDEX` puts
//! one process on one adapter; indices in [`loglinear_host_gpu::adapters`]' order, discrete
//! GPUs first). The sweep's runs are dealt round-robin in its order; process k of P records its
//! runs in `mqar.share<k>of<P>.json` and checkpoints into that file's `.run/`, so the same
//! command (`--max-seconds` is passed on to every process) resumes each process where it
//! stopped; when all have finished, their runs are added to `--output` and the table is
//! written (`launch.rs`).
//!
//! Interruptions: the run in progress is checkpointed into `<out>.run/` (`loglinear train`'s
//! crash-safe folder: parameters, AdamW moments and step count, and in `trainer_state.json`
//! the sweep's settings and the run's state: step, step count after any cut, the shuffle's
//! generator and position, evaluations, loss, tokens, seconds) every `--checkpoint-every`
//! steps (default: at every evaluation). `--max-seconds S` bounds the command's wall-clock
//! time: when it runs out the run is checkpointed and the command exits successfully, and the
//! same command resumes that run first (made for machines that give each command a limited
//! time). A resumed run records exactly what an uninterrupted one would (`seconds` is the
//! total). A checkpoint of other settings, of a run the command does not do, or that cannot be
//! read is an error naming the folder (never discarded); a recorded run's checkpoint is
//! removed.

use loglinear_converter::command_paths::{CommandPaths, Reads, Writes};
use std::path::PathBuf;

pub mod data;
mod error;
mod launch;
mod results;
mod resume;
mod sweep;

pub use error::MqarError;
pub use launch::{GpuList, ProcessFailure, Share};
pub use results::*;

/// The target of every position but the queries: the loss skips it.
pub use loglinear_host_gpu::train::IGNORED_TARGET;
/// The default `--gdn-expand-v`: GDN value heads twice the key heads' width, as Zoology's
/// GatedDeltaNet mixer and fla's default.
pub const GDN_EXPAND_V: usize = 2;

/// An architecture of the sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum MqarArch {
    /// Log-linear Gated DeltaNet.
    #[value(name = "ll-gdn")]
    LlGdn,
    /// Gated DeltaNet.
    #[value(name = "gdn")]
    Gdn,
    /// Log-linear Mamba-2.
    #[value(name = "ll-mamba2")]
    LlMamba2,
    /// Mamba-2.
    #[value(name = "mamba2")]
    Mamba2,
}

impl MqarArch {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Self::LlGdn => "ll-gdn",
            Self::Gdn => "gdn",
            Self::LlMamba2 => "ll-mamba2",
            Self::Mamba2 => "mamba2",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        [Self::LlGdn, Self::Gdn, Self::LlMamba2, Self::Mamba2]
            .into_iter()
            .find(|a| a.name() == s)
    }

    /// The paper's mean accuracies (%) at dims 16 / 32 / 64 (spec §9; "≥ 99" as 99).
    fn paper(self, dim: usize) -> Option<&'static str> {
        let row = match self {
            Self::LlGdn => ["40.0 (1.4)", "84.4 (1.2)", "≥ 99"],
            Self::Gdn => ["38.4 (1.0)", "79.0 (2.1)", "≥ 99"],
            Self::LlMamba2 => ["55.9 (9.1)", "76.5 (4.8)", "92.9 (2.7)"],
            Self::Mamba2 => ["46.9 (2.3)", "75.1 (4.9)", "89.6 (6.1)"],
        };
        match dim {
            16 => Some(row[0]),
            32 => Some(row[1]),
            64 => Some(row[2]),
            _ => None,
        }
    }

    /// The paper table's column title.
    fn title(self) -> &'static str {
        match self {
            Self::LlGdn => "LL GDN",
            Self::Gdn => "GDN",
            Self::LlMamba2 => "LL Mamba-2",
            Self::Mamba2 => "Mamba-2",
        }
    }
}

/// The LM head of the sweep's models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MqarHead {
    /// The LM head is the embedding matrix (Zoology ties them).
    Tied,
    /// A separate `lm_head.weight` (the official language models).
    Untied,
}

impl MqarHead {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tied => "tied",
            Self::Untied => "untied",
        }
    }
}

/// The weight initialisation of the sweep's models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MqarInit {
    /// Zoology's `_init_weights`: Linear and embedding N(0, 0.02), convs PyTorch's default.
    Zoology,
    /// fla's `_init_weights`, as the official language models (N(0, 0.006)).
    Official,
}

impl MqarInit {
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Zoology => "zoology",
            Self::Official => "official",
        }
    }
}

/// A run as the sweep's messages name it.
fn run_label(arch: MqarArch, dim: usize, lr: f64, seed: u64) -> String {
    format!("{} dim {} lr {:.2e} seed {}", arch.name(), dim, lr, seed)
}

/// The training graph's options for `head` and `init`, with the head on at most `head_rows`
/// scored rows.
fn graph_options(head: MqarHead, init: MqarInit, head_rows: usize) -> crate::model::GraphOptions {
    use crate::model::{GraphOptions, InitScheme};
    GraphOptions {
        tie_embeddings: head == MqarHead::Tied,
        init: match init {
            MqarInit::Zoology => InitScheme::Zoology,
            MqarInit::Official => InitScheme::Official,
        },
        head_rows: Some(head_rows),
    }
}

/// `loglinear mqar`: the MQAR sweep.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct MqarArgs {
    /// Architectures.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ll-gdn,gdn,ll-mamba2,mamba2"
    )]
    pub archs: Vec<MqarArch>,
    /// Model widths (hidden sizes).
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    pub dims: Vec<usize>,
    /// Peak learning rates (the paper's logspace(−3, −1.5, 4)).
    #[arg(long, value_delimiter = ',', default_value = "1e-3,3.2e-3,1e-2,3.2e-2")]
    pub lrs: Vec<f64>,
    /// Seeds (a list: model initialisation and shuffling; the data are fixed).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub seeds: Vec<u64>,
    /// Key–value pair settings (trained on as a mixture, tested one by one).
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32,64")]
    pub kv: Vec<usize>,
    /// Training examples: one number per --kv setting, or a single number in all, split
    /// evenly. Default: Zoology's `original_mqar_configs.py`, 100000 for kv 4 and 20000 for
    /// every other setting.
    #[arg(long, value_delimiter = ',')]
    pub train_examples: Option<Vec<usize>>,
    /// Test examples per kv setting.
    #[arg(long, default_value_t = 1000)]
    pub test_examples: usize,
    /// Examples per step.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Examples per forward/backward (gradients accumulate over batch / micro-batch of them;
    /// also the evaluation batch); default: --batch. For GPUs whose storage-binding limit is
    /// under the head's f32 logits, `[batch × most scored positions][vocab]` (0.5 GiB at the
    /// defaults).
    #[arg(long)]
    pub micro_batch: Option<usize>,
    /// Epochs over the training set (ignored with --steps).
    #[arg(long, default_value_t = 32)]
    pub epochs: usize,
    /// Optimizer steps per run (overrides --epochs).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Evaluate every this many steps (default: once per epoch); always at the end.
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// Stop a run once its pooled test accuracy exceeds this (> 1 disables).
    #[arg(long, default_value_t = 0.99)]
    pub early_stop: f64,
    /// Fit each run's training into this many seconds: after its first 20 steps the step
    /// count is cut to what the measured step time allows (with a 10% margin for the
    /// evaluations; the cosine then ends at the cut), and training stops at this time anyway.
    #[arg(long)]
    pub max_seconds_per_run: Option<f64>,
    /// Save the current run's checkpoint (`<out>.run/`) every this many steps; default: at
    /// every evaluation (--eval-every).
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// This command's wall-clock budget in seconds (from its start): when it runs out, the
    /// current run is checkpointed and the command exits successfully; the same command
    /// continues it. Leave a margin for the checkpoint's write.
    #[arg(long)]
    pub max_seconds: Option<f64>,
    /// Pause (as at --max-seconds) after this many steps of this command (for tests).
    #[arg(long, hide = true)]
    pub pause_after_steps: Option<u64>,
    /// Linear warmup steps before the cosine.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// Results (JSON); runs already there with the same settings are skipped.
    #[arg(
        short = 'o',
        long = "output",
        alias = "out",
        value_name = "FILE.json",
        default_value = "mqar_results.json"
    )]
    pub out: PathBuf,
    /// The markdown table (rewritten after every run).
    #[arg(long)]
    pub md: Option<PathBuf>,
    /// The LM head: `tied` to the embedding matrix (Zoology's models) or `untied` (the
    /// official language models').
    #[arg(long, value_enum, default_value = "tied")]
    pub head: MqarHead,
    /// Weight initialisation: `zoology` (Linear and embedding weights N(0, 0.02), short convs
    /// PyTorch's Conv1d default) or `official` (fla's `_init_weights`, N(0, 0.006)).
    #[arg(long, value_enum, default_value = "zoology")]
    pub init: MqarInit,
    /// Train nothing: print (and with --md write) one table of the runs in these results files,
    /// e.g. of several processes that shared a GPU with different --lrs / --output. Each file's
    /// settings are listed under the table; the best learning rate per cell is taken over all.
    #[arg(long, value_delimiter = ',')]
    pub merge: Vec<PathBuf>,
    /// The GPU to train on: an index into the adapters in the order --gpus uses (discrete
    /// GPUs first, then integrated, virtual and CPU ones such as lavapipe, each kind in the
    /// driver's order; Vulkan, Metal or DX12). Default: wgpu's choice (high performance).
    #[arg(long, value_name = "INDEX")]
    pub gpu: Option<usize>,
    /// One process per GPU: a count N (adapters 0 to N-1, as --gpu numbers them) or a comma
    /// list of adapter indices (`2,3`; `0,0` is two processes on adapter 0). The sweep's runs
    /// are dealt round-robin; process k of P writes `<output stem>.share<k>of<P>.json` and its
    /// checkpoint folder beside --output, so the same command resumes, and when all have
    /// finished their runs are merged into --output and --md.
    #[arg(
        long,
        value_name = "SPEC",
        value_parser = GpuList::parse,
        conflicts_with_all = ["merge", "gpu", "share"]
    )]
    pub gpus: Option<GpuList>,
    /// Only this share of the sweep's runs, `k/P`: runs k, k + P, k + 2P, ... of its list (the
    /// processes of --gpus).
    #[arg(long, hide = true, value_parser = Share::parse)]
    pub share: Option<Share>,
    /// GDN value head width over key head width (head_v_dim = this × head_k_dim): 2 in
    /// Zoology's GatedDeltaNet mixer and fla's default; runs recorded before this flag used 1.
    #[arg(long, default_value_t = GDN_EXPAND_V)]
    pub gdn_expand_v: usize,
    /// Vocabulary size (Zoology: 8192; smaller for tests).
    #[arg(long, default_value_t = crate::mqar::data::ZOOLOGY_VOCAB, hide = true)]
    pub vocab: usize,
    /// Tokens per example (Zoology: 256; smaller for tests).
    #[arg(long = "context", alias = "seq-len", value_name = "TOKENS", default_value_t = crate::mqar::data::ZOOLOGY_SEQ_LEN, hide = true)]
    pub seq_len: usize,
}

impl MqarArgs {
    /// Every path the command reads and writes, checked before any work: the results file and
    /// the paused run's checkpoint folder beside it, the table, and with `--merge` the results
    /// files it reads (it then writes only `--md`).
    pub fn paths(&self) -> CommandPaths {
        let mut paths = CommandPaths::new();
        for merged in &self.merge {
            paths = paths.reads("--merge", Some(merged), Reads::File);
        }
        if self.merge.is_empty() {
            paths = paths
                .writes("--output", Some(&self.out), Writes::File)
                .writes(
                    "--output's checkpoint folder",
                    Some(&resume::run_dir(&self.out)),
                    Writes::Folder { holds: &[] },
                );
        }
        paths.writes("--md", self.md.as_deref(), Writes::File)
    }
}

/// Runs `loglinear mqar`.
pub fn run(args: &MqarArgs) -> Result<(), MqarError> {
    if !args.merge.is_empty() {
        let table = merge_tables(args)?;
        if let Some(md) = &args.md {
            write_atomic(md, &table)?;
        }
        print!("{table}");
        return Ok(());
    }
    if let Some(gpus) = &args.gpus {
        return launch::run(args, gpus);
    }
    sweep::run(args)
}

/// The model config of `arch` at width `dim` for `vocab` (see the module docs).
pub fn model_config(
    arch: MqarArch,
    dim: usize,
    vocab: usize,
    gdn_expand_v: usize,
) -> Result<loglinear_runtime::ModelConfig, MqarError> {
    use loglinear_runtime::{Arch, ModelConfig, LAMBDA_LEVELS};
    let (a, gdn) = match arch {
        MqarArch::LlGdn => (Arch::LogLinearGatedDeltaNet, true),
        MqarArch::Gdn => (Arch::GatedDeltaNet, true),
        MqarArch::LlMamba2 => (Arch::LogLinearMamba2, false),
        MqarArch::Mamba2 => (Arch::Mamba2, false),
    };
    let c = if gdn {
        let heads = if dim < 32 { 1 } else { 2 };
        if dim % heads != 0 {
            return Err(MqarError::GdnHeads { dim, heads });
        }
        ModelConfig {
            arch: a,
            vocab_size: vocab,
            hidden_size: dim,
            num_layers: 2,
            intermediate_size: 4 * dim,
            norm_eps: 1e-5,
            num_heads: heads,
            head_k_dim: dim / heads,
            head_v_dim: gdn_expand_v * dim / heads,
            num_groups: heads,
            conv_kernel: 4,
            conv_bias: false,
            norm_group_size: gdn_expand_v * dim / heads,
            lambda_levels: if a.is_log_linear() { LAMBDA_LEVELS } else { 0 },
        }
    } else {
        let (head_dim, d_inner) = (16, 2 * dim);
        if d_inner % head_dim != 0 {
            return Err(MqarError::Mamba2Heads {
                dim,
                d_inner,
                head_dim,
            });
        }
        ModelConfig {
            arch: a,
            vocab_size: vocab,
            hidden_size: dim,
            num_layers: 2,
            intermediate_size: 4 * dim,
            norm_eps: 1e-5,
            num_heads: d_inner / head_dim,
            head_k_dim: 16,
            head_v_dim: head_dim,
            num_groups: 1,
            conv_kernel: 4,
            conv_bias: true,
            norm_group_size: d_inner,
            lambda_levels: if a.is_log_linear() { LAMBDA_LEVELS } else { 0 },
        }
    };
    c.validate()?;
    Ok(c)
}

/// The settings that make runs comparable (a results file holds runs of one setting).
fn settings_json(args: &MqarArgs) -> serde_json::Value {
    let mut settings = serde_json::json!({
        "vocab": args.vocab,
        "seq_len": args.seq_len,
        "kv": args.kv,
        "train_examples": train_counts(args).ok(),
        "test_examples": args.test_examples,
        "batch": args.batch,
        "epochs": args.epochs,
        "steps": args.steps,
        "eval_every": args.eval_every,
        "early_stop": args.early_stop,
        "max_seconds_per_run": args.max_seconds_per_run,
        "warmup": args.warmup,
        "head": args.head.name(),
        "init": args.init.name(),
    });
    // Absent means 1: the results files written before the flag existed used dv = dk.
    if args.gdn_expand_v != 1 {
        settings["gdn_expand_v"] = args.gdn_expand_v.into();
    }
    settings
}

/// Checks the arguments; every error names the flag.
pub fn check_args(args: &MqarArgs) -> Result<(), MqarError> {
    let flag = |message: String| Err(MqarError::Flag(message));
    if args.archs.is_empty() || args.dims.is_empty() || args.lrs.is_empty() {
        return flag("--archs, --dims and --lrs must not be empty".into());
    }
    if args.seeds.is_empty() || args.kv.is_empty() {
        return flag("--seeds and --kv must not be empty".into());
    }
    if let Some(lr) = args.lrs.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
        return flag(format!("--lrs: learning rates must be positive, got {lr}"));
    }
    if args.batch == 0 {
        return flag("--batch must be at least 1".into());
    }
    if let Some(m) = args.micro_batch {
        if m == 0 || args.batch % m != 0 {
            return flag(format!(
                "--micro-batch {m} must be at least 1 and divide --batch {}",
                args.batch
            ));
        }
    }
    train_counts(args)?;
    if !(1..=4).contains(&args.gdn_expand_v) {
        return flag(format!(
            "--gdn-expand-v must be 1 to 4, got {}",
            args.gdn_expand_v
        ));
    }
    if args.test_examples == 0 {
        return flag("--test-examples must be at least 1".into());
    }
    if args.steps == Some(0) || (args.steps.is_none() && args.epochs == 0) {
        return flag("--steps / --epochs must be at least 1".into());
    }
    if args.eval_every == Some(0) {
        return flag("--eval-every must be at least 1".into());
    }
    // NaN would never stop a run and reads as null in the results file's settings.
    if args.early_stop.is_nan() {
        return flag("--early-stop must be a number (above 1 disables it), got NaN".into());
    }
    if let Some(s) = args.max_seconds_per_run {
        if !(s.is_finite() && s > 0.0) {
            return flag(format!("--max-seconds-per-run must be positive, got {s}"));
        }
    }
    if args.checkpoint_every == Some(0) {
        return flag("--checkpoint-every must be at least 1".into());
    }
    if let Some(s) = args.max_seconds {
        if !(s.is_finite() && s > 0.0) {
            return flag(format!("--max-seconds must be positive, got {s}"));
        }
    }
    if args.pause_after_steps == Some(0) {
        return flag("--pause-after-steps must be at least 1".into());
    }
    for &kv in &args.kv {
        data_config(args, kv)
            .check()
            .map_err(|e| MqarError::Flag(format!("--kv {kv}: {e}")))?;
    }
    for &arch in &args.archs {
        for &dim in &args.dims {
            model_config(arch, dim, args.vocab, args.gdn_expand_v)
                .map_err(|e| MqarError::Flag(format!("--dims {dim}: {e}")))?;
        }
    }
    Ok(())
}

fn data_config(args: &MqarArgs, kv: usize) -> crate::mqar::data::MqarConfig {
    crate::mqar::data::MqarConfig {
        vocab_size: args.vocab,
        seq_len: args.seq_len,
        ..crate::mqar::data::MqarConfig::zoology(kv)
    }
}

/// Training examples per kv setting: `--train-examples` as given (one per setting), its one
/// number split evenly (the first settings take the remainder), or Zoology's counts.
pub fn train_counts(args: &MqarArgs) -> Result<Vec<usize>, MqarError> {
    let n = args.kv.len();
    let Some(given) = &args.train_examples else {
        return Ok(args
            .kv
            .iter()
            .map(|&kv| zoology_train_examples(kv))
            .collect());
    };
    let counts = match given[..] {
        [all] => (0..n).map(|i| all / n + usize::from(i < all % n)).collect(),
        ref each if each.len() == n => each.to_vec(),
        ref each => {
            return Err(MqarError::Flag(format!(
                "--train-examples: {} numbers for {n} --kv settings (give one per setting, or one \
                 number in all)",
                each.len()
            )))
        }
    };
    if counts.contains(&0) {
        return Err(MqarError::Flag(format!(
            "--train-examples: every kv setting needs at least one example, got {counts:?}"
        )));
    }
    Ok(counts)
}

/// Zoology's training examples for a `kv` setting; a setting outside Zoology's takes the
/// count of its last one.
fn zoology_train_examples(kv: usize) -> usize {
    use crate::mqar::data::{ZOOLOGY_KV_PAIRS, ZOOLOGY_TRAIN_EXAMPLES};
    let i = ZOOLOGY_KV_PAIRS.iter().position(|&z| z == kv);
    ZOOLOGY_TRAIN_EXAMPLES[i.unwrap_or(ZOOLOGY_TRAIN_EXAMPLES.len() - 1)]
}

/// Steps per epoch: the training set in batches, the last one partial.
fn steps_per_epoch(args: &MqarArgs) -> u64 {
    let total: usize = train_counts(args).map_or(0, |c| c.iter().sum());
    total.div_ceil(args.batch) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        mqar: MqarArgs,
    }

    fn run(file: usize, seed: u64, accuracy: f64) -> RunRecord {
        RunRecord {
            arch: MqarArch::Gdn,
            dim: 16,
            lr: 1e-3,
            seed,
            accuracy,
            pooled: accuracy,
            per_kv: vec![(4, accuracy)],
            steps: 10,
            seconds: 1.0,
            stopped: "steps".into(),
            final_loss: 1.0,
            params: 1,
            evals: vec![(10, accuracy)],
            file,
        }
    }

    /// A flag out of range and results files that cannot be used are refused with the error
    /// that says which, naming the flag or the file.
    #[test]
    fn bad_flags_and_results_files_are_typed_errors() {
        let dir = std::env::temp_dir().join(format!("mqar-errors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("r.json");
        let o = out.to_str().unwrap();

        let args = Cli::parse_from(["mqar", "--batch", "0", "--out", o]).mqar;
        let e = check_args(&args).unwrap_err();
        assert!(
            matches!(&e, MqarError::Flag(m) if m.contains("--batch")),
            "{e}"
        );

        let args = Cli::parse_from(["mqar", "--out", o]).mqar;
        std::fs::write(&out, "not json").unwrap();
        let e = load_results(&args).unwrap_err();
        assert!(matches!(e, MqarError::NotResultsJson { .. }), "{e}");
        assert!(e.to_string().contains(o), "{e}");
        std::fs::write(&out, r#"{"settings": {}, "runs": []}"#).unwrap();
        let e = load_results(&args).unwrap_err();
        assert!(matches!(e, MqarError::ResultsOfOtherSettings { .. }), "{e}");
        std::fs::write(&out, settings_only(&args)).unwrap();
        let e = load_results(&args).unwrap_err();
        assert!(matches!(e, MqarError::NoRuns { .. }), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Without `--train-examples` each setting takes Zoology's count, one outside Zoology's
    /// that of its last setting; the `--gdn-expand-v` default is `GDN_EXPAND_V`.
    #[test]
    fn defaults_are_zoologys() {
        let args = Cli::parse_from(["mqar"]).mqar;
        assert_eq!(train_counts(&args).unwrap(), data::ZOOLOGY_TRAIN_EXAMPLES);
        assert_eq!(args.gdn_expand_v, GDN_EXPAND_V);
        let args = Cli::parse_from(["mqar", "--kv", "2,64,4"]).mqar;
        assert_eq!(train_counts(&args).unwrap(), [20_000, 20_000, 100_000]);
    }

    /// A results file with this command's settings and no `runs`.
    fn settings_only(args: &MqarArgs) -> String {
        serde_json::json!({ "settings": settings_json(args) }).to_string()
    }

    /// Runs of two results files (other settings) with the same arch, dim, lr and seed are
    /// two candidates for the cell, never two seeds of one.
    #[test]
    fn merged_files_are_not_pooled_as_seeds() {
        let args = Cli::parse_from(["mqar", "--merge", "dir/a.json,b.json", "--kv", "4"]).mqar;
        let runs = [run(0, 1, 0.2), run(1, 1, 0.6), run(1, 2, 0.4)];
        let (lr, at) = best_lr(&runs, MqarArch::Gdn, 16).unwrap();
        assert!(same_lr(lr, 1e-3));
        assert_eq!(at.len(), 2);
        assert!(at.iter().all(|r| r.file == 1));
        let table = markdown(&args, &runs);
        assert!(
            table.contains("| 16 | – / 46.9 (2.3) | – / 55.9 (9.1) | 50.0 (10.0) / 38.4 (1.0) |"),
            "{table}"
        );
        assert!(
            table.contains("| gdn | 16 | `b.json` | 1.00e-3 | 50.0 (10.0) |"),
            "{table}"
        );
        assert!(
            table.contains("| gdn | 16 | `a.json` | 1.00e-3 | 1 | 20.0 |"),
            "{table}"
        );
        // Outside a merge there is no file column.
        let one = Cli::parse_from(["mqar", "--kv", "4"]).mqar;
        let table = markdown(&one, &runs[1..]);
        assert!(
            table.contains("| gdn | 16 | 1.00e-3 | 50.0 (10.0) |"),
            "{table}"
        );
    }
}
