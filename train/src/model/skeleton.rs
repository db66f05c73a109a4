//! The language-model skeleton both training graphs share: parameters, the windows and
//! targets, the embedding, the head and loss, and the API ([`TrainModel`]); the
//! architecture's blocks in between are a [`Blocks`] (Gated DeltaNet in `gdn`, Mamba-2 in
//! `mamba2`).

use crate::model::shared::{copy_targets, f32_bytes};
use crate::model::{init_weight, GraphOptions, InitRng, Stage, StageMark, TrainGraph};
use loglinear_host_gpu::gpu::{Gpu, GpuError};
use loglinear_host_gpu::train::head::{Head, HeadIo, HeadShape};
use loglinear_host_gpu::train::kernels::{EmbedShape, Step, TrainKernels};
use loglinear_host_gpu::train::{NamedTensor, Param};
use loglinear_host_gpu::wgpu;
use loglinear_runtime::ModelConfig;

/// An architecture's blocks: what a training graph records between the embedding and the head.
pub trait Blocks {
    /// Mixed into the initialisation seed, so the two architectures draw different streams.
    const INIT_SALT: u64;
    /// Records every block's forward, calling `mark` after each block stage.
    fn encode_forward(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark);
    /// Records every block's backward (last block first), calling `mark` after each stage.
    fn encode_backward(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark);
    /// Indices in the parameter list of the output projections (scaled at initialisation).
    fn output_params(&self) -> Vec<usize>;
    /// The official initial value of `p` when the architecture has its own rule for it
    /// (A_log, dt_bias, norms, L, D); `None` for the weights the [`InitScheme`] initialises.
    ///
    /// [`InitScheme`]: crate::model::InitScheme
    fn init_special(&self, p: &Param, rng: &mut InitRng) -> Option<Vec<f32>>;
}

/// A language model set up for training on B windows of T tokens: the embedding, the blocks
/// `B`, the final norm, the LM head and the cross-entropy, each with its backward.
pub struct TrainModel<B> {
    pub(super) config: ModelConfig,
    pub(super) options: GraphOptions,
    pub(super) batch: usize,
    pub(super) seq_len: usize,
    pub(super) levels: usize,
    pub(super) lambda_cols: usize,
    pub(super) device: wgpu::Device,
    pub(super) params: Vec<Param>,
    pub(super) embedding: usize,
    pub(super) final_norm: usize,
    pub(super) lm_head: usize,
    /// The windows `[B][T+1]` (u32), copied from the caller's buffer by `encode_forward` (or
    /// packed from explicit inputs by `encode_forward_targets`); the embedding reads them.
    pub(super) tokens: wgpu::Buffer,
    /// Targets `[B][T]` (u32, `u32::MAX` = ignored), which the loss reads: the windows'
    /// next tokens, or the caller's explicit targets.
    pub(super) targets: wgpu::Buffer,
    /// Explicit inputs `[B][T]`, copied from the caller before packing into `tokens`.
    pub(super) inputs: wgpu::Buffer,
    /// Per-token 1.0 / 0.0: argmax(logits) = target (0 where ignored) `[B][T]`.
    pub(super) correct: wgpu::Buffer,
    pub(super) shift: Step,
    pub(super) pack: Step,
    /// The loss scale of the backward (one f32, written inside the encoder).
    pub(super) scale: wgpu::Buffer,
    pub(super) losses: wgpu::Buffer,
    pub(super) embed: Step,
    pub(super) head: Head,
    pub(super) embed_bwd: Step,
    /// The blocks between the embedding and the head.
    pub(super) mixer: B,
}

/// What a model's constructor makes for the skeleton before its blocks: the sizes, the
/// parameters and where the embedding, final norm and LM head sit in them, the window,
/// target and loss buffers, and the embedding's step.
pub(super) struct SkeletonParts {
    pub config: ModelConfig,
    pub options: GraphOptions,
    pub batch: usize,
    pub seq_len: usize,
    pub levels: usize,
    pub lambda_cols: usize,
    pub params: Vec<Param>,
    pub embedding: usize,
    pub final_norm: usize,
    pub lm_head: usize,
    pub windows: WindowBuffers,
    pub embed: Step,
}

