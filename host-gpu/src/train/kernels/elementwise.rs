//! Elementwise ops: the SiLU gate and the residual add.

use super::{grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

impl TrainKernels {
    /// `out = a·SiLU(b)` (forward), or `da`, `db` from `dout` in `out` (backward).
    #[allow(clippy::too_many_arguments)]
    pub fn gate_silu(
        &self,
        gpu: &Gpu,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        out: &wgpu::Buffer,
        da: &wgpu::Buffer,
        db: &wgpu::Buffer,
        n: usize,
        backward: bool,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.gate_silu,
            &[a, b, out, da, db],
            &[u(n)?, u32::from(backward)],
            grid_threads(n)?,
        ))
    }

    /// `out = a + b` over `n` floats.
    pub fn add(
        &self,
        gpu: &Gpu,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n: usize,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.add,
            &[a, b, out],
            &[u(n)?],
            grid_threads(n)?,
        ))
    }
}
