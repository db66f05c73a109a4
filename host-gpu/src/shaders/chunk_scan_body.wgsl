// Inter-chunk levels (spec §7.2), all levels in one dispatch: one workgroup per
// (dv block of BV columns, head of the dispatch's head group, chunk level m), sequential over
// chunks. Thread kk (< dk) owns row
// kk of both dk x BV states in registers (updates read K̃ coalesced, 8 columns per load); a copy
// in workgroup memory serves the reads (q̃ h, W̃ h), which split dk over 4 threads per row.
//
// Two states per workgroup: `sa` is what reader chunks read, `sb` collects the current group.
//   regular level m (m < m_top): chunk c reads iff bit m of c is 1; sources are chunks with bit m
//     = 0; after the first half of an aligned group of 2^(m+1) chunks sa = sb, after the second
//     half sa = 0 (exactly the per-level scan of §7.2).
//   saturated level m_top: every chunk reads sa = all chunks before (c >> m)<<m, the sum of all
//     exact levels >= m_top (the runtime's saturating top level); every chunk is a source.
// Reader outputs go to olvl (olvl_slot, olvl_row), weighted by λ column min(c0+1+m, top); the
// combine kernel adds them to o. Before the last chunk the read state is written to hstate[m] for the
// final-state kernel.

const BV: u32 = 8u; // columns per workgroup: two vec4
const WG: u32 = 256u;
const SPLIT: u32 = 4u; // threads per row in the q̃ h / W̃ h products

// Every per-thread vector is a named vec4 (no private arrays: drivers may put those in slow
// local memory). Row kk of a state is sX[2 kk] (columns 0..3) and sX[2 kk + 1] (4..7).
var<workgroup> sa: array<vec4<f32>, 512>;  // MAX_DK * BV / 4: copy of the read state
// GDN only (the Mamba-2 header makes these one element long, which keeps its workgroup memory
// small and more workgroups resident):
var<workgroup> sb: array<vec4<f32>, SB_LEN>; // copy of the collecting state, for W̃ sb
var<workgroup> xa: array<vec4<f32>, X_LEN>;  // C * BV / 4: W̃ sa
var<workgroup> xb: array<vec4<f32>, X_LEN>;  // W̃ sb
var<workgroup> ut: array<vec4<f32>, 128>;  // U tile of this chunk and column block
var<workgroup> red: array<vec4<f32>, 512>; // WG * BV / 4 partial sums
var<workgroup> fq: array<f32, 64>;
var<workgroup> fk: array<f32, 64>;

