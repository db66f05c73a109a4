// Mamba-2 operator inputs per (row, head) from the conv output rows [x (H·P) | B (G·N) | C (G·N)]:
// q = C and k = B of the head's group (copied per head: the operator backward needs per-head
// q and k), v = x·dt.
struct QkvParams {
    rows: u32,
    heads: u32,
    groups: u32,
    n: u32,
    p: u32,
}

@group(0) @binding(0) var<storage, read> xbc: array<f32>;
@group(0) @binding(1) var<storage, read> dt: array<f32>; // [rows][H]
@group(0) @binding(2) var<storage, read_write> q: array<f32>; // [rows][H][N]
@group(0) @binding(3) var<storage, read_write> k: array<f32>; // [rows][H][N]
@group(0) @binding(4) var<storage, read_write> v: array<f32>; // [rows][H][P]
@group(0) @binding(5) var<uniform> p: QkvParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * p.heads) {
        return;
    }
    let r = i / p.heads;
    let h = i % p.heads;
    let di = p.heads * p.p;
    let stride = di + 2u * p.groups * p.n;
    let grp = h / (p.heads / p.groups);
    let b0 = r * stride + di + grp * p.n;
    let c0 = r * stride + di + p.groups * p.n + grp * p.n;
    for (var j = 0u; j < p.n; j++) {
        k[i * p.n + j] = xbc[b0 + j];
        q[i * p.n + j] = xbc[c0 + j];
    }
    let d = dt[i];
    for (var j = 0u; j < p.p; j++) {
        v[i * p.p + j] = xbc[r * stride + h * p.p + j] * d;
    }
}
