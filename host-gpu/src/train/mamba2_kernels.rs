//! The Mamba-2-only training kernels (the mixer's conv with bias, gates, operator inputs, D
//! skip, and their backwards), compiled once; they bind into the shared [`Step`]s. The shared
//! ops (matmuls, norms, SiLU gates, MLP, loss) are [`crate::train::kernels`]'.
//!
//! Rows are in (t, b) order as everywhere in training: the previous token of row r is r − B.

use crate::gpu::{common_wgsl, with_common, Gpu, GpuError, Kernel};
use crate::train::kernels::{
    grid, grid_threads, u, NormGrads, NormIo, NormRows, Step, TrainKernels, RMSNORM_BWD_WGSL,
    RMSNORM_WGSL,
};

const CONV_WGSL: &str = include_str!("../shaders/train_m2_conv.wgsl");
const CONV_DB_WGSL: &str = concat!(
    common_wgsl!("workgroup_sum"),
    include_str!("../shaders/train_m2_conv_db.wgsl")
);
const FWD_GATES_WGSL: &str = include_str!("../shaders/train_m2_fwd_gates.wgsl");
const FWD_QKV_WGSL: &str = include_str!("../shaders/train_m2_fwd_qkv.wgsl");
const SKIP_WGSL: &str = include_str!("../shaders/train_m2_skip.wgsl");
const BWD_X_WGSL: &str = include_str!("../shaders/train_m2_bwd_x.wgsl");
const BWD_GATES_WGSL: &str = include_str!("../shaders/train_m2_bwd_gates.wgsl");
const BWD_BC_WGSL: &str = include_str!("../shaders/train_m2_bwd_bc.wgsl");

/// Sizes of one Mamba-2 mixer as the kernels see it: `rows` rows (t, b) of a batch of
/// `batch` windows, H heads of P values, G groups of N, λ columns, exact levels.
#[derive(Clone, Copy, Debug)]
pub struct M2Shape {
    pub rows: usize,
    pub batch: usize,
    pub heads: usize,
    pub head_dim: usize,
    pub groups: usize,
    pub state: usize,
    pub lambda_cols: usize,
    pub levels: usize,
    pub log_linear: bool,
    pub conv_width: usize,
}

impl M2Shape {
    /// d_inner = H·P.
    pub fn d_inner(&self) -> usize {
        self.heads * self.head_dim
    }

    /// Conv channels = d_inner + 2·G·N (rows of xBC).
    pub fn channels(&self) -> usize {
        self.d_inner() + 2 * self.groups * self.state
    }

    /// Floats per row of the dt | dl part of in_proj: H (+ 15·H log-linear).
    pub fn dtl_stride(&self) -> usize {
        self.heads * if self.log_linear { 16 } else { 1 }
    }

    /// Floats per row of the per-row parameter shares:
    /// [A_log (H) | dt_bias (H) | D (H) | L (15·H, log-linear)].
    pub fn prow_stride(&self) -> usize {
        self.heads * if self.log_linear { 18 } else { 3 }
    }
}

/// `ConvParams` of train_m2_conv.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ConvParams {
    rows: u32,
    batch: u32,
    channels: u32,
    width: u32,
}

/// `SumParams` of train_m2_conv_db.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SumParams {
    rows: u32,
    channels: u32,
}

/// `FwdGateParams` of train_m2_fwd_gates.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FwdGateParams {
    rows: u32,
    heads: u32,
    lambda_cols: u32,
    dtl_stride: u32,
    log_linear: u32,
}

/// `BwdGateParams` of train_m2_bwd_gates.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct BwdGateParams {
    rows: u32,
    heads: u32,
    lambda_cols: u32,
    dtl_stride: u32,
    log_linear: u32,
    levels: u32,
    prow_stride: u32,
}

/// `QkvParams` of train_m2_fwd_qkv.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QkvParams {
    rows: u32,
    heads: u32,
    groups: u32,
    n: u32,
    p: u32,
}

/// `SkipParams` of train_m2_skip.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SkipParams {
    rows: u32,
    heads: u32,
    p: u32,
    stride: u32,
}

