// GDN backward, step 5: per (chunk, head), the intra-chunk attention and the UT transform
// backward as C×C tiles (spec §7.2: A = M ⊙ E ⊙ β_j ⊙ Λ, M = S1 A_w, q̃, W̃, U as in prep).
// With D_ij = dO_i·v_j, D2_ij = dU_i·v_j, dqk_ij = dq̃_i·k_j, dwk_ij = dW̃_i·k_j (j ≤ i):
//   dM   = D E β_j Λ − e^{γ_i} β_j dqk
//   dA_w = S1ᵀ dM + e^{γ_i} β_j dwk + E β_j D2      (strictly lower)
//   dS1  = dM A_wᵀ (lower),  dP = −A_wᵀ dA_w A_wᵀ (strictly lower)
// and the per-row dβ, dγ (rows ROW_DB, ROW_DG of the chunk's tiles) and intra dλ columns.
// Every C × C product is a workgroup-memory tiled one: the 64 × 64 output as 4 × 4 blocks of
// 16 × 16, thread (ti, tj) holding entry (ti, tj) of each block (only the 10 lower blocks where
// the output is lower triangular); 8 columns of the left and 8 rows of the right operand staged
// at a time.

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


const PW: u32 = 8u; // dimensions / rows per staged panel
// Rows of a staged panel are PS words apart: not a multiple of 32, so that the transposed stores
// (a warp's threads on PW columns of 4 rows) fall in different memory banks.
const PS: u32 = 68u;
const PANEL: u32 = PW * PS;
var<workgroup> wm: array<f32, 3u * PANEL>; // staged panels: 3 × [PW][PS]

fn tl(base: u32, slot: u32, i: u32, j: u32) -> f32 {
    return tiles[base + slot * TILE + i * CHUNK + j];
}

// Block accumulator of the lower blocks (bi, bj ≤ bi).
fn lb(bi: u32, bj: u32) -> u32 {
    return bi * (bi + 1u) / 2u + bj;
}

// out[bi * 4 + bj] = Σ_j L[i][j] R[j][b] for i = 16 bi + ti, b = 16 bj + tj, j < n; L and R are
// tiles of the chunk, read transposed when asked (L[i][j] = tile[j][i], R[j][b] = tile[b][j]).
fn tile_product(base: u32, l_slot: u32, l_tr: bool, r_slot: u32, r_tr: bool, n: u32,
                lid: u32) -> array<f32, 16> {
    let ti = lid / 16u;
    let tj = lid % 16u;
    let lb_ = base + l_slot * TILE;
    let rb_ = base + r_slot * TILE;
    var o0 = vec4<f32>(0.0);
    var o1 = vec4<f32>(0.0);
    var o2 = vec4<f32>(0.0);
    var o3 = vec4<f32>(0.0);
    for (var j0 = 0u; j0 < n; j0 += PW) {
        workgroupBarrier();
        for (var e = lid; e < PW * CHUNK; e += 256u) {
            // Consecutive threads read consecutive words of the tile.
            var jr = e % PW;
            var i = e / PW;
            if (l_tr) {
                jr = e / CHUNK;
                i = e % CHUNK;
                wm[jr * PS + i] = tiles[lb_ + (j0 + jr) * CHUNK + i];
            } else {
                wm[jr * PS + i] = tiles[lb_ + i * CHUNK + j0 + jr];
            }
            var kr = e / CHUNK;
            var b = e % CHUNK;
            if (r_tr) {
                kr = e % PW;
                b = e / PW;
                wm[PANEL + kr * PS + b] = tiles[rb_ + b * CHUNK + j0 + kr];
            } else {
                wm[PANEL + kr * PS + b] = tiles[rb_ + (j0 + kr) * CHUNK + b];
            }
        }
        workgroupBarrier();
        for (var jr = 0u; jr < min(PW, n - j0); jr++) {
            let r = jr * PS + ti;
            let cb = PANEL + jr * PS + tj;
            let rb = vec4<f32>(wm[cb], wm[cb + 16u], wm[cb + 32u], wm[cb + 48u]);
            o0 += wm[r] * rb;
            o1 += wm[r + 16u] * rb;
            o2 += wm[r + 32u] * rb;
            o3 += wm[r + 48u] * rb;
        }
    }
    return array<f32, 16>(o0.x, o0.y, o0.z, o0.w, o1.x, o1.y, o1.z, o1.w, o2.x, o2.y, o2.z,
                          o2.w, o3.x, o3.y, o3.z, o3.w);
}

