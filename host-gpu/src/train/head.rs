//! The model head both training graphs end in: final RMSNorm, LM head and the masked
//! cross-entropy, with their backward down to dL/dx_last. One owner of the head's buffers and
//! steps, so that the GDN and Mamba-2 graphs share one implementation.
//!
//! The LM head and the loss run in tiles of rows ([`tile_rows`]): one logits buffer of
//! tile × vocab f32 is reused by every tile, so the full rows × vocab logits are never held
//! and no binding goes over the adapter's limits. Per tile the forward computes the logits and
//! the tile's losses, correctness and log-sum-exp; the backward turns the logits into dlogits
//! in place, writes the tile's dL/dh and adds its dW_head, tile after tile (a fixed order). The
//! forward and the backward are recorded apart (evaluation runs the forward alone, and the
//! loss scale is written just before the backward), so with several tiles the backward
//! computes each tile's logits again: the same kernel on the same operands gives the same
//! values, and the forward's log-sum-exp applies. With one tile (every row fits) it uses the
//! forward's logits, so each backward needs its own forward.
//!
//! With [`HeadOptions::rows`] (the graph's `head_rows`) = `Some(cap)` the
//! head runs on at most `cap` rows: the rows whose target is not ignored, compacted in
//! increasing row order (train_rows_compact.wgsl), gathered, put through the same norm, LM
//! head and loss, and scattered back (train_rows.wgsl). Tasks that score few positions (MQAR:
//! about 25 of 256) then skip most of the head's vocabulary-wide work and memory. Scored rows
//! beyond the capacity are dropped and their losses, correctness and dL/dx rows become NaN,
//! so an overflow is visible rather than silent.
//!
//! The scored rows of a batch are usually far fewer than the capacity, which must hold the
//! worst batch (MQAR: about 4,000 of 16,384). So the compact head is recorded at
//! [`ROW_LEVELS`] row counts up to the capacity ([`row_levels`]), all over the same buffers,
//! and [`Head::set_scored_rows`] picks the smallest that holds the next batch's scored rows:
//! the head's work follows the batch rather than the worst case. A level is a capacity like
//! any other: rows beyond it become NaN.

use crate::gpu::{common_wgsl, with_common, Gpu, GpuError, Kernel, Rows};
use crate::train::kernels::{
    encode_all, grid, grid_threads, u, LinearGradIo, LinearShape, LossShape, MaskedLossIo,
    NormGrads, NormIo, Step, TrainKernels,
};
use std::cell::Cell;

const ROWS_WGSL: &str = concat!(
    common_wgsl!("ignored_target"),
    include_str!("../shaders/train_rows.wgsl")
);
const ROWS_COMPACT_WGSL: &str = concat!(
    common_wgsl!("ignored_target"),
    include_str!("../shaders/train_rows_compact.wgsl")
);
/// A quiet NaN's bits (what dropped rows get).
const NAN_BITS: u32 = 0x7FC0_0000;

/// `MapParams` of train_rows.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct MapParams {
    rows: u32,
    cols: u32,
    t: u32,
    batch: u32,
    nan_bits: u32,
}

/// `CompactParams` of train_rows_compact.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CompactParams {
    n: u32,
    batch: u32,
    t: u32,
    cap: u32,
}

/// The graph's buffers the head reads and writes.
pub struct HeadIo<'a> {
    /// The last block's output `[rows][d]`, rows in (t, b) order.
    pub x_last: &'a wgpu::Buffer,
    pub norm_w: &'a wgpu::Buffer,
    pub norm_g: &'a wgpu::Buffer,
    pub lm_head_w: &'a wgpu::Buffer,
    pub lm_head_g: &'a wgpu::Buffer,
    /// Targets `[B][T]` (u32, `u32::MAX` = ignored).
    pub targets: &'a wgpu::Buffer,
    /// Per-target losses and correctness `[B][T]` (written by the forward).
    pub losses: &'a wgpu::Buffer,
    pub correct: &'a wgpu::Buffer,
    /// The backward's loss scale (one f32).
    pub scale: &'a wgpu::Buffer,
    /// dL/dx_last `[rows][d]` (written by the backward).
    pub dx: &'a wgpu::Buffer,
}

