//! Training on the GPU: the model's forward with saved activations and its backward
//! (`gdn_model`, `mamba2_model`), the head both end in (`head`), the API both share
//! (`graph::TrainGraph`), and the optimizer (`optim`).

/// One trainable tensor: its official checkpoint key, its shape, and its value and gradient
/// buffers on the GPU (f32, row-major, `len` values each). Backward passes add into `grad`, so
/// gradient accumulation over micro-batches is the default; the trainer zeroes it per step.
pub struct Param {
    /// Official state-dict key, e.g. `model.layers.0.attn.q_proj.weight`.
    pub name: String,
    pub shape: Vec<usize>,
    pub len: usize,
    pub value: wgpu::Buffer,
    pub grad: wgpu::Buffer,
    /// Whether AdamW's weight decay applies (the official no-decay group is false: A_log,
    /// dt_bias, D, L, norms and biases).
    pub decay: bool,
}

use crate::gpu::{Gpu, GpuError};
use loglinear_runtime::rng::SplitMix64;

/// Training-only choices of a graph; the model file records neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphOptions {
    /// The LM head reuses the embedding matrix: there is no `lm_head.weight` parameter and the
    /// head's weight gradient adds into the embedding's. Zoology's MQAR models tie them. The
    /// model file (so export and the runtime) has no tied head: a tied graph's parameters are
    /// for the trainer's own evaluation, not for `--export`.
    pub tie_embeddings: bool,
    /// How [`graph::TrainGraph::init_params`] initialises the weights.
    pub init: InitScheme,
    /// `None`: the head (final norm, LM head, loss and their backward) runs on every one of
    /// the batch · seq_len rows. `Some(cap)`: only on the rows whose target is not ignored, at
    /// most `cap` of them (1 ≤ cap ≤ batch · seq_len), in increasing row order; for tasks that
    /// score few positions this saves most of the head's time and memory. Scored rows beyond
    /// `cap` get NaN losses, correctness and gradients (see [`head`]).
    pub head_rows: Option<usize>,
}

/// Initialisation of the weight matrices, short convs and embedding (the other parameters —
/// A_log, dt_bias, D, L, norms — are the official ones under either scheme).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitScheme {
    /// The official `_init_weights` (fla): Linear, conv and embedding weights N(0, 0.006),
    /// conv bias 0; the output projections (o_proj / out_proj, down_proj)
    /// kaiming-uniform(a = √5) = U(±1/√fan_in), divided by √(2·layers).
    #[default]
    Official,
    /// Zoology's (`zoology/model.py::_init_weights`, which re-initialises only `nn.Linear` and
    /// `nn.Embedding`): every Linear and embedding weight N(0, 0.02), output projections
    /// included; the short convs keep PyTorch's `Conv1d` default, U(±1/√kernel) for weight and
    /// bias (depthwise: fan_in = kernel).
    Zoology,
}

/// The initialisation's random numbers (deterministic for a seed): SplitMix64 uniform
/// doubles in [0, 1), and normals by Box–Muller.
pub(crate) struct InitRng(pub(crate) SplitMix64);

impl InitRng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    pub(crate) fn uniform(&mut self) -> f64 {
        self.0.unit_f64()
    }

    pub(crate) fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// `len` draws of U(±bound).
    pub(crate) fn uniform_sym(&mut self, len: usize, bound: f64) -> Vec<f32> {
        (0..len)
            .map(|_| ((2.0 * self.uniform() - 1.0) * bound) as f32)
            .collect()
    }

    /// softplus⁻¹(dt) with dt = exp(U[ln 1e-3, ln 1e-1]) floored at 1e-4: the official
    /// dt_bias of both layers.
    pub(crate) fn dt_bias(&mut self, len: usize) -> Vec<f32> {
        (0..len)
            .map(|_| {
                let (lo, hi) = (1e-3f64.ln(), 1e-1f64.ln());
                let dt = (lo + self.uniform() * (hi - lo)).exp().max(1e-4);
                // softplus⁻¹(dt) = dt + ln(−expm1(−dt))
                (dt + (-(-dt).exp_m1()).ln()) as f32
            })
            .collect()
    }
}

