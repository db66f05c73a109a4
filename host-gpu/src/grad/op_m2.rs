//! Backward of the Log-Linear Mamba-2 chunkwise operator (spec §7.4), for training.
//!
//! Gradients of L = Σ o·d_o with respect to q, k, v, g and λ, from the forward's inputs and d_o
//! only (γ and the inter-chunk states are recomputed). Dispatches, in order (chunk size 64,
//! NT = ⌈T / 64⌉ chunks, every exponent ≤ 0):
//! 1. `chunk_gamma` (the forward's): local inclusive cumsums γ.
//! 2. `grad_m2_intra`: one workgroup per (chunk, head): dq, dk, dv of the pairs inside the chunk
//!    and dλ columns 0..6 from per-row level sums (first writer of dq, dk, dv).
//! 3. `grad_m2_decay`: per (level m, chunk, head) the sum of the chunk totals Γ between a chunk
//!    and the boundary of its group's halves, so that every inter-chunk weight is the exp of a
//!    sum of non-positive terms.
//! 4. per inter-chunk (level m, group) pair the state the readers see,
//!    X = Σ_sources u_j k_j v_jᵀ, and its gradient Y = Σ_readers w_i q_i dO_iᵀ (λ column 7 + m
//!    in w). A reader chunk's forward state is H_c = exp(dec) X, so the reverse scan of the spec
//!    collapses to one Y per group. `grad_m2_xc`: per-chunk sources X_c (one pass over the
//!    rows); `grad_m2_xsum`: X = Σ_c exp(dec) X_c per pair; `grad_m2_y`: Y per pair.
//! 5. `grad_m2_zsum`: per source chunk Z_c = Σ_{m: c is a source} exp(dec) Y (the levels in
//!    order), so that sources take one product for all levels. `grad_m2_apply_{dq,dk,dv}`: per
//!    (column tile, chunk, head): readers dq += w X dO (all levels in order), sources
//!    dk += u Z_c v and dv += u Z_cᵀ k.
//!    The dq apply also writes dλ columns 7 and up (reader rows: exp(γ + dec) qᵀ X dO; 0
//!    elsewhere); `grad_m2_dlam` does (all 0) when there is one chunk only.
//! 6. `grad_m2_dg`, `grad_m2_dg_carry`: dG_i = q_i·dq_i − k_i·dk_i, then a reverse cumsum over
//!    the sequence (blocks of 256 tokens in parallel, then the later blocks' totals).
//!
//! Every output element has one writer per dispatch and fixed summation orders, so results are
//! deterministic. Scratch: γ (T·H), the decay offsets (levels·NT·H), X, Y
//! (2·(NT − 1)·H·dk·dv floats at most) and the X_c ((NT − 1)·H·dk·dv). Limits: those of
//! [`ScanLimits::validate`](crate::chunk_scan::ScanLimits::validate) (dk ≤ 256, any dv, any
//! T ≥ 1) plus [`check_training_shape`]; 25 KiB of workgroup memory and 10 storage buffers per
//! stage.

use super::{check_training_shape, HostBuffers, OpGradIo, OpGrads};
use crate::chunk_scan::{
    chunk_source, tile_reads, ChunkParams, Form, ScanInputs, ScanShape, Step, CHUNK, GAMMA, GAMMAS,
    ROWS16,
};
use crate::gpu::MAX_GROUPS;
use crate::gpu::{Gpu, GpuError, Kernel};
use loglinear_runtime::chunk::C0P1;

/// Output tile edge of `grad_m2_xy` and column tile of `grad_m2_apply`.
const TILE: usize = 64;
/// Storage buffers the intra kernel binds (the most of any stage).
const NEEDED_STORAGE_BUFFERS: u32 = 10;
/// Workgroup memory of the intra kernel: a 64×64 f32 tile, 64 γ and two staged 16-deep slices
/// in rows of 68 words (`SS` in grad_m2_intra.wgsl).
const NEEDED_WORKGROUP_BYTES: u32 = (64 * 64 + 64 + 2 * 16 * 68) * 4;
/// Tokens per block of the dg reverse cumsum (`grad_m2_dg`).
const DG_BLOCK: usize = 256;

const GRAD_COMMON: &str = include_str!("../shaders/grad_m2_common.wgsl");
const INTRA: &str = include_str!("../shaders/grad_m2_intra.wgsl");

/// grad_m2_intra.wgsl with what it includes.
fn intra_source() -> String {
    chunk_source(&[GRAD_COMMON, ROWS16, GAMMAS, &tile_reads("tile"), INTRA])
}
const DECAY: &str = include_str!("../shaders/grad_m2_decay.wgsl");
const XY: &str = include_str!("../shaders/grad_m2_xy.wgsl");
const XSUM: &str = include_str!("../shaders/grad_m2_xsum.wgsl");
const ZSUM: &str = include_str!("../shaders/grad_m2_zsum.wgsl");
const APPLY: &str = include_str!("../shaders/grad_m2_apply.wgsl");
const DLAM: &str = include_str!("../shaders/grad_m2_dlam.wgsl");
const DG: &str = include_str!("../shaders/grad_m2_dg.wgsl");
const DG_CARRY: &str = include_str!("../shaders/grad_m2_dg_carry.wgsl");