const PANELS_DV: u32 = 0u; // dO, dU (rows i) and v (rows j): dv columns
const PANELS_DK: u32 = 1u; // dq̃, dW̃ (rows i) and k (rows j): dk columns

// PW columns from c0 of the chunk's rows, transposed ([PW][PS]), into wm: the two left operands
// at 0 and PANEL, the right one at 2 PANEL (0 past the chunk and the width).
fn stage_panels(panels: u32, t0: u32, n: u32, h: u32, c0: u32, lid: u32) {
    let dk = P.dk;
    let dv = P.dv;
    let width = select(dk, dv, panels == PANELS_DV);
    for (var e = lid; e < CHUNK * PW; e += 256u) {
        let row = e / PW;
        let p = e % PW;
        let d = c0 + p;
        var x = 0.0;
        var y = 0.0;
        var z = 0.0;
        if (row < n && d < width) {
            let tr = t0 + row;
            if (panels == PANELS_DV) {
                x = dout[(tr * P.heads + h) * dv + d];
                y = gpack[grow(tr, h) + 3u * dk + d];
                z = v[(tr * P.heads + h) * dv + d];
            } else {
                x = gpack[grow(tr, h) + d];
                y = gpack[grow(tr, h) + 2u * dk + d];
                z = k[qk_row(tr, h) + d];
            }
        }
        wm[p * PS + row] = x;
        wm[PANEL + p * PS + row] = y;
        wm[2u * PANEL + p * PS + row] = z;
    }
}