/// Sizes of the head.
#[derive(Clone, Copy, Debug)]
pub struct HeadShape {
    pub seq_len: usize,
    pub batch: usize,
    pub d: usize,
    pub vocab: usize,
    pub eps: f32,
}

/// The rows the head runs on for `head_rows` out of `n`: `n` for `None`, else `cap`, which
/// must be in 1..=n.
pub fn head_capacity(head_rows: Option<usize>, n: usize) -> Result<usize, GpuError> {
    match head_rows {
        None => Ok(n),
        Some(cap) if (1..=n).contains(&cap) => Ok(cap),
        Some(cap) => Err(GpuError::Invalid(format!(
            "head_rows {cap} must be between 1 and batch·seq_len = {n}"
        ))),
    }
}

/// Rows per tile of the LM head and the loss, for `rows` rows of `vocab` f32 logits and a
/// buffer limit of `limit` bytes: every row when all of them fit (one tile), else the largest
/// power of two whose tile does (so a tile takes between half the limit and all of it). An
/// error when not even one row fits.
pub fn tile_rows(rows: usize, vocab: usize, limit: u64) -> Result<usize, GpuError> {
    let row_bytes = 4 * vocab as u64;
    let fit = usize::try_from(limit / row_bytes).unwrap_or(usize::MAX);
    if fit >= rows {
        return Ok(rows);
    }
    if fit == 0 {
        return Err(GpuError::TooLarge {
            label: "head logits row".into(),
            bytes: row_bytes,
            limit,
        });
    }
    Ok(1 << fit.ilog2())
}

/// The limit a logits tile must fit: the adapter's storage-binding and buffer limits.
fn adapter_limit(gpu: &Gpu) -> u64 {
    gpu.limits
        .max_storage_buffer_binding_size
        .min(gpu.limits.max_buffer_size)
}

/// The head's layout choices.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadOptions {
    /// The graph's `head_rows`: `Some(cap)` runs the head on at most `cap` scored rows (see
    /// the module docs), `None` on every row.
    pub rows: Option<usize>,
    /// The most bytes a logits tile may take, below the adapter's limits; `None`: those limits.
    /// Tests set a small one to run several tiles on small shapes.
    pub max_tile_bytes: Option<u64>,
}

/// Row counts the compact head is recorded at, up to its capacity.
pub const ROW_LEVELS: usize = 8;

/// The row counts the compact head is recorded at for capacity `cap`: `cap / ROW_LEVELS`
/// (rounded up) and its multiples, the last one `cap`, in increasing order.
pub fn row_levels(cap: usize) -> Vec<usize> {
    let step = cap.div_ceil(ROW_LEVELS).max(1);
    let mut levels: Vec<usize> = (1..=ROW_LEVELS).map(|i| (i * step).min(cap)).collect();
    levels.dedup();
    levels
}

/// The head's forward and backward recorded for one row count.
struct Level {
    rows: usize,
    forward: Vec<Step>,
    backward: Vec<Step>,
}

/// The head's recorded forward and backward and the buffers they bind.
pub struct Head {
    /// In increasing rows; the last one holds every row the head may run on.
    levels: Vec<Level>,
    /// The level the next [`Head::encode_forward`] and [`Head::encode_backward`] record.
    level: Cell<usize>,
    /// Rows per tile of the LM head and the loss.
    tile: usize,
    // Kept alive for the bind groups.
    _buffers: Vec<wgpu::Buffer>,
}

impl Head {
    /// [`Head::with_options`] with `head_rows` and the adapter's limits.
    pub fn new(
        gpu: &Gpu,
        k: &TrainKernels,
        io: &HeadIo<'_>,
        shape: HeadShape,
        head_rows: Option<usize>,
    ) -> Result<Self, GpuError> {
        let options = HeadOptions {
            rows: head_rows,
            max_tile_bytes: None,
        };
        Self::with_options(gpu, k, io, shape, options)
    }

