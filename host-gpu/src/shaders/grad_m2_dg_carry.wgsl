// Second step of the dg reverse cumsum (see grad_m2_dg.wgsl): workgroup = (block of 256
// tokens, head) adds the totals of the later blocks, summed from the last block backwards.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read_write> dg: array<f32>;
@group(0) @binding(2) var<storage, read> tot: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wg.x;
    let h = wg.y;
    let blocks = (P.t + 255u) / 256u;
    let t = b * 256u + lid;
    if (t >= P.t || b + 1u >= blocks) {
        return;
    }
    var c = 0.0;
    for (var bb = blocks - 1u; bb > b; bb--) {
        c += tot[h * blocks + bb];
    }
    dg[t * P.heads + h] += c;
}