/// The buffers every graph of `batch` windows of `seq_len` tokens has: the windows, the
/// explicit inputs and targets, the loss scale, the per-token losses and correctness.
pub(super) struct WindowBuffers {
    pub tokens: wgpu::Buffer,
    pub targets: wgpu::Buffer,
    pub inputs: wgpu::Buffer,
    pub correct: wgpu::Buffer,
    pub scale: wgpu::Buffer,
    pub losses: wgpu::Buffer,
}

impl WindowBuffers {
    /// Allocates them, zeroed.
    pub(super) fn new(gpu: &Gpu, batch: usize, seq_len: usize) -> Result<Self, GpuError> {
        let n = batch * seq_len;
        let z = |label: &str, len: usize| gpu.storage_zeroed(label, f32_bytes(len));
        Ok(Self {
            tokens: z("train tokens", batch * (seq_len + 1))?,
            scale: z("train loss scale", 1)?,
            losses: z("train losses", n)?,
            targets: z("train targets", n)?,
            inputs: z("train inputs", n)?,
            correct: z("train correct", n)?,
        })
    }
}

/// The skeleton's steps after the blocks: the head and loss with their backward, the
/// embedding's backward, and filling the windows and targets.
pub(super) struct SkeletonSteps {
    head: Head,
    embed_bwd: Step,
    shift: Step,
    pack: Step,
}

impl SkeletonSteps {
    /// Records the steps over `x_last` (the last block's output), with `dx` the gradient
    /// scratch the head writes and the embedding's backward reads.
    pub(super) fn record(
        gpu: &Gpu,
        k: &TrainKernels,
        parts: &SkeletonParts,
        x_last: &wgpu::Buffer,
        dx: &wgpu::Buffer,
    ) -> Result<Self, GpuError> {
        let c = &parts.config;
        let (d, vocab) = (c.hidden_size, c.vocab_size);
        let (batch, seq_len) = (parts.batch, parts.seq_len);
        let p = &parts.params;
        let head = Head::new(
            gpu,
            k,
            &HeadIo {
                x_last,
                norm_w: &p[parts.final_norm].value,
                norm_g: &p[parts.final_norm].grad,
                lm_head_w: &p[parts.lm_head].value,
                lm_head_g: &p[parts.lm_head].grad,
                targets: &parts.windows.targets,
                losses: &parts.windows.losses,
                correct: &parts.windows.correct,
                scale: &parts.windows.scale,
                dx,
            },
            HeadShape {
                seq_len,
                batch,
                d,
                vocab,
                eps: c.norm_eps,
            },
            parts.options.head_rows,
        )?;
        let embed_shape = EmbedShape {
            seq_len,
            batch,
            d,
            vocab,
        };
        let embed_bwd = k.embed_backward(
            gpu,
            &parts.windows.tokens,
            dx,
            &p[parts.embedding].grad,
            embed_shape,
        )?;
        let shift = k.shift_targets(
            gpu,
            &parts.windows.tokens,
            &parts.windows.targets,
            seq_len,
            batch,
        )?;
        let pack = k.pack_inputs(
            gpu,
            &parts.windows.inputs,
            &parts.windows.tokens,
            seq_len,
            batch,
        )?;
        Ok(Self {
            head,
            embed_bwd,
            shift,
            pack,
        })
    }
}

impl<B: Blocks> TrainModel<B> {
    /// The model of the skeleton's parts and steps around `mixer`.
    pub(super) fn assemble(
        gpu: &Gpu,
        parts: SkeletonParts,
        steps: SkeletonSteps,
        mixer: B,
    ) -> Self {
        Self {
            config: parts.config,
            options: parts.options,
            batch: parts.batch,
            seq_len: parts.seq_len,
            levels: parts.levels,
            lambda_cols: parts.lambda_cols,
            device: gpu.device.clone(),
            params: parts.params,
            embedding: parts.embedding,
            final_norm: parts.final_norm,
            lm_head: parts.lm_head,
            tokens: parts.windows.tokens,
            targets: parts.windows.targets,
            inputs: parts.windows.inputs,
            correct: parts.windows.correct,
            shift: steps.shift,
            pack: steps.pack,
            scale: parts.windows.scale,
            losses: parts.windows.losses,
            embed: parts.embed,
            head: steps.head,
            embed_bwd: steps.embed_bwd,
            mixer,
        }
    }

    /// The model's config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Windows per step.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Predicted tokens per window.
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// Operator levels (exact: bitlen(T − 1) + 1) and λ columns of the operator's inputs.
    pub fn levels(&self) -> (usize, usize) {
        (self.levels, self.lambda_cols)
    }

