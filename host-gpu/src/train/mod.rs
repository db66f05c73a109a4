//! Training on the GPU: the model's forward with saved activations and its backward
//! (`gdn_model`, `mamba2_model`), the API both share (`graph::TrainGraph`), and the optimizer
//! (`optim`).

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

pub mod gdn_model;
pub mod graph;
pub mod kernels;
pub mod mamba2_kernels;
pub mod mamba2_model;
pub mod optim;
pub mod schedule;
