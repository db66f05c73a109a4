// Shared by every chunk-scan kernel (prepended by chunk_scan/mod.rs; each kernel file declares
// its own bindings, with the uniform `P` at binding 0).

struct Params {
    t: u32,          // tokens
    heads: u32,
    qk_heads: u32,   // 1 (q, k shared by all heads) or `heads`
    dk: u32,
    dv: u32,
    lam_cols: u32,   // λ columns per (token, head)
    top: u32,        // top level = levels - 1 (saturating)
    nt: u32,         // chunks = ceil(t / C)
    m_top: u32,      // chunk level of the saturated scan = max(top - (c0 + 1), 0)
    n_scans: u32,    // inter-chunk scans that are not empty (levels 0..n_scans-1)
    levels: u32,
    half_nt: u32,    // ceil(nt / 2): reader chunks of one regular level (slots in olvl)
    level: u32,      // precomputed strategy: the chunk level of one up-sweep dispatch; 0 elsewhere
    head0: u32,      // first head of the dispatch's head group (GDN backward, level walk); else 0
    group_heads: u32, // heads of that group (GDN backward, level walk); else 0
}

const CHUNK: u32 = 64u;   // chunk size C
const C0P1: u32 = 7u;     // c0 + 1 = token level of chunk level 0
const MAX_DK: u32 = 256u; // largest dk the kernels hold in workgroup memory / registers

// Start of the q / k row of token t as seen by head h.
fn qk_row(t: u32, h: u32) -> u32 {
    let qh = select(h, 0u, P.qk_heads == 1u);
    return (t * P.qk_heads + qh) * P.dk;
}

// Index of λ column `col` of token t, head h.
fn lam_idx(t: u32, h: u32, col: u32) -> u32 {
    return (t * P.heads + h) * P.lam_cols + col;
}

// λ column of the pair (i, j), j <= i, inside one chunk: Fenwick level, saturated at `top`.
fn level_col(i: u32, j: u32) -> u32 {
    let l = select(firstLeadingBit(i ^ j) + 1u, 0u, i == j);
    return min(l, P.top);
}

// Start of row i of slot `slot` of the level walk's reader rows, head h of the dispatch's head
// group: olvl[slot][i][h − head0][dv]. Only one head group's rows are held at a time, so that
// long sequences fit the binding limit.
fn olvl_row(slot: u32, i: u32, h: u32) -> u32 {
    return ((slot * CHUNK + i) * P.group_heads + h - P.head0) * P.dv;
}

// Slot of chunk c in the inter-chunk output scratch of level m, or NO_SLOT when c does not read
// level m. Regular level m: chunks with bit m set, packed (at most ceil(nt/2) of them).
// Saturated level m_top: chunks c >= 2^m (the ones before read an empty state).
const NO_SLOT: u32 = 0xffffffffu;
fn olvl_slot(m: u32, c: u32) -> u32 {
    let base = m * P.half_nt;
    let p = 1u << m;
    if (m == P.m_top) {
        if (c < p) {
            return NO_SLOT;
        }
        return base + c - p;
    }
    if ((c & p) == 0u) {
        return NO_SLOT;
    }
    return base + ((c >> (m + 1u)) << m) + (c & (p - 1u));
}
