//! Why `loglinear train` failed. Each variant names what is at fault: a flag, a file, a
//! folder, a setting of the saved run, or the step; its message is what the command prints.

use crate::checkpoint_dir::CheckpointError;
use crate::data::DataError;
use crate::schedule::ScheduleError;
use loglinear_converter::model_source::LoadError;
use loglinear_converter::{ExportError, ImportError};
use loglinear_host_gpu::GpuError;
use loglinear_runtime::gguf::ModelFileError;
use loglinear_runtime::ModelError;
use serde_json::Value;
use std::path::PathBuf;

/// An error of `loglinear train`: its flags, its model source, its data, the run or its
/// checkpoint and export.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A flag out of range, or flags that do not go together. The message names the flags.
    #[error("{0}")]
    Flag(&'static str),
    /// A negative or non-finite `--clip`.
    #[error("--clip must be ≥ 0 (0 = off), got {0}")]
    Clip(f32),
    /// `--export` names a folder.
    #[error("--export {} is a folder, not a file", .0.display())]
    ExportIsFolder(PathBuf),
    /// Raw text (one token per byte) for a model whose vocabulary is BPE: its ids would be
    /// byte values, not the model's tokens.
    #[error(
        "{}: raw text is read one token per byte, but --model {} has a BPE vocabulary; give \
         the data as token ids of that vocabulary (.u16 or .u32 files)",
        data.display(),
        model.display()
    )]
    TextForBpe { data: PathBuf, model: PathBuf },
    /// `--model` names neither a checkpoint folder nor a GGUF file.
    #[error("--model {}: neither a checkpoint folder nor a GGUF file", .0.display())]
    NotAModel(PathBuf),
    /// A file that cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A folder that cannot be created.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The training log, which cannot be opened or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Log {
        /// `open` or `write`.
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A config.json that is not JSON.
    #[error("{}: {source}", path.display())]
    ConfigJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    /// A config.json that is not a model this trainer knows.
    #[error("{}: {source}", path.display())]
    Config { path: PathBuf, source: ImportError },
    /// A model (`--model`, or the checkpoint to export) that cannot be opened.
    #[error(transparent)]
    Model(#[from] LoadError),
    /// A GGUF file (`--model`) that is not a model file.
    #[error("{}: {source}", path.display())]
    Gguf {
        path: PathBuf,
        source: ModelFileError,
    },
    /// `--resume` without a checkpoint in the output folder.
    #[error("--resume: no checkpoint in {} (trainer_state.json missing)", .0.display())]
    NoCheckpoint(PathBuf),
    /// A new run whose output folder holds a checkpoint.
    #[error(
        "{} holds a checkpoint: pass --resume to continue it, or choose another --output",
        .0.display()
    )]
    CheckpointExists(PathBuf),
    /// A checkpoint whose trainer state has no settings to resume with.
    #[error("--resume: the checkpoint's trainer_state.json has no settings")]
    NoSettings,
    /// A setting that differs from the saved run's.
    #[error(
        "--resume: `{key}` is {now} now but {saved} in the checkpoint; resume with the same \
         settings"
    )]
    SettingChanged {
        key: String,
        now: Value,
        saved: Value,
    },
    /// `--steps` not above the checkpoint's step.
    #[error("--resume: the checkpoint is at step {0}; give --steps above it to continue")]
    ResumeAtEnd(u64),
    /// Validation data asked for but shorter than one window.
    #[error("the validation data has {tokens} tokens, fewer than one window of {window}")]
    ValidationTooShort { tokens: usize, window: usize },
    /// A step whose loss or gradient norm is not finite.
    #[error(
        "training diverged at step {step}: loss {loss}, gradient norm {grad_norm} (lower --lr or \
         keep --clip on); the last checkpoint is untouched"
    )]
    Diverged {
        step: u64,
        loss: f64,
        grad_norm: f32,
    },
    /// The exported GGUF that does not parse.
    #[error("the exported file does not read back: {0}")]
    ExportReadBack(#[source] ModelFileError),
    /// The exported GGUF that the runtime does not load.
    #[error("the exported file does not load: {0}")]
    ExportLoad(#[source] ModelError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The official config generated for a GGUF model, which does not serialise.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Gpu(#[from] GpuError),
}
