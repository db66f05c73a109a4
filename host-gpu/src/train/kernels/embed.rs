//! The token side of a window: embedding forward and backward, and the targets and inputs
//! laid out from token windows.

use super::{grid, grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

pub(super) const EMBED_WGSL: &str = include_str!("../../shaders/train_embed.wgsl");
pub(super) const TARGETS_WGSL: &str = include_str!("../../shaders/train_targets.wgsl");

/// `EmbedParams` of train_embed.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct EmbedParams {
    t: u32,
    batch: u32,
    d: u32,
    vocab: u32,
}

/// `TargetParams` of train_targets.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TargetParams {
    t: u32,
    batch: u32,
}

impl TargetParams {
    fn new(t: usize, batch: usize) -> Result<Self, GpuError> {
        Ok(Self {
            t: u(t)?,
            batch: u(batch)?,
        })
    }
}

/// Sizes of the embedding: `batch` windows of `seq_len` tokens (and one more, the last
/// target), rows of `d`, a vocabulary of `vocab`.
#[derive(Clone, Copy, Debug)]
pub struct EmbedShape {
    pub seq_len: usize,
    pub batch: usize,
    pub d: usize,
    pub vocab: usize,
}

impl EmbedShape {
    fn params(&self) -> Result<EmbedParams, GpuError> {
        Ok(EmbedParams {
            t: u(self.seq_len)?,
            batch: u(self.batch)?,
            d: u(self.d)?,
            vocab: u(self.vocab)?,
        })
    }
}

impl TrainKernels {
    /// Embedding forward `x[r] = E[id(r)]` for windows `tokens` `[batch][seq_len + 1]`, rows
    /// (t, b).
    pub fn embed(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        e: &wgpu::Buffer,
        x: &wgpu::Buffer,
        shape: EmbedShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.embed_fwd,
            &[tokens, e, x],
            &shape.params()?,
            grid_threads(shape.seq_len * shape.batch * shape.d)?,
        ))
    }

    /// Embedding backward `dE[v] += Σ_{id(r) = v} dx[r]`.
    pub fn embed_backward(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        de: &wgpu::Buffer,
        shape: EmbedShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.embed_bwd,
            &[tokens, dx, de],
            &shape.params()?,
            grid(shape.vocab)?,
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
            &TargetParams::new(t, batch)?,
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
            &TargetParams::new(t, batch)?,
            grid_threads((t + 1) * batch)?,
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
        assert_eq!(size_of::<EmbedParams>(), size(EMBED_WGSL));
        assert_eq!(size_of::<TargetParams>(), size(TARGETS_WGSL));
    }
}
