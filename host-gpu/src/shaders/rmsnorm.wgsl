// RMSNorm of rows: out[r][i] = x[r][i] · (1 / sqrt(mean_i x[r][i]² + eps)) · w[(r % w_period)·cols + i].
// Used for the block pre-norms and final norm (w_period 1), the Mamba-2 gated norm per norm
// group (w_period = groups per token) and the GDN per-head output norm (w_period 1, one row per
// head). Preceded by common/norm_rows.wgsl (one workgroup per row, bindings 0 and 1).
struct NormParams {
    rows: u32,
    cols: u32,
    w_period: u32,
    eps: f32,
}

@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<uniform> p: NormParams;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = grid_row(wg, nw);
    if (r >= p.rows) {
        return; // uniform across the workgroup
    }
    let base = r * p.cols;
    let inv = inv_rms(base, p.cols, p.eps, li);
    write_normed(base, (r % p.w_period) * p.cols, p.cols, inv, li);
}
