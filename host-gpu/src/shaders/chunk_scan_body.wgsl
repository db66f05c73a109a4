// Inter-chunk levels (spec §7.2), all levels in one dispatch: one workgroup per
// (dv block of BV columns, head, chunk level m), sequential over chunks. The dk x BV states live
// in workgroup memory.
//
// Two states per workgroup: `sa` is what reader chunks read, `sb` collects the current group.
//   regular level m (m < m_top): chunk c reads iff bit m of c is 1; sources are chunks with bit m
//     = 0; after the first half of an aligned group of 2^(m+1) chunks sa = sb, after the second
//     half sa = 0 (exactly the per-level scan of §7.2).
//   saturated level m_top: every chunk reads sa = all chunks before (c >> m)<<m, the sum of all
//     exact levels >= m_top (the runtime's saturating top level); every chunk is a source.
// Reader outputs go to olvl[slot][row][h][dv] (olvl_slot) (weighted by λ column min(c0+1+m, top)); the combine
// kernel adds them to o. Before the last chunk the read state is written to hstate[m] for the
// final-state kernel.

const BV: u32 = 8u;
const WG: u32 = 256u;

var<workgroup> sa: array<f32, 2048>; // MAX_DK * BV
var<workgroup> sb: array<f32, 2048>;
var<workgroup> xa: array<f32, 512>;  // C * BV
var<workgroup> xb: array<f32, 512>;
var<workgroup> fq: array<f32, 64>;
var<workgroup> fk: array<f32, 64>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let h = wg.y;
    let m = wg.z;
    let sat = m == P.m_top;
    let col = min(C0P1 + m, P.top);
    let nbv = min(BV, P.dv - v0);
    let ne = P.dk * BV;
    let half = 1u << m;

    for (var e = lid; e < MAX_DK * BV; e += WG) {
        sa[e] = 0.0;
        sb[e] = 0.0;
    }
    workgroupBarrier();

    for (var c = 0u; c < P.nt; c++) {
        let t0 = c * C;
        let n = min(C, P.t - t0);
        let bit = ((c >> m) & 1u) == 1u;
        let reads = sat || bit;
        let adds = sat || !bit;
        let g_last = gam[(t0 + n - 1u) * P.heads + h];
        if (lid < C) {
            var a = 0.0;
            var b = 0.0;
            if (lid < n) {
                let g_row = gam[(t0 + lid) * P.heads + h];
                a = q_factor(g_row);
                b = k_factor(g_last, g_row);
            }
            fq[lid] = a;
            fk[lid] = b;
        }
        workgroupBarrier();

        if (c == P.nt - 1u) {
            // Hand-off: the state the last chunk reads at this level (zero if it does not read).
            for (var e = lid; e < ne; e += WG) {
                let vv = e % BV;
                if (vv < nbv) {
                    let kk = e / BV;
                    hstate[((m * P.heads + h) * P.dk + kk) * P.dv + v0 + vv] = select(0.0, sa[e], reads);
                }
            }
        }

        let slot = olvl_slot(m, c);
        if (slot != NO_SLOT) {
            for (var r = lid; r < C * BV; r += WG) {
                let i = r / BV;
                let vv = r % BV;
                if (i < n && vv < nbv) {
                    var acc = 0.0;
                    for (var kk = 0u; kk < P.dk; kk++) {
                        acc += qt_at(t0 + i, h, kk) * sa[kk * BV + vv];
                    }
                    olvl[((slot * C + i) * P.heads + h) * P.dv + v0 + vv] =
                        lam[lam_idx(t0 + i, h, col)] * fq[i] * acc;
                }
            }
        }
        if (c == P.nt - 1u) {
            break;
        }

        if (GDN) {
            // X = W̃ h for both states (C x BV each).
            for (var r = lid; r < C * BV; r += WG) {
                let i = r / BV;
                let vv = r % BV;
                var acc_a = 0.0;
                var acc_b = 0.0;
                if (i < n) {
                    for (var kk = 0u; kk < P.dk; kk++) {
                        let w = wt_at(t0 + i, h, kk);
                        acc_a += w * sa[kk * BV + vv];
                        acc_b += w * sb[kk * BV + vv];
                    }
                }
                xa[r] = acc_a;
                xb[r] = acc_b;
            }
        }
        workgroupBarrier();

        // Transition, contribution, group boundary.
        let eg = exp(g_last);
        let boundary = (c + 1u) % half == 0u;
        let reset = !sat && (c + 1u) % (2u * half) == 0u;
        for (var e = lid; e < ne; e += WG) {
            let kk = e / BV;
            let vv = e % BV;
            var a = eg * sa[e];
            var b = eg * sb[e];
            for (var i = 0u; i < n; i++) {
                let kti = kt_at(t0 + i, h, kk) * fk[i];
                if (GDN) {
                    a -= kti * xa[i * BV + vv];
                    b -= kti * xb[i * BV + vv];
                }
                if (adds && vv < nbv) {
                    b += kti * u_at(t0 + i, h, v0 + vv);
                }
            }
            if (boundary) {
                if (reset) {
                    a = 0.0;
                } else {
                    a = a + b;
                }
                b = 0.0;
            }
            sa[e] = a;
            sb[e] = b;
        }
        workgroupBarrier();
    }
}
