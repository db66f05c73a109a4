//! RMSNorm forward and backward, and the column sums that turn per-row weight-gradient
//! shares into a gradient.

use super::{grid, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

impl TrainKernels {
    /// RMSNorm of `rows` rows of `cols` with weight `w` (`cols`), keeping `rstd` per row.
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        out: &wgpu::Buffer,
        rstd: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, eps.to_bits(), 0];
        Ok(Self::step(
            gpu,
            &self.rmsnorm,
            &[x, w, out, rstd],
            &words,
            grid(rows)?,
        ))
    }

    /// RMSNorm backward: `dx` (written, or added when `acc`) and the per-row shares of dw in
    /// `wrow` `[rows][cols]` (sum them with [`TrainKernels::colsum`]).
    #[allow(clippy::too_many_arguments)]
    pub fn rmsnorm_backward(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        rstd: &wgpu::Buffer,
        dy: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        wrow: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        acc: bool,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, 0, u32::from(acc)];
        Ok(Self::step(
            gpu,
            &self.rmsnorm_bwd,
            &[x, w, rstd, dy, dx, wrow],
            &words,
            grid(rows)?,
        ))
    }

    /// `out[c] += Σ_r inp[in_off + r·stride + c]` for `c < cols`, `r < rows`.
    #[allow(clippy::too_many_arguments)]
    pub fn colsum(
        &self,
        gpu: &Gpu,
        inp: &wgpu::Buffer,
        in_off: usize,
        stride: usize,
        rows: usize,
        cols: usize,
        out: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, u(stride)?, u(in_off)?];
        Ok(Self::step(
            gpu,
            &self.colsum,
            &[inp, out],
            &words,
            grid(cols)?,
        ))
    }
}
