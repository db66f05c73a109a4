// GDN backward, step 2: the forward level states again, stored per chunk. One workgroup per
// (BV columns of dv, head, chunk level m), sequential over chunks (spec §7.2):
//   hs[m][c] = H_c (state entering chunk c); after a group-last chunk H = 0, otherwise
//   H ← e^Γ H + K̃ᵀ X, X = σ U − W̃ H with σ = 1 on source chunks (bit m of c clear), else 0;
//   X is stored too (xs_at), for grad_gdn_lvl.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> fpack: array<f32>;
@group(0) @binding(2) var<storage, read> gam: array<f32>;
@group(0) @binding(3) var<storage, read_write> hs: array<f32>;

const BV: u32 = 8u;
var<workgroup> st: array<f32, 2048>; // MAX_DK * BV: the state columns of this workgroup
var<workgroup> xw: array<f32, 512>;  // C * BV: σ U − W̃ H

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let h = head0() + wg.y;
    let m = wg.z;
    let nbv = min(BV, P.dv - v0);
    let ns = P.dk * BV;
    for (var e = lid; e < ns; e += 256u) {
        st[e] = 0.0;
    }
    workgroupBarrier();
    for (var c = 0u; c < P.nt; c++) {
        let t0 = c * C;
        let n = chunk_rows(c);
        let sb = state_at(m, c, h);
        for (var e = lid; e < ns; e += 256u) {
            let d = e % BV;
            if (d < nbv) {
                hs[sb + (e / BV) * P.dv + v0 + d] = st[e];
            }
        }
        if (group_last(c, m) || c + 1u == P.nt) {
            for (var e = lid; e < ns; e += 256u) {
                st[e] = 0.0;
            }
            workgroupBarrier();
            continue;
        }
        let src = !reads(c, m);
        for (var e = lid; e < C * BV; e += 256u) {
            let i = e / BV;
            let d = e % BV;
            var x = 0.0;
            if (i < n && d < nbv) {
                let row = frow(t0 + i, h);
                if (src) {
                    x = fpack[row + 3u * P.dk + v0 + d];
                }
                for (var kk = 0u; kk < P.dk; kk++) {
                    x -= fpack[row + 2u * P.dk + kk] * st[kk * BV + d];
                }
            }
            xw[e] = x;
            if (d < nbv) {
                hs[xs_at(m, c, h) + i * P.dv + v0 + d] = x;
            }
        }
        workgroupBarrier();
        let eg = exp(gam[(t0 + n - 1u) * P.heads + h]);
        for (var e = lid; e < ns; e += 256u) {
            let kk = e / BV;
            let d = e % BV;
            var s = eg * st[e];
            for (var i = 0u; i < n; i++) {
                s += fpack[frow(t0 + i, h) + P.dk + kk] * xw[i * BV + d];
            }
            st[e] = s;
        }
        workgroupBarrier();
    }
}
