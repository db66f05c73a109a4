//! The mixers' own layer ops around the chunk scan: Mamba-2's q, k and v, g, λ before it and
//! its skip and gate after it; Gated DeltaNet's q, k, v and its gates β, g, λ.

use super::{grid_threads, u, Kernels, Step};
use crate::gpu::{Gpu, GpuError};

pub(super) const MAMBA2_QK: &str = include_str!("../shaders/mamba2_qk.wgsl");
pub(super) const MAMBA2_PRE: &str = include_str!("../shaders/mamba2_pre.wgsl");
pub(super) const MAMBA2_POST: &str = include_str!("../shaders/mamba2_post.wgsl");
pub(super) const GDN_QKV: &str = include_str!("../shaders/gdn_qkv.wgsl");
pub(super) const GDN_GATES: &str = include_str!("../shaders/gdn_gates.wgsl");

/// `QkParams` of mamba2_qk.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QkParams {
    t: u32,
    qk_heads: u32,
    n: u32,
    d_inner: u32,
    groups: u32,
    heads_per_group: u32,
    conv_channels: u32,
}

/// The first six fields of `PreParams` and `PostParams` (mamba2_pre.wgsl, mamba2_post.wgsl):
/// `t` tokens of a Mamba-2 mixer's rows.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Mamba2Rows {
    t: u32,
    heads: u32,
    head_dim: u32,
    d_inner: u32,
    conv_channels: u32,
    in_rows: u32,
}

impl Mamba2Rows {
    fn new(t: usize, shape: &Mamba2Shape) -> Result<Self, GpuError> {
        Ok(Self {
            t: u(t)?,
            heads: u(shape.heads)?,
            head_dim: u(shape.p)?,
            d_inner: u(shape.d_inner())?,
            conv_channels: u(shape.conv_channels())?,
            in_rows: u(shape.in_rows())?,
        })
    }
}

/// `PreParams` of mamba2_pre.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PreParams {
    rows: Mamba2Rows,
    lambda_cols: u32,
    log_linear: u32,
}

/// `PostParams` of mamba2_post.wgsl.
type PostParams = Mamba2Rows;

/// `QkvParams` of gdn_qkv.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QkvParams {
    t: u32,
    heads: u32,
    dk: u32,
    dv: u32,
    channels: u32,
    q_scale: f32,
}

/// `GdnGateParams` of gdn_gates.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct GdnGateParams {
    t: u32,
    heads: u32,
    lambda_cols: u32,
    abl_stride: u32,
    log_linear: u32,
    lam_scale: f32,
}

impl Kernels {
    /// Mamba-2 q = C, k = B `[t][qk_heads][n]` from the conv output.
    pub fn mamba2_qk<'k>(
        &'k self,
        gpu: &Gpu,
        io: Mamba2QkIo<'_>,
        t: usize,
        qk_heads: usize,
        shape: &Mamba2Shape,
    ) -> Result<Step<'k>, GpuError> {
        let params = QkParams {
            t: u(t)?,
            qk_heads: u(qk_heads)?,
            n: u(shape.n)?,
            d_inner: u(shape.d_inner())?,
            groups: u(shape.groups)?,
            heads_per_group: u(shape.heads / shape.groups)?,
            conv_channels: u(shape.conv_channels())?,
        };
        let groups = grid_threads(t * qk_heads * shape.n)?;
        let buffers = [io.xbc, io.q, io.k];
        Ok(self.step(gpu, &self.mamba2_qk, &buffers, &params, groups))
    }

    /// Mamba-2 v, g and λ `[t][heads](…)` from the in_proj and conv outputs.
    pub fn mamba2_pre<'k>(
        &'k self,
        gpu: &Gpu,
        io: Mamba2PreIo<'_>,
        t: usize,
        shape: &Mamba2Shape,
    ) -> Result<Step<'k>, GpuError> {
        let params = PreParams {
            rows: Mamba2Rows::new(t, shape)?,
            lambda_cols: u(shape.lambda_cols())?,
            log_linear: u32::from(shape.log_linear),
        };
        let groups = grid_threads(t * shape.heads)?;
        let buffers = [io.zx, io.xbc, io.vecs, io.v, io.g, io.lam];
        Ok(self.step(gpu, &self.mamba2_pre, &buffers, &params, groups))
    }

    /// Mamba-2 `y = (o + D·xs)·SiLU(z)` `[t][d_inner]`.
    pub fn mamba2_post<'k>(
        &'k self,
        gpu: &Gpu,
        io: Mamba2PostIo<'_>,
        t: usize,
        shape: &Mamba2Shape,
    ) -> Result<Step<'k>, GpuError> {
        let params: PostParams = Mamba2Rows::new(t, shape)?;
        let groups = grid_threads(t * shape.d_inner())?;
        let buffers = [io.o, io.xbc, io.zx, io.vecs, io.y];
        Ok(self.step(gpu, &self.mamba2_post, &buffers, &params, groups))
    }

    /// GDN q_used, k_used, v `[t][heads][…]` from the conv output.
    pub fn gdn_qkv<'k>(
        &'k self,
        gpu: &Gpu,
        io: GdnQkvIo<'_>,
        t: usize,
        shape: &GdnShape,
    ) -> Result<Step<'k>, GpuError> {
        let (heads, dk, dv) = (shape.heads, shape.dk, shape.dv);
        let params = QkvParams {
            t: u(t)?,
            heads: u(heads)?,
            dk: u(dk)?,
            dv: u(dv)?,
            channels: u(heads * (2 * dk + dv))?,
            // As the decoder computes it: 1 / sqrt(dk) in f32.
            q_scale: 1.0 / (dk as f32).sqrt(),
        };
        let groups = grid_threads(t * heads)?;
        let buffers = [io.qkv, io.q, io.k, io.v];
        Ok(self.step(gpu, &self.gdn_qkv, &buffers, &params, groups))
    }

    /// GDN β, g and λ `[t][heads](…)` from `abl = [a | b | l_proj x]` rows of `abl_stride`.
    pub fn gdn_gates<'k>(
        &'k self,
        gpu: &Gpu,
        io: GdnGatesIo<'_>,
        t: usize,
        shape: &GdnShape,
    ) -> Result<Step<'k>, GpuError> {
        let params = GdnGateParams {
            t: u(t)?,
            heads: u(shape.heads)?,
            lambda_cols: u(shape.lambda_cols)?,
            abl_stride: u(shape.abl_stride)?,
            log_linear: u32::from(shape.log_linear),
            lam_scale: (shape.dk as f32).sqrt(),
        };
        let groups = grid_threads(t * shape.heads)?;
        let buffers = [io.abl, io.vecs, io.beta, io.g, io.lam];
        Ok(self.step(gpu, &self.gdn_gates, &buffers, &params, groups))
    }
}

