// Intra-chunk part and per-chunk WY/UT quantities, Gated DeltaNet form (spec §7.2).
// One workgroup (256 threads) per (chunk, head). Workgroup memory: two 64x64 tiles (32 KiB).
//   tm: P = StrictLower(diag(β) K Kᵀ), then in place A_w = (I + P)⁻¹ (forward substitution)
//   sm: S1 = Tril(Q Kᵀ), then in place M = S1 A_w, then the masked attention tile
// Writes: o (intra part; first writer), and for the state scan
//   qt_i = e^{γ_i} (q_i − Σ_j M_ij β_j k_j)      (effective query)
//   wt_i = e^{γ_i} Σ_j A_w,ij β_j k_j            (W̃)
//   kt_j = e^{Γ − γ_j} k_j                       (K̃)
//   u_i  = Σ_j e^{γ_i − γ_j} A_w,ij β_j v_j      (U = A_u diag(β) V)
// Every exponent is <= 0 (local cumsums, masked before exp).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> beta: array<f32>;
@group(0) @binding(6) var<storage, read> lam: array<f32>;
@group(0) @binding(7) var<storage, read_write> o: array<f32>;
@group(0) @binding(8) var<storage, read_write> qt: array<f32>;
@group(0) @binding(9) var<storage, read_write> kt: array<f32>;
@group(0) @binding(10) var<storage, read_write> wt: array<f32>;
@group(0) @binding(11) var<storage, read_write> u: array<f32>;

var<workgroup> sm: array<f32, 4096>;
var<workgroup> tm: array<f32, 4096>;

fn gm(t0: u32, i: u32, h: u32) -> f32 {
    return gam[(t0 + i) * P.heads + h];
}

fn bt(t0: u32, i: u32, h: u32) -> f32 {
    return beta[(t0 + i) * P.heads + h];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = wg.y;
    let t0 = c * C;
    let n = min(C, P.t - t0);
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;

    // 1. S1 = Tril(Q Kᵀ) and P = StrictLower(diag(β) K Kᵀ), 4x4 blocks per thread.
    var aq: array<f32, 16>;
    var ak: array<f32, 16>;
    for (var e = 0u; e < 16u; e++) {
        aq[e] = 0.0;
        ak[e] = 0.0;
    }
    if (j0 <= i0 + 3u && i0 < n) {
        var qr: array<u32, 4>;
        var kr: array<u32, 4>;
        var kc: array<u32, 4>;
        for (var r = 0u; r < 4u; r++) {
            qr[r] = qk_row(t0 + min(i0 + r, n - 1u), h);
            kr[r] = qr[r];
            kc[r] = qk_row(t0 + min(j0 + r, n - 1u), h);
        }
        for (var kk = 0u; kk < P.dk; kk++) {
            var qv: array<f32, 4>;
            var kv: array<f32, 4>;
            var kw: array<f32, 4>;
            for (var r = 0u; r < 4u; r++) {
                qv[r] = q[qr[r] + kk];
                kv[r] = k[kr[r] + kk];
                kw[r] = k[kc[r] + kk];
            }
            for (var r = 0u; r < 4u; r++) {
                for (var s = 0u; s < 4u; s++) {
                    aq[r * 4u + s] += qv[r] * kw[s];
                    ak[r * 4u + s] += kv[r] * kw[s];
                }
            }
        }
    }
    for (var r = 0u; r < 4u; r++) {
        let i = i0 + r;
        var b_i = 0.0;
        if (i < n) {
            b_i = bt(t0, i, h);
        }
        for (var s = 0u; s < 4u; s++) {
            let j = j0 + s;
            var sv = 0.0;
            var pv = 0.0;
            if (j <= i && i < n) {
                sv = aq[r * 4u + s];
            }
            if (j < i && i < n) {
                pv = b_i * ak[r * 4u + s];
            }
            sm[i * C + j] = sv;
            tm[i * C + j] = pv;
        }
    }
    workgroupBarrier();

    // 2. A_w = (I + P)⁻¹ in place, row by row: T_i = e_i − Σ_{l<i} P_il T_l (T_lj = 0 for l < j).
    for (var i = 0u; i < C; i++) {
        var val = 0.0;
        if (lid < C) {
            let j = lid;
            val = select(0.0, 1.0, i == j);
            for (var l = j; l < i; l++) {
                val -= tm[i * C + l] * tm[l * C + j];
            }
        }
        workgroupBarrier();
        if (lid < C) {
            tm[i * C + lid] = val;
        }
        workgroupBarrier();
    }

    // 3. M = S1 A_w (both lower triangular): M_ij = Σ_{l=j..i} S1_il T_lj.
    var mv: array<f32, 16>;
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            let i = i0 + r;
            let j = j0 + s;
            var acc = 0.0;
            if (j <= i) {
                for (var l = j; l <= i; l++) {
                    acc += sm[i * C + l] * tm[l * C + j];
                }
            }
            mv[r * 4u + s] = acc;
        }
    }
    workgroupBarrier();
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            sm[(i0 + r) * C + j0 + s] = mv[r * 4u + s];
        }
    }
    workgroupBarrier();

    // 4. Per-row vectors for the state scan: thread = (row, quarter of the columns).
    let row = lid / 4u;
    let part = lid % 4u;
    if (row < n) {
        let g_row = gm(t0, row, h);
        let g_last = gm(t0, n - 1u, h);
        let e_row = exp(g_row);
        let e_k = exp(g_last - g_row);
        let orow = ((t0 + row) * P.heads + h) * P.dk;
        let kr_row = qk_row(t0 + row, h);
        for (var kk = part; kk < P.dk; kk += 4u) {
            var accq = 0.0;
            var accw = 0.0;
            for (var j = 0u; j <= row; j++) {
                let bk = bt(t0, j, h) * k[qk_row(t0 + j, h) + kk];
                accq += sm[row * C + j] * bk;
                accw += tm[row * C + j] * bk;
            }
            qt[orow + kk] = e_row * (q[kr_row + kk] - accq);
            wt[orow + kk] = e_row * accw;
            kt[orow + kk] = e_k * k[kr_row + kk];
        }
        let urow = ((t0 + row) * P.heads + h) * P.dv;
        for (var d = part; d < P.dv; d += 4u) {
            var acc = 0.0;
            for (var j = 0u; j <= row; j++) {
                let w = exp(g_row - gm(t0, j, h)) * tm[row * C + j] * bt(t0, j, h);
                acc += w * v[((t0 + j) * P.heads + h) * P.dv + d];
            }
            u[urow + d] = acc;
        }
    }
    workgroupBarrier();

    // 5. Attention tile: M_ij e^{γ_i − γ_j} β_j λ_i[col(i,j)] for j <= i.
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            let i = i0 + r;
            let j = j0 + s;
            var val = 0.0;
            if (j <= i && i < n) {
                val = sm[i * C + j] * exp(gm(t0, i, h) - gm(t0, j, h)) * bt(t0, j, h)
                    * lam[lam_idx(t0 + i, h, level_col(i, j))];
            }
            sm[i * C + j] = val;
        }
    }
    workgroupBarrier();

    // 6. o = A V.
    if (row < n) {
        for (var d0 = part * 4u; d0 < P.dv; d0 += 16u) {
            let nd = min(4u, P.dv - d0);
            var s4 = vec4<f32>(0.0);
            for (var j = 0u; j <= row; j++) {
                let a = sm[row * C + j];
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