    /// Allocates the head's buffers (for `options.rows` rows when given, else all
    /// batch · seq_len; logits for one tile of them) and records its steps. `options.rows`
    /// must be in 1..=batch · seq_len.
    pub fn with_options(
        gpu: &Gpu,
        k: &TrainKernels,
        io: &HeadIo<'_>,
        shape: HeadShape,
        options: HeadOptions,
    ) -> Result<Self, GpuError> {
        let rows = head_capacity(options.rows, shape.seq_len * shape.batch)?;
        let (d, vocab) = (shape.d, shape.vocab);
        let limit = adapter_limit(gpu).min(options.max_tile_bytes.unwrap_or(u64::MAX));
        let tile = tile_rows(rows, vocab, limit)?;
        let z = |label: &str, len: usize| gpu.storage_zeroed(label, 4 * len as u64);
        let core = CoreBuffers {
            xf: z("head xf", rows * d)?,
            rstd: z("head rstd", rows)?,
            logits: z("head logits", tile * vocab)?,
            lse: z("head lse", rows)?,
            dxf: z("head dxf", rows * d)?,
            wrow: z("head wrow", rows * d)?,
            tile,
        };
        let mut head = match options.rows {
            None => {
                // Every row: the norm reads x_last and the loss writes the graph's outputs.
                let (fwd, bwd) = core_steps(
                    gpu,
                    k,
                    &core,
                    &CoreIo {
                        x: io.x_last,
                        targets: io.targets,
                        losses: io.losses,
                        correct: io.correct,
                        dx: io.dx,
                        t: shape.seq_len,
                        batch: shape.batch,
                    },
                    io,
                    shape,
                )?;
                Self {
                    levels: vec![Level {
                        rows,
                        forward: fwd,
                        backward: bwd,
                    }],
                    level: Cell::new(0),
                    tile,
                    _buffers: Vec::new(),
                }
            }
            Some(cap) => compact_head(gpu, k, &core, io, shape, cap)?,
        };
        head._buffers.extend([
            core.xf,
            core.rstd,
            core.logits,
            core.lse,
            core.dxf,
            core.wrow,
        ]);
        Ok(head)
    }

    /// Rows per tile of the LM head and the loss (all of the head's rows when they fit one).
    pub fn tile_rows(&self) -> usize {
        self.tile
    }

    /// Picks the rows of the next forward and backward: the smallest level that holds
    /// `scored` rows (the scored targets of the batch about to be recorded), else the
    /// capacity. Until it is called, the head runs at its capacity. With every row
    /// (`head_rows` = `None`) there is one level and this changes nothing.
    pub fn set_scored_rows(&self, scored: usize) {
        let last = self.levels.len() - 1;
        let i = self.levels.iter().position(|l| l.rows >= scored);
        self.level.set(i.unwrap_or(last));
    }

    /// The rows the next forward and backward run on (see [`Head::set_scored_rows`]).
    pub fn rows_in_use(&self) -> usize {
        self.levels[self.level.get()].rows
    }

    /// Records the forward: losses and correctness `[B][T]` from x_last.
    pub fn encode_forward(&self, enc: &mut wgpu::CommandEncoder) {
        encode_all(enc, &self.levels[self.level.get()].forward);
    }

    /// Records the backward of the last recorded forward (at the same level): dL/dx_last
    /// (written) and the norm and LM-head weight gradients (added).
    pub fn encode_backward(&self, enc: &mut wgpu::CommandEncoder) {
        encode_all(enc, &self.levels[self.level.get()].backward);
    }
}

/// The head's own buffers, for its rows (`logits` for one tile of `tile` rows).
struct CoreBuffers {
    xf: wgpu::Buffer,
    rstd: wgpu::Buffer,
    logits: wgpu::Buffer,
    lse: wgpu::Buffer,
    dxf: wgpu::Buffer,
    wrow: wgpu::Buffer,
    tile: usize,
}

/// What the norm, LM head and loss run on: `t · batch` rows of `x`, targets and outputs
/// `[batch][t]` (the compact path uses t = cap, batch = 1, so slot s's target is at s).
struct CoreIo<'a> {
    x: &'a wgpu::Buffer,
    targets: &'a wgpu::Buffer,
    losses: &'a wgpu::Buffer,
    correct: &'a wgpu::Buffer,
    dx: &'a wgpu::Buffer,
    t: usize,
    batch: usize,
}

