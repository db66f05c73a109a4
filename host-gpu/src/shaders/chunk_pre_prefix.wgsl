// Precomputed strategy, step 3 (only when the saturated level m_top has readers): the running
// prefix over the blocks of 2^m_top chunks, in place: the slot of block b's last chunk becomes
// the sum of every chunk up to it (decayed to its end) = what the chunks of block b + 1 read
// (the sum of all exact levels ≥ top, the runtime's saturating level). Sequential over blocks,
// elementwise; one workgroup per (1024 elements of dk × dv, head).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> gam: array<f32>;
@group(0) @binding(2) var<storage, read_write> xs: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m = P.m_top;
    let h = wg.y;
    let size = 1u << m;
    let blocks = (P.nt - 1u) >> m; // blocks some later chunk reads
    let per = P.dk * P.dv;
    var p = vec4<f32>(0.0);
    for (var b = 1u; b <= blocks; b++) {
        let s = b * size - 1u;
        let dec = exp(decay_sum(h, s + 1u - size, s + 1u, lid));
        let base = (s * P.heads + h) * per;
        for (var i = 0u; i < 4u; i++) {
            let e = wg.x * 4u * PWG + i * PWG + lid;
            if (e < per) {
                let x = dec * p[i] + xs[base + e];
                p[i] = x;
                xs[base + e] = x;
            }
        }
    }
}
