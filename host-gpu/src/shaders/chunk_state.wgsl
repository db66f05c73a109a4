// The decoder's Fenwick state after token T-1 (runtime FenwickState + LevelPolicy, saturating
// top level): the level buckets, shared by chunk_state_m2.wgsl and chunk_state_gdn.wgsl, which
// follow this file; each has one workgroup per (block of dv columns, head, state level j).
//   level j holds the tokens of its bucket, decayed to T-1. Tokens before the last chunk come
//   from the chunk scan (hstate, the state the last chunk reads at the matching chunk level);
//   tokens of the last chunk are stepped exactly as the decoder does: S = A_t S (+ β k vᵀ).
//   exact levels 1 <= j < top: bucket [(T-1 >> j) << j, + 2^(j-1)) if bit j-1 of T-1 is set;
//   level 0 < top: token T-1; top: every token before ((T-1) >> (top-1)) << (top-1) (all tokens
//   when top = 0, the plain single state).

// Where level j's state comes from: the chunk scan level m that feeds it (if from_scan) and the
// tokens [a, b) of its bucket (those before the last chunk's start come from the scan).
struct Bucket {
    live: bool,
    from_scan: bool,
    m: u32,
    a: u32,
    b: u32,
}

fn bucket(j: u32) -> Bucket {
    let last = P.t - 1u;
    // A dead level (runtime LevelPolicy::is_live) is zero.
    var live = j == 0u;
    if (j > 0u && j == P.top) {
        live = (last >> (P.top - 1u)) != 0u;
    } else if (j > 0u && j < P.top) {
        live = ((last >> (j - 1u)) & 1u) == 1u;
    }
    var m = 0xffffffffu;
    if (j == P.top) {
        m = P.m_top;
    } else if (j >= C0P1) {
        m = j - C0P1;
    }
    var a = 0u;
    var b = 0u;
    if (j == P.top) {
        if (P.top == 0u) {
            b = P.t;
        } else {
            b = (last >> (P.top - 1u)) << (P.top - 1u);
        }
    } else if (j == 0u) {
        a = last;
        b = P.t;
    } else if (((last >> (j - 1u)) & 1u) == 1u) {
        a = (last >> j) << j;
        b = a + (1u << (j - 1u));
    }
    return Bucket(live, m < P.n_scans, m, a, b);
}
