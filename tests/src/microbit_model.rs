//! The test-sized model of the QEMU `microbit` board (Cortex-M0, 256 KiB flash, 16 KiB RAM),
//! where the shipped 1.5 MB model cannot fit: a byte-level Log-Linear Gated DeltaNet with
//! hidden 32, 2 layers, 1 head, dk = dv = 16, SwiGLU 64, random weights from a fixed seed, Q8_0
//! matrices. It is untrained (its text is noise); it exists so that the firmware's token
//! identity with the host is tested on thumbv6m.
//!
//! `cargo run -p loglinear-tests --example make_microbit_model` writes it to [`PATH`];
//! `tests/tests/microbit_model.rs` checks that the committed file equals a fresh generation.

use loglinear_converter::export::{ExportOptions, ExportedModel};
use loglinear_runtime::{Arch, DType, ModelConfig, LAMBDA_LEVELS};

/// The committed file, relative to the repository root.
pub const PATH: &str = "models/tiny-ll-gdn-microbit-q8_0.gguf";

/// The model's configuration.
pub fn config() -> ModelConfig {
    ModelConfig {
        arch: Arch::LogLinearGatedDeltaNet,
        vocab_size: 256,
        hidden_size: 32,
        num_layers: 2,
        intermediate_size: 64,
        norm_eps: 1e-5,
        num_heads: 1,
        head_k_dim: 16,
        head_v_dim: 16,
        num_groups: 1,
        conv_kernel: 4,
        conv_bias: false,
        norm_group_size: 16,
        lambda_levels: LAMBDA_LEVELS,
    }
}

/// The GGUF bytes: every tensor uniform in [-0.5, 0.5) from a fixed linear congruential
/// sequence (seed 0x6d62 "mb"), matrices in Q8_0, the rest in F32.
pub fn generate() -> Vec<u8> {
    let config = config();
    let store = crate::uniform_store(&config, &mut 0x6d62, 1.0);
    let opts = ExportOptions {
        name: Some("tiny-ll-gdn-microbit".into()),
        matrix_type: DType::Q8_0,
        ..Default::default()
    };
    ExportedModel::from_source(config, &store, &opts, &mut |_| {})
        .expect("export of the microbit model")
        .to_gguf()
        .expect("GGUF of the microbit model")
}
