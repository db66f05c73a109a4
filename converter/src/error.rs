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

/// A safetensors parser error in words: the crate's own message for its JSON header quotes
/// its Rust types (`expected struct HashMetadata`, `expected usize`), which say nothing to
/// someone who did not write it.
pub fn safetensors_problem(e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::InvalidHeaderDeserialization(json) | E::JsonError(json) => format!(
            "the header is not a safetensors header ({}, line {}, column {})",
            json_problem(json),
            json.line(),
            json.column()
        ),
        E::InvalidHeader(_) => "the header is not UTF-8 text".to_string(),
        E::HeaderTooSmall => "the file is shorter than its 8-byte header length".to_string(),
        E::InvalidHeaderLength => {
            "the header length is larger than the file, or not a whole header".to_string()
        }
        e => e.to_string(),
    }
}

/// What serde_json found wrong, without its position (callers give it as they word it) and
/// with Rust type names put in words.
pub fn json_problem(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let text = match text.rfind(" at line ") {
        Some(at) => &text[..at],
        None => &text,
    };
    // serde's `expected …` names the Rust type it deserializes into.
    let words = [
        ("struct HashMetadata", "an object of tensor entries"),
        (
            "struct TensorInfo",
            "a tensor entry {dtype, shape, data_offsets}",
        ),
        ("usize", "a whole number ≥ 0"),
        ("u64", "a whole number ≥ 0"),
        ("u32", "a whole number ≥ 0"),
        ("f64", "a number"),
        ("f32", "a number"),
    ];
    let mut out = text.to_string();
    for (rust, plain) in words {
        out = out.replace(&format!("expected {rust}"), &format!("expected {plain}"));
    }
    match out.find("expected struct ") {
        Some(at) => format!("{}expected an object", &out[..at]),
        None => out,
    }
}
