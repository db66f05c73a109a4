//! Cross-entropy over the vocabulary, against the next token or explicit (maskable) targets,
//! forward and backward.

use super::{grid, u, Step, TrainKernels};
use crate::gpu::{common_wgsl, Gpu, GpuError};

pub(super) const LOSS_WGSL: &str = concat!(
    common_wgsl!("workgroup_sum"),
    common_wgsl!("loss_rows"),
    include_str!("../../shaders/train_loss.wgsl")
);
pub(super) const MASKED_LOSS_WGSL: &str = concat!(
    common_wgsl!("ignored_target"),
    common_wgsl!("workgroup_sum"),
    common_wgsl!("loss_rows"),
    include_str!("../../shaders/train_loss_masked.wgsl")
);

/// `LossParams` of shaders/common/loss_rows.wgsl (train_loss.wgsl, train_loss_masked.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LossParams {
    t: u32,
    batch: u32,
    vocab: u32,
    first: u32,
    rows: u32,
}

/// Sizes of the loss: `batch` windows of `seq_len` rows of `vocab` logits, rows in (t, b)
/// order, per-target outputs `[batch][seq_len]`. One dispatch covers the rows
/// `first..first + rows`, whose logits (and, by the backward, dlogits) are all its logits
/// buffer holds: row `first + r` at `r · vocab`. The per-row log-sum-exp and the per-target
/// outputs are indexed by the row itself.
#[derive(Clone, Copy, Debug)]
pub struct LossShape {
    pub seq_len: usize,
    pub batch: usize,
    pub vocab: usize,
    pub first: usize,
    pub rows: usize,
}

impl LossShape {
    /// Every one of the `seq_len · batch` rows in one dispatch.
    pub fn new(seq_len: usize, batch: usize, vocab: usize) -> Self {
        Self {
            seq_len,
            batch,
            vocab,
            first: 0,
            rows: seq_len * batch,
        }
    }

    /// The `rows` rows from row `first` (a tile of [`LossShape::new`]'s rows).
    pub fn tile(self, first: usize, rows: usize) -> Self {
        Self {
            first,
            rows,
            ..self
        }
    }

    fn params(&self) -> Result<LossParams, GpuError> {
        Ok(LossParams {
            t: u(self.seq_len)?,
            batch: u(self.batch)?,
            vocab: u(self.vocab)?,
            first: u(self.first)?,
            rows: u(self.rows)?,
        })
    }
}

/// What the next-token loss reads and keeps: token windows `[batch][seq_len + 1]` (the targets
/// are each row's next token), the logits (which the backward turns into dlogits, in place),
/// the per-row log-sum-exp `lse` (written by the forward) and the backward's loss scale (one
/// f32).
#[derive(Clone, Copy, Debug)]
pub struct LossIo<'a> {
    pub tokens: &'a wgpu::Buffer,
    pub logits: &'a wgpu::Buffer,
    pub lse: &'a wgpu::Buffer,
    pub scale: &'a wgpu::Buffer,
}

/// What the loss against explicit targets reads and keeps: `targets` `[batch][seq_len]` (u32,
/// `u32::MAX` = ignored), the logits (which the backward turns into dlogits, in place), the
/// per-row log-sum-exp `lse` and the per-target correctness `correct` (both written by the
/// forward), and the backward's loss scale.
#[derive(Clone, Copy, Debug)]
pub struct MaskedLossIo<'a> {
    pub targets: &'a wgpu::Buffer,
    pub logits: &'a wgpu::Buffer,
    pub lse: &'a wgpu::Buffer,
    pub scale: &'a wgpu::Buffer,
    pub correct: &'a wgpu::Buffer,
}

impl TrainKernels {
    /// Cross-entropy forward: `io.lse` per row and `loss` `[batch][seq_len]`.
    pub fn loss(
        &self,
        gpu: &Gpu,
        io: LossIo<'_>,
        loss: &wgpu::Buffer,
        shape: LossShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.loss_fwd,
            &[io.tokens, io.logits, io.lse, loss, io.scale],
            &shape.params()?,
            grid(shape.rows)?,
        ))
    }

    /// Cross-entropy backward, in place: `io.logits` becomes
    /// `dlogits = scale[0]·(softmax − onehot(target))`, from the forward's `io.lse`.
    pub fn loss_backward(
        &self,
        gpu: &Gpu,
        io: LossIo<'_>,
        shape: LossShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.loss_bwd,
            &[io.tokens, io.logits, io.lse, &self.placeholder, io.scale],
            &shape.params()?,
            grid(shape.rows)?,
        ))
    }

    /// Cross-entropy forward against explicit targets (ignored ones: loss 0, correct 0):
    /// `io.lse` per row, `losses` and `io.correct` `[batch][seq_len]` (1.0 where the first
    /// largest logit is the target).
    pub fn masked_loss(
        &self,
        gpu: &Gpu,
        io: MaskedLossIo<'_>,
        losses: &wgpu::Buffer,
        shape: LossShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.masked_loss_fwd,
            &[io.targets, io.logits, io.lse, losses, io.scale, io.correct],
            &shape.params()?,
            grid(shape.rows)?,
        ))
    }

    /// Backward of [`TrainKernels::masked_loss`], in place: `io.logits` becomes
    /// `dlogits = scale[0]·(softmax − onehot)`, zero on ignored rows.
    pub fn masked_loss_backward(
        &self,
        gpu: &Gpu,
        io: MaskedLossIo<'_>,
        shape: LossShape,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.masked_loss_bwd,
            &[
                io.targets,
                io.logits,
                io.lse,
                &self.placeholder,
                io.scale,
                io.correct,
            ],
            &shape.params()?,
            grid(shape.rows)?,
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
        assert_eq!(size_of::<LossParams>(), size(LOSS_WGSL));
        assert_eq!(size_of::<LossParams>(), size(MASKED_LOSS_WGSL));
    }
}
