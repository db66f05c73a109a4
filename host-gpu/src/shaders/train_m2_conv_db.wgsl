// Gradient of the Mamba-2 conv bias: db[c] += Σ_r dout[r][c] · SiLU'(pre[r][c]).
// One 256-thread workgroup per channel; fixed reduction order (deterministic).
struct SumParams {
    rows: u32,
    channels: u32,
}

@group(0) @binding(0) var<storage, read> pre: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read_write> db: array<f32>;
@group(0) @binding(3) var<uniform> p: SumParams;

const WG: u32 = 256u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let c = wg.y * nw.x + wg.x;
    if (c >= p.channels) {
        return;
    }
    var s = 0.0;
    for (var r = li; r < p.rows; r += 256u) {
        let z = pre[r * p.channels + c];
        let sg = sigmoid(z);
        s += dout[r * p.channels + c] * sg * (1.0 + z * (1.0 - sg));
    }
    let total = workgroup_sum(s, li);
    if (li == 0u) {
        db[c] = db[c] + total;
    }
}
