// out[i] = a[i] · SiLU(b[i]): the SwiGLU product (a = up, b = gate) and the GDN output gate
// (a = normed head output, b = g_proj x).
struct GateSiluParams {
    n: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: GateSiluParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i < p.n) {
        out[i] = a[i] * silu(b[i]);
    }
}
