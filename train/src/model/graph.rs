//! [`TrainGraph`], the API every model graph shares.

use crate::model::shared::StageMark;
use loglinear_host_gpu::gpu::{Gpu, GpuError};
use loglinear_host_gpu::train::{NamedTensor, Param};
use loglinear_host_gpu::wgpu;
use loglinear_runtime::ModelConfig;

/// A model's training graph on B windows of T tokens. See [`GdnTrainModel`](crate::model::gdn::GdnTrainModel) for what each
/// method does; every implementation behaves the same.
pub trait TrainGraph {
    /// The model's config.
    fn config(&self) -> &ModelConfig;
    /// Windows per step.
    fn batch(&self) -> usize;
    /// Predicted tokens per window.
    fn seq_len(&self) -> usize;
    /// Every trainable tensor (official keys and shapes, decay flags).
    fn params(&self) -> &[Param];
    /// The official initialisation, deterministic for `seed`.
    fn init_params(&self, gpu: &Gpu, seed: u64) -> Result<(), GpuError>;
    /// Loads every parameter by its official key (all checked before any is written).
    fn load_params(
        &self,
        gpu: &Gpu,
        get: &dyn Fn(&str) -> Option<Vec<f32>>,
    ) -> Result<(), GpuError>;
    /// Every parameter's key, shape and values.
    fn read_params(&self, gpu: &Gpu) -> Result<Vec<NamedTensor>, GpuError>;
    /// Every parameter's gradient, in [`TrainGraph::params`] order.
    fn read_grads(&self, gpu: &Gpu) -> Result<Vec<Vec<f32>>, GpuError>;
    /// The forward over windows `[batch][seq_len + 1]` (next-token targets).
    fn encode_forward(&self, enc: &mut wgpu::CommandEncoder, tokens: &wgpu::Buffer);
    /// The forward over explicit inputs and targets `[batch][seq_len]` (`u32::MAX` ignored).
    fn encode_forward_targets(
        &self,
        enc: &mut wgpu::CommandEncoder,
        inputs: &wgpu::Buffer,
        targets: &wgpu::Buffer,
    ) -> Result<(), GpuError>;
    /// With `head_rows`: the next recorded forward and backward run the head on the fewest
    /// rows it is recorded at that hold `scored` rows (the scored targets of the inputs about
    /// to be recorded; see `loglinear_host_gpu::train::head::Head::set_scored_rows`). Scored
    /// rows beyond them get NaN losses, as beyond the capacity. Until it is called, the head
    /// runs at its capacity; without `head_rows` it changes nothing.
    fn set_scored_rows(&self, scored: usize);
    /// [`TrainGraph::encode_forward_targets`], calling `mark` after each stage.
    fn encode_forward_targets_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        inputs: &wgpu::Buffer,
        targets: &wgpu::Buffer,
        mark: StageMark,
    ) -> Result<(), GpuError>;
    /// Gradients += ∂(loss_scale · Σ losses)/∂param of the last forward.
    fn encode_backward(&self, enc: &mut wgpu::CommandEncoder, loss_scale: f32);
    /// [`TrainGraph::encode_forward`], calling `mark` after each stage.
    fn encode_forward_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        tokens: &wgpu::Buffer,
        mark: StageMark,
    );
    /// [`TrainGraph::encode_backward`], calling `mark` after each stage.
    fn encode_backward_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        loss_scale: f32,
        mark: StageMark,
    );
    /// Zeroes every gradient.
    fn encode_zero_grads(&self, enc: &mut wgpu::CommandEncoder);
    /// Per-token losses `[batch][seq_len]` (f32) of the last forward.
    fn losses(&self) -> &wgpu::Buffer;
    /// Per-token 1.0 / 0.0 argmax = target `[batch][seq_len]` (f32) of the last forward.
    fn correct(&self) -> &wgpu::Buffer;
}