    /// Every trainable tensor, official keys and shapes; `decay` false for the official
    /// no-decay group (A_log, dt_bias, L, norms).
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// Per-token losses `[batch][seq_len]` (nats) of the last forward.
    pub fn losses(&self) -> &wgpu::Buffer {
        &self.losses
    }

    /// Per-token correctness `[batch][seq_len]` (f32) of the last forward: 1.0 where the first
    /// largest logit is the target, 0.0 elsewhere and at ignored positions.
    pub fn correct(&self) -> &wgpu::Buffer {
        &self.correct
    }

    /// Initialises every parameter as the official `_init_weights` does (deterministic for
    /// `seed`): the architecture's own rules for its gates, norms and skips
    /// ([`Blocks::init_special`]); the other weights by the graph's
    /// [`InitScheme`](crate::model::InitScheme) (official unless the graph was built
    /// otherwise), the output projections scaled down by √(2·layers).
    pub fn init_params(&self, gpu: &Gpu, seed: u64) -> Result<(), GpuError> {
        let mut rng = InitRng::new(seed ^ B::INIT_SALT);
        let outputs = self.mixer.output_params();
        for (i, p) in self.params.iter().enumerate() {
            let data = match self.mixer.init_special(p, &mut rng) {
                Some(data) => data,
                None => init_weight(
                    &mut rng,
                    p,
                    outputs.contains(&i),
                    self.config.num_layers,
                    self.config.conv_kernel,
                    self.options.init,
                ),
            };
            gpu.write(&p.value, &data);
        }
        Ok(())
    }

    /// Loads every parameter by its official key. A missing or mis-sized tensor is an error
    /// that names it (nothing is half-loaded: all are checked before any is written).
    pub fn load_params(
        &self,
        gpu: &Gpu,
        get: &dyn Fn(&str) -> Option<Vec<f32>>,
    ) -> Result<(), GpuError> {
        loglinear_host_gpu::train::load_params(gpu, &self.params, get)
    }

    /// Every parameter's key, shape and values.
    pub fn read_params(&self, gpu: &Gpu) -> Result<Vec<NamedTensor>, GpuError> {
        loglinear_host_gpu::train::read_params(gpu, &self.params)
    }

    /// Every parameter's gradient, in [`Self::params`] order.
    pub fn read_grads(&self, gpu: &Gpu) -> Result<Vec<Vec<f32>>, GpuError> {
        loglinear_host_gpu::train::read_grads(gpu, &self.params)
    }

    /// Records the forward over `tokens` (u32 `[batch][seq_len + 1]` windows: inputs are the
    /// first seq_len of each, targets the last seq_len), ending in [`Self::losses`].
    /// `tokens` needs COPY_SRC usage (any buffer from [`Gpu::storage_from`] has it); it is
    /// copied, so the caller may reuse it after encoding.
    pub fn encode_forward(&self, enc: &mut wgpu::CommandEncoder, tokens: &wgpu::Buffer) {
        self.encode_forward_marked(enc, tokens, &mut |_, _| {});
    }

