//! The chunkwise forward of Log-Linear Attention (spec §7.2) on the CPU, for both forms
//! (Mamba-2 and Gated DeltaNet), ending in the Fenwick state that the runtime decoder
//! (`FenwickState` under a saturating `LevelPolicy`) holds after the last token.
//!
//! Two parallel phases, each a list of independent jobs of fixed size (so results do not
//! depend on the thread count, see [`crate::par`]):
//!
//! 1. **Intra-chunk**, one job per (head, chunk of C = 64 tokens): the dense C×C score tile with
//!    λ column min(bitlen(i ⊕ j), top), o = A V (GDN: A_w = (I + StrictLower(diag(β) K Kᵀ))⁻¹
//!    by forward substitution, the WY/UT form of spec §7.2), and the chunk's quantities for the
//!    state scan ([`ChunkData`]): readout queries, K̃, U, and for GDN the chunk's transition.
//! 2. **Inter-chunk**, one job per (head, block of [`BV`] value columns): the single-pass Fenwick
//!    cascade over chunks (§7.2, "Equivalent single-pass Fenwick cascade"): states h_m, one per
//!    chunk level m; chunk c reads every h_m with bit m of c set, then every h_m takes chunk c's
//!    transition, h_0 takes chunk c's contribution and the trailing one bits of c carry upwards.
//!    Columns of the state never mix (both transitions act on columns independently), which is
//!    what makes column blocks independent jobs. The top chunk level m_top = top − 7 saturates
//!    like the runtime's top level: it never carries out, so it holds every chunk before
//!    ⌊c / 2^m_top⌋·2^m_top. After the cascade the same job forms the decoder's hand-off state.
//!
//! Every exponent is ≤ 0: decays are built from local (in-chunk) cumulative sums γ and chunk
//! totals Γ only (spec §7.5).

use crate::linalg::{mat, mat_mut, matmul, matmul_add, matmul_sub};
use crate::par;
use loglinear_runtime::bitlen;
use loglinear_runtime::chunk::C0P1;
pub use loglinear_runtime::chunk::{Form, ScanShape, CHUNK};
use loglinear_runtime::math::exp;
use ndarray::{ArrayView2, Axis, Slice};

/// Value columns per inter-chunk job.
pub const BV: usize = 64;

/// The scan's inputs, token-major f32.
pub struct ScanInputs<'a> {
    /// Queries `[T][qk_heads][dk]` (GDN: l2-normalised and scaled by dk^-1/2).
    pub q: &'a [f32],
    /// Keys `[T][qk_heads][dk]` (GDN: l2-normalised).
    pub k: &'a [f32],
    /// Values `[T][heads][dv]`.
    pub v: &'a [f32],
    /// Log decay `[T][heads]`, ≤ 0.
    pub g: &'a [f32],
    /// GDN β `[T][heads]`; unused (may be empty) for Mamba-2.
    pub beta: &'a [f32],
    /// λ `[T][heads][lambda_cols]` (the values the readout multiplies with).
    pub lam: &'a [f32],
}

/// Decay factors below this are taken as zero: 2^-100 ≈ 7.9e-31.
///
/// Why: every decay factor multiplies a term of a sum whose newest term has factor 1 (the
/// diagonal of an intra-chunk tile, the last token of a chunk's contribution), so a term
/// decayed below 2^-100 is 2^76 times below fp32 resolution of that sum. Keeping such tiny
/// factors would only make products land in the subnormal range, where x86 cores take a
/// microcode assist per operation: that made the scans of strongly decaying heads several times
/// slower (measured on ll-gdn-mcu).
const NEGLIGIBLE: f32 = 7.888_609e-31;

/// e^x, or 0 when that is below [`NEGLIGIBLE`] (x ≤ 0 everywhere it is used).
fn decay(x: f32) -> f32 {
    let f = exp(x);
    if f < NEGLIGIBLE {
        0.0
    } else {
        f
    }
}

