//! The chunkwise-parallel forward of Log-Linear Attention (spec §7) for both forms, Mamba-2 and
//! Gated DeltaNet, as wgpu compute shaders, ending in the Fenwick state the runtime decoder
//! (`loglinear_runtime::FenwickState` with a saturating `LevelPolicy`) continues from.
//!
//! Dispatches, in order (chunk size C = 64, NT = ⌈T / 64⌉ chunks, all exponents ≤ 0):
//! 1. `chunk_gamma`: local inclusive cumsums γ of the log decay inside each chunk.
//! 2. `chunk_intra_*`: one workgroup per (chunk, head): the 64×64 score tile with the λ column
//!    min(level, top), o = A V (first writer of `o`); GDN also forms A_w = (I + StrictLower(diag(β)
//!    K Kᵀ))⁻¹ by forward substitution and writes q̃, K̃, W̃, U for the scan (WY/UT form), each
//!    a contiguous block per (chunk, head), q̃ and W̃ transposed (dk × C) so that the scan's row
//!    products read consecutive words across a warp.
//! 3. `chunk_scan_*`: every inter-chunk level at once, one workgroup per (8 dv columns, head,
//!    level), sequential over chunks; reader rows go to one scratch slab per level. The top level
//!    is a saturated scan (sum of all exact levels ≥ top), as the runtime's policy. GDN
//!    (chunk_scan_gdn.wgsl, its own file): 16 dv columns per workgroup, each state row held in
//!    registers (by two threads where 2 dk fits the workgroup), a workgroup-memory copy of the
//!    live state for the products q̃ h, W̃ h, which run only where the state can be non-zero and
//!    the result is used, split over rows, columns and the dk range so that all threads work;
//!    the workgroups of one head (all levels) are dispatched together so that they share the
//!    chunk blocks in the cache. (An 8-column variant with both states in workgroup memory was
//!    24-31 % slower on the H200.)
//! 4. `chunk_combine`: o += the levels each chunk reads, in level order (no atomics), for the
//!    heads whose reader rows step 3 wrote (see Scratch for head groups).
//! 5. `chunk_state`: the decoder's state after token T−1: levels before the last chunk from the
//!    scan; tokens of the last chunk in closed form (Mamba-2) or stepped like the decoder (GDN,
//!    16 columns per workgroup, each column's dk rows split over 16 threads). Only where the
//!    caller asks for the state ([`ScanIo::state`]): training does not.
//!
//! Steps 3 and 4 are the [`ScanStrategy::LevelWalk`] (`LOGLINEAR_SCAN=walk`). The default
//! [`ScanStrategy::Precomputed`] (Mamba-2 only so far) replaces them by: `chunk_pre_contrib_m2` (every source chunk's
//! K̃ᵀV once, fully parallel, into `xs[NT−1][H][dk][dv]`), `chunk_pre_sweep` (one elementwise
//! dispatch per chunk level m ≥ 1: the in-place up-sweep, so that slot s holds the sum of the
//! 2^m chunks ending at s, m = trailing one bits of s), `chunk_pre_prefix` (the saturated level's
//! running prefix over blocks of 2^m_top chunks, in place) and `chunk_pre_read_m2` (one
//! workgroup per (64 dv columns, reader chunk, head): every level it reads as one 64 × dk by
//! dk × 64 tile product with the decay between folded into q̃, added straight to `o`; the last
//! chunk writes the hand-off states). Chunk c reads level m from slot ((c >> m) << m) − 1 decayed
//! by the Γ of the chunks between, so every exponent is still of a sum of Γ ≤ 0.
//!
//! Limits: dk ≤ 256 (a scan thread owns a state row; the GDN final-state pass keeps a dk × 16
//! block in workgroup memory); any dv; any T ≥ 1 up to 64·65535 tokens; lambda_cols ≥ levels ≤ 32;
//! 32 KiB of workgroup memory and 11 storage buffers per stage (checked in [`ScanKernels::new`]).
//! Scratch: γ (T·H), the packed reader rows of the levels (about scans·T/2·dv floats per head;
//! the precomputed strategy has `xs`, (NT−1)·H·dk·dv floats, instead, and falls back to the walk
//! when that does not fit the binding limit), for GDN q̃, K̃, W̃ (T·H·dk each) and U (T·H·dv).
//! Where the reader rows of all heads exceed the binding limit, steps 3 and 4 run in head groups
//! that each fit, one after another over one group-sized buffer; every other buffer must fit the
//! adapter's binding limit ([`GpuError::TooLarge`] otherwise).
//!
//! Timings per dispatch (`chunk_scan_bench --breakdown`), on an H200 and on lavapipe, are in
//! BENCHMARKS.md ("GPU prefill").

