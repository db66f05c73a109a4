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
    // Rows r0..r0+15 (clamped; masked on the write).
    var rows: array<u32, 16>;
    for (var r = 0u; r < 16u; r++) {
        rows[r] = t0 + min(r0 + r, n - 1u);
    }
    var total: array<f32, 16>;
    for (var m = 0u; m < inter_levels(); m++) {
        if (chunk_role(m, c) != want) {
            continue;
        }
        let mb = xy_base(which, pair_of(m, c), h);
        var part: array<f32, 16>;
        for (var e = 0u; e < red_w; e++) {
            var mv: f32;
            if (MODE == 2u) {
                mv = xy[mb + e * P.dv + col];
            } else {
                mv = xy[mb + col * P.dv + e];
            }
            for (var r = 0u; r < 16u; r++) {
                part[r] += a_in[(rows[r] * P.heads + h) * red_w + e] * mv;
            }
        }
        let d = dec[dec_idx(m, c, h)];
        for (var r = 0u; r < 16u; r++) {
            let gl = gam[rows[r] * P.heads + h];
            var w: f32;
            if (MODE == 0u) {
                w = lam[lam_idx(rows[r], h, C0P1 + m)] * exp(gl + d);
            } else {
                w = exp((chunk_total(c, h) - gl) + d);
            }
            total[r] += w * part[r];
        }
    }
    for (var r = 0u; r < 16u; r++) {
        if (r0 + r < n) {
            let at = (rows[r] * P.heads + h) * out_w + col;
            out[at] += total[r];
        }
    }
}
