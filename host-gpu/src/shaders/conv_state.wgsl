// The conv state the decoder continues from: state[c][j] = the pre-conv input of token
// T−W+j (newest in column W−1), zero where that token does not exist (T < W).
struct ConvParams {
    t: u32,
    channels: u32,
    width: u32,
    in_offset: u32,
    in_stride: u32,
}

@group(0) @binding(0) var<storage, read> inp: array<f32>;
@group(0) @binding(1) var<storage, read_write> state: array<f32>;
@group(0) @binding(2) var<uniform> p: ConvParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.channels * p.width) {
        return;
    }
    let c = i / p.width;
    let j = i % p.width;
    let back = p.width - 1u - j;
    var v = 0.0;
    if (p.t > back) {
        v = inp[p.in_offset + (p.t - 1u - back) * p.in_stride + c];
    }
    state[i] = v;
}
