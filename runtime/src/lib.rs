//! `loglinear-runtime`: the `no_std`, heap-free decoding core of Log-Linear Attention
//! (Guo et al., 2025): Log-Linear Mamba-2 and Log-Linear Gated DeltaNet, plus their plain
//! (single-state) baselines.
//!
//! The maths follows `shared/spec/log-linear-attention.md`; section numbers in comments
//! (`§4.2`, …) refer to it.
//!
//! * [`level`]: the Fenwick level of a (query, key) pair and the capacity policy.
//! * [`fenwick`]: the fixed-capacity per-level state and the exact decode step (§4.2).
//! * [`half_convert`]: f16 ↔ f32 of the f16 state, in hardware where the core has it.
//! * [`state_kernels`]: a level's pass of the fused step in the core's own instructions.
//! * [`tensor`]: read-only weight views and the [`WeightSource`] trait a model file plugs into.
//! * [`config`], [`model`]: the model description and its validated weights.
//! * [`session`]: one decoding stream over a caller-provided byte arena.
//! * [`sampler`], [`tokenizer`]: token selection; the byte-level and GPT-2 BPE tokenizers.
//! * [`snapshot`], [`slot_store`]: saving and resuming a session; power-safe A/B flash slots.
#![cfg_attr(not(feature = "std"), no_std)]
#![deny(missing_docs)]
// `unsafe` is denied everywhere but in the per-architecture SIMD kernels (`quant::*`), the f16
// conversion instructions (`half_convert`) and the f16 state passes (`state_kernels`), which
// allow it module by module, each use with a `// SAFETY:` argument. Never in the parsers.
#![deny(unsafe_code)]

mod fmt;

pub mod arena;
pub mod chunk;
pub mod config;
pub mod fenwick;
pub mod gguf;
pub mod half_convert;
pub mod layers;
pub mod level;
pub mod math;
pub mod model;
pub mod quant;
pub mod rng;
pub mod sampler;
pub mod session;
pub mod slot_store;
pub mod snapshot;
pub mod state_kernels;
pub mod tensor;
pub mod tokenizer;

pub use config::{Arch, ConfigError, ModelConfig};
pub use fenwick::{FenwickState, HeadStep, StateElem};
pub use level::{bitlen, exact_levels, level_of, LevelPolicy, LAMBDA_LEVELS};
pub use model::{Model, ModelError};
pub use sampler::{Sampler, SamplerConfig};
pub use session::{Probe, Session, SessionConfig, SessionError, StepError};
pub use tensor::{DType, Role, TensorData, TensorName, TensorView, WeightSource};
