// Global gradient norm for clipping, in two passes with a fixed summation order (no atomics),
// so the same gradients always give the same bits.
//
// `sumsq`: one workgroup per CHUNK values of one gradient writes the sum of their squares to
// `partials[out_offset + workgroup]` (each thread sums a strided slice, then a tree).
// `finish` (train_grad_norm_finish.wgsl): one workgroup sums all partials the same way and
// writes `result = [norm, clip factor]`, the factor being torch's clip_grad_norm_ one:
// min(1, max_norm / (norm + 1e-6)), or 1 when clipping is off.

const WG: u32 = 256u;
const CHUNK: u32 = 4096u;

struct SumsqParams {
    len: u32,
    out_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read> grad: array<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<uniform> sp: SumsqParams;

var<workgroup> acc: array<f32, WG>;

fn tree_sum(lid: u32) {
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            acc[lid] = acc[lid] + acc[lid + stride];
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(256)
fn sumsq(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let start = wid.x * CHUNK;
    let end = min(start + CHUNK, sp.len);
    var s = 0.0;
    for (var i = start + lid.x; i < end; i = i + WG) {
        let g = grad[i];
        s = s + g * g;
    }
    acc[lid.x] = s;
    workgroupBarrier();
    tree_sum(lid.x);
    if (lid.x == 0u) {
        partials[sp.out_offset + wid.x] = acc[0];
    }
}
