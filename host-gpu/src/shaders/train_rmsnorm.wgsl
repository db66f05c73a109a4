// RMSNorm forward for training: out[r][i] = x[r][i] · rstd[r] · w[(r % groups)·cols + i], and
// rstd[r] = 1 / sqrt(mean_i x[r][i]² + eps) kept for the backward. groups = 1: one weight
// [cols] for every row; groups > 1 (the Mamba-2 gated norm with n_groups > 1, fla): rows of
// `cols` = the group size, `groups` consecutive rows making one token's d_inner, weight
// [groups][cols]. Preceded by common/norm_rows.wgsl (one workgroup per row, bindings 0 and 1)
// and common/train_norm_params.wgsl.
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(4) var<uniform> p: NormParams;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = grid_row(wg, nw);
    if (r >= p.rows) {
        return;
    }
    let base = r * p.cols;
    let inv = inv_rms(base, p.cols, p.eps, li);
    write_normed(base, (r % p.groups) * p.cols, p.cols, inv, li);
    if (li == 0u) {
        rstd[r] = inv;
    }
}
