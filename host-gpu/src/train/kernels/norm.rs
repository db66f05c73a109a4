//! RMSNorm forward and backward, and the column sums that turn per-row weight-gradient
//! shares into a gradient.

use super::{grid, u, Step, TrainKernels};
use crate::gpu::{common_wgsl, Gpu, GpuError, Kernel, Rows};

pub(crate) const RMSNORM_WGSL: &str = concat!(
    common_wgsl!("norm_rows"),
    common_wgsl!("train_norm_params"),
    common_wgsl!("workgroup_sum"),
    common_wgsl!("inv_rms"),
    include_str!("../../shaders/train_rmsnorm.wgsl")
);
pub(crate) const RMSNORM_BWD_WGSL: &str = concat!(
    common_wgsl!("norm_rows"),
    common_wgsl!("train_norm_params"),
    common_wgsl!("workgroup_sum"),
    include_str!("../../shaders/train_rmsnorm_bwd.wgsl")
);
pub(super) const COLSUM_WGSL: &str = concat!(
    common_wgsl!("workgroup_sum"),
    include_str!("../../shaders/train_colsum.wgsl")
);

/// `NormParams` of train_rmsnorm.wgsl and train_rmsnorm_bwd.wgsl (one layout).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct NormParams {
    rows: u32,
    cols: u32,
    eps: f32,
    acc: u32,
    groups: u32,
}

/// `SumParams` of train_colsum.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SumParams {
    rows: u32,
    cols: u32,
    stride: u32,
    in_off: u32,
}

/// The rows of a norm: `rows` rows of `cols`, row r scaled by group `r % groups` of a weight
/// `[groups][cols]` (groups = 1: one weight for every row).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormRows {
    pub rows: usize,
    pub cols: usize,
    pub groups: usize,
}

impl NormRows {
    fn params(&self, eps: f32, accumulate_dx: bool) -> Result<NormParams, GpuError> {
        Ok(NormParams {
            rows: u(self.rows)?,
            cols: u(self.cols)?,
            eps,
            acc: u32::from(accumulate_dx),
            groups: u(self.groups)?,
        })
    }

    /// The forward ([`RMSNORM_WGSL`] compiled as `kernel`): `io.out` and `io.rstd` written.
    pub(crate) fn forward(
        &self,
        gpu: &Gpu,
        kernel: &Kernel,
        io: NormIo<'_>,
        eps: f32,
    ) -> Result<Step, GpuError> {
        Ok(TrainKernels::step(
            gpu,
            kernel,
            &[io.x, io.w, io.out, io.rstd],
            &self.params(eps, false)?,
            grid(self.rows)?,
        ))
    }

    /// The backward ([`RMSNORM_BWD_WGSL`] compiled as `kernel`) from the forward's `x`, `w` and
    /// `rstd`: `grads.dx` written (added when `accumulate_dx`) and `grads.wrow` written.
    pub(crate) fn backward(
        &self,
        gpu: &Gpu,
        kernel: &Kernel,
        forward: NormIo<'_>,
        grads: NormGrads<'_>,
        accumulate_dx: bool,
    ) -> Result<Step, GpuError> {
        let f = forward;
        Ok(TrainKernels::step(
            gpu,
            kernel,
            &[f.x, f.w, f.rstd, grads.dy, grads.dx, grads.wrow],
            &self.params(0.0, accumulate_dx)?,
            grid(self.rows)?,
        ))
    }
}

/// Buffers of a norm's forward: input `x`, weight `w`, output `out` and the per-row
/// 1/rms `rstd` that the backward reads.
#[derive(Clone, Copy, Debug)]
pub struct NormIo<'a> {
    pub x: &'a wgpu::Buffer,
    pub w: &'a wgpu::Buffer,
    pub out: &'a wgpu::Buffer,
    pub rstd: &'a wgpu::Buffer,
}

/// The gradients of a norm's backward: the output gradient `dy` in; the input gradient `dx` and
/// the per-row shares of dw `wrow` `[rows][cols]` out (sum them with [`TrainKernels::colsum`]).
#[derive(Clone, Copy, Debug)]
pub struct NormGrads<'a> {
    pub dy: &'a wgpu::Buffer,
    pub dx: &'a wgpu::Buffer,
    pub wrow: &'a wgpu::Buffer,
}

impl TrainKernels {
    /// RMSNorm of `rows` rows of `cols` with weight `w` (`cols`), keeping `rstd` per row.
    pub fn rmsnorm(
        &self,
        gpu: &Gpu,
        io: NormIo<'_>,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Step, GpuError> {
        let rows = NormRows {
            rows,
            cols,
            groups: 1,
        };
        rows.forward(gpu, &self.rmsnorm, io, eps)
    }

    /// RMSNorm backward from the forward's `x`, `w` and `rstd`: `grads.dx` written (added when
    /// `accumulate_dx`) and `grads.wrow` written.
    pub fn rmsnorm_backward(
        &self,
        gpu: &Gpu,
        forward: NormIo<'_>,
        grads: NormGrads<'_>,
        rows: usize,
        cols: usize,
        accumulate_dx: bool,
    ) -> Result<Step, GpuError> {
        let rows = NormRows {
            rows,
            cols,
            groups: 1,
        };
        rows.backward(gpu, &self.rmsnorm_bwd, forward, grads, accumulate_dx)
    }

    /// `out[c] += Σ_r inp(r, c)` over the first `cols` columns of `rows` rows of `inp`.
    pub fn colsum(
        &self,
        gpu: &Gpu,
        inp: Rows<'_>,
        rows: usize,
        cols: usize,
        out: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let params = SumParams {
            rows: u(rows)?,
            cols: u(cols)?,
            stride: u(inp.stride)?,
            in_off: u(inp.off)?,
        };
        Ok(Self::step(
            gpu,
            &self.colsum,
            &[inp.buf, out],
            &params,
            grid(cols)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{wgsl_uniform_size, with_common};

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        assert_eq!(size_of::<NormParams>(), size(RMSNORM_WGSL));
        assert_eq!(size_of::<NormParams>(), size(RMSNORM_BWD_WGSL));
        assert_eq!(size_of::<SumParams>(), size(COLSUM_WGSL));
    }
}
