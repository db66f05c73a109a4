// Backward of train_m2_fwd_gates.wgsl per (row, head), from dg, dλ (operator) and sdt (the dt
// gradient through v = x·dt, train_m2_bwd_x.wgsl):
//   ddt = sdt − exp(A_log)·dg, z = dt_raw + dt_bias, dz = ddt·softplus'(z) → d dt_raw;
//   u = L·dl, e = dλ·softplus'(u), d dl = e·L;
//   per-row parameter shares, rows [dA_log (H) | d dt_bias (H) | dD (H, bwd_x) | dL (H·15)]:
//   dA_log += dg·g, d dt_bias += dz, dL += e·dl.
// softplus' = dsoftplus (common.wgsl).
struct BwdGateParams {
    rows: u32,
    heads: u32,
    lambda_cols: u32,
    dtl_stride: u32,
    log_linear: u32,
    levels: u32,
    prow_stride: u32,
}

@group(0) @binding(0) var<storage, read> dtl: array<f32>;
@group(0) @binding(1) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(2) var<storage, read> a_log: array<f32>;
@group(0) @binding(3) var<storage, read> l_scale: array<f32>;
@group(0) @binding(4) var<storage, read> dg: array<f32>;
@group(0) @binding(5) var<storage, read> dlam: array<f32>;
@group(0) @binding(6) var<storage, read> sdt: array<f32>;
@group(0) @binding(7) var<storage, read_write> ddtl: array<f32>;
@group(0) @binding(8) var<storage, read_write> prow: array<f32>;
@group(0) @binding(9) var<uniform> p: BwdGateParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * p.heads) {
        return;
    }
    let r = i / p.heads;
    let h = i % p.heads;
    let row = r * p.dtl_stride;
    let z = dtl[row + h] + dt_bias[h];
    let ea = exp(a_log[h]);
    let dgv = dg[i];
    let dz = (sdt[i] - ea * dgv) * dsoftplus(z);
    ddtl[row + h] = dz;
    let pr = r * p.prow_stride;
    prow[pr + h] = dgv * (-ea * softplus(z));
    prow[pr + p.heads + h] = dz;
    if (p.log_linear != 0u) {
        for (var l = 0u; l < 15u; l++) {
            let at = row + p.heads + h * 15u + l;
            let ls = l_scale[h * 15u + l];
            let dl = dtl[at];
            var e = 0.0;
            if (l < p.levels) {
                e = dlam[i * p.lambda_cols + l] * dsoftplus(ls * dl);
            }
            ddtl[at] = e * ls;
            prow[pr + 3u * p.heads + h * 15u + l] = e * dl;
        }
    }
}