/// Buffers of [`Kernels::mamba2_qk`]: the conv output `xbc` in, q and k out.
#[derive(Clone, Copy, Debug)]
pub struct Mamba2QkIo<'a> {
    pub xbc: &'a wgpu::Buffer,
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
}

/// Buffers of [`Kernels::mamba2_pre`]: in_proj's output `zx`, the conv output `xbc` and the
/// per-head vectors `vecs` in; v, g and λ out.
#[derive(Clone, Copy, Debug)]
pub struct Mamba2PreIo<'a> {
    pub zx: &'a wgpu::Buffer,
    pub xbc: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub lam: &'a wgpu::Buffer,
}

/// Buffers of [`Kernels::mamba2_post`]: the operator output `o`, the conv output `xbc`,
/// in_proj's output `zx` (for z) and the per-head vectors `vecs` (for D) in; y out.
#[derive(Clone, Copy, Debug)]
pub struct Mamba2PostIo<'a> {
    pub o: &'a wgpu::Buffer,
    pub xbc: &'a wgpu::Buffer,
    pub zx: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub y: &'a wgpu::Buffer,
}

/// Buffers of [`Kernels::gdn_qkv`]: the conv output `qkv` in; q_used, k_used, v out.
#[derive(Clone, Copy, Debug)]
pub struct GdnQkvIo<'a> {
    pub qkv: &'a wgpu::Buffer,
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
}

/// Buffers of [`Kernels::gdn_gates`]: `abl` = `[a | b | l_proj x]` rows and the per-head
/// vectors `vecs` in; β, g and λ out.
#[derive(Clone, Copy, Debug)]
pub struct GdnGatesIo<'a> {
    pub abl: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub lam: &'a wgpu::Buffer,
}

/// The Gated DeltaNet sizes the kernels need.
#[derive(Clone, Copy, Debug)]
pub struct GdnShape {
    pub heads: usize,
    pub dk: usize,
    pub dv: usize,
    /// λ columns the scan reads: 15, or 1 (all ones) for plain models.
    pub lambda_cols: usize,
    /// Floats per row of `abl`.
    pub abl_stride: usize,
    pub log_linear: bool,
}

/// The Mamba-2 sizes the kernels need.
#[derive(Clone, Copy, Debug)]
pub struct Mamba2Shape {
    pub heads: usize,
    /// head_dim P (dv).
    pub p: usize,
    /// state_size N (dk).
    pub n: usize,
    pub groups: usize,
    pub log_linear: bool,
    /// λ columns of the model (15, or 0 for plain).
    pub lambda_levels: usize,
}

impl Mamba2Shape {
    pub fn d_inner(&self) -> usize {
        self.heads * self.p
    }
    pub fn conv_channels(&self) -> usize {
        self.d_inner() + 2 * self.groups * self.n
    }
    pub fn in_rows(&self) -> usize {
        self.d_inner() + self.conv_channels() + self.heads + self.heads * self.lambda_levels
    }
    /// λ columns the scan reads: 15, or 1 (all ones) for plain models.
    pub fn lambda_cols(&self) -> usize {
        self.lambda_levels.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{wgsl_uniform_size, with_common};

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        assert_eq!(size_of::<QkParams>(), size(MAMBA2_QK));
        assert_eq!(size_of::<PreParams>(), size(MAMBA2_PRE));
        assert_eq!(size_of::<PostParams>(), size(MAMBA2_POST));
        assert_eq!(size_of::<QkvParams>(), size(GDN_QKV));
        assert_eq!(size_of::<GdnGateParams>(), size(GDN_GATES));
    }
}
