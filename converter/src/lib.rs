//! Host-side (std) tools for loglinear:
//!
//! * [`checkpoint`]: importing the official checkpoints (`config.json` + `model.safetensors`)
//!   into a [`Checkpoint`] that the runtime reads through its
//!   [`WeightSource`](loglinear_runtime::WeightSource) trait;
//! * [`gguf_writer`], [`export`]: writing GGUF v3 model files (`docs/model-file.md`) with
//!   f32/f16/Q8_0/Q4_0 weights;
//! * [`eval`]: bits per byte on text, and a quantized model's distance from the f32 one;
//!   [`per_position`]: the loss at each position of the windows; [`plot`]: its PNG chart;
//! * [`mqar`]: multi-query associative recall data (Zoology's synthetic task); [`mqar_run`]:
//!   `loglinear mqar`, the paper's MQAR sweep on the GPU trainer.

pub mod checkpoint;
pub mod config_json;
pub mod eval;
pub mod export;
pub mod gguf_writer;
pub mod layout;
pub mod model_source;
pub mod mqar;
pub mod mqar_run;
pub mod per_position;
pub mod plan;
pub mod plot;
pub mod train;
pub mod vocab;

pub use checkpoint::{Checkpoint, ImportError, Tensor, TensorStore};
pub use config_json::{parse_config, parse_lenient_json};
pub use export::{export_gguf, ExportError, ExportOptions, ExportedModel, TypeOverride};
pub use gguf_writer::{GgufWriter, OwnedTensorData, Value, WriterError};
pub use layout::Layout;