/// `XBwdParams` of train_m2_bwd_x.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct XBwdParams {
    rows: u32,
    heads: u32,
    p: u32,
    stride: u32,
    prow_stride: u32,
}

/// `BcParams` of train_m2_bwd_bc.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct BcParams {
    rows: u32,
    heads: u32,
    groups: u32,
    n: u32,
    di: u32,
}

/// Every Mamba-2-only training kernel.
pub struct M2TrainKernels {
    conv: Kernel,
    conv_db: Kernel,
    fwd_gates: Kernel,
    fwd_qkv: Kernel,
    skip: Kernel,
    bwd_x: Kernel,
    bwd_gates: Kernel,
    bwd_bc: Kernel,
    gnorm: Kernel,
    gnorm_bwd: Kernel,
}

/// Buffers of the gate kernels (forward: `dtl` → `g`, `lam`, `dt`; backward: also `dg`,
/// `dlam`, `sdt` → `ddtl`, `prow`).
pub struct M2GateIo<'a> {
    pub dtl: &'a wgpu::Buffer,
    pub dt_bias: &'a wgpu::Buffer,
    pub a_log: &'a wgpu::Buffer,
    /// L `[H][15]`; any buffer for plain models.
    pub l_scale: &'a wgpu::Buffer,
}

/// The gradients [`M2TrainKernels::gates_backward`] reads (`dg`, `dlam`, and `sdt` = Σ over
/// the head's values of dv·x) and writes (`ddtl`, and the A_log, dt_bias, L shares of `prow`).
#[derive(Clone, Copy, Debug)]
pub struct M2GateGradIo<'a> {
    pub dg: &'a wgpu::Buffer,
    pub dlam: &'a wgpu::Buffer,
    pub sdt: &'a wgpu::Buffer,
    pub ddtl: &'a wgpu::Buffer,
    pub prow: &'a wgpu::Buffer,
}

/// Buffers of the conv + SiLU over xBC: input `inp` (the xBC columns of in_proj's output),
/// weight `w`, `bias` (zeros when the model has none), and the pre-activation `pre` and output
/// `out` (written).
#[derive(Clone, Copy, Debug)]
pub struct M2ConvIo<'a> {
    pub inp: &'a wgpu::Buffer,
    pub w: &'a wgpu::Buffer,
    pub bias: &'a wgpu::Buffer,
    pub pre: &'a wgpu::Buffer,
    pub out: &'a wgpu::Buffer,
}

/// Buffers of [`M2TrainKernels::qkv`]: the conv output `xbc` and `dt` in; the per-head q, k, v
/// out.
#[derive(Clone, Copy, Debug)]
pub struct M2QkvIo<'a> {
    pub xbc: &'a wgpu::Buffer,
    pub dt: &'a wgpu::Buffer,
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
}

/// Buffers of [`M2TrainKernels::x_backward`]: the forward's `xbc`, `dt` and D (`d_skip`), the
/// gradients `dy` of y = o + D·x and `dv` of v = x·dt in; the x columns of `dxbc`, `sdt` and
/// the D share of `prow` out.
#[derive(Clone, Copy, Debug)]
pub struct M2XGradIo<'a> {
    pub xbc: &'a wgpu::Buffer,
    pub dt: &'a wgpu::Buffer,
    pub d_skip: &'a wgpu::Buffer,
    pub dy: &'a wgpu::Buffer,
    pub dv: &'a wgpu::Buffer,
    pub dxbc: &'a wgpu::Buffer,
    pub sdt: &'a wgpu::Buffer,
    pub prow: &'a wgpu::Buffer,
}

