//! The training matmul (optionally split over k, with its partial sums added by a second
//! dispatch) and the linear layer's forward and backward built on it.

use super::{grid_threads, u, Step, TrainKernels};
use crate::gpu::MAX_GROUPS;
use crate::gpu::{Gpu, GpuError};

/// Output tile of the training matmul.
const TILE: usize = 64;
/// Split-k matmuls: split when there are fewer output tiles than this (and aim for about
/// this many workgroups), ...
const SPLIT_TILES: usize = 128;
/// ... keep at least this much of k per split, ...
const SPLIT_MIN_K: usize = 512;
/// ... and at most this many splits, whose partials fit the scratch of this many floats.
const MAX_SPLITS: usize = 64;
pub(super) const SPLIT_FLOATS: usize = 1 << 22;

/// One operand of [`TrainKernels::matmul`]: element (i, j) at `off + i·rs + j·cs`.
#[derive(Clone, Copy, Debug)]
pub struct Operand<'a> {
    pub buf: &'a wgpu::Buffer,
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Operand<'a> {
    /// Row-major with rows of `stride` floats, starting at float `off`.
    pub fn rows(buf: &'a wgpu::Buffer, off: usize, stride: usize) -> Self {
        Self {
            buf,
            off,
            rs: stride,
            cs: 1,
        }
    }

    /// The transpose of [`Operand::rows`].
    pub fn cols(buf: &'a wgpu::Buffer, off: usize, stride: usize) -> Self {
        Self {
            buf,
            off,
            rs: 1,
            cs: stride,
        }
    }
}

impl TrainKernels {
    /// `C[m][n] = (acc ? C : 0) + Σ_k A(m, k)·B(k, n)`, C rows of `c_stride` from float `c_off`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        gpu: &Gpu,
        m: usize,
        n: usize,
        k: usize,
        a: Operand<'_>,
        b: Operand<'_>,
        c: &wgpu::Buffer,
        c_off: usize,
        c_stride: usize,
        acc: bool,
    ) -> Result<Step, GpuError> {
        let gy = m.div_ceil(TILE);
        let gx = n.div_ceil(TILE);
        if gx > MAX_GROUPS || gy > MAX_GROUPS {
            return Err(GpuError::Invalid(format!(
                "matmul {m}×{n} is over the grid limit"
            )));
        }
        // Split k when there are too few output tiles to fill a GPU and k is long (the weight
        // gradients: k = every token), keeping ≥ SPLIT_MIN_K of k per split.
        let tiles = gx * gy;
        let splits = if tiles < SPLIT_TILES && k >= 2 * SPLIT_MIN_K {
            (SPLIT_TILES.div_ceil(tiles))
                .min(k / SPLIT_MIN_K)
                .min(SPLIT_FLOATS / (m * n).max(1))
                .min(MAX_SPLITS)
        } else {
            1
        };
        let kz = if splits > 1 {
            k.div_ceil(splits).next_multiple_of(16)
        } else {
            k
        };
        let splits = k.div_ceil(kz.max(1)).max(1);
        let (c_buf, part_off, part_stride, z_stride, part_acc) = if splits > 1 {
            (&self.split_scratch, 0, n, m * n, false)
        } else {
            (c, c_off, c_stride, 0, acc)
        };
        let words = [
            u(m)?,
            u(n)?,
            u(k)?,
            u(a.off)?,
            u(a.rs)?,
            u(a.cs)?,
            u(b.off)?,
            u(b.rs)?,
            u(b.cs)?,
            u(part_off)?,
            u(part_stride)?,
            u32::from(part_acc),
            u(kz)?,
            u(z_stride)?,
        ];
        let mut parts = vec![Self::dispatch(
            gpu,
            &self.matmul,
            &[a.buf, b.buf, c_buf],
            &words,
            [gx as u32, gy as u32, splits as u32],
        )];
        if splits > 1 {
            let sum_words = [
                u(m)?,
                u(n)?,
                u(splits)?,
                u(c_off)?,
                u(c_stride)?,
                u32::from(acc),
            ];
            parts.push(Self::dispatch(
                gpu,
                &self.split_sum,
                &[&self.split_scratch, c],
                &sum_words,
                grid_threads(m * n)?,
            ));
        }
        Ok(Step { parts })
    }

    /// Forward of a linear layer `Y = X·Wᵀ`: X rows of `x_stride` (first `in_dim` columns from
    /// `x_off`), W `[out_dim][in_dim]`, Y columns `[y_off, y_off + out_dim)` of rows of `y_stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn linear(
        &self,
        gpu: &Gpu,
        rows: usize,
        in_dim: usize,
        out_dim: usize,
        x: &wgpu::Buffer,
        x_off: usize,
        x_stride: usize,
        w: &wgpu::Buffer,
        y: &wgpu::Buffer,
        y_off: usize,
        y_stride: usize,
    ) -> Result<Step, GpuError> {
        self.matmul(
            gpu,
            rows,
            out_dim,
            in_dim,
            Operand::rows(x, x_off, x_stride),
            Operand::cols(w, 0, in_dim),
            y,
            y_off,
            y_stride,
            false,
        )
    }

    /// The two backward products of [`TrainKernels::linear`] with the same layouts:
    /// `dX (+)= dY·W` (added when `acc_dx`) and `dW += dYᵀ·X`.
    #[allow(clippy::too_many_arguments)]
    pub fn linear_backward(
        &self,
        gpu: &Gpu,
        rows: usize,
        in_dim: usize,
        out_dim: usize,
        x: &wgpu::Buffer,
        x_off: usize,
        x_stride: usize,
        w: &wgpu::Buffer,
        dw: &wgpu::Buffer,
        dy: &wgpu::Buffer,
        dy_off: usize,
        dy_stride: usize,
        dx: &wgpu::Buffer,
        dx_off: usize,
        dx_stride: usize,
        acc_dx: bool,
    ) -> Result<[Step; 2], GpuError> {
        let dx_step = self.matmul(
            gpu,
            rows,
            in_dim,
            out_dim,
            Operand::rows(dy, dy_off, dy_stride),
            Operand::rows(w, 0, in_dim),
            dx,
            dx_off,
            dx_stride,
            acc_dx,
        )?;
        let dw_step = self.matmul(
            gpu,
            out_dim,
            in_dim,
            rows,
            Operand::cols(dy, dy_off, dy_stride),
            Operand::rows(x, x_off, x_stride),
            dw,
            0,
            in_dim,
            true,
        )?;
        Ok([dx_step, dw_step])
    }
}
