// The precomputed strategy's step 4 (Mamba-2, chunk_pre_read_m2.wgsl) apart from its tile
// product: the bindings, the levels a reader chunk reads, each level's row factors and the last
// chunk's hand-off states.
// One workgroup per (64 dv columns vb, reader chunk c ≥ 1, head h), PWG threads.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> gam: array<f32>;
@group(0) @binding(3) var<storage, read> lam: array<f32>;
@group(0) @binding(4) var<storage, read> xs: array<f32>;
@group(0) @binding(5) var<storage, read_write> o: array<f32>;
@group(0) @binding(6) var<storage, read_write> hstate: array<f32>;

const TILE: u32 = 64u; // dv columns per workgroup (and rows of a chunk, C)

var<workgroup> fac: array<f32, TILE>; // λ_i e^{γ_i + D} of the current level

// Whether chunk c reads chunk level m: its bit m (exact levels) or any earlier block (the
// saturated level).
fn reads_level(c: u32, m: u32) -> bool {
    return select(((c >> m) & 1u) == 1u, c >= (1u << m), m == P.m_top);
}

// A level chunk c reads: the slot of xs holding its state, and D, the Σ Γ of the chunks between.
struct ReadLevel {
    sbase: u32,
    dsum: f32,
}

// Level m of chunk c (which reads it): its slot and D, with fac[i] = λ_i[min(c0 + 1 + m, top)]
// e^{γ_i + D} for the n rows of the chunk (zero beyond). Call it in uniform control flow; fac
// is complete for every thread on return.
fn read_level(c: u32, h: u32, m: u32, n: u32, lid: u32) -> ReadLevel {
    let start = (c >> m) << m;
    let sbase = ((start - 1u) * P.heads + h) * P.dk * P.dv;
    let dsum = decay_sum(h, start, c, lid);
    let col = min(C0P1 + m, P.top);
    if (lid < CHUNK) {
        var f = 0.0;
        if (lid < n) {
            let t = c * CHUNK + lid;
            f = lam[lam_idx(t, h, col)] * exp(gam[t * P.heads + h] + dsum);
        }
        fac[lid] = f;
    }
    workgroupBarrier();
    return ReadLevel(sbase, dsum);
}

// The last chunk's hand-off state of level m, columns vb·64 ..: the level's state decayed by D.
fn write_handoff(m: u32, h: u32, vb: u32, lv: ReadLevel, lid: u32) {
    let dec = exp(lv.dsum);
    for (var e = lid; e < P.dk * TILE; e += PWG) {
        let kk = e / TILE;
        let d = vb * TILE + e % TILE;
        if (d < P.dv) {
            hstate[((m * P.heads + h) * P.dk + kk) * P.dv + d] = dec * xs[lv.sbase + kk * P.dv + d];
        }
    }
}

// The last chunk's hand-off state of a level it does not read: zero.
fn zero_handoff(m: u32, h: u32, vb: u32, lid: u32) {
    for (var e = lid; e < P.dk * TILE; e += PWG) {
        let d = vb * TILE + e % TILE;
        if (d < P.dv) {
            hstate[((m * P.heads + h) * P.dk + e / TILE) * P.dv + d] = 0.0;
        }
    }
}
