// GDN backward, step 6: per (chunk, block of KB output columns, head), dq, dk and dv from the
// tiles of step 5 and the level gradients (gpack). Blocks 0 .. NKB − 1 hold dk columns (dq
// and dk), the next ⌈dv / KB⌉ blocks dv columns:
//   dq_i = e^{γ_i} dq̃_i + Σ_{l ≤ i} dS1_il k_l
//   dk_j = Σ_{i ≥ j} dS1_ij q_i + β_j Σ_{i ≥ j} e^{γ_i} (A_w,ij dW̃_i − M_ij dq̃_i)
//          + e^{Γ − γ_j} dK̃_j + Σ_i Z_ij k_i
//   dv_j = Σ_{i ≥ j} (A_ij dO_i + (A_u diag β)_ij dU_i)
// Every sum runs over all the chunk's rows (the tiles are 0 outside their triangles) as
// workgroup-memory tiled products: RP rows of the tiles and of the right-hand operands staged
// at a time; thread = one output column × RT consecutive output rows.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> gam: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> dout: array<f32>;
@group(0) @binding(6) var<storage, read> gpack: array<f32>;
@group(0) @binding(7) var<storage, read> tiles: array<f32>;
@group(0) @binding(8) var<storage, read_write> dq: array<f32>;
@group(0) @binding(9) var<storage, read_write> dk: array<f32>;
@group(0) @binding(10) var<storage, read_write> dv: array<f32>;

const RP: u32 = 8u;  // tile rows (sum index) per staged panel
const RT: u32 = 8u;  // output rows per thread
const TS: u32 = 128u; // vec4 per staged tile slice: [RP][C]
// Tile slices [RP][C / 4] (vec4 over the output rows): dk blocks: dS1ᵀ (for dq), dS1, A_w, M,
// Z; dv blocks: A, A_u diag β.
var<workgroup> tp: array<vec4<f32>, 640>;
// Right-hand panels [RP][KB]: dk blocks: k, q, e^γ dW̃, e^γ dq̃; dv blocks: dO, dU.
var<workgroup> rp: array<f32, 1024>;
var<workgroup> gex: array<f32, 64>; // e^{γ_r} of the chunk's rows

fn tl(base: u32, slot: u32, i: u32, j: u32) -> f32 {
    return tiles[base + slot * TILE + i * CHUNK + j];
}