/// Initial values of a weight matrix, short-conv weight or bias, or the embedding, under
/// `scheme` (`is_output`: an output projection; `conv_kernel`: the short convs' width).
pub(crate) fn init_weight(
    rng: &mut InitRng,
    p: &Param,
    is_output: bool,
    num_layers: usize,
    conv_kernel: usize,
    scheme: InitScheme,
) -> Vec<f32> {
    let is_conv = p.name.contains("conv1d.");
    match scheme {
        InitScheme::Official if p.name.ends_with("conv1d.bias") => vec![0.0; p.len],
        InitScheme::Official if is_output => {
            let bound = 1.0 / (p.shape[1] as f64).sqrt();
            let rescale = (2.0 * num_layers as f64).sqrt();
            (0..p.len)
                .map(|_| ((2.0 * rng.uniform() - 1.0) * bound / rescale) as f32)
                .collect()
        }
        InitScheme::Official => (0..p.len).map(|_| (rng.normal() * 0.006) as f32).collect(),
        InitScheme::Zoology if is_conv => rng.uniform_sym(p.len, 1.0 / (conv_kernel as f64).sqrt()),
        InitScheme::Zoology => (0..p.len).map(|_| (rng.normal() * 0.02) as f32).collect(),
    }
}

/// A parameter read back: key, shape, values.
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// Loads every parameter by its official key (both models' `load_params`). A missing or
/// mis-sized tensor is an error that names it; nothing is half-loaded: all are checked before
/// any is written.
pub fn load_params(
    gpu: &Gpu,
    params: &[Param],
    get: &dyn Fn(&str) -> Option<Vec<f32>>,
) -> Result<(), GpuError> {
    let mut all = Vec::with_capacity(params.len());
    for p in params {
        let data = get(&p.name)
            .ok_or_else(|| GpuError::Invalid(format!("missing parameter `{}`", p.name)))?;
        if data.len() != p.len {
            return Err(GpuError::Invalid(format!(
                "parameter `{}` has {} values, shape {:?} needs {}",
                p.name,
                data.len(),
                p.shape,
                p.len
            )));
        }
        all.push(data);
    }
    for (p, data) in params.iter().zip(&all) {
        gpu.write(&p.value, data);
    }
    Ok(())
}

/// Every parameter's key, shape and values.
pub fn read_params(gpu: &Gpu, params: &[Param]) -> Result<Vec<NamedTensor>, GpuError> {
    params
        .iter()
        .map(|p| {
            let mut v = gpu.read_f32(&p.value)?;
            v.truncate(p.len);
            Ok((p.name.clone(), p.shape.clone(), v))
        })
        .collect()
}

/// Every parameter's gradient, in `params` order.
pub fn read_grads(gpu: &Gpu, params: &[Param]) -> Result<Vec<Vec<f32>>, GpuError> {
    params
        .iter()
        .map(|p| {
            let mut v = gpu.read_f32(&p.grad)?;
            v.truncate(p.len);
            Ok(v)
        })
        .collect()
}

/// Records zeroing every gradient.
pub fn encode_zero_grads(enc: &mut wgpu::CommandEncoder, params: &[Param]) {
    for p in params {
        enc.clear_buffer(&p.grad, 0, None);
    }
}

/// Records writing `loss_scale` into `scale` (4 bytes) through the encoder rather than the
/// queue, so that several backwards with different scales in one encoder each get theirs.
pub fn encode_loss_scale(
    device: &wgpu::Device,
    enc: &mut wgpu::CommandEncoder,
    scale: &wgpu::Buffer,
    loss_scale: f32,
) {
    let tmp = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("loss scale upload"),
        size: 4,
        usage: wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: true,
    });
    // A buffer mapped at creation is always mappable.
    if let Ok(mut view) = tmp.slice(..).get_mapped_range_mut() {
        view.copy_from_slice(&loss_scale.to_le_bytes());
    }
    tmp.unmap();
    enc.copy_buffer_to_buffer(&tmp, 0, scale, 0, 4);
}

pub mod gdn_model;
pub mod graph;
pub mod head;
pub mod kernels;
pub mod mamba2_kernels;
pub mod mamba2_model;
pub mod optim;
pub mod schedule;
