// The two dk×dv matrices of every inter-chunk (level m, group g) pair:
//   X = Σ_{j in the source half} u_j k_j v_jᵀ,  u_j = exp((Γ_c − γ_j) + dec[m][c])
//       (the forward state the group's readers see, before their own decay),
//   Y = Σ_{i in the reader half} w_i q_i dO_iᵀ,  w_i = λ_i[7 + m] exp(γ_i + dec[m][c])
//       (= dL/dX).
// Workgroup = (64×64 tile of dk×dv, pair, head·2 + which); each thread a 4×4 block, the rows
// of the half in order (deterministic).

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

const TILE: u32 = 64u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let tiles_e = (P.dv + TILE - 1u) / TILE;
    let a0 = (wg.x / tiles_e) * TILE + (lid / 16u) * 4u;
    let e0 = (wg.x % tiles_e) * TILE + (lid % 16u) * 4u;
    let p = wg.y;
    let h = wg.z / 2u;
    let which = wg.z % 2u;

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
    let c_begin = ((p - base) << (m + 1u)) + which * half;
    let c_end = min(c_begin + half, P.nt);

    // Clamped indices (masked on the write).
    var a_ok = array<u32, 4>(min(a0, P.dk - 1u), min(a0 + 1u, P.dk - 1u), min(a0 + 2u, P.dk - 1u), min(a0 + 3u, P.dk - 1u));
    var e_ok = array<u32, 4>(min(e0, P.dv - 1u), min(e0 + 1u, P.dv - 1u), min(e0 + 2u, P.dv - 1u), min(e0 + 3u, P.dv - 1u));
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var c = c_begin; c < c_end; c++) {
        let t0 = c * C;
        let n = min(C, P.t - t0);
        if (lid < C) {
            var w = 0.0;
            if (lid < n) {
                let gl = gam[(t0 + lid) * P.heads + h];
                let d = dec[dec_idx(m, c, h)];
                if (which == 0u) {
                    w = exp((chunk_total(c, h) - gl) + d);
                } else {
                    w = lam[lam_idx(t0 + lid, h, C0P1 + m)] * exp(gl + d);
                }
            }
            wts[lid] = w;
        }
        workgroupBarrier();
        for (var r = 0u; r < n; r++) {
            let t = t0 + r;
            let row_l = qk_row(t, h);
            let row_r = (t * P.heads + h) * P.dv;
            var l: vec4<f32>;
            var rv: vec4<f32>;
            if (which == 0u) {
                l = vec4<f32>(k[row_l + a_ok[0]], k[row_l + a_ok[1]], k[row_l + a_ok[2]], k[row_l + a_ok[3]]);
                rv = vec4<f32>(v[row_r + e_ok[0]], v[row_r + e_ok[1]], v[row_r + e_ok[2]], v[row_r + e_ok[3]]);
            } else {
                l = vec4<f32>(q[row_l + a_ok[0]], q[row_l + a_ok[1]], q[row_l + a_ok[2]], q[row_l + a_ok[3]]);
                rv = vec4<f32>(d_o[row_r + e_ok[0]], d_o[row_r + e_ok[1]], d_o[row_r + e_ok[2]], d_o[row_r + e_ok[3]]);
            }
            let lw = wts[r] * l;
            acc0 += lw.x * rv;
            acc1 += lw.y * rv;
            acc2 += lw.z * rv;
            acc3 += lw.w * rv;
        }
        workgroupBarrier();
    }
    let out = xy_base(which, p, h);
    var accs = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
    for (var x = 0u; x < 4u; x++) {
        for (var y = 0u; y < 4u; y++) {
            if (a0 + x < P.dk && e0 + y < P.dv) {
                xy[out + (a0 + x) * P.dv + e0 + y] = accs[x][y];
            }
        }
    }
}
