// GDN backward, step 6: per (chunk, block of RB rows, head), dq, dk and dv from the tiles of step 5 and the
// level gradients (gpack):
//   dq_i = e^{γ_i} dq̃_i + Σ_{l ≤ i} dS1_il k_l
//   dk_j = Σ_{i ≥ j} dS1_ij q_i + β_j Σ_{i ≥ j} e^{γ_i} (A_w,ij dW̃_i − M_ij dq̃_i)
//          + e^{Γ − γ_j} dK̃_j + Σ_i Z_ij k_i
//   dv_j = Σ_{i ≥ j} (A_ij dO_i + (A_u diag β)_ij dU_i)

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> gam: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
@group(0) @binding(6) var<storage, read> gpack: array<f32>;
@group(0) @binding(7) var<storage, read> tiles: array<f32>;
@group(0) @binding(8) var<storage, read_write> dq: array<f32>;
@group(0) @binding(9) var<storage, read_write> dk: array<f32>;
@group(0) @binding(10) var<storage, read_write> dv: array<f32>;

const RB: u32 = 16u; // rows per workgroup (RB_ROWS in op_gdn.rs)

fn tl(base: u32, slot: u32, i: u32, j: u32) -> f32 {
    return tiles[base + slot * TILE + i * C + j];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x / (C / RB);
    let h = head0() + wg.y;
    let t0 = c * C;
    let n = chunk_rows(c);
    // Rows r0..r0+nr of the chunk (none when the partial last chunk ends before r0).
    let r0 = (wg.x % (C / RB)) * RB;
    let nr = min(RB, max(n, r0) - r0);
    let base = ch_base(c, h);
    let g_last = gam[(t0 + n - 1u) * P.heads + h];
    for (var e = lid; e < nr * P.dk; e += 256u) {
        let i = r0 + e / P.dk;
        let x = e % P.dk;
        let ti = t0 + i;
        let gi = gam[ti * P.heads + h];
        var a = exp(gi) * gpack[grow(ti, h) + x];
        for (var l = 0u; l <= i; l++) {
            a += tl(base, T_DS1, i, l) * k[qk_row(t0 + l, h) + x];
        }
        dq[qk_row(ti, h) + x] = a;

        // dk of row j = i.
        let j = i;
        var s1 = 0.0;
        var s2 = 0.0;
        for (var r = j; r < n; r++) {
            let tr = t0 + r;
            let g = grow(tr, h);
            s1 += tl(base, T_DS1, r, j) * q[qk_row(tr, h) + x];
            s2 += exp(gam[tr * P.heads + h])
                * (tl(base, T_T, r, j) * gpack[g + 2u * P.dk + x] - tl(base, T_M, r, j) * gpack[g + x]);
        }
        var s3 = 0.0;
        for (var r = 0u; r < n; r++) {
            s3 += tl(base, T_Z, r, j) * k[qk_row(t0 + r, h) + x];
        }
        dk[qk_row(ti, h) + x] = s1 + beta[ti * P.heads + h] * s2
            + exp(g_last - gi) * gpack[grow(ti, h) + P.dk + x] + s3;
    }
    for (var e = lid; e < nr * P.dv; e += 256u) {
        let j = r0 + e / P.dv;
        let d = e % P.dv;
        var s = 0.0;
        for (var r = j; r < n; r++) {
            let tr = t0 + r;
            s += tl(base, T_A, r, j) * dout[(tr * P.heads + h) * P.dv + d]
                + tl(base, T_TU, r, j) * gpack[grow(tr, h) + 3u * P.dk + d];
        }
        dv[((t0 + j) * P.heads + h) * P.dv + d] = s;
    }
}