use crate::gpu::MAX_GROUPS;
use crate::gpu::{record_dispatch, Gpu, GpuError, Kernel};
pub use loglinear_runtime::chunk::{Form, ScanShape, CHUNK};

mod cost;
pub use cost::DispatchCost;
mod host;
mod kernels;
pub use kernels::ScanKernels;
pub(crate) use kernels::{chunk_source, tile_reads, GAMMA, GAMMAS, ROWS16};

pub use host::{run_scan, run_scan_with_strategy, ScanBuffers, ScanInputs};

/// Largest key dimension the kernels support.
pub const MAX_DK: usize = 256;
/// Columns of v per scan workgroup (must match `BV` in chunk_scan_body.wgsl).
const SCAN_BV: usize = 8;
/// Columns of v per GDN scan workgroup (`BV` of chunk_scan_gdn.wgsl).
const GDN_SCAN_BV: usize = 16;
/// Columns of the decoder state per `chunk_state` workgroup: Mamba-2 (chunk_state_m2.wgsl) and
/// GDN (`SB` in chunk_state_gdn.wgsl).
const STATE_BV_M2: usize = 64;
const STATE_BV_GDN: usize = 16;

/// What the kernels add to a [`ScanShape`]: their size limits and scratch layout.
pub trait ScanLimits {
    /// Checks the sizes against what the kernels support.
    fn validate(&self) -> Result<(), GpuError>;
    fn level_output_slots(&self) -> usize;
}

impl ScanLimits for ScanShape {
    fn level_output_slots(&self) -> usize {
        let (scans, nt, m_top) = (self.scans(), self.chunks(), self.m_top());
        if scans == 0 {
            0
        } else if scans == m_top + 1 {
            m_top * nt.div_ceil(2) + (nt - (1 << m_top))
        } else {
            scans * nt.div_ceil(2)
        }
    }

    fn validate(&self) -> Result<(), GpuError> {
        let bad = |m: String| Err(GpuError::Invalid(format!("chunk scan: {m}")));
        if self.t == 0 || self.heads == 0 || self.dk == 0 || self.dv == 0 {
            return bad(format!("T, heads, dk and dv must be ≥ 1 (got {self:?})"));
        }
        if self.qk_heads != 1 && self.qk_heads != self.heads {
            return bad(format!(
                "qk_heads must be 1 or heads = {} (got {})",
                self.heads, self.qk_heads
            ));
        }
        if self.dk > MAX_DK {
            return bad(format!(
                "dk = {} is over the kernels' limit of {MAX_DK}",
                self.dk
            ));
        }
        if self.levels == 0 || self.levels > 32 {
            return bad(format!("levels must be in 1..=32 (got {})", self.levels));
        }
        if self.lambda_cols < self.levels {
            return bad(format!(
                "lambda_cols = {} is fewer than levels = {} (level ℓ reads λ column ℓ)",
                self.lambda_cols, self.levels
            ));
        }
        if self.chunks() > MAX_GROUPS || self.heads > MAX_GROUPS {
            return bad(format!(
                "T = {} ({} chunks) or heads = {} over the dispatch limit of {MAX_GROUPS}",
                self.t,
                self.chunks(),
                self.heads
            ));
        }
        // Every index the shaders form must fit in u32.
        let biggest = ((self.level_output_slots() * CHUNK).max(self.t)
            * self.heads
            * self.dv.max(self.dk)) as u64;
        if biggest >= u64::from(u32::MAX) {
            return bad(format!(
                "{self:?} needs more than 2^32 elements in one buffer"
            ));
        }
        Ok(())
    }
}

