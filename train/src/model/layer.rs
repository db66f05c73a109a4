//! A block: an architecture's token mixer ([`Mixer`]) and what every block has around it,
//! whatever the architecture: the input norm before it; after it the output projection, the
//! residual, the SwiGLU MLP with its norm, and the second residual. Their parameters,
//! activations, gradient scratch and recorded steps, and [`Build`], what a [`Mixer`] records
//! its own steps with.

use crate::model::init::InitRng;
use crate::model::shared::{f32_bytes, ParamList};
use loglinear_host_gpu::gpu::{Gpu, GpuError, Rows};
use loglinear_host_gpu::train::kernels::{
    GateSiluGradIo, LinearGradIo, LinearShape, NormGrads, NormIo, Step, TrainKernels,
};
use loglinear_host_gpu::train::Param;
use loglinear_host_gpu::wgpu;
use loglinear_runtime::{exact_levels, Arch, ModelConfig, LAMBDA_LEVELS};

/// The official keys of an architecture's tensors outside its mixers.
pub struct Keys {
    pub embedding: &'static str,
    /// The layers' prefix: layer `l`'s tensors are `{layers}.{l}.{name}`.
    pub layers: &'static str,
    /// A block's input norm, under its layer.
    pub input_norm: &'static str,
    pub final_norm: &'static str,
}

/// An architecture's token mixer: what a block records between its input norm and its output
/// projection, the operator at its centre. [`TrainModel`](crate::model::TrainModel) records
/// the rest.
pub trait Mixer: Sized {
    /// Mixed into the initialisation seed, so the two architectures draw different streams.
    const INIT_SALT: u64;
    const KEYS: Keys;
    /// The graph's name and the architectures it trains, for the error on another.
    const MODEL: &'static str;
    const FAMILY: &'static str;
    fn trains(arch: Arch) -> bool;

