//! The chunkwise operator's buffers, the same for both mixers: its inputs and output, their
//! gradients, and its shape. No decoder state: nothing continues from a training window.

use crate::model::layer::{Build, Dims};
use loglinear_host_gpu::chunk_scan::{Form, ScanIo, ScanShape};
use loglinear_host_gpu::gpu::GpuError;
use loglinear_host_gpu::grad::OpGradIo;
use loglinear_host_gpu::wgpu;

/// The operator's buffers, one set that every block's scan and backward use. Rows (t, b), so
/// the operator sees B·H heads.
pub struct OperatorBuffers {
    /// Inputs q, k `[N][H][dk]`, v `[N][H][dv]`, g `[N][H]`, λ `[N][H][lambda_cols]`.
    pub q: wgpu::Buffer,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
    pub g: wgpu::Buffer,
    pub lam: wgpu::Buffer,
    /// The output o `[N][H][dv]`.
    pub o: wgpu::Buffer,
    /// The inputs' gradients.
    pub dq: wgpu::Buffer,
    pub dk: wgpu::Buffer,
    pub dv: wgpu::Buffer,
    pub dg: wgpu::Buffer,
    pub dlam: wgpu::Buffer,
}

impl OperatorBuffers {
    /// Allocates them, zeroed.
    pub fn new(b: &Build<'_>) -> Result<Self, GpuError> {
        let (dims, c) = (b.dims, &b.dims.config);
        let (n, h, cols) = (dims.rows, c.num_heads, dims.lambda_cols);
        let (kd, vd) = (c.key_dim(), c.d_inner());
        let z = |label: &str, len: usize| b.zeros(label, len);
        Ok(Self {
            q: z("op q", n * kd)?,
            k: z("op k", n * kd)?,
            v: z("op v", n * vd)?,
            g: z("op g", n * h)?,
            lam: z("op lam", n * h * cols)?,
            o: z("op o", n * vd)?,
            dq: z("dq", n * kd)?,
            dk: z("dk", n * kd)?,
            dv: z("dv", n * vd)?,
            dg: z("dg", n * h)?,
            dlam: z("dlam", n * h * cols)?,
        })
    }

    /// The operator's shape for `form`: the windows' T steps of B·H heads, exact levels.
    pub fn shape(dims: &Dims, form: Form) -> ScanShape {
        let c = &dims.config;
        let heads = dims.batch * c.num_heads;
        ScanShape {
            form,
            t: dims.seq_len,
            heads,
            qk_heads: heads,
            dk: c.head_k_dim,
            dv: c.head_v_dim,
            lambda_cols: dims.lambda_cols,
            levels: dims.levels,
        }
    }

    /// The forward scan's buffers, with the operator's β (a placeholder for Mamba-2).
    pub fn scan_io<'a>(&'a self, beta: &'a wgpu::Buffer) -> ScanIo<'a> {
        ScanIo {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta,
            lam: &self.lam,
            o: &self.o,
            state: None,
        }
    }

    /// The backward's buffers: β and its gradient (placeholders for Mamba-2), and the
    /// output's gradient `d_o`.
    pub fn grad_io<'a>(
        &'a self,
        beta: &'a wgpu::Buffer,
        dbeta: &'a wgpu::Buffer,
        d_o: &'a wgpu::Buffer,
    ) -> OpGradIo<'a> {
        OpGradIo {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta,
            lam: &self.lam,
            d_o,
            dq: &self.dq,
            dk: &self.dk,
            dv: &self.dv,
            dg: &self.dg,
            dbeta,
            dlam: &self.dlam,
        }
    }
}