/// x ← f · x elementwise, where results below the smallest normal f32 (≈ 1.2e-38) become zero
/// without ever being formed, so that no subnormal value is produced (see [`NEGLIGIBLE`]). The
/// decoder keeps such values; the difference is below 1.2e-38 absolute per element.
fn scale_flushed(x: &mut [f32], f: f32) {
    // |v| < MIN_POSITIVE / f  ⇔  |f v| < MIN_POSITIVE (f = 0 gives an infinite threshold).
    let thr = f32::MIN_POSITIVE / f;
    for v in x {
        *v = if v.abs() < thr { 0.0 } else { f * *v };
    }
}

/// y += f · r elementwise, skipping terms that would fall below the smallest normal f32.
fn add_scaled_flushed(y: &mut [f32], r: &[f32], f: f32) {
    if f == 0.0 {
        return;
    }
    let thr = f32::MIN_POSITIVE / f;
    for (y, &r) in y.iter_mut().zip(r) {
        if r.abs() >= thr {
            *y += f * r;
        }
    }
}

/// What the intra-chunk job of one (head, chunk) leaves for the inter-chunk jobs. The
/// per-token decays are kept apart from the matrices the state products use, so that those
/// matrices hold O(1) values (see [`NEGLIGIBLE`]).
struct ChunkData<'a> {
    /// Tokens in the chunk.
    n: usize,
    /// Local inclusive cumsums of the log decay, `[n]`.
    gam: &'a [f32],
    /// Intra-chunk output `[n][dv]`.
    o: &'a [f32],
    /// Readout queries `[n][dk]`: a state h at the chunk start adds e^{γ_i} λ_i qr_iᵀ h to
    /// o_i. Mamba-2: q; GDN: q_i − Σ_j M_ij β_j k_j (so that q̃ = e^{γ_i} qr_i of spec §7.2).
    qr: &'a [f32],
    /// GDN, the chunk's transition h ↦ e^Γ (I − Kᵀ W) h (= e^Γ h − K̃ᵀ (W̃ h) of spec §7.2)
    /// with W = A_w diag(β) K, in one of two forms, whichever costs fewer flops per state:
    /// for dk ≤ C the dk × dk matrix `a` = I − Kᵀ W (one product per state), otherwise the keys
    /// `k` and `w` (`[n][dk]` each; two products per state). All empty for Mamba-2.
    a: &'a [f32],
    k: &'a [f32],
    w: &'a [f32],
    /// K̃ `[n][dk]`: keys decayed to the chunk end, K̃_j = e^{Γ − γ_j} k_j.
    kt: &'a [f32],
    /// The chunk's contribution is K̃ᵀ U: `[n][dv]` (Mamba-2: V).
    u: &'a [f32],
}

/// Floats of scratch one chunk's [`ChunkData`] takes (rows padded to C).
fn chunk_floats(s: &ScanShape) -> usize {
    let (dk, dv) = (s.dk, s.dv);
    CHUNK * (1 + 2 * dv + 2 * dk) + transition_floats(s, CHUNK)
}

/// Floats of a chunk's GDN transition (see [`ChunkData::a`]) for `n` rows.
fn transition_floats(s: &ScanShape, n: usize) -> usize {
    match s.form {
        Form::Mamba2 => 0,
        Form::Gdn if s.dk <= CHUNK => s.dk * s.dk,
        Form::Gdn => 2 * n * s.dk,
    }
}

/// Cuts `len` floats off the front of `rest`.
fn take<'a>(rest: &mut &'a mut [f32], len: usize) -> &'a mut [f32] {
    let (head, tail) = std::mem::take(rest).split_at_mut(len);
    *rest = tail;
    head
}

/// Level of key j for query i inside one chunk (spec §2.1).
fn level(i: usize, j: usize) -> usize {
    if i == j {
        0
    } else {
        bitlen((i ^ j) as u64) as usize
    }
}

