// Inter-chunk levels of the Gated DeltaNet form (spec §7.2), all levels in one dispatch: one
// workgroup per (dv block of BV = 16 columns, level m, head), sequential over chunks. Inputs
// from chunk_intra_gdn.wgsl, each a contiguous block per (chunk, head): q̃ᵀ and W̃ᵀ ([c][H][dk][C]:
// a warp's rows are consecutive words), K̃ ([c][H][C][dk]: a warp's dk rows are consecutive words)
// and U ([c][H][C][dv]). Workgroup ids: x = dv block, y = level, z = head of the dispatch's head
// group (olvl_row), so that the workgroups
// of one head (every level, every dv block) run together and share these blocks in the cache.
//
// Two states per level: `sa` is what reader chunks read, `sb` collects the current group.
//   regular level m (m < m_top): chunk c reads iff bit m of c is 1; sources are chunks with bit m
//     = 0; after the first half of an aligned group of 2^(m+1) chunks sa = sb, after the second
//     half sa = 0 (exactly the per-level scan of §7.2).
//   saturated level m_top: every chunk reads sa = all chunks before (c >> m)<<m, the sum of all
//     exact levels >= m_top (the runtime's saturating top level); every chunk is a source.
// Transition of each state: s ↦ e^Γ s + K̃ᵀ(σU − W̃ s), σ = 1 for the collecting state of a
// source chunk, else 0. Reader rows λ q̃ sa go to olvl[slot] (olvl_slot), summed into o by the
// combine kernel. Before the last chunk the read state is written to hstate[m].
//
// Row kk of both states lives in registers: two threads hold two vec4 of it each where 2 dk fits
// the workgroup (all threads update), else one thread holds all four. Only one state is
// live in a regular level's chunk (sa iff the chunk reads, sb iff it is a source); the products
// read the live one from a single workgroup-memory copy `st` (the saturated level copies sb there
// for a second round). Per chunk:
// (A) the row products that can be non-zero and are needed: q̃ sa (readers), W̃ sa (readers but
//     a regular level's group-last chunk, after which sa is cleared: all of level 0), W̃ sb (not
//     at a group's first chunk, where sb is zero); 64 rows × 16 columns each, thread = (row, 8
//     columns, product or dk half) so that all 256 threads work, partial sums in `part`;
// (R) reduced: o rows out, X = σU − W̃ s into xa / xb;
// (B) the state update by dk row: every K̃ word loaded feeds 8 or 16 (both states) products.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> qt: array<f32>;
@group(0) @binding(2) var<storage, read> kt: array<f32>;
@group(0) @binding(3) var<storage, read> wt: array<f32>;
@group(0) @binding(4) var<storage, read> u: array<f32>;
@group(0) @binding(5) var<storage, read> gam: array<f32>;
@group(0) @binding(6) var<storage, read> lam: array<f32>;
@group(0) @binding(7) var<storage, read_write> olvl: array<f32>;
@group(0) @binding(8) var<storage, read_write> hstate: array<f32>;

const BV: u32 = 16u; // columns per workgroup: four vec4 (GDN_SCAN_BV in chunk_scan/mod.rs)
const WG: u32 = 256u;
const NONE: u32 = 3u; // no product

var<workgroup> st: array<vec4<f32>, 1024>;  // [MAX_DK][4]: the state the products read
var<workgroup> part: array<vec4<f32>, 512>; // [4 units][C][2]: partial sums of a product round
var<workgroup> xa: array<vec4<f32>, 256>;   // [C][4]: −W̃ sa
var<workgroup> xb: array<vec4<f32>, 256>;   // [C][4]: U − W̃ sb

