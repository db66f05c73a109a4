// Depthwise causal short convolution (no bias) + SiLU over a batch in (t, b) row order: the
// previous token of row r is row r − B. Channels [c0, c0 + channels) of rows of `stride` floats;
// weight [channels][W] (official (channels, 1, W)), tap W−1 on the current token.
//   forward:      pre[r][c] = Σ_j in[r − (W−1−j)·B][c] · w[c][j] (zero before token 0);
//                 out = SiLU(pre)
//   backward_in:  dpre = dout · SiLU'(pre) (written to dpre), then per row
//                 din[r][c] = Σ_j dpre[r + (W−1−j)·B][c] · w[c][j] (rows past the end are 0)
//                 — two entries, `backward_pre` and `backward_in`.
//   backward_w:   dw[c][j] += Σ_r dpre[r][c] · in[r − (W−1−j)·B][c] (one workgroup per channel).
// ConvParams: common/train_conv_params.wgsl, which precedes this file.
@group(0) @binding(0) var<storage, read> inp: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> pre: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: ConvParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * p.channels) {
        return;
    }
    let r = i / p.channels;
    let c = i % p.channels;
    let t = r / p.batch;
    var s = 0.0;
    for (var j = 0u; j < p.width; j++) {
        let back = p.width - 1u - j;
        var v = 0.0;
        if (t >= back) {
            v = inp[(r - back * p.batch) * p.stride + p.c0 + c];
        }
        s += v * w[c * p.width + j];
    }
    let at = r * p.stride + p.c0 + c;
    pre[at] = s;
    out[at] = silu(s);
}