impl M2TrainKernels {
    /// Compiles every kernel.
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let k = |label: &str, body: &str| gpu.kernel(label, &with_common(body), "main");
        Ok(Self {
            conv: k("train_m2_conv", CONV_WGSL)?,
            conv_db: k("train_m2_conv_db", CONV_DB_WGSL)?,
            fwd_gates: k("train_m2_fwd_gates", FWD_GATES_WGSL)?,
            fwd_qkv: k("train_m2_fwd_qkv", FWD_QKV_WGSL)?,
            skip: k("train_m2_skip", SKIP_WGSL)?,
            bwd_x: k("train_m2_bwd_x", BWD_X_WGSL)?,
            bwd_gates: k("train_m2_bwd_gates", BWD_GATES_WGSL)?,
            bwd_bc: k("train_m2_bwd_bc", BWD_BC_WGSL)?,
            gnorm: k("train_m2_gnorm", RMSNORM_WGSL)?,
            gnorm_bwd: k("train_m2_gnorm_bwd", RMSNORM_BWD_WGSL)?,
        })
    }

    /// Conv (with bias) + SiLU over xBC `[rows][channels]`: `io.pre` and `io.out` written.
    pub fn conv(&self, gpu: &Gpu, s: M2Shape, io: M2ConvIo<'_>) -> Result<Step, GpuError> {
        let params = ConvParams {
            rows: u(s.rows)?,
            batch: u(s.batch)?,
            channels: u(s.channels())?,
            width: u(s.conv_width)?,
        };
        Ok(TrainKernels::step(
            gpu,
            &self.conv,
            &[io.inp, io.w, io.bias, io.pre, io.out],
            &params,
            grid_threads(s.rows * s.channels())?,
        ))
    }

    /// Conv bias gradient `db += Σ_r dout·SiLU'(pre)`.
    pub fn conv_bias_backward(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        pre: &wgpu::Buffer,
        dout: &wgpu::Buffer,
        db: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let params = SumParams {
            rows: u(s.rows)?,
            channels: u(s.channels())?,
        };
        Ok(TrainKernels::step(
            gpu,
            &self.conv_db,
            &[pre, dout, db],
            &params,
            grid(s.channels())?,
        ))
    }

    /// dt, g and λ from the dt | dl rows.
    pub fn gates(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        io: &M2GateIo<'_>,
        g: &wgpu::Buffer,
        lam: &wgpu::Buffer,
        dt: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let params = FwdGateParams {
            rows: u(s.rows)?,
            heads: u(s.heads)?,
            lambda_cols: u(s.lambda_cols)?,
            dtl_stride: u(s.dtl_stride())?,
            log_linear: u32::from(s.log_linear),
        };
        Ok(TrainKernels::step(
            gpu,
            &self.fwd_gates,
            &[io.dtl, io.dt_bias, io.a_log, io.l_scale, g, lam, dt],
            &params,
            grid_threads(s.rows * s.heads)?,
        ))
    }

    /// Backward of [`M2TrainKernels::gates`]: `grads.ddtl` and the A_log, dt_bias, L shares of
    /// `grads.prow` written.
    pub fn gates_backward(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        io: &M2GateIo<'_>,
        grads: M2GateGradIo<'_>,
    ) -> Result<Step, GpuError> {
        let params = BwdGateParams {
            rows: u(s.rows)?,
            heads: u(s.heads)?,
            lambda_cols: u(s.lambda_cols)?,
            dtl_stride: u(s.dtl_stride())?,
            log_linear: u32::from(s.log_linear),
            levels: u(s.levels)?,
            prow_stride: u(s.prow_stride())?,
        };
        Ok(TrainKernels::step(
            gpu,
            &self.bwd_gates,
            &[
                io.dtl, io.dt_bias, io.a_log, io.l_scale, grads.dg, grads.dlam, grads.sdt,
                grads.ddtl, grads.prow,
            ],
            &params,
            grid_threads(s.rows * s.heads)?,
        ))
    }

    /// Per-head q = C, k = B and v = x·dt from the conv output.
    pub fn qkv(&self, gpu: &Gpu, s: M2Shape, io: M2QkvIo<'_>) -> Result<Step, GpuError> {
        let params = QkvParams {
            rows: u(s.rows)?,
            heads: u(s.heads)?,
            groups: u(s.groups)?,
            n: u(s.state)?,
            p: u(s.head_dim)?,
        };
        Ok(TrainKernels::step(
            gpu,
            &self.fwd_qkv,
            &[io.xbc, io.dt, io.q, io.k, io.v],
            &params,
            grid_threads(s.rows * s.heads)?,
        ))
    }

    /// `y = o + D·x`.
    pub fn skip(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        o: &wgpu::Buffer,
        xbc: &wgpu::Buffer,
        d_skip: &wgpu::Buffer,
        y: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let params = SkipParams {
            rows: u(s.rows)?,
            heads: u(s.heads)?,
            p: u(s.head_dim)?,
            stride: u(s.channels())?,
        };
        Ok(TrainKernels::step(
            gpu,
            &self.skip,
            &[o, xbc, d_skip, y],
            &params,
            grid_threads(s.rows * s.d_inner())?,
        ))
    }

    /// Backward of v = x·dt and the skip: the x columns of `io.dxbc`, `io.sdt` and the D share
    /// of `io.prow` written.
    pub fn x_backward(&self, gpu: &Gpu, s: M2Shape, io: M2XGradIo<'_>) -> Result<Step, GpuError> {
        let params = XBwdParams {
            rows: u(s.rows)?,
            heads: u(s.heads)?,
            p: u(s.head_dim)?,
            stride: u(s.channels())?,
            prow_stride: u(s.prow_stride())?,
        };
        Ok(TrainKernels::step(
            gpu,
            &self.bwd_x,
            &[
                io.xbc, io.dt, io.d_skip, io.dy, io.dv, io.dxbc, io.sdt, io.prow,
            ],
            &params,
            grid_threads(s.rows * s.heads)?,
        ))
    }

    /// The B and C columns of `dxbc` from the per-head dk and dq.
    pub fn bc_backward(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        dq: &wgpu::Buffer,
        dk: &wgpu::Buffer,
        dxbc: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let params = BcParams {
            rows: u(s.rows)?,
            heads: u(s.heads)?,
            groups: u(s.groups)?,
            n: u(s.state)?,
            di: u(s.d_inner())?,
        };
        Ok(TrainKernels::step(
            gpu,
            &self.bwd_bc,
            &[dq, dk, dxbc],
            &params,
            grid_threads(s.rows * 2 * s.groups * s.state)?,
        ))
    }

    /// Grouped RMSNorm (the gated norm): `rows` rows of `cols` (the group size), `groups`
    /// consecutive rows per token, weight `[groups][cols]`; `rstd` per row kept.
    pub fn group_norm(
        &self,
        gpu: &Gpu,
        io: NormIo<'_>,
        rows: usize,
        cols: usize,
        groups: usize,
        eps: f32,
    ) -> Result<Step, GpuError> {
        let rows = NormRows { rows, cols, groups };
        rows.forward(gpu, &self.gnorm, io, eps)
    }

    /// Backward of [`M2TrainKernels::group_norm`] from the forward's `x`, `w` and `rstd`:
    /// `grads.dx` written and the per-row shares of dw in `grads.wrow` `[rows][cols]` =
    /// `[tokens][groups·cols]` (column sums over tokens make dw).
    pub fn group_norm_backward(
        &self,
        gpu: &Gpu,
        forward: NormIo<'_>,
        grads: NormGrads<'_>,
        rows: usize,
        cols: usize,
        groups: usize,
    ) -> Result<Step, GpuError> {
        let rows = NormRows { rows, cols, groups };
        rows.backward(gpu, &self.gnorm_bwd, forward, grads, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::wgsl_uniform_size;

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        assert_eq!(size_of::<ConvParams>(), size(CONV_WGSL));
        assert_eq!(size_of::<SumParams>(), size(CONV_DB_WGSL));
        assert_eq!(size_of::<FwdGateParams>(), size(FWD_GATES_WGSL));
        assert_eq!(size_of::<BwdGateParams>(), size(BWD_GATES_WGSL));
        assert_eq!(size_of::<QkvParams>(), size(FWD_QKV_WGSL));
        assert_eq!(size_of::<SkipParams>(), size(SKIP_WGSL));
        assert_eq!(size_of::<XBwdParams>(), size(BWD_X_WGSL));
        assert_eq!(size_of::<BcParams>(), size(BWD_BC_WGSL));
    }
}