/// `Params` of chunk_common.wgsl: the uniform block of every chunk kernel, forward and
/// backward (grad/).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct ChunkParams {
    pub(crate) t: u32,
    pub(crate) heads: u32,
    pub(crate) qk_heads: u32,
    pub(crate) dk: u32,
    pub(crate) dv: u32,
    pub(crate) lam_cols: u32,
    pub(crate) top: u32,
    pub(crate) nt: u32,
    pub(crate) m_top: u32,
    pub(crate) n_scans: u32,
    pub(crate) levels: u32,
    pub(crate) half_nt: u32,
    /// Chunk level of one up-sweep dispatch (precomputed strategy); 0 elsewhere.
    pub(crate) level: u32,
    /// First operator head of a GDN backward dispatch's head group; 0 elsewhere.
    pub(crate) head0: u32,
    /// Heads of that group; 0 elsewhere.
    pub(crate) group_heads: u32,
}

impl ChunkParams {
    /// The uniform for shape `s` (validated) with `n_scans` chunk-level scans; the per-dispatch
    /// fields (`level`, `head0`, `group_heads`) 0.
    pub(crate) fn new(s: &ScanShape, n_scans: usize) -> Self {
        let nt = s.chunks();
        Self {
            t: s.t as u32,
            heads: s.heads as u32,
            qk_heads: s.qk_heads as u32,
            dk: s.dk as u32,
            dv: s.dv as u32,
            lam_cols: s.lambda_cols as u32,
            top: s.top() as u32,
            nt: nt as u32,
            m_top: s.m_top() as u32,
            n_scans: n_scans as u32,
            levels: s.levels as u32,
            half_nt: nt.div_ceil(2) as u32,
            level: 0,
            head0: 0,
            group_heads: 0,
        }
    }
}

/// Environment variable that picks the inter-chunk strategy: `walk` or `precomputed`.
pub const SCAN_STRATEGY_ENV: &str = "LOGLINEAR_SCAN";

/// How the inter-chunk levels (step 3 of the module docs) are computed. Both give the same
/// results within fp32 rounding. `Precomputed` is the default: on the H200 it runs the
/// Mamba-2 operator 2-4x faster than the walk (BENCHMARKS.md, "GPU prefill").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ScanStrategy {
    /// One workgroup per (8 dv columns, head, chunk level) walks the chunks in order,
    /// recomputing every source chunk's K̃ᵀU per level (`chunk_scan_*` + `chunk_combine`).
    LevelWalk,
    /// Mamba-2: every chunk's K̃ᵀV computed once into a scratch buffer `[NT−1][H][dk][dv]`, the
    /// level states by an in-place up-sweep over it (elementwise, log NT dispatches), then all
    /// reader chunks and levels in one tiled kernel. Needs that buffer to fit the adapter's
    /// binding limit; otherwise, and for Gated DeltaNet (not implemented yet), the level walk
    /// runs ([`ChunkScan::strategy`] says which ran).
    #[default]
    Precomputed,
}

impl ScanStrategy {
    /// Parses `walk` / `levelwalk` or `precomputed` / `pre` (case-insensitive).
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "walk" | "levelwalk" | "level-walk" => Some(Self::LevelWalk),
            "precomputed" | "pre" => Some(Self::Precomputed),
            _ => None,
        }
    }

    /// The strategy [`ChunkScan::new`] uses: `LOGLINEAR_SCAN` when set to a known name, else the
    /// default ([`ScanStrategy::Precomputed`]).
    pub fn from_env() -> Self {
        std::env::var(SCAN_STRATEGY_ENV)
            .ok()
            .and_then(|v| Self::parse(&v))
            .unwrap_or_default()
    }

    /// Short name for reports (`walk`, `precomputed`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::LevelWalk => "walk",
            Self::Precomputed => "precomputed",
        }
    }
}