/// Inter-chunk levels with at least one reader chunk: bitlen(NT − 1).
fn inter_levels(nt: usize) -> usize {
    loglinear_runtime::bitlen(nt as u64 - 1) as usize
}

/// (Level, group) pairs with a non-empty reader half, over all levels (`total_pairs` in
/// grad_m2_common.wgsl).
fn total_pairs(nt: usize) -> usize {
    (0..inter_levels(nt))
        .map(|m| (nt - (1 << m)).div_ceil(1 << (m + 1)))
        .sum()
}

/// Pipelines of the Mamba-2 backward, compiled once and reusable for any shape.
pub struct M2Kernels {
    gamma: Kernel,
    intra: Kernel,
    decay: Kernel,
    xc: Kernel,
    xsum: Kernel,
    xy: Kernel,
    zsum: Kernel,
    apply: [Kernel; 3],
    dlam: Kernel,
    dg: Kernel,
    dg_carry: Kernel,
}

impl M2Kernels {
    /// Compiles the kernels. Fails with [`GpuError::Device`] when the adapter has less
    /// workgroup memory or fewer storage buffers per stage than they need.
    pub fn new(gpu: &Gpu) -> Result<Self, GpuError> {
        let l = &gpu.limits;
        if l.max_compute_workgroup_storage_size < NEEDED_WORKGROUP_BYTES
            || l.max_storage_buffers_per_shader_stage < NEEDED_STORAGE_BUFFERS
        {
            return Err(GpuError::Device(format!(
                "Mamba-2 backward needs {NEEDED_WORKGROUP_BYTES} bytes of workgroup memory and \
                 {NEEDED_STORAGE_BUFFERS} storage buffers per stage, adapter has {} and {}",
                l.max_compute_workgroup_storage_size, l.max_storage_buffers_per_shader_stage
            )));
        }
        let src = chunk_source;
        let apply = |mode: u32, label: &str| {
            let head = format!("const MODE: u32 = {mode}u;");
            gpu.kernel(label, &src(&[&head, GRAD_COMMON, APPLY]), "main")
        };
        Ok(Self {
            gamma: gpu.kernel("chunk_gamma", &src(&[GAMMA]), "main")?,
            intra: gpu.kernel("grad_m2_intra", &intra_source(), "main")?,
            decay: gpu.kernel("grad_m2_decay", &src(&[GRAD_COMMON, DECAY]), "main")?,
            xc: gpu.kernel(
                "grad_m2_xc",
                &src(&["const PER_CHUNK: bool = true;", GRAD_COMMON, XY]),
                "main",
            )?,
            xsum: gpu.kernel("grad_m2_xsum", &src(&[GRAD_COMMON, XSUM]), "main")?,
            xy: gpu.kernel(
                "grad_m2_y",
                &src(&["const PER_CHUNK: bool = false;", GRAD_COMMON, XY]),
                "main",
            )?,
            zsum: gpu.kernel("grad_m2_zsum", &src(&[GRAD_COMMON, ZSUM]), "main")?,
            apply: [
                apply(0, "grad_m2_apply_dq")?,
                apply(1, "grad_m2_apply_dk")?,
                apply(2, "grad_m2_apply_dv")?,
            ],
            dlam: gpu.kernel("grad_m2_dlam", &src(&[GRAD_COMMON, DLAM]), "main")?,
            dg: gpu.kernel("grad_m2_dg", &src(&[DG]), "main")?,
            dg_carry: gpu.kernel("grad_m2_dg_carry", &src(&[DG_CARRY]), "main")?,
        })
    }
}

/// Bind groups and scratch of one Mamba-2 operator backward for one shape and one set of
/// buffers; encode as often as wanted.
pub struct M2Backward {
    shape: ScanShape,
    steps: Vec<Step>,
    // Scratch, kept alive for the bind groups.
    _scratch: Vec<wgpu::Buffer>,
}

impl M2Backward {
    /// Checks the shape (Mamba-2, [`check_training_shape`]) and the buffer sizes, compiles the
    /// kernels, allocates scratch and makes the bind groups.
    pub fn new(gpu: &Gpu, shape: ScanShape, io: OpGradIo<'_>) -> Result<Self, GpuError> {
        let kernels = M2Kernels::new(gpu)?;
        Self::with_kernels(gpu, &kernels, shape, io)
    }