/// Norm, LM head and masked loss forward, and their backward down to `c.dx`; the LM head and
/// the loss tile by tile (see the module docs).
fn core_steps(
    gpu: &Gpu,
    k: &TrainKernels,
    b: &CoreBuffers,
    c: &CoreIo<'_>,
    io: &HeadIo<'_>,
    shape: HeadShape,
) -> Result<(Vec<Step>, Vec<Step>), GpuError> {
    let (d, vocab) = (shape.d, shape.vocab);
    let rows = c.t * c.batch;
    let lm_head = |n: usize| LinearShape {
        rows: n,
        in_dim: d,
        out_dim: vocab,
    };
    // Tile rows `first..first + n` of the normed rows, and their logits.
    let h = |first: usize| Rows::new(&b.xf, first * d, d);
    let logits = Rows::new(&b.logits, 0, vocab);
    let logits_step =
        |first: usize, n: usize| k.linear(gpu, lm_head(n), h(first), io.lm_head_w, logits);
    let loss_io = MaskedLossIo {
        targets: c.targets,
        logits: &b.logits,
        lse: &b.lse,
        scale: io.scale,
        correct: c.correct,
    };
    let all_rows = LossShape::new(c.t, c.batch, vocab);
    let norm = NormIo {
        x: c.x,
        w: io.norm_w,
        out: &b.xf,
        rstd: &b.rstd,
    };
    let mut fwd = vec![k.rmsnorm(gpu, norm, rows, d, shape.eps)?];
    let mut bwd = Vec::new();
    for first in (0..rows).step_by(b.tile) {
        let n = b.tile.min(rows - first);
        let loss_shape = all_rows.tile(first, n);
        fwd.push(logits_step(first, n)?);
        fwd.push(k.masked_loss(gpu, loss_io, c.losses, loss_shape)?);
        if b.tile < rows {
            bwd.push(logits_step(first, n)?);
        }
        bwd.push(k.masked_loss_backward(gpu, loss_io, loss_shape)?);
        bwd.extend(k.linear_backward(
            gpu,
            lm_head(n),
            LinearGradIo {
                x: h(first),
                w: io.lm_head_w,
                dw: io.lm_head_g,
                dy: logits,
                dx: Rows::new(&b.dxf, first * d, d),
                accumulate_dx: false,
            },
        )?);
    }
    let grads = NormGrads {
        dy: &b.dxf,
        dx: c.dx,
        wrow: &b.wrow,
    };
    bwd.push(k.rmsnorm_backward(gpu, norm, grads, rows, d, false)?);
    bwd.push(k.colsum(gpu, Rows::new(&b.wrow, 0, d), rows, d, io.norm_g)?);
    Ok((fwd, bwd))
}

/// The head on at most `cap` scored rows (without the core's buffers), recorded at each of
/// [`row_levels`]`(cap)` over one set of buffers sized for `cap`.
fn compact_head(
    gpu: &Gpu,
    k: &TrainKernels,
    core: &CoreBuffers,
    io: &HeadIo<'_>,
    shape: HeadShape,
    cap: usize,
) -> Result<Head, GpuError> {
    let (n, d) = (shape.seq_len * shape.batch, shape.d);
    let kern = |label: &str, body: &str, entry: &str| gpu.kernel(label, &with_common(body), entry);
    let kernels = CompactKernels {
        compact: kern("train_rows_compact", ROWS_COMPACT_WGSL, "main")?,
        gather: kern("train_rows_gather", ROWS_WGSL, "gather_rows")?,
        scatter: kern("train_rows_scatter", ROWS_WGSL, "scatter_targets")?,
    };
    let z = |label: &str, len: usize| gpu.storage_zeroed(label, 4 * len as u64);
    let b = CompactBuffers {
        slot_row: z("head slot_row", cap)?,
        slot_target: z("head slot_target", cap)?,
        row_slot: z("head row_slot", n)?,
        x_c: z("head x compact", cap * d)?,
        dx_c: z("head dx compact", cap * d)?,
        losses_c: z("head losses compact", cap)?,
        correct_c: z("head correct compact", cap)?,
    };
    let parts = CompactParts {
        gpu,
        k,
        kernels: &kernels,
        core,
        b: &b,
        io,
        shape,
    };
    let levels = row_levels(cap)
        .into_iter()
        .map(|rows| compact_level(&parts, rows))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Head {
        level: Cell::new(levels.len() - 1),
        levels,
        tile: core.tile,
        _buffers: vec![
            b.slot_row,
            b.slot_target,
            b.row_slot,
            b.x_c,
            b.dx_c,
            b.losses_c,
            b.correct_c,
        ],
    })
}