/// Buffers the scan reads and writes. All f32, row-major, token-major:
/// q, k: `[T][qk_heads][dk]`; v: `[T][heads][dv]`; g: `[T][heads]` (log decay ≤ 0);
/// beta: `[T][heads]` (GDN; ignored for Mamba-2, any non-empty buffer);
/// lam: `[T][heads][lambda_cols]` (the λ actually used); o (written): `[T][heads][dv]`;
/// state (written): `[levels][heads][dk][dv]`, the decoder's Fenwick state after token T−1, or
/// `None` where nothing continues from it (training): then `chunk_state` is not dispatched.
pub struct ScanIo<'a> {
    pub q: &'a wgpu::Buffer,
    pub k: &'a wgpu::Buffer,
    pub v: &'a wgpu::Buffer,
    pub g: &'a wgpu::Buffer,
    pub beta: &'a wgpu::Buffer,
    pub lam: &'a wgpu::Buffer,
    pub o: &'a wgpu::Buffer,
    pub state: Option<&'a wgpu::Buffer>,
}

/// One recorded dispatch, in a compute pass of its own (the chunk scan's and the operator
/// backwards' steps).
pub(crate) struct Step {
    pub(crate) label: &'static str,
    pipeline: wgpu::ComputePipeline,
    bind: wgpu::BindGroup,
    groups: [u32; 3],
}

impl Step {
    /// `k` bound to `bufs` (bindings 0..), dispatched as `groups` workgroups.
    pub(crate) fn new(
        gpu: &Gpu,
        k: &Kernel,
        label: &'static str,
        bufs: &[&wgpu::Buffer],
        groups: [usize; 3],
    ) -> Self {
        Self {
            label,
            pipeline: k.pipeline.clone(),
            bind: gpu.bind(k, bufs),
            groups: groups.map(|x| x as u32),
        }
    }

    /// Records `steps` in order, each as a compute pass of its own, without timestamps.
    pub(crate) fn record_all(steps: &[Step], encoder: &mut wgpu::CommandEncoder) {
        for s in steps {
            s.record(encoder, None);
        }
    }

    /// Runs `steps` once, each submitted alone and waited for; returns the wall time of each
    /// label in ms (summed where a label repeats, as over head groups), in first-dispatch order.
    /// For profiling: the submit-and-wait overhead is part of every figure.
    pub(crate) fn profile_all(
        steps: &[Step],
        gpu: &Gpu,
    ) -> Result<Vec<(&'static str, f64)>, GpuError> {
        let mut times: Vec<(&'static str, f64)> = Vec::new();
        for s in steps {
            let mut encoder = gpu.encoder(s.label);
            s.record(&mut encoder, None);
            let start = std::time::Instant::now();
            gpu.submit_and_wait(encoder)?;
            let ms = start.elapsed().as_secs_f64() * 1e3;
            match times.iter_mut().find(|(label, _)| *label == s.label) {
                Some(entry) => entry.1 += ms,
                None => times.push((s.label, ms)),
            }
        }
        Ok(times)
    }

    /// Records the dispatch as a compute pass of its own; with `timestamps` = (set, i), its
    /// beginning and end are written to queries 2i and 2i + 1 of the set.
    pub(crate) fn record(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        timestamps: Option<(&wgpu::QuerySet, u32)>,
    ) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(self.label),
            timestamp_writes: timestamps.map(|(q, i)| wgpu::ComputePassTimestampWrites {
                query_set: q,
                beginning_of_pass_write_index: Some(2 * i),
                end_of_pass_write_index: Some(2 * i + 1),
            }),
        });
        record_dispatch(&mut pass, &self.pipeline, &self.bind, self.groups);
    }
}

/// Fails when `buf` is smaller than `floats` f32 (`op` names the operation in the message).
pub(crate) fn check_buffer(
    op: &str,
    name: &str,
    buf: &wgpu::Buffer,
    floats: usize,
) -> Result<(), GpuError> {
    let need = (floats * 4) as u64;
    if buf.size() < need {
        return Err(GpuError::Invalid(format!(
            "{op}: buffer `{name}` has {} bytes, the shape needs {need}",
            buf.size()
        )));
    }
    Ok(())
}

/// One dispatch of a chunk scan and what it costs (for benchmark reports).
struct Dispatch {
    step: Step,
    cost: DispatchCost,
}

