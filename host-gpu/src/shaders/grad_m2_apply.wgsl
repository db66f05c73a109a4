// Inter-chunk gradients of one chunk's rows (no atomics). `MODE` is prepended by op_m2.rs:
//   0: dq_i += Σ_{m: c reads m} w_i X dO_i,     w_i = λ_i[7 + m] exp(γ_i + dec)   (A = dO)
//      and dλ_i[7 + m] = exp(γ_i + dec) q_i·(X dO_i) (0 in columns from 7 that c does not read),
//      X of the chunk's group at level m from grad_m2_xy/xsum, all levels in order;
//   1: dk_j += u_j Z_c v_j,   u_j = exp(Γ_c − γ_j)                                (A = v)
//   2: dv_j += u_j Z_cᵀ k_j                                                       (A = k)
//      with Z_c = Σ_{m: c is a source} exp(dec) Y from grad_m2_zsum.wgsl (bound as `xy`).
// Each product P = A M (64 rows × 64 output columns, M = Xᵀ, Zᵀ or Z) is a tiled
// workgroup-memory product: 16-deep slices of A and M staged in workgroup memory, each thread a
// 4×4 block. MODE 1, 2: workgroup = (64 output columns, chunk, head), added to what the intra
// kernel wrote. MODE 0: workgroup = (chunk, head), every column tile of dq in turn (dλ needs the
// whole row), dq updated per level.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a_in: array<f32>;
@group(0) @binding(2) var<storage, read> xy: array<f32>;
@group(0) @binding(3) var<storage, read> gam: array<f32>;
@group(0) @binding(4) var<storage, read> lam: array<f32>;
@group(0) @binding(5) var<storage, read> dec: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read> q: array<f32>;
@group(0) @binding(8) var<storage, read_write> dlam: array<f32>;

const KS: u32 = 16u;
// Staged slices in rows of SS words: a multiple of 4, so that the product reads whole vec4, but
// not of 32, so that the transposed stores (16 threads of a warp on 16 rows) fall in different
// memory banks.
const SS: u32 = 68u;
var<workgroup> as_t: array<vec4<f32>, KS * SS / 4u>; // [KS][SS]: A slice, transposed (64 rows)
var<workgroup> ms: array<vec4<f32>, KS * SS / 4u>;   // [KS][SS]: M slice (64 columns)
var<workgroup> wts: array<f32, 64>;    // row weights of the level
var<workgroup> red: array<f32, 1024>;  // MODE 0: [64 rows][16 column groups] of q·P
var<workgroup> dls: array<f32, 64>;    // MODE 0: q·(X dO) per row, summed over column tiles

struct Tile {
    r0: vec4<f32>,
    r1: vec4<f32>,
    r2: vec4<f32>,
    r3: vec4<f32>,
}

// This thread's 4×4 block of P = A M for output columns ct·64.. (rows past n and columns past
// out_w give 0).
fn product(lid: u32, t0: u32, n: u32, h: u32, mb: u32, ct: u32, out_w: u32, red_w: u32) -> Tile {
    let ty = lid / 16u;
    let tx = lid % 16u;
    var acc = Tile(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));
    for (var k0 = 0u; k0 < red_w; k0 += KS) {
        for (var s = 0u; s < 4u; s++) {
            let idx = lid + s * 256u;
            // A: row r, depth kk (16 consecutive floats of one row per 16 threads).
            let r = idx / KS;
            let kk = idx % KS;
            var a = 0.0;
            if (r < n && k0 + kk < red_w) {
                a = a_in[((t0 + r) * P.heads + h) * red_w + k0 + kk];
            }
            let at = kk * SS + r;
            as_t[at / 4u][at % 4u] = a;
            // M: depth kk2, column cc.
            var mv = 0.0;
            if (MODE == 2u) {
                let kk2 = idx / 64u;
                let cc = idx % 64u;
                let col = ct * 64u + cc;
                if (k0 + kk2 < red_w && col < out_w) {
                    mv = xy[mb + (k0 + kk2) * P.dv + col];
                }
                let mt = kk2 * SS + cc;
                ms[mt / 4u][mt % 4u] = mv;
            } else {
                let cc = idx / KS;
                let kk2 = idx % KS;
                let col = ct * 64u + cc;
                if (k0 + kk2 < red_w && col < out_w) {
                    mv = xy[mb + col * P.dv + k0 + kk2];
                }
                let mt = kk2 * SS + cc;
                ms[mt / 4u][mt % 4u] = mv;
            }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KS; kk++) {
            let av = as_t[kk * (SS / 4u) + ty];
            let mvv = ms[kk * (SS / 4u) + tx];
            acc.r0 += av.x * mvv;
            acc.r1 += av.y * mvv;
            acc.r2 += av.z * mvv;
            acc.r3 += av.w * mvv;
        }
        workgroupBarrier();
    }
    return acc;
}