struct Pair {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

// Row i, columns 8 ch .. 8 ch + 7 of q̃ st (src 0) or W̃ st (src 1) over dk rows k0..k1 of chunk
// c. `base` + kk * C is element (kk, i) of the chunk's transposed q̃ or W̃.
fn product(src: u32, c: u32, h: u32, i: u32, ch: u32, k0: u32, k1: u32) -> Pair {
    var lo = vec4<f32>(0.0);
    var hi = vec4<f32>(0.0);
    let base = (c * P.heads + h) * P.dk * CHUNK + i;
    var kk = k0;
    var s = kk * 4u + ch * 2u;
    // One loop per source rather than a select per load, for the same reason as the state
    // transition's three loops below. Four rows per step keep four loads in flight: the loop
    // otherwise waits on each load it has just issued (BENCHMARKS.md, "where chunk_scan_gdn's
    // time goes").
    if (src == 0u) {
        for (; kk + 3u < k1; kk += 4u) {
            let x0 = qt[base + kk * CHUNK];
            let x1 = qt[base + (kk + 1u) * CHUNK];
            let x2 = qt[base + (kk + 2u) * CHUNK];
            let x3 = qt[base + (kk + 3u) * CHUNK];
            lo += x0 * st[s] + x1 * st[s + 4u] + x2 * st[s + 8u] + x3 * st[s + 12u];
            hi += x0 * st[s + 1u] + x1 * st[s + 5u] + x2 * st[s + 9u] + x3 * st[s + 13u];
            s += 16u;
        }
        for (; kk < k1; kk++) {
            let x = qt[base + kk * CHUNK];
            lo += x * st[s];
            hi += x * st[s + 1u];
            s += 4u;
        }
    } else {
        for (; kk + 3u < k1; kk += 4u) {
            let x0 = wt[base + kk * CHUNK];
            let x1 = wt[base + (kk + 1u) * CHUNK];
            let x2 = wt[base + (kk + 2u) * CHUNK];
            let x3 = wt[base + (kk + 3u) * CHUNK];
            lo += x0 * st[s] + x1 * st[s + 4u] + x2 * st[s + 8u] + x3 * st[s + 12u];
            hi += x0 * st[s + 1u] + x1 * st[s + 5u] + x2 * st[s + 9u] + x3 * st[s + 13u];
            s += 16u;
        }
        for (; kk < k1; kk++) {
            let x = wt[base + kk * CHUNK];
            lo += x * st[s];
            hi += x * st[s + 1u];
            s += 4u;
        }
    }
    return Pair(lo, hi);
}

// Four consecutive U values of row i of chunk c from column d (columns >= dv read as 0).
fn u4(c: u32, i: u32, h: u32, d: u32) -> vec4<f32> {
    var x = vec4<f32>(0.0);
    let b = ((c * P.heads + h) * CHUNK + i) * P.dv;
    for (var e = 0u; e < 4u; e++) {
        if (d + e < P.dv) {
            x[e] = u[b + d + e];
        }
    }
    return x;
}

// Rows f, f + dk, f + 2 dk, f + 3 dk of K̃: four loads in flight per state-update step. The update
// runs on full chunks only (the last chunk, the one that can be partial, is not updated), so n is a
// multiple of 4.
fn krows(f: u32, dk: u32) -> vec4<f32> {
    return vec4<f32>(kt[f], kt[f + dk], kt[f + 2u * dk], kt[f + 3u * dk]);
}

// A thread's share of one state row in phase B: two vec4 columns (q0, q0 + 1 of the row's four)
// of both states.
struct Half {
    a0: vec4<f32>,
    a1: vec4<f32>,
    b0: vec4<f32>,
    b1: vec4<f32>,
}

fn zero_half() -> Half {
    let z = vec4<f32>(0.0);
    return Half(z, z, z, z);
}

// Columns q0, q0 + 1 of row kk of the state the next products read.
fn put_half(kk: u32, q0: u32, x0: vec4<f32>, x1: vec4<f32>) {
    st[kk * 4u + q0] = x0;
    st[kk * 4u + q0 + 1u] = x1;
}

// Columns v0 + 4 q0 + e < v0 + nbv of a state row at `base` (hand-off).
fn write_half(base: u32, q0: u32, nbv: u32, x0: vec4<f32>, x1: vec4<f32>) {
    for (var e = 0u; e < 4u; e++) {
        if (4u * q0 + e < nbv) {
            hstate[base + 4u * q0 + e] = x0[e];
        }
        if (4u * q0 + 4u + e < nbv) {
            hstate[base + 4u * q0 + 4u + e] = x1[e];
        }
    }
}

// (B) for a thread's share of row kk: the transition and contribution of chunk rows 0..n, K̃ row
// r of the chunk at f + r dk.
fn update(s: Half, f0: u32, q0: u32, n: u32, up_a: bool, up_b: bool, eg: f32) -> Half {
    var o = s;
    var f = f0;
    let dk = P.dk;
    // Three spelled-out loops rather than one that tests up_a and up_b per row: the single loop
    // measured 3-5 % slower on the whole GDN forward (BENCHMARKS.md).
    if (up_a && up_b) {
        o.a0 *= eg;
        o.a1 *= eg;
        o.b0 *= eg;
        o.b1 *= eg;
        for (var r = 0u; r < n; r += 4u) {
            let k = krows(f, dk);
            let j = 4u * r + q0;
            o.a0 += k.x * xa[j] + k.y * xa[j + 4u] + k.z * xa[j + 8u] + k.w * xa[j + 12u];
            o.a1 += k.x * xa[j + 1u] + k.y * xa[j + 5u] + k.z * xa[j + 9u] + k.w * xa[j + 13u];
            o.b0 += k.x * xb[j] + k.y * xb[j + 4u] + k.z * xb[j + 8u] + k.w * xb[j + 12u];
            o.b1 += k.x * xb[j + 1u] + k.y * xb[j + 5u] + k.z * xb[j + 9u] + k.w * xb[j + 13u];
            f += 4u * dk;
        }
    } else if (up_a) {
        o.a0 *= eg;
        o.a1 *= eg;
        for (var r = 0u; r < n; r += 4u) {
            let k = krows(f, dk);
            let j = 4u * r + q0;
            o.a0 += k.x * xa[j] + k.y * xa[j + 4u] + k.z * xa[j + 8u] + k.w * xa[j + 12u];
            o.a1 += k.x * xa[j + 1u] + k.y * xa[j + 5u] + k.z * xa[j + 9u] + k.w * xa[j + 13u];
            f += 4u * dk;
        }
    } else if (up_b) {
        o.b0 *= eg;
        o.b1 *= eg;
        for (var r = 0u; r < n; r += 4u) {
            let k = krows(f, dk);
            let j = 4u * r + q0;
            o.b0 += k.x * xb[j] + k.y * xb[j + 4u] + k.z * xb[j + 8u] + k.w * xb[j + 12u];
            o.b1 += k.x * xb[j + 1u] + k.y * xb[j + 5u] + k.z * xb[j + 9u] + k.w * xb[j + 13u];
            f += 4u * dk;
        }
    }
    return o;
}

// The end of a group of 2^m chunks: a regular level's read state is cleared after the group's
// second half and takes the collected sb after its first; sb starts again from zero.
fn end_group(s: Half, clear_a: bool) -> Half {
    let z = vec4<f32>(0.0);
    if (clear_a) {
        return Half(z, z, z, z);
    }
    return Half(s.a0 + s.b0, s.a1 + s.b1, z, z);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let v0 = wg.x * BV;
    let m = wg.y;
    let h = P.head0 + wg.z;
    let sat = m == P.m_top;
    let col = min(C0P1 + m, P.top);
    let nbv = min(BV, P.dv - v0);
    let half = 1u << m;
    let dk = P.dk;
    // Phase A / R thread: row i, unit (column half ch = unit % 2, and product or dk half).
    let i = lid % CHUNK;
    let unit = lid / CHUNK;
    let ch = unit % 2u;
    // Phase B thread: row kk of the states, vec4 columns q0 and q0 + 1 (`lo`). Where two threads
    // per row fit (2 dk <= WG) they split the row's columns, so that all threads update; else one
    // thread holds the whole row, columns 2 and 3 in `hi`.
    let split = 2u * dk <= WG;
    let kk = select(lid, lid % dk, split);
    let q0 = select(0u, (lid / dk) * 2u, split);
    let own = select(lid < dk, lid < 2u * dk, split);
    let own_hi = own && !split;

    var lo = zero_half();
    var hi = zero_half();
    for (var e = lid; e < dk * 4u; e += WG) {
        st[e] = vec4<f32>(0.0);
    }
    workgroupBarrier();

    for (var c = 0u; c < P.nt; c++) {
        let t0 = c * CHUNK;
        let n = min(CHUNK, P.t - t0);
        let last = c + 1u == P.nt;
        let adds = sat || ((c >> m) & 1u) == 0u; // a source chunk
        let slot = olvl_slot(m, c);
        let reads = slot != NO_SLOT; // sa can be non-zero exactly when the chunk reads
        // sb can be non-zero unless the chunk starts a group (regular) / block (saturated).
        let b_live = adds && (c % half) != 0u;
        // A regular level's read state is cleared after the group's last chunk.
        let clear_a = !sat && (c + 1u) % (2u * half) == 0u;

        if (last && own) {
            // Hand-off: the state the last chunk reads at this level (zero if it does not read).
            let base = ((m * P.heads + h) * dk + kk) * P.dv + v0;
            let z = vec4<f32>(0.0);
            write_half(base, q0, nbv, select(z, lo.a0, reads), select(z, lo.a1, reads));
            if (own_hi) {
                write_half(base, 2u, nbv, select(z, hi.a0, reads), select(z, hi.a1, reads));
            }
        }

        // Products: q̃ sa, W̃ sa on sa (st holds sa when the chunk reads); W̃ sb on sb, in a second
        // round (saturated level) or alone (st holds sb when the chunk does not read).
        let do_r = reads;
        let do_xa = reads && !last && !clear_a;
        let do_xb = b_live && !last;
        // X = U (the collecting state is zero) unless W̃ sb is subtracted below.
        if (adds && !last && !b_live) {
            let ri = lid / 4u;
            let q = lid % 4u;
            var x = vec4<f32>(0.0);
            if (ri < n) {
                x = u4(c, ri, h, v0 + q * 4u);
            }
            xb[lid] = x;
        }

        for (var round = 0u; round < 2u; round++) {
            // Round 0: the products on sa (or W̃ sb alone); round 1: W̃ sb after the sa products.
            var qa = NONE; // 0: q̃ sa, 1: W̃ sa, 2: W̃ sb
            var qb = NONE;
            if (round == 0u) {
                if (do_r) {
                    qa = 0u;
                    if (do_xa) {
                        qb = 1u;
                    }
                } else if (do_xb) {
                    qa = 2u;
                }
            } else if (do_r && do_xb) {
                qa = 2u;
            }
            if (qa == NONE) {
                break;
            }
            let two = qb != NONE;
            // (A) two products: unit = (product, column half) over all of dk; one: unit =
            // (dk half, column half).
            let p = select(qa, qb, two && unit >= 2u);
            var pr = Pair(vec4<f32>(0.0), vec4<f32>(0.0));
            if (i < n) {
                if (two) {
                    pr = product(select(1u, 0u, p == 0u), c, h, i, ch, 0u, dk);
                } else {
                    let kh = (dk + 1u) / 2u;
                    let k0 = (unit / 2u) * kh;
                    pr = product(select(1u, 0u, p == 0u), c, h, i, ch, k0, min(dk, k0 + kh));
                }
            }
            part[(unit * CHUNK + i) * 2u] = pr.lo;
            part[(unit * CHUNK + i) * 2u + 1u] = pr.hi;
            workgroupBarrier();
            // (R) thread (row i, column half ch) of product p: two products, one unit each; one
            // product, units ch and 2 + ch (the dk halves).
            if (two || unit < 2u) {
                var lo = part[(unit * CHUNK + i) * 2u];
                var hi = part[(unit * CHUNK + i) * 2u + 1u];
                if (!two) {
                    lo += part[((2u + unit) * CHUNK + i) * 2u];
                    hi += part[((2u + unit) * CHUNK + i) * 2u + 1u];
                }
                if (p == 0u) {
                    if (i < n) {
                        let l = lam[lam_idx(t0 + i, h, col)];
                        let b = olvl_row(slot, i, h) + v0 + ch * 8u;
                        for (var e = 0u; e < 4u; e++) {
                            if (ch * 8u + e < nbv) {
                                olvl[b + e] = l * lo[e];
                            }
                            if (ch * 8u + 4u + e < nbv) {
                                olvl[b + 4u + e] = l * hi[e];
                            }
                        }
                    }
                } else if (p == 1u) {
                    xa[i * 4u + ch * 2u] = -lo;
                    xa[i * 4u + ch * 2u + 1u] = -hi;
                } else {
                    var ulo = vec4<f32>(0.0);
                    var uhi = vec4<f32>(0.0);
                    if (i < n) {
                        ulo = u4(c, i, h, v0 + ch * 8u);
                        uhi = u4(c, i, h, v0 + ch * 8u + 4u);
                    }
                    xb[i * 4u + ch * 2u] = ulo - lo;
                    xb[i * 4u + ch * 2u + 1u] = uhi - hi;
                }
            }
            if (round == 0u && do_r && do_xb && own) {
                // Nobody reads st until the next round's products: sb for them.
                put_half(kk, q0, lo.b0, lo.b1);
                if (own_hi) {
                    put_half(kk, 2u, hi.b0, hi.b1);
                }
            }
            workgroupBarrier();
        }
        if (last) {
            break;
        }
        if (!do_r && !do_xb) {
            workgroupBarrier(); // xb = U above
        }

        // (B) Transition, contribution, group boundary for row kk of the live states.
        let up_a = reads && !clear_a;
        let up_b = adds;
        if (own) {
            let eg = exp(gam[(t0 + n - 1u) * P.heads + h]);
            // Rows of the chunk's K̃ block are dk words apart.
            let f = (c * P.heads + h) * CHUNK * dk + kk;
            lo = update(lo, f, q0, n, up_a, up_b, eg);
            if (own_hi) {
                hi = update(hi, f, 2u, n, up_a, up_b, eg);
            }
            if ((c + 1u) % half == 0u) {
                lo = end_group(lo, clear_a);
                hi = end_group(hi, clear_a);
            }
            // The state the next chunk's first product round reads.
            let next_a = olvl_slot(m, c + 1u) != NO_SLOT;
            put_half(kk, q0, select(lo.b0, lo.a0, next_a), select(lo.b1, lo.a1, next_a));
            if (own_hi) {
                put_half(kk, 2u, select(hi.b0, hi.a0, next_a), select(hi.b1, hi.a1, next_a));
            }
        }
        workgroupBarrier();
    }
}