/// Bind groups and scratch made once for one shape and one set of buffers; encode as often as
/// wanted.
pub struct ChunkScan {
    shape: ScanShape,
    strategy: ScanStrategy,
    dispatches: Vec<Dispatch>,
    // Scratch, owned here and kept alive for the bind groups.
    _scratch: Vec<wgpu::Buffer>,
}

/// Output tile edge of the precomputed kernels' tile products (`TILE` in chunk_pre_*.wgsl).
const PRE_TILE: usize = 64;
/// Elements of dk × dv per workgroup of the elementwise precomputed kernels (4 × 256 threads).
const PRE_ELEMS: usize = 1024;

/// Whether the precomputed strategy's scratch `[NT−1][H][dk][dv]` and its dispatches fit the
/// adapter (and u32 indices).
fn precomputed_fits(gpu: &Gpu, s: &ScanShape) -> bool {
    let elems = (s.chunks() - 1) as u64 * (s.heads * s.dk * s.dv) as u64;
    let bytes = elems * 4;
    let groups = [
        s.dk.div_ceil(PRE_TILE) * s.dv.div_ceil(PRE_TILE),
        (s.dk * s.dv).div_ceil(PRE_ELEMS),
    ];
    elems < u64::from(u32::MAX)
        && bytes <= gpu.limits.max_storage_buffer_binding_size
        && bytes <= gpu.limits.max_buffer_size
        && groups.iter().all(|&g| g <= MAX_GROUPS)
}

/// Slots of the level walk's reader rows (`olvl_slot` in chunk_common.wgsl): ⌈NT / 2⌉ per
/// regular level, and after them NT − 2^m_top for the saturated level where it is scanned.
fn walk_slots(s: &ScanShape) -> usize {
    let (scans, nt) = (s.scans(), s.chunks());
    let half = nt.div_ceil(2);
    if scans > 0 && scans == s.m_top() + 1 {
        s.m_top() * half + nt - (1 << s.m_top())
    } else {
        scans * half
    }
}

/// Floats of the level walk's reader rows per head: C rows × dv per slot.
fn walk_row_values(s: &ScanShape) -> u64 {
    (walk_slots(s) * CHUNK * s.dv) as u64
}

/// The heads of a scan in groups of at most `size` (the last may be smaller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HeadGroups {
    heads: usize,
    size: usize,
}

impl HeadGroups {
    fn one(heads: usize) -> Self {
        Self { heads, size: heads }
    }

    /// As many heads per group as the walk's reader rows of a group fit the adapter's buffer
    /// limits (and u32 indices) with.
    fn for_walk(gpu: &Gpu, s: &ScanShape) -> Result<Self, GpuError> {
        let per_head = walk_row_values(s) * 4;
        let limit = gpu.scratch_limit();
        let fit = (limit / per_head.max(1)) as usize;
        if fit == 0 {
            return Err(GpuError::TooLarge {
                label: "chunk level outputs (one head)".into(),
                bytes: per_head,
                limit,
            });
        }
        Ok(Self {
            heads: s.heads,
            size: s.heads.min(fit),
        })
    }

    /// (first head, heads) of each group; none when the walk has no levels (`scans` = 0).
    fn iter(self, scans: usize) -> impl Iterator<Item = (usize, usize)> {
        let heads = if scans == 0 { 0 } else { self.heads };
        (0..heads)
            .step_by(self.size.max(1))
            .map(move |h0| (h0, self.size.min(heads - h0)))
    }
}

impl ChunkScan {
    /// Checks shapes and buffer sizes, allocates scratch and makes the bind groups, with the
    /// strategy [`ScanStrategy::from_env`] picks.
    pub fn new(
        gpu: &Gpu,
        kernels: &ScanKernels,
        shape: ScanShape,
        io: ScanIo<'_>,
    ) -> Result<Self, GpuError> {
        Self::with_strategy(gpu, kernels, shape, io, ScanStrategy::from_env())
    }

