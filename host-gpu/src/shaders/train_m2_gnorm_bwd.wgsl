// Grouped RMSNorm backward (train_m2_gnorm.wgsl; train_rmsnorm_bwd.wgsl with a per-group
// weight w = w_all[(r % groups)·cols ..]). With y = x·r·w, r = (mean x² + eps)^-½:
//   dx[i] = r·w[i]·dy[i] − x[i]·r³/n · Σ_j w[j]·dy[j]·x[j]   (written, or added when acc = 1),
//   wrow[r][i] = dy[i]·x[i]·r                                (this row's share of dw; a column
//                                                             sum over rows makes dw).
struct GroupNormBwdParams {
    rows: u32,
    cols: u32,
    eps: f32,
    acc: u32,
    groups: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> w: array<f32>;
@group(0) @binding(2) var<storage, read> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> dy: array<f32>;
@group(0) @binding(4) var<storage, read_write> dx: array<f32>;
@group(0) @binding(5) var<storage, read_write> wrow: array<f32>;
@group(0) @binding(6) var<uniform> p: GroupNormBwdParams;

var<workgroup> partial: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let r = wg.y * nw.x + wg.x;
    if (r >= p.rows) {
        return;
    }
    let base = r * p.cols;
    let wbase = (r % p.groups) * p.cols;
    var s = 0.0;
    for (var i = li; i < p.cols; i += 64u) {
        s += w[wbase + i] * dy[base + i] * x[base + i];
    }
    partial[li] = s;
    workgroupBarrier();
    for (var span = 32u; span > 0u; span >>= 1u) {
        if (li < span) {
            partial[li] += partial[li + span];
        }
        workgroupBarrier();
    }
    let inv = rstd[r];
    let corr = inv * inv * inv * partial[0] / f32(p.cols);
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