// Stage rows r0 .. r0 + RP of tile `slot` (all C columns) into slice s of tp.
fn stage_rows(base: u32, slot: u32, s: u32, r0: u32, lid: u32) {
    for (var e = lid; e < RP * CHUNK; e += 256u) {
        let rr = e / CHUNK;
        let j = e % CHUNK;
        tp[s * TS + e / 4u][j % 4u] = tl(base, slot, r0 + rr, j);
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let nkb = n_kb();
    let nb = nkb + (P.dv + KB - 1u) / KB;
    let c = wg.x / nb;
    let kb = wg.x % nb;
    let h = P.head0 + wg.y;
    let t0 = c * CHUNK;
    let n = chunk_rows(c);
    let base = ch_base(c, h);
    let kc = lid % KB;
    let rq = (lid / KB) * (RT / 4u); // first vec4 of this thread's rows in a slice row
    let j0 = (lid / KB) * RT;
    if (lid < CHUNK) {
        var e = 0.0;
        if (lid < n) {
            e = exp(gam[(t0 + lid) * P.heads + h]);
        }
        gex[lid] = e;
    }
    if (kb < nkb) {
        let x = kb * KB + kc;
        var aq0 = vec4<f32>(0.0);
        var aq1 = vec4<f32>(0.0);
        var a10 = vec4<f32>(0.0);
        var a11 = vec4<f32>(0.0);
        var a20 = vec4<f32>(0.0);
        var a21 = vec4<f32>(0.0);
        for (var r0 = 0u; r0 < n; r0 += RP) {
            workgroupBarrier();
            // dS1ᵀ slice: tp[rr][i] = dS1[i][r0 + rr].
            for (var e = lid; e < RP * CHUNK; e += 256u) {
                let i = e / RP;
                let rr = e % RP;
                tp[(rr * CHUNK + i) / 4u][i % 4u] = tl(base, T_DS1, i, r0 + rr);
            }
            stage_rows(base, T_DS1, 1u, r0, lid);
            stage_rows(base, T_T, 2u, r0, lid);
            stage_rows(base, T_M, 3u, r0, lid);
            stage_rows(base, T_Z, 4u, r0, lid);
            {
                let rr = lid / KB;
                let r = r0 + rr;
                let xx = kb * KB + lid % KB;
                var kv = 0.0;
                var qv = 0.0;
                var wv = 0.0;
                var dqv = 0.0;
                if (r < n && xx < P.dk) {
                    let tr = t0 + r;
                    let g = grow(tr, h);
                    let eg = gex[r];
                    kv = k[qk_row(tr, h) + xx];
                    qv = q[qk_row(tr, h) + xx];
                    wv = eg * gpack[g + 2u * P.dk + xx];
                    dqv = eg * gpack[g + xx];
                }
                rp[lid] = kv;
                rp[256u + lid] = qv;
                rp[512u + lid] = wv;
                rp[768u + lid] = dqv;
            }
            workgroupBarrier();
            // This thread's rows j0 .. j0 + RT: dS1ᵀ (dq) is 0 for r > j, dS1, A_w, M (dk) for
            // r < j; Z is full. The tests are the same for a warp's threads.
            let nr = min(RP, n - r0);
            let want_q = r0 < j0 + RT;
            let want_k = r0 + RP > j0;
            for (var rr = 0u; rr < nr; rr++) {
                let kv = rp[rr * KB + kc];
                let o = rr * (CHUNK / 4u) + rq;
                a10 += tp[4u * TS + o] * kv;
                a11 += tp[4u * TS + o + 1u] * kv;
            }
            if (want_q) {
                for (var rr = 0u; rr < nr; rr++) {
                    let kv = rp[rr * KB + kc];
                    let o = rr * (CHUNK / 4u) + rq;
                    aq0 += tp[o] * kv;
                    aq1 += tp[o + 1u] * kv;
                }
            }
            if (want_k) {
                for (var rr = 0u; rr < nr; rr++) {
                    let qv = rp[256u + rr * KB + kc];
                    let wv = rp[512u + rr * KB + kc];
                    let dqv = rp[768u + rr * KB + kc];
                    let o = rr * (CHUNK / 4u) + rq;
                    a10 += tp[TS + o] * qv;
                    a11 += tp[TS + o + 1u] * qv;
                    a20 += tp[2u * TS + o] * wv - tp[3u * TS + o] * dqv;
                    a21 += tp[2u * TS + o + 1u] * wv - tp[3u * TS + o + 1u] * dqv;
                }
            }
        }
        workgroupBarrier();
        if (x < P.dk) {
            let g_last = gam[(t0 + n - 1u) * P.heads + h];
            for (var s = 0u; s < RT; s++) {
                let j = j0 + s;
                if (j < n) {
                    let tj = t0 + j;
                    let g = grow(tj, h);
                    let gj = gam[tj * P.heads + h];
                    var vq = aq0[s];
                    var v1 = a10[s];
                    var v2 = a20[s];
                    if (s >= 4u) {
                        vq = aq1[s - 4u];
                        v1 = a11[s - 4u];
                        v2 = a21[s - 4u];
                    }
                    dq[qk_row(tj, h) + x] = gex[j] * gpack[g + x] + vq;
                    dk[qk_row(tj, h) + x] = v1 + beta[tj * P.heads + h] * v2
                        + exp(g_last - gj) * gpack[g + P.dk + x];
                }
            }
        }
    } else {
        let d = (kb - nkb) * KB + kc;
        var a0 = vec4<f32>(0.0);
        var a1 = vec4<f32>(0.0);
        for (var r0 = 0u; r0 < n; r0 += RP) {
            workgroupBarrier();
            stage_rows(base, T_A, 0u, r0, lid);
            stage_rows(base, T_TU, 1u, r0, lid);
            {
                let rr = lid / KB;
                let r = r0 + rr;
                let dd = (kb - nkb) * KB + lid % KB;
                var ov = 0.0;
                var uv = 0.0;
                if (r < n && dd < P.dv) {
                    let tr = t0 + r;
                    ov = dout[(tr * P.heads + h) * P.dv + dd];
                    uv = gpack[grow(tr, h) + 3u * P.dk + dd];
                }
                rp[lid] = ov;
                rp[256u + lid] = uv;
            }
            workgroupBarrier();
            // A and A_u diag β are lower triangular: rows r < j0 add nothing to row j0.. .
            for (var rr = 0u; rr < select(min(RP, n - r0), 0u, r0 + RP <= j0); rr++) {
                let ov = rp[rr * KB + kc];
                let uv = rp[256u + rr * KB + kc];
                let o = rr * (CHUNK / 4u) + rq;
                a0 += tp[o] * ov + tp[TS + o] * uv;
                a1 += tp[o + 1u] * ov + tp[TS + o + 1u] * uv;
            }
        }
        if (d < P.dv) {
            for (var s = 0u; s < RT; s++) {
                let j = j0 + s;
                if (j < n) {
                    var val = a0[s % 4u];
                    if (s >= 4u) {
                        val = a1[s - 4u];
                    }
                    dv[((t0 + j) * P.heads + h) * P.dv + d] = val;
                }
            }
        }
    }
}