    /// Like [`M2Backward::new`] with kernels compiled once (training makes one backward per
    /// layer).
    pub fn with_kernels(
        gpu: &Gpu,
        kernels: &M2Kernels,
        shape: ScanShape,
        io: OpGradIo<'_>,
    ) -> Result<Self, GpuError> {
        let s = shape;
        if s.form != Form::Mamba2 {
            return Err(GpuError::Invalid(format!(
                "Mamba-2 backward: shape is {:?}",
                s.form
            )));
        }
        check_training_shape(&s)?;
        let (t, h, dk, dv, lc) = (s.t, s.heads, s.dk, s.dv, s.lambda_cols);
        io.check("Mamba-2 backward", &s)?;
        let nt = s.chunks();
        let levels = inter_levels(nt);
        let pairs = total_pairs(nt);
        let xy_floats = 2 * pairs * h * dk * dv;
        // Per-chunk sources X_c of every chunk but the last (never a source).
        let xc_floats = (nt - 1) * h * dk * dv;
        if xy_floats as u64 >= u64::from(u32::MAX)
            || xc_floats as u64 >= u64::from(u32::MAX)
            || [h, nt, pairs, (dk * dv).div_ceil(256), t.div_ceil(DG_BLOCK)]
                .iter()
                .any(|&groups| groups > MAX_GROUPS)
        {
            return Err(GpuError::Invalid(format!(
                "Mamba-2 backward: {s:?} is too large (X/Y scratch of {xy_floats} floats, \
                 {h} heads, {nt} chunks: more workgroups than a dispatch dimension allows)"
            )));
        }
        let params = ChunkParams {
            top: (lc - 1) as u32,
            m_top: 0,
            ..ChunkParams::new(&s, levels)
        };
        let f = 4u64;
        let uniform = gpu.uniform_from("grad m2 params", &params);
        let gam = gpu.storage_zeroed("grad m2 gamma", (t * h) as u64 * f)?;
        let dec = gpu.storage_zeroed("grad m2 decay", (levels * nt * h) as u64 * f)?;
        let xy = gpu.storage_zeroed("grad m2 x/y", xy_floats as u64 * f)?;
        let xc = gpu.storage_zeroed("grad m2 per-chunk x", xc_floats as u64 * f)?;
        let dg_blocks = t.div_ceil(DG_BLOCK);
        let dg_tot = gpu.storage_zeroed("grad m2 dg block totals", (dg_blocks * h) as u64 * f)?;

        let step = |k: &Kernel, label: &'static str, bufs: &[&wgpu::Buffer], groups: [usize; 3]| {
            Step::new(gpu, k, label, bufs, groups)
        };
        let kn = kernels;
        let mut steps = vec![
            step(
                &kn.gamma,
                "chunk_gamma",
                &[&uniform, io.g, &gam],
                [nt, h, 1],
            ),
            step(
                &kn.intra,
                "grad_m2_intra",
                &[
                    &uniform, io.q, io.k, io.v, io.d_o, &gam, io.lam, io.dq, io.dk, io.dv, io.dlam,
                ],
                [nt, h, 1],
            ),
        ];
        if pairs > 0 {
            steps.push(step(
                &kn.decay,
                "grad_m2_decay",
                &[&uniform, &gam, &dec],
                [(nt * h).div_ceil(64), levels, 1],
            ));
            let tiles = dk.div_ceil(TILE) * dv.div_ceil(TILE);
            steps.push(step(
                &kn.xc,
                "grad_m2_xc",
                &[&uniform, io.q, io.k, io.v, io.d_o, &gam, io.lam, &dec, &xc],
                [tiles, nt - 1, h],
            ));
            steps.push(step(
                &kn.xsum,
                "grad_m2_xsum",
                &[&uniform, &xc, &dec, &xy],
                [(dk * dv).div_ceil(256), pairs, h],
            ));
            steps.push(step(
                &kn.xy,
                "grad_m2_y",
                &[&uniform, io.q, io.k, io.v, io.d_o, &gam, io.lam, &dec, &xy],
                [tiles, pairs, h],
            ));
            // Z_c of every chunk but the last into the X_c scratch (X_c is no longer needed).
            steps.push(step(
                &kn.zsum,
                "grad_m2_zsum",
                &[&uniform, &xy, &dec, &xc],
                [(dk * dv).div_ceil(256), nt - 1, h],
            ));
            // dq: one workgroup per (chunk, head) walks all column tiles (its dλ needs the
            // whole row) and reads X from `xy`; dk, dv: per column tile, Z_c from `xc`.
            let applies: [(
                &'static str,
                &wgpu::Buffer,
                &wgpu::Buffer,
                &wgpu::Buffer,
                usize,
            ); 3] = [
                ("grad_m2_apply_dq", io.d_o, &xy, io.dq, 1),
                ("grad_m2_apply_dk", io.v, &xc, io.dk, dk.div_ceil(TILE)),
                ("grad_m2_apply_dv", io.k, &xc, io.dv, dv.div_ceil(TILE)),
            ];
            for (kernel, (label, a_in, mats, out, tiles)) in kn.apply.iter().zip(applies) {
                steps.push(step(
                    kernel,
                    label,
                    &[&uniform, a_in, mats, &gam, io.lam, &dec, out, io.q, io.dlam],
                    [tiles, nt, h],
                ));
            }
        } else {
            // One chunk: no inter-chunk level, dλ columns from 7 are all 0.
            steps.push(step(
                &kn.dlam,
                "grad_m2_dlam",
                &[&uniform, io.q, io.d_o, &xy, &gam, &dec, io.dlam],
                [nt, h, 1],
            ));
        }
        steps.push(step(
            &kn.dg,
            "grad_m2_dg",
            &[&uniform, io.q, io.k, io.dq, io.dk, io.dg, &dg_tot],
            [dg_blocks, h, 1],
        ));
        if dg_blocks > 1 {
            steps.push(step(
                &kn.dg_carry,
                "grad_m2_dg_carry",
                &[&uniform, io.dg, &dg_tot],
                [dg_blocks, h, 1],
            ));
        }
        Ok(Self {
            shape,
            steps,
            _scratch: vec![uniform, gam, dec, xy, xc, dg_tot],
        })
    }

    /// The shape this backward was made for.
    pub fn shape(&self) -> ScanShape {
        self.shape
    }

    /// Labels of the dispatches `encode` records, in order.
    pub fn step_labels(&self) -> Vec<&'static str> {
        self.steps.iter().map(|s| s.label).collect()
    }

    /// Records all dispatches (one compute pass each, so each sees the previous one's writes).
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        Step::record_all(&self.steps, encoder);
    }

    /// Runs the backward once with every dispatch submitted alone and waited for; returns
    /// the wall time of each stage in ms, in dispatch order (for profiling: the
    /// submit-and-wait overhead is part of every figure).
    pub fn profile_steps(&self, gpu: &Gpu) -> Result<Vec<(&'static str, f64)>, GpuError> {
        Step::profile_all(&self.steps, gpu)
    }
}

