// out = a · SiLU(b) (SwiGLU: a = up, b = gate; GDN output gate: a = normed o, b = g_proj x).
//   forward (backward = 0): out[i] = a[i]·SiLU(b[i])
//   backward (backward = 1): with dout in `out`: da = dout·SiLU(b), db = dout·a·SiLU'(b)
struct GateParams {
    n: u32,
    backward: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> da: array<f32>;
@group(0) @binding(4) var<storage, read_write> db: array<f32>;
@group(0) @binding(5) var<uniform> p: GateParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.n) {
        return;
    }
    let z = b[i];
    let s = sigmoid(z);
    if (p.backward == 0u) {
        out[i] = a[i] * silu(z);
        return;
    }
    let d = out[i];
    da[i] = d * silu(z);
    db[i] = d * a[i] * s * (1.0 + z * (1.0 - s));
}
