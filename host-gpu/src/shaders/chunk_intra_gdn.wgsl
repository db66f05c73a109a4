// Intra-chunk part and per-chunk WY/UT quantities, Gated DeltaNet form (spec §7.2).
// One workgroup (256 threads) per (chunk, head). Workgroup memory: two 64x64 tiles (32 KiB),
// which first hold step 1's q and k panels.
//   tm: P = StrictLower(diag(β) K Kᵀ), then in place A_w = (I + P)⁻¹ (by blocks, step 2)
//   sm: S1 = Tril(Q Kᵀ), then in place M = S1 A_w, then the masked attention tile
// Writes: o (intra part; first writer), and for the state scan, blocked per (chunk, head) so that
// the scan reads contiguous blocks: q̃, W̃ transposed ([c][H][dk][C]: the scan's row products read
// consecutive words), K̃ ([c][H][C][dk]) and U ([c][H][C][dv])
//   qt_i = e^{γ_i} (q_i − Σ_j M_ij β_j k_j)      (effective query)
//   wt_i = e^{γ_i} Σ_j A_w,ij β_j k_j            (W̃)
//   kt_j = e^{Γ − γ_j} k_j                       (K̃)
//   u_i  = Σ_j e^{γ_i − γ_j} A_w,ij β_j v_j      (U = A_u diag(β) V)
// Every exponent is <= 0 (local cumsums, masked before exp).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> beta: array<f32>;
@group(0) @binding(6) var<storage, read> lam: array<f32>;
@group(0) @binding(7) var<storage, read_write> o: array<f32>;
@group(0) @binding(8) var<storage, read_write> qt: array<f32>;
@group(0) @binding(9) var<storage, read_write> kt: array<f32>;
@group(0) @binding(10) var<storage, read_write> wt: array<f32>;
@group(0) @binding(11) var<storage, read_write> u: array<f32>;

var<workgroup> sm: array<f32, 4096>;
var<workgroup> tm: array<f32, 4096>;

fn gm(t0: u32, i: u32, h: u32) -> f32 {
    return gam[(t0 + i) * P.heads + h];
}

fn bt(t0: u32, i: u32, h: u32) -> f32 {
    return beta[(t0 + i) * P.heads + h];
}

// Row i, columns j0..j0+3: sm = Tril(q_i·k_j), tm = β_i (k_i·k_j) strictly below the diagonal.
fn store_tiles(t0: u32, n: u32, h: u32, i: u32, j0: u32, qk: vec4<f32>, kk: vec4<f32>) {
    var b_i = 0.0;
    if (i < n) {
        b_i = bt(t0, i, h);
    }
    for (var s = 0u; s < 4u; s++) {
        let j = j0 + s;
        var sv = 0.0;
        var pv = 0.0;
        if (j <= i && i < n) {
            sv = qk[s];
        }
        if (j < i && i < n) {
            pv = b_i * kk[s];
        }
        sm[i * CHUNK + j] = sv;
        tm[i * CHUNK + j] = pv;
    }
}

// M_ij for j = j0..j0+3 (zero above the diagonal), from sm = S1 and tm = A_w.
fn m_row(i: u32, j0: u32) -> vec4<f32> {
    var r = vec4<f32>(0.0);
    if (j0 <= i) {
        for (var l = j0; l <= i; l++) {
            r += sm[i * CHUNK + l] * tm_row4(l, j0);
        }
    }
    // Entries with j > i stay zero because T_lj = 0 for l < j.
    return r;
}

fn put_row(i: u32, j0: u32, x: vec4<f32>) {
    sm[i * CHUNK + j0] = x.x;
    sm[i * CHUNK + j0 + 1u] = x.y;
    sm[i * CHUNK + j0 + 2u] = x.z;
    sm[i * CHUNK + j0 + 3u] = x.w;
}

// Step 1's panels (qk_panels.wgsl): KP dk columns of q in sm and of k in tm.
const KP: u32 = 32u;

fn panel_put(x: u32, r: u32, qv: f32, kv: f32) {
    sm[x * KPS + r] = qv;
    tm[x * KPS + r] = kv;
}

// Rows r..r+3 of staged column x of q (sm) and of k (tm).
fn q_panel4(x: u32, r: u32) -> vec4<f32> {
    let b = x * KPS + r;
    return vec4<f32>(sm[b], sm[b + 1u], sm[b + 2u], sm[b + 3u]);
}

fn k_panel4(x: u32, r: u32) -> vec4<f32> {
    let b = x * KPS + r;
    return vec4<f32>(tm[b], tm[b + 1u], tm[b + 2u], tm[b + 3u]);
}

// Block size of the inverse in step 2 (C / IB blocks per side; 256 threads = one IB x IB block).
const IB: u32 = 16u;

