//! The training matmul (optionally split over k, with its partial sums added by a second
//! dispatch) and the linear layer's forward and backward built on it.

use super::{grid_threads, u, Step, TrainKernels};
use crate::gpu::{common_wgsl, MAX_GROUPS};
use crate::gpu::{Gpu, GpuError, Rows};

pub(super) const MATMUL_WGSL: &str = concat!(
    common_wgsl!("rows16"),
    common_wgsl!("tile64"),
    include_str!("../../shaders/train_matmul.wgsl")
);
pub(super) const SPLIT_SUM_WGSL: &str = include_str!("../../shaders/train_split_sum.wgsl");

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

/// `MatmulParams` of train_matmul.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    a_off: u32,
    a_rs: u32,
    a_cs: u32,
    b_off: u32,
    b_rs: u32,
    b_cs: u32,
    c_off: u32,
    c_rs: u32,
    acc: u32,
    kz: u32,
    z_stride: u32,
}

/// `SumParams` of train_split_sum.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SplitSumParams {
    m: u32,
    n: u32,
    splits: u32,
    c_off: u32,
    c_rs: u32,
    acc: u32,
}

/// One product of [`TrainKernels::matmul`]: `C = (accumulate ? C : 0) + A·B` with A m × k,
/// B k × n and C m × n.
#[derive(Clone, Copy, Debug)]
pub struct Matmul<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Operand<'a>,
    pub b: Operand<'a>,
    pub c: Rows<'a>,
    /// Add into C rather than overwrite it.
    pub accumulate: bool,
}

/// Sizes of a linear layer `Y = X·Wᵀ` over `rows` rows, W `[out_dim][in_dim]`.
#[derive(Clone, Copy, Debug)]
pub struct LinearShape {
    pub rows: usize,
    pub in_dim: usize,
    pub out_dim: usize,
}

/// Buffers of [`TrainKernels::linear_backward`]: the forward's input `x` (`in_dim` columns)
/// and weight `w`, the weight gradient `dw` (added into), the output gradient `dy`
/// (`out_dim` columns) and the input gradient `dx` (`in_dim` columns).
#[derive(Clone, Copy, Debug)]
pub struct LinearGradIo<'a> {
    pub x: Rows<'a>,
    pub w: &'a wgpu::Buffer,
    pub dw: &'a wgpu::Buffer,
    pub dy: Rows<'a>,
    pub dx: Rows<'a>,
    /// Add dX into `dx` (a later term of a sum) rather than overwrite it.
    pub accumulate_dx: bool,
}

impl TrainKernels {
    /// Records `op.c (+)= op.a · op.b`.
    pub fn matmul(&self, gpu: &Gpu, op: Matmul<'_>) -> Result<Step, GpuError> {
        let Matmul {
            m, n, k, a, b, c, ..
        } = op;
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
            (c.buf, c.off, c.stride, 0, op.accumulate)
        };
        let params = MatmulParams {
            m: u(m)?,
            n: u(n)?,
            k: u(k)?,
            a_off: u(a.off)?,
            a_rs: u(a.rs)?,
            a_cs: u(a.cs)?,
            b_off: u(b.off)?,
            b_rs: u(b.rs)?,
            b_cs: u(b.cs)?,
            c_off: u(part_off)?,
            c_rs: u(part_stride)?,
            acc: u32::from(part_acc),
            kz: u(kz)?,
            z_stride: u(z_stride)?,
        };
        let mut parts = vec![Self::dispatch(
            gpu,
            &self.matmul,
            &[a.buf, b.buf, c_buf],
            &params,
            [gx as u32, gy as u32, splits as u32],
        )];
        if splits > 1 {
            let sum = SplitSumParams {
                m: u(m)?,
                n: u(n)?,
                splits: u(splits)?,
                c_off: u(c.off)?,
                c_rs: u(c.stride)?,
                acc: u32::from(op.accumulate),
            };
            parts.push(Self::dispatch(
                gpu,
                &self.split_sum,
                &[&self.split_scratch, c.buf],
                &sum,
                grid_threads(m * n)?,
            ));
        }
        Ok(Step { parts })
    }

    /// Forward of a linear layer `Y = X·Wᵀ`: `x` the first `in_dim` columns of its rows, W
    /// `[out_dim][in_dim]`, `y` the first `out_dim` columns of its rows (written).
    pub fn linear(
        &self,
        gpu: &Gpu,
        shape: LinearShape,
        x: Rows<'_>,
        w: &wgpu::Buffer,
        y: Rows<'_>,
    ) -> Result<Step, GpuError> {
        self.matmul(
            gpu,
            Matmul {
                m: shape.rows,
                n: shape.out_dim,
                k: shape.in_dim,
                a: Operand::rows(x.buf, x.off, x.stride),
                b: Operand::cols(w, 0, shape.in_dim),
                c: y,
                accumulate: false,
            },
        )
    }

    /// The two backward products of [`TrainKernels::linear`] with the same layouts:
    /// `dX (+)= dY·W` and `dW += dYᵀ·X`.
    pub fn linear_backward(
        &self,
        gpu: &Gpu,
        shape: LinearShape,
        io: LinearGradIo<'_>,
    ) -> Result<[Step; 2], GpuError> {
        let LinearShape {
            rows,
            in_dim,
            out_dim,
        } = shape;
        let dy = io.dy;
        let dx_step = self.matmul(
            gpu,
            Matmul {
                m: rows,
                n: in_dim,
                k: out_dim,
                a: Operand::rows(dy.buf, dy.off, dy.stride),
                b: Operand::rows(io.w, 0, in_dim),
                c: io.dx,
                accumulate: io.accumulate_dx,
            },
        )?;
        let dw_step = self.matmul(
            gpu,
            Matmul {
                m: out_dim,
                n: in_dim,
                k: rows,
                a: Operand::cols(dy.buf, dy.off, dy.stride),
                b: Operand::rows(io.x.buf, io.x.off, io.x.stride),
                c: Rows::new(io.dw, 0, in_dim),
                accumulate: true,
            },
        )?;
        Ok([dx_step, dw_step])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{wgsl_uniform_size, with_common};

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        assert_eq!(size_of::<MatmulParams>(), size(MATMUL_WGSL));
        assert_eq!(size_of::<SplitSumParams>(), size(SPLIT_SUM_WGSL));
    }
}
