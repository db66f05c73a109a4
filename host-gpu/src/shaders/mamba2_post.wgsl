// Mamba-2 after the scan: y = (o + D·xs) · SiLU(z), over [T][d_inner] (the gated RMSNorm follows).
// xs is x after conv+SiLU and before the dt scaling.
struct PostParams {
    t: u32,
    heads: u32,
    head_dim: u32,
    d_inner: u32,
    conv_channels: u32,
    in_rows: u32,
}

@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> xbc: array<f32>;
@group(0) @binding(2) var<storage, read> zx: array<f32>;
@group(0) @binding(3) var<storage, read> vecs: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<uniform> p: PostParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.d_inner) {
        return;
    }
    let t = i / p.d_inner;
    let c = i % p.d_inner;
    let d = vecs[2u * p.heads + c / p.head_dim];
    let yv = o[i] + d * xbc[t * p.conv_channels + c];
    y[i] = yv * silu(zx[t * p.in_rows + c]);
}
