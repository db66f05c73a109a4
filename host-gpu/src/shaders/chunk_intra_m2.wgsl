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

    // Each thread: a 4x4 block of the 64x64 score tile.
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;
    var acc: array<f32, 16>;
    for (var e = 0u; e < 16u; e++) {
        acc[e] = 0.0;
    }
    if (j0 <= i0 + 3u && i0 < n) {
        var qr: array<u32, 4>;
        var kr: array<u32, 4>;
        for (var r = 0u; r < 4u; r++) {
            qr[r] = qk_row(t0 + min(i0 + r, n - 1u), h);
            kr[r] = qk_row(t0 + min(j0 + r, n - 1u), h);
        }
        for (var kk = 0u; kk < P.dk; kk++) {
            var qv: array<f32, 4>;
            var kv: array<f32, 4>;
            for (var r = 0u; r < 4u; r++) {
                qv[r] = q[qr[r] + kk];
                kv[r] = k[kr[r] + kk];
            }
            for (var r = 0u; r < 4u; r++) {
                for (var s = 0u; s < 4u; s++) {
                    acc[r * 4u + s] += qv[r] * kv[s];
                }
            }
        }
    }
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            let i = i0 + r;
            let j = j0 + s;
            var val = 0.0;
            if (j <= i && i < n) {
                // Mask before exp: the exponent is <= 0.
                val = acc[r * 4u + s] * exp(gs[i] - gs[j]) * lam[lam_idx(t0 + i, h, level_col(i, j))];
            }
            a_tile[i * C + j] = val;
        }
    }
    workgroupBarrier();

    // o = A V: thread = (row, quarter of a 16-column block).
    let row = lid / 4u;
    let part = lid % 4u;
    if (row < n) {
        for (var d0 = part * 4u; d0 < P.dv; d0 += 16u) {
            let nd = min(4u, P.dv - d0);
            var s4 = vec4<f32>(0.0);
            for (var j = 0u; j <= row; j++) {
                let a = a_tile[row * C + j];
                let vb = ((t0 + j) * P.heads + h) * P.dv + d0;
                for (var e = 0u; e < nd; e++) {
                    s4[e] += a * v[vb + e];
                }
            }
            let ob = ((t0 + row) * P.heads + h) * P.dv + d0;
            for (var e = 0u; e < nd; e++) {
                o[ob + e] = s4[e];
            }
        }
    }
}
