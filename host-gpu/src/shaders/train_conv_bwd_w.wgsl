// Backward of train_conv.wgsl, weight side: dw[c][j] += Σ_r dpre[r][c] · in[r − (W−1−j)·B][c],
// dpre = dout · SiLU'(pre). One 256-thread workgroup per channel, W ≤ 8.
// ConvParams: common/train_conv_params.wgsl, which precedes this file.
@group(0) @binding(0) var<storage, read> pre: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read_write> dw: array<f32>;
@group(0) @binding(4) var<uniform> p: ConvParams;

var<workgroup> partial: array<array<f32, 8>, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let c = wg.y * nw.x + wg.x;
    if (c >= p.channels) {
        return;
    }
    var s = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for (var r = li; r < p.rows; r += 256u) {
        let at = r * p.stride + p.c0 + c;
        let d = dout[at] * dsilu(pre[at]);
        let t = r / p.batch;
        for (var j = 0u; j < p.width; j++) {
            let back = p.width - 1u - j;
            if (t >= back) {
                s[j] += d * inp[(r - back * p.batch) * p.stride + p.c0 + c];
            }
        }
    }
    partial[li] = s;
    workgroupBarrier();
    for (var span = 128u; span > 0u; span >>= 1u) {
        if (li < span) {
            for (var j = 0u; j < 8u; j++) {
                partial[li][j] += partial[li + span][j];
            }
        }
        workgroupBarrier();
    }
    if (li < p.width) {
        dw[c * p.width + li] = dw[c * p.width + li] + partial[0][li];
    }
}