/// Convenience for tests: upload the forward inputs (`beta` not read) and d_o (layouts of
/// [`OpGradIo`]), run the backward, read the gradients back (`dbeta` empty).
pub fn run_backward(
    gpu: &Gpu,
    shape: ScanShape,
    inputs: &ScanInputs<'_>,
    d_o: &[f32],
) -> Result<OpGrads, GpuError> {
    let bufs = HostBuffers::new(gpu, &shape, inputs, d_o)?;
    let bwd = M2Backward::new(gpu, shape, bufs.io())?;
    bufs.run(gpu, "grad m2", |enc| bwd.encode(enc))
}

// Only the chunk size 64 is supported by the shaders (C in chunk_common.wgsl).
const _: () = assert!(CHUNK == 64 && C0P1 == 7);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{wgsl_uniform_size, wgsl_workgroup_bytes};

    /// The sources of every kernel [`M2Kernels::new`] compiles, the intra kernel last.
    fn all_sources() -> Vec<String> {
        let mut sources = vec![
            chunk_source(&[GAMMA]),
            chunk_source(&["const PER_CHUNK: bool = true;", GRAD_COMMON, XY]),
            chunk_source(&["const PER_CHUNK: bool = false;", GRAD_COMMON, XY]),
            chunk_source(&[DG]),
            chunk_source(&[DG_CARRY]),
        ];
        for body in [DECAY, XSUM, ZSUM, DLAM] {
            sources.push(chunk_source(&[GRAD_COMMON, body]));
        }
        for mode in 0..3 {
            let head = format!("const MODE: u32 = {mode}u;");
            sources.push(chunk_source(&[&head, GRAD_COMMON, APPLY]));
        }
        sources.push(intra_source());
        sources
    }

    #[test]
    fn the_uniform_matches_every_kernel() {
        for source in &all_sources() {
            assert_eq!(size_of::<ChunkParams>(), wgsl_uniform_size(source));
        }
    }

    /// `NEEDED_WORKGROUP_BYTES` is what the intra kernel declares (the shaders define its
    /// staging sizes) and covers every other kernel.
    #[test]
    fn the_workgroup_memory_check_is_the_intra_kernels_and_covers_the_rest() {
        let sources = all_sources();
        let (intra, rest) = sources.split_last().unwrap();
        assert_eq!(wgsl_workgroup_bytes(intra), NEEDED_WORKGROUP_BYTES);
        for source in rest {
            assert!(wgsl_workgroup_bytes(source) <= NEEDED_WORKGROUP_BYTES);
        }
    }
}
