// RMSNorm forward for training: out[r][i] = x[r][i] · rstd[r] · w[(r % groups)·cols + i], and
// rstd[r] = 1 / sqrt(mean_i x[r][i]² + eps) kept for the backward. One 64-thread workgroup per
// row. groups = 1: one weight [cols] for every row; groups > 1 (the Mamba-2 gated norm with
// n_groups > 1, fla): rows of `cols` = the group size, `groups` consecutive rows making one
// token's d_inner, weight [groups][cols].
struct NormParams {
    rows: u32,
    cols: u32,
    eps: f32,
    acc: u32,
    groups: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(4) var<uniform> p: NormParams;

const WG: u32 = 64u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.cols;
    let wbase = (r % p.groups) * p.cols;
    let inv = inv_rms(base, p.cols, p.eps, li);
    for (var i = li; i < p.cols; i += 64u) {
        out[base + i] = x[base + i] * inv * w[wbase + i];
    }
    if (li == 0u) {
        rstd[r] = inv;
    }
}
