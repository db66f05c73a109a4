// Mamba-2 gates per (row, head) from dtl rows [dt_raw (H) | dl (H·15, log-linear only)]:
//   dt = softplus(dt_raw + dt_bias), g = −exp(A_log)·dt,
//   λ_ℓ = softplus(L_ℓ·dl_ℓ) (spec §5.1; λ = 1 in every column for plain models).
struct FwdGateParams {
    rows: u32,
    heads: u32,
    lambda_cols: u32,
    dtl_stride: u32,
    log_linear: u32,
}

@group(0) @binding(0) var<storage, read> dtl: array<f32>;
@group(0) @binding(1) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(2) var<storage, read> a_log: array<f32>;
@group(0) @binding(3) var<storage, read> l_scale: array<f32>; // [H][15]; any buffer when plain
@group(0) @binding(4) var<storage, read_write> g: array<f32>;   // [rows][H]
@group(0) @binding(5) var<storage, read_write> lam: array<f32>; // [rows][H][lambda_cols]
@group(0) @binding(6) var<storage, read_write> dt: array<f32>;  // [rows][H]
@group(0) @binding(7) var<uniform> p: FwdGateParams;

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
    let d = softplus(dtl[row + h] + dt_bias[h]);
    dt[i] = d;
    g[i] = -exp(a_log[h]) * d;
    let dl = row + p.heads + h * 15u;
    for (var l = 0u; l < p.lambda_cols; l++) {
        lam[i * p.lambda_cols + l] = lambda_col(p.log_linear, l_scale[h * 15u + l], dtl[dl + l], 1.0);
    }
}
