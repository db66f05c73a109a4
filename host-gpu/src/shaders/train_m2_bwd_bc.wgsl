// Gradients of the conv output's B and C columns: the per-head k (= B) and q (= C) gradients
// summed over the heads of each group. One thread per (row, column of B|C).
struct BcParams {
    rows: u32,
    heads: u32,
    groups: u32,
    n: u32,
    di: u32,
}

@group(0) @binding(0) var<storage, read> dq: array<f32>; // [rows][H][N]
@group(0) @binding(1) var<storage, read> dk: array<f32>; // [rows][H][N]
@group(0) @binding(2) var<storage, read_write> dxbc: array<f32>;
@group(0) @binding(3) var<uniform> p: BcParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let gn = p.groups * p.n;
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * 2u * gn) {
        return;
    }
    let r = i / (2u * gn);
    let c = i % (2u * gn);
    let is_c = c >= gn;
    let cc = select(c, c - gn, is_c);
    let grp = cc / p.n;
    let j = cc % p.n;
    let hpg = p.heads / p.groups;
    var s = 0.0;
    for (var h = grp * hpg; h < (grp + 1u) * hpg; h++) {
        let at = (r * p.heads + h) * p.n + j;
        if (is_c) {
            s += dq[at];
        } else {
            s += dk[at];
        }
    }
    dxbc[r * (p.di + 2u * gn) + p.di + c] = s;
}
