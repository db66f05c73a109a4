//! The pieces of the Gated DeltaNet mixers: where their parameters sit, and the activations
//! and gradient scratch they keep.

use super::*;

/// Where each parameter of one block's mixer sits in [`GdnTrainModel::params`].
#[derive(Clone, Copy, Debug)]
pub struct MixerParams {
    pub(super) q_proj: usize,
    pub(super) k_proj: usize,
    pub(super) v_proj: usize,
    pub(super) a_proj: usize,
    pub(super) b_proj: usize,
    pub(super) l_proj: Option<usize>,
    pub(super) g_proj: usize,
    pub(super) o_proj: usize,
    pub(super) q_conv: usize,
    pub(super) k_conv: usize,
    pub(super) v_conv: usize,
    pub(super) a_log: usize,
    pub(super) dt_bias: usize,
    pub(super) l_scale: Option<usize>,
    pub(super) o_norm: usize,
}

/// Activations one block's mixer keeps from its forward for its backward. Rows (t, b).
pub(super) struct MixerActs {
    /// q|k|v projections before the conv `[N][ch]`, conv sums before SiLU, conv outputs.
    pub(super) proj: wgpu::Buffer,
    pub(super) conv_pre: wgpu::Buffer,
    pub(super) conv_out: wgpu::Buffer,
    /// Operator inputs: q_used, k_used `[N][H][dk]`, v `[N][H][dv]`, β, g `[N][H]`,
    /// λ `[N][H][lambda_cols]`.
    pub(super) q: wgpu::Buffer,
    pub(super) k: wgpu::Buffer,
    pub(super) v: wgpu::Buffer,
    pub(super) beta: wgpu::Buffer,
    pub(super) g: wgpu::Buffer,
    pub(super) lam: wgpu::Buffer,
    /// `[N][a (H) | b (H) | l (15H, log-linear)]`.
    pub(super) abl: wgpu::Buffer,
    /// g_proj x `[N][vd]`.
    pub(super) gp: wgpu::Buffer,
    /// Operator output, its per-head 1/rms, normed (then gated into the block's `mixed`).
    pub(super) o: wgpu::Buffer,
    pub(super) rstd_o: wgpu::Buffer,
    pub(super) y: wgpu::Buffer,
}

impl MixerActs {
    /// Allocates them, zeroed; `abl_stride` is the width of the a | b | l rows.
    pub(super) fn new(b: &Build<'_>, abl_stride: usize) -> Result<Self, GpuError> {
        let c = &b.dims.config;
        let (n, h, lambda_cols) = (b.dims.rows, c.num_heads, b.dims.lambda_cols);
        let (kd, vd, ch) = (c.key_dim(), c.d_inner(), c.conv_channels());
        let z = |label: &str, len: usize| b.zeros(label, len);
        Ok(Self {
            proj: z("proj", n * ch)?,
            conv_pre: z("conv_pre", n * ch)?,
            conv_out: z("conv_out", n * ch)?,
            q: z("q", n * kd)?,
            k: z("k", n * kd)?,
            v: z("v", n * vd)?,
            beta: z("beta", n * h)?,
            g: z("g", n * h)?,
            lam: z("lam", n * h * lambda_cols)?,
            abl: z("abl", n * abl_stride)?,
            gp: z("gp", n * vd)?,
            o: z("o", n * vd)?,
            rstd_o: z("rstd_o", n * h)?,
            y: z("y", n * vd)?,
        })
    }
}

/// Gradient scratch shared by all blocks' mixers (each block's backward overwrites it).
pub(super) struct GradScratch {
    /// dL/d(normed operator output), dL/d(g_proj x), dL/d(operator output) `[N][vd]`.
    pub(super) dy: wgpu::Buffer,
    pub(super) dgp: wgpu::Buffer,
    pub(super) d_o: wgpu::Buffer,
    /// dL/dβ `[N][H]`, and of the a | b | l rows.
    pub(super) dbeta: wgpu::Buffer,
    pub(super) dabl: wgpu::Buffer,
    /// dL/d(conv outputs) and dL/d(q|k|v projections) `[N][ch]`.
    pub(super) dconv_out: wgpu::Buffer,
    pub(super) dproj: wgpu::Buffer,
    /// Per-row shares of the gate parameters' gradients `[N][17H]`.
    pub(super) prow: wgpu::Buffer,
}
