// Inter-chunk levels (spec §7.2), all levels in one dispatch: one workgroup per
// (dv block of BV columns, head, chunk level m), sequential over chunks. Thread kk (< dk) owns row
// kk of both dk x BV states in registers (updates read K̃ coalesced, 8 columns per load); a copy
// in workgroup memory serves the reads (q̃ h, W̃ h), which split dk over 4 threads per row.
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
const SPLIT: u32 = 4u; // threads per row in the q̃ h / W̃ h products

var<workgroup> sa: array<f32, 2048>;  // MAX_DK * BV: copy of the read state
var<workgroup> sb: array<f32, 2048>;  // copy of the collecting state (GDN needs W̃ sb)
var<workgroup> xa: array<f32, 512>;   // C * BV: W̃ sa
var<workgroup> xb: array<f32, 512>;   // W̃ sb
var<workgroup> ut: array<f32, 512>;   // U tile of this chunk and column block
var<workgroup> red: array<f32, 2048>; // WG * BV partial sums
var<workgroup> fq: array<f32, 64>;
var<workgroup> fk: array<f32, 64>;

// red[lid][v] = Σ_{kk ≡ part (mod SPLIT)} x[i][kk] · s[kk][v] for row i = lid / SPLIT, with x
// q̃ (which = 0) or W̃ (which = 1) and s the shared copy of sa (state = 0) or sb (state = 1).
fn partial_products(t: u32, h: u32, part: u32, which: u32, state: u32) -> array<f32, 8> {
    var p: array<f32, 8>;
    for (var v = 0u; v < BV; v++) {
        p[v] = 0.0;
    }
    for (var kk = part; kk < P.dk; kk += SPLIT) {
        var x: f32;
        if (which == 0u) {
            x = qt_at(t, h, kk);
        } else {
            x = wt_at(t, h, kk);
        }
        for (var v = 0u; v < BV; v++) {
            if (state == 0u) {
                p[v] += x * sa[kk * BV + v];
            } else {
                p[v] += x * sb[kk * BV + v];
            }
        }
    }
    return p;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let h = wg.y;
    let m = wg.z;
    let sat = m == P.m_top;
    let col = min(C0P1 + m, P.top);
    let nbv = min(BV, P.dv - v0);
    let half = 1u << m;
    let kk = lid;             // state row owned by this thread (if < dk)
    let row = lid / SPLIT;    // row of the q̃ h / W̃ h products
    let part = lid % SPLIT;

    var ra: array<f32, 8>;
    var rb: array<f32, 8>;
    for (var v = 0u; v < BV; v++) {
        ra[v] = 0.0;
        rb[v] = 0.0;
    }
    for (var e = lid; e < MAX_DK * BV; e += WG) {
        sa[e] = 0.0;
        sb[e] = 0.0;
    }
    workgroupBarrier();

    for (var c = 0u; c < P.nt; c++) {
        let t0 = c * C;
        let n = min(C, P.t - t0);
        let adds = sat || ((c >> m) & 1u) == 0u;
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
        for (var r = lid; r < C * BV; r += WG) {
            let i = r / BV;
            let vv = r % BV;
            var x = 0.0;
            if (adds && i < n && vv < nbv) {
                x = u_at(t0 + i, h, v0 + vv);
            }
            ut[r] = x;
        }
        workgroupBarrier();

        let slot = olvl_slot(m, c);
        if (c == P.nt - 1u && kk < P.dk) {
            // Hand-off: the state the last chunk reads at this level (zero if it does not read).
            for (var vv = 0u; vv < nbv; vv++) {
                hstate[((m * P.heads + h) * P.dk + kk) * P.dv + v0 + vv] =
                    select(0.0, ra[vv], slot != NO_SLOT);
            }
        }

        if (slot != NO_SLOT) {
            var p: array<f32, 8>;
            if (row < n) {
                p = partial_products(t0 + row, h, part, 0u, 0u);
            }
            for (var v = 0u; v < BV; v++) {
                red[lid * BV + v] = p[v];
            }
            workgroupBarrier();
            for (var r = lid; r < C * BV; r += WG) {
                let i = r / BV;
                let vv = r % BV;
                if (i < n && vv < nbv) {
                    var acc = 0.0;
                    for (var q = 0u; q < SPLIT; q++) {
                        acc += red[(i * SPLIT + q) * BV + vv];
                    }
                    olvl[((slot * C + i) * P.heads + h) * P.dv + v0 + vv] =
                        lam[lam_idx(t0 + i, h, col)] * fq[i] * acc;
                }
            }
            workgroupBarrier();
        }
        if (c == P.nt - 1u) {
            break;
        }

        if (GDN) {
            // xa = W̃ sa, xb = W̃ sb (C x BV each), through the partial sums.
            var pa: array<f32, 8>;
            var pb: array<f32, 8>;
            if (row < n) {
                pa = partial_products(t0 + row, h, part, 1u, 0u);
                pb = partial_products(t0 + row, h, part, 1u, 1u);
            }
            for (var v = 0u; v < BV; v++) {
                red[lid * BV + v] = pa[v];
            }
            workgroupBarrier();
            for (var r = lid; r < C * BV; r += WG) {
                let i = r / BV;
                let vv = r % BV;
                var acc = 0.0;
                for (var q = 0u; q < SPLIT; q++) {
                    acc += red[(i * SPLIT + q) * BV + vv];
                }
                xa[r] = acc;
            }
            workgroupBarrier();
            for (var v = 0u; v < BV; v++) {
                red[lid * BV + v] = pb[v];
            }
            workgroupBarrier();
            for (var r = lid; r < C * BV; r += WG) {
                let i = r / BV;
                let vv = r % BV;
                var acc = 0.0;
                for (var q = 0u; q < SPLIT; q++) {
                    acc += red[(i * SPLIT + q) * BV + vv];
                }
                xb[r] = acc;
            }
            workgroupBarrier();
        }

        // Transition, contribution, group boundary: thread kk updates its rows.
        if (kk < P.dk) {
            let eg = exp(g_last);
            for (var v = 0u; v < BV; v++) {
                ra[v] = eg * ra[v];
                rb[v] = eg * rb[v];
            }
            for (var i = 0u; i < n; i++) {
                let kti = kt_at(t0 + i, h, kk) * fk[i];
                for (var v = 0u; v < BV; v++) {
                    var da = 0.0;
                    var db = ut[i * BV + v];
                    if (GDN) {
                        da = xa[i * BV + v];
                        db -= xb[i * BV + v];
                    }
                    ra[v] -= kti * da;
                    rb[v] += kti * db;
                }
            }
            if ((c + 1u) % half == 0u) {
                let reset = !sat && (c + 1u) % (2u * half) == 0u;
                for (var v = 0u; v < BV; v++) {
                    ra[v] = select(ra[v] + rb[v], 0.0, reset);
                    rb[v] = 0.0;
                }
            }
            for (var v = 0u; v < BV; v++) {
                sa[kk * BV + v] = ra[v];
                sb[kk * BV + v] = rb[v];
            }
        }
        workgroupBarrier();
    }
}
