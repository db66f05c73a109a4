//! The prefill's link to the chunk-scan operator (`crate::chunk_scan`): the scan's buffers,
//! sized once per prefill, and the scan recorded between the pre- and post-scan ops.

use crate::chunk_scan::{ChunkScan, Form, ScanIo, ScanKernels, ScanShape};
use crate::gpu::{Gpu, GpuError};

/// Which recurrence (the operator's `Form`).
pub type ScanForm = Form;

/// The shape of one scan (the operator's `ScanShape`).
pub type ScanDims = ScanShape;

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

impl Scan for ChunkScan {
    fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        ChunkScan::encode(self, encoder);
    }
}

/// The scan kernels of one form, compiled once.
pub struct ScanLink {
    kernels: ScanKernels,
}

impl ScanLink {
    pub fn new(gpu: &Gpu, form: ScanForm) -> Result<Self, GpuError> {
        Ok(Self {
            kernels: ScanKernels::new(gpu, form)?,
        })
    }

    /// The scan of one shape over `bufs` (bind groups and scratch made here, once).
    pub fn scan<'a>(
        &'a self,
        gpu: &Gpu,
        dims: &ScanDims,
        bufs: &'a ScanBuffers,
    ) -> Result<Box<dyn Scan + 'a>, GpuError> {
        let io = ScanIo {
            q: &bufs.q,
            k: &bufs.k,
            v: &bufs.v,
            g: &bufs.g,
            beta: &bufs.beta,
            lam: &bufs.lam,
            o: &bufs.o,
            state: Some(&bufs.state),
        };
        Ok(Box::new(ChunkScan::new(gpu, &self.kernels, *dims, io)?))
    }
}
