// Intra-chunk backward, Mamba-2 form (spec §7.4). For pairs j <= i inside one chunk, with
// S = q_i·k_j, dP = dO_i·v_j, E = exp(γ_i − γ_j) (mask before exp) and Λ = λ_i[lev(i, j)]:
//   dλ_i[ℓ] = Σ_{lev(i,j)=ℓ} dP S E   (levels 0..6: one sum over a contiguous range per row),
//   dq_i = Σ_j dP E Λ k_j,  dk_j = Σ_i dP E Λ q_i,  dv_j = Σ_i S E Λ dO_i.
// One workgroup (256 threads) per (chunk, head); the three C×C tiles take turns in one
// workgroup array (16 KiB). First writer of dq, dk, dv and of dλ columns 0..6.

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
var<workgroup> gs: array<f32, 64>;

const TILE_DLAM: u32 = 0u; // dP S E
const TILE_DQK: u32 = 1u;  // dP E Λ
const TILE_DV: u32 = 2u;   // S E Λ

struct Rows16 {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

fn zero16() -> Rows16 {
    return Rows16(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
}

// tile[i..i+4][j] and tile[i][j..j+4].
fn col4(i: u32, j: u32) -> vec4<f32> {
    return vec4<f32>(tile[i * C + j], tile[(i + 1u) * C + j], tile[(i + 2u) * C + j], tile[(i + 3u) * C + j]);
}

fn row4(i: u32, j: u32) -> vec4<f32> {
    let b = i * C + j;
    return vec4<f32>(tile[b], tile[b + 1u], tile[b + 2u], tile[b + 3u]);
}

// o[r] += x · tile[r0 + r][j] (rows of the tile times a column entry x_j).
fn add_rows(o: Rows16, x: f32, r0: u32, j: u32) -> Rows16 {
    return Rows16(o.a + x * col4(r0, j), o.b + x * col4(r0 + 4u, j), o.c + x * col4(r0 + 8u, j), o.d + x * col4(r0 + 12u, j));
}

// o[r] += x · tile[i][r0 + r] (columns of the tile times a row entry x_i).
fn add_cols(o: Rows16, x: f32, i: u32, r0: u32) -> Rows16 {
    return Rows16(o.a + x * row4(i, r0), o.b + x * row4(i, r0 + 4u), o.c + x * row4(i, r0 + 8u), o.d + x * row4(i, r0 + 12u));
}

fn row_of(o: Rows16, r: u32) -> f32 {
    let g = r / 4u;
    let e = r % 4u;
    if (g == 0u) {
        return o.a[e];
    } else if (g == 1u) {
        return o.b[e];
    } else if (g == 2u) {
        return o.c[e];
    }
    return o.d[e];
}

fn vrow(t: u32, h: u32) -> u32 {
    return (t * P.heads + h) * P.dv;
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
        tile[i * C + j] = val;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = wg.y;
    let t0 = c * C;
    let n = min(C, P.t - t0);
    if (lid < C) {
        var x = 0.0;
        if (lid < n) {
            x = gam[(t0 + lid) * P.heads + h];
        }
        gs[lid] = x;
    }
    workgroupBarrier();

    // Each thread: a 4x4 block (rows i0.., columns j0..) of S = Q Kᵀ and dP = dO Vᵀ.
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;
    var s0 = vec4<f32>(0.0);
    var s1 = vec4<f32>(0.0);
    var s2 = vec4<f32>(0.0);
    var s3 = vec4<f32>(0.0);
    var p0 = vec4<f32>(0.0);
    var p1 = vec4<f32>(0.0);
    var p2 = vec4<f32>(0.0);
    var p3 = vec4<f32>(0.0);
    if (j0 <= i0 + 3u && i0 < n) {
        let ti0 = t0 + min(i0, n - 1u);
        let ti1 = t0 + min(i0 + 1u, n - 1u);
        let ti2 = t0 + min(i0 + 2u, n - 1u);
        let ti3 = t0 + min(i0 + 3u, n - 1u);
        let tj0 = t0 + min(j0, n - 1u);
        let tj1 = t0 + min(j0 + 1u, n - 1u);
        let tj2 = t0 + min(j0 + 2u, n - 1u);
        let tj3 = t0 + min(j0 + 3u, n - 1u);
        let q0 = qk_row(ti0, h);
        let q1 = qk_row(ti1, h);
        let q2 = qk_row(ti2, h);
        let q3 = qk_row(ti3, h);
        let k0 = qk_row(tj0, h);
        let k1 = qk_row(tj1, h);
        let k2 = qk_row(tj2, h);
        let k3 = qk_row(tj3, h);
        for (var a = 0u; a < P.dk; a++) {
            let kv = vec4<f32>(k[k0 + a], k[k1 + a], k[k2 + a], k[k3 + a]);
            s0 += q[q0 + a] * kv;
            s1 += q[q1 + a] * kv;
            s2 += q[q2 + a] * kv;
            s3 += q[q3 + a] * kv;
        }
        let o0 = vrow(ti0, h);
        let o1 = vrow(ti1, h);
        let o2 = vrow(ti2, h);
        let o3 = vrow(ti3, h);
        let v0 = vrow(tj0, h);
        let v1 = vrow(tj1, h);
        let v2 = vrow(tj2, h);
        let v3 = vrow(tj3, h);
        for (var e = 0u; e < P.dv; e++) {
            let vv = vec4<f32>(v[v0 + e], v[v1 + e], v[v2 + e], v[v3 + e]);
            p0 += d_o[o0 + e] * vv;
            p1 += d_o[o1 + e] * vv;
            p2 += d_o[o2 + e] * vv;
            p3 += d_o[o3 + e] * vv;
        }
    }

    // dλ, levels 0..6: row i's level-ℓ pairs are j = i (ℓ = 0) or the 2^(ℓ−1) columns from
    // (i >> ℓ) << ℓ when bit ℓ−1 of i is set (spec §2.2); an empty bucket gives exactly 0.
    store(TILE_DLAM, t0, n, h, i0, j0, s0, p0);
    store(TILE_DLAM, t0, n, h, i0 + 1u, j0, s1, p1);
    store(TILE_DLAM, t0, n, h, i0 + 2u, j0, s2, p2);
    store(TILE_DLAM, t0, n, h, i0 + 3u, j0, s3, p3);
    workgroupBarrier();
    let row = lid % C;
    for (var l = lid / C; l < min(C0P1, P.lam_cols); l += 4u) {
        if (row < n) {
            var sum = 0.0;
            if (l == 0u) {
                sum = tile[row * C + row];
            } else if (((row >> (l - 1u)) & 1u) == 1u) {
                let start = (row >> l) << l;
                for (var j = start; j < start + (1u << (l - 1u)); j++) {
                    sum += tile[row * C + j];
                }
            }
            dlam[lam_idx(t0 + row, h, l)] = sum;
        }
    }
    workgroupBarrier();

    // dq = B K, dk = Bᵀ Q with B = dP E Λ: thread = (column, 16 rows).
    store(TILE_DQK, t0, n, h, i0, j0, s0, p0);
    store(TILE_DQK, t0, n, h, i0 + 1u, j0, s1, p1);
    store(TILE_DQK, t0, n, h, i0 + 2u, j0, s2, p2);
    store(TILE_DQK, t0, n, h, i0 + 3u, j0, s3, p3);
    workgroupBarrier();
    let r0 = (lid / C) * 16u;
    if (r0 < n) {
        for (var a = lid % C; a < P.dk; a += C) {
            var oq = zero16();
            for (var j = 0u; j < min(n, r0 + 16u); j++) {
                oq = add_rows(oq, k[qk_row(t0 + j, h) + a], r0, j);
            }
            var ok = zero16();
            for (var i = r0; i < n; i++) {
                ok = add_cols(ok, q[qk_row(t0 + i, h) + a], i, r0);
            }
            for (var r = 0u; r < 16u; r++) {
                if (r0 + r < n) {
                    let at = qk_row(t0 + r0 + r, h) + a;
                    dq[at] = row_of(oq, r);
                    dk[at] = row_of(ok, r);
                }
            }
        }
    }
    workgroupBarrier();

    // dv = Aᵀ dO with A = S E Λ.
    store(TILE_DV, t0, n, h, i0, j0, s0, p0);
    store(TILE_DV, t0, n, h, i0 + 1u, j0, s1, p1);
    store(TILE_DV, t0, n, h, i0 + 2u, j0, s2, p2);
    store(TILE_DV, t0, n, h, i0 + 3u, j0, s3, p3);
    workgroupBarrier();
    if (r0 < n) {
        for (var e = lid % C; e < P.dv; e += C) {
            var ov = zero16();
            for (var i = r0; i < n; i++) {
                ov = add_cols(ov, d_o[vrow(t0 + i, h) + e], i, r0);
            }
            for (var r = 0u; r < 16u; r++) {
                if (r0 + r < n) {
                    dv[vrow(t0 + r0 + r, h) + e] = row_of(ov, r);
                }
            }
        }
    }
}
