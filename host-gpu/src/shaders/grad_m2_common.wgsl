// Shared by the Mamba-2 backward kernels (appended after chunk_common.wgsl; each kernel file
// declares `gam`, the local cumsums of chunk_gamma.wgsl).
//
// Inter-chunk level m pairs the chunks of aligned groups of 2^(m+1): the first half are the
// sources, the second half the readers (spec §7.1). A group whose reader half lies past the
// last chunk contributes nothing; the groups that do are g = 0..level_pairs(m)-1, and
// (m, g) is stored at pair index pair_base(m) + g in the X / Y scratch.

const ROLE_NONE: u32 = 0u;
const ROLE_SOURCE: u32 = 1u;
const ROLE_READER: u32 = 2u;

// Inter-chunk levels with at least one reader chunk: bitlen(NT - 1).
fn inter_levels() -> u32 {
    if (P.nt <= 1u) {
        return 0u;
    }
    return firstLeadingBit(P.nt - 1u) + 1u;
}

// Groups of level m with a non-empty reader half: g with g·2^(m+1) + 2^m < NT.
fn level_pairs(m: u32) -> u32 {
    let half = 1u << m;
    if (half >= P.nt) {
        return 0u;
    }
    return (P.nt - half + 2u * half - 1u) >> (m + 1u);
}

fn pair_base(m: u32) -> u32 {
    var b = 0u;
    for (var l = 0u; l < m; l++) {
        b += level_pairs(l);
    }
    return b;
}

fn total_pairs() -> u32 {
    return pair_base(inter_levels());
}

// What chunk c is at level m.
fn chunk_role(m: u32, c: u32) -> u32 {
    let half = 1u << m;
    if ((c & half) != 0u) {
        return ROLE_READER;
    }
    let g0 = (c >> (m + 1u)) << (m + 1u);
    if (g0 + half < P.nt) {
        return ROLE_SOURCE;
    }
    return ROLE_NONE;
}

fn pair_of(m: u32, c: u32) -> u32 {
    return pair_base(m) + (c >> (m + 1u));
}

// Γ_c: the local cumsum at the last token of chunk c (only asked for full chunks).
fn chunk_total(c: u32, h: u32) -> f32 {
    return gam[((c + 1u) * CHUNK - 1u) * P.heads + h];
}

// Start of the (which = 0: X, 1: Y) matrix of pair p, head h, in the X / Y scratch
// `[2][pairs][heads][dk][dv]`.
fn xy_base(which: u32, p: u32, h: u32) -> u32 {
    return ((which * total_pairs() + p) * P.heads + h) * P.dk * P.dv;
}

// Index of the (level m, chunk c, head h) decay offset.
fn dec_idx(m: u32, c: u32, h: u32) -> u32 {
    return (m * P.nt + c) * P.heads + h;
}

// Exact Fenwick level inside one chunk (the backward has no saturated top level).
fn level_exact(i: u32, j: u32) -> u32 {
    return select(firstLeadingBit(i ^ j) + 1u, 0u, i == j);
}
