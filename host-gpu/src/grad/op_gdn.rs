//! Backward of the Log-Linear Gated DeltaNet chunkwise operator (spec §7.2-§7.4), in WGSL.
//!
//! Gradients of L = Σ o·d_o with respect to q, k, v, g, β and λ exactly as the operator uses
//! them (q already normalised and scaled, k normalised; the l2norm backward belongs to the
//! model graph). Nothing of the forward is kept: γ, the chunk's WY/UT quantities and the level
//! states are recomputed. Dispatches, in order (C = 64, NT = ⌈T / C⌉, M = ⌈log2 NT⌉ chunk
//! levels; every exponent ≤ 0, from chunk-local cumsums):
//! 1. `chunk_gamma` (the forward's): local inclusive cumsums γ.
//! 2. `grad_gdn_prep`, per (chunk, head): the tiles S1 = Tril(QKᵀ), KKᵀ, A_w (inverse by
//!    16 × 16 blocks in workgroup memory), M = S1 A_w, and per token q̃, K̃, W̃, U (the
//!    forward's UT form; K̃ᵀ, W̃ᵀ also per chunk, for coalesced reads in the scans).
//! 3. `grad_gdn_hscan`, per (8 dv columns, head, level m): the masked gated-delta-rule scan
//!    again, storing the state entering every chunk and the chunk product X = σU − W̃H
//!    (the levels' independent scans are the only serial part: NT steps each).
//! 4. `grad_gdn_dhscan`, same grid, chunks in reverse: the state gradients through the
//!    transposed transitions, with λ-weighted q̃ dOᵀ injected on reader chunks; stores them
//!    and the chunk product dX = K̃D.
//! 5. `grad_gdn_lvl`, per (chunk, 64 dk columns, head): dq̃, dK̃, dW̃, dU as workgroup-memory
//!    tiled products summed over levels inside the workgroup (deterministic, no atomics);
//!    per-dk-block partials of dγ (gpack) and of the inter-chunk dλ columns (dlp).
//! 6. `grad_gdn_intra`, per (chunk, head): intra-chunk λ-masked attention backward and the UT
//!    transform backward (dM, dS1, dA_w, dP = −A_wᵀ dA_w A_wᵀ) as C×C tiles, every product a
//!    workgroup-memory tiled one; per-row dβ, dγ and the intra dλ columns.
//! 7. `grad_gdn_vec`, per (chunk, 32 dk or dv columns, head): dq, dk, dv as tiled products.
//! 8. `grad_gdn_fin`: dβ, dg as the in-chunk reverse cumsum of dγ, and the inter-chunk dλ
//!    columns from the partials.
//!
//! Steps 2-8 run group after group of G heads (head offset and group size in the uniform),
//! G as large as the adapter's storage-binding and buffer-size limits allow, so the scratch
//! holds one group and is reused by the next (results do not depend on G).
//!
//! Scratch (f32, NLB = ⌈dk / 64⌉): γ (T·H); tiles (NT·G·(12·C² + 2C)); per-token packs
//! (T·G·(6 dk + 2 dv + 2 NLB)) and K̃ᵀ, W̃ᵀ per chunk (NT·G·2·dk·C); the level states and
//! their gradients (2·M·NT·G·dk·dv); the chunk products X, dX (2·M·NT·G·C·dv); dλ partials
//! (T·G·M·NLB). Limits: dk ≤ 256, any dv, any T ≥ 1; ≤ 10 storage buffers and ≤ 16 KiB of
//! workgroup memory per stage (the most: grad_gdn_prep, 15.9 KiB).

use super::{check_training_shape, HostBuffers, OpGradIo, OpGrads};
use crate::chunk_scan::{
    chunk_source, ChunkParams, Form, ScanInputs, ScanShape, Step, CHUNK, GAMMA,
};
use crate::gpu::{common_wgsl, MAX_GROUPS};
use crate::gpu::{Gpu, GpuError, Kernel};

