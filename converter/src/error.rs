//! [`ImportError`]: why a checkpoint could not be imported, shared by the modules that read
//! its parts (`checkpoint`, `config_json`, `vocab`).

use crate::layout::Layout;
use loglinear_runtime::ModelError;
use std::path::PathBuf;

/// Why a checkpoint could not be imported. Every variant names the file, key or field.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `config.json` is not JSON.
    #[error("{path} is not valid JSON: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// A config field is missing or malformed.
    #[error("config field `{key}`: {problem}")]
    ConfigField {
        /// The field.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// The config asks for something the runtime does not implement.
    #[error("unsupported config: {0}")]
    Unsupported(String),
    /// The safetensors file is malformed.
    #[error("{path}: malformed safetensors: {message}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A weight is NaN or infinite: a model that would only ever decode garbage.
    #[error("tensor `{key}` holds a NaN or an infinity (element {index}); the checkpoint is damaged or diverged in training")]
    NonFinite {
        /// The key.
        key: String,
        /// The element's index in the tensor.
        index: usize,
    },
    /// A key that this layout does not have.
    #[error("unexpected tensor `{key}` for model_type {}", layout.model_type())]
    UnknownKey {
        /// The key.
        key: String,
        /// The layout.
        layout: Layout,
    },
    /// A tensor in an unsupported dtype.
    #[error("tensor `{key}` has dtype {dtype}, expected F32, F16, BF16 or F64")]
    Dtype {
        /// The key.
        key: String,
        /// Its dtype.
        dtype: String,
    },
    /// `tokenizer.json` is unusable.
    #[error("{path}: {problem}")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The weights do not fit the config (missing key, wrong shape).
    #[error("tensor `{key}`: {error}")]
    Tensor {
        /// The checkpoint key.
        key: String,
        /// What is wrong.
        error: ModelError,
    },
}
