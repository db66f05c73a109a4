//! The GGUF v3 model file: the container's definitions ([`format`](mod@format)), naming
//! conventions ([`names`]), the `no_std` zero-copy reader ([`reader`]) and the model built from
//! it ([`model_file`]). Format: `docs/model-file.md`.

pub mod format;
pub mod model_file;
pub mod names;
pub mod reader;

pub use model_file::{GgufModel, ModelFileError};
pub use reader::{GgufError, GgufFile, MetaArray, MetaValue, TensorInfo, TensorProblem};