    /// Where one block's mixer parameters sit in the parameter list.
    type Params: Copy;
    /// Adds one block's mixer parameters (after its input norm, before its MLP); `key` makes
    /// a name under the layer its official key.
    fn add_params(
        list: &mut ParamList,
        dims: &Dims,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Self::Params, GpuError>;
    /// The mixer's output projection (o_proj / out_proj), which the block records.
    fn out_proj(params: &Self::Params) -> usize;
    /// Allocates the mixers' activations and scratch and records each block's mixer steps:
    /// from its normed input (`LayerActs::h1`) to its output (`LayerActs::mixed`), and back
    /// from the output's gradient (`LayerScratch::dmixed`) to the input's
    /// (`LayerScratch::dh`).
    fn record(
        b: &Build<'_>,
        layers: &[(Self::Params, &LayerActs)],
    ) -> Result<(Self, Vec<MixerSteps>), GpuError>;
    /// Records block `layer`'s operator, between its steps before and after it.
    fn encode_operator(&self, enc: &mut wgpu::CommandEncoder, layer: usize);
    /// Records the backward of block `layer`'s operator.
    fn encode_operator_backward(&self, enc: &mut wgpu::CommandEncoder, layer: usize);
    /// The official initial value of `p` when the architecture has its own rule for it
    /// (A_log, dt_bias, norms, L, D); `None` for the weights the [`InitScheme`] initialises.
    ///
    /// [`InitScheme`]: crate::model::InitScheme
    fn init_special(p: &Param, rng: &mut InitRng) -> Option<Vec<f32>>;
}

/// The sizes a graph is built for, checked.
pub struct Dims {
    pub config: ModelConfig,
    /// Windows per step.
    pub batch: usize,
    /// Predicted tokens per window.
    pub seq_len: usize,
    /// Rows of every activation: batch · seq_len, in (t, b) order (row r = t·B + b).
    pub rows: usize,
    /// Operator levels, exact (bitlen(T − 1) + 1, no saturated top level) so that its
    /// backward is exact.
    pub levels: usize,
    /// λ columns of the operator's inputs: the model's levels (log-linear), or as many as the
    /// operator's levels (plain: λ = 1 in each).
    pub lambda_cols: usize,
}

impl Dims {
    pub fn new(config: &ModelConfig, batch: usize, seq_len: usize) -> Result<Self, GpuError> {
        config
            .validate()
            .map_err(|e| GpuError::Invalid(format!("model config: {e}")))?;
        if batch == 0 || seq_len == 0 {
            return Err(GpuError::Invalid("batch and seq_len must be ≥ 1".into()));
        }
        let ll = config.arch.is_log_linear();
        let levels = exact_levels(seq_len as u64);
        if ll && levels > LAMBDA_LEVELS {
            return Err(GpuError::Invalid(format!(
                "seq_len {seq_len} needs {levels} levels, over the model's {LAMBDA_LEVELS}"
            )));
        }
        Ok(Self {
            config: *config,
            batch,
            seq_len,
            rows: batch * seq_len,
            levels,
            lambda_cols: if ll { LAMBDA_LEVELS } else { levels },
        })
    }
}

/// Where one block's parameters sit in the parameter list: its mixer's (`P`) and the ones
/// around it.
#[derive(Clone, Copy, Debug)]
pub struct LayerParams<P> {
    /// The input norm (attn_norm / mixer_norm).
    pub norm: usize,
    pub mixer: P,
    /// The mixer's output projection (o_proj / out_proj).
    pub out_proj: usize,
    pub mlp_norm: usize,
    pub gate: usize,
    pub up: usize,
    pub down: usize,
}

impl<P: Copy> LayerParams<P> {
    /// Adds one block's parameters in the official order: the input norm, the mixer's, the
    /// MLP's. `key` makes a name under the layer its official key.
    pub fn add<M: Mixer<Params = P>>(
        list: &mut ParamList,
        dims: &Dims,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Self, GpuError> {
        let c = &dims.config;
        let (d, im) = (c.hidden_size, c.intermediate_size);
        let norm = list.add(key(M::KEYS.input_norm), vec![d], false)?;
        let mixer = M::add_params(list, dims, key)?;
        Ok(Self {
            norm,
            mixer,
            out_proj: M::out_proj(&mixer),
            mlp_norm: list.add(key("mlp_norm.weight"), vec![d], false)?,
            gate: list.add(key("mlp.gate_proj.weight"), vec![im, d], true)?,
            up: list.add(key("mlp.up_proj.weight"), vec![im, d], true)?,
            down: list.add(key("mlp.down_proj.weight"), vec![d, im], true)?,
        })
    }
}

/// Activations one block keeps from its forward for its backward, around its mixer.
pub struct LayerActs {
    /// The input norm: 1/rms per row, and the normed input `[N][D]`, the mixer's input.
    pub rstd1: wgpu::Buffer,
    pub h1: wgpu::Buffer,
    /// The mixer's output before the output projection `[N][d_inner]`.
    pub mixed: wgpu::Buffer,
    /// Residual after the mixer `[N][D]`, mlp_norm's 1/rms and output.
    pub x_mid: wgpu::Buffer,
    pub rstd2: wgpu::Buffer,
    pub h2: wgpu::Buffer,
    /// SwiGLU gate and up projections, and SiLU(gate)·up `[N][I]`.
    pub mg: wgpu::Buffer,
    pub mu: wgpu::Buffer,
    pub act: wgpu::Buffer,
}

impl LayerActs {
    pub fn new(gpu: &Gpu, dims: &Dims) -> Result<Self, GpuError> {
        let c = &dims.config;
        let (n, d, im) = (dims.rows, c.hidden_size, c.intermediate_size);
        let z = |label: &str, len: usize| gpu.storage_zeroed(label, f32_bytes(len));
        Ok(Self {
            rstd1: z("rstd1", n)?,
            h1: z("h1", n * d)?,
            mixed: z("mixed", n * c.d_inner())?,
            x_mid: z("x_mid", n * d)?,
            rstd2: z("rstd2", n)?,
            h2: z("h2", n * d)?,
            mg: z("mg", n * im)?,
            mu: z("mu", n * im)?,
            act: z("act", n * im)?,
        })
    }
}

/// Scratch shared by all blocks around their mixers (each block's steps overwrite it).
pub struct LayerScratch {
    /// The output projection's and the MLP's outputs `[N][D]`, before their residual adds.
    pub mix_out: wgpu::Buffer,
    pub mlp_out: wgpu::Buffer,
    /// dL/d(residual) `[N][D]`, carried down the layers.
    pub dx: wgpu::Buffer,
    /// dL/d(normed input) `[N][D]`: the mixer's backward writes it.
    pub dh: wgpu::Buffer,
    /// dL/d(mixer output) `[N][d_inner]`: the mixer's backward reads it.
    pub dmixed: wgpu::Buffer,
    pub dact: wgpu::Buffer,
    pub dmg: wgpu::Buffer,
    pub dmu: wgpu::Buffer,
    /// Per-row shares of norm-weight gradients `[N][max(D, d_inner)]`.
    pub wrow: wgpu::Buffer,
    /// One zero f32 that a step binds in place of a parameter the config does not have
    /// (plain models' L, which their steps do not read).
    pub absent: wgpu::Buffer,
}

impl LayerScratch {
    pub fn new(gpu: &Gpu, dims: &Dims) -> Result<Self, GpuError> {
        let c = &dims.config;
        let (n, d, di, im) = (dims.rows, c.hidden_size, c.d_inner(), c.intermediate_size);
        let z = |label: &str, len: usize| gpu.storage_zeroed(label, f32_bytes(len));
        Ok(Self {
            mix_out: z("mixer out", n * d)?,
            mlp_out: z("mlp out", n * d)?,
            dx: z("dx", n * d)?,
            dh: z("dh", n * d)?,
            dmixed: z("dmixed", n * di)?,
            dact: z("dact", n * im)?,
            dmg: z("dmg", n * im)?,
            dmu: z("dmu", n * im)?,
            wrow: z("wrow", n * d.max(di))?,
            absent: z("absent parameter", 1)?,
        })
    }
}

/// An RMSNorm of `rows` rows of `cols`: input, weight (a parameter index), output, 1/rms.
#[derive(Clone, Copy)]
pub struct Norm<'a> {
    pub x: &'a wgpu::Buffer,
    pub w: usize,
    pub out: &'a wgpu::Buffer,
    pub rstd: &'a wgpu::Buffer,
    pub rows: usize,
    pub cols: usize,
}

/// What a graph's steps are recorded with: the device, the kernels, the sizes, the
/// parameters and the shared scratch.
pub struct Build<'a> {
    pub gpu: &'a Gpu,
    pub k: &'a TrainKernels,
    pub dims: &'a Dims,
    pub params: &'a [Param],
    pub scratch: &'a LayerScratch,
}

