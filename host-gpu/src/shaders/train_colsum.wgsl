// Column sums into a gradient: out[c] += Σ_{r < rows} inp[in_off + r·stride + c] for c < cols.
// One 256-thread workgroup per column; a fixed reduction order, so results are deterministic.
struct SumParams {
    rows: u32,
    cols: u32,
    stride: u32,
    in_off: u32,
}

@group(0) @binding(0) var<storage, read> inp: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: SumParams;

const WG: u32 = 256u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let c = wg.y * nw.x + wg.x;
    if (c >= p.cols) {
        return;
    }
    var s = 0.0;
    for (var r = li; r < p.rows; r += 256u) {
        s += inp[p.in_off + r * p.stride + c];
    }
    let total = workgroup_sum(s, li);
    if (li == 0u) {
        out[c] = out[c] + total;
    }
}
