// Intra-chunk backward, Mamba-2 form (spec §7.4). For pairs j <= i inside one chunk, with
// S = q_i·k_j, dP = dO_i·v_j, E = exp(γ_i − γ_j) (mask before exp) and Λ = λ_i[lev(i, j)]:
//   dλ_i[ℓ] = Σ_{lev(i,j)=ℓ} dP S E   (levels 0..6: one sum over a contiguous range per row),
//   dq_i = Σ_j dP E Λ k_j,  dk_j = Σ_i dP E Λ q_i,  dv_j = Σ_i S E Λ dO_i.
// One workgroup (256 threads) per (chunk, head); the three C×C tiles take turns in one
// workgroup array (16 KiB); every product is tiled (4×4 per thread, 16-deep slices of its inputs
// staged in workgroup memory). First writer of dq, dk, dv and of dλ columns 0..6.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> d_o: array<f32>;
@group(0) @binding(5) var<storage, read> gam: array<f32>;
@group(0) @binding(6) var<storage, read> lam: array<f32>;
@group(0) @binding(7) var<storage, read_write> dq: array<f32>;
@group(0) @binding(8) var<storage, read_write> dk: array<f32>;
@group(0) @binding(9) var<storage, read_write> dv: array<f32>;
@group(0) @binding(10) var<storage, read_write> dlam: array<f32>;

var<workgroup> tile: array<f32, 4096>;
// Two staged 16-deep slices of the products' inputs, rows of SS words: a multiple of 4, so that
// the products read whole vec4, but not of 32, so that the transposed stores of stage_pair (16
// threads of a warp on 16 rows) fall in different memory banks.
const SS: u32 = 68u;
const RIGHT: u32 = KS * SS; // the second slice
var<workgroup> stg: array<vec4<f32>, 2u * KS * SS / 4u>;

const KS: u32 = 16u; // depth of one staged slice

const TILE_DLAM: u32 = 0u; // dP S E
const TILE_DQK: u32 = 1u;  // dP E Λ
const TILE_DV: u32 = 2u;   // S E Λ

// Words b .. b + 3 of `stg` (b a multiple of 4).
fn stg4(b: u32) -> vec4<f32> {
    return stg[b / 4u];
}

fn put(b: u32, x: f32) {
    stg[b / 4u][b % 4u] = x;
}

fn vrow(t: u32, h: u32) -> u32 {
    return (t * P.heads + h) * P.dv;
}

const PAIR_QK: u32 = 0u; // S = Q Kᵀ: q and k, dk columns
const PAIR_OV: u32 = 1u; // dP = dO Vᵀ: dO and v, dv columns

// The 16-deep slice from column a0 of one pair's chunk rows (`width` columns) into `stg`,
// transposed ([depth][row]): the left factor (q or dO) at 0, the right one (k or v) at 1024.
fn stage_pair(pair: u32, width: u32, t0: u32, n: u32, h: u32, a0: u32, lid: u32) {
    for (var x = 0u; x < 4u; x++) {
        let idx = lid + x * 256u;
        let r = idx / KS;
        let kk = idx % KS;
        var lv = 0.0;
        var rv = 0.0;
        if (r < n && a0 + kk < width) {
            if (pair == PAIR_QK) {
                let at = qk_row(t0 + r, h) + a0 + kk;
                lv = q[at];
                rv = k[at];
            } else {
                let at = vrow(t0 + r, h) + a0 + kk;
                lv = d_o[at];
                rv = v[at];
            }
        }
        put(kk * SS + r, lv);
        put(RIGHT + kk * SS + r, rv);
    }
}