/// dv columns per scan workgroup (`BV` in grad_gdn_hscan / grad_gdn_dhscan).
const SCAN_BV: usize = 8;
/// Floats of the per-chunk tile block (`PER_CH` in grad_gdn_common.wgsl).
const PER_CH: usize = 12 * CHUNK * CHUNK + 2 * CHUNK;
/// dk (or dv) columns per workgroup of grad_gdn_vec (`KB` in grad_gdn_common.wgsl).
const KB_COLS: usize = 32;
/// dk columns per workgroup of grad_gdn_lvl (`LB` in grad_gdn_common.wgsl).
const LB_COLS: usize = 64;

const GRAD_COMMON: &str = include_str!("../shaders/grad_gdn_common.wgsl");
const PREP: &str = include_str!("../shaders/grad_gdn_prep.wgsl");
const HSCAN: &str = concat!(
    common_wgsl!("gdn_level_scan"),
    include_str!("../shaders/grad_gdn_hscan.wgsl")
);
const DHSCAN: &str = concat!(
    common_wgsl!("gdn_level_scan"),
    include_str!("../shaders/grad_gdn_dhscan.wgsl")
);
const LVL: &str = include_str!("../shaders/grad_gdn_lvl.wgsl");
const INTRA: &str = include_str!("../shaders/grad_gdn_intra.wgsl");
const VEC: &str = include_str!("../shaders/grad_gdn_vec.wgsl");
const FIN: &str = include_str!("../shaders/grad_gdn_fin.wgsl");

/// Bind groups and scratch of one GDN operator backward, made once for a shape and a set of
/// buffers; [`GdnBackward::encode`] as often as wanted (each run overwrites the gradients).
pub struct GdnBackward {
    steps: Vec<Step>,
    groups: usize,
    _scratch: Vec<wgpu::Buffer>,
}

/// Number of bits of x (0 for 0).
fn bitlen(x: usize) -> usize {
    loglinear_runtime::bitlen(x as u64) as usize
}

impl GdnBackward {
    /// Checks the shape (GDN form, exact training levels, q and k per head) and buffer sizes,
    /// compiles the kernels, allocates scratch and makes the bind groups.
    pub fn new(gpu: &Gpu, shape: ScanShape, io: OpGradIo<'_>) -> Result<Self, GpuError> {
        Self::new_grouped(gpu, shape, io, usize::MAX)
    }

