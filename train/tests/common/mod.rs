//! Helpers the training tests share (`mod common;` in each test file).
// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

use loglinear_host_gpu::wgpu;
use loglinear_host_gpu::Gpu;
use loglinear_runtime::{Arch, ModelConfig};
use loglinear_train::model::TrainGraph;

pub mod model;

/// The f32 adapter the tests run on (lavapipe in CI).
pub fn gpu() -> Gpu {
    Gpu::new_fp32().expect("GPU adapter (lavapipe)")
}

pub use loglinear_tests::random::{symmetric, SplitMix64};

/// The first `n` f32 of a buffer.
pub fn read(gpu: &Gpu, b: &wgpu::Buffer, n: usize) -> Vec<f32> {
    let mut v = gpu.read_f32(b).unwrap();
    v.truncate(n);
    v
}

/// ‖a − b‖ / ‖b‖ in f64 (`b` f32 or f64).
pub fn rel_l2<T: Copy + Into<f64>>(a: &[f32], b: &[T]) -> f64 {
    let num: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - (*y).into()).powi(2))
        .sum();
    let den: f64 = b.iter().map(|y| (*y).into().powi(2)).sum();
    (num / den.max(1e-300)).sqrt()
}

/// A tiny two-layer model of `arch` (vocabulary 40, width 16, 2 heads of dk 8).
pub fn tiny_config(arch: Arch) -> ModelConfig {
    let gdn = matches!(arch, Arch::LogLinearGatedDeltaNet | Arch::GatedDeltaNet);
    let ll = arch.is_log_linear();
    ModelConfig {
        arch,
        vocab_size: 40,
        hidden_size: 16,
        num_layers: 2,
        intermediate_size: 24,
        norm_eps: 1e-5,
        num_heads: 2,
        head_k_dim: 8,
        head_v_dim: if gdn { 16 } else { 8 },
        num_groups: if gdn { 2 } else { 1 },
        conv_kernel: 4,
        conv_bias: !gdn && ll,
        norm_group_size: 16,
        lambda_levels: if ll { 15 } else { 0 },
    }
}

/// Deterministic parameters, larger than the official init so that every gradient is well
/// above rounding.
pub fn load_large_params(gpu: &Gpu, m: &dyn TrainGraph) {
    let mut r = SplitMix64::new(3);
    let values: std::collections::HashMap<String, Vec<f32>> = m
        .params()
        .iter()
        .map(|p| {
            let n = p.name.as_str();
            let v: Vec<f32> =
                if n.ends_with("norm.weight") || n.ends_with(".L") || n.ends_with(".D") {
                    (0..p.len)
                        .map(|_| (1.0 + 0.3 * symmetric(&mut r)) as f32)
                        .collect()
                } else if n.ends_with(".A_log") || n.ends_with("bias") {
                    (0..p.len)
                        .map(|_| (0.5 * symmetric(&mut r)) as f32)
                        .collect()
                } else {
                    let fan_in = *p.shape.last().unwrap() as f64;
                    (0..p.len)
                        .map(|_| (symmetric(&mut r) / fan_in.sqrt()) as f32)
                        .collect()
                };
            (p.name.clone(), v)
        })
        .collect();
    m.load_params(gpu, &|key| values.get(key).cloned()).unwrap();
}
