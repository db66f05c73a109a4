// Mamba-2 skip: y[r][h·P + j] = o[r][h·P + j] + D[h]·x[r][h·P + j], x the first H·P columns of
// the conv output rows (x before the dt scaling).
struct SkipParams {
    rows: u32,
    heads: u32,
    p: u32,
    stride: u32,
}

@group(0) @binding(0) var<storage, read> o: array<f32>;
@group(0) @binding(1) var<storage, read> xbc: array<f32>;
@group(0) @binding(2) var<storage, read> d_skip: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<uniform> p: SkipParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let di = p.heads * p.p;
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * di) {
        return;
    }
    let r = i / di;
    let c = i % di;
    y[i] = o[i] + d_skip[c / p.p] * xbc[r * p.stride + c];
}
