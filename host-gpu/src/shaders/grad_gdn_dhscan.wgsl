// GDN backward, step 3: the reverse scan of the level-state gradients. One workgroup per
// (BV columns of dv, head, chunk level m), chunks in reverse order. With D = dL/dH_{c+1}
// (0 after a group-last chunk and after the last chunk), stored as dhs[m][c]:
//   dL/dH_c = e^Γ D − W̃ᵀ dX + ρ Σ_i λ_i[c0+1+m] q̃_i dO_iᵀ   (ρ = 1 on reader chunks),
// dX = K̃ D stored too (xs_at), for grad_gdn_lvl.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> fpack: array<f32>;
@group(0) @binding(2) var<storage, read> gam: array<f32>;
@group(0) @binding(3) var<storage, read> lam: array<f32>;
@group(0) @binding(4) var<storage, read> dout: array<f32>;
@group(0) @binding(5) var<storage, read_write> dhs: array<f32>;

const BV: u32 = 8u;
var<workgroup> st: array<f32, 2048>; // MAX_DK * BV
var<workgroup> xw: array<f32, 512>;  // C * BV: K̃ D

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let h = head0() + wg.y;
    let m = wg.z;
    let nbv = min(BV, P.dv - v0);
    let ns = P.dk * BV;
    let col = C0P1 + m;
    for (var e = lid; e < ns; e += 256u) {
        st[e] = 0.0;
    }
    for (var cc = 0u; cc < P.nt; cc++) {
        let c = P.nt - 1u - cc;
        let t0 = c * C;
        let n = chunk_rows(c);
        let sb = state_at(m, c, h);
        if (group_last(c, m) || c + 1u == P.nt) {
            for (var e = lid; e < ns; e += 256u) {
                st[e] = 0.0;
            }
        }
        for (var e = lid; e < ns; e += 256u) {
            let d = e % BV;
            if (d < nbv) {
                dhs[sb + (e / BV) * P.dv + v0 + d] = st[e];
            }
        }
        workgroupBarrier();
        for (var e = lid; e < C * BV; e += 256u) {
            let i = e / BV;
            let d = e % BV;
            var x = 0.0;
            if (i < n && d < nbv) {
                let row = frow(t0 + i, h);
                for (var kk = 0u; kk < P.dk; kk++) {
                    x += fpack[row + P.dk + kk] * st[kk * BV + d];
                }
            }
            xw[e] = x;
            if (d < nbv) {
                dhs[xs_at(m, c, h) + i * P.dv + v0 + d] = x;
            }
        }
        workgroupBarrier();
        let eg = exp(gam[(t0 + n - 1u) * P.heads + h]);
        let rd = reads(c, m);
        for (var e = lid; e < ns; e += 256u) {
            let kk = e / BV;
            let d = e % BV;
            var s = eg * st[e];
            for (var i = 0u; i < n; i++) {
                s -= fpack[frow(t0 + i, h) + 2u * P.dk + kk] * xw[i * BV + d];
            }
            if (rd && d < nbv) {
                for (var i = 0u; i < n; i++) {
                    let t = t0 + i;
                    s += lam[lam_idx(t, h, col)] * fpack[frow(t, h) + kk]
                        * dout[(t * P.heads + h) * P.dv + v0 + d];
                }
            }
            st[e] = s;
        }
        workgroupBarrier();
    }
}