impl<'a> Build<'a> {
    /// A parameter's value.
    pub fn value(&self, i: usize) -> &'a wgpu::Buffer {
        &self.params[i].value
    }

    /// A parameter's gradient.
    pub fn grad(&self, i: usize) -> &'a wgpu::Buffer {
        &self.params[i].grad
    }

    /// A zeroed buffer of `len` f32.
    pub fn zeros(&self, label: &str, len: usize) -> Result<wgpu::Buffer, GpuError> {
        self.gpu.storage_zeroed(label, f32_bytes(len))
    }

    /// The linear layer of weight `w` (`[out_dim][in_dim]`, its shape) over every row.
    fn shape(&self, w: usize) -> LinearShape {
        let shape = &self.params[w].shape;
        LinearShape {
            rows: self.dims.rows,
            in_dim: shape[1],
            out_dim: shape[0],
        }
    }

    /// `y = x·Wᵀ` for the weight parameter `w`.
    pub fn linear(&self, w: usize, x: Rows<'_>, y: Rows<'_>) -> Result<Step, GpuError> {
        self.k.linear(self.gpu, self.shape(w), x, self.value(w), y)
    }

    /// The backward of [`Self::linear`]: `dx (+)= dy·W` (added when `accumulate_dx`),
    /// `dW += dyᵀ·x`.
    pub fn linear_backward(
        &self,
        w: usize,
        x: Rows<'_>,
        dy: Rows<'_>,
        dx: Rows<'_>,
        accumulate_dx: bool,
    ) -> Result<[Step; 2], GpuError> {
        let io = LinearGradIo {
            x,
            w: self.value(w),
            dw: self.grad(w),
            dy,
            dx,
            accumulate_dx,
        };
        self.k.linear_backward(self.gpu, self.shape(w), io)
    }

    /// The buffers of `norm` as the kernels take them.
    pub fn norm_io<'n>(&'n self, norm: Norm<'n>) -> NormIo<'n> {
        NormIo {
            x: norm.x,
            w: self.value(norm.w),
            out: norm.out,
            rstd: norm.rstd,
        }
    }

    pub fn rmsnorm(&self, norm: Norm<'_>) -> Result<Step, GpuError> {
        let eps = self.dims.config.norm_eps;
        let io = self.norm_io(norm);
        self.k.rmsnorm(self.gpu, io, norm.rows, norm.cols, eps)
    }

    /// The backward of [`Self::rmsnorm`] from `dy` into `dx` (added when `accumulate_dx`),
    /// and the sum of its weight's per-row gradient shares into the weight's gradient.
    pub fn rmsnorm_backward(
        &self,
        norm: Norm<'_>,
        dy: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        accumulate_dx: bool,
    ) -> Result<[Step; 2], GpuError> {
        let wrow = &self.scratch.wrow;
        let grads = NormGrads { dy, dx, wrow };
        let io = self.norm_io(norm);
        let (rows, cols) = (norm.rows, norm.cols);
        Ok([
            self.k
                .rmsnorm_backward(self.gpu, io, grads, rows, cols, accumulate_dx)?,
            self.weight_grad(rows, cols, norm.w)?,
        ])
    }

    /// Sums the per-row shares `[rows][cols]` of a norm weight's gradient (in the scratch's
    /// `wrow`) into the gradient of parameter `w`.
    pub fn weight_grad(&self, rows: usize, cols: usize, w: usize) -> Result<Step, GpuError> {
        let shares = Rows::new(&self.scratch.wrow, 0, cols);
        self.k.colsum(self.gpu, shares, rows, cols, self.grad(w))
    }
}

