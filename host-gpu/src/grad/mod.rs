//! Backward passes of the chunkwise operator (spec §7.4), in WGSL, for training.
//!
//! Both forms take the forward's inputs and the upstream gradient `d_o` and write the gradients
//! of L = Σ o·d_o with respect to every input. They recompute what they need of the forward
//! (γ, the per-level states H_c) instead of keeping it, so a training step holds no scan scratch
//! between its forward and its backward. dλ is accumulated per row and level (no float atomics),
//! so results are deterministic.

use crate::chunk_scan::{ScanLimits, ScanShape};
use crate::gpu::GpuError;

pub mod op_gdn;
pub mod op_m2;

/// Buffers of one operator backward. All f32, token-major, the layouts of
/// [`crate::chunk_scan::ScanIo`]: q, k `[T][heads][dk]` (q and k per head: `qk_heads == heads`);
/// v, d_o `[T][heads][dv]`; g, beta `[T][heads]` (beta: GDN only, any non-empty buffer for
/// Mamba-2); lam `[T][heads][lambda_cols]`.
/// The gradients are written (overwritten, not accumulated) in the same layouts: dq, dk, dv, dg,
/// dbeta (GDN; untouched for Mamba-2), dlam (0 in the columns no token reads).
pub struct OpGradIo<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub lam: &'a wgpu::Buffer,
    pub d_o: &'a wgpu::Buffer,
    pub dq: &'a wgpu::Buffer,
    pub dk: &'a wgpu::Buffer,
    pub dv: &'a wgpu::Buffer,
    pub dg: &'a wgpu::Buffer,
    pub dbeta: &'a wgpu::Buffer,
    pub dlam: &'a wgpu::Buffer,
}

/// Gradients read back by the convenience runners (`run_backward` of each form).
#[derive(Clone, Debug, Default)]
pub struct OpGrads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub dg: Vec<f32>,
    /// Empty for Mamba-2.
    pub dbeta: Vec<f32>,
    pub dlam: Vec<f32>,
}

/// Training shapes are exact: every level a token can read has its own λ column and state, no
/// saturated top level (plain models pass λ = 1 in as many columns). Checks that, and that q
/// and k are per head.
pub fn check_training_shape(shape: &ScanShape) -> Result<(), GpuError> {
    shape.validate()?;
    let needed_levels = loglinear_runtime::exact_levels(shape.t as u64);
    if shape.levels < needed_levels || shape.lambda_cols < needed_levels {
        return Err(GpuError::Invalid(format!(
            "operator backward: T = {} needs {needed_levels} exact levels and λ columns \
             (got levels {}, lambda_cols {})",
            shape.t, shape.levels, shape.lambda_cols
        )));
    }
    if shape.qk_heads != shape.heads {
        return Err(GpuError::Invalid(format!(
            "operator backward: q and k must be per head (qk_heads {} != heads {})",
            shape.qk_heads, shape.heads
        )));
    }
    Ok(())
}
