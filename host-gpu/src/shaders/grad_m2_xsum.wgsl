// X of every inter-chunk (level m, group g) pair from the per-chunk sources of grad_m2_xy.wgsl
// (PER_CHUNK): X = Σ_{c in the source half} exp(dec[m][c]) X_c, the chunks in order
// (deterministic). One thread per element of dk×dv; workgroup = (256 elements, pair, head).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> xc: array<f32>;
@group(0) @binding(2) var<storage, read> dec: array<f32>;
@group(0) @binding(3) var<storage, read_write> xy: array<f32>;
// Only for grad_m2_common.wgsl's helpers (unused here, so not in the pipeline layout).
@group(0) @binding(4) var<storage, read> gam: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wg: vec3<u32>) {
    let e = gid.x;
    let p = wg.y;
    let h = wg.z;
    let mat = P.dk * P.dv;
    if (e >= mat) {
        return;
    }
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
    let c_begin = (p - base) << (m + 1u);
    var x = 0.0;
    for (var c = c_begin; c < c_begin + (1u << m); c++) {
        x += exp(dec[dec_idx(m, c, h)]) * xc[(c * P.heads + h) * mat + e];
    }
    xy[xy_base(0u, p, h) + e] = x;
}
