// GDN backward, step 1 per (chunk, head): recompute the forward's chunk quantities (spec §7.2).
// Tiles S1 = Tril(Q Kᵀ), KK = StrictLower(K Kᵀ), A_w = (I + diag(β) KK)⁻¹ (by blocks),
// M = S1 A_w; and
//   q̃_i = e^{γ_i} (q_i − Σ_j M_ij β_j k_j),  K̃_i = e^{Γ − γ_i} k_i,
//   W̃_i = e^{γ_i} Σ_j A_w,ij β_j k_j,        U_i = Σ_j e^{γ_i − γ_j} A_w,ij β_j v_j.
// S1 and KK are workgroup-memory tiled products (PW dk columns of q and k staged at a time);
// A_w lives in workgroup memory (packed lower triangle) for the inverse and every product that
// uses it, and is turned in place into e^{γ_i − γ_j} A_w,ij β_j for U.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> beta: array<f32>;
@group(0) @binding(6) var<storage, read_write> tiles: array<f32>;
@group(0) @binding(7) var<storage, read_write> fpack: array<f32>;
@group(0) @binding(8) var<storage, read_write> fpt: array<f32>;

const PW: u32 = 8u;
var<workgroup> aw: array<f32, 2080>; // packed lower triangle (with diagonal) of C × C
var<workgroup> pq: array<f32, 512>;  // [PW][C] q columns
var<workgroup> pk: array<f32, 512>;  // [PW][C] k columns
var<workgroup> gsh: array<f32, 64>;  // γ of the chunk's rows
var<workgroup> bsh: array<f32, 64>;  // β of the chunk's rows
var<workgroup> row: array<f32, 64>;  // one row of each diagonal block of A_w during step a
var<workgroup> xs: array<f32, 768>;  // [3][IB][IB] the sums X_J of step b

// Block size of the inverse (C / IB blocks per side; 256 threads = one IB x IB block).
const IB: u32 = 16u;

