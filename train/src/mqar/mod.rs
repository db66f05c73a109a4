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
//! 38.5 to 29 ms (GDN) and from 30.5 to 21 ms (Mamba-2). The full protocol (22 528 steps × 48
//! runs per seed) still takes many hours on one GPU. Within a fixed budget use
//! `--max-seconds-per-run` (the cosine is fitted to the steps that fit), one learning rate per
//! pass (results accumulate in `--out`; a second pass with another `--lrs` adds to the table),
//! and possibly a smaller `--batch` (more updates per second; not the protocol's 256), e.g.
//! `loglinear mqar --archs gdn --dims 64 --lrs 1e-3 --batch 128 --max-seconds-per-run 262
//! --eval-every 1000 --out mqar.json --md mqar.md`. Several processes sharing one GPU do not
//! add throughput (12 at once on the H200 each ran 10–13× slower); runs made with different
//! settings go into one table with `--merge a.json,b.json`.
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

use std::path::PathBuf;

pub mod data;
mod resume;

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

/// The weight initialisation of the sweep's models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MqarInit {
    /// Zoology's `_init_weights`: Linear and embedding N(0, 0.02), convs PyTorch's default.
    Zoology,
    /// fla's `_init_weights`, as the official language models (N(0, 0.006)).
    Official,
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
#[derive(clap::Args, Debug, Clone)]
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
    /// under the head's f32 logits, [batch × most scored positions][vocab] (0.5 GiB at the
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
    #[arg(long, default_value = "mqar_results.json")]
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
    /// e.g. of several processes that shared a GPU with different --lrs / --out. Each file's
    /// settings are listed under the table; the best learning rate per cell is taken over all.
    #[arg(long, value_delimiter = ',')]
    pub merge: Vec<PathBuf>,
    /// GDN value head width over key head width (head_v_dim = this × head_k_dim): 2 in
    /// Zoology's GatedDeltaNet mixer and fla's default; runs recorded before this flag used 1.
    #[arg(long, default_value_t = 2)]
    pub gdn_expand_v: usize,
    /// Vocabulary size (Zoology: 8192; smaller for tests).
    #[arg(long, default_value_t = crate::mqar::data::ZOOLOGY_VOCAB, hide = true)]
    pub vocab: usize,
    /// Tokens per example (Zoology: 256; smaller for tests).
    #[arg(long, default_value_t = crate::mqar::data::ZOOLOGY_SEQ_LEN, hide = true)]
    pub seq_len: usize,
}

/// Runs `loglinear mqar`.
pub fn run(args: &MqarArgs) -> Result<(), Box<dyn std::error::Error>> {
    if !args.merge.is_empty() {
        let table = merge_tables(args)?;
        if let Some(md) = &args.md {
            write_atomic(md, &table)?;
        }
        print!("{table}");
        return Ok(());
    }
    gpu_run::run(args)
}

/// The model config of `arch` at width `dim` for `vocab` (see the module docs).
pub fn model_config(
    arch: MqarArch,
    dim: usize,
    vocab: usize,
    gdn_expand_v: usize,
) -> Result<loglinear_runtime::ModelConfig, String> {
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
            return Err(format!("dim {dim} is not divisible by {heads} GDN heads"));
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
            return Err(format!(
                "Mamba-2 dim {dim}: d_inner {d_inner} is not a multiple of head_dim 16"
            ));
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
    c.validate().map_err(|e| format!("model config: {e}"))?;
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
        "head": format!("{:?}", args.head).to_lowercase(),
        "init": format!("{:?}", args.init).to_lowercase(),
    });
    // Absent means 1: the results files written before the flag existed used dv = dk.
    if args.gdn_expand_v != 1 {
        settings["gdn_expand_v"] = args.gdn_expand_v.into();
    }
    settings
}

