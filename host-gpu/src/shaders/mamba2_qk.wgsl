// Mamba-2 q = C and k = B for the scan, from the conv output xBC = [x (d_inner) | B (G·N) | C (G·N)].
// With one group the scan reads a single q/k head shared by all heads (qk_heads = 1); otherwise
// every head gets its group's B and C (qk_heads = H).
struct QkParams {
    t: u32,
    qk_heads: u32,
    n: u32,
    d_inner: u32,
    groups: u32,
    heads_per_group: u32,
    conv_channels: u32,
}

@group(0) @binding(0) var<storage, read> xbc: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k: array<f32>;
@group(0) @binding(3) var<uniform> p: QkParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.qk_heads * p.n) {
        return;
    }
    let t = i / (p.qk_heads * p.n);
    let h = (i / p.n) % p.qk_heads;
    let j = i % p.n;
    var grp = 0u;
    if (p.qk_heads > 1u) {
        grp = h / p.heads_per_group;
    }
    let row = t * p.conv_channels + p.d_inner;
    k[i] = xbc[row + grp * p.n + j];
    q[i] = xbc[row + p.groups * p.n + grp * p.n + j];
}
