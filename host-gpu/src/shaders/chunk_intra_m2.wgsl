// Intra-chunk part, Mamba-2 form: A_ij = (q_i·k_j) exp(γ_i − γ_j) λ_i[min(lev(i,j), top)] for
// j <= i, o_c = A V_c. One workgroup (256 threads) per (chunk, head); A lives in workgroup memory.
// This kernel is the first writer of `o`.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> lam: array<f32>;
@group(0) @binding(6) var<storage, read_write> o: array<f32>;

var<workgroup> a_tile: array<f32, 4096>;
var<workgroup> gs: array<f32, 64>;

// Sixteen rows r0..r0+15 of a_tile · V at column d (a_tile lower triangular, so j < min(n, r0 + 16)),
// as four vec4 (rows r0..r0+3, ...). One coalesced v load per row j serves 16 rows; j is unrolled
// by 4 so that four loads are in flight.
struct Rows16 {
    a: vec4<f32>,
    b: vec4<f32>,
    c: vec4<f32>,
    d: vec4<f32>,
}

fn tile4(i: u32, j: u32) -> vec4<f32> {
    let b = i * C + j;
    return vec4<f32>(a_tile[b], a_tile[b + 1u], a_tile[b + 2u], a_tile[b + 3u]);
}

fn col4(i: u32, j: u32) -> vec4<f32> {
    return vec4<f32>(a_tile[i * C + j], a_tile[(i + 1u) * C + j], a_tile[(i + 2u) * C + j], a_tile[(i + 3u) * C + j]);
}

fn tile_times_v(t0: u32, n: u32, h: u32, r0: u32, d: u32) -> Rows16 {
    var o = Rows16(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    let jmax = min(n, r0 + 16u);
    let stride = P.heads * P.dv;
    let base = (t0 * P.heads + h) * P.dv + d;
    var j = 0u;
    for (; j + 3u < jmax; j += 4u) {
        let x = vec4<f32>(v[base + j * stride], v[base + (j + 1u) * stride],
                          v[base + (j + 2u) * stride], v[base + (j + 3u) * stride]);
        o.a += vec4<f32>(dot(tile4(r0, j), x), dot(tile4(r0 + 1u, j), x),
                         dot(tile4(r0 + 2u, j), x), dot(tile4(r0 + 3u, j), x));
        o.b += vec4<f32>(dot(tile4(r0 + 4u, j), x), dot(tile4(r0 + 5u, j), x),
                         dot(tile4(r0 + 6u, j), x), dot(tile4(r0 + 7u, j), x));
        o.c += vec4<f32>(dot(tile4(r0 + 8u, j), x), dot(tile4(r0 + 9u, j), x),
                         dot(tile4(r0 + 10u, j), x), dot(tile4(r0 + 11u, j), x));
        o.d += vec4<f32>(dot(tile4(r0 + 12u, j), x), dot(tile4(r0 + 13u, j), x),
                         dot(tile4(r0 + 14u, j), x), dot(tile4(r0 + 15u, j), x));
    }
    for (; j < jmax; j++) {
        let x = v[base + j * stride];
        o.a += x * col4(r0, j);
        o.b += x * col4(r0 + 4u, j);
        o.c += x * col4(r0 + 8u, j);
        o.d += x * col4(r0 + 12u, j);
    }
    return o;
}

fn row_of(o: Rows16, r: u32) -> f32 {
    let q = r / 4u;
    let e = r % 4u;
    if (q == 0u) {
        return o.a[e];
    } else if (q == 1u) {
        return o.b[e];
    } else if (q == 2u) {
        return o.c[e];
    }
    return o.d[e];
}

// a_tile[i][j0..j0+3] = dots · exp(γ_i − γ_j) · λ_i[col(i, j)] where j <= i < n, else 0.
fn store_scores(t0: u32, n: u32, h: u32, i: u32, j0: u32, dots: vec4<f32>) {
    for (var s = 0u; s < 4u; s++) {
        let j = j0 + s;
        var val = 0.0;
        if (j <= i && i < n) {
            // Mask before exp: the exponent is <= 0.
            val = dots[s] * exp(gs[i] - gs[j]) * lam[lam_idx(t0 + i, h, level_col(i, j))];
        }
        a_tile[i * C + j] = val;
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

    // Each thread: a 4x4 block of the 64x64 score tile (rows i0.., columns j0..), in four vec4
    // accumulators (no private arrays: drivers may put those in slow local memory).
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    if (j0 <= i0 + 3u && i0 < n) {
        let q0 = qk_row(t0 + min(i0, n - 1u), h);
        let q1 = qk_row(t0 + min(i0 + 1u, n - 1u), h);
        let q2 = qk_row(t0 + min(i0 + 2u, n - 1u), h);
        let q3 = qk_row(t0 + min(i0 + 3u, n - 1u), h);
        let k0 = qk_row(t0 + min(j0, n - 1u), h);
        let k1 = qk_row(t0 + min(j0 + 1u, n - 1u), h);
        let k2 = qk_row(t0 + min(j0 + 2u, n - 1u), h);
        let k3 = qk_row(t0 + min(j0 + 3u, n - 1u), h);
        for (var kk = 0u; kk < P.dk; kk++) {
            let kv = vec4<f32>(k[k0 + kk], k[k1 + kk], k[k2 + kk], k[k3 + kk]);
            acc0 += q[q0 + kk] * kv;
            acc1 += q[q1 + kk] * kv;
            acc2 += q[q2 + kk] * kv;
            acc3 += q[q3 + kk] * kv;
        }
    }
    store_scores(t0, n, h, i0, j0, acc0);
    store_scores(t0, n, h, i0 + 1u, j0, acc1);
    store_scores(t0, n, h, i0 + 2u, j0, acc2);
    store_scores(t0, n, h, i0 + 3u, j0, acc3);
    workgroupBarrier();

    // o = A V: thread = (column d, group of 16 rows).
    let r0 = (lid / 64u) * 16u;
    if (r0 < n) {
        for (var d = lid % 64u; d < P.dv; d += 64u) {
            let rows = tile_times_v(t0, n, h, r0, d);
            for (var r = 0u; r < 16u; r++) {
                if (r0 + r < n) {
                    o[((t0 + r0 + r) * P.heads + h) * P.dv + d] = row_of(rows, r);
                }
            }
        }
    }
}
