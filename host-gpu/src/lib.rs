//! wgpu compute shaders for Log-Linear Attention on a host GPU: the chunk-scan prefill of
//! spec §7 and the layer ops around it, with the same maths as `loglinear-runtime`, ending in the
//! Fenwick state that the runtime decoder continues from.
//!
//! WGSL lives in `src/shaders/*.wgsl`, beside the Rust that dispatches it.

pub mod chunk_scan;
pub mod gpu;
pub mod grad;
pub mod ops;
pub mod prefill;
pub mod scan_link;
pub mod timestamps;
pub mod train;
pub mod weights;

pub use gpu::{adapters, dispatch, AdapterSummary, Gpu, GpuError, GpuOptions, Kernel, Rows};
pub use prefill::{GpuModel, MixerTrace, Prefill, PrefillOptions};
/// The wgpu this crate is built on (its buffers and encoders appear in the training API).
pub use wgpu;
