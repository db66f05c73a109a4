//! The Gated DeltaNet mixer's own ops: q, k, v from the conv output and the gates β, g, λ.

use super::{grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

pub(super) const QKV_WGSL: &str = include_str!("../../shaders/train_qkv.wgsl");
pub(super) const GATES_WGSL: &str = include_str!("../../shaders/train_gates.wgsl");

/// `QkvParams` of train_qkv.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QkvParams {
    rows: u32,
    heads: u32,
    dk: u32,
    dv: u32,
    channels: u32,
    q_scale: f32,
    backward: u32,
}

/// `GateParams` of train_gates.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GateParams {
    rows: u32,
    heads: u32,
    lambda_cols: u32,
    abl_stride: u32,
    log_linear: u32,
    lam_scale: f32,
    backward: u32,
    levels: u32,
}

/// Buffers of the q, k, v kernel: the conv output `x` `[rows][q | k | v]`, its gradient `dx`
/// (written by the backward), and the per-head q_used, k_used, v (written by the forward) or
/// their gradients (read by the backward).
#[derive(Clone, Copy, Debug)]
pub struct QkvIo<'a> {
    pub x: &'a wgpu::Buffer,
    pub dx: &'a wgpu::Buffer,
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
}

/// Sizes of the q, k, v kernel: `rows` rows of `heads` heads, keys of `dk`, values of `dv`.
#[derive(Clone, Copy, Debug)]
pub struct QkvShape {
    pub rows: usize,
    pub heads: usize,
    pub dk: usize,
    pub dv: usize,
}

impl TrainKernels {
    /// GDN q_used, k_used, v from the conv output (forward), or the conv-output gradient from
    /// theirs (backward: `io.q`, `io.k`, `io.v` hold dq_used, dk_used, dv; `io.dx` is written).
    pub fn qkv(
        &self,
        gpu: &Gpu,
        io: QkvIo<'_>,
        shape: QkvShape,
        backward: bool,
    ) -> Result<Step, GpuError> {
        let QkvShape {
            rows,
            heads,
            dk,
            dv,
        } = shape;
        let params = QkvParams {
            rows: u(rows)?,
            heads: u(heads)?,
            dk: u(dk)?,
            dv: u(dv)?,
            channels: u(heads * (2 * dk + dv))?,
            q_scale: 1.0 / (dk as f32).sqrt(),
            backward: u32::from(backward),
        };
        Ok(Self::step(
            gpu,
            &self.qkv,
            &[io.dx, io.x, io.q, io.k, io.v],
            &params,
            grid_threads(rows * heads)?,
        ))
    }

    /// GDN gates forward (β, g, λ written) or backward (`beta`, `g`, `lam` hold their
    /// gradients; `dabl` and the parameter shares `prow` `[rows][2H + 15H]` written).
    pub fn gates(
        &self,
        gpu: &Gpu,
        io: GateIo<'_>,
        shape: GateShape,
        backward: bool,
    ) -> Result<Step, GpuError> {
        let params = GateParams {
            rows: u(shape.rows)?,
            heads: u(shape.heads)?,
            lambda_cols: u(shape.lambda_cols)?,
            abl_stride: u(shape.abl_stride)?,
            log_linear: u32::from(shape.log_linear),
            lam_scale: (shape.dk as f32).sqrt(),
            backward: u32::from(backward),
            levels: u(shape.levels)?,
        };
        Ok(Self::step(
            gpu,
            &self.gates,
            &[
                io.abl, io.dt_bias, io.a_log, io.l_scale, io.beta, io.g, io.lam, io.dabl, io.prow,
            ],
            &params,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{wgsl_uniform_size, with_common};

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        assert_eq!(size_of::<QkvParams>(), size(QKV_WGSL));
        assert_eq!(size_of::<GateParams>(), size(GATES_WGSL));
    }
}
