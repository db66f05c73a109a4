// Precomputed strategy, step 2 (one dispatch per chunk level m = P.level ≥ 1): the Blelloch
// up-sweep in place: for every block b of 2^m chunks, the slot of its last chunk gets
// e^{Γ(second half)} · (first half) + (second half). Elementwise; one workgroup per (1024
// elements of dk × dv, block, head).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> gam: array<f32>;
@group(0) @binding(2) var<storage, read_write> xs: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m = P.level;
    let b = wg.y;
    let h = wg.z;
    let half = 1u << (m - 1u);
    let mid1 = (b << m) + half - 1u; // last chunk of the first half
    let last = mid1 + half;          // last chunk of the block
    let dec = exp(decay_sum(h, mid1 + 1u, last + 1u, lid));
    let per = P.dk * P.dv;
    let a = (mid1 * P.heads + h) * per;
    let z = (last * P.heads + h) * per;
    for (var i = 0u; i < 4u; i++) {
        let e = wg.x * 4u * PWG + i * PWG + lid;
        if (e < per) {
            xs[z + e] = dec * xs[a + e] + xs[z + e];
        }
    }
}
