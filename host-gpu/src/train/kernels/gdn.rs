//! The Gated DeltaNet mixer's own ops: q, k, v from the conv output and the gates β, g, λ.

use super::{grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

impl TrainKernels {
    /// GDN q_used, k_used, v from the conv output (forward), or the conv-output gradient from
    /// theirs (backward: `q`, `k`, `v` hold dq_used, dk_used, dv; `dx` is written).
    #[allow(clippy::too_many_arguments)]
    pub fn qkv(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        q: &wgpu::Buffer,
        k: &wgpu::Buffer,
        v: &wgpu::Buffer,
        rows: usize,
        heads: usize,
        dk: usize,
        dv: usize,
        backward: bool,
    ) -> Result<Step, GpuError> {
        let q_scale = 1.0 / (dk as f32).sqrt();
        let words = [
            u(rows)?,
            u(heads)?,
            u(dk)?,
            u(dv)?,
            u(heads * (2 * dk + dv))?,
            q_scale.to_bits(),
            u32::from(backward),
        ];
        Ok(Self::step(
            gpu,
            &self.qkv,
            &[dx, x, q, k, v],
            &words,
            grid_threads(rows * heads)?,
        ))
    }

    /// GDN gates forward (β, g, λ written) or backward (`beta`, `g`, `lam` hold their
    /// gradients; `dabl` and the parameter shares `prow` `[rows][2H + 15H]` written).
    #[allow(clippy::too_many_arguments)]
    pub fn gates(
        &self,
        gpu: &Gpu,
        io: GateIo<'_>,
        shape: GateShape,
        backward: bool,
    ) -> Result<Step, GpuError> {
        let lam_scale = (shape.dk as f32).sqrt();
        let words = [
            u(shape.rows)?,
            u(shape.heads)?,
            u(shape.lambda_cols)?,
            u(shape.abl_stride)?,
            u32::from(shape.log_linear),
            lam_scale.to_bits(),
            u32::from(backward),
            u(shape.levels)?,
        ];
        Ok(Self::step(
            gpu,
            &self.gates,
            &[
                io.abl, io.dt_bias, io.a_log, io.l_scale, io.beta, io.g, io.lam, io.dabl, io.prow,
            ],
            &words,
            grid_threads(shape.rows * shape.heads)?,
        ))
    }
}

/// Buffers of the gates kernel (see train_gates.wgsl).
pub struct GateIo<'a> {
    pub abl: &'a wgpu::Buffer,
    pub dt_bias: &'a wgpu::Buffer,
    pub a_log: &'a wgpu::Buffer,
    /// L `[H][15]`; any buffer for plain models.
    pub l_scale: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub lam: &'a wgpu::Buffer,
    pub dabl: &'a wgpu::Buffer,
    pub prow: &'a wgpu::Buffer,
}

/// Sizes of the gates kernel.
#[derive(Clone, Copy, Debug)]
pub struct GateShape {
    pub rows: usize,
    pub heads: usize,
    /// λ columns of the operator's lam buffer.
    pub lambda_cols: usize,
    pub abl_stride: usize,
    pub log_linear: bool,
    pub dk: usize,
    /// Levels the operator reads (λ columns ≥ this get no gradient).
    pub levels: usize,
}
