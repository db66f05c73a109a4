//! Host-side (std) tools for loglinear. For now: importing the official checkpoints
//! (`config.json` + `model.safetensors`) into a [`Checkpoint`] that the runtime reads through
//! its [`WeightSource`](loglinear_runtime::WeightSource) trait.

pub mod checkpoint;
pub mod config_json;
pub mod layout;

pub use checkpoint::{Checkpoint, ImportError, Tensor, TensorStore};
pub use config_json::{parse_config, parse_lenient_json};
pub use layout::Layout;
