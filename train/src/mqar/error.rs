//! Why the MQAR task or sweep failed. Each variant names what failed: a data setting, a flag,
//! a file or a folder; its message is what `loglinear mqar` prints.

use super::launch::ProcessFailure;
use crate::checkpoint_dir::CheckpointError;
use crate::schedule::ScheduleError;
use loglinear_converter::output_file::OutputFileError;
use loglinear_host_gpu::GpuError;
use loglinear_runtime::ConfigError;
use std::path::PathBuf;

/// An error of the MQAR data, of the sweep's settings, or of its results and checkpoint files.
#[derive(Debug, thiserror::Error)]
pub enum MqarError {
    /// Data settings out of range.
    #[error("MQAR settings: {0}")]
    Config(&'static str),
    /// Predictions, targets and mask differ in length.
    #[error("lengths differ: {predictions} predictions, {targets} targets, {mask} mask entries")]
    LengthMismatch {
        /// Predictions given.
        predictions: usize,
        /// Targets given.
        targets: usize,
        /// Mask entries given.
        mask: usize,
    },
    /// Logits are not a whole number of rows of `vocab` (or `vocab` is 0).
    #[error("{len} logits are not rows of a vocabulary of {vocab}")]
    LogitShape {
        /// Logits given.
        len: usize,
        /// The vocabulary.
        vocab: usize,
    },
    /// A command-line setting out of range, or settings that do not fit together. The
    /// message names the flag.
    #[error("{0}")]
    Flag(String),
    /// A GDN width that its heads do not divide.
    #[error("dim {dim} is not divisible by {heads} GDN heads")]
    GdnHeads {
        /// The model width.
        dim: usize,
        /// GDN heads at that width.
        heads: usize,
    },
    /// A Mamba-2 width whose d_inner is not a whole number of heads.
    #[error("Mamba-2 dim {dim}: d_inner {d_inner} is not a multiple of head_dim {head_dim}")]
    Mamba2Heads {
        /// The model width.
        dim: usize,
        /// Its d_inner.
        d_inner: usize,
        /// The head width.
        head_dim: usize,
    },
    /// The model config the sweep made fails the runtime's checks.
    #[error("model config: {0}")]
    ModelConfig(#[from] ConfigError),
    /// The learning-rate schedule is out of range.
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    /// A file that cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A results file that is not JSON.
    #[error("{} is not MQAR results JSON: {source}", path.display())]
    NotResultsJson {
        /// The results file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A results file without its list of runs.
    #[error("{}: no `runs` array", path.display())]
    NoRuns {
        /// The results file.
        path: PathBuf,
    },
    /// A run in a results file that is not a run record.
    #[error("{}: a run record is malformed: {record}", path.display())]
    MalformedRun {
        /// The results file.
        path: PathBuf,
        /// The record, as JSON.
        record: String,
    },
    /// A results file of runs made with other settings.
    #[error(
        "{} holds runs made with other settings ({found}); these are {want}: use another --output",
        path.display()
    )]
    ResultsOfOtherSettings {
        /// The results file.
        path: PathBuf,
        /// Its settings, as JSON (`none` when it has none).
        found: String,
        /// This command's settings, as JSON.
        want: String,
    },
    /// A checkpoint folder without a readable run state.
    #[error(
        "{} is not a readable run checkpoint (no trainer_state.json): remove it to start its run \
         afresh",
        dir.display()
    )]
    NoRunState {
        /// The folder.
        dir: PathBuf,
    },
    /// A run checkpoint whose state cannot be read.
    #[error(
        "the run checkpoint {} cannot be read ({why}): remove it to start its run afresh",
        dir.display()
    )]
    UnreadableRunState {
        /// The checkpoint folder.
        dir: PathBuf,
        /// What is wrong with its state (a file and an error, or a missing part).
        why: String,
    },
    /// A paused run made with other settings.
    #[error(
        "{} holds a paused run ({run}) made with other settings ({found}); these are {want}: \
         finish it with its settings, or remove the folder",
        dir.display()
    )]
    PausedWithOtherSettings {
        /// The checkpoint folder.
        dir: PathBuf,
        /// The paused run, as the sweep names runs.
        run: String,
        /// Its settings, as JSON.
        found: String,
        /// This command's settings, as JSON.
        want: String,
    },
    /// A paused run that this command's flags do not include.
    #[error(
        "{} holds a paused run ({run}) that is not among this command's runs: add it to \
         --archs / --dims / --lrs / --seeds to finish it, or remove the folder",
        dir.display()
    )]
    PausedRunNotInSweep {
        /// The checkpoint folder.
        dir: PathBuf,
        /// The paused run, as the sweep names runs.
        run: String,
    },
    /// A paused run's parameters or optimizer state that do not load.
    #[error("cannot resume from {}: {source}", dir.display())]
    Resume {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Why.
        source: Box<MqarError>,
    },
    /// A checkpoint folder that cannot be removed.
    #[error("cannot remove {}: {source}", path.display())]
    Remove {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// More scored positions in a micro-batch than the LM head has rows for.
    #[error("a micro-batch has {scored} scored positions, over the head's capacity {capacity}")]
    HeadCapacity {
        /// Scored positions of the micro-batch.
        scored: u64,
        /// Rows of the head.
        capacity: usize,
    },
    /// This executable cannot be found, so `--gpus` cannot start its processes.
    #[error("cannot find this executable to start the --gpus processes: {0}")]
    CurrentExe(#[source] std::io::Error),
    /// Processes of `--gpus` that failed; the others ran to their end.
    #[error(
        "{} of {count} mqar processes failed: {}; the runs they recorded are in their results \
         files, and the same command continues",
        .failed.len(),
        .failed.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Processes {
        /// The processes that failed.
        failed: Vec<ProcessFailure>,
        /// Processes started.
        count: usize,
    },
    /// A results or table file that cannot be written.
    #[error(transparent)]
    Write(#[from] OutputFileError),
    /// JSON that cannot be written.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// A checkpoint that cannot be written or read.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The GPU.
    #[error(transparent)]
    Gpu(#[from] GpuError),
}
