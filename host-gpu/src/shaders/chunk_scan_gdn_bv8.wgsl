// Inter-chunk levels of the Gated DeltaNet form, variant with BV = 8 columns per workgroup and
// both states in workgroup memory (LOGLINEAR_GDN_SCAN_BV=8; the default is chunk_scan_gdn.wgsl,
// 16 columns, states in registers). Same inputs and dispatch; results equal within rounding.
//
// Two states per workgroup, in workgroup memory as [dk][2] vec4 (columns 0..3, 4..7):
//   `sa` is what reader chunks read, `sb` collects the current group.
//   regular level m (m < m_top): chunk c reads iff bit m of c is 1; sources are chunks with bit m
//     = 0; after the first half of an aligned group of 2^(m+1) chunks sa = sb, after the second
//     half sa = 0 (exactly the per-level scan of §7.2).
//   saturated level m_top: every chunk reads sa = all chunks before (c >> m)<<m, the sum of all
//     exact levels >= m_top (the runtime's saturating top level); every chunk is a source.
// Transition of each state: s ↦ e^Γ s + K̃ᵀ(σU − W̃ s), σ = 1 for the collecting state of a
// source chunk, else 0. Reader rows λ q̃ sa go to olvl[slot] (olvl_slot), summed into o by the
// combine kernel. Before the last chunk the read state is written to hstate[m].
//
// Per chunk: (A) the row products q̃ sa, W̃ sa, W̃ sb that can be non-zero and are needed (sa is
// zero exactly when the chunk does not read; sb when it starts a group; W̃ sa is not needed in a
// regular level's group-last chunk, after which sa is cleared: all of level 0), each 64 rows by 8 columns, split over the
// dk range so that all 256 threads work: one product in quarters, two in halves, the third (the
// saturated level only) in a second round; (R) partial sums reduced, X = σU − W̃ s formed;
// (B) the state update by dk row (both vec4 halves, both live states per K̃ word loaded).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> qt: array<f32>;
@group(0) @binding(2) var<storage, read> kt: array<f32>;
@group(0) @binding(3) var<storage, read> wt: array<f32>;
@group(0) @binding(4) var<storage, read> u: array<f32>;
@group(0) @binding(5) var<storage, read> gam: array<f32>;
@group(0) @binding(6) var<storage, read> lam: array<f32>;
@group(0) @binding(7) var<storage, read_write> olvl: array<f32>;
@group(0) @binding(8) var<storage, read_write> hstate: array<f32>;

const BV: u32 = 8u; // columns per workgroup: two vec4
const WG: u32 = 256u;
const NONE: u32 = 3u; // no product

var<workgroup> sa: array<vec4<f32>, 512>;   // [MAX_DK][2]: the read state
var<workgroup> sb: array<vec4<f32>, 512>;   // [MAX_DK][2]: the collecting state
var<workgroup> part: array<vec4<f32>, 512>; // [4 units][C][2]: partial sums of a product round
var<workgroup> xa: array<vec4<f32>, 128>;   // [C][2]: −W̃ sa
var<workgroup> xb: array<vec4<f32>, 128>;   // [C][2]: U − W̃ sb

