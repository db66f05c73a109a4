//! The Mamba-2-only training kernels (the mixer's conv with bias, gates, operator inputs, D
//! skip, and their backwards), compiled once; they bind into the shared [`Step`]s. The shared
//! ops (matmuls, norms, SiLU gates, MLP, loss) are [`crate::train::kernels`]'.
//!
//! Rows are in (t, b) order as everywhere in training: the previous token of row r is r − B.

use crate::gpu::{Gpu, GpuError, Kernel};
use crate::train::kernels::{grid, grid_threads, u, Step, TrainKernels};

const COMMON: &str = include_str!("../shaders/common.wgsl");

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

impl M2TrainKernels {
    /// Compiles every kernel.
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let k = |label: &str, src: &str| gpu.kernel(label, &format!("{COMMON}\n{src}"), "main");
        Ok(Self {
            conv: k(
                "train_m2_conv",
                include_str!("../shaders/train_m2_conv.wgsl"),
            )?,
            conv_db: k(
                "train_m2_conv_db",
                include_str!("../shaders/train_m2_conv_db.wgsl"),
            )?,
            fwd_gates: k(
                "train_m2_fwd_gates",
                include_str!("../shaders/train_m2_fwd_gates.wgsl"),
            )?,
            fwd_qkv: k(
                "train_m2_fwd_qkv",
                include_str!("../shaders/train_m2_fwd_qkv.wgsl"),
            )?,
            skip: k(
                "train_m2_skip",
                include_str!("../shaders/train_m2_skip.wgsl"),
            )?,
            bwd_x: k(
                "train_m2_bwd_x",
                include_str!("../shaders/train_m2_bwd_x.wgsl"),
            )?,
            bwd_gates: k(
                "train_m2_bwd_gates",
                include_str!("../shaders/train_m2_bwd_gates.wgsl"),
            )?,
            bwd_bc: k(
                "train_m2_bwd_bc",
                include_str!("../shaders/train_m2_bwd_bc.wgsl"),
            )?,
            gnorm: k(
                "train_m2_gnorm",
                include_str!("../shaders/train_m2_gnorm.wgsl"),
            )?,
            gnorm_bwd: k(
                "train_m2_gnorm_bwd",
                include_str!("../shaders/train_m2_gnorm_bwd.wgsl"),
            )?,
        })
    }

    fn step(
        gpu: &Gpu,
        kernel: &Kernel,
        buffers: &[&wgpu::Buffer],
        words: &[u32],
        groups: [u32; 3],
    ) -> Step {
        TrainKernels::step(gpu, kernel, buffers, words, groups)
    }

    /// Conv (with `bias`: zeros when the model has none) + SiLU over xBC `[rows][channels]`:
    /// `pre` and `out` written.
    #[allow(clippy::too_many_arguments)]
    pub fn conv(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        inp: &wgpu::Buffer,
        w: &wgpu::Buffer,
        bias: &wgpu::Buffer,
        pre: &wgpu::Buffer,
        out: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let words = [u(s.rows)?, u(s.batch)?, u(s.channels())?, u(s.conv_width)?];
        Ok(Self::step(
            gpu,
            &self.conv,
            &[inp, w, bias, pre, out],
            &words,
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
        let words = [u(s.rows)?, u(s.channels())?];
        Ok(Self::step(
            gpu,
            &self.conv_db,
            &[pre, dout, db],
            &words,
            grid(s.channels())?,
        ))
    }

    fn gate_words(s: M2Shape) -> Result<[u32; 7], GpuError> {
        Ok([
            u(s.rows)?,
            u(s.heads)?,
            u(s.lambda_cols)?,
            u(s.dtl_stride())?,
            u32::from(s.log_linear),
            u(s.levels)?,
            u(s.prow_stride())?,
        ])
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
        Ok(Self::step(
            gpu,
            &self.fwd_gates,
            &[io.dtl, io.dt_bias, io.a_log, io.l_scale, g, lam, dt],
            &Self::gate_words(s)?[..5],
            grid_threads(s.rows * s.heads)?,
        ))
    }

    /// Backward of [`M2TrainKernels::gates`]: `ddtl` and the A_log, dt_bias, L shares of
    /// `prow` written.
    #[allow(clippy::too_many_arguments)]
    pub fn gates_backward(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        io: &M2GateIo<'_>,
        dg: &wgpu::Buffer,
        dlam: &wgpu::Buffer,
        sdt: &wgpu::Buffer,
        ddtl: &wgpu::Buffer,
        prow: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        Ok(Self::step(
            gpu,
            &self.bwd_gates,
            &[
                io.dtl, io.dt_bias, io.a_log, io.l_scale, dg, dlam, sdt, ddtl, prow,
            ],
            &Self::gate_words(s)?,
            grid_threads(s.rows * s.heads)?,
        ))
    }

    /// Per-head q = C, k = B and v = x·dt from the conv output.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        xbc: &wgpu::Buffer,
        dt: &wgpu::Buffer,
        q: &wgpu::Buffer,
        k: &wgpu::Buffer,
        v: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let words = [
            u(s.rows)?,
            u(s.heads)?,
            u(s.groups)?,
            u(s.state)?,
            u(s.head_dim)?,
        ];
        Ok(Self::step(
            gpu,
            &self.fwd_qkv,
            &[xbc, dt, q, k, v],
            &words,
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
        let words = [u(s.rows)?, u(s.heads)?, u(s.head_dim)?, u(s.channels())?];
        Ok(Self::step(
            gpu,
            &self.skip,
            &[o, xbc, d_skip, y],
            &words,
            grid_threads(s.rows * s.d_inner())?,
        ))
    }

    /// Backward of v = x·dt and the skip: the x columns of `dxbc`, `sdt` and the D share of
    /// `prow` written.
    #[allow(clippy::too_many_arguments)]
    pub fn x_backward(
        &self,
        gpu: &Gpu,
        s: M2Shape,
        xbc: &wgpu::Buffer,
        dt: &wgpu::Buffer,
        d_skip: &wgpu::Buffer,
        dy: &wgpu::Buffer,
        dv: &wgpu::Buffer,
        dxbc: &wgpu::Buffer,
        sdt: &wgpu::Buffer,
        prow: &wgpu::Buffer,
    ) -> Result<Step, GpuError> {
        let words = [
            u(s.rows)?,
            u(s.heads)?,
            u(s.head_dim)?,
            u(s.channels())?,
            u(s.prow_stride())?,
        ];
        Ok(Self::step(
            gpu,
            &self.bwd_x,
            &[xbc, dt, d_skip, dy, dv, dxbc, sdt, prow],
            &words,
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
        let words = [
            u(s.rows)?,
            u(s.heads)?,
            u(s.groups)?,
            u(s.state)?,
            u(s.d_inner())?,
        ];
        Ok(Self::step(
            gpu,
            &self.bwd_bc,
            &[dq, dk, dxbc],
            &words,
            grid_threads(s.rows * 2 * s.groups * s.state)?,
        ))
    }

    /// Grouped RMSNorm (the gated norm): `rows` rows of `cols` (the group size), `groups`
    /// consecutive rows per token, weight `[groups][cols]`; `rstd` per row kept.
    #[allow(clippy::too_many_arguments)]
    pub fn group_norm(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        out: &wgpu::Buffer,
        rstd: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        groups: usize,
        eps: f32,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, eps.to_bits(), u(groups)?];
        Ok(Self::step(
            gpu,
            &self.gnorm,
            &[x, w, out, rstd],
            &words,
            grid(rows)?,
        ))
    }

    /// Backward of [`M2TrainKernels::group_norm`]: `dx` written and the per-row shares of dw in
    /// `wrow` `[rows][cols]` = `[tokens][groups·cols]` (column sums over tokens make dw).
    #[allow(clippy::too_many_arguments)]
    pub fn group_norm_backward(
        &self,
        gpu: &Gpu,
        x: &wgpu::Buffer,
        w: &wgpu::Buffer,
        rstd: &wgpu::Buffer,
        dy: &wgpu::Buffer,
        dx: &wgpu::Buffer,
        wrow: &wgpu::Buffer,
        rows: usize,
        cols: usize,
        groups: usize,
    ) -> Result<Step, GpuError> {
        let words = [u(rows)?, u(cols)?, 0, 0, u(groups)?];
        Ok(Self::step(
            gpu,
            &self.gnorm_bwd,
            &[x, w, rstd, dy, dx, wrow],
            &words,
            grid(rows)?,
        ))
    }
}
