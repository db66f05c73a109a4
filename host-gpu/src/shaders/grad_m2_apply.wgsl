// Inter-chunk gradients of one chunk's rows, all levels in order (no atomics). `MODE` is
// prepended by op_m2.rs:
//   0: dq_i += Σ_{m: c reads m} w_i X dO_i,     w_i = λ_i[7 + m] exp(γ_i + dec)   (A = dO)
//   1: dk_j += Σ_{m: c is a source} u_j Y v_j,   u_j = exp((Γ_c − γ_j) + dec)      (A = v)
//   2: dv_j += Σ_{m: c is a source} u_j Yᵀ k_j                                     (A = k)
// X and Y of the chunk's group at level m come from grad_m2_xy.wgsl. Workgroup = (64 output
// columns, chunk, head); thread = (column, 16 rows). Adds to what the intra kernel wrote.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a_in: array<f32>;
@group(0) @binding(2) var<storage, read> xy: array<f32>;
@group(0) @binding(3) var<storage, read> gam: array<f32>;
@group(0) @binding(4) var<storage, read> lam: array<f32>;
@group(0) @binding(5) var<storage, read> dec: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let out_w = select(P.dk, P.dv, MODE == 2u);
    let red_w = select(P.dv, P.dk, MODE == 2u);
    let col = wg.x * C + lid % C;
    let r0 = (lid / C) * 16u;
    let c = wg.y;
    let h = wg.z;
    let t0 = c * C;
    let n = min(C, P.t - t0);
    if (col >= out_w || r0 >= n) {
        return;
    }
    let want = select(ROLE_SOURCE, ROLE_READER, MODE == 0u);
    let which = select(1u, 0u, MODE == 0u);
    // Tokens of rows r0..r0+15 in four vec4 (clamped; masked on the write). Accumulators are
    // vec4 too, not private arrays (drivers may put those in slow local memory).
    let tok0 = t0 + min(vec4<u32>(r0, r0 + 1u, r0 + 2u, r0 + 3u), vec4<u32>(n - 1u));
    let tok1 = t0 + min(vec4<u32>(r0 + 4u, r0 + 5u, r0 + 6u, r0 + 7u), vec4<u32>(n - 1u));
    let tok2 = t0 + min(vec4<u32>(r0 + 8u, r0 + 9u, r0 + 10u, r0 + 11u), vec4<u32>(n - 1u));
    let tok3 = t0 + min(vec4<u32>(r0 + 12u, r0 + 13u, r0 + 14u, r0 + 15u), vec4<u32>(n - 1u));
    let hh = vec4<u32>(h);
    let ab0 = (tok0 * P.heads + hh) * red_w;
    let ab1 = (tok1 * P.heads + hh) * red_w;
    let ab2 = (tok2 * P.heads + hh) * red_w;
    let ab3 = (tok3 * P.heads + hh) * red_w;
    var tot0 = vec4<f32>(0.0);
    var tot1 = vec4<f32>(0.0);
    var tot2 = vec4<f32>(0.0);
    var tot3 = vec4<f32>(0.0);
    for (var m = 0u; m < inter_levels(); m++) {
        if (chunk_role(m, c) != want) {
            continue;
        }
        let mb = xy_base(which, pair_of(m, c), h);
        var p0 = vec4<f32>(0.0);
        var p1 = vec4<f32>(0.0);
        var p2 = vec4<f32>(0.0);
        var p3 = vec4<f32>(0.0);
        for (var e = 0u; e < red_w; e++) {
            var mv: f32;
            if (MODE == 2u) {
                mv = xy[mb + e * P.dv + col];
            } else {
                mv = xy[mb + col * P.dv + e];
            }
            p0 += mv * vec4<f32>(a_in[ab0.x + e], a_in[ab0.y + e], a_in[ab0.z + e], a_in[ab0.w + e]);
            p1 += mv * vec4<f32>(a_in[ab1.x + e], a_in[ab1.y + e], a_in[ab1.z + e], a_in[ab1.w + e]);
            p2 += mv * vec4<f32>(a_in[ab2.x + e], a_in[ab2.y + e], a_in[ab2.z + e], a_in[ab2.w + e]);
            p3 += mv * vec4<f32>(a_in[ab3.x + e], a_in[ab3.y + e], a_in[ab3.z + e], a_in[ab3.w + e]);
        }
        let d = dec[dec_idx(m, c, h)];
        tot0 += row_weights(m, c, h, tok0, d) * p0;
        tot1 += row_weights(m, c, h, tok1, d) * p1;
        tot2 += row_weights(m, c, h, tok2, d) * p2;
        tot3 += row_weights(m, c, h, tok3, d) * p3;
    }
    store4(tok0, r0, n, h, out_w, col, tot0);
    store4(tok1, r0 + 4u, n, h, out_w, col, tot1);
    store4(tok2, r0 + 8u, n, h, out_w, col, tot2);
    store4(tok3, r0 + 12u, n, h, out_w, col, tot3);
}

// Weights of four rows at level m: readers (dq) w = λ[7 + m] exp(γ + dec), sources
// u = exp((Γ_c − γ) + dec).
fn row_weights(m: u32, c: u32, h: u32, tok: vec4<u32>, d: f32) -> vec4<f32> {
    let gl = vec4<f32>(gam[tok.x * P.heads + h], gam[tok.y * P.heads + h], gam[tok.z * P.heads + h], gam[tok.w * P.heads + h]);
    if (MODE == 0u) {
        let l = vec4<f32>(lam[lam_idx(tok.x, h, C0P1 + m)], lam[lam_idx(tok.y, h, C0P1 + m)],
                          lam[lam_idx(tok.z, h, C0P1 + m)], lam[lam_idx(tok.w, h, C0P1 + m)]);
        return l * exp(gl + d);
    }
    return exp((chunk_total(c, h) - gl) + d);
}

// out[row, col] += acc for the four rows r..r+3 that lie inside the chunk.
fn store4(tok: vec4<u32>, r: u32, n: u32, h: u32, out_w: u32, col: u32, acc: vec4<f32>) {
    for (var x = 0u; x < 4u; x++) {
        if (r + x < n) {
            let at = (tok[x] * P.heads + h) * out_w + col;
            out[at] += acc[x];
        }
    }
}
