//! The training kernels: the layers' forward with saved activations and backward
//! ([`kernels`], [`mamba2_kernels`]), the head every model ends in ([`head`]), the optimizer
//! ([`optim`]), and the trainable parameters they update ([`Param`]). The model graphs that
//! chain them live in `loglinear-train`.

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

pub mod head;
pub mod kernels;
pub mod mamba2_kernels;
pub mod optim;

/// A target the loss skips: no loss, no gradient, not scored, and no row of the head
/// (`IGNORED` of shaders/common/ignored_target.wgsl).
pub const IGNORED_TARGET: u32 = u32::MAX;

#[cfg(test)]
mod tests {
    /// The shaders' `IGNORED` is the Rust constant.
    #[test]
    fn the_ignored_target_is_one_value_in_rust_and_wgsl() {
        let wgsl = crate::gpu::common_wgsl!("ignored_target");
        let line = format!("const IGNORED: u32 = 0x{:X}u;", super::IGNORED_TARGET);
        assert!(wgsl.contains(&line), "{line} not in:\n{wgsl}");
    }
}
