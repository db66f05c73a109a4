//! AdamW on the GPU, with torch.optim.AdamW's semantics, and global-norm gradient clipping
//! with torch.nn.utils.clip_grad_norm_'s.
//!
//! One step is three kinds of dispatch, recorded into one encoder:
//! 1. `sumsq` per parameter: sums of squares of the gradient, one partial per 4096 values;
//! 2. `finish`: the partials summed in a fixed order into `[norm, clip factor]` (no atomics, so
//!    the same gradients always give the same bits);
//! 3. `adamw` per parameter: the update, reading the clip factor from the GPU (no round trip).
//!
//! The moments `m` (exp_avg) and `v` (exp_avg_sq) are GPU buffers, one pair per [`Param`], and
//! can be read and written for checkpoints. The bias corrections are computed on the CPU in
//! f64 from the step count this optimizer keeps.

use super::Param;
use crate::gpu::MAX_GROUPS;
use crate::gpu::{dispatch, Gpu, GpuError, Kernel};
use bytemuck::Zeroable;

const GRAD_NORM: &str = include_str!("../shaders/train_grad_norm.wgsl");
const GRAD_NORM_FINISH: &str = include_str!("../shaders/train_grad_norm_finish.wgsl");
const ADAMW: &str = include_str!("../shaders/train_adamw.wgsl");

/// Gradient values per `sumsq` workgroup (`CHUNK` in train_grad_norm.wgsl).
const NORM_CHUNK: usize = 4096;
/// Threads per workgroup of every kernel here.
const WORKGROUP: usize = 256;

/// AdamW's hyper-parameters other than the learning rate (which changes per step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Decoupled weight decay, applied only to parameters whose `decay` flag is set.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    /// The shipped models' recipe (models/*/TRAINING.md): betas (0.9, 0.95), eps 1e-8,
    /// weight decay 0.1.
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }
}

/// One parameter's AdamW moments: `(exp_avg, exp_avg_sq)`.
pub type Moments = (Vec<f32>, Vec<f32>);

/// What one optimizer step saw.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// Global L2 norm of all gradients before clipping.
    pub grad_norm: f32,
    /// The factor the gradients were multiplied by (1 when not clipped).
    pub clip_factor: f32,
}

/// `SumsqParams` of train_grad_norm.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SumsqParams {
    len: u32,
    out_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

/// `FinishParams` of train_grad_norm_finish.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FinishParams {
    count: u32,
    clip_on: u32,
    max_norm: f32,
    _pad: u32,
}

/// `AdamParams` of train_adamw.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct AdamParams {
    len: u32,
    decay_factor: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    step_size: f32,
    bc2_sqrt: f32,
    _pad: u32,
}

/// The optimizer state of one parameter and its bound dispatches.
struct Slot {
    len: usize,
    decay: bool,
    m: wgpu::Buffer,
    v: wgpu::Buffer,
    sumsq_bind: wgpu::BindGroup,
    sumsq_groups: u32,
    adam_params: wgpu::Buffer,
    adam_bind: wgpu::BindGroup,
    adam_groups: [u32; 2],
}

/// AdamW over a fixed list of parameters (the buffers are bound once, at construction).
pub struct AdamW {
    config: AdamWConfig,
    steps: u64,
    slots: Vec<Slot>,
    sumsq: Kernel,
    finish: Kernel,
    adamw: Kernel,
    finish_params: wgpu::Buffer,
    finish_bind: wgpu::BindGroup,
    partial_count: usize,
    /// `[norm, clip factor]` of the last step.
    result: wgpu::Buffer,
}

/// A grid of `n` workgroups: `[x, y]` with x ≤ 65535 (the shader rebuilds the flat index).
fn grid(n: usize) -> [u32; 2] {
    let n = n.max(1);
    let x = n.min(MAX_GROUPS);
    [x as u32, n.div_ceil(x) as u32]
}