    /// Like [`ChunkScan::new`] with an explicit strategy (falls back to the level walk where
    /// the precomputed one is not available; see [`ScanStrategy::Precomputed`]).
    pub fn with_strategy(
        gpu: &Gpu,
        kernels: &ScanKernels,
        shape: ScanShape,
        io: ScanIo<'_>,
        strategy: ScanStrategy,
    ) -> Result<Self, GpuError> {
        shape.validate()?;
        if kernels.form != shape.form {
            return Err(GpuError::Invalid(format!(
                "chunk scan: kernels are for {:?}, shape is {:?}",
                kernels.form, shape.form
            )));
        }
        let s = shape;
        let gdn = s.form == Form::Gdn;
        check_buffer("chunk scan", "q", io.q, s.t * s.qk_heads * s.dk)?;
        check_buffer("chunk scan", "k", io.k, s.t * s.qk_heads * s.dk)?;
        check_buffer("chunk scan", "v", io.v, s.t * s.heads * s.dv)?;
        check_buffer("chunk scan", "g", io.g, s.t * s.heads)?;
        check_buffer(
            "chunk scan",
            "beta",
            io.beta,
            if gdn { s.t * s.heads } else { 1 },
        )?;
        check_buffer("chunk scan", "lam", io.lam, s.t * s.heads * s.lambda_cols)?;
        check_buffer("chunk scan", "o", io.o, s.t * s.heads * s.dv)?;
        if let Some(state) = io.state {
            check_buffer(
                "chunk scan",
                "state",
                state,
                s.levels * s.heads * s.dk * s.dv,
            )?;
        }

        let nt = s.chunks();
        let scans = s.scans();
        let params = ChunkParams::new(&s, scans);
        let f = 4u64;
        let th = (s.t * s.heads) as u64;
        let uniform = gpu.uniform_from("chunk params", &params);
        let gam = gpu.storage_zeroed("chunk gamma", th * f)?;
        let pre = match (strategy, &kernels.pre) {
            (ScanStrategy::Precomputed, Some(pk)) if precomputed_fits(gpu, &s) => Some(pk),
            _ => None,
        };
        let used = if pre.is_some() {
            ScanStrategy::Precomputed
        } else {
            ScanStrategy::LevelWalk
        };
        // The walk's packed reader rows (the precomputed readers add to `o` directly), for one
        // head group at a time.
        let walk_groups = if pre.is_some() || scans == 0 {
            HeadGroups::one(s.heads)
        } else {
            HeadGroups::for_walk(gpu, &s)?
        };
        let olvl_bytes = if pre.is_some() {
            4
        } else {
            walk_groups.size as u64 * walk_row_values(&s) * f
        };
        let olvl = gpu.storage_zeroed("chunk level outputs", olvl_bytes)?;
        let hstate = gpu.storage_zeroed(
            "chunk level states",
            (scans * s.heads * s.dk * s.dv) as u64 * f,
        )?;

        let dispatch = |k: &Kernel,
                        label: &'static str,
                        bufs: &[&wgpu::Buffer],
                        groups: [usize; 3],
                        cost: DispatchCost| Dispatch {
            step: Step::new(gpu, k, label, bufs, groups),
            cost,
        };
        // The walk's uniform for heads head0.. of one group, and the combine of that group.
        let group_uniform = |head0: usize, heads: usize| {
            gpu.uniform_from(
                "chunk walk group params",
                &ChunkParams {
                    head0: head0 as u32,
                    group_heads: heads as u32,
                    ..params
                },
            )
        };
        let combine = |group: &wgpu::Buffer, heads: usize| {
            dispatch(
                &kernels.combine,
                "chunk_combine",
                &[group, &olvl, io.o],
                [(heads * s.dv).div_ceil(256), nt, 1],
                cost::combine(&s).share(heads, s.heads),
            )
        };
        let mut dispatches = Vec::new();
        let mut scratch = Vec::new();
        dispatches.push(dispatch(
            &kernels.gamma,
            "chunk_gamma",
            &[&uniform, io.g, &gam],
            [nt, s.heads, 1],
            cost::gamma(&s),
        ));
        if gdn {
            // Blocked per (chunk, head), rows past T stay 0: q̃, W̃ transposed ([NT][H][dk][C]),
            // K̃ ([NT][H][C][dk]), U ([NT][H][C][dv]).
            let rows = (nt * CHUNK * s.heads) as u64;
            let qt = gpu.storage_zeroed("chunk q~ (transposed)", rows * s.dk as u64 * f)?;
            let kt = gpu.storage_zeroed("chunk k~", rows * s.dk as u64 * f)?;
            let wt = gpu.storage_zeroed("chunk w~ (transposed)", rows * s.dk as u64 * f)?;
            let u = gpu.storage_zeroed("chunk u", rows * s.dv as u64 * f)?;
            dispatches.push(dispatch(
                &kernels.intra,
                "chunk_intra_gdn",
                &[
                    &uniform, io.q, io.k, io.v, &gam, io.beta, io.lam, io.o, &qt, &kt, &wt, &u,
                ],
                [nt, s.heads, 1],
                cost::intra(&s),
            ));
            for (head0, heads) in walk_groups.iter(scans) {
                let group = group_uniform(head0, heads);
                dispatches.push(dispatch(
                    &kernels.scan,
                    "chunk_scan_gdn",
                    &[&group, &qt, &kt, &wt, &u, &gam, io.lam, &olvl, &hstate],
                    [s.dv.div_ceil(GDN_SCAN_BV), scans, heads],
                    cost::scan_walk(&s).share(heads, s.heads),
                ));
                dispatches.push(combine(&group, heads));
                scratch.push(group);
            }
            scratch.extend([qt, kt, wt, u]);
        } else {
            dispatches.push(dispatch(
                &kernels.intra,
                kernels.intra_label,
                &[&uniform, io.q, io.k, io.v, &gam, io.lam, io.o],
                [nt, s.heads, 1],
                cost::intra(&s),
            ));
            if let (true, Some(pk)) = (scans > 0, pre) {
                // Precomputed: contributions, up-sweep per level, saturated prefix, readers.
                let per = s.dk * s.dv;
                let xs = gpu
                    .storage_zeroed("chunk contributions", ((nt - 1) * s.heads * per) as u64 * f)?;
                dispatches.push(dispatch(
                    &pk.contrib,
                    "chunk_pre_contrib_m2",
                    &[&uniform, io.k, io.v, &gam, &xs],
                    [
                        s.dk.div_ceil(PRE_TILE) * s.dv.div_ceil(PRE_TILE),
                        nt - 1,
                        s.heads,
                    ],
                    cost::pre_contrib(&s),
                ));
                let elem_groups = per.div_ceil(PRE_ELEMS);
                for m in 1..scans {
                    // 2^m ≤ NT − 1 for every m < scans: at least one block.
                    let level = gpu.uniform_from(
                        "chunk sweep params",
                        &ChunkParams {
                            level: m as u32,
                            ..params
                        },
                    );
                    dispatches.push(dispatch(
                        &pk.sweep,
                        "chunk_pre_sweep",
                        &[&level, &gam, &xs],
                        [elem_groups, (nt - 1) >> m, s.heads],
                        cost::pre_sweep(&s, m),
                    ));
                    scratch.push(level);
                }
                if scans == s.m_top() + 1 {
                    dispatches.push(dispatch(
                        &pk.prefix,
                        "chunk_pre_prefix",
                        &[&uniform, &gam, &xs],
                        [elem_groups, s.heads, 1],
                        cost::pre_prefix(&s),
                    ));
                }
                dispatches.push(dispatch(
                    &pk.read,
                    "chunk_pre_read_m2",
                    &[&uniform, io.q, &gam, io.lam, &xs, io.o, &hstate],
                    [s.dv.div_ceil(PRE_TILE), nt - 1, s.heads],
                    cost::pre_read(&s),
                ));
                scratch.push(xs);
            } else {
                for (head0, heads) in walk_groups.iter(scans) {
                    let group = group_uniform(head0, heads);
                    dispatches.push(dispatch(
                        &kernels.scan,
                        "chunk_scan_m2",
                        &[&group, io.q, io.k, io.v, &gam, io.lam, &olvl, &hstate],
                        [s.dv.div_ceil(SCAN_BV), heads, scans],
                        cost::scan_walk(&s).share(heads, s.heads),
                    ));
                    dispatches.push(combine(&group, heads));
                    scratch.push(group);
                }
            }
        }
        if let Some(state) = io.state {
            let (state_bv, state_bind): (usize, &[&wgpu::Buffer]) = match s.form {
                Form::Mamba2 => (STATE_BV_M2, &[&uniform, io.k, io.v, &hstate, state, &gam]),
                Form::Gdn => (
                    STATE_BV_GDN,
                    &[&uniform, io.k, io.v, io.g, io.beta, &hstate, state],
                ),
            };
            dispatches.push(dispatch(
                &kernels.state,
                "chunk_state",
                state_bind,
                [s.dv.div_ceil(state_bv), s.heads, s.levels],
                cost::state(&s),
            ));
        }
        scratch.extend([uniform, gam, olvl, hstate]);
        Ok(Self {
            shape,
            strategy: used,
            dispatches,
            _scratch: scratch,
        })
    }

