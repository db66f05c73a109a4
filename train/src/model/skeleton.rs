//! The language-model skeleton both training graphs share: parameters, the windows and
//! targets, the embedding, the blocks around their mixers (`layer`), the head and loss, and
//! the API ([`TrainModel`]); the architecture's mixer is a [`Mixer`] (Gated DeltaNet in
//! `gdn`, Mamba-2 in `mamba2`).

use crate::model::graph::TrainGraph;
use crate::model::init::{init_weight, GraphOptions, InitRng};
use crate::model::layer::{
    Build, Dims, LayerActs, LayerIo, LayerParams, LayerScratch, LayerSteps, Mixer,
};
use crate::model::shared::{copy_targets, f32_bytes, ParamList, Stage, StageMark};
use loglinear_host_gpu::gpu::{Gpu, GpuError};
use loglinear_host_gpu::train::head::{head_capacity, Head, HeadIo, HeadShape};
use loglinear_host_gpu::train::kernels::{encode_all, EmbedShape, Step, TrainKernels};
use loglinear_host_gpu::train::{NamedTensor, Param};
use loglinear_host_gpu::wgpu;
use loglinear_runtime::ModelConfig;

/// A language model set up for training on B windows of T tokens: the embedding, the blocks
/// (each an input norm, the mixer `M`, an output projection and a SwiGLU MLP, with residuals),
/// the final norm, the LM head and the cross-entropy, each with its backward.
pub struct TrainModel<M> {
    config: ModelConfig,
    options: GraphOptions,
    batch: usize,
    seq_len: usize,
    levels: usize,
    lambda_cols: usize,
    device: wgpu::Device,
    params: Vec<Param>,
    embedding: usize,
    final_norm: usize,
    lm_head: usize,
    /// The output projections (o_proj / out_proj, down_proj), scaled at initialisation.
    output_params: Vec<usize>,
    windows: WindowBuffers,
    shift: Step,
    pack: Step,
    embed: Step,
    layers: Vec<LayerSteps>,
    head: Head,
    embed_bwd: Step,
    /// The mixers, with their operators.
    mixer: M,
    // Kept alive for the bind groups.
    _xs: Vec<wgpu::Buffer>,
    _acts: Vec<LayerActs>,
    _scratch: LayerScratch,
}

/// The buffers every graph of `batch` windows of `seq_len` tokens has: the windows, the
/// explicit inputs and targets, the loss scale, the per-token losses and correctness.
struct WindowBuffers {
    /// The windows `[B][T+1]` (u32), copied from the caller's buffer by `encode_forward` (or
    /// packed from explicit inputs by `encode_forward_targets`); the embedding reads them.
    tokens: wgpu::Buffer,
    /// Targets `[B][T]` (u32, `u32::MAX` = ignored), which the loss reads: the windows'
    /// next tokens, or the caller's explicit targets.
    targets: wgpu::Buffer,
    /// Explicit inputs `[B][T]`, copied from the caller before packing into `tokens`.
    inputs: wgpu::Buffer,
    /// Per-token 1.0 / 0.0: argmax(logits) = target (0 where ignored) `[B][T]`.
    correct: wgpu::Buffer,
    /// The loss scale of the backward (one f32, written inside the encoder).
    scale: wgpu::Buffer,
    losses: wgpu::Buffer,
}