    /// [`Self::encode_forward`], calling `mark` after each [`Stage`] (for profiling).
    pub fn encode_forward_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        tokens: &wgpu::Buffer,
        mark: StageMark,
    ) {
        let bytes = f32_bytes(self.batch * (self.seq_len + 1));
        enc.copy_buffer_to_buffer(tokens, 0, &self.tokens, 0, bytes);
        self.shift.encode(enc);
        self.encode_body(enc, mark);
    }

    /// Records the forward over explicit `inputs` and `targets` (u32 `[batch][seq_len]` each;
    /// a target of `u32::MAX` is ignored: loss 0, no gradient, correct 0), ending in
    /// [`Self::losses`] and [`Self::correct`]. Both are copied (COPY_SRC
    /// usage needed); a buffer smaller than `[batch][seq_len]` is an error.
    pub fn encode_forward_targets(
        &self,
        enc: &mut wgpu::CommandEncoder,
        inputs: &wgpu::Buffer,
        targets: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        copy_targets(
            enc,
            inputs,
            targets,
            &self.inputs,
            &self.targets,
            self.batch * self.seq_len,
        )?;
        self.pack.encode(enc);
        self.encode_body(enc, &mut |_, _| {});
        Ok(())
    }

    /// The forward from the packed windows and targets on.
    fn encode_body(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark) {
        self.embed.encode(enc);
        mark(enc, Stage::Embed);
        self.mixer.encode_forward(enc, mark);
        self.head.encode_forward(enc);
        mark(enc, Stage::Head);
    }

    /// Records the backward of the last recorded forward: every parameter's gradient
    /// += ∂(loss_scale · Σ losses)/∂param. The scale is written into the encoder (not through
    /// the queue), so several backwards with different scales in one encoder each get theirs.
    pub fn encode_backward(&self, enc: &mut wgpu::CommandEncoder, loss_scale: f32) {
        self.encode_backward_marked(enc, loss_scale, &mut |_, _| {});
    }

    /// [`Self::encode_backward`], calling `mark` after each [`Stage`].
    pub fn encode_backward_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        loss_scale: f32,
        mark: StageMark,
    ) {
        loglinear_host_gpu::train::encode_loss_scale(&self.device, enc, &self.scale, loss_scale);
        self.head.encode_backward(enc);
        mark(enc, Stage::HeadBwd);
        self.mixer.encode_backward(enc, mark);
        self.embed_bwd.encode(enc);
        mark(enc, Stage::EmbedBwd);
    }

    /// Records zeroing every gradient.
    pub fn encode_zero_grads(&self, enc: &mut wgpu::CommandEncoder) {
        loglinear_host_gpu::train::encode_zero_grads(enc, &self.params);
    }

    /// Index of a parameter by key.
    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }

    /// Indices of the embedding, final norm and LM head in [`Self::params`] (a tied
    /// head's is the embedding's).
    pub fn global_params(&self) -> [usize; 3] {
        [self.embedding, self.final_norm, self.lm_head]
    }
}

impl<B: Blocks> TrainGraph for TrainModel<B> {
    fn config(&self) -> &ModelConfig {
        TrainModel::config(self)
    }
    fn batch(&self) -> usize {
        TrainModel::batch(self)
    }
    fn seq_len(&self) -> usize {
        TrainModel::seq_len(self)
    }
    fn params(&self) -> &[Param] {
        TrainModel::params(self)
    }
    fn init_params(&self, gpu: &Gpu, seed: u64) -> Result<(), GpuError> {
        TrainModel::init_params(self, gpu, seed)
    }
    fn load_params(
        &self,
        gpu: &Gpu,
        get: &dyn Fn(&str) -> Option<Vec<f32>>,
    ) -> Result<(), GpuError> {
        TrainModel::load_params(self, gpu, get)
    }
    fn read_params(&self, gpu: &Gpu) -> Result<Vec<NamedTensor>, GpuError> {
        TrainModel::read_params(self, gpu)
    }
    fn read_grads(&self, gpu: &Gpu) -> Result<Vec<Vec<f32>>, GpuError> {
        TrainModel::read_grads(self, gpu)
    }
    fn encode_forward(&self, enc: &mut wgpu::CommandEncoder, tokens: &wgpu::Buffer) {
        TrainModel::encode_forward(self, enc, tokens)
    }
    fn encode_forward_targets(
        &self,
        enc: &mut wgpu::CommandEncoder,
        inputs: &wgpu::Buffer,
        targets: &wgpu::Buffer,
    ) -> Result<(), GpuError> {
        TrainModel::encode_forward_targets(self, enc, inputs, targets)
    }
    fn encode_backward(&self, enc: &mut wgpu::CommandEncoder, loss_scale: f32) {
        TrainModel::encode_backward(self, enc, loss_scale)
    }
    fn encode_forward_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        tokens: &wgpu::Buffer,
        mark: StageMark,
    ) {
        TrainModel::encode_forward_marked(self, enc, tokens, mark)
    }
    fn encode_backward_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        loss_scale: f32,
        mark: StageMark,
    ) {
        TrainModel::encode_backward_marked(self, enc, loss_scale, mark)
    }
    fn encode_zero_grads(&self, enc: &mut wgpu::CommandEncoder) {
        TrainModel::encode_zero_grads(self, enc)
    }
    fn losses(&self) -> &wgpu::Buffer {
        TrainModel::losses(self)
    }
    fn correct(&self) -> &wgpu::Buffer {
        TrainModel::correct(self)
    }
}