struct Pair {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

// Rows i of product `which` (0: q̃ sa, 1: W̃ sa, 2: W̃ sb) over dk rows k0..k1 of chunk c.
// `base` + kk * C + i is element (kk, i) of the chunk's transposed q̃ or W̃.
fn product(which: u32, c: u32, h: u32, i: u32, k0: u32, k1: u32) -> Pair {
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    let base = (c * P.heads + h) * P.dk * C + i;
    var kk = k0;
    if (which == 0u) {
        for (; kk + 1u < k1; kk += 2u) {
            let x0 = qt[base + kk * C];
            let x1 = qt[base + (kk + 1u) * C];
            lo += x0 * sa[2u * kk] + x1 * sa[2u * kk + 2u];
            hi += x0 * sa[2u * kk + 1u] + x1 * sa[2u * kk + 3u];
        }
        if (kk < k1) {
            let x = qt[base + kk * C];
            lo += x * sa[2u * kk];
            hi += x * sa[2u * kk + 1u];
        }
    } else if (which == 1u) {
        for (; kk + 1u < k1; kk += 2u) {
            let x0 = wt[base + kk * C];
            let x1 = wt[base + (kk + 1u) * C];
            lo += x0 * sa[2u * kk] + x1 * sa[2u * kk + 2u];
            hi += x0 * sa[2u * kk + 1u] + x1 * sa[2u * kk + 3u];
        }
        if (kk < k1) {
            let x = wt[base + kk * C];
            lo += x * sa[2u * kk];
            hi += x * sa[2u * kk + 1u];
        }
    } else {
        for (; kk + 1u < k1; kk += 2u) {
            let x0 = wt[base + kk * C];
            let x1 = wt[base + (kk + 1u) * C];
            lo += x0 * sb[2u * kk] + x1 * sb[2u * kk + 2u];
            hi += x0 * sb[2u * kk + 1u] + x1 * sb[2u * kk + 3u];
        }
        if (kk < k1) {
            let x = wt[base + kk * C];
            lo += x * sb[2u * kk];
            hi += x * sb[2u * kk + 1u];
        }
    }
    return Pair(lo, hi);
}

// Four consecutive U values of row i of chunk c from column d (columns >= dv read as 0).
fn u4(c: u32, i: u32, h: u32, d: u32) -> vec4<f32> {
    var x = vec4<f32>(0.0);
    let b = ((c * P.heads + h) * C + i) * P.dv;
    for (var e = 0u; e < 4u; e++) {
        if (d + e < P.dv) {
            x[e] = u[b + d + e];
        }
    }
    return x;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let m = wg.y;
    let h = wg.z;
    let sat = m == P.m_top;
    let col = min(C0P1 + m, P.top);
    let nbv = min(BV, P.dv - v0);
    let half = 1u << m;
    let dk = P.dk;
    let ns = dk * 2u;
    // Phase A / R thread: row i, unit (A) or column half and product (R).
    let i = lid % C;
    let unit = lid / C;
    let rhf = unit % 2u;
    let rp = unit / 2u;

    for (var e = lid; e < ns; e += WG) {
        sa[e] = vec4<f32>(0.0);
        sb[e] = vec4<f32>(0.0);
    }
    workgroupBarrier();

    for (var c = 0u; c < P.nt; c++) {
        let t0 = c * C;
        let n = min(C, P.t - t0);
        let last = c + 1u == P.nt;
        let adds = sat || ((c >> m) & 1u) == 0u; // a source chunk
        let slot = olvl_slot(m, c);
        let reads = slot != NO_SLOT; // sa can be non-zero exactly when the chunk reads
        // sb can be non-zero unless the chunk starts a group (regular) / block (saturated).
        let b_live = adds && (c % half) != 0u;
        // A regular level's read state is cleared after the group's last chunk: no W̃ sa, no update.
        let clear_a = !sat && (c + 1u) % (2u * half) == 0u;

        if (last) {
            // Hand-off: the state the last chunk reads at this level (zero if it does not read).
            for (var e = lid; e < ns; e += WG) {
                let s = select(vec4<f32>(0.0), sa[e], reads);
                let b = ((m * P.heads + h) * dk + e / 2u) * P.dv + v0 + (e % 2u) * 4u;
                for (var j = 0u; j < 4u; j++) {
                    if ((e % 2u) * 4u + j < nbv) {
                        hstate[b + j] = s[j];
                    }
                }
            }
        }

        // The products this chunk needs, in rounds of at most two.
        var p0 = NONE;
        var p1 = NONE;
        var p2 = NONE;
        if (reads) {
            p0 = 0u;
            if (!last && !clear_a) {
                p1 = 1u;
            }
        }
        if (b_live && !last) {
            if (p0 == NONE) {
                p0 = 2u;
            } else if (p1 == NONE) {
                p1 = 2u;
            } else {
                p2 = 2u;
            }
        }
        // X = U (the collecting state is zero) unless overwritten below.
        if (adds && !last && !b_live && lid < 2u * C) {
            let ri = lid / 2u;
            let rh = lid % 2u;
            var x = vec4<f32>(0.0);
            if (ri < n) {
                x = u4(c, ri, h, v0 + rh * 4u);
            }
            xb[lid] = x;
        }

        for (var round = 0u; round < 2u; round++) {
            let qa = select(p0, p2, round == 1u);
            let qb = select(p1, NONE, round == 1u);
            if (qa == NONE) {
                break;
            }
            let two = qb != NONE;
            // (A) unit u: quarter u of the dk range of qa, or half u % 2 of qa (u < 2) / qb.
            var pr = Pair(vec4<f32>(0.0), vec4<f32>(0.0));
            if (i < n) {
                if (two) {
                    let kh = (dk + 1u) / 2u;
                    let k0 = rhf * kh;
                    pr = product(select(qa, qb, rp == 1u), c, h, i, k0, min(dk, k0 + kh));
                } else {
                    let kq = (dk + 3u) / 4u;
                    let k0 = min(dk, unit * kq);
                    pr = product(qa, c, h, i, k0, min(dk, k0 + kq));
                }
            }
            part[(unit * C + i) * 2u] = pr.lo;
            part[(unit * C + i) * 2u + 1u] = pr.hi;
            workgroupBarrier();
            // (R) thread (row i, column half rhf, product rp of the round).
            if (rp == 0u || two) {
                let which = select(qa, qb, rp == 1u);
                var s: vec4<f32>;
                if (two) {
                    let b0 = (2u * rp * C + i) * 2u + rhf;
                    s = part[b0] + part[b0 + 2u * C];
                } else {
                    let b0 = i * 2u + rhf;
                    s = part[b0] + part[b0 + 2u * C] + part[b0 + 4u * C] + part[b0 + 6u * C];
                }
                if (which == 0u) {
                    if (i < n) {
                        let o4 = lam[lam_idx(t0 + i, h, col)] * s;
                        let b = ((slot * C + i) * P.heads + h) * P.dv + v0 + rhf * 4u;
                        for (var e = 0u; e < 4u; e++) {
                            if (rhf * 4u + e < nbv) {
                                olvl[b + e] = o4[e];
                            }
                        }
                    }
                } else if (which == 1u) {
                    xa[i * 2u + rhf] = -s;
                } else {
                    var x = vec4<f32>(0.0);
                    if (i < n) {
                        x = u4(c, i, h, v0 + rhf * 4u) - s;
                    }
                    xb[i * 2u + rhf] = x;
                }
            }
            workgroupBarrier();
        }
        if (last) {
            break;
        }
        if (p0 == NONE) {
            workgroupBarrier(); // xb = U above
        }

        // (B) Transition, contribution, group boundary: thread kk updates row kk of the live
        // states (both vec4 halves: every K̃ word loaded feeds 4 or 8 products).
        let eg = exp(gam[(t0 + n - 1u) * P.heads + h]);
        let up_a = reads && !clear_a;
        let up_b = adds;
        let to_half = (c + 1u) % half == 0u;
        for (var kk = lid; kk < dk; kk += WG) {
            var a0 = sa[2u * kk];
            var a1 = sa[2u * kk + 1u];
            var b0 = sb[2u * kk];
            var b1 = sb[2u * kk + 1u];
            // Rows of the chunk's K̃ block are dk words apart.
            var f = (c * P.heads + h) * C * dk + kk;
            if (up_a && up_b) {
                a0 *= eg;
                a1 *= eg;
                b0 *= eg;
                b1 *= eg;
                for (var r = 0u; r < n; r++) {
                    let kv = kt[f];
                    a0 += kv * xa[2u * r];
                    a1 += kv * xa[2u * r + 1u];
                    b0 += kv * xb[2u * r];
                    b1 += kv * xb[2u * r + 1u];
                    f += dk;
                }
            } else if (up_a) {
                a0 *= eg;
                a1 *= eg;
                for (var r = 0u; r < n; r++) {
                    let kv = kt[f];
                    a0 += kv * xa[2u * r];
                    a1 += kv * xa[2u * r + 1u];
                    f += dk;
                }
            } else if (up_b) {
                b0 *= eg;
                b1 *= eg;
                for (var r = 0u; r < n; r++) {
                    let kv = kt[f];
                    b0 += kv * xb[2u * r];
                    b1 += kv * xb[2u * r + 1u];
                    f += dk;
                }
            }
            if (to_half) {
                if (clear_a) {
                    a0 = vec4<f32>(0.0);
                    a1 = vec4<f32>(0.0);
                } else {
                    a0 += b0;
                    a1 += b1;
                }
                b0 = vec4<f32>(0.0);
                b1 = vec4<f32>(0.0);
            }
            sa[2u * kk] = a0;
            sa[2u * kk + 1u] = a1;
            sb[2u * kk] = b0;
            sb[2u * kk + 1u] = b1;
        }
        workgroupBarrier();
    }
}
