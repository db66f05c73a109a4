//! The token side of a window: embedding forward and backward, and the targets and inputs
//! laid out from token windows.

use super::{grid, grid_threads, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

pub(super) const EMBED_WGSL: &str = include_str!("../../shaders/train_embed.wgsl");
pub(super) const TARGETS_WGSL: &str = include_str!("../../shaders/train_targets.wgsl");

/// `ACC_FLOATS` of train_embed.wgsl: the floats of dE one backward workgroup holds.
const EMBED_ACC_FLOATS: usize = 2048;
/// Workgroups the backward aims for: enough to fill a large GPU, so a big vocabulary is cut
/// into blocks of several ids rather than one workgroup (and one scan of the rows) per id.
const EMBED_BWD_GROUPS: usize = 256;

/// `EmbedParams` of train_embed.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct EmbedParams {
    t: u32,
    batch: u32,
    d: u32,
    vocab: u32,
    ids_per_group: u32,
    cols_per_group: u32,
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
        let (ids, cols) = self.backward_block();
        Ok(EmbedParams {
            t: u(self.seq_len)?,
            batch: u(self.batch)?,
            d: u(self.d)?,
            vocab: u(self.vocab)?,
            ids_per_group: u(ids)?,
            cols_per_group: u(cols)?,
        })
    }

    /// The block of dE one backward workgroup owns: (ids, columns). Each workgroup scans
    /// every row once, so ids are grouped until about [`EMBED_BWD_GROUPS`] workgroups remain,
    /// as far as the block fits in `EMBED_ACC_FLOATS`.
    fn backward_block(&self) -> (usize, usize) {
        let cols = self.d.clamp(1, EMBED_ACC_FLOATS);
        let ids = (self.vocab / EMBED_BWD_GROUPS).clamp(1, EMBED_ACC_FLOATS / cols);
        (ids, cols)
    }

    /// Workgroups of the backward: one per block of dE.
    fn backward_groups(&self) -> usize {
        let (ids, cols) = self.backward_block();
        self.vocab.div_ceil(ids) * self.d.div_ceil(cols)
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
            grid(shape.backward_groups())?,
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

    #[test]
    fn the_backward_block_fits_the_shaders_accumulator() {
        let wgsl = format!("const ACC_FLOATS: u32 = {EMBED_ACC_FLOATS}u;");
        assert!(
            EMBED_WGSL.contains(&wgsl),
            "train_embed.wgsl lacks `{wgsl}`"
        );
        let shape = |d, vocab| EmbedShape {
            seq_len: 256,
            batch: 256,
            d,
            vocab,
        };
        // MQAR: 32 ids of 64 columns, 256 workgroups.
        assert_eq!(shape(64, 8192).backward_block(), (32, 64));
        assert_eq!(shape(64, 8192).backward_groups(), 256);
        // A byte vocabulary keeps one id per workgroup.
        assert_eq!(shape(256, 256).backward_block(), (1, 256));
        // Wide rows: one id, the columns in blocks.
        assert_eq!(shape(5000, 8192).backward_block(), (1, 2048));
        assert_eq!(shape(5000, 8192).backward_groups(), 8192 * 3);
        for (d, vocab) in [(1, 1), (7, 100_000), (3000, 3), (64, 8192)] {
            let (ids, cols) = shape(d, vocab).backward_block();
            assert!(
                ids >= 1 && cols >= 1 && ids * cols <= EMBED_ACC_FLOATS,
                "{d} {vocab}"
            );
        }
    }
}