    /// As [`GdnBackward::new`], with at most `max_group_heads` heads per group (the scratch is
    /// sized for one group and reused by the next; the results do not depend on the grouping).
    /// `new` takes as many heads per group as the adapter's buffer limits allow.
    pub fn new_grouped(
        gpu: &Gpu,
        shape: ScanShape,
        io: OpGradIo<'_>,
        max_group_heads: usize,
    ) -> Result<Self, GpuError> {
        if shape.form != Form::Gdn {
            return Err(GpuError::Invalid(format!(
                "GDN backward: shape form is {:?}",
                shape.form
            )));
        }
        check_training_shape(&shape)?;
        let s = shape;
        let (t, h, dk, dv) = (s.t, s.heads, s.dk, s.dv);
        io.check("GDN backward", &s)?;
        let nt = s.chunks();
        let scans = bitlen(nt - 1);
        let nkb = dk.div_ceil(KB_COLS);
        let vec_blocks = nkb + dv.div_ceil(KB_COLS);
        let nlb = dk.div_ceil(LB_COLS);
        if nt * vec_blocks > MAX_GROUPS {
            return Err(GpuError::Invalid(format!(
                "GDN backward: T = {t} needs more than {MAX_GROUPS} workgroups per dispatch"
            )));
        }
        // Scratch floats per operator head; the scratch holds one group of heads at a time.
        let tiles_per_head = nt * PER_CH;
        let fpack_per_head = t * (3 * dk + dv);
        let gpack_per_head = t * (3 * dk + dv + 2 * nlb);
        let states_per_head = scans * nt * dk * dv;
        // The chunk products X (from hscan) and dX (dhscan) of every level and chunk.
        let xs_per_head = scans * nt * CHUNK * dv;
        let fpt_per_head = nt * 2 * dk * CHUNK;
        let dlp_per_head = t * scans * nlb;
        let biggest = [
            tiles_per_head,
            fpack_per_head,
            gpack_per_head,
            states_per_head,
            xs_per_head,
            fpt_per_head,
            dlp_per_head,
        ]
        .into_iter()
        .max()
        .unwrap_or(1) as u64;
        let limit = gpu.scratch_limit();
        let fit = (limit / (biggest * 4)) as usize;
        if fit == 0 {
            return Err(GpuError::Invalid(format!(
                "GDN backward: T = {t} needs {} bytes of scratch per head, over the adapter's \
                 storage-binding limit of {limit} bytes",
                biggest * 4
            )));
        }
        let group = h.min(fit).min(max_group_heads.max(1));
        let n_groups = h.div_ceil(group);

        // Exact chunk levels M = bitlen(NT − 1): no saturated level in training.
        let params = ChunkParams {
            group_heads: h as u32,
            ..ChunkParams::new(&s, scans)
        };
        let f = 4u64;
        let sz = |per_head: usize| (per_head * group).max(1) as u64 * f;
        let uniform = gpu.uniform_from("gdn bwd params", &params);
        let gam = gpu.storage_zeroed("gdn bwd gamma", (t * h) as u64 * f)?;
        let tiles = gpu.storage_zeroed("gdn bwd tiles", sz(tiles_per_head))?;
        let fpack = gpu.storage_zeroed("gdn bwd fpack", sz(fpack_per_head))?;
        let fpt = gpu.storage_zeroed("gdn bwd fpack transposed", sz(fpt_per_head))?;
        let gpack = gpu.storage_zeroed("gdn bwd gpack", sz(gpack_per_head))?;
        let hs = gpu.storage_zeroed("gdn bwd states", sz(states_per_head))?;
        let dhs = gpu.storage_zeroed("gdn bwd state grads", sz(states_per_head))?;
        let xs = gpu.storage_zeroed("gdn bwd chunk products X", sz(xs_per_head))?;
        let dxs = gpu.storage_zeroed("gdn bwd chunk products dX", sz(xs_per_head))?;
        let dlp = gpu.storage_zeroed("gdn bwd dlam partials", sz(dlp_per_head))?;

        let compile = |label: &str, body: &str| -> Result<Kernel, GpuError> {
            gpu.kernel(label, &chunk_source(&[GRAD_COMMON, body]), "main")
        };
        let gamma_k = gpu.kernel("chunk_gamma", &chunk_source(&[GAMMA]), "main")?;
        let prep_k = compile("grad_gdn_prep", PREP)?;
        let hscan_k = compile("grad_gdn_hscan", HSCAN)?;
        let dhscan_k = compile("grad_gdn_dhscan", DHSCAN)?;
        let lvl_k = compile("grad_gdn_lvl", LVL)?;
        let intra_k = compile("grad_gdn_intra", INTRA)?;
        let vec_k = compile("grad_gdn_vec", VEC)?;
        let fin_k = compile("grad_gdn_fin", FIN)?;

        let step = |k: &Kernel, label: &'static str, bufs: &[&wgpu::Buffer], groups: [usize; 3]| {
            Step::new(gpu, k, label, bufs, groups)
        };
        // γ of every head at once (it is small); the rest group after group.
        let mut steps = vec![step(
            &gamma_k,
            "chunk_gamma",
            &[&uniform, io.g, &gam],
            [nt, h, 1],
        )];
        let mut uniforms = vec![uniform];
        for gi in 0..n_groups {
            let h0 = gi * group;
            let gh = group.min(h - h0);
            let gp = ChunkParams {
                head0: h0 as u32,
                group_heads: gh as u32,
                ..params
            };
            let u = gpu.uniform_from("gdn bwd group params", &gp);
            let per_chunk = [nt, gh, 1];
            let per_kblock = [nt * nlb, gh, 1];
            let per_vblock = [nt * vec_blocks, gh, 1];
            let per_level = [dv.div_ceil(SCAN_BV), gh, scans];
            steps.push(step(
                &prep_k,
                "grad_gdn_prep",
                &[&u, io.q, io.k, io.v, &gam, io.beta, &tiles, &fpack, &fpt],
                per_chunk,
            ));
            if scans > 0 {
                steps.push(step(
                    &hscan_k,
                    "grad_gdn_hscan",
                    &[&u, &fpack, &gam, &hs, &xs, &fpt],
                    per_level,
                ));
                steps.push(step(
                    &dhscan_k,
                    "grad_gdn_dhscan",
                    &[&u, &fpack, &gam, io.lam, io.d_o, &dhs, &dxs, &fpt],
                    per_level,
                ));
            }
            steps.push(step(
                &lvl_k,
                "grad_gdn_lvl",
                &[
                    &u, &fpack, &gam, io.lam, io.d_o, &hs, &dhs, &dlp, &gpack, &xs, &dxs,
                ],
                per_kblock,
            ));
            steps.push(step(
                &intra_k,
                "grad_gdn_intra",
                &[
                    &u, io.k, io.v, &gam, io.beta, io.lam, io.d_o, &gpack, &tiles, io.dlam,
                ],
                per_chunk,
            ));
            steps.push(step(
                &vec_k,
                "grad_gdn_vec",
                &[
                    &u, io.q, io.k, &gam, io.beta, io.d_o, &gpack, &tiles, io.dq, io.dk, io.dv,
                ],
                per_vblock,
            ));
            steps.push(step(
                &fin_k,
                "grad_gdn_fin",
                &[&u, &tiles, io.dg, io.dbeta, &dlp, io.dlam],
                per_chunk,
            ));
            uniforms.push(u);
        }
        let mut scratch = uniforms;
        scratch.extend([gam, tiles, fpack, fpt, gpack, hs, dhs, xs, dxs, dlp]);
        Ok(Self {
            steps,
            groups: n_groups,
            _scratch: scratch,
        })
    }

    /// Head groups the operator heads are processed in (1 when the scratch takes them all).
    pub fn groups(&self) -> usize {
        self.groups
    }

    /// Records every dispatch (one compute pass each; wgpu orders them by their buffer use).
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        Step::record_all(&self.steps, encoder);
    }
}

