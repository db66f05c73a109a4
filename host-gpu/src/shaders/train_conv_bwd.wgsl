// Backward of train_conv.wgsl, input side (see there): din[r][c] = Σ_j dpre[r + (W−1−j)·B][c] ·
// w[c][j], with dpre = dout · SiLU'(pre) formed on the fly. Written (not added).
// ConvParams: common/train_conv_params.wgsl, which precedes this file.
@group(0) @binding(0) var<storage, read> pre: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> din: array<f32>;
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
    var s = 0.0;
    for (var j = 0u; j < p.width; j++) {
        let ahead = p.width - 1u - j;
        let r2 = r + ahead * p.batch;
        if (r2 < p.rows) {
            let at = r2 * p.stride + p.c0 + c;
            s += dout[at] * dsilu(pre[at]) * w[c * p.width + j];
        }
    }
    din[r * p.stride + p.c0 + c] = s;
}
