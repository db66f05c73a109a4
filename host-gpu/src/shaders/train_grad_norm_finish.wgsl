// Second pass of the global gradient norm (see train_grad_norm.wgsl): sums the partials in a
// fixed order and writes [norm, clip factor].

const WG: u32 = 256u;

struct FinishParams {
    count: u32,
    clip_on: u32,
    max_norm: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> partials: array<f32>;
@group(0) @binding(1) var<storage, read_write> result: array<f32>;
@group(0) @binding(2) var<uniform> fp: FinishParams;

var<workgroup> acc: array<f32, WG>;

@compute @workgroup_size(256)
fn finish(@builtin(local_invocation_id) lid: vec3<u32>) {
    var s = 0.0;
    for (var i = lid.x; i < fp.count; i = i + WG) {
        s = s + partials[i];
    }
    acc[lid.x] = s;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid.x < stride) {
            acc[lid.x] = acc[lid.x] + acc[lid.x + stride];
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        let norm = sqrt(acc[0]);
        var factor = 1.0;
        if (fp.clip_on != 0u) {
            factor = min(1.0, fp.max_norm / (norm + 1e-6));
        }
        result[0] = norm;
        result[1] = factor;
    }
}