/// Columns `v0..v0 + bw` of a matrix view.
fn columns(m: ArrayView2<'_, f32>, v0: usize, bw: usize) -> ArrayView2<'_, f32> {
    m.slice_axis_move(Axis(1), Slice::from(v0..v0 + bw))
}

/// Value columns `v0..v0 + width` of head `head`: one inter-chunk job's share of the state.
#[derive(Clone, Copy)]
struct ColumnBlock {
    head: usize,
    v0: usize,
    width: usize,
}

impl ColumnBlock {
    /// Inter-chunk job `j`, for `blocks` column blocks per head of `dv` value columns.
    fn of_job(j: usize, blocks: usize, dv: usize) -> Self {
        let (head, v0) = (j / blocks, (j % blocks) * BV);
        ColumnBlock {
            head,
            v0,
            width: BV.min(dv - v0),
        }
    }
}

/// `count` parts of `len` floats of `buf` (grown if needed), numbered: one for each job.
fn job_parts(buf: &mut Vec<f32>, count: usize, len: usize) -> Vec<(usize, &mut [f32])> {
    if buf.len() < count * len {
        buf.resize(count * len, 0.0);
    }
    buf.chunks_mut(len).take(count).enumerate().collect()
}

/// Buffers a scan reuses between calls, so that a prefill does not fault in fresh pages for
/// every layer.
#[derive(Default)]
pub struct ScanScratch {
    /// The level readouts of the inter-chunk jobs.
    levels: Vec<f32>,
    /// The intra-chunk jobs' results.
    chunks: Vec<f32>,
}

/// Runs the scan with `threads` workers: writes o (`[T][heads][dv]`) into `o` and returns the
/// hand-off state `[levels][heads][dk][dv]`.
pub fn chunk_scan(
    threads: usize,
    s: &ScanShape,
    x: &ScanInputs<'_>,
    o: &mut [f32],
    scratch: &mut ScanScratch,
) -> Vec<f32> {
    let nt = s.chunks();
    let (h_count, dk, dv) = (s.heads, s.dk, s.dv);

    // Phase 1: intra-chunk, one job per (head, chunk), each storing its results in its own
    // part of `scratch.chunks`.
    let jobs = job_parts(&mut scratch.chunks, h_count * nt, chunk_floats(s));
    let chunk_data = par::map(threads, jobs, |(j, mem)| {
        intra_chunk(s, x, j / nt, j % nt, mem)
    });
    let head_chunks: Vec<&[ChunkData]> = chunk_data.chunks(nt).collect();

    // Phase 2: inter-chunk cascade and hand-off state, one job per (head, column block); job
    // j writes its level readouts `[T][bw]` into its own part of `scratch.levels`.
    let blocks = dv.div_ceil(BV);
    let part_len = s.t * BV.min(dv);
    let jobs = job_parts(&mut scratch.levels, h_count * blocks, part_len);
    let states = par::map(threads, jobs, |(j, out)| {
        let cols = ColumnBlock::of_job(j, blocks, dv);
        let out = &mut out[..s.t * cols.width];
        inter_chunk(s, x, head_chunks[cols.head], &cols, out)
    });

    // Merge: o = intra + inter, states scattered into `[levels][heads][dk][dv]`.
    let mut state = vec![0.0f32; s.levels * h_count * dk * dv];
    for (j, part_state) in states.iter().enumerate() {
        let ColumnBlock {
            head: h,
            v0,
            width: bw,
        } = ColumnBlock::of_job(j, blocks, dv);
        let part = &scratch.levels[j * part_len..][..s.t * bw];
        for (c, d) in head_chunks[h].iter().enumerate() {
            for i in 0..d.n {
                let t = c * CHUNK + i;
                let dst = &mut o[(t * h_count + h) * dv + v0..][..bw];
                let intra = &d.o[i * dv + v0..][..bw];
                let lv = &part[t * bw..][..bw];
                for ((y, a), l) in dst.iter_mut().zip(intra).zip(lv) {
                    *y = a + l;
                }
            }
        }
        for lvl in 0..s.levels {
            for kk in 0..dk {
                let dst = &mut state[((lvl * h_count + h) * dk + kk) * dv + v0..][..bw];
                dst.copy_from_slice(&part_state[(lvl * dk + kk) * bw..][..bw]);
            }
        }
    }
    state
}

/// Copies rows `t0..t0+n` of head `h` from a token-major `[T][heads][width]` array into `out`.
fn gather(src: &[f32], t0: usize, n: usize, heads: usize, h: usize, width: usize, out: &mut [f32]) {
    for (i, row) in out.chunks_exact_mut(width).take(n).enumerate() {
        row.copy_from_slice(&src[((t0 + i) * heads + h) * width..][..width]);
    }
}

/// Calls `f(i, j, e^{γ_i − γ_j})` for every pair j ≤ i of the chunk (`gam` holds γ) whose
/// decay is not zero: the causal mask, applied before the decay multiplies anything.
fn for_lower_decays(gam: &[f32], mut f: impl FnMut(usize, usize, f32)) {
    for i in 0..gam.len() {
        for j in 0..=i {
            let e = decay(gam[i] - gam[j]);
            if e != 0.0 {
                f(i, j, e);
            }
        }
    }
}

/// o = A V for the chunk's attention tile `att` (n × n) and values `v` (n × dv).
fn attend(att: &[f32], v: &[f32], n: usize, dv: usize, o: &mut [f32]) {
    matmul(&mat(att, n, n), &mat(v, n, dv), &mut mat_mut(o, n, dv));
}

/// Phase 1 for one (head, chunk), its results stored in `mem` (at least [`chunk_floats`]).
fn intra_chunk<'a>(
    s: &ScanShape,
    x: &ScanInputs<'_>,
    h: usize,
    c: usize,
    mem: &'a mut [f32],
) -> ChunkData<'a> {
    let (dk, dv, hc) = (s.dk, s.dv, s.heads);
    let t0 = c * CHUNK;
    let n = CHUNK.min(s.t - t0);
    let qh = s.qk_head(h);
    let mut rest = mem;
    let gam = take(&mut rest, n);
    let o = take(&mut rest, n * dv);
    let qr = take(&mut rest, n * dk);
    let kt = take(&mut rest, n * dk);
    let u = take(&mut rest, n * dv);
    let tr = take(&mut rest, transition_floats(s, n));

    // Inputs of the chunk: qr starts as q, u as v (Mamba-2 keeps both as they are).
    gather(x.q, t0, n, s.qk_heads, qh, dk, qr);
    gather(x.v, t0, n, hc, h, dv, u);
    let mut k = vec![0.0f32; n * dk];
    gather(x.k, t0, n, s.qk_heads, qh, dk, &mut k);
    let mut acc = 0.0f32;
    for (i, gv) in gam.iter_mut().enumerate() {
        acc += x.g[(t0 + i) * hc + h];
        *gv = acc;
    }
    let gam = &*gam;
    let g_last = gam[n - 1];
    let lam =
        |i: usize, j: usize| x.lam[((t0 + i) * hc + h) * s.lambda_cols + s.lambda_col(level(i, j))];

    // S1 = Q Kᵀ (n × n); only its lower triangle is used.
    let mut s1 = vec![0.0f32; n * n];
    matmul(
        &mat(qr, n, dk),
        &mat(&k, n, dk).t(),
        &mut mat_mut(&mut s1, n, n),
    );
    // K̃_j = e^{Γ − γ_j} k_j.
    for (j, (row, kr)) in kt.chunks_exact_mut(dk).zip(k.chunks_exact(dk)).enumerate() {
        let f = decay(g_last - gam[j]);
        for (y, kv) in row.iter_mut().zip(kr) {
            *y = f * kv;
        }
    }

    let (mut a, mut kk_out, mut w_out): (&[f32], &[f32], &[f32]) = (&[], &[], &[]);
    match s.form {
        Form::Mamba2 => {
            // A_ij = (q_i·k_j) e^{γ_i − γ_j} λ_i[col(i, j)], j ≤ i.
            let mut att = vec![0.0f32; n * n];
            for_lower_decays(gam, |i, j, e| {
                att[i * n + j] = s1[i * n + j] * e * lam(i, j)
            });
            attend(&att, u, n, dv, o);
        }
        Form::Gdn => {
            let beta: Vec<f32> = (0..n).map(|i| x.beta[(t0 + i) * hc + h]).collect();
            // P = StrictLower(diag(β) K Kᵀ), then A_w = (I + P)⁻¹ by forward substitution,
            // row by row: T_i = e_i − Σ_{l<i} P_il T_l (T_l is zero right of l).
            let mut kk = vec![0.0f32; n * n];
            matmul(
                &mat(&k, n, dk),
                &mat(&k, n, dk).t(),
                &mut mat_mut(&mut kk, n, n),
            );
            let mut aw = vec![0.0f32; n * n];
            for i in 0..n {
                let (done, rest) = aw.split_at_mut(i * n);
                let row = &mut rest[..n];
                row[i] = 1.0;
                for l in 0..i {
                    let p = beta[i] * kk[i * n + l];
                    let tl = &done[l * n..][..=l];
                    for (r, t) in row[..=l].iter_mut().zip(tl) {
                        *r -= p * t;
                    }
                }
            }
            // M = Tril(S1) A_w.
            for i in 0..n {
                s1[i * n + i + 1..(i + 1) * n].fill(0.0);
            }
            let mut m = vec![0.0f32; n * n];
            matmul(&mat(&s1, n, n), &mat(&aw, n, n), &mut mat_mut(&mut m, n, n));
            // βK, then W = A_w βK and qr = Q − M βK.
            let mut bk = k.clone();
            for (i, row) in bk.chunks_exact_mut(dk).enumerate() {
                row.iter_mut().for_each(|v| *v *= beta[i]);
            }
            let mut w = vec![0.0f32; n * dk];
            matmul(
                &mat(&aw, n, n),
                &mat(&bk, n, dk),
                &mut mat_mut(&mut w, n, dk),
            );
            matmul_sub(&mat(&m, n, n), &mat(&bk, n, dk), &mut mat_mut(qr, n, dk));
            // U = A_u diag(β) V with A_u,ij = e^{γ_i − γ_j} A_w,ij; the attention tile
            // M_ij e^{γ_i − γ_j} β_j λ_i[col(i, j)], both for j ≤ i. Both multiply V, which
            // `u` holds until U replaces it.
            let mut au = vec![0.0f32; n * n];
            let mut att = vec![0.0f32; n * n];
            for_lower_decays(gam, |i, j, e| {
                let eb = e * beta[j];
                au[i * n + j] = aw[i * n + j] * eb;
                att[i * n + j] = m[i * n + j] * eb * lam(i, j);
            });
            attend(&att, u, n, dv, o);
            let v = u.to_vec();
            matmul(&mat(&au, n, n), &mat(&v, n, dv), &mut mat_mut(u, n, dv));
            if dk <= CHUNK {
                // A = I − Kᵀ W.
                tr.fill(0.0);
                for i in 0..dk {
                    tr[i * dk + i] = 1.0;
                }
                matmul_sub(
                    &mat(&k, n, dk).t(),
                    &mat(&w, n, dk),
                    &mut mat_mut(tr, dk, dk),
                );
                a = tr;
            } else {
                let (kd, wd) = tr.split_at_mut(n * dk);
                kd.copy_from_slice(&k);
                wd.copy_from_slice(&w);
                kk_out = kd;
                w_out = wd;
            }
        }
    }
    ChunkData {
        n,
        gam,
        o,
        qr,
        a,
        k: kk_out,
        w: w_out,
        kt,
        u,
    }
}

