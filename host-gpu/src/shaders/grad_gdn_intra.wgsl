// GDN backward, step 5: per (chunk, head), the intra-chunk attention and the UT transform
// backward as C×C tiles (spec §7.2: A = M ⊙ E ⊙ β_j ⊙ Λ, M = S1 A_w, q̃, W̃, U as in prep).
// With D_ij = dO_i·v_j, D2_ij = dU_i·v_j, dqk_ij = dq̃_i·k_j, dwk_ij = dW̃_i·k_j (j ≤ i):
//   dM   = D E β_j Λ − e^{γ_i} β_j dqk
//   dA_w = S1ᵀ dM + e^{γ_i} β_j dwk + E β_j D2      (strictly lower)
//   dS1  = dM A_wᵀ (lower),  dP = −A_wᵀ dA_w A_wᵀ (strictly lower)
// and the per-row dβ, dγ (rows ROW_DB, ROW_DG of the chunk's tiles) and intra dλ columns.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> gam: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> lam: array<f32>;
@group(0) @binding(6) var<storage, read> dout: array<f32>;
@group(0) @binding(7) var<storage, read> gpack: array<f32>;
@group(0) @binding(8) var<storage, read_write> tiles: array<f32>;
@group(0) @binding(9) var<storage, read_write> dlam: array<f32>;

const PW: u32 = 8u; // dimensions per staged panel (3 · C · PW floats = 6 KiB)
var<workgroup> pa: array<f32, 512>; // rows i: dO (dv part) or dq̃ (dk part), [C][PW]
var<workgroup> pb: array<f32, 512>; // rows i: dU or dW̃
var<workgroup> pc: array<f32, 512>; // rows j: v or k

fn tl(base: u32, slot: u32, i: u32, j: u32) -> f32 {
    return tiles[base + slot * TILE + i * C + j];
}

