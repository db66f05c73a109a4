// GDN backward, step 4: per (chunk, block of RB rows, head), the gradients of the chunk's inputs
// to the level scans, summed over all chunk levels m inside the workgroup (no atomics): with
// H = H_c, D = dL/dH_{c+1} (both stored), σ / ρ = source / reader flags, X = σ U − W̃ H:
//   dq̃_i += ρ λ_i[ℓ] H dO_i      dλ_i[ℓ] = ρ q̃_iᵀ H dO_i     (ℓ = c0 + 1 + m)
//   dK̃ += X Dᵀ    dX = K̃ D    dU += σ dX    dW̃ −= dX Hᵀ    dΓ += e^Γ ⟨D, H⟩
// Every row is independent except dΓ, which the block holding the chunk's last row adds.
// Writes gpack rows (dq̃, dK̃, dW̃, dU; dγ_i = dq̃_i·q̃_i + dW̃_i·W̃_i − dK̃_i·K̃_i (+ dΓ on the
// last row); kd_i = dK̃_i·K̃_i, whose chunk sum the intra kernel adds to the last row's dγ) and
// the inter-chunk columns of dλ (0 where not read).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> fpack: array<f32>;
@group(0) @binding(2) var<storage, read> gam: array<f32>;
@group(0) @binding(3) var<storage, read> lam: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read> hs: array<f32>;
@group(0) @binding(6) var<storage, read> dhs: array<f32>;
@group(0) @binding(7) var<storage, read_write> xbuf: array<f32>;
@group(0) @binding(8) var<storage, read_write> gpack: array<f32>;
@group(0) @binding(9) var<storage, read_write> dlam: array<f32>;

const RB: u32 = 16u; // rows per workgroup (RB_ROWS in op_gdn.rs)
var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x / (C / RB);
    let h = head0() + wg.y;
    let n = chunk_rows(c);
    let r0 = (wg.x % (C / RB)) * RB;
    // Rows r0..r0+nr of the chunk (none when the partial last chunk ends before r0).
    let nr = min(RB, max(n, r0) - r0);
    let t0 = c * C + r0;
    let owns_last = r0 < n && n <= r0 + RB;
    let dk = P.dk;
    let dv = P.dv;
    let gs = g_stride();
    let eg = exp(gam[(c * C + n - 1u) * P.heads + h]);
    // Scratch of this chunk: X [C][dv], dX [C][dv], Y = H dO [C][dk] (rows from t0 on).
    let xb = (c * group_heads() + h - head0()) * C * (2u * dv + dk) + r0 * dv;
    let xdb = xb + C * dv;
    let yb = xb - r0 * dv + 2u * C * dv + r0 * dk;

    for (var e = lid; e < nr * gs; e += 256u) {
        gpack[grow(t0 + e / gs, h) + e % gs] = 0.0;
    }
    if (P.lam_cols > C0P1) {
        let nc = P.lam_cols - C0P1;
        for (var e = lid; e < nr * nc; e += 256u) {
            dlam[lam_idx(t0 + e / nc, h, C0P1 + e % nc)] = 0.0;
        }
    }
    storageBarrier();

    var dgam_part = 0.0;
    for (var m = 0u; m < P.n_scans; m++) {
        let rd = reads(c, m);
        let src = !rd;
        let has_d = !(group_last(c, m) || c + 1u == P.nt);
        if (!rd && !has_d) {
            continue;
        }
        let sb = state_at(m, c, h);
        let col = C0P1 + m;

        for (var e = lid; e < nr * dv; e += 256u) {
            let i = e / dv;
            let d = e % dv;
            let row = frow(t0 + i, h);
            var x = 0.0;
            if (src) {
                x = fpack[row + 3u * dk + d];
            }
            var dx = 0.0;
            for (var kk = 0u; kk < dk; kk++) {
                x -= fpack[row + 2u * dk + kk] * hs[sb + kk * dv + d];
                dx += fpack[row + dk + kk] * dhs[sb + kk * dv + d];
            }
            xbuf[xb + i * dv + d] = x;
            xbuf[xdb + i * dv + d] = dx;
            if (src) {
                gpack[grow(t0 + i, h) + 3u * dk + d] += dx;
            }
        }
        if (has_d && owns_last) {
            var acc = 0.0;
            for (var e = lid; e < dk * dv; e += 256u) {
                acc += hs[sb + e] * dhs[sb + e];
            }
            dgam_part += eg * acc;
        }
        storageBarrier();

        for (var e = lid; e < nr * dk; e += 256u) {
            let i = e / dk;
            let kk = e % dk;
            let t = t0 + i;
            let g = grow(t, h);
            var y = 0.0;
            if (rd) {
                for (var d = 0u; d < dv; d++) {
                    y += hs[sb + kk * dv + d] * dout[(t * P.heads + h) * dv + d];
                }
                gpack[g + kk] += lam[lam_idx(t, h, col)] * y;
            }
            xbuf[yb + i * dk + kk] = y;
            var a = 0.0;
            var b = 0.0;
            for (var d = 0u; d < dv; d++) {
                a += xbuf[xb + i * dv + d] * dhs[sb + kk * dv + d];
                b += xbuf[xdb + i * dv + d] * hs[sb + kk * dv + d];
            }
            gpack[g + dk + kk] += a;
            gpack[g + 2u * dk + kk] -= b;
        }
        storageBarrier();

        if (rd && lid < nr) {
            let t = t0 + lid;
            var s = 0.0;
            for (var kk = 0u; kk < dk; kk++) {
                s += fpack[frow(t, h) + kk] * xbuf[yb + lid * dk + kk];
            }
            dlam[lam_idx(t, h, col)] = s;
        }
        storageBarrier();
    }

    // dγ of the chunk inputs q̃, W̃ (e^{γ_i}) and K̃ (e^{Γ − γ_i}); Γ = γ of the last row.
    red[lid] = dgam_part;
    if (lid < nr) {
        let t = t0 + lid;
        let f = frow(t, h);
        let g = grow(t, h);
        var a = 0.0;
        var kd = 0.0;
        for (var kk = 0u; kk < dk; kk++) {
            a += gpack[g + kk] * fpack[f + kk] + gpack[g + 2u * dk + kk] * fpack[f + 2u * dk + kk];
            kd += gpack[g + dk + kk] * fpack[f + dk + kk];
        }
        gpack[g + gs - 2u] = a - kd;
        gpack[g + gs - 1u] = kd;
    }
    storageBarrier();
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    if (lid == 0u && owns_last) {
        gpack[grow(c * C + n - 1u, h) + gs - 2u] += red[0];
    }
}
