//! The training kernels (forward ops that keep what their backward needs, and every backward),
//! compiled once, and the [`Step`]s that bind them to buffers. Rows are whatever the caller
//! lays out; the model uses (t, b) order, token-major and batch-minor, so that the previous
//! token of row r is row r − B.
//!
//! Every builder checks nothing about buffer sizes beyond what wgpu checks: the model that
//! calls them sizes its buffers from one config.

pub(crate) use crate::gpu::{grid, grid_threads, u};
use crate::gpu::{record_dispatch, with_common, Gpu, GpuError, Kernel};

mod conv;
mod elementwise;
mod embed;
mod gdn;
mod loss;
mod matmul;
mod norm;

pub use conv::ConvShape;
pub use elementwise::GateSiluGradIo;
pub use embed::EmbedShape;
pub use gdn::{GateIo, GateShape, QkvIo, QkvShape};
pub use loss::{LossIo, LossShape, MaskedLossIo};
use matmul::SPLIT_FLOATS;
pub use matmul::{LinearGradIo, LinearShape, Matmul, Operand};
pub use norm::{NormGrads, NormIo};
pub(crate) use norm::{NormRows, RMSNORM_BWD_WGSL, RMSNORM_WGSL};

/// One op: one dispatch or a few in order (a split-k matmul and its sum), bound once and
/// encoded as often as wanted.
pub struct Step {
    parts: Vec<Dispatch>,
}

struct Dispatch {
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    groups: [u32; 3],
    // Keeps the uniform block alive with the bind group.
    _params: wgpu::Buffer,
}

impl Step {
    /// Records the op into `encoder` (a compute pass of its own).
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: None,
        });
        self.record(&mut pass);
    }

    /// Records the op into an open pass.
    pub fn record(&self, pass: &mut wgpu::ComputePass<'_>) {
        for d in &self.parts {
            record_dispatch(pass, &d.pipeline, &d.bind, d.groups);
        }
    }
}

/// Records `steps` in order into one compute pass (each dispatch sees the previous ones'
/// writes).
pub fn encode_all<'a>(
    encoder: &mut wgpu::CommandEncoder,
    steps: impl IntoIterator<Item = &'a Step>,
) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("train"),
        timestamp_writes: None,
    });
    for s in steps {
        s.record(&mut pass);
    }
}

/// Every training kernel.
pub struct TrainKernels {
    matmul: Kernel,
    split_sum: Kernel,
    /// Partials of split-k matmuls (shared: the steps run one after another).
    split_scratch: wgpu::Buffer,
    rmsnorm: Kernel,
    rmsnorm_bwd: Kernel,
    colsum: Kernel,
    embed_fwd: Kernel,
    embed_bwd: Kernel,
    loss_fwd: Kernel,
    loss_bwd: Kernel,
    masked_loss_fwd: Kernel,
    masked_loss_bwd: Kernel,
    shift_targets: Kernel,
    pack_inputs: Kernel,
    conv: Kernel,
    conv_bwd: Kernel,
    conv_bwd_w: Kernel,
    qkv: Kernel,
    gates: Kernel,
    gate_silu: Kernel,
    add: Kernel,
    /// One word bound where an entry point touches nothing (the SiLU gate's forward leaves its
    /// gradient bindings alone).
    placeholder: wgpu::Buffer,
}

impl TrainKernels {
    /// Compiles every kernel.
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let k = |label: &str, body: &str, entry: &str| gpu.kernel(label, &with_common(body), entry);
        Ok(Self {
            matmul: k("train_matmul", matmul::MATMUL_WGSL, "main")?,
            split_sum: k("train_split_sum", matmul::SPLIT_SUM_WGSL, "main")?,
            split_scratch: gpu.storage_zeroed("split-k partials", 4 * SPLIT_FLOATS as u64)?,
            rmsnorm: k("train_rmsnorm", norm::RMSNORM_WGSL, "main")?,
            rmsnorm_bwd: k("train_rmsnorm_bwd", norm::RMSNORM_BWD_WGSL, "main")?,
            colsum: k("train_colsum", norm::COLSUM_WGSL, "main")?,
            embed_fwd: k("train_embed_fwd", embed::EMBED_WGSL, "forward")?,
            embed_bwd: k("train_embed_bwd", embed::EMBED_WGSL, "backward")?,
            loss_fwd: k("train_loss_fwd", loss::LOSS_WGSL, "forward")?,
            loss_bwd: k("train_loss_bwd", loss::LOSS_WGSL, "backward")?,
            masked_loss_fwd: k("train_loss_masked_fwd", loss::MASKED_LOSS_WGSL, "forward")?,
            masked_loss_bwd: k("train_loss_masked_bwd", loss::MASKED_LOSS_WGSL, "backward")?,
            shift_targets: k("train_shift_targets", embed::TARGETS_WGSL, "shift")?,
            pack_inputs: k("train_pack_inputs", embed::TARGETS_WGSL, "pack")?,
            conv: k("train_conv", conv::CONV_WGSL, "main")?,
            conv_bwd: k("train_conv_bwd", conv::CONV_BWD_WGSL, "main")?,
            conv_bwd_w: k("train_conv_bwd_w", conv::CONV_BWD_W_WGSL, "main")?,
            qkv: k("train_qkv", gdn::QKV_WGSL, "main")?,
            gates: k("train_gates", gdn::GATES_WGSL, "main")?,
            gate_silu: k("train_gate_silu", elementwise::GATE_SILU_WGSL, "main")?,
            add: k("train_add", elementwise::ADD_WGSL, "main")?,
            placeholder: gpu.storage_zeroed("unused binding", 4)?,
        })
    }

    /// One dispatch of `kernel` with `buffers` at bindings 0.. and `params` (the `#[repr(C)]`
    /// mirror of the kernel's uniform struct) in a uniform block after them.
    fn dispatch<P: bytemuck::Pod>(
        gpu: &Gpu,
        kernel: &Kernel,
        buffers: &[&wgpu::Buffer],
        params: &P,
        groups: [u32; 3],
    ) -> Dispatch {
        let params = gpu.uniform_from(&kernel.label, params);
        let mut all: Vec<&wgpu::Buffer> = buffers.to_vec();
        all.push(&params);
        Dispatch {
            pipeline: kernel.pipeline.clone(),
            bind: gpu.bind(kernel, &all),
            groups,
            _params: params,
        }
    }

    /// One bound dispatch as a [`Step`] (also the Mamba-2 kernels' and the head's way to bind
    /// theirs).
    pub(crate) fn step<P: bytemuck::Pod>(
        gpu: &Gpu,
        kernel: &Kernel,
        buffers: &[&wgpu::Buffer],
        params: &P,
        groups: [u32; 3],
    ) -> Step {
        Step {
            parts: vec![Self::dispatch(gpu, kernel, buffers, params, groups)],
        }
    }
}
