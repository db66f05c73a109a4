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
    load_gammas(t0, n, h, lid);
    workgroupBarrier();

    // Each thread: a 4x4 block of the 64x64 score tile (rows i0.., columns j0..), in the vec4
    // accumulators of a Rows16.
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;
    var acc = zero16();
    if (j0 <= i0 + 3u && i0 < n) {
        let qr = qk_rows4(t0, n, h, i0);
        let kr = qk_rows4(t0, n, h, j0);
        for (var kk = 0u; kk < P.dk; kk++) {
            let kv = vec4<f32>(k[kr.x + kk], k[kr.y + kk], k[kr.z + kk], k[kr.w + kk]);
            let qv = vec4<f32>(q[qr.x + kk], q[qr.y + kk], q[qr.z + kk], q[qr.w + kk]);
            acc = add_outer(acc, qv, kv);
        }
    }
    store_scores(t0, n, h, i0, j0, acc.a);
    store_scores(t0, n, h, i0 + 1u, j0, acc.b);
    store_scores(t0, n, h, i0 + 2u, j0, acc.c);
    store_scores(t0, n, h, i0 + 3u, j0, acc.d);
    workgroupBarrier();

    // o = A V: thread = (column d, group of 16 rows).
    let r0 = (lid / 64u) * 16u;
    if (r0 < n) {
        for (var d = lid % 64u; d < P.dv; d += 64u) {
            let rows = a_tile_times_v(t0, n, h, r0, d);
            for (var r = 0u; r < 16u; r++) {
                if (r0 + r < n) {
                    o[((t0 + r0 + r) * P.heads + h) * P.dv + d] = row_of(rows, r);
                }
            }
        }
    }
}