/// Phase 2 for the columns `cols` (head h, value columns `v0..v0 + bw`): the level readouts go
/// to `out` (`[T][bw]`); returns the hand-off state of these columns, `[levels][dk][bw]`.
fn inter_chunk(
    s: &ScanShape,
    x: &ScanInputs<'_>,
    chunks: &[ChunkData<'_>],
    cols: &ColumnBlock,
    out: &mut [f32],
) -> Vec<f32> {
    let ColumnBlock {
        head: h,
        v0,
        width: bw,
    } = *cols;
    let (dk, dv, nt) = (s.dk, s.dv, s.chunks());
    let (scans, m_top) = (s.scans(), s.m_top());
    let mut hs = vec![vec![0.0f32; dk * bw]; scans];
    let mut live = vec![false; scans];
    out.fill(0.0);
    let mut read = vec![0.0f32; CHUNK * bw];
    // Scratch for W h (n × bw) and A h (dk × bw, swapped with the level it transitions).
    let mut xw = vec![0.0f32; CHUNK * bw];
    let mut ah = vec![0.0f32; dk * bw];

    for (c, d) in chunks.iter().enumerate() {
        let (n, t0) = (d.n, c * CHUNK);
        let qr = mat(d.qr, n, dk);
        // 1. Readout of every live level: o_i += λ_i[col(7 + m)] e^{γ_i} qr_iᵀ h_m.
        for m in (0..scans).filter(|&m| live[m]) {
            let col = s.lambda_col(C0P1 + m);
            matmul(&qr, &mat(&hs[m], dk, bw), &mut mat_mut(&mut read, n, bw));
            for i in 0..n {
                let f = x.lam[((t0 + i) * s.heads + h) * s.lambda_cols + col] * decay(d.gam[i]);
                add_scaled_flushed(&mut out[(t0 + i) * bw..][..bw], &read[i * bw..][..bw], f);
            }
        }
        if c == nt - 1 {
            break;
        }
        // 2. Chunk c's transition on every live level: e^Γ h (Mamba-2), e^Γ (h − Kᵀ (W h)) (GDN).
        let eg = exp(d.gam[n - 1]);
        for m in (0..scans).filter(|&m| live[m]) {
            if !d.a.is_empty() {
                matmul(
                    &mat(d.a, dk, dk),
                    &mat(&hs[m], dk, bw),
                    &mut mat_mut(&mut ah, dk, bw),
                );
                std::mem::swap(&mut hs[m], &mut ah);
            } else if s.form == Form::Gdn {
                matmul(
                    &mat(d.w, n, dk),
                    &mat(&hs[m], dk, bw),
                    &mut mat_mut(&mut xw, n, bw),
                );
                matmul_sub(
                    &mat(d.k, n, dk).t(),
                    &mat(&xw, n, bw),
                    &mut mat_mut(&mut hs[m], dk, bw),
                );
            }
            scale_flushed(&mut hs[m], eg);
        }
        // 3. Chunk c's contribution K̃ᵀ U into level 0 (there is a level 0 since c < NT − 1).
        let u = columns(mat(d.u, n, dv), v0, bw);
        matmul_add(&mat(d.kt, n, dk).t(), &u, &mut mat_mut(&mut hs[0], dk, bw));
        live[0] = true;
        // 4. Carry over the trailing one bits of c, never out of the saturated level.
        let mut m = 0;
        while m < m_top && m + 1 < scans && (c >> m) & 1 == 1 {
            let (lo, hi) = hs.split_at_mut(m + 1);
            for (a, b) in hi[0].iter_mut().zip(lo[m].iter_mut()) {
                *a += *b;
                *b = 0.0;
            }
            live[m + 1] = true;
            live[m] = false;
            m += 1;
        }
    }

    hand_off(s, x, chunks, &hs, &live, cols)
}

/// The decoder's state after token T−1 for the columns `cols` (value columns `v0..v0 + bw` of
/// head `h`), `[levels][dk][bw]`. `hs` / `live` are the cascade's level states as the last
/// chunk reads them.
///
/// Level j holds the tokens of its bucket decayed to T−1 (runtime `LevelPolicy`): level 0 <
/// top holds token T−1; an exact level 1 ≤ j < top holds [(T−1 >> j) << j, + 2^(j−1)) when bit
/// j−1 of T−1 is set; the top level holds every token before ((T−1) >> (top−1)) << (top−1)
/// (all tokens when top = 0). Tokens before the last chunk come from the cascade state of the
/// matching chunk level; tokens of the last chunk are added in closed form (Mamba-2) or stepped
/// exactly as the decoder steps them (GDN).
fn hand_off(
    s: &ScanShape,
    x: &ScanInputs<'_>,
    chunks: &[ChunkData<'_>],
    hs: &[Vec<f32>],
    live: &[bool],
    cols: &ColumnBlock,
) -> Vec<f32> {
    let ColumnBlock {
        head: h,
        v0,
        width: bw,
    } = *cols;
    let (dk, dv, nt, top) = (s.dk, s.dv, s.chunks(), s.top());
    let last = s.t - 1;
    let s0 = (nt - 1) * CHUNK;
    let d = &chunks[nt - 1];
    let mut state = vec![0.0f32; s.levels * dk * bw];
    let policy = s.policy();
    for (j, dst) in state.chunks_exact_mut(dk * bw).enumerate() {
        if !policy.is_some_and(|p| p.is_live(last as u64, j as u32)) {
            continue; // a dead level is zero
        }
        // The chunk level whose cascade state feeds this level, if it holds anything.
        let m = if j == top {
            Some(s.m_top())
        } else if j >= C0P1 {
            Some(j - C0P1)
        } else {
            None
        };
        let from_scan = m.filter(|&m| m < hs.len() && live[m]);
        // Tokens [a, b) of the bucket (those before s0 came through the cascade).
        let (a, b) = if j == top {
            (
                0,
                if top == 0 {
                    s.t
                } else {
                    (last >> (top - 1)) << (top - 1)
                },
            )
        } else if j == 0 {
            (last, s.t)
        } else if (last >> (j - 1)) & 1 == 1 {
            let a = (last >> j) << j;
            (a, a + (1 << (j - 1)))
        } else {
            (0, 0)
        };
        let a0 = a.max(s0);
        match s.form {
            Form::Mamba2 => {
                // S = e^{Γ} h_m + Σ_{t ∈ [a0, b)} K̃_t U_tᵀ (K̃ of the last chunk decays to T−1).
                if let Some(m) = from_scan {
                    dst.copy_from_slice(&hs[m]);
                    scale_flushed(dst, exp(d.gam[d.n - 1]));
                }
                if a0 < b {
                    let (r0, r1) = (a0 - s0, b - s0);
                    let kt = mat(d.kt, d.n, dk).slice_axis_move(Axis(0), Slice::from(r0..r1));
                    let u = mat(d.u, d.n, dv).slice_axis_move(Axis(0), Slice::from(r0..r1));
                    matmul_add(&kt.t(), &columns(u, v0, bw), &mut mat_mut(dst, dk, bw));
                }
            }
            Form::Gdn => {
                // Step the last chunk's tokens like the decoder: S ← α (S − β k (kᵀ S)), then
                // S += β k vᵀ for tokens of the bucket. Before the first insertion of a level
                // that starts empty there is nothing to step.
                let start = match from_scan {
                    Some(m) => {
                        dst.copy_from_slice(&hs[m]);
                        s0
                    }
                    None if a0 < b => a0,
                    None => continue,
                };
                let qh = s.qk_head(h);
                let mut u = vec![0.0f32; bw];
                for t in start..s.t {
                    let alpha = exp(x.g[t * s.heads + h]);
                    let beta = x.beta[t * s.heads + h];
                    let k = &x.k[(t * s.qk_heads + qh) * dk..][..dk];
                    u.fill(0.0);
                    for (kk, &ki) in k.iter().enumerate() {
                        for (uj, sij) in u.iter_mut().zip(&dst[kk * bw..][..bw]) {
                            *uj += ki * sij;
                        }
                    }
                    for (kk, &ki) in k.iter().enumerate() {
                        let bk = beta * ki;
                        for (sij, uj) in dst[kk * bw..][..bw].iter_mut().zip(&u) {
                            *sij = alpha * (*sij - bk * uj);
                        }
                    }
                    if t >= a && t < b {
                        let v = &x.v[(t * s.heads + h) * dv + v0..][..bw];
                        for (kk, &ki) in k.iter().enumerate() {
                            let bk = beta * ki;
                            for (sij, vj) in dst[kk * bw..][..bw].iter_mut().zip(v) {
                                *sij += bk * vj;
                            }
                        }
                    }
                }
            }
        }
    }
    state
}