// The staged panels' `cols` columns added to the lower-block products of thread (ti, tj):
// `first` += left operand 0 · right operandᵀ, `second` += left operand 1 · right operandᵀ.
fn panel_products(first: ptr<function, array<f32, 10>>, second: ptr<function, array<f32, 10>>,
                  cols: u32, ti: u32, tj: u32) {
    for (var p = 0u; p < cols; p++) {
        let r = p * PS + ti;
        let l0 = vec4<f32>(wm[r], wm[r + 16u], wm[r + 32u], wm[r + 48u]);
        let r1 = PANEL + r;
        let l1 = vec4<f32>(wm[r1], wm[r1 + 16u], wm[r1 + 32u], wm[r1 + 48u]);
        let cj = 2u * PANEL + p * PS + tj;
        let rj = vec4<f32>(wm[cj], wm[cj + 16u], wm[cj + 32u], wm[cj + 48u]);
        tri10(first, l0, rj);
        tri10(second, l1, rj);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = P.head0 + wg.y;
    let t0 = c * CHUNK;
    let n = chunk_rows(c);
    let base = ch_base(c, h);
    let dk = P.dk;
    let dv = P.dv;
    let ti = lid / 16u;
    let tj = lid % 16u;

    // D, D2, dqk, dwk on the lower blocks, the rows staged PW dimensions at a time ([PW][C]:
    // wm 0 = rows i of dO or dq̃, 512 = dU or dW̃, 1024 = rows j of v or k).
    var s_dd: array<f32, 10>;
    var s_d2: array<f32, 10>;
    var s_qk: array<f32, 10>;
    var s_wk: array<f32, 10>;
    for (var d0 = 0u; d0 < dv; d0 += PW) {
        workgroupBarrier();
        stage_panels(PANELS_DV, t0, n, h, d0, lid);
        workgroupBarrier();
        panel_products(&s_dd, &s_d2, min(PW, dv - d0), ti, tj);
    }
    for (var x0 = 0u; x0 < dk; x0 += PW) {
        workgroupBarrier();
        stage_panels(PANELS_DK, t0, n, h, x0, lid);
        workgroupBarrier();
        panel_products(&s_qk, &s_wk, min(PW, dk - x0), ti, tj);
    }

    // Per-pair quantities (every entry written: 0 outside the chunk's lower triangle).
    for (var bi = 0u; bi < 4u; bi++) {
        for (var bj = 0u; bj < 4u; bj++) {
            let i = bi * 16u + ti;
            let j = bj * 16u + tj;
            let e = i * CHUNK + j;
            var a = 0.0;
            var tu = 0.0;
            var dm = 0.0;
            var dt = 0.0;
            var cb = 0.0;
            var cg = 0.0;
            var cl = 0.0;
            if (bj <= bi && i < n && j <= i) {
                let ab = lb(bi, bj);
                let ti_ = t0 + i;
                let tj_ = t0 + j;
                let dd = s_dd[ab];
                let d2 = s_d2[ab];
                let dqk = s_qk[ab];
                let dwk = s_wk[ab];
                let gi = gam[ti_ * P.heads + h];
                let ee = exp(gi - gam[tj_ * P.heads + h]);
                let eg = exp(gi);
                let bj_ = beta[tj_ * P.heads + h];
                let l = lam[lam_idx(ti_, h, lev(i, j))];
                let mv = tiles[base + T_M * TILE + e];
                let tv = tiles[base + T_T * TILE + e];
                a = mv * ee * bj_ * l;
                tu = ee * tv * bj_;
                dm = dd * ee * bj_ * l - eg * bj_ * dqk;
                if (j < i) {
                    dt = eg * bj_ * dwk + ee * bj_ * d2;
                }
                cb = dd * mv * ee * l - eg * mv * dqk + tv * eg * dwk + ee * tv * d2;
                cg = dd * a + tu * d2;
                cl = dd * mv * ee * bj_;
            }
            tiles[base + T_A * TILE + e] = a;
            tiles[base + T_TU * TILE + e] = tu;
            tiles[base + T_DM * TILE + e] = dm;
            tiles[base + T_DT * TILE + e] = dt;
            tiles[base + T_CB * TILE + e] = cb;
            tiles[base + T_CG * TILE + e] = cg;
            tiles[base + T_CL * TILE + e] = cl;
        }
    }
    storageBarrier();

    // dS1 = dM A_wᵀ (lower);  dA_w += S1ᵀ dM (strictly lower).
    let ds = tile_product(base, T_DM, false, T_T, true, n, lid);
    let da = tile_product(base, T_S1, true, T_DM, false, n, lid);
    for (var bi = 0u; bi < 4u; bi++) {
        for (var bj = 0u; bj < 4u; bj++) {
            let a = bi * 16u + ti;
            let b = bj * 16u + tj;
            let e = a * CHUNK + b;
            var s = 0.0;
            var t = 0.0;
            if (a < n && b <= a) {
                s = ds[bi * 4u + bj];
                if (b < a) {
                    t = tiles[base + T_DT * TILE + e] + da[bi * 4u + bj];
                }
            }
            tiles[base + T_DS1 * TILE + e] = s;
            tiles[base + T_DT * TILE + e] = t;
        }
    }
    storageBarrier();

    // Y = dA_w A_wᵀ (full; replaces dM).
    let yv = tile_product(base, T_DT, false, T_T, true, n, lid);
    for (var bi = 0u; bi < 4u; bi++) {
        for (var bj = 0u; bj < 4u; bj++) {
            let a = bi * 16u + ti;
            let b = bj * 16u + tj;
            var y = 0.0;
            if (a < n && b < n) {
                y = yv[bi * 4u + bj];
            }
            tiles[base + T_Y * TILE + a * CHUNK + b] = y;
        }
    }
    storageBarrier();

    // dP = −A_wᵀ Y, strictly lower (replaces dA_w).
    let pv = tile_product(base, T_T, true, T_Y, false, n, lid);
    for (var bi = 0u; bi < 4u; bi++) {
        for (var bj = 0u; bj < 4u; bj++) {
            let i = bi * 16u + ti;
            let j = bj * 16u + tj;
            var p = 0.0;
            if (i < n && j < i) {
                p = -pv[bi * 4u + bj];
            }
            tiles[base + T_DP * TILE + i * CHUNK + j] = p;
        }
    }
    storageBarrier();

    // Z_ij: dk_j += Σ_i Z_ij k_i from P_ab = β_a k_a·k_b (a > b).
    for (var e = lid; e < TILE; e += 256u) {
        let i = e / CHUNK;
        let j = e % CHUNK;
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
        for (var b = 0u; b < n_lb(); b++) {
            dg += gpack[grow(t0 + r, h) + g_dgam(b)];
        }
        if (r + 1u == n) {
            // dΓ of K̃ = e^{Γ − γ} K: Σ_j dK̃_j·K̃_j (per row and dk block from the level
            // kernel).
            for (var j = 0u; j < n; j++) {
                for (var b = 0u; b < n_lb(); b++) {
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
        // Level l > 0 pairs (r, j): bit l − 1 of r set, j = r with bits 0 .. l − 1 cleared,
        // plus anything below bit l − 1 (lev(r, j) = l).
        for (var l = 0u; l < min(C0P1, P.lam_cols); l++) {
            var s = 0.0;
            if (l == 0u) {
                s = tl(base, T_CL, r, r);
            } else if (((r >> (l - 1u)) & 1u) == 1u) {
                let lo = (r >> l) << l;
                for (var j = lo; j < lo + (1u << (l - 1u)); j++) {
                    s += tl(base, T_CL, r, j);
                }
            }
            dlam[lam_idx(t0 + r, h, l)] = s;
        }
    }
}