/// A mixer's steps in one block: before its operator (from the normed input), after it (up
/// to its output), and their backwards (from its output's gradient; down to the normed
/// input's, in the scratch's `dh`).
pub struct MixerSteps {
    pub before: Vec<Step>,
    pub after: Vec<Step>,
    pub bwd_after: Vec<Step>,
    pub bwd_before: Vec<Step>,
}

/// One block's recorded work around its operator, in order: forward up to the operator, after
/// it; backward down to the operator's, after it.
pub struct LayerSteps {
    pub before_op: Vec<Step>,
    pub after_op: Vec<Step>,
    pub bwd_after_op: Vec<Step>,
    pub bwd_before_op: Vec<Step>,
}

/// What one block is recorded over: its parameters, its activations, and the residual
/// stream's buffers in and out.
pub struct LayerIo<'a, P> {
    pub params: &'a LayerParams<P>,
    pub acts: &'a LayerActs,
    pub x_in: &'a wgpu::Buffer,
    pub x_out: &'a wgpu::Buffer,
}

impl LayerSteps {
    /// The block of `io` with the `mixer`'s steps inside it: input norm, mixer; output
    /// projection, residual, mlp_norm → SwiGLU → down, residual; and the backward of each.
    pub fn record<P>(
        b: &Build<'_>,
        io: LayerIo<'_, P>,
        mixer: MixerSteps,
    ) -> Result<Self, GpuError> {
        let (gpu, k, s) = (b.gpu, b.k, b.scratch);
        let (p, a) = (io.params, io.acts);
        let c = &b.dims.config;
        let (n, d, di, im) = (b.dims.rows, c.hidden_size, c.d_inner(), c.intermediate_size);
        let input_norm = Norm {
            x: io.x_in,
            w: p.norm,
            out: &a.h1,
            rstd: &a.rstd1,
            rows: n,
            cols: d,
        };
        let mlp_norm = Norm {
            x: &a.x_mid,
            w: p.mlp_norm,
            out: &a.h2,
            rstd: &a.rstd2,
            rows: n,
            cols: d,
        };
        let (mixed, h2, act) = (
            Rows::new(&a.mixed, 0, di),
            Rows::new(&a.h2, 0, d),
            Rows::new(&a.act, 0, im),
        );
        let mut before_op = vec![b.rmsnorm(input_norm)?];
        before_op.extend(mixer.before);
        let mut after_op = mixer.after;
        after_op.extend([
            b.linear(p.out_proj, mixed, Rows::new(&s.mix_out, 0, d))?,
            k.add(gpu, io.x_in, &s.mix_out, &a.x_mid, n * d)?,
            b.rmsnorm(mlp_norm)?,
            b.linear(p.gate, h2, Rows::new(&a.mg, 0, im))?,
            b.linear(p.up, h2, Rows::new(&a.mu, 0, im))?,
            k.gate_silu(gpu, &a.mu, &a.mg, &a.act, n * im)?,
            b.linear(p.down, act, Rows::new(&s.mlp_out, 0, d))?,
            k.add(gpu, &a.x_mid, &s.mlp_out, io.x_out, n * d)?,
        ]);

        // Backward, top down. s.dx holds dL/d x_out on entry.
        let (dx, dh) = (Rows::new(&s.dx, 0, d), Rows::new(&s.dh, 0, d));
        let mut bwd_after_op = Vec::new();
        let dact = Rows::new(&s.dact, 0, im);
        bwd_after_op.extend(b.linear_backward(p.down, act, dx, dact, false)?);
        let swiglu = GateSiluGradIo {
            a: &a.mu,
            b: &a.mg,
            dout: &s.dact,
            da: &s.dmu,
            db: &s.dmg,
        };
        bwd_after_op.push(k.gate_silu_backward(gpu, swiglu, n * im)?);
        for (w, dy, accumulate_dx) in [(p.gate, &s.dmg, false), (p.up, &s.dmu, true)] {
            let dy = Rows::new(dy, 0, im);
            bwd_after_op.extend(b.linear_backward(w, h2, dy, dh, accumulate_dx)?);
        }
        bwd_after_op.extend(b.rmsnorm_backward(mlp_norm, &s.dh, &s.dx, true)?);
        // s.dx now holds dL/d x_mid.
        let dmixed = Rows::new(&s.dmixed, 0, di);
        bwd_after_op.extend(b.linear_backward(p.out_proj, mixed, dx, dmixed, false)?);
        bwd_after_op.extend(mixer.bwd_after);
        let mut bwd_before_op = mixer.bwd_before;
        bwd_before_op.extend(b.rmsnorm_backward(input_norm, &s.dh, &s.dx, true)?);
        Ok(Self {
            before_op,
            after_op,
            bwd_after_op,
            bwd_before_op,
        })
    }
}
