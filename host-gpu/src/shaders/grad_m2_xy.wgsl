// The two dk×dv matrices of every inter-chunk (level m, group g) pair:
//   X = Σ_{j in the source half} u_j k_j v_jᵀ,  u_j = exp((Γ_c − γ_j) + dec[m][c])
//       (the forward state the group's readers see, before their own decay),
//   Y = Σ_{i in the reader half} w_i q_i dO_iᵀ,  w_i = λ_i[7 + m] exp(γ_i + dec[m][c])
//       (= dL/dX).
// `PER_CHUNK` is prepended by op_m2.rs:
// * true: per-chunk sources X_c = Σ_{j in c} exp(Γ_c − γ_j) k_j v_jᵀ into `xy` = the per-chunk
//   scratch `[chunk][heads][dk][dv]`, workgroup = (64×64 tile, chunk, head); grad_m2_xsum.wgsl
//   then forms each pair's X = Σ_c exp(dec[m][c]) X_c (one pass over the rows instead of one
//   per level);
// * false: Y of every pair, workgroup = (64×64 tile, pair, head).
// Each thread a 4×4 block, the rows of the chunk(s) in order (deterministic), staged 16 at a
// time in workgroup memory.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read> d_o: array<f32>;
@group(0) @binding(5) var<storage, read> gam: array<f32>;
@group(0) @binding(6) var<storage, read> lam: array<f32>;
@group(0) @binding(7) var<storage, read> dec: array<f32>;
@group(0) @binding(8) var<storage, read_write> xy: array<f32>;

var<workgroup> wts: array<f32, 64>;
// vec4 elements so that the product reads four values per load.
var<workgroup> ls: array<vec4<f32>, 256>; // [16 rows][64 / 4]: weighted k or q slice
var<workgroup> rs: array<vec4<f32>, 256>; // [16 rows][64 / 4]: v or dO slice

const TILE: u32 = 64u;
const KS: u32 = 16u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tiles_e = (P.dv + TILE - 1u) / TILE;
    let a0 = (wg.x / tiles_e) * TILE + (lid / 16u) * 4u;
    let e0 = (wg.x % tiles_e) * TILE + (lid % 16u) * 4u;
    let p = wg.y;
    let h = wg.z;
    let which = select(1u, 0u, PER_CHUNK);

    // Pair p -> (level m, group g).
    var m = 0u;
    var base = 0u;
    loop {
        let np = level_pairs(m);
        if (p < base + np || np == 0u) {
            break;
        }
        base += np;
        m += 1u;
    }
    let half = 1u << m;
    var c_begin = ((p - base) << (m + 1u)) + half;
    var c_end = min(c_begin + half, P.nt);
    if (PER_CHUNK) {
        c_begin = p;
        c_end = p + 1u;
    }

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    // Rows in slices of 16, staged in workgroup memory (coalesced loads; the left factor
    // pre-multiplied by its weight), then each thread's 4×4 block over the slice in row order.
    let a_lo = (wg.x / tiles_e) * TILE;
    let e_lo = (wg.x % tiles_e) * TILE;
    let ty = lid / 16u;
    let tx = lid % 16u;
    for (var c = c_begin; c < c_end; c++) {
        let t0 = c * CHUNK;
        let n = min(CHUNK, P.t - t0);
        if (lid < CHUNK) {
            var w = 0.0;
            if (lid < n) {
                let gl = gam[(t0 + lid) * P.heads + h];
                if (which == 0u) {
                    w = exp(chunk_total(c, h) - gl);
                } else {
                    let d = dec[dec_idx(m, c, h)];
                    w = lam[lam_idx(t0 + lid, h, C0P1 + m)] * exp(gl + d);
                }
            }
            wts[lid] = w;
        }
        workgroupBarrier();
        for (var r0 = 0u; r0 < n; r0 += KS) {
            for (var s = 0u; s < 4u; s++) {
                let idx = lid + s * 256u;
                let kk = idx / 64u;
                let cc = idx % 64u;
                let r = r0 + kk;
                var lv = 0.0;
                var rv = 0.0;
                if (r < n) {
                    let t = t0 + r;
                    if (a_lo + cc < P.dk) {
                        let at = qk_row(t, h) + a_lo + cc;
                        if (which == 0u) {
                            lv = wts[r] * k[at];
                        } else {
                            lv = wts[r] * q[at];
                        }
                    }
                    if (e_lo + cc < P.dv) {
                        let at = (t * P.heads + h) * P.dv + e_lo + cc;
                        if (which == 0u) {
                            rv = v[at];
                        } else {
                            rv = d_o[at];
                        }
                    }
                }
                ls[kk * 16u + cc / 4u][cc % 4u] = lv;
                rs[kk * 16u + cc / 4u][cc % 4u] = rv;
            }
            workgroupBarrier();
            for (var kk = 0u; kk < KS; kk++) {
                let lw = ls[kk * 16u + ty];
                let rv = rs[kk * 16u + tx];
                acc0 += lw.x * rv;
                acc1 += lw.y * rv;
                acc2 += lw.z * rv;
                acc3 += lw.w * rv;
            }
            workgroupBarrier();
        }
    }
    var out = xy_base(1u, p, h);
    if (PER_CHUNK) {
        out = (p * P.heads + h) * P.dk * P.dv;
    }
    var accs = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var x = 0u; x < 4u; x++) {
        for (var y = 0u; y < 4u; y++) {
            if (a0 + x < P.dk && e0 + y < P.dv) {
                xy[out + (a0 + x) * P.dv + e0 + y] = accs[x][y];
            }
        }
    }
}
