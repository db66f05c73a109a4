// Shared by the Gated DeltaNet backward kernels (grad/op_gdn.rs prepends chunk_common.wgsl and
// this file). Index helpers only; every kernel declares its own bindings (uniform `P` at 0).
//
// Head groups: one dispatch covers the G = P.group_heads heads h0 = P.head0 .. h0 + G of the
// operator (the scratch holds one group, reused group after group). Kernels index inputs,
// outputs and γ by the operator head h = h0 + workgroup_id.y and the scratch by the group head
// h − h0.
//
// Scratch layouts (all f32; H here is the group's G):
//   fpack [T][H][3 dk + dv]      per token: q̃ | K̃ | W̃ | U (the forward's WY/UT quantities)
//   fpt [c][H][2][dk][C]         per chunk: K̃ᵀ and W̃ᵀ (the same values, transposed)
//   gpack [T][H][3 dk + dv + 2 NLB]  per token: dq̃ | dK̃ | dW̃ | dU | per dk block b of LB
//                                columns: (dγ inter-chunk partial, dK̃·K̃ partial)
//   hs, dhs [m][c][H][dk][dv]    per level m and chunk c: the state H_c entering chunk c, and
//                                the gradient of L w.r.t. the state after chunk c (0 when reset)
//   xs, dxs [m][c][H][C][dv]     the chunk products X = σ U − W̃ H and dX = K̃ D
//   dlp [T][H][n_scans][NLB]     per token, level and dk block: partial sums of dλ (inter)
//   tiles [c][H][PER_CH]         per chunk: N_TILES C×C tiles, then the rows dβ and dγ

const TILE: u32 = 4096u; // C * C
// Slots are shared by tiles whose lifetimes do not overlap (grad_gdn_intra computes them in
// order; after dS1 / dA_w nothing reads dM or S1 again, after Y nothing reads dA_w).
const T_S1: u32 = 0u;  // Tril(Q Kᵀ)
const T_Z: u32 = 0u;   // coefficients of k_i in dk_j from dP (replaces S1)
const T_KK: u32 = 1u;  // StrictLower(K Kᵀ)
const T_T: u32 = 2u;   // A_w = (I + StrictLower(diag(β) K Kᵀ))⁻¹
const T_M: u32 = 3u;   // S1 A_w
const T_DM: u32 = 4u;  // dL/dM
const T_Y: u32 = 4u;   // dT A_wᵀ (replaces dM)
const T_DS1: u32 = 5u; // dL/dS1
const T_DT: u32 = 6u;  // dL/dA_w (strictly lower)
const T_DP: u32 = 6u;  // dL/dP, P = StrictLower(diag(β) K Kᵀ) (replaces dA_w)
const T_A: u32 = 7u;   // intra attention tile M ⊙ E ⊙ β_j ⊙ Λ
const T_TU: u32 = 8u;  // A_u diag(β): E ⊙ A_w ⊙ β_j
const T_CB: u32 = 9u;  // per-pair contributions to dβ_j
const T_CG: u32 = 10u; // per-pair contributions to dγ_i (and −dγ_j)
const T_CL: u32 = 11u; // per-pair contributions to dλ_i[lev(i, j)]
const N_TILES: u32 = 12u;
const ROW_DB: u32 = 49152u; // N_TILES * TILE: dβ of the chunk's rows
const ROW_DG: u32 = 49216u; // ROW_DB + C: dγ of the chunk's rows
const PER_CH: u32 = 49280u; // ROW_DG + C

fn ch_base(c: u32, h: u32) -> u32 {
    return (c * P.group_heads + h - P.head0) * PER_CH;
}

// Exact Fenwick level of the pair (i, j), j <= i (no saturation: training shapes are exact).
fn lev(i: u32, j: u32) -> u32 {
    return select(firstLeadingBit(i ^ j) + 1u, 0u, i == j);
}

fn f_stride() -> u32 {
    return 3u * P.dk + P.dv;
}

// dk or dv columns per workgroup of grad_gdn_vec (KB_COLS in op_gdn.rs), and the dk blocks.
const KB: u32 = 32u;
fn n_kb() -> u32 {
    return (P.dk + KB - 1u) / KB;
}

// dk columns per workgroup of grad_gdn_lvl (LB_COLS in op_gdn.rs), and their number NLB.
const LB: u32 = 64u;
fn n_lb() -> u32 {
    return (P.dk + LB - 1u) / LB;
}

fn g_stride() -> u32 {
    return 3u * P.dk + P.dv + 2u * n_lb();
}

// gpack slot of the dγ partial of dk block b (slot + 1: its dK̃·K̃ partial).
fn g_dgam(b: u32) -> u32 {
    return 3u * P.dk + P.dv + 2u * b;
}

fn frow(t: u32, h: u32) -> u32 {
    return (t * P.group_heads + h - P.head0) * f_stride();
}

fn grow(t: u32, h: u32) -> u32 {
    return (t * P.group_heads + h - P.head0) * g_stride();
}

// Chunk c reads level m (bit m of c set); otherwise it is a source.
fn reads(c: u32, m: u32) -> bool {
    return ((c >> m) & 1u) == 1u;
}

// Chunk c is the last of its aligned group of 2^(m+1) chunks: the level state resets after it.
fn group_last(c: u32, m: u32) -> bool {
    let p = (2u << m) - 1u;
    return (c & p) == p;
}

fn state_at(m: u32, c: u32, h: u32) -> u32 {
    return ((m * P.nt + c) * P.group_heads + h - P.head0) * P.dk * P.dv;
}

// Start of the C × dv block of level m, chunk c in xs (X = σ U − W̃ H, from grad_gdn_hscan)
// and dxs (dX = K̃ D, grad_gdn_dhscan).
fn xs_at(m: u32, c: u32, h: u32) -> u32 {
    return ((m * P.nt + c) * P.group_heads + h - P.head0) * CHUNK * P.dv;
}

// Start of the dk × C block of chunk c in fpt: K̃ᵀ (which = 0) or W̃ᵀ (1), element (x, i) at
// + x C + i (rows i of the chunk consecutive: the scans' row-parallel products read them so).
fn ft_at(c: u32, h: u32, which: u32) -> u32 {
    return ((c * P.group_heads + h - P.head0) * 2u + which) * P.dk * CHUNK;
}

// Index of the dλ partial of token t, level m, dk block b (dlp, from grad_gdn_lvl).
fn dlp_idx(t: u32, h: u32, m: u32, b: u32) -> u32 {
    return ((t * P.group_heads + h - P.head0) * P.n_scans + m) * n_lb() + b;
}

fn chunk_rows(c: u32) -> u32 {
    return min(CHUNK, P.t - c * CHUNK);
}

// s[lb] += a[bi] b[bj] over the 10 lower blocks (bi, bj ≤ bi) of a 4 × 4 block grid, lb =
// bi (bi + 1) / 2 + bj: straight-line code with constant indices, so that the accumulators
// stay in registers (a loop with a bi-dependent bound may leave them in memory).
fn tri10(s: ptr<function, array<f32, 10>>, a: vec4<f32>, b: vec4<f32>) {
    (*s)[0] += a.x * b.x;
    (*s)[1] += a.y * b.x;
    (*s)[2] += a.y * b.y;
    (*s)[3] += a.z * b.x;
    (*s)[4] += a.z * b.y;
    (*s)[5] += a.z * b.z;
    (*s)[6] += a.w * b.x;
    (*s)[7] += a.w * b.y;
    (*s)[8] += a.w * b.z;
    (*s)[9] += a.w * b.w;
}