// pa[l][b] = A_w[b][c0 + l] for l < PW (between two barriers).
fn stage_t_columns(base: u32, c0: u32, lid: u32) {
    workgroupBarrier();
    for (var e = lid; e < C * PW; e += 256u) {
        let b = e / PW;
        let l = e % PW;
        pa[l * C + b] = tl(base, T_T, b, c0 + l);
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = head0() + wg.y;
    let t0 = c * C;
    let n = chunk_rows(c);
    let base = ch_base(c, h);
    let dk = P.dk;
    let dv = P.dv;

    // D, D2, dqk, dwk of this thread's 16 pairs (i = lid / C + 4 r, j = lid % C), the rows
    // staged in workgroup memory PW dimensions at a time (each sum still runs over d in order).
    var s_dd: array<f32, 16>;
    var s_d2: array<f32, 16>;
    var s_qk: array<f32, 16>;
    var s_wk: array<f32, 16>;
    let i0 = lid / C;
    let jj = lid % C;
    for (var d0 = 0u; d0 < dv; d0 += PW) {
        let pw = min(PW, dv - d0);
        workgroupBarrier();
        for (var e = lid; e < C * PW; e += 256u) {
            let row = e / PW;
            let d = d0 + e % PW;
            var x = 0.0;
            var y = 0.0;
            var z = 0.0;
            if (row < n && d < dv) {
                let tr = t0 + row;
                x = dout[(tr * P.heads + h) * dv + d];
                y = gpack[grow(tr, h) + 3u * dk + d];
                z = v[(tr * P.heads + h) * dv + d];
            }
            pa[e] = x;
            pb[e] = y;
            pc[e] = z;
        }
        workgroupBarrier();
        for (var r = 0u; r < 16u; r++) {
            let i = i0 + 4u * r;
            for (var d = 0u; d < pw; d++) {
                let vj = pc[jj * PW + d];
                s_dd[r] += pa[i * PW + d] * vj;
                s_d2[r] += pb[i * PW + d] * vj;
            }
        }
    }
    for (var x0 = 0u; x0 < dk; x0 += PW) {
        let pw = min(PW, dk - x0);
        workgroupBarrier();
        for (var e = lid; e < C * PW; e += 256u) {
            let row = e / PW;
            let x = x0 + e % PW;
            var a = 0.0;
            var b = 0.0;
            var z = 0.0;
            if (row < n && x < dk) {
                let tr = t0 + row;
                a = gpack[grow(tr, h) + x];
                b = gpack[grow(tr, h) + 2u * dk + x];
                z = k[qk_row(tr, h) + x];
            }
            pa[e] = a;
            pb[e] = b;
            pc[e] = z;
        }
        workgroupBarrier();
        for (var r = 0u; r < 16u; r++) {
            let i = i0 + 4u * r;
            for (var x = 0u; x < pw; x++) {
                let kj = pc[jj * PW + x];
                s_qk[r] += pa[i * PW + x] * kj;
                s_wk[r] += pb[i * PW + x] * kj;
            }
        }
    }

    // Per-pair quantities.
    for (var r = 0u; r < 16u; r++) {
        let e = lid + 256u * r;
        let i = e / C;
        let j = e % C;
        var a = 0.0;
        var tu = 0.0;
        var dm = 0.0;
        var dt = 0.0;
        var cb = 0.0;
        var cg = 0.0;
        var cl = 0.0;
        if (i < n && j <= i) {
            let ti = t0 + i;
            let tj = t0 + j;
            let dd = s_dd[r];
            let d2 = s_d2[r];
            let dqk = s_qk[r];
            let dwk = s_wk[r];
            let gi = gam[ti * P.heads + h];
            let ee = exp(gi - gam[tj * P.heads + h]);
            let eg = exp(gi);
            let bj = beta[tj * P.heads + h];
            let l = lam[lam_idx(ti, h, lev(i, j))];
            let mv = tiles[base + T_M * TILE + e];
            let tv = tiles[base + T_T * TILE + e];
            a = mv * ee * bj * l;
            tu = ee * tv * bj;
            dm = dd * ee * bj * l - eg * bj * dqk;
            if (j < i) {
                dt = eg * bj * dwk + ee * bj * d2;
            }
            cb = dd * mv * ee * l - eg * mv * dqk + tv * eg * dwk + ee * tv * d2;
            cg = dd * a + tu * d2;
            cl = dd * mv * ee * bj;
        }
        tiles[base + T_A * TILE + e] = a;
        tiles[base + T_TU * TILE + e] = tu;
        tiles[base + T_DM * TILE + e] = dm;
        tiles[base + T_DT * TILE + e] = dt;
        tiles[base + T_CB * TILE + e] = cb;
        tiles[base + T_CG * TILE + e] = cg;
        tiles[base + T_CL * TILE + e] = cl;
    }
    storageBarrier();

    // dS1_ab = Σ_{j ≤ b} dM_aj A_w,bj (b ≤ a);  dA_w,ab += Σ_{i ≥ a} S1_ia dM_ib (b < a).
    // A_w is read across its rows (b varies over the threads): PW of its columns at a time
    // are staged transposed in `pa`.
    var s_ds: array<f32, 16>;
    for (var j0 = 0u; j0 < C; j0 += PW) {
        stage_t_columns(base, j0, lid);
        for (var r = 0u; r < 16u; r++) {
            let a = i0 + 4u * r;
            if (a < n && jj <= a) {
                for (var j = j0; j < min(jj + 1u, j0 + PW); j++) {
                    s_ds[r] += tl(base, T_DM, a, j) * pa[(j - j0) * C + jj];
                }
            }
        }
    }
    for (var r = 0u; r < 16u; r++) {
        let e = lid + 256u * r;
        let a = e / C;
        let b = e % C;
        let ds = s_ds[r];
        var dt = tiles[base + T_DT * TILE + e];
        if (a < n && b < a) {
            for (var i = a; i < n; i++) {
                dt += tl(base, T_S1, i, a) * tl(base, T_DM, i, b);
            }
        }
        tiles[base + T_DS1 * TILE + e] = ds;
        tiles[base + T_DT * TILE + e] = dt;
    }
    storageBarrier();

    // Y = dA_w A_wᵀ: Y_ab = Σ_{c < a, c ≤ b} dA_w,ac A_w,bc (A_w staged as above).
    var s_y: array<f32, 16>;
    for (var c0 = 0u; c0 < C; c0 += PW) {
        stage_t_columns(base, c0, lid);
        for (var r = 0u; r < 16u; r++) {
            let a = i0 + 4u * r;
            if (a < n && jj < n) {
                for (var cc = c0; cc < min(min(a, jj + 1u), c0 + PW); cc++) {
                    s_y[r] += tl(base, T_DT, a, cc) * pa[(cc - c0) * C + jj];
                }
            }
        }
    }
    for (var r = 0u; r < 16u; r++) {
        tiles[base + T_Y * TILE + lid + 256u * r] = s_y[r];
    }
    storageBarrier();

    // dP = −A_wᵀ Y, strictly lower: dP_ij = −Σ_{a ≥ i} A_w,ai Y_aj.
    for (var e = lid; e < TILE; e += 256u) {
        let i = e / C;
        let j = e % C;
        var p = 0.0;
        if (i < n && j < i) {
            for (var a = i; a < n; a++) {
                p -= tl(base, T_T, a, i) * tl(base, T_Y, a, j);
            }
        }
        tiles[base + T_DP * TILE + e] = p;
    }
    storageBarrier();

    // Z_ij: dk_j += Σ_i Z_ij k_i from P_ab = β_a k_a·k_b (a > b).
    for (var e = lid; e < TILE; e += 256u) {
        let i = e / C;
        let j = e % C;
        var z = 0.0;
        if (i < n && j < n) {
            if (i > j) {
                z = tl(base, T_DP, i, j) * beta[(t0 + i) * P.heads + h];
            } else if (i < j) {
                z = tl(base, T_DP, j, i) * beta[(t0 + j) * P.heads + h];
            }
        }
        tiles[base + T_Z * TILE + e] = z;
    }

    // Rows: dβ_r, dγ_r (intra part plus the inter part from gpack), intra dλ columns.
    if (lid < n) {
        let r = lid;
        var db = 0.0;
        var dg = 0.0;
        for (var b = 0u; b < n_kb(); b++) {
            dg += gpack[grow(t0 + r, h) + g_dgam(b)];
        }
        if (r + 1u == n) {
            // dΓ of K̃ = e^{Γ − γ} K: Σ_j dK̃_j·K̃_j (per row and dk block from the level
            // kernel).
            for (var j = 0u; j < n; j++) {
                for (var b = 0u; b < n_kb(); b++) {
                    dg += gpack[grow(t0 + j, h) + g_dgam(b) + 1u];
                }
            }
        }
        for (var i = r; i < n; i++) {
            db += tl(base, T_CB, i, r);
            dg -= tl(base, T_CG, i, r);
        }
        for (var l = 0u; l < r; l++) {
            db += tl(base, T_DP, r, l) * tl(base, T_KK, r, l);
        }
        for (var j = 0u; j <= r; j++) {
            dg += tl(base, T_CG, r, j);
        }
        tiles[base + ROW_DB + r] = db;
        tiles[base + ROW_DG + r] = dg;
        for (var l = 0u; l < min(C0P1, P.lam_cols); l++) {
            var s = 0.0;
            for (var j = 0u; j <= r; j++) {
                if (lev(r, j) == l) {
                    s += tl(base, T_CL, r, j);
                }
            }
            dlam[lam_idx(t0 + r, h, l)] = s;
        }
    }
}