// The 4×4 block (rows i0.., columns j0..) of one pair's product, reduced over 16-deep slices
// staged in `stg`. Every thread calls it (barriers inside).
fn pair_product(pair: u32, t0: u32, n: u32, h: u32, i0: u32, j0: u32, lid: u32) -> Rows16 {
    let width = select(P.dv, P.dk, pair == PAIR_QK);
    let live = j0 <= i0 + 3u && i0 < n;
    var o = zero16();
    for (var a0 = 0u; a0 < width; a0 += KS) {
        stage_pair(pair, width, t0, n, h, a0, lid);
        workgroupBarrier();
        if (live) {
            for (var kk = 0u; kk < KS; kk++) {
                let lv = stg4(kk * SS + i0);
                let rv = stg4(RIGHT + kk * SS + j0);
                o = add_outer(o, lv, rv);
            }
        }
        workgroupBarrier();
    }
    return o;
}

// tile[i][j0..j0+3] for one of the three products, 0 outside j <= i < n.
fn store(kind: u32, t0: u32, n: u32, h: u32, i: u32, j0: u32, s: vec4<f32>, dp: vec4<f32>) {
    for (var x = 0u; x < 4u; x++) {
        let j = j0 + x;
        var val = 0.0;
        if (j <= i && i < n) {
            let e = exp(gs[i] - gs[j]);
            if (kind == TILE_DLAM) {
                val = dp[x] * s[x] * e;
            } else {
                let l = lam[lam_idx(t0 + i, h, level_exact(i, j))];
                if (kind == TILE_DQK) {
                    val = dp[x] * e * l;
                } else {
                    val = s[x] * e * l;
                }
            }
        }
        tile[i * CHUNK + j] = val;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = wg.y;
    let t0 = c * CHUNK;
    let n = min(CHUNK, P.t - t0);
    load_gammas(t0, n, h, lid);
    workgroupBarrier();

    // Each thread: a 4x4 block (rows i0.., columns j0..) of S = Q Kᵀ and dP = dO Vᵀ, the
    // reduction in 16-deep slices staged (transposed: [depth][row]) in `stg`.
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;
    let ty = lid / 16u;
    let tx = lid % 16u;
    let s = pair_product(PAIR_QK, t0, n, h, i0, j0, lid);
    let p = pair_product(PAIR_OV, t0, n, h, i0, j0, lid);

    // dλ, levels 0..6: row i's level-ℓ pairs are j = i (ℓ = 0) or the 2^(ℓ−1) columns from
    // (i >> ℓ) << ℓ when bit ℓ−1 of i is set (spec §2.2); an empty bucket gives exactly 0.
    store(TILE_DLAM, t0, n, h, i0, j0, s.a, p.a);
    store(TILE_DLAM, t0, n, h, i0 + 1u, j0, s.b, p.b);
    store(TILE_DLAM, t0, n, h, i0 + 2u, j0, s.c, p.c);
    store(TILE_DLAM, t0, n, h, i0 + 3u, j0, s.d, p.d);
    workgroupBarrier();
    let row = lid % CHUNK;
    for (var l = lid / CHUNK; l < min(C0P1, P.lam_cols); l += 4u) {
        if (row < n) {
            var sum = 0.0;
            if (l == 0u) {
                sum = tile[row * CHUNK + row];
            } else if (((row >> (l - 1u)) & 1u) == 1u) {
                let start = (row >> l) << l;
                for (var j = start; j < start + (1u << (l - 1u)); j++) {
                    sum += tile[row * CHUNK + j];
                }
            }
            dlam[lam_idx(t0 + row, h, l)] = sum;
        }
    }
    workgroupBarrier();

    // dq = B K, dk = Bᵀ Q with B = dP E Λ (B, then A, in `tile`): per 64 columns of dk, each
    // thread a 4×4 block (rows ty·4.., columns tx·4..); the chunk rows of K and Q in 16-row
    // slices staged in `stg` ([row][column]).
    store(TILE_DQK, t0, n, h, i0, j0, s.a, p.a);
    store(TILE_DQK, t0, n, h, i0 + 1u, j0, s.b, p.b);
    store(TILE_DQK, t0, n, h, i0 + 2u, j0, s.c, p.c);
    store(TILE_DQK, t0, n, h, i0 + 3u, j0, s.d, p.d);
    workgroupBarrier();
    for (var c0 = 0u; c0 < P.dk; c0 += CHUNK) {
        var oq = zero16();
        var ok = zero16();
        for (var r0 = 0u; r0 < CHUNK; r0 += KS) {
            for (var x = 0u; x < 4u; x++) {
                let idx = lid + x * 256u;
                let kk = idx / CHUNK;
                let cc = idx % CHUNK;
                var kv = 0.0;
                var qv = 0.0;
                if (r0 + kk < n && c0 + cc < P.dk) {
                    let at = qk_row(t0 + r0 + kk, h) + c0 + cc;
                    kv = k[at];
                    qv = q[at];
                }
                put(kk * SS + cc, kv);
                put(RIGHT + kk * SS + cc, qv);
            }
            workgroupBarrier();
            for (var kk = 0u; kk < KS; kk++) {
                let r = r0 + kk;
                let kv = stg4(kk * SS + tx * 4u);
                let qv = stg4(RIGHT + kk * SS + tx * 4u);
                // B is lower triangular (j <= i): skipping its zero blocks changes nothing.
                if (r <= ty * 4u + 3u) {
                    let bc = tile_col4(ty * 4u, r);
                    oq = add_outer(oq, bc, kv);
                }
                if (r >= ty * 4u) {
                    let br = tile_row4(r, ty * 4u);
                    ok = add_outer(ok, br, qv);
                }
            }
            workgroupBarrier();
        }
        for (var i = 0u; i < 4u; i++) {
            let r = ty * 4u + i;
            if (r < n) {
                let base = qk_row(t0 + r, h) + c0 + tx * 4u;
                let vq = quad_of(oq, i);
                let vk = quad_of(ok, i);
                for (var x = 0u; x < 4u; x++) {
                    if (c0 + tx * 4u + x < P.dk) {
                        dq[base + x] = vq[x];
                        dk[base + x] = vk[x];
                    }
                }
            }
        }
    }
    workgroupBarrier();

    // dv = Aᵀ dO with A = S E Λ, the same way.
    store(TILE_DV, t0, n, h, i0, j0, s.a, p.a);
    store(TILE_DV, t0, n, h, i0 + 1u, j0, s.b, p.b);
    store(TILE_DV, t0, n, h, i0 + 2u, j0, s.c, p.c);
    store(TILE_DV, t0, n, h, i0 + 3u, j0, s.d, p.d);
    workgroupBarrier();
    for (var c0 = 0u; c0 < P.dv; c0 += CHUNK) {
        var ov = zero16();
        for (var r0 = 0u; r0 < CHUNK; r0 += KS) {
            for (var x = 0u; x < 4u; x++) {
                let idx = lid + x * 256u;
                let kk = idx / CHUNK;
                let cc = idx % CHUNK;
                var dv_in = 0.0;
                if (r0 + kk < n && c0 + cc < P.dv) {
                    dv_in = d_o[vrow(t0 + r0 + kk, h) + c0 + cc];
                }
                put(kk * SS + cc, dv_in);
            }
            workgroupBarrier();
            for (var kk = 0u; kk < KS; kk++) {
                let r = r0 + kk;
                let dov = stg4(kk * SS + tx * 4u);
                if (r >= ty * 4u) {
                    let ar = tile_row4(r, ty * 4u);
                    ov = add_outer(ov, ar, dov);
                }
            }
            workgroupBarrier();
        }
        for (var i = 0u; i < 4u; i++) {
            let r = ty * 4u + i;
            if (r < n) {
                let base = vrow(t0 + r, h) + c0 + tx * 4u;
                let vv = quad_of(ov, i);
                for (var x = 0u; x < 4u; x++) {
                    if (c0 + tx * 4u + x < P.dv) {
                        dv[base + x] = vv[x];
                    }
                }
            }
        }
    }
}