fn pidx(i: u32, j: u32) -> u32 {
    return i * (i + 1u) / 2u + j;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = P.head0 + wg.y;
    let t0 = c * CHUNK;
    let n = chunk_rows(c);
    let base = ch_base(c, h);
    let tb = base + T_T * TILE;
    let mb = base + T_M * TILE;
    let dk = P.dk;
    if (lid < CHUNK) {
        var gv = 0.0;
        var bv = 0.0;
        if (lid < n) {
            gv = gam[(t0 + lid) * P.heads + h];
            bv = beta[(t0 + lid) * P.heads + h];
        }
        gsh[lid] = gv;
        bsh[lid] = bv;
    }

    // S1, KK on the 10 lower-triangle blocks (bi, bj ≤ bi) of 16 × 16: this thread's entry
    // (ti, tj) of each.
    let ti = lid / 16u;
    let tj = lid % 16u;
    var s1: array<f32, 10>;
    var kk: array<f32, 10>;
    for (var x0 = 0u; x0 < dk; x0 += PW) {
        workgroupBarrier();
        for (var e = lid; e < CHUNK * PW; e += 256u) {
            let r = e / PW;
            let x = x0 + e % PW;
            var a = 0.0;
            var b = 0.0;
            if (r < n && x < dk) {
                let rr = qk_row(t0 + r, h);
                a = q[rr + x];
                b = k[rr + x];
            }
            pq[(e % PW) * CHUNK + r] = a;
            pk[(e % PW) * CHUNK + r] = b;
        }
        workgroupBarrier();
        for (var x = 0u; x < min(PW, dk - x0); x++) {
            let r = x * CHUNK + ti;
            let cj = x * CHUNK + tj;
            let qi = vec4<f32>(pq[r], pq[r + 16u], pq[r + 32u], pq[r + 48u]);
            let ki = vec4<f32>(pk[r], pk[r + 16u], pk[r + 32u], pk[r + 48u]);
            let kj = vec4<f32>(pk[cj], pk[cj + 16u], pk[cj + 32u], pk[cj + 48u]);
            tri10(&s1, qi, kj);
            tri10(&kk, ki, kj);
        }
    }
    // The tiles (zero outside the chunk's rows and the triangles), and P = StrictLower(diag(β)
    // K Kᵀ) into aw (replaced by A_w below).
    for (var bi = 0u; bi < 4u; bi++) {
        for (var bj = 0u; bj < 4u; bj++) {
            let i = bi * 16u + ti;
            let j = bj * 16u + tj;
            var a = 0.0;
            var b = 0.0;
            if (bj <= bi && i < n && j <= i) {
                let ab = bi * (bi + 1u) / 2u + bj;
                a = s1[ab];
                if (j < i) {
                    b = kk[ab];
                }
            }
            // Rows past the chunk's end get P = 0 (b is 0 there), so that the block inverse
            // below, which runs over all C rows, leaves them as rows of I.
            if (bj <= bi && j < i) {
                aw[pidx(i, j)] = bsh[i] * b;
            }
            tiles[base + T_S1 * TILE + i * CHUNK + j] = a;
            tiles[base + T_KK * TILE + i * CHUNK + j] = b;
        }
    }
    workgroupBarrier();

    // A_w = (I + P)⁻¹ by 16 x 16 blocks, so that the serial chain is 16 rows long, not 64 (as
    // in chunk_intra_gdn, where it halved the kernel's time on an H200). T = A_w is unit lower
    // triangular. Thread lid is row ba, column bc of a 16 x 16 block.
    //   a. The four diagonal blocks at once, row by row: T_ij = −P_ij − Σ_{l=j+1..i−1} P_il T_lj
    //      within the block, each row staged in `row` because its P is read while it is written.
    let ba = lid / IB;
    let bc = lid % IB;
    if (lid < CHUNK) {
        aw[pidx(lid, lid)] = 1.0;
    }
    for (var r = 1u; r < IB; r++) {
        let i = ba * IB + r;
        let j = ba * IB + bc;
        if (lid < CHUNK && j < i) {
            var val = -aw[pidx(i, j)];
            for (var l = j + 1u; l < i; l++) {
                val -= aw[pidx(i, l)] * aw[pidx(l, j)];
            }
            row[lid] = val;
        }
        workgroupBarrier();
        if (lid < CHUNK && j < i) {
            aw[pidx(i, j)] = row[lid];
        }
        workgroupBarrier();
    }
    //   b. The blocks below the diagonal, block row by block row: for J < I,
    //      T_IJ = −T_II X_J with X_J = Σ_{K=J}^{I−1} P_IK T_KJ (T_KJ = 0 above its diagonal).
    for (var bi = 1u; bi < CHUNK / IB; bi++) {
        let i = bi * IB + ba;
        for (var bj = 0u; bj < bi; bj++) {
            let j = bj * IB + bc;
            var x = 0.0;
            for (var l = j; l < bi * IB; l++) {
                x += aw[pidx(i, l)] * aw[pidx(l, j)];
            }
            xs[bj * 256u + lid] = x;
        }
        workgroupBarrier();
        for (var bj = 0u; bj < bi; bj++) {
            var t = 0.0;
            for (var m = 0u; m <= ba; m++) {
                t -= aw[pidx(i, bi * IB + m)] * xs[bj * 256u + m * IB + bc];
            }
            aw[pidx(i, bj * IB + bc)] = t;
        }
        workgroupBarrier();
    }
    for (var e = lid; e < TILE; e += 256u) {
        let i = e / CHUNK;
        let j = e % CHUNK;
        var a = 0.0;
        if (i < n && j <= i) {
            a = aw[pidx(i, j)];
        }
        tiles[tb + e] = a;
    }
    storageBarrier();

    // M = S1 A_w (both lower triangular; S1 read back from the tile, one word per warp), four
    // terms per step so that four loads are in flight rather than the loop waiting on each.
    for (var e = lid; e < TILE; e += 256u) {
        let i = e / CHUNK;
        let j = e % CHUNK;
        var mv = 0.0;
        if (i < n && j <= i) {
            let s1 = base + T_S1 * TILE + i * CHUNK;
            var l = j;
            for (; l + 3u <= i; l += 4u) {
                let x = vec4<f32>(tiles[s1 + l], tiles[s1 + l + 1u], tiles[s1 + l + 2u], tiles[s1 + l + 3u]);
                let y = vec4<f32>(aw[pidx(l, j)], aw[pidx(l + 1u, j)], aw[pidx(l + 2u, j)], aw[pidx(l + 3u, j)]);
                mv += dot(x, y);
            }
            for (; l <= i; l++) {
                mv += tiles[s1 + l] * aw[pidx(l, j)];
            }
        }
        tiles[mb + e] = mv;
    }
    storageBarrier();

    // q̃, K̃, W̃ per block of KB dk columns: thread = column xc × rows r0 .. r0 + 8; products
    // over j with 8 rows of β K (pk) and 8 columns of M (pq) staged at a time.
    let g_last = gsh[n - 1u];
    let xc = lid % KB;
    let r0 = (lid / KB) * 8u;
    for (var x0 = 0u; x0 < dk; x0 += KB) {
        var mq: array<f32, 8>;
        var mw: array<f32, 8>;
        for (var j0 = 0u; j0 < n; j0 += 8u) {
            workgroupBarrier();
            {
                let j = j0 + lid / KB;
                var bk = 0.0;
                if (j < n && x0 + xc < dk) {
                    bk = bsh[j] * k[qk_row(t0 + j, h) + x0 + xc];
                }
                pk[lid] = bk;
            }
            for (var e = lid; e < 8u * CHUNK; e += 256u) {
                let i = e / 8u;
                let jr = e % 8u;
                pq[jr * CHUNK + i] = tiles[mb + i * CHUNK + j0 + jr];
            }
            workgroupBarrier();
            // Rows i < j0 get nothing from this panel (M and A_w are lower triangular).
            for (var jr = 0u; jr < select(min(8u, n - j0), 0u, j0 > r0 + 7u); jr++) {
                let j = j0 + jr;
                let bk = pk[jr * KB + xc];
                for (var s = 0u; s < 8u; s++) {
                    let i = r0 + s;
                    mq[s] += pq[jr * CHUNK + i] * bk;
                    if (j <= i) {
                        mw[s] += aw[pidx(i, j)] * bk;
                    }
                }
            }
        }
        let x = x0 + xc;
        if (x < dk) {
            for (var s = 0u; s < 8u; s++) {
                let i = r0 + s;
                if (i < n) {
                    let gi = gsh[i];
                    let eg = exp(gi);
                    let rw = frow(t0 + i, h);
                    let ri = qk_row(t0 + i, h);
                    let kt = exp(g_last - gi) * k[ri + x];
                    let wt = eg * mw[s];
                    fpack[rw + x] = eg * (q[ri + x] - mq[s]);
                    fpack[rw + dk + x] = kt;
                    fpack[rw + 2u * dk + x] = wt;
                    fpt[ft_at(c, h, 0u) + x * CHUNK + i] = kt;
                    fpt[ft_at(c, h, 1u) + x * CHUNK + i] = wt;
                }
            }
        }
    }
    workgroupBarrier();
    // A_w → e^{γ_i − γ_j} A_w,ij β_j in place, then U per block of KB dv columns as above.
    for (var e = lid; e < 2080u; e += 256u) {
        // Row i of packed index e: the largest i with i (i + 1) / 2 <= e.
        var i = u32(floor((sqrt(8.0 * f32(e) + 1.0) - 1.0) * 0.5));
        if (i * (i + 1u) / 2u > e) {
            i -= 1u;
        }
        if ((i + 1u) * (i + 2u) / 2u <= e) {
            i += 1u;
        }
        let j = e - i * (i + 1u) / 2u;
        aw[e] = exp(gsh[i] - gsh[j]) * aw[e] * bsh[j];
    }
    for (var d0 = 0u; d0 < P.dv; d0 += KB) {
        var u: array<f32, 8>;
        for (var j0 = 0u; j0 < n; j0 += 8u) {
            workgroupBarrier();
            {
                let j = j0 + lid / KB;
                var vv = 0.0;
                if (j < n && d0 + xc < P.dv) {
                    vv = v[((t0 + j) * P.heads + h) * P.dv + d0 + xc];
                }
                pk[lid] = vv;
            }
            workgroupBarrier();
            for (var jr = 0u; jr < select(min(8u, n - j0), 0u, j0 > r0 + 7u); jr++) {
                let j = j0 + jr;
                let vv = pk[jr * KB + xc];
                for (var s = 0u; s < 8u; s++) {
                    let i = r0 + s;
                    if (j <= i) {
                        u[s] += aw[pidx(i, j)] * vv;
                    }
                }
            }
        }
        let d = d0 + xc;
        if (d < P.dv) {
            for (var s = 0u; s < 8u; s++) {
                let i = r0 + s;
                if (i < n) {
                    fpack[frow(t0 + i, h) + 3u * dk + d] = u[s];
                }
            }
        }
    }
}