fn tile_row(t: Tile, i: u32) -> vec4<f32> {
    if (i == 0u) {
        return t.r0;
    } else if (i == 1u) {
        return t.r1;
    } else if (i == 2u) {
        return t.r2;
    }
    return t.r3;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let out_w = select(P.dk, P.dv, MODE == 2u);
    let red_w = select(P.dv, P.dk, MODE == 2u);
    let c = wg.y;
    let h = wg.z;
    let t0 = c * CHUNK;
    let n = min(CHUNK, P.t - t0);
    let ty = lid / 16u;
    let tx = lid % 16u;
    let levels = inter_levels();
    // MODE 1, 2: one product with Z_c (every chunk but the last; the last is no source).
    let n_lv = select(select(0u, 1u, c + 1u < P.nt), levels, MODE == 0u);
    let n_ct = select(1u, (out_w + 63u) / 64u, MODE == 0u);
    var tot = Tile(vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0), vec4<f32>(0.0));

    if (MODE == 0u && lid < n) {
        // dλ columns from 7 of levels this chunk does not read: exactly 0.
        for (var col = C0P1; col < P.lam_cols; col++) {
            let m = col - C0P1;
            if (!(m < levels && chunk_role(m, c) == ROLE_READER)) {
                dlam[lam_idx(t0 + lid, h, col)] = 0.0;
            }
        }
    }

    for (var m = 0u; m < n_lv; m++) {
        if (MODE == 0u && chunk_role(m, c) != ROLE_READER) {
            continue;
        }
        var mb = (c * P.heads + h) * P.dk * P.dv;
        var d = 0.0;
        if (MODE == 0u) {
            mb = xy_base(0u, pair_of(m, c), h);
            d = dec[dec_idx(m, c, h)];
        }
        if (lid < CHUNK) {
            var w = 0.0;
            if (lid < n) {
                let gl = gam[(t0 + lid) * P.heads + h];
                if (MODE == 0u) {
                    w = lam[lam_idx(t0 + lid, h, C0P1 + m)] * exp(gl + d);
                } else {
                    w = exp(chunk_total(c, h) - gl);
                }
            }
            wts[lid] = w;
            dls[lid] = 0.0;
        }
        // (wts and dls are next read after product's barriers.)
        for (var cti = 0u; cti < n_ct; cti++) {
            let ct = select(wg.x, cti, MODE == 0u);
            let p = product(lid, t0, n, h, mb, ct, out_w, red_w);
            if (MODE == 0u) {
                for (var i = 0u; i < 4u; i++) {
                    let r = ty * 4u + i;
                    let pr = tile_row(p, i);
                    var qs = 0.0;
                    if (r < n) {
                        let qb = qk_row(t0 + r, h);
                        let ob = ((t0 + r) * P.heads + h) * out_w;
                        let wr = wts[r];
                        for (var j = 0u; j < 4u; j++) {
                            let col = ct * 64u + tx * 4u + j;
                            if (col < out_w) {
                                out[ob + col] += wr * pr[j];
                                qs += q[qb + col] * pr[j];
                            }
                        }
                    }
                    red[r * 16u + tx] = qs;
                }
                workgroupBarrier();
                if (lid < CHUNK) {
                    var s = 0.0;
                    for (var x = 0u; x < 16u; x++) {
                        s += red[lid * 16u + x];
                    }
                    dls[lid] += s;
                }
                workgroupBarrier();
            } else {
                tot.r0 += wts[ty * 4u] * p.r0;
                tot.r1 += wts[ty * 4u + 1u] * p.r1;
                tot.r2 += wts[ty * 4u + 2u] * p.r2;
                tot.r3 += wts[ty * 4u + 3u] * p.r3;
            }
        }
        if (MODE == 0u && lid < n) {
            dlam[lam_idx(t0 + lid, h, C0P1 + m)] = exp(gam[(t0 + lid) * P.heads + h] + d) * dls[lid];
        }
        workgroupBarrier();
    }

    if (MODE != 0u) {
        for (var i = 0u; i < 4u; i++) {
            let r = ty * 4u + i;
            let pr = tile_row(tot, i);
            if (r < n) {
                let ob = ((t0 + r) * P.heads + h) * out_w;
                for (var j = 0u; j < 4u; j++) {
                    let col = wg.x * 64u + tx * 4u + j;
                    if (col < out_w) {
                        out[ob + col] += pr[j];
                    }
                }
            }
        }
    }
}
