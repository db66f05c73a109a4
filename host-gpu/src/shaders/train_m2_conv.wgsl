// Mamba-2 depthwise causal conv with bias + SiLU over a batch in (t, b) row order (the
// previous token of row r is row r − B); rows of `channels` floats, weight [channels][W]
// (official (channels, 1, W)), tap W−1 on the current token:
//   pre[r][c] = bias[c] + Σ_j in[r − (W−1−j)·B][c] · w[c][j] (zero before token 0),
//   out = SiLU(pre).
// The backward (input and weight sides) is train_conv_bwd*.wgsl's with stride = channels and
// c0 = 0: the bias only moves `pre`, which those read. The bias gradient is
// train_m2_conv_db.wgsl.
struct ConvParams {
    rows: u32,
    batch: u32,
    channels: u32,
    width: u32,
}

@group(0) @binding(0) var<storage, read> inp: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>; // zeros when the conv has none
@group(0) @binding(3) var<storage, read_write> pre: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> p: ConvParams;

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
    var s = bias[c];
    for (var j = 0u; j < p.width; j++) {
        let back = p.width - 1u - j;
        if (t >= back) {
            s += inp[(r - back * p.batch) * p.channels + c] * w[c * p.width + j];
        }
    }
    pre[i] = s;
    out[i] = silu(s);
}
