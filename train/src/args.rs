//! `loglinear train`'s options; the loop is [`run`](crate::run).

use loglinear_converter::command_paths::{CommandPaths, Reads, Writes};
use loglinear_converter::export::parse_dtype;
use loglinear_runtime::DType;
use std::path::PathBuf;

/// `--schedule`: the learning rate's shape after the warmup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScheduleArg {
    /// Half a cosine from --lr to --min-lr at the last step.
    Cosine,
    /// --lr to the end.
    Constant,
}

/// Options of `loglinear train`. The defaults are the shipped models' recipe
/// (models/ll-gdn-mcu/TRAINING.md; its cosine followed wall-clock progress, this one steps).
#[derive(clap::Args, Clone, Debug)]
pub struct TrainArgs {
    /// Official config.json of a new model (initialised like the official `_init_weights`).
    #[arg(long, conflicts_with = "init")]
    pub config: Option<PathBuf>,
    /// Fine-tune: start from this model, a checkpoint folder or a GGUF file (weights
    /// dequantized to f32), e.g. models/ll-gdn-mcu.
    #[arg(short = 'm', long = "model", alias = "init", value_name = "MODEL")]
    pub init: Option<PathBuf>,
    /// Training data: raw bytes (one token per byte), or token ids in a `.u16` / `.u32` file
    /// (little-endian).
    #[arg(long)]
    pub data: PathBuf,
    /// Validation data (same formats as --data).
    #[arg(long, conflicts_with = "val_fraction")]
    pub val: Option<PathBuf>,
    /// Hold out the last fraction of --data for validation instead of --val.
    #[arg(long)]
    pub val_fraction: Option<f64>,
    /// Validate on at most this many windows (0 = all). Windows do not overlap and each starts
    /// from an empty state.
    #[arg(long, default_value_t = 0)]
    pub val_windows: usize,
    /// Predicted tokens per training window (each window holds TOKENS + 1 tokens).
    #[arg(
        long = "context",
        alias = "seq-len",
        value_name = "TOKENS",
        default_value_t = 512
    )]
    pub seq_len: usize,
    /// Windows per micro-batch.
    #[arg(long, default_value_t = 32)]
    pub batch: usize,
    /// Micro-batches per optimizer step (gradient accumulation).
    #[arg(long, default_value_t = 1)]
    pub accum: usize,
    /// Optimizer steps in all (a resumed run may raise it; the cosine then stretches).
    #[arg(long, default_value_t = 3856)]
    pub steps: u64,
    /// Peak learning rate.
    #[arg(long, default_value_t = 2e-3)]
    pub lr: f64,
    /// Learning rate at the end of the cosine (default: --lr / 10).
    #[arg(long)]
    pub min_lr: Option<f64>,
    /// Linear warmup steps.
    #[arg(long, default_value_t = 150)]
    pub warmup: u64,
    /// Learning-rate schedule after the warmup: `cosine` (to --min-lr at the last step) or
    /// `constant`.
    #[arg(long, value_enum, default_value = "cosine")]
    pub schedule: ScheduleArg,
    /// Decoupled weight decay (matrices, embeddings, LM head, conv kernels; not norms, A_log,
    /// dt_bias, L).
    #[arg(long, default_value_t = 0.1)]
    pub weight_decay: f64,
    /// AdamW's first-moment decay, in [0, 1).
    #[arg(long, default_value_t = 0.9)]
    pub beta1: f64,
    /// AdamW's second-moment decay, in [0, 1).
    #[arg(long, default_value_t = 0.95)]
    pub beta2: f64,
    /// AdamW's epsilon, added to the root of the second moment.
    #[arg(long, default_value_t = 1e-8)]
    pub eps: f64,
    /// Global gradient-norm clip (0 = off).
    #[arg(long, default_value_t = 1.0)]
    pub clip: f32,
    /// Seed of the initialisation and of the window sampler.
    #[arg(long, default_value_t = 20250604)]
    pub seed: u64,
    /// Output folder: `checkpoint/` (official layout + optimizer and trainer state),
    /// `train_log.csv`, e.g. runs/ll-gdn.
    #[arg(short = 'o', long = "output", alias = "out", value_name = "FOLDER")]
    pub out: PathBuf,
    /// Save a checkpoint every N steps (0 = only at the end).
    #[arg(long, default_value_t = 0)]
    pub save_every: u64,
    /// Validate every N steps (0 = only at the end).
    #[arg(long, default_value_t = 0)]
    pub eval_every: u64,
    /// Continue the run saved in OUT/checkpoint (model, optimizer, sampler, step); the
    /// settings must match the saved ones, except --steps, --save-every, --eval-every and the
    /// export options.
    #[arg(long)]
    pub resume: bool,
    /// At the end, export the model to this GGUF file.
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// Storage type of the exported matrices: f32, f16, q8_0 or q4_0.
    #[arg(long, value_parser = parse_dtype, default_value = "q8_0")]
    pub export_type: DType,
}

/// What `--output` holds: the checkpoint (and the siblings it is saved through) and the log.
pub const OUTPUT_HOLDS: &[&str] = &[
    "checkpoint",
    "checkpoint.tmp",
    "checkpoint.old",
    "train_log.csv",
];

impl TrainArgs {
    /// Every path the run reads and writes, checked before any work.
    pub fn paths(&self) -> CommandPaths {
        CommandPaths::new()
            .reads("--config", self.config.as_deref(), Reads::File)
            .reads("--model", self.init.as_deref(), Reads::Model)
            .reads("--data", Some(&self.data), Reads::File)
            .reads("--val", self.val.as_deref(), Reads::File)
            .writes(
                "--output",
                Some(&self.out),
                Writes::Folder {
                    holds: OUTPUT_HOLDS,
                },
            )
            .writes("--export", self.export.as_deref(), Writes::File)
    }

    /// The floor of the cosine: --min-lr, or a tenth of --lr (the recipe's 2e-3 → 2e-4).
    pub fn min_lr(&self) -> f64 {
        self.min_lr.unwrap_or(self.lr / 10.0)
    }
}
