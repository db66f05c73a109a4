//! Importing the official checkpoints and writing GGUF model files:
//!
//! * [`checkpoint`]: `config.json` + `model.safetensors` into a [`Checkpoint`] that the runtime
//!   reads through its [`WeightSource`](loglinear_runtime::WeightSource) trait;
//! * [`gguf_writer`], [`export`]: GGUF v3 model files (`docs/model-file.md`) with
//!   f32/f16/Q8_0/Q4_0 weights;
//! * [`model_source`]: a model from either a GGUF file or a checkpoint folder;
//! * [`vocab`]: the tokenizer a model file carries; [`tokenize`]: encoding with it on the host;
//! * [`output_file`]: the one way the host tools write a file (temporary file, sync, rename);
//!   [`command_paths`]: what each command reads and writes, checked before any work.

pub mod checkpoint;
pub mod command_paths;
pub mod config_json;
pub mod error;
pub mod export;
pub mod gguf_writer;
pub mod layout;
pub mod model_source;
pub mod output_file;
pub mod tokenize;
pub mod vocab;

pub use checkpoint::{Checkpoint, ImportError, Tensor, TensorStore};
pub use config_json::{parse_config, parse_lenient_json};
pub use export::{export_gguf, ExportError, ExportOptions, ExportedModel, TypeOverride};
pub use gguf_writer::{GgufWriter, OwnedTensorData, Value, WriterError};
pub use layout::Layout;