impl WindowBuffers {
    /// Allocates them, zeroed.
    fn new(gpu: &Gpu, batch: usize, seq_len: usize) -> Result<Self, GpuError> {
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

impl<M: Mixer> TrainModel<M> {
    /// Allocates parameters (uninitialised: call [`Self::init_params`] or
    /// [`Self::load_params`]), activations and gradient scratch for `batch` windows of
    /// `seq_len` tokens, and records every step. The mixer's architectures only.
    pub fn new(
        gpu: &Gpu,
        config: &ModelConfig,
        batch: usize,
        seq_len: usize,
    ) -> Result<Self, GpuError> {
        Self::with_options(gpu, config, batch, seq_len, GraphOptions::default())
    }

    /// [`Self::new`] with training-only choices (a tied LM head, the initialisation).
    pub fn with_options(
        gpu: &Gpu,
        config: &ModelConfig,
        batch: usize,
        seq_len: usize,
        options: GraphOptions,
    ) -> Result<Self, GpuError> {
        let c = *config;
        if !M::trains(c.arch) {
            return Err(GpuError::Invalid(format!(
                "{} trains {} models, not {}",
                M::MODEL,
                M::FAMILY,
                c.arch.name()
            )));
        }
        let dims = Dims::new(&c, batch, seq_len)?;
        let n = dims.rows;
        // Before allocating anything: a bad head capacity fails fast.
        head_capacity(options.head_rows, n)?;
        let (d, vocab) = (c.hidden_size, c.vocab_size);

        // Parameters, official keys and shapes.
        let mut list = ParamList::new(gpu);
        let embedding = list.add(M::KEYS.embedding.into(), vec![vocab, d], true)?;
        let mut layer_params = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            let key = |s: &str| format!("{}.{l}.{s}", M::KEYS.layers);
            layer_params.push(LayerParams::add::<M>(&mut list, &dims, &key)?);
        }
        let final_norm = list.add(M::KEYS.final_norm.into(), vec![d], false)?;
        // A tied head reads (and adds its gradient into) the embedding.
        let lm_head = if options.tie_embeddings {
            embedding
        } else {
            list.add("lm_head.weight".into(), vec![vocab, d], true)?
        };
        let params = list.into_vec();

        let windows = WindowBuffers::new(gpu, batch, seq_len)?;
        let xs: Vec<wgpu::Buffer> = (0..=c.num_layers)
            .map(|l| gpu.storage_zeroed(&format!("x{l}"), f32_bytes(n * d)))
            .collect::<Result<_, _>>()?;
        let acts: Vec<LayerActs> = (0..c.num_layers)
            .map(|_| LayerActs::new(gpu, &dims))
            .collect::<Result<_, _>>()?;
        let scratch = LayerScratch::new(gpu, &dims)?;
        let k = TrainKernels::new(gpu)?;
        let b = Build {
            gpu,
            k: &k,
            dims: &dims,
            params: &params,
            scratch: &scratch,
        };
        let embed_shape = EmbedShape {
            seq_len,
            batch,
            d,
            vocab,
        };
        let embed = k.embed(
            gpu,
            &windows.tokens,
            &params[embedding].value,
            &xs[0],
            embed_shape,
        )?;
        let mixer_layers: Vec<_> = layer_params.iter().map(|p| p.mixer).zip(&acts).collect();
        let (mixer, mixer_steps) = M::record(&b, &mixer_layers)?;
        let mut layers = Vec::with_capacity(c.num_layers);
        for (l, (p, steps)) in layer_params.iter().zip(mixer_steps).enumerate() {
            let io = LayerIo {
                params: p,
                acts: &acts[l],
                x_in: &xs[l],
                x_out: &xs[l + 1],
            };
            layers.push(LayerSteps::record(&b, io, steps)?);
        }

        // The head and loss over the last block's output, the embedding's backward (both
        // through the scratch's dx), and filling the windows and targets.
        let head = Head::new(
            gpu,
            &k,
            &HeadIo {
                x_last: &xs[c.num_layers],
                norm_w: &params[final_norm].value,
                norm_g: &params[final_norm].grad,
                lm_head_w: &params[lm_head].value,
                lm_head_g: &params[lm_head].grad,
                targets: &windows.targets,
                losses: &windows.losses,
                correct: &windows.correct,
                scale: &windows.scale,
                dx: &scratch.dx,
            },
            HeadShape {
                seq_len,
                batch,
                d,
                vocab,
                eps: c.norm_eps,
            },
            options.head_rows,
        )?;
        let embed_bwd = k.embed_backward(
            gpu,
            &windows.tokens,
            &scratch.dx,
            &params[embedding].grad,
            embed_shape,
        )?;
        let shift = k.shift_targets(gpu, &windows.tokens, &windows.targets, seq_len, batch)?;
        let pack = k.pack_inputs(gpu, &windows.inputs, &windows.tokens, seq_len, batch)?;
        let output_params = layer_params
            .iter()
            .flat_map(|p| [p.out_proj, p.down])
            .collect();
        Ok(Self {
            config: c,
            options,
            batch,
            seq_len,
            levels: dims.levels,
            lambda_cols: dims.lambda_cols,
            device: gpu.device.clone(),
            params,
            embedding,
            final_norm,
            lm_head,
            output_params,
            windows,
            shift,
            pack,
            embed,
            layers,
            head,
            embed_bwd,
            mixer,
            _xs: xs,
            _acts: acts,
            _scratch: scratch,
        })
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
        &self.windows.losses
    }

    /// Per-token correctness `[batch][seq_len]` (f32) of the last forward: 1.0 where the first
    /// largest logit is the target, 0.0 elsewhere and at ignored positions.
    pub fn correct(&self) -> &wgpu::Buffer {
        &self.windows.correct
    }

    /// Initialises every parameter as the official `_init_weights` does (deterministic for
    /// `seed`): the architecture's own rules for its gates, norms and skips
    /// ([`Mixer::init_special`]); the other weights by the graph's
    /// [`InitScheme`](crate::model::InitScheme) (official unless the graph was built
    /// otherwise), the output projections scaled down by √(2·layers).
    pub fn init_params(&self, gpu: &Gpu, seed: u64) -> Result<(), GpuError> {
        let mut rng = InitRng::new(seed ^ M::INIT_SALT);
        for (i, p) in self.params.iter().enumerate() {
            let data = match M::init_special(p, &mut rng) {
                Some(data) => data,
                None => init_weight(
                    &mut rng,
                    p,
                    self.output_params.contains(&i),
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
        enc.copy_buffer_to_buffer(tokens, 0, &self.windows.tokens, 0, bytes);
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
        self.encode_forward_targets_marked(enc, inputs, targets, &mut |_, _| {})
    }

    /// [`Self::encode_forward_targets`], calling `mark` after each [`Stage`].
    pub fn encode_forward_targets_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        inputs: &wgpu::Buffer,
        targets: &wgpu::Buffer,
        mark: StageMark,
    ) -> Result<(), GpuError> {
        copy_targets(
            enc,
            inputs,
            targets,
            &self.windows.inputs,
            &self.windows.targets,
            self.batch * self.seq_len,
        )?;
        self.pack.encode(enc);
        self.encode_body(enc, mark);
        Ok(())
    }

    /// The forward from the packed windows and targets on.
    fn encode_body(&self, enc: &mut wgpu::CommandEncoder, mark: StageMark) {
        self.embed.encode(enc);
        mark(enc, Stage::Embed);
        for (l, s) in self.layers.iter().enumerate() {
            encode_all(enc, &s.before_op);
            mark(enc, Stage::MixerIn);
            self.mixer.encode_operator(enc, l);
            mark(enc, Stage::Operator);
            encode_all(enc, &s.after_op);
            mark(enc, Stage::MixerOut);
        }
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
        loglinear_host_gpu::train::encode_loss_scale(
            &self.device,
            enc,
            &self.windows.scale,
            loss_scale,
        );
        self.head.encode_backward(enc);
        mark(enc, Stage::HeadBwd);
        for (l, s) in self.layers.iter().enumerate().rev() {
            encode_all(enc, &s.bwd_after_op);
            mark(enc, Stage::MixerOutBwd);
            self.mixer.encode_operator_backward(enc, l);
            mark(enc, Stage::OperatorBwd);
            encode_all(enc, &s.bwd_before_op);
            mark(enc, Stage::MixerInBwd);
        }
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

impl<M: Mixer> TrainGraph for TrainModel<M> {
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
    fn encode_forward_targets_marked(
        &self,
        enc: &mut wgpu::CommandEncoder,
        inputs: &wgpu::Buffer,
        targets: &wgpu::Buffer,
        mark: StageMark,
    ) -> Result<(), GpuError> {
        TrainModel::encode_forward_targets_marked(self, enc, inputs, targets, mark)
    }
    fn set_scored_rows(&self, scored: usize) {
        self.head.set_scored_rows(scored);
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