    /// The shape this scan was made for.
    pub fn shape(&self) -> ScanShape {
        self.shape
    }

    /// The strategy that runs (the requested one, or the level walk where it fell back).
    pub fn strategy(&self) -> ScanStrategy {
        self.strategy
    }

    /// Records all dispatches (one compute pass each; wgpu orders them by their buffer use).
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        self.encode_passes(encoder, None);
    }

    /// Labels of the dispatches `encode` records, in order.
    pub fn step_labels(&self) -> Vec<&'static str> {
        self.dispatches.iter().map(|d| d.step.label).collect()
    }

    /// Like `encode`, with the beginning and end of dispatch i written to timestamps 2i and
    /// 2i + 1 of `query_set` (needs TIMESTAMP_QUERY and 2 × `step_labels().len()` queries).
    pub fn encode_timed(&self, encoder: &mut wgpu::CommandEncoder, query_set: &wgpu::QuerySet) {
        self.encode_passes(encoder, Some(query_set));
    }

    fn encode_passes(&self, encoder: &mut wgpu::CommandEncoder, ts: Option<&wgpu::QuerySet>) {
        for (i, d) in self.dispatches.iter().enumerate() {
            d.step.record(encoder, ts.map(|q| (q, i as u32)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `olvl_slot` of chunk_common.wgsl, as the walk kernels index their reader rows.
    fn olvl_slot(s: &ScanShape, m: usize, c: usize) -> Option<usize> {
        let base = m * s.chunks().div_ceil(2);
        let p = 1 << m;
        if m == s.m_top() {
            return (c >= p).then(|| base + c - p);
        }
        (c & p != 0).then(|| base + ((c >> (m + 1)) << m) + (c & (p - 1)))
    }

    #[test]
    fn walk_slots_hold_every_slot_the_kernels_index() {
        for levels in [1, 8, 9, 10, 12, 15, 20] {
            for t in (1..=3000)
                .step_by(37)
                .chain([64, 65, 128, 129, 4096, 65_536])
            {
                let s = ScanShape {
                    form: Form::Gdn,
                    t,
                    heads: 1,
                    qk_heads: 1,
                    dk: 16,
                    dv: 16,
                    lambda_cols: levels,
                    levels,
                };
                let used = (0..s.scans())
                    .flat_map(|m| (0..s.chunks()).filter_map(move |c| olvl_slot(&s, m, c)))
                    .max()
                    .map_or(0, |top| top + 1);
                // Room for every slot, and at most a level's worth more (the last regular
                // level's region is sized for ⌈NT / 2⌉ readers).
                let slots = walk_slots(&s);
                let what = format!("T = {t}, {levels} levels: {slots} slots, {used} used");
                assert!(slots >= used, "{what}");
                assert!(slots <= used + s.chunks().div_ceil(2), "{what}");
            }
        }
    }

    #[test]
    fn head_groups_cover_every_head_once() {
        let groups = |heads, size| HeadGroups { heads, size }.iter(3).collect::<Vec<_>>();
        assert_eq!(groups(16, 7), [(0, 7), (7, 7), (14, 2)]);
        assert_eq!(groups(16, 16), [(0, 16)]);
        assert_eq!(groups(1, 1), [(0, 1)]);
        assert_eq!(HeadGroups::one(4).iter(0).count(), 0);
    }
}
