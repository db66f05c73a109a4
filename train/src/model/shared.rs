//! What both model graphs use: the stages a step records, the parameter list, and copying a
//! caller's windows in.

use loglinear_host_gpu::gpu::{Gpu, GpuError};
use loglinear_host_gpu::train::Param;
use loglinear_host_gpu::wgpu;

/// A part of a training step, in recording order. The `_marked` encoders call a mark after
/// each part (per layer for the block parts), so a profiler can put a GPU timestamp there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The embedding lookup (and the windows' packing before it).
    Embed,
    /// A block up to the operator: norm, projections, short convs, gates.
    MixerIn,
    /// The chunkwise operator (with the copies in and out of its shared buffers).
    Operator,
    /// A block after the operator: output norm and gate, output projection, residual, MLP.
    MixerOut,
    /// Final norm, LM head and loss.
    Head,
    /// The head's backward.
    HeadBwd,
    /// [`Stage::MixerOut`]'s backward.
    MixerOutBwd,
    /// The operator's backward (Mamba-2: with its inputs recomputed).
    OperatorBwd,
    /// [`Stage::MixerIn`]'s backward.
    MixerInBwd,
    /// The embedding's backward.
    EmbedBwd,
}

impl Stage {
    /// Whether the stage is part of the backward.
    pub fn is_backward(self) -> bool {
        matches!(
            self,
            Stage::HeadBwd
                | Stage::MixerOutBwd
                | Stage::OperatorBwd
                | Stage::MixerInBwd
                | Stage::EmbedBwd
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Stage::Embed => "embedding",
            Stage::MixerIn => "mixer in (norm, projections, convs, gates)",
            Stage::Operator => "operator",
            Stage::MixerOut => "mixer out + MLP",
            Stage::Head => "head (norm, LM head, loss)",
            Stage::HeadBwd => "head backward",
            Stage::MixerOutBwd => "mixer out + MLP backward",
            Stage::OperatorBwd => "operator backward",
            Stage::MixerInBwd => "mixer in backward",
            Stage::EmbedBwd => "embedding backward",
        }
    }
}

/// Called after each [`Stage`] is recorded.
pub type StageMark<'a> = &'a mut dyn FnMut(&mut wgpu::CommandEncoder, Stage);

/// The parameters a graph allocates, in order: each a value and a gradient (zeroed) under its
/// official key.
pub struct ParamList<'g> {
    gpu: &'g Gpu,
    params: Vec<Param>,
}

impl<'g> ParamList<'g> {
    pub fn new(gpu: &'g Gpu) -> Self {
        Self {
            gpu,
            params: Vec::new(),
        }
    }

    /// Adds the tensor `name` of `shape` (`decay`: in the weight-decay group); returns its
    /// index.
    pub fn add(&mut self, name: String, shape: Vec<usize>, decay: bool) -> Result<usize, GpuError> {
        let len: usize = shape.iter().product();
        self.params.push(Param {
            value: self.gpu.storage_zeroed(&name, f32_bytes(len))?,
            grad: self
                .gpu
                .storage_zeroed(&format!("{name}.grad"), f32_bytes(len))?,
            name,
            shape,
            len,
            decay,
        });
        Ok(self.params.len() - 1)
    }

    /// [`Self::add`] when `present`, else `None` (a tensor only some configs have).
    pub fn add_if(
        &mut self,
        present: bool,
        name: String,
        shape: Vec<usize>,
        decay: bool,
    ) -> Result<Option<usize>, GpuError> {
        present.then(|| self.add(name, shape, decay)).transpose()
    }

    pub fn into_vec(self) -> Vec<Param> {
        self.params
    }
}

/// Records copying the caller's explicit `inputs` and `targets` (`n` u32 each) into a model's
/// own buffers, after checking their sizes.
pub(super) fn copy_targets(
    enc: &mut wgpu::CommandEncoder,
    inputs: &wgpu::Buffer,
    targets: &wgpu::Buffer,
    own_inputs: &wgpu::Buffer,
    own_targets: &wgpu::Buffer,
    n: usize,
) -> Result<(), GpuError> {
    let bytes = f32_bytes(n);
    for (what, b) in [("inputs", inputs), ("targets", targets)] {
        if b.size() < bytes {
            return Err(GpuError::Invalid(format!(
                "{what} buffer has {} bytes, [batch][seq_len] u32 needs {bytes}",
                b.size()
            )));
        }
    }
    enc.copy_buffer_to_buffer(inputs, 0, own_inputs, 0, bytes);
    enc.copy_buffer_to_buffer(targets, 0, own_targets, 0, bytes);
    Ok(())
}

/// Bytes of `n` f32 values.
pub(super) fn f32_bytes(n: usize) -> u64 {
    4 * n as u64
}
