// Sum of split-k partials (see train_matmul.wgsl): C[c_off + i·c_rs + j] = (acc ? C : 0) +
// Σ_z part[z·m·n + i·n + j], z in order.
struct SumParams {
    m: u32,
    n: u32,
    splits: u32,
    c_off: u32,
    c_rs: u32,
    acc: u32,
}

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(1) var<storage, read_write> c: array<f32>;
@group(0) @binding(2) var<uniform> p: SumParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    let mn = p.m * p.n;
    if (i >= mn) {
        return;
    }
    var s = 0.0;
    for (var z = 0u; z < p.splits; z++) {
        s += part[z * mn + i];
    }
    let at = p.c_off + (i / p.n) * p.c_rs + i % p.n;
    if (p.acc != 0u) {
        c[at] = c[at] + s;
    } else {
        c[at] = s;
    }
}
