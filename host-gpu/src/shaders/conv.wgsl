// Causal depthwise short convolution over all tokens, then SiLU:
// out[t][c] = SiLU(Σ_j in[t−W+1+j][c] · weight[c][j] + bias[c]), inputs before token 0 are zero.
// The input is a column slice of a wider buffer (Mamba-2: xBC inside the in_proj output).
struct ConvParams {
    t: u32,
    channels: u32,
    width: u32,
    in_offset: u32,
    in_stride: u32,
}

@group(0) @binding(0) var<storage, read> inp: array<f32>;
@group(0) @binding(1) var<storage, read> weight: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: ConvParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.channels) {
        return;
    }
    let t = i / p.channels;
    let c = i % p.channels;
    var s = 0.0;
    for (var j = 0u; j < p.width; j++) {
        // Token t − (W−1) + j; the sum runs oldest first, as the decoder's dot does.
        let back = p.width - 1u - j;
        var v = 0.0;
        if (t >= back) {
            v = inp[p.in_offset + (t - back) * p.in_stride + c];
        }
        s += v * weight[c * p.width + j];
    }
    out[i] = silu(s + bias[c]);
}