/// The compact head's own kernels.
struct CompactKernels {
    compact: Kernel,
    gather: Kernel,
    scatter: Kernel,
}

/// The compact head's buffers, for `cap` slots.
struct CompactBuffers {
    slot_row: wgpu::Buffer,
    slot_target: wgpu::Buffer,
    row_slot: wgpu::Buffer,
    x_c: wgpu::Buffer,
    dx_c: wgpu::Buffer,
    losses_c: wgpu::Buffer,
    correct_c: wgpu::Buffer,
}

/// What every level of the compact head records with.
struct CompactParts<'a> {
    gpu: &'a Gpu,
    k: &'a TrainKernels,
    kernels: &'a CompactKernels,
    core: &'a CoreBuffers,
    b: &'a CompactBuffers,
    io: &'a HeadIo<'a>,
    shape: HeadShape,
}

/// The compact head at capacity `cap` (≤ the buffers' slots): compact → gather x_last → core
/// → scatter losses and correctness; backward: core → scatter dx (zero on unscored rows).
fn compact_level(parts: &CompactParts<'_>, cap: usize) -> Result<Level, GpuError> {
    let CompactParts {
        gpu,
        k,
        kernels,
        core,
        b,
        io,
        shape,
    } = *parts;
    let (t, batch, d) = (shape.seq_len, shape.batch, shape.d);
    let n = t * batch;
    let (core_fwd, core_bwd) = core_steps(
        gpu,
        k,
        core,
        &CoreIo {
            x: &b.x_c,
            targets: &b.slot_target,
            losses: &b.losses_c,
            correct: &b.correct_c,
            dx: &b.dx_c,
            t: cap,
            batch: 1,
        },
        io,
        shape,
    )?;
    let map_rows = |map: &wgpu::Buffer, src: &wgpu::Buffer, dst: &wgpu::Buffer, rows: usize| {
        let params = MapParams {
            rows: u(rows)?,
            cols: u(d)?,
            t: 0,
            batch: 0,
            nan_bits: NAN_BITS,
        };
        Ok::<_, GpuError>(TrainKernels::step(
            gpu,
            &kernels.gather,
            &[map, src, dst],
            &params,
            grid_threads(rows * d)?,
        ))
    };
    let to_targets = |src: &wgpu::Buffer, dst: &wgpu::Buffer| {
        let params = MapParams {
            rows: u(n)?,
            cols: 1,
            t: u(t)?,
            batch: u(batch)?,
            nan_bits: NAN_BITS,
        };
        Ok::<_, GpuError>(TrainKernels::step(
            gpu,
            &kernels.scatter,
            &[&b.row_slot, src, dst],
            &params,
            grid_threads(n)?,
        ))
    };
    // One workgroup compacts all n targets.
    let compact_params = CompactParams {
        n: u(n)?,
        batch: u(batch)?,
        t: u(t)?,
        cap: u(cap)?,
    };
    let compact_step = TrainKernels::step(
        gpu,
        &kernels.compact,
        &[io.targets, &b.slot_row, &b.slot_target, &b.row_slot],
        &compact_params,
        grid(1)?,
    );

    let mut forward = vec![compact_step, map_rows(&b.slot_row, io.x_last, &b.x_c, cap)?];
    forward.extend(core_fwd);
    forward.push(to_targets(&b.losses_c, io.losses)?);
    forward.push(to_targets(&b.correct_c, io.correct)?);

    let mut backward = core_bwd;
    backward.push(map_rows(&b.row_slot, &b.dx_c, io.dx, n)?);
    Ok(Level {
        rows: cap,
        forward,
        backward,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::wgsl_uniform_size;

    #[test]
    fn uniforms_match_their_wgsl_structs() {
        let size = |body: &str| wgsl_uniform_size(&with_common(body));
        assert_eq!(size_of::<MapParams>(), size(ROWS_WGSL));
        assert_eq!(size_of::<CompactParams>(), size(ROWS_COMPACT_WGSL));
    }
}
