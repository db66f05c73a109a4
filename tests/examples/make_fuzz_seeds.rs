//! Writes the fuzz seed corpus: tiny valid model files of every architecture and tensor type,
//! small enough for libFuzzer's input limit, into `fuzz/corpus/gguf_model/seed-*`.
//!
//! `cargo run -p loglinear-tests --example make_fuzz_seeds`

use loglinear_converter::export::{ExportOptions, ExportedModel};
use loglinear_runtime::{Arch, DType, ModelConfig, LAMBDA_LEVELS};
use loglinear_tests::{repo_root, uniform_store};

fn tiny(arch: Arch, hidden: usize) -> ModelConfig {
    let mamba = arch.is_mamba2();
    ModelConfig {
        arch,
        vocab_size: 8,
        hidden_size: hidden,
        num_layers: 1,
        intermediate_size: hidden,
        norm_eps: 1e-5,
        num_heads: if mamba { hidden / 4 } else { 1 },
        head_k_dim: 4,
        head_v_dim: 4,
        num_groups: 1,
        conv_kernel: 4,
        conv_bias: mamba,
        norm_group_size: if mamba { hidden } else { 4 },
        lambda_levels: if arch.is_log_linear() {
            LAMBDA_LEVELS
        } else {
            0
        },
    }
}

fn main() {
    let dir = repo_root().join("fuzz/corpus/gguf_model");
    std::fs::create_dir_all(&dir).unwrap();
    let mut seed = 1u32;
    for arch in [
        Arch::LogLinearGatedDeltaNet,
        Arch::LogLinearMamba2,
        Arch::GatedDeltaNet,
        Arch::Mamba2,
    ] {
        for (hidden, dtype) in [
            (4, DType::F32),
            (32, DType::F16),
            (32, DType::Q8_0),
            (32, DType::Q4_0),
        ] {
            let config = tiny(arch, hidden);
            let store = uniform_store(&config, &mut seed, 0.5);
            let opts = ExportOptions {
                matrix_type: dtype,
                ..Default::default()
            };
            let model = ExportedModel::from_source(config, &store, &opts, &mut |_| {}).unwrap();
            let bytes = model.to_gguf().unwrap();
            let path = dir.join(format!("seed-{}-{}", arch.name(), dtype.name()));
            println!("{} ({} bytes)", path.display(), bytes.len());
            std::fs::write(path, bytes).unwrap();
        }
    }
}
