//! The prefill's link to the chunk-scan operator (`crate::chunk_scan`): the scan's buffers,
//! sized once per prefill, and the scan recorded between the pre- and post-scan ops.

use crate::gpu::{Gpu, GpuError};

/// Which recurrence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanForm {
    Mamba2,
    Gdn,
}

/// The shape of one scan (see the chunk-scan API: `ScanShape`).
#[derive(Clone, Copy, Debug)]
pub struct ScanDims {
    pub form: ScanForm,
    pub t: usize,
    pub heads: usize,
    pub qk_heads: usize,
    pub dk: usize,
    pub dv: usize,
    pub lambda_cols: usize,
    pub levels: usize,
}

/// The scan's inputs and outputs, all f32, token-major: q, k `[T][qk_heads][dk]`,
/// v `[T][H][dv]`, g, beta `[T][H]`, lam `[T][H][lambda_cols]`, o `[T][H][dv]`,
/// state `[levels][H][dk][dv]`.
pub struct ScanBuffers {
    pub q: wgpu::Buffer,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub g: wgpu::Buffer,
    pub beta: wgpu::Buffer,
    pub lam: wgpu::Buffer,
    pub o: wgpu::Buffer,
    pub state: wgpu::Buffer,
}

impl ScanBuffers {
    pub fn new(gpu: &Gpu, d: &ScanDims) -> Result<Self, GpuError> {
        let z = |label: &str, n: usize| gpu.storage_zeroed(label, 4 * n as u64);
        Ok(Self {
            q: z("scan.q", d.t * d.qk_heads * d.dk)?,
            k: z("scan.k", d.t * d.qk_heads * d.dk)?,
            v: z("scan.v", d.t * d.heads * d.dv)?,
            g: z("scan.g", d.t * d.heads)?,
            beta: z("scan.beta", d.t * d.heads)?,
            lam: z("scan.lam", d.t * d.heads * d.lambda_cols)?,
            o: z("scan.o", d.t * d.heads * d.dv)?,
            state: z("scan.state", d.levels * d.heads * d.dk * d.dv)?,
        })
    }
}

/// A scan ready to record.
pub trait Scan {
    fn encode(&self, encoder: &mut wgpu::CommandEncoder);
}

/// The scan kernels of one form, compiled once.
pub struct ScanLink {
    form: ScanForm,
}

impl ScanLink {
    pub fn new(_gpu: &Gpu, form: ScanForm) -> Result<Self, GpuError> {
        Ok(Self { form })
    }

    /// The scan of one shape over `bufs`.
    pub fn scan<'a>(
        &'a self,
        _gpu: &Gpu,
        dims: &ScanDims,
        _bufs: &'a ScanBuffers,
    ) -> Result<Box<dyn Scan + 'a>, GpuError> {
        debug_assert_eq!(dims.form, self.form);
        Err(GpuError::Invalid(
            "the chunk-scan operator is not built into this crate yet".into(),
        ))
    }
}
