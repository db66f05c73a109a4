//! Elementwise ops: the SiLU gate and the residual add.

use super::{grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

pub(super) const GATE_SILU_WGSL: &str = include_str!("../../shaders/train_gate_silu.wgsl");
pub(super) const ADD_WGSL: &str = include_str!("../../shaders/train_add.wgsl");

/// `GateParams` of train_gate_silu.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GateParams {
    n: u32,
    backward: u32,
}

/// `AddParams` of train_add.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AddParams {
    n: u32,
}

/// Buffers of the SiLU gate's backward: the forward's inputs `a` and `b`, the output gradient
/// `dout`, and the input gradients `da`, `db` (written).
#[derive(Clone, Copy, Debug)]
pub struct GateSiluGradIo<'a> {
    pub a: &'a wgpu::Buffer,
    pub b: &'a wgpu::Buffer,
    pub dout: &'a wgpu::Buffer,
    pub da: &'a wgpu::Buffer,
    pub db: &'a wgpu::Buffer,
}

impl TrainKernels {
    /// `out = a·SiLU(b)` over `n` floats.
    pub fn gate_silu(
        &self,
        gpu: &Gpu,
        a: &wgpu::Buffer,
        b: &wgpu::Buffer,
        out: &wgpu::Buffer,
        n: usize,
    ) -> Result<Step, GpuError> {
        let placeholder = &self.placeholder;
        self.gate_silu_step(gpu, [a, b, out, placeholder, placeholder], n, 0)
    }

    /// Backward of [`TrainKernels::gate_silu`]: `io.da`, `io.db` from `io.dout`.
    pub fn gate_silu_backward(
        &self,
        gpu: &Gpu,
        io: GateSiluGradIo<'_>,
        n: usize,
    ) -> Result<Step, GpuError> {
        self.gate_silu_step(gpu, [io.a, io.b, io.dout, io.da, io.db], n, 1)
    }

    /// train_gate_silu.wgsl over `n` floats, its five bindings in order, `backward` 0 or 1.
    fn gate_silu_step(
        &self,
        gpu: &Gpu,
        buffers: [&wgpu::Buffer; 5],
        n: usize,
        backward: u32,
    ) -> Result<Step, GpuError> {
        let params = GateParams { n: u(n)?, backward };
        Ok(Self::step(
            gpu,
            &self.gate_silu,
            &buffers,
            &params,
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
            &AddParams { n: u(n)? },
            grid_threads(n)?,
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
        assert_eq!(size_of::<GateParams>(), size(GATE_SILU_WGSL));
        assert_eq!(size_of::<AddParams>(), size(ADD_WGSL));
    }
}