// Zeroes the upper-triangle entries of the thread's 4x4 block of tm.
fn zero_upper(i0: u32, j0: u32) {
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            if (j0 + s > i0 + r) {
                tm[(i0 + r) * CHUNK + j0 + s] = 0.0;
            }
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = wg.y;
    let t0 = c * CHUNK;
    let n = min(CHUNK, P.t - t0);
    let i0 = (lid / 16u) * 4u;
    let j0 = (lid % 16u) * 4u;

    // 1. S1 = Tril(Q Kᵀ) and P = StrictLower(diag(β) K Kᵀ): a 4x4 block per thread, in the
    //    vec4 accumulators of a Rows16, over panels of KP dk columns staged in sm and tm
    //    (qk_panels.wgsl).
    var sb = zero16();
    var pb = zero16();
    let has_block = j0 <= i0 + 3u && i0 < n;
    for (var x0 = 0u; x0 < P.dk; x0 += KP) {
        workgroupBarrier();
        stage_panel(t0, n, h, x0, lid);
        workgroupBarrier();
        if (has_block) {
            for (var x = 0u; x < KP; x++) {
                let kc = k_panel4(x, j0);
                sb = add_outer(sb, q_panel4(x, i0), kc);
                pb = add_outer(pb, k_panel4(x, i0), kc);
            }
        }
    }
    workgroupBarrier();
    store_tiles(t0, n, h, i0, j0, sb.a, pb.a);
    store_tiles(t0, n, h, i0 + 1u, j0, sb.b, pb.b);
    store_tiles(t0, n, h, i0 + 2u, j0, sb.c, pb.c);
    store_tiles(t0, n, h, i0 + 3u, j0, sb.d, pb.d);
    workgroupBarrier();

    // 2. A_w = (I + P)⁻¹ in place, by 16 x 16 blocks, so that the serial chain is 16 rows long,
    //    not 64: a substitution over the whole tile, one barrier per row, costs two thirds of
    //    this kernel's time on an H200 (BENCHMARKS.md, "The MQAR step"). T = A_w is unit lower
    //    triangular. Thread lid is row ba, column bc of a 16 x 16 block.
    //    a. The four diagonal blocks at once, row by row: T_i = e_i − Σ_{l<i} P_il T_l within the
    //       block. P is first mirrored into the (unused) upper triangle, P_il at (l, i), so that
    //       writing row i of T over row i of P races with no read of the same step.
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            let i = i0 + r;
            let l = j0 + s;
            if (l < i) {
                tm[l * CHUNK + i] = tm[i * CHUNK + l];
            }
        }
    }
    workgroupBarrier();
    let ba = lid / IB;
    let bc = lid % IB;
    for (var r = 0u; r < IB; r++) {
        if (lid < CHUNK) {
            let i = ba * IB + r;
            let j = ba * IB + bc;
            if (j <= i) {
                var val = select(0.0, 1.0, i == j);
                for (var l = j; l < i; l++) {
                    val -= tm[l * CHUNK + i] * tm[l * CHUNK + j];
                }
                tm[i * CHUNK + j] = val;
            }
        }
        workgroupBarrier();
    }
    zero_upper(i0, j0);
    workgroupBarrier();
    //    b. The blocks below the diagonal, block row by block row: for J < I,
    //       T_IJ = −T_II Σ_{K=J}^{I−1} P_IK T_KJ. The sums X_J go to the upper block (J, I),
    //       which nothing reads until it is zeroed again.
    for (var bi = 1u; bi < CHUNK / IB; bi++) {
        for (var bj = 0u; bj < bi; bj++) {
            var x = 0.0;
            for (var l = bj * IB; l < bi * IB; l++) {
                x += tm[(bi * IB + ba) * CHUNK + l] * tm[l * CHUNK + bj * IB + bc];
            }
            tm[(bj * IB + ba) * CHUNK + bi * IB + bc] = x;
        }
        workgroupBarrier();
        for (var bj = 0u; bj < bi; bj++) {
            var t = 0.0;
            for (var m = 0u; m <= ba; m++) {
                t -= tm[(bi * IB + ba) * CHUNK + bi * IB + m] * tm[(bj * IB + m) * CHUNK + bi * IB + bc];
            }
            tm[(bi * IB + ba) * CHUNK + bj * IB + bc] = t;
        }
        workgroupBarrier();
    }
    // The upper triangle back to T's zeros (later steps read whole rows of T).
    zero_upper(i0, j0);
    workgroupBarrier();

    // 3. M = S1 A_w (both lower triangular): M_ij = Σ_{l=j..i} S1_il T_lj.
    let m0 = m_row(i0, j0);
    let m1 = m_row(i0 + 1u, j0);
    let m2 = m_row(i0 + 2u, j0);
    let m3 = m_row(i0 + 3u, j0);
    workgroupBarrier();
    put_row(i0, j0, m0);
    put_row(i0 + 1u, j0, m1);
    put_row(i0 + 2u, j0, m2);
    put_row(i0 + 3u, j0, m3);
    workgroupBarrier();

    // 4. Per-row vectors for the state scan. Thread = (columns kk and kk + 64, group of 16
    //    rows): one coalesced k load per row j and column serves 16 rows of q̃ and W̃, and every
    //    tile value loaded serves both columns.
    let r0 = (lid / 64u) * 16u;
    if (r0 < n) {
        let g_last = gm(t0, n - 1u, h);
        let jmax = min(n, r0 + 16u);
        for (var ka = lid % 64u; ka < P.dk; ka += 128u) {
            let kb = ka + 64u;
            let has_b = kb < P.dk;
            var mq = zero16();
            var mw = zero16();
            var nq = zero16();
            var nw = zero16();
            for (var j = 0u; j < jmax; j++) {
                let b_j = bt(t0, j, h);
                let kr = qk_row(t0 + j, h);
                let bka = b_j * k[kr + ka];
                var bkb = 0.0;
                if (has_b) {
                    bkb = b_j * k[kr + kb];
                }
                let s0 = sm_col4(r0, j);
                let s1 = sm_col4(r0 + 4u, j);
                let s2 = sm_col4(r0 + 8u, j);
                let s3 = sm_col4(r0 + 12u, j);
                let w0 = tm_col4(r0, j);
                let w1 = tm_col4(r0 + 4u, j);
                let w2 = tm_col4(r0 + 8u, j);
                let w3 = tm_col4(r0 + 12u, j);
                mq.a += bka * s0;
                mq.b += bka * s1;
                mq.c += bka * s2;
                mq.d += bka * s3;
                mw.a += bka * w0;
                mw.b += bka * w1;
                mw.c += bka * w2;
                mw.d += bka * w3;
                nq.a += bkb * s0;
                nq.b += bkb * s1;
                nq.c += bkb * s2;
                nq.d += bkb * s3;
                nw.a += bkb * w0;
                nw.b += bkb * w1;
                nw.c += bkb * w2;
                nw.d += bkb * w3;
            }
            for (var r = 0u; r < 16u; r++) {
                let i = r0 + r;
                if (i < n) {
                    let g_row = gm(t0, i, h);
                    let e_row = exp(g_row);
                    let e_k = exp(g_last - g_row);
                    let kr = qk_row(t0 + i, h);
                    let orow = (((t0 / CHUNK) * P.heads + h) * CHUNK + i) * P.dk;
                    let ocol = ((t0 / CHUNK) * P.heads + h) * P.dk * CHUNK + i;
                    qt[ocol + ka * CHUNK] = e_row * (q[kr + ka] - row_of(mq, r));
                    wt[ocol + ka * CHUNK] = e_row * row_of(mw, r);
                    kt[orow + ka] = e_k * k[kr + ka];
                    if (has_b) {
                        qt[ocol + kb * CHUNK] = e_row * (q[kr + kb] - row_of(nq, r));
                        wt[ocol + kb * CHUNK] = e_row * row_of(nw, r);
                        kt[orow + kb] = e_k * k[kr + kb];
                    }
                }
            }
        }
    }
    workgroupBarrier();

    // U = A_u diag(β) V: scale tm in place to e^{γ_i − γ_j} T_ij β_j (W̃ above is done with T).
    for (var r = 0u; r < 4u; r++) {
        let i = i0 + r;
        for (var s = 0u; s < 4u; s++) {
            let j = j0 + s;
            if (j <= i && i < n) {
                tm[i * CHUNK + j] *= exp(gm(t0, i, h) - gm(t0, j, h)) * bt(t0, j, h);
            }
        }
    }
    workgroupBarrier();
    if (r0 < n) {
        for (var d = lid % 64u; d < P.dv; d += 64u) {
            let rows = tm_times_v(t0, n, h, r0, d);
            for (var r = 0u; r < 16u; r++) {
                if (r0 + r < n) {
                    u[(((t0 / CHUNK) * P.heads + h) * CHUNK + r0 + r) * P.dv + d] = row_of(rows, r);
                }
            }
        }
    }
    workgroupBarrier();

    // 5. Attention tile: M_ij e^{γ_i − γ_j} β_j λ_i[col(i,j)] for j <= i.
    for (var r = 0u; r < 4u; r++) {
        for (var s = 0u; s < 4u; s++) {
            let i = i0 + r;
            let j = j0 + s;
            var val = 0.0;
            if (j <= i && i < n) {
                val = sm[i * CHUNK + j] * exp(gm(t0, i, h) - gm(t0, j, h)) * bt(t0, j, h)
                    * lam[lam_idx(t0 + i, h, level_col(i, j))];
            }
            sm[i * CHUNK + j] = val;
        }
    }
    workgroupBarrier();

    // 6. o = A V: thread = (column d, group of 16 rows).
    if (r0 < n) {
        for (var d = lid % 64u; d < P.dv; d += 64u) {
            let rows = sm_times_v(t0, n, h, r0, d);
            for (var r = 0u; r < 16u; r++) {
                if (r0 + r < n) {
                    o[((t0 + r0 + r) * P.heads + h) * P.dv + d] = row_of(rows, r);
                }
            }
        }
    }
}
