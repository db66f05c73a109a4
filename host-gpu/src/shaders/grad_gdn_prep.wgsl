// GDN backward, step 1 per (chunk, head): recompute the forward's chunk quantities (spec §7.2).
// Tiles S1 = Tril(Q Kᵀ), KK = StrictLower(K Kᵀ), A_w (forward substitution), M = S1 A_w; and
//   q̃_i = e^{γ_i} (q_i − Σ_j M_ij β_j k_j),  K̃_i = e^{Γ − γ_i} k_i,
//   W̃_i = e^{γ_i} Σ_j A_w,ij β_j k_j,        U_i = Σ_j e^{γ_i − γ_j} A_w,ij β_j v_j.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> beta: array<f32>;
@group(0) @binding(6) var<storage, read_write> tiles: array<f32>;
@group(0) @binding(7) var<storage, read_write> fpack: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = head0() + wg.y;
    let t0 = c * C;
    let n = chunk_rows(c);
    let base = ch_base(c, h);
    let tb = base + T_T * TILE;
    let mb = base + T_M * TILE;

    // S1, KK, and P (in the A_w slot) for every entry (zero outside the chunk's rows).
    for (var e = lid; e < TILE; e += 256u) {
        let i = e / C;
        let j = e % C;
        var s1 = 0.0;
        var kk = 0.0;
        if (i < n && j <= i) {
            let ri = qk_row(t0 + i, h);
            let rj = qk_row(t0 + j, h);
            for (var x = 0u; x < P.dk; x++) {
                s1 += q[ri + x] * k[rj + x];
                kk += k[ri + x] * k[rj + x];
            }
        }
        if (j == i) {
            kk = 0.0;
        }
        tiles[base + T_S1 * TILE + e] = s1;
        tiles[base + T_KK * TILE + e] = kk;
        var p = 0.0;
        if (i < n) {
            p = beta[(t0 + i) * P.heads + h] * kk;
        }
        tiles[tb + e] = p;
    }
    storageBarrier();

    // A_w = (I + P)⁻¹ in place, row by row: T_ij = δ_ij − Σ_{l=j..i-1} P_il T_lj.
    for (var i = 0u; i < n; i++) {
        var val = 0.0;
        let j = lid;
        if (j < C) {
            val = select(0.0, 1.0, i == j);
            for (var l = j; l < i; l++) {
                val -= tiles[tb + i * C + l] * tiles[tb + l * C + j];
            }
        }
        storageBarrier();
        if (j < C) {
            tiles[tb + i * C + j] = val;
        }
        storageBarrier();
    }

    // M = S1 A_w (both lower triangular).
    for (var e = lid; e < TILE; e += 256u) {
        let i = e / C;
        let j = e % C;
        var mv = 0.0;
        if (i < n && j <= i) {
            for (var l = j; l <= i; l++) {
                mv += tiles[base + T_S1 * TILE + i * C + l] * tiles[tb + l * C + j];
            }
        }
        tiles[mb + e] = mv;
    }
    storageBarrier();

    let g_last = gam[(t0 + n - 1u) * P.heads + h];
    for (var e = lid; e < n * P.dk; e += 256u) {
        let i = e / P.dk;
        let x = e % P.dk;
        let gi = gam[(t0 + i) * P.heads + h];
        let eg = exp(gi);
        var mq = 0.0;
        var mw = 0.0;
        for (var j = 0u; j <= i; j++) {
            let bk = beta[(t0 + j) * P.heads + h] * k[qk_row(t0 + j, h) + x];
            mq += tiles[mb + i * C + j] * bk;
            mw += tiles[tb + i * C + j] * bk;
        }
        let row = frow(t0 + i, h);
        let ri = qk_row(t0 + i, h);
        fpack[row + x] = eg * (q[ri + x] - mq);
        fpack[row + P.dk + x] = exp(g_last - gi) * k[ri + x];
        fpack[row + 2u * P.dk + x] = eg * mw;
    }
    for (var e = lid; e < n * P.dv; e += 256u) {
        let i = e / P.dv;
        let d = e % P.dv;
        let gi = gam[(t0 + i) * P.heads + h];
        var s = 0.0;
        for (var j = 0u; j <= i; j++) {
            let gj = gam[(t0 + j) * P.heads + h];
            s += exp(gi - gj) * tiles[tb + i * C + j] * beta[(t0 + j) * P.heads + h]
                * v[((t0 + j) * P.heads + h) * P.dv + d];
        }
        fpack[frow(t0 + i, h) + 3u * P.dk + d] = s;
    }
}
