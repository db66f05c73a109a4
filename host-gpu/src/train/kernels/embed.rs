//! The token side of a window: embedding forward and backward, and the targets and inputs
//! laid out from token windows.

use super::{grid, grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

impl TrainKernels {
    /// Embedding forward `x[r] = E[id(r)]` for windows `tokens` `[batch][t+1]`, rows (t, b).
    #[allow(clippy::too_many_arguments)]
    pub fn embed(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        e: &wgpu::Buffer,
        x: &wgpu::Buffer,
        t: usize,
        batch: usize,
        d: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(d)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.embed_fwd,
            &[tokens, e, x],
            &words,
            grid_threads(t * batch * d)?,
        ))
    }

    /// Embedding backward `dE[v] += Σ_{id(r) = v} dx[r]`.
    #[allow(clippy::too_many_arguments)]
    pub fn embed_backward(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        de: &wgpu::Buffer,
        t: usize,
        batch: usize,
        d: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(d)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.embed_bwd,
            &[tokens, dx, de],
            &words,
            grid(vocab)?,
        ))
    }

    /// `targets[b][t] = windows[b][t + 1]` for windows `[batch][t + 1]`.
    pub fn shift_targets(
        &self,
        gpu: &Gpu,
        windows: &wgpu::Buffer,
        targets: &wgpu::Buffer,
        t: usize,
        batch: usize,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.shift_targets,
            &[windows, targets],
            &[u(t)?, u(batch)?],
            grid_threads(t * batch)?,
        ))
    }

    /// `windows[b][t] = inputs[b][t]` for t < `t`, 0 in each window's last slot.
    pub fn pack_inputs(
        &self,
        gpu: &Gpu,
        inputs: &wgpu::Buffer,
        windows: &wgpu::Buffer,
        t: usize,
        batch: usize,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.pack_inputs,
            &[inputs, windows],
            &[u(t)?, u(batch)?],
            grid_threads((t + 1) * batch)?,
        ))
    }
}
