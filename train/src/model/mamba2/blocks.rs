//! The pieces of the Mamba-2 mixers: where their parameters sit, the activations and
//! gradient scratch they keep, and each block's operator.

use super::*;

/// Where each parameter of one block's mixer sits in [`Mamba2TrainModel::params`].
#[derive(Clone, Copy, Debug)]
pub struct MixerParams {
    pub(super) in_proj: usize,
    pub(super) conv: usize,
    pub(super) conv_bias: Option<usize>,
    pub(super) a_log: usize,
    pub(super) dt_bias: usize,
    pub(super) d_skip: usize,
    pub(super) l_scale: Option<usize>,
    pub(super) norm: usize,
    pub(super) out_proj: usize,
}

/// Activations one block's mixer keeps from its forward for its backward. Rows (t, b).
pub(super) struct MixerActs {
    /// in_proj parts: z `[N][di]`, xBC before the conv `[N][ch]`, dt | dl `[N][H (+15H)]`.
    pub(super) z: wgpu::Buffer,
    pub(super) proj: wgpu::Buffer,
    pub(super) dtl: wgpu::Buffer,
    /// Conv sums before SiLU and the conv output (x | B | C) `[N][ch]`.
    pub(super) conv_pre: wgpu::Buffer,
    pub(super) xbc: wgpu::Buffer,
    /// y = o + D·x, y ⊙ SiLU(z), and its 1/rms per norm group (normed into the block's
    /// `mixed`).
    pub(super) y: wgpu::Buffer,
    pub(super) yg: wgpu::Buffer,
    pub(super) rstd_n: wgpu::Buffer,
}

impl MixerActs {
    /// Allocates them, zeroed: `ngroups` norm groups per row, dt | dl rows of `dtl_stride`.
    pub(super) fn new(b: &Build<'_>, ngroups: usize, dtl_stride: usize) -> Result<Self, GpuError> {
        let c = &b.dims.config;
        let (n, di, ch) = (b.dims.rows, c.d_inner(), c.conv_channels());
        let z = |label: &str, len: usize| b.zeros(label, len);
        Ok(Self {
            z: z("z", n * di)?,
            proj: z("proj", n * ch)?,
            dtl: z("dtl", n * dtl_stride)?,
            conv_pre: z("conv_pre", n * ch)?,
            xbc: z("xbc", n * ch)?,
            y: z("y", n * di)?,
            yg: z("yg", n * di)?,
            rstd_n: z("rstd_n", n * ngroups)?,
        })
    }
}

/// Gradient scratch shared by all blocks' mixers (each block's backward overwrites it).
pub(super) struct GradScratch {
    /// dL/d(y ⊙ SiLU(z)), dL/dy, dL/dz `[N][di]`.
    pub(super) dyg: wgpu::Buffer,
    pub(super) dy: wgpu::Buffer,
    pub(super) dz: wgpu::Buffer,
    /// Σ over a head's values of dv·x `[N][H]`; dL/d(dt | dl rows); dL/d(conv output),
    /// dL/d(conv input) `[N][ch]`.
    pub(super) sdt: wgpu::Buffer,
    pub(super) ddtl: wgpu::Buffer,
    pub(super) dxbc: wgpu::Buffer,
    pub(super) dproj: wgpu::Buffer,
    /// Per-row shares of A_log, dt_bias, D, L gradients `[N][prow_stride]`.
    pub(super) prow: wgpu::Buffer,
}

/// One block's operator: its forward scan, and its backward with the operator's inputs
/// recomputed first.
pub(super) struct BlockOperator {
    pub(super) scan: ChunkScan,
    pub(super) recompute: Vec<Step>,
    pub(super) op_bwd: M2Backward,
}
