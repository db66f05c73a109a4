// RMSNorm backward (train_rmsnorm.wgsl: row r's weight w = w_all[(r % groups)·cols ..]).
// With y = x·r·w, r = (mean x² + eps)^-½:
//   dx[i] = r·w[i]·dy[i] − x[i]·r³/n · Σ_j w[j]·dy[j]·x[j]   (written, or added when acc = 1),
//   wrow[r][i] = dy[i]·x[i]·r                                (this row's share of dw; a column
//                                                             sum over rows makes dw).
// Preceded by common/norm_rows.wgsl (one workgroup per row, bindings 0 and 1) and
// common/train_norm_params.wgsl.
@group(0) @binding(2) var<storage, read> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> wrow: array<f32>;
@group(0) @binding(6) var<uniform> p: NormParams;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = grid_row(wg, nw);
    if (r >= p.rows) {
        return;
    }
    let base = r * p.cols;
    let wbase = (r % p.groups) * p.cols;
    var s = 0.0;
    for (var i = li; i < p.cols; i += 64u) {
        s += w[wbase + i] * dy[base + i] * x[base + i];
    }
    let inv = rstd[r];
    let corr = inv * inv * inv * workgroup_sum(s, li) / f32(p.cols);
    for (var i = li; i < p.cols; i += 64u) {
        let xi = x[base + i];
        let d = inv * w[wbase + i] * dy[base + i] - xi * corr;
        if (p.acc != 0u) {
            dx[base + i] = dx[base + i] + d;
        } else {
            dx[base + i] = d;
        }
        wrow[base + i] = dy[base + i] * xi * inv;
    }
}