impl AdamW {
    /// Zero moments for every parameter, and the kernels bound to their buffers.
    pub fn new(gpu: &Gpu, params: &[Param], config: AdamWConfig) -> Result<Self, GpuError> {
        let sumsq = gpu.kernel("train_grad_sumsq", GRAD_NORM, "sumsq")?;
        let finish = gpu.kernel("train_grad_norm_finish", GRAD_NORM_FINISH, "finish")?;
        let adamw = gpu.kernel("train_adamw", ADAMW, "adamw")?;
        let partial_count: usize = params.iter().map(|p| p.len.div_ceil(NORM_CHUNK)).sum();
        let partials = gpu.storage_zeroed("grad_norm_partials", 4 * partial_count as u64)?;
        let result = gpu.storage_from("grad_norm_result", &[0f32, 1.0])?;
        let mut slots = Vec::with_capacity(params.len());
        let mut offset = 0usize;
        for p in params {
            let bytes = 4 * p.len as u64;
            if p.value.size() < bytes || p.grad.size() < bytes {
                return Err(GpuError::Invalid(format!(
                    "parameter `{}`: value or gradient buffer smaller than its {} values",
                    p.name, p.len
                )));
            }
            let sumsq_groups = p.len.div_ceil(NORM_CHUNK);
            if sumsq_groups > MAX_GROUPS {
                return Err(GpuError::Invalid(format!(
                    "parameter `{}` has {} values, over the {} the gradient norm handles",
                    p.name,
                    p.len,
                    MAX_GROUPS * NORM_CHUNK
                )));
            }
            let m = gpu.storage_zeroed(&format!("{}.exp_avg", p.name), bytes)?;
            let v = gpu.storage_zeroed(&format!("{}.exp_avg_sq", p.name), bytes)?;
            let sumsq_params = gpu.uniform_from(
                "grad_sumsq_params",
                &SumsqParams {
                    len: p.len as u32,
                    out_offset: offset as u32,
                    _pad0: 0,
                    _pad1: 0,
                },
            );
            let sumsq_bind = gpu.bind(&sumsq, &[&p.grad, &partials, &sumsq_params]);
            let adam_params = gpu.uniform_from("adamw_params", &AdamParams::zeroed());
            let adam_bind = gpu.bind(&adamw, &[&p.value, &p.grad, &m, &v, &result, &adam_params]);
            offset += sumsq_groups;
            slots.push(Slot {
                len: p.len,
                decay: p.decay,
                m,
                v,
                sumsq_bind,
                sumsq_groups: sumsq_groups as u32,
                adam_params,
                adam_bind,
                adam_groups: grid(p.len.div_ceil(WORKGROUP)),
            });
        }
        let finish_params = gpu.uniform_from("grad_norm_finish_params", &FinishParams::zeroed());
        let finish_bind = gpu.bind(&finish, &[&partials, &result, &finish_params]);
        Ok(Self {
            config,
            steps: 0,
            slots,
            sumsq,
            finish,
            adamw,
            finish_params,
            finish_bind,
            partial_count,
            result,
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// Steps taken (torch's `state['step']`; the bias corrections use it).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Sets the step count (when resuming from a checkpoint).
    pub fn set_steps(&mut self, steps: u64) {
        self.steps = steps;
    }

    /// Records the gradient norm (and clip factor) of the current gradients into `encoder`,
    /// without updating anything; [`AdamW::read_report`] reads it after submission.
    pub fn encode_grad_norm(
        &self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        max_norm: Option<f32>,
    ) -> Result<(), GpuError> {
        if let Some(c) = max_norm {
            if !(c.is_finite() && c > 0.0) {
                return Err(GpuError::Invalid(format!(
                    "the clipping norm must be positive and finite, got {c}"
                )));
            }
        }
        gpu.write(
            &self.finish_params,
            &[FinishParams {
                count: self.partial_count as u32,
                clip_on: u32::from(max_norm.is_some()),
                max_norm: max_norm.unwrap_or(0.0),
                _pad: 0,
            }],
        );
        for s in &self.slots {
            dispatch(encoder, &self.sumsq, &s.sumsq_bind, [s.sumsq_groups, 1, 1]);
        }
        dispatch(encoder, &self.finish, &self.finish_bind, [1, 1, 1]);
        Ok(())
    }

    /// Records one AdamW step at learning rate `lr` into `encoder`: the gradient norm, then
    /// the clipped update of every parameter. Counts the step. Submit the encoder before the
    /// next `encode_step` (the parameter blocks are written through the queue).
    pub fn encode_step(
        &mut self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
        lr: f64,
        max_norm: Option<f32>,
    ) -> Result<(), GpuError> {
        if !(lr.is_finite() && lr >= 0.0) {
            return Err(GpuError::Invalid(format!(
                "the learning rate must be finite and non-negative, got {lr}"
            )));
        }
        self.encode_grad_norm(gpu, encoder, max_norm)?;
        self.steps += 1;
        let c = &self.config;
        let t = self.steps as f64;
        let bc1 = 1.0 - c.beta1.powf(t);
        let bc2 = 1.0 - c.beta2.powf(t);
        for s in &self.slots {
            let decay_factor = if s.decay {
                1.0 - lr * c.weight_decay
            } else {
                1.0
            };
            gpu.write(
                &s.adam_params,
                &[AdamParams {
                    len: s.len as u32,
                    decay_factor: decay_factor as f32,
                    beta1: c.beta1 as f32,
                    beta2: c.beta2 as f32,
                    eps: c.eps as f32,
                    step_size: (lr / bc1) as f32,
                    bc2_sqrt: bc2.sqrt() as f32,
                    _pad: 0,
                }],
            );
            let [x, y] = s.adam_groups;
            dispatch(encoder, &self.adamw, &s.adam_bind, [x, y, 1]);
        }
        Ok(())
    }

    /// One step: [`AdamW::encode_step`], submitted and waited for, with its report.
    pub fn step(
        &mut self,
        gpu: &Gpu,
        lr: f64,
        max_norm: Option<f32>,
    ) -> Result<StepReport, GpuError> {
        let mut enc = gpu.encoder("adamw_step");
        self.encode_step(gpu, &mut enc, lr, max_norm)?;
        gpu.submit_and_wait(enc)?;
        self.read_report(gpu)
    }

    /// The gradient norm and clip factor of the last submitted step (or norm pass).
    pub fn read_report(&self, gpu: &Gpu) -> Result<StepReport, GpuError> {
        let r: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu.read_bytes(&self.result, 8)?);
        Ok(StepReport {
            grad_norm: r[0],
            clip_factor: r[1],
        })
    }

    /// The GPU buffer behind [`AdamW::read_report`]: `[norm, clip factor]` as two f32, for
    /// callers that copy it next to other results and read everything back at once.
    pub fn report_buffer(&self) -> &wgpu::Buffer {
        &self.result
    }

    /// The moments `(m, v)` of every parameter, in parameter order.
    pub fn read_moments(&self, gpu: &Gpu) -> Result<Vec<Moments>, GpuError> {
        self.slots
            .iter()
            .map(|s| {
                let read = |b: &wgpu::Buffer| -> Result<Vec<f32>, GpuError> {
                    let bytes = gpu.read_bytes(b, 4 * s.len as u64)?;
                    Ok(bytemuck::pod_collect_to_vec(&bytes))
                };
                Ok((read(&s.m)?, read(&s.v)?))
            })
            .collect()
    }

    /// Sets the moments of parameter `index` (when resuming from a checkpoint).
    pub fn load_moments(
        &self,
        gpu: &Gpu,
        index: usize,
        m: &[f32],
        v: &[f32],
    ) -> Result<(), GpuError> {
        let s = self.slots.get(index).ok_or_else(|| {
            GpuError::Invalid(format!(
                "optimizer has {} parameters, no index {index}",
                self.slots.len()
            ))
        })?;
        if m.len() != s.len || v.len() != s.len {
            return Err(GpuError::Invalid(format!(
                "moments of parameter {index}: {} and {} values for a tensor of {}",
                m.len(),
                v.len(),
                s.len
            )));
        }
        gpu.write(&s.m, m);
        gpu.write(&s.v, v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::wgsl_uniform_size;

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        assert_eq!(size_of::<SumsqParams>(), wgsl_uniform_size(GRAD_NORM));
        assert_eq!(
            size_of::<FinishParams>(),
            wgsl_uniform_size(GRAD_NORM_FINISH)
        );
        assert_eq!(size_of::<AdamParams>(), wgsl_uniform_size(ADAMW));
    }
}
