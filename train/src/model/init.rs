//! A graph's training-only options, and the initialisation of its weights.

use loglinear_host_gpu::train::Param;
use loglinear_runtime::rng::SplitMix64;

/// Training-only choices of a graph; the model file records neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphOptions {
    /// The LM head reuses the embedding matrix: there is no `lm_head.weight` parameter and the
    /// head's weight gradient adds into the embedding's. Zoology's MQAR models tie them. The
    /// model file (so export and the runtime) has no tied head: a tied graph's parameters are
    /// for the trainer's own evaluation, not for `--export`.
    pub tie_embeddings: bool,
    /// How [`TrainGraph::init_params`](super::TrainGraph::init_params) initialises the weights.
    pub init: InitScheme,
    /// `None`: the head (final norm, LM head, loss and their backward) runs on every one of
    /// the batch · seq_len rows. `Some(cap)`: only on the rows whose target is not ignored, at
    /// most `cap` of them (1 ≤ cap ≤ batch · seq_len), in increasing row order; for tasks that
    /// score few positions this saves most of the head's time and memory. Scored rows beyond
    /// `cap` get NaN losses, correctness and gradients (see `loglinear_host_gpu::train::head`).
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
pub struct InitRng(pub SplitMix64);

impl InitRng {
    pub fn new(seed: u64) -> Self {
        Self(SplitMix64::new(seed))
    }

    pub fn uniform(&mut self) -> f64 {
        self.0.unit_f64()
    }

    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// `len` draws of U(±bound).
    pub fn uniform_sym(&mut self, len: usize, bound: f64) -> Vec<f32> {
        (0..len)
            .map(|_| ((2.0 * self.uniform() - 1.0) * bound) as f32)
            .collect()
    }

    /// softplus⁻¹(dt) with dt = exp(U[ln 1e-3, ln 1e-1]) floored at 1e-4: the official
    /// dt_bias of both layers.
    pub fn dt_bias(&mut self, len: usize) -> Vec<f32> {
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
pub fn init_weight(
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