struct Pair {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

// Σ_{kk ≡ part (mod SPLIT)} q̃[t][kk] · sa[kk][:]. Unrolled by 4 so that four global loads are
// in flight at once (the loop is latency-bound otherwise).
fn q_times_sa(t: u32, h: u32, part: u32) -> Pair {
    var p = Pair(vec4<f32>(0.0), vec4<f32>(0.0));
    var kk = part;
    for (; kk + 3u * SPLIT < P.dk; kk += 4u * SPLIT) {
        let x0 = qt_at(t, h, kk);
        let x1 = qt_at(t, h, kk + SPLIT);
        let x2 = qt_at(t, h, kk + 2u * SPLIT);
        let x3 = qt_at(t, h, kk + 3u * SPLIT);
        p.lo += x0 * sa[2u * kk] + x1 * sa[2u * (kk + SPLIT)]
            + x2 * sa[2u * (kk + 2u * SPLIT)] + x3 * sa[2u * (kk + 3u * SPLIT)];
        p.hi += x0 * sa[2u * kk + 1u] + x1 * sa[2u * (kk + SPLIT) + 1u]
            + x2 * sa[2u * (kk + 2u * SPLIT) + 1u] + x3 * sa[2u * (kk + 3u * SPLIT) + 1u];
    }
    for (; kk < P.dk; kk += SPLIT) {
        let x = qt_at(t, h, kk);
        p.lo += x * sa[2u * kk];
        p.hi += x * sa[2u * kk + 1u];
    }
    return p;
}

// Σ_{kk ≡ part (mod SPLIT)} W̃[t][kk] · s[kk][:] with s = sa (state 0) or sb (state 1),
// unrolled by 4.
fn w_times_state(t: u32, h: u32, part: u32, state: u32) -> Pair {
    var p = Pair(vec4<f32>(0.0), vec4<f32>(0.0));
    var kk = part;
    for (; kk + 3u * SPLIT < P.dk; kk += 4u * SPLIT) {
        let x0 = wt_at(t, h, kk);
        let x1 = wt_at(t, h, kk + SPLIT);
        let x2 = wt_at(t, h, kk + 2u * SPLIT);
        let x3 = wt_at(t, h, kk + 3u * SPLIT);
        let k1 = kk + SPLIT;
        let k2 = kk + 2u * SPLIT;
        let k3 = kk + 3u * SPLIT;
        if (state == 0u) {
            p.lo += x0 * sa[2u * kk] + x1 * sa[2u * k1] + x2 * sa[2u * k2] + x3 * sa[2u * k3];
            p.hi += x0 * sa[2u * kk + 1u] + x1 * sa[2u * k1 + 1u] + x2 * sa[2u * k2 + 1u] + x3 * sa[2u * k3 + 1u];
        } else {
            p.lo += x0 * sb[2u * kk] + x1 * sb[2u * k1] + x2 * sb[2u * k2] + x3 * sb[2u * k3];
            p.hi += x0 * sb[2u * kk + 1u] + x1 * sb[2u * k1 + 1u] + x2 * sb[2u * k2 + 1u] + x3 * sb[2u * k3 + 1u];
        }
    }
    for (; kk < P.dk; kk += SPLIT) {
        let x = wt_at(t, h, kk);
        if (state == 0u) {
            p.lo += x * sa[2u * kk];
            p.hi += x * sa[2u * kk + 1u];
        } else {
            p.lo += x * sb[2u * kk];
            p.hi += x * sb[2u * kk + 1u];
        }
    }
    return p;
}

// Sum of the SPLIT partials of row i, half `hi` (0 or 1).
fn reduce_row(i: u32, hi: u32) -> vec4<f32> {
    let b = i * SPLIT * 2u + hi;
    return red[b] + red[b + 2u] + red[b + 4u] + red[b + 6u];
}

// Slot lid < 2C (row lid / 2, column half lid % 2) of W̃ s for the chunk's rows at t0, s = sa
// (state 0) or sb (state 1): the SPLIT partials of each row through `red`, then reduced; 0 for
// the other threads. Every thread calls it (barrier inside).
fn w_state_rows(t0: u32, n: u32, h: u32, row: u32, part: u32, lid: u32, state: u32) -> vec4<f32> {
    var p = Pair(vec4<f32>(0.0), vec4<f32>(0.0));
    if (row < n) {
        p = w_times_state(t0 + row, h, part, state);
    }
    red[2u * lid] = p.lo;
    red[2u * lid + 1u] = p.hi;
    workgroupBarrier();
    var x = vec4<f32>(0.0);
    if (lid < CHUNK * 2u) {
        x = reduce_row(lid / 2u, lid % 2u);
    }
    return x;
}

// Row r of the chunk into the owned state rows: GDN a −= K̃ xa, b += K̃ (U − xb); Mamba-2
// b += K̃ U. The flags say which state and which vec4 of columns this thread updates.
fn update_rows(
    r: u32,
    kti: f32,
    a_lo: bool,
    b_lo: bool,
    a_hi: bool,
    b_hi: bool,
    ra0: ptr<function, vec4<f32>>,
    ra1: ptr<function, vec4<f32>>,
    rb0: ptr<function, vec4<f32>>,
    rb1: ptr<function, vec4<f32>>,
) {
    if (GDN) {
        if (a_lo) {
            *ra0 -= kti * xa[2u * r];
        }
        if (a_hi) {
            *ra1 -= kti * xa[2u * r + 1u];
        }
        if (b_lo) {
            *rb0 += kti * (ut[2u * r] - xb[2u * r]);
        }
        if (b_hi) {
            *rb1 += kti * (ut[2u * r + 1u] - xb[2u * r + 1u]);
        }
    } else {
        if (b_lo) {
            *rb0 += kti * ut[2u * r];
        }
        if (b_hi) {
            *rb1 += kti * ut[2u * r + 1u];
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let h = P.head0 + wg.y;
    let m = wg.z;
    let sat = m == P.m_top;
    let col = min(C0P1 + m, P.top);
    let nbv = min(BV, P.dv - v0);
    let half = 1u << m;
    // State row owned by this thread (if < dk). Mamba-2 with dk <= WG/2: two threads share a
    // row, one per vec4 of columns, so that every thread has update work (measured faster on an
    // H200; for GDN it was slower, the W̃ products dominate there).
    let split = !GDN && P.dk <= WG / 2u;
    let kk = select(lid, lid % (WG / 2u), split);
    let do_lo = !split || lid < WG / 2u;
    let do_hi = !split || lid >= WG / 2u;
    let row = lid / SPLIT;    // row of the q̃ h / W̃ h products
    let part = lid % SPLIT;

    var ra0 = vec4<f32>(0.0);
    var ra1 = vec4<f32>(0.0);
    var rb0 = vec4<f32>(0.0);
    var rb1 = vec4<f32>(0.0);
    for (var e = lid; e < MAX_DK * 2u; e += WG) {
        sa[e] = vec4<f32>(0.0);
        if (GDN) {
            sb[e] = vec4<f32>(0.0);
        }
    }
    workgroupBarrier();

    for (var c = 0u; c < P.nt; c++) {
        let t0 = c * CHUNK;
        let n = min(CHUNK, P.t - t0);
        let adds = sat || ((c >> m) & 1u) == 0u;
        let use_a = sat || !adds; // the read state can be non-zero
        let use_b = adds;         // the collecting state can be non-zero
        let g_last = gam[(t0 + n - 1u) * P.heads + h];
        if (lid < CHUNK) {
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
        if (lid < CHUNK * 2u) {
            // ut[2 i + half]: columns v0 + 4 half .. + 3 of row i.
            let i = lid / 2u;
            let vb = (lid % 2u) * 4u;
            var x = vec4<f32>(0.0);
            if (adds && i < n) {
                for (var e = 0u; e < 4u; e++) {
                    if (vb + e < nbv) {
                        x[e] = u_at(t0 + i, h, v0 + vb + e);
                    }
                }
            }
            ut[lid] = x;
        }
        workgroupBarrier();

        let slot = olvl_slot(m, c);
        if (c == P.nt - 1u && kk < P.dk) {
            // Hand-off: the state the last chunk reads at this level (zero if it does not read).
            let on = slot != NO_SLOT;
            let base = ((m * P.heads + h) * P.dk + kk) * P.dv + v0;
            for (var vv = 0u; vv < nbv; vv++) {
                if (vv < 4u && do_lo) {
                    hstate[base + vv] = select(0.0, ra0[vv], on);
                } else if (vv >= 4u && do_hi) {
                    hstate[base + vv] = select(0.0, ra1[vv - 4u], on);
                }
            }
        }

        if (slot != NO_SLOT) {
            var p = Pair(vec4<f32>(0.0), vec4<f32>(0.0));
            if (row < n) {
                p = q_times_sa(t0 + row, h, part);
            }
            red[2u * lid] = p.lo;
            red[2u * lid + 1u] = p.hi;
            workgroupBarrier();
            // 128 threads: row i, half hi of the columns.
            if (lid < CHUNK * 2u) {
                let i = lid / 2u;
                let hi = lid % 2u;
                if (i < n) {
                    let t = t0 + i;
                    let o4 = lam[lam_idx(t, h, col)] * fq[i] * reduce_row(i, hi);
                    let base = olvl_row(slot, i, h) + v0 + hi * 4u;
                    for (var e = 0u; e < 4u; e++) {
                        if (hi * 4u + e < nbv) {
                            olvl[base + e] = o4[e];
                        }
                    }
                }
            }
            workgroupBarrier();
        }
        if (c == P.nt - 1u) {
            break;
        }

        if (GDN) {
            // xa = W̃ sa, xb = W̃ sb (C x BV each), through the partial sums; only for the
            // states that can be non-zero.
            if (use_a) {
                let x = w_state_rows(t0, n, h, row, part, lid, 0u);
                if (lid < CHUNK * 2u) {
                    xa[lid] = x;
                }
                workgroupBarrier();
            }
            if (use_b) {
                let x = w_state_rows(t0, n, h, row, part, lid, 1u);
                if (lid < CHUNK * 2u) {
                    xb[lid] = x;
                }
                workgroupBarrier();
            }
        }

        // Transition, contribution, group boundary: thread kk updates its row. A regular level's
        // read state is zero in the first half of a group and its collecting state in the second,
        // so each chunk updates one of them (the saturated level both).
        if (kk < P.dk) {
            let eg = exp(g_last);
            ra0 *= eg;
            ra1 *= eg;
            rb0 *= eg;
            rb1 *= eg;
            if (use_b || (GDN && use_a)) {
                // Four rows per step: four independent K̃ loads in flight.
                var i = 0u;
                for (; i + 3u < n; i += 4u) {
                    let k0 = kt_at(t0 + i, h, kk) * fk[i];
                    let k1 = kt_at(t0 + i + 1u, h, kk) * fk[i + 1u];
                    let k2 = kt_at(t0 + i + 2u, h, kk) * fk[i + 2u];
                    let k3 = kt_at(t0 + i + 3u, h, kk) * fk[i + 3u];
                    update_rows(i, k0, use_a && do_lo, use_b && do_lo, use_a && do_hi, use_b && do_hi, &ra0, &ra1, &rb0, &rb1);
                    update_rows(i + 1u, k1, use_a && do_lo, use_b && do_lo, use_a && do_hi, use_b && do_hi, &ra0, &ra1, &rb0, &rb1);
                    update_rows(i + 2u, k2, use_a && do_lo, use_b && do_lo, use_a && do_hi, use_b && do_hi, &ra0, &ra1, &rb0, &rb1);
                    update_rows(i + 3u, k3, use_a && do_lo, use_b && do_lo, use_a && do_hi, use_b && do_hi, &ra0, &ra1, &rb0, &rb1);
                }
                for (; i < n; i++) {
                    let k0 = kt_at(t0 + i, h, kk) * fk[i];
                    update_rows(i, k0, use_a && do_lo, use_b && do_lo, use_a && do_hi, use_b && do_hi, &ra0, &ra1, &rb0, &rb1);
                }
            }
            if ((c + 1u) % half == 0u) {
                if (!sat && (c + 1u) % (2u * half) == 0u) {
                    ra0 = vec4<f32>(0.0);
                    ra1 = vec4<f32>(0.0);
                } else {
                    ra0 += rb0;
                    ra1 += rb1;
                }
                rb0 = vec4<f32>(0.0);
                rb1 = vec4<f32>(0.0);
            }
            if (do_lo) {
                sa[2u * kk] = ra0;
                if (GDN) {
                    sb[2u * kk] = rb0;
                }
            }
            if (do_hi) {
                sa[2u * kk + 1u] = ra1;
                if (GDN) {
                    sb[2u * kk + 1u] = rb1;
                }
            }
        }
        workgroupBarrier();
    }
}