impl GdnBackward {
    /// Runs the backward once with every dispatch submitted alone and waited for; returns
    /// the wall time of each stage in ms, summed over the head groups, in dispatch order
    /// (for profiling: the submit-and-wait overhead is part of every figure).
    pub fn profile_steps(&self, gpu: &Gpu) -> Result<Vec<(&'static str, f64)>, GpuError> {
        Step::profile_all(&self.steps, gpu)
    }
}

/// Convenience for tests: upload the forward's inputs and the upstream gradient `d_o`, run the
/// backward, read back the gradients.
pub fn run_backward(
    gpu: &Gpu,
    shape: ScanShape,
    inputs: &ScanInputs<'_>,
    d_o: &[f32],
) -> Result<OpGrads, GpuError> {
    run_backward_grouped(gpu, shape, usize::MAX, inputs, d_o)
}

/// As [`run_backward`], with at most `max_group_heads` heads per group (see
/// [`GdnBackward::new_grouped`]).
pub fn run_backward_grouped(
    gpu: &Gpu,
    shape: ScanShape,
    max_group_heads: usize,
    inputs: &ScanInputs<'_>,
    d_o: &[f32],
) -> Result<OpGrads, GpuError> {
    let bufs = HostBuffers::new(gpu, &shape, inputs, d_o)?;
    let bwd = GdnBackward::new_grouped(gpu, shape, bufs.io(), max_group_heads)?;
    bufs.run(gpu, "gdn backward", |enc| bwd.encode(enc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::wgsl_uniform_size;

    #[test]
    fn the_uniform_matches_every_kernel() {
        let size = wgsl_uniform_size(&chunk_source(&[GAMMA]));
        assert_eq!(size_of::<ChunkParams>(), size);
        for body in [PREP, HSCAN, DHSCAN, LVL, INTRA, VEC, FIN] {
            let size = wgsl_uniform_size(&chunk_source(&[GRAD_COMMON, body]));
            assert_eq!(size_of::<ChunkParams>(), size);
        }
    }
}