/// Checks the arguments; every error names the flag.
pub fn check_args(args: &MqarArgs) -> Result<(), String> {
    if args.archs.is_empty() || args.dims.is_empty() || args.lrs.is_empty() {
        return Err("--archs, --dims and --lrs must not be empty".into());
    }
    if args.seeds.is_empty() || args.kv.is_empty() {
        return Err("--seeds and --kv must not be empty".into());
    }
    if let Some(lr) = args.lrs.iter().find(|l| !(l.is_finite() && **l > 0.0)) {
        return Err(format!("--lrs: learning rates must be positive, got {lr}"));
    }
    if args.batch == 0 {
        return Err("--batch must be at least 1".into());
    }
    if let Some(m) = args.micro_batch {
        if m == 0 || args.batch % m != 0 {
            return Err(format!(
                "--micro-batch {m} must be at least 1 and divide --batch {}",
                args.batch
            ));
        }
    }
    train_counts(args)?;
    if !(1..=4).contains(&args.gdn_expand_v) {
        return Err(format!(
            "--gdn-expand-v must be 1 to 4, got {}",
            args.gdn_expand_v
        ));
    }
    if args.test_examples == 0 {
        return Err("--test-examples must be at least 1".into());
    }
    if args.steps == Some(0) || (args.steps.is_none() && args.epochs == 0) {
        return Err("--steps / --epochs must be at least 1".into());
    }
    if args.eval_every == Some(0) {
        return Err("--eval-every must be at least 1".into());
    }
    // NaN would never stop a run and reads as null in the results file's settings.
    if args.early_stop.is_nan() {
        return Err("--early-stop must be a number (above 1 disables it), got NaN".into());
    }
    if let Some(s) = args.max_seconds_per_run {
        if !(s.is_finite() && s > 0.0) {
            return Err(format!("--max-seconds-per-run must be positive, got {s}"));
        }
    }
    if args.checkpoint_every == Some(0) {
        return Err("--checkpoint-every must be at least 1".into());
    }
    if let Some(s) = args.max_seconds {
        if !(s.is_finite() && s > 0.0) {
            return Err(format!("--max-seconds must be positive, got {s}"));
        }
    }
    if args.pause_after_steps == Some(0) {
        return Err("--pause-after-steps must be at least 1".into());
    }
    for &kv in &args.kv {
        data_config(args, kv)
            .check()
            .map_err(|e| format!("--kv {kv}: {e}"))?;
    }
    for &arch in &args.archs {
        for &dim in &args.dims {
            model_config(arch, dim, args.vocab, args.gdn_expand_v)
                .map_err(|e| format!("--dims {dim}: {e}"))?;
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
pub fn train_counts(args: &MqarArgs) -> Result<Vec<usize>, String> {
    let n = args.kv.len();
    let Some(given) = &args.train_examples else {
        return Ok(args
            .kv
            .iter()
            .map(|&kv| if kv == 4 { 100_000 } else { 20_000 })
            .collect());
    };
    let counts = match given[..] {
        [all] => (0..n).map(|i| all / n + usize::from(i < all % n)).collect(),
        ref each if each.len() == n => each.to_vec(),
        ref each => {
            return Err(format!(
                "--train-examples: {} numbers for {n} --kv settings (give one per setting, or one \
                 number in all)",
                each.len()
            ))
        }
    };
    if counts.contains(&0) {
        return Err(format!(
            "--train-examples: every kv setting needs at least one example, got {counts:?}"
        ));
    }
    Ok(counts)
}

/// Steps per epoch: the training set in batches, the last one partial.
fn steps_per_epoch(args: &MqarArgs) -> u64 {
    let total: usize = train_counts(args).map_or(0, |c| c.iter().sum());
    total.div_ceil(args.batch) as u64
}

/// One finished run, as stored in the results file.
#[derive(Clone, Debug)]
pub struct RunRecord {
    pub arch: MqarArch,
    pub dim: usize,
    pub lr: f64,
    pub seed: u64,
    /// Mean over kv settings of the per-setting accuracy (0..1).
    pub accuracy: f64,
    /// Zoology's pooled accuracy over all scored positions.
    pub pooled: f64,
    pub per_kv: Vec<(usize, f64)>,
    pub steps: u64,
    pub seconds: f64,
    /// `steps`, `early-stop`, `time-budget` (cut to fit `--max-seconds-per-run`), `time`
    /// (stopped at it) or `diverged`.
    pub stopped: String,
    pub final_loss: f64,
    pub params: usize,
    /// (step, mean accuracy) of every evaluation.
    pub evals: Vec<(u64, f64)>,
    /// Which `--merge` file the run came from (0 outside a merge; not saved). Runs of
    /// different files are never pooled as seeds: their settings may differ.
    pub file: usize,
}

impl RunRecord {
    fn same_run(&self, arch: MqarArch, dim: usize, lr: f64, seed: u64) -> bool {
        self.arch == arch && self.dim == dim && self.seed == seed && same_lr(self.lr, lr)
    }

    fn to_json(&self) -> serde_json::Value {
        let per_kv: serde_json::Map<String, serde_json::Value> = self
            .per_kv
            .iter()
            .map(|(kv, a)| (kv.to_string(), serde_json::json!(a)))
            .collect();
        serde_json::json!({
            "arch": self.arch.name(),
            "dim": self.dim,
            "lr": self.lr,
            "seed": self.seed,
            "accuracy": self.accuracy,
            "pooled_accuracy": self.pooled,
            "per_kv": per_kv,
            "steps": self.steps,
            "seconds": self.seconds,
            "stopped": self.stopped,
            "final_loss": finite_or_null(self.final_loss),
            "params": self.params,
            "evals": self.evals.iter().map(|(s, a)| serde_json::json!([s, a])).collect::<Vec<_>>(),
        })
    }

    fn from_json(v: &serde_json::Value) -> Option<Self> {
        let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
        let u = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
        let mut per_kv: Vec<(usize, f64)> = v
            .get("per_kv")?
            .as_object()?
            .iter()
            .filter_map(|(k, a)| Some((k.parse().ok()?, a.as_f64()?)))
            .collect();
        per_kv.sort_by_key(|p| p.0);
        Some(Self {
            arch: MqarArch::from_name(v.get("arch")?.as_str()?)?,
            dim: u("dim")? as usize,
            lr: f("lr")?,
            seed: u("seed")?,
            accuracy: f("accuracy")?,
            pooled: f("pooled_accuracy").unwrap_or(f64::NAN),
            per_kv,
            steps: u("steps").unwrap_or(0),
            seconds: f("seconds").unwrap_or(0.0),
            stopped: v.get("stopped")?.as_str()?.to_string(),
            final_loss: f("final_loss").unwrap_or(f64::NAN),
            params: u("params").unwrap_or(0) as usize,
            evals: v
                .get("evals")
                .and_then(|e| e.as_array())
                .map(|e| {
                    e.iter()
                        .filter_map(|p| Some((p.get(0)?.as_u64()?, p.get(1)?.as_f64()?)))
                        .collect()
                })
                .unwrap_or_default(),
            file: 0,
        })
    }
}

fn finite_or_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!(x)
    } else {
        serde_json::Value::Null
    }
}

fn same_lr(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Reads the runs of an earlier invocation (none when the file does not exist). A file made
/// with other settings is an error: mixing them would compare unlike runs.
pub fn load_results(args: &MqarArgs) -> Result<Vec<RunRecord>, String> {
    let text = match std::fs::read_to_string(&args.out) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", args.out.display())),
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not MQAR results JSON: {e}", args.out.display()))?;
    let want = settings_json(args);
    if v.get("settings") != Some(&want) {
        return Err(format!(
            "{} holds runs made with other settings ({}); these are {}: use another --out",
            args.out.display(),
            v.get("settings").map_or("none".into(), |s| s.to_string()),
            want
        ));
    }
    let runs = v
        .get("runs")
        .and_then(|r| r.as_array())
        .ok_or_else(|| format!("{}: no `runs` array", args.out.display()))?;
    runs.iter()
        .map(|r| {
            RunRecord::from_json(r)
                .ok_or_else(|| format!("{}: a run record is malformed: {r}", args.out.display()))
        })
        .collect()
}

/// One markdown report of the runs in the `--merge` files (their settings may differ: each
/// is listed, every run names its file, and seeds are pooled within a file only).
pub fn merge_tables(args: &MqarArgs) -> Result<String, String> {
    let mut runs = Vec::new();
    let mut notes = String::from("\n## Results files\n\n");
    for (file, path) in args.merge.iter().enumerate() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not MQAR results JSON: {e}", path.display()))?;
        let file_runs = v
            .get("runs")
            .and_then(|r| r.as_array())
            .ok_or_else(|| format!("{}: no `runs` array", path.display()))?;
        for r in file_runs {
            let mut run = RunRecord::from_json(r)
                .ok_or_else(|| format!("{}: a run record is malformed: {r}", path.display()))?;
            run.file = file;
            runs.push(run);
        }
        let settings = v.get("settings").map_or("none".into(), |s| s.to_string());
        notes.push_str(&format!(
            "- `{}` ({} run{}): {settings}\n",
            path.display(),
            file_runs.len(),
            if file_runs.len() == 1 { "" } else { "s" }
        ));
    }
    Ok(markdown(args, &runs) + &notes)
}

/// Writes every run (atomically: a temporary file renamed over the old one) and the markdown.
pub fn save_results(args: &MqarArgs, runs: &[RunRecord]) -> Result<(), String> {
    let v = serde_json::json!({
        "settings": settings_json(args),
        "runs": runs.iter().map(RunRecord::to_json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
    write_atomic(&args.out, &text)?;
    if let Some(md) = &args.md {
        write_atomic(md, &markdown(args, runs))?;
    }
    Ok(())
}

fn write_atomic(path: &std::path::Path, text: &str) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Mean and (population) standard deviation.
fn mean_std(x: &[f64]) -> (f64, f64) {
    let n = x.len().max(1) as f64;
    let m = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n;
    (m, var.sqrt())
}

/// The best learning rate of (arch, dim) by mean accuracy over seeds: (lr, runs at it). The
/// seeds pooled are those of one results file (`RunRecord::file`).
fn best_lr(runs: &[RunRecord], arch: MqarArch, dim: usize) -> Option<(f64, Vec<&RunRecord>)> {
    let mut groups: Vec<(usize, f64)> = Vec::new();
    for r in runs.iter().filter(|r| r.arch == arch && r.dim == dim) {
        if !groups.iter().any(|&(f, l)| f == r.file && same_lr(l, r.lr)) {
            groups.push((r.file, r.lr));
        }
    }
    groups
        .into_iter()
        .map(|(file, lr)| {
            let at: Vec<&RunRecord> = runs
                .iter()
                .filter(|r| r.arch == arch && r.dim == dim && r.file == file && same_lr(r.lr, lr))
                .collect();
            (lr, at)
        })
        .max_by(|a, b| {
            let ma = mean_std(&a.1.iter().map(|r| r.accuracy).collect::<Vec<_>>()).0;
            let mb = mean_std(&b.1.iter().map(|r| r.accuracy).collect::<Vec<_>>()).0;
            ma.total_cmp(&mb)
        })
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

fn pct_std(x: &[f64]) -> String {
    let (m, s) = mean_std(x);
    if x.len() > 1 {
        format!("{} ({})", pct(m), pct(s))
    } else {
        pct(m)
    }
}

/// The markdown report: the paper-style table (ours / paper), then per (arch, dim) the best
/// learning rate with per-kv accuracies, then every run.
pub fn markdown(args: &MqarArgs, runs: &[RunRecord]) -> String {
    let mut s = String::new();
    s.push_str("# MQAR: mean accuracy (%) over kv settings, ours / paper\n\n");
    if args.merge.is_empty() {
        s.push_str(&format!(
            "Sequence length {}, vocab {}, kv {:?}, training examples {:?} (per kv setting), {} \
             test examples per kv setting, batch {}; best learning rate per cell; paper: 5 \
             seeds, mean (std).\n\n",
            args.seq_len,
            args.vocab,
            args.kv,
            train_counts(args).unwrap_or_default(),
            args.test_examples,
            args.batch
        ));
    } else {
        s.push_str(
            "Runs of the results files listed at the end (their settings there); best learning \
             rate per cell over all of them; paper: 5 seeds, mean (std).\n\n",
        );
    }
    let archs = [
        MqarArch::Mamba2,
        MqarArch::LlMamba2,
        MqarArch::Gdn,
        MqarArch::LlGdn,
    ];
    s.push_str("| dim |");
    for a in archs {
        s.push_str(&format!(" {} |", a.title()));
    }
    s.push_str("\n| --- |");
    for _ in archs {
        s.push_str(" --- |");
    }
    s.push('\n');
    let mut dims: Vec<usize> = args.dims.clone();
    for r in runs {
        if !dims.contains(&r.dim) {
            dims.push(r.dim);
        }
    }
    dims.sort_unstable();
    for &dim in &dims {
        s.push_str(&format!("| {dim} |"));
        for a in archs {
            let ours = best_lr(runs, a, dim).map_or("–".to_string(), |(_, at)| {
                pct_std(&at.iter().map(|r| r.accuracy).collect::<Vec<_>>())
            });
            s.push_str(&format!(" {ours} / {} |", a.paper(dim).unwrap_or("–")));
        }
        s.push('\n');
    }
    // In a merge, runs of different files are apart (their settings may differ): name the file.
    let merged = !args.merge.is_empty();
    let file_col = |r: &RunRecord| match args.merge.get(r.file) {
        Some(p) => {
            let name = p.file_name().map_or(p.as_os_str(), |n| n);
            format!(" `{}` |", name.to_string_lossy())
        }
        _ => String::new(),
    };
    let (file_head, file_rule) = if merged {
        (" file |", " --- |")
    } else {
        ("", "")
    };
    s.push_str(&format!(
        "\n## Best learning rate per model\n\n| model | dim |{file_head} lr | mean |"
    ));
    for kv in &args.kv {
        s.push_str(&format!(" kv {kv} |"));
    }
    s.push_str(&format!(" paper |\n| --- | --- |{file_rule} --- | --- |"));
    for _ in &args.kv {
        s.push_str(" --- |");
    }
    s.push_str(" --- |\n");
    for a in archs {
        for &dim in &dims {
            let Some((lr, at)) = best_lr(runs, a, dim) else {
                continue;
            };
            s.push_str(&format!(
                "| {} | {dim} |{} {lr:.2e} | {} |",
                a.name(),
                file_col(at[0]),
                pct_std(&at.iter().map(|r| r.accuracy).collect::<Vec<_>>())
            ));
            for kv in &args.kv {
                let x: Vec<f64> = at
                    .iter()
                    .filter_map(|r| r.per_kv.iter().find(|p| p.0 == *kv).map(|p| p.1))
                    .collect();
                s.push_str(&format!(" {} |", pct_std(&x)));
            }
            s.push_str(&format!(" {} |\n", a.paper(dim).unwrap_or("–")));
        }
    }
    s.push_str(&format!(
        "\n## Every run\n\n| model | dim |{file_head} lr | seed | mean | pooled | steps | stopped \
         | seconds | final loss |\n| --- | --- |{file_rule} --- | --- | --- | --- | --- | --- | --- \
         | --- |\n"
    ));
    for r in runs {
        s.push_str(&format!(
            "| {} | {} |{} {:.2e} | {} | {} | {} | {} | {} | {:.1} | {:.4} |\n",
            r.arch.name(),
            r.dim,
            file_col(r),
            r.lr,
            r.seed,
            pct(r.accuracy),
            pct(r.pooled),
            r.steps,
            r.stopped,
            r.seconds,
            r.final_loss
        ));
    }
    s
}

mod gpu_run {
    use super::*;
    use crate::model::{new_train_graph_with, TrainGraph};
    use crate::mqar::data::MqarBatch;
    use crate::schedule::{Decay, LrSchedule};
    use indicatif::{ProgressBar, ProgressStyle};
    use loglinear_host_gpu::train::optim::{AdamW, AdamWConfig};
    use loglinear_host_gpu::{wgpu, Gpu, GpuError};
    use loglinear_runtime::rng::SplitMix64;
    use std::time::Instant;

    type Res<T> = Result<T, Box<dyn std::error::Error>>;

    /// Ignored target (no loss, no gradient, not scored).
    const IGNORED: u32 = u32::MAX;
    /// Training data seed (Zoology's 123), per kv setting apart by 1000; tests add 10.
    const DATA_SEED: u64 = 123;
    /// Steps between loss read-backs (each waits for the GPU).
    const LOG_EVERY: u64 = 10;
    /// Steps timed before `--max-seconds-per-run` cuts the step count (a multiple of
    /// `LOG_EVERY`, so the GPU has caught up when it is read).
    const BUDGET_PROBE: u64 = 20;

    /// Examples as the model reads them: inputs and targets (`IGNORED` off the queries).
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
                .map(|(&t, &m)| if m { t } else { IGNORED })
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
                return Err(format!(
                    "a micro-batch has {scored} scored positions, over the head's capacity {}",
                    self.head_rows
                )
                .into());
            }
            inputs.resize(self.batch * l, 0);
            targets.resize(self.batch * l, IGNORED);
            let (ib, tb) = (&self.inputs[slot], &self.targets[slot]);
            self.gpu.write(ib, &inputs);
            self.gpu.write(tb, &targets);
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
        let mut todo = Vec::new();
        for &arch in &args.archs {
            for &dim in &args.dims {
                for &lr in &args.lrs {
                    for &seed in &args.seeds {
                        if !runs.iter().any(|r| r.same_run(arch, dim, lr, seed)) {
                            todo.push((arch, dim, lr, seed));
                        }
                    }
                }
            }
        }
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
            } else if let Some(i) = todo.iter().position(|&(a, d, l, sd)| {
                (a, d, sd) == (s.arch, s.dim, s.seed) && same_lr(l, s.lr)
            }) {
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
                return Err(format!(
                    "{} holds a paused run ({}) that is not among this command's runs: add it \
                     to --archs / --dims / --lrs / --seeds to finish it, or remove the folder",
                    p.dir.display(),
                    s.label()
                )
                .into());
            }
        }
        let total = args.archs.len() * args.dims.len() * args.lrs.len() * args.seeds.len();
        eprintln!(
            "mqar: {} runs to do, {} already in {}",
            todo.len(),
            total - todo.len(),
            args.out.display()
        );
        if todo.is_empty() {
            // The JSON stays as it is (a re-parse would round the last digit of some floats).
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
        let gpu = Gpu::new()?;
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
        for (done, (arch, dim, lr, seed)) in todo.into_iter().enumerate() {
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
            let rec = match train_one(
                args,
                &gpu,
                runner,
                &data,
                (arch, dim, lr, seed),
                &plan,
                from,
                &mut budget,
            )? {
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
        let fail = |e: String| format!("cannot resume from {}: {e}", dir.display());
        let saved = crate::checkpoint_dir::load(dir, &keys).map_err(|e| fail(e.to_string()))?;
        let by_key: std::collections::HashMap<&str, &Vec<f32>> = saved
            .params
            .iter()
            .map(|(k, _, v)| (k.as_str(), v))
            .collect();
        r.graph
            .load_params(gpu, &|k| by_key.get(k).map(|v| (*v).clone()))
            .map_err(|e| fail(e.to_string()))?;
        for (i, (m, v)) in saved.moments.iter().enumerate() {
            opt.load_moments(gpu, i, m, v)
                .map_err(|e| fail(e.to_string()))?;
        }
        opt.set_steps(saved.optimizer_steps);
        Ok(())
    }

    /// Trains one run, from scratch or from `from` (its paused state), until it ends or
    /// `budget` is spent (then it is checkpointed and `Paused`).
    #[allow(clippy::too_many_arguments)]
    fn train_one(
        args: &MqarArgs,
        gpu: &Gpu,
        r: &Runner,
        data: &Data,
        (arch, dim, lr, seed): (MqarArch, usize, f64, u64),
        plan: &Plan,
        from: Option<resume::Paused>,
        budget: &mut Budget,
    ) -> Res<Outcome> {
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
