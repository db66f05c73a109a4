//! Cross-entropy over the vocabulary, against the next token or explicit (maskable) targets,
//! forward and backward.

use super::{grid, u, Step, TrainKernels};
use crate::gpu::{Gpu, GpuError};

impl TrainKernels {
    /// Cross-entropy forward: `lse` per row and `loss` `[batch][t]`.
    #[allow(clippy::too_many_arguments)]
    pub fn loss(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        loss: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.loss_fwd,
            &[tokens, logits, lse, loss, scale],
            &words,
            grid(t * batch)?,
        ))
    }

    /// Cross-entropy backward: `dlogits = scale[0]·(softmax − onehot(target))`.
    #[allow(clippy::too_many_arguments)]
    pub fn loss_backward(
        &self,
        gpu: &Gpu,
        tokens: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        dlogits: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.loss_bwd,
            &[tokens, logits, lse, dlogits, scale],
            &words,
            grid(t * batch)?,
        ))
    }

    /// Cross-entropy forward against explicit `targets` `[batch][t]` (u32, `u32::MAX` =
    /// ignored: loss 0, correct 0): `lse` per row, `loss` and `correct` `[batch][t]` (1.0 where
    /// the first largest logit is the target).
    #[allow(clippy::too_many_arguments)]
    pub fn masked_loss(
        &self,
        gpu: &Gpu,
        targets: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        loss: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        correct: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.masked_loss_fwd,
            &[targets, logits, lse, loss, scale, correct],
            &words,
            grid(t * batch)?,
        ))
    }

    /// Backward of [`TrainKernels::masked_loss`]: `dlogits = scale[0]·(softmax − onehot)`,
    /// zero on ignored rows.
    #[allow(clippy::too_many_arguments)]
    pub fn masked_loss_backward(
        &self,
        gpu: &Gpu,
        targets: &wgpu::Buffer,
        logits: &wgpu::Buffer,
        lse: &wgpu::Buffer,
        dlogits: &wgpu::Buffer,
        scale: &wgpu::Buffer,
        correct: &wgpu::Buffer,
        t: usize,
        batch: usize,
        vocab: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(t)?, u(batch)?, u(vocab)?];
        Ok(Self::step(
            gpu,
            &self.masked_loss_bwd,
            &[targets, logits, lse, dlogits, scale, correct],
            &words,
            grid(t * batch)?,
        ))
    }
}
