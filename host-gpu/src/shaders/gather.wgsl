// Embedding gather: out[t][c] = W[ids[t]][c]. Preceded by one weights_*.wgsl (binding 0, load_w).
struct GatherParams {
    t: u32,
    d: u32,
}

@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: GatherParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = (wg.y * nw.x + wg.x) * 256u + li;
    if (i >= p.t * p.d) {
        return;
    }
    let t = i / p.d;
    let c = i % p.d;
    out[i] = load_w(ids[t], c, p.d);
}
