// GDN gates per (row, head) from abl rows [a (H) | b (H) | l_proj x (H·15, log-linear only)]:
//   β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias), λ_ℓ = softplus(L_ℓ·l_ℓ)·√dk
//   (λ = 1 in every column for plain models).
// Backward (backward = 1), from dβ, dg, dλ (the operator's gradients):
//   db = dβ·β(1−β); z = a + dt_bias, da = dg·(−exp(A_log))·softplus'(z);
//   u = L·l, e = dλ·√dk·softplus'(u), dl = e·L;
//   per-row shares of the parameter gradients, rows [dA_log (H) | d dt_bias (H) | dL (H·15)]:
//   dA_log += dg·g, d dt_bias += da, dL += e·l (column sums over rows make the gradients).
// softplus' = dsoftplus (common.wgsl).
struct GateParams {
    rows: u32,
    heads: u32,
    lambda_cols: u32,
    abl_stride: u32,
    log_linear: u32,
    lam_scale: f32,
    backward: u32,
    levels: u32,
}

@group(0) @binding(0) var<storage, read> abl: array<f32>;
@group(0) @binding(1) var<storage, read> dt_bias: array<f32>;
@group(0) @binding(2) var<storage, read> a_log: array<f32>;
@group(0) @binding(3) var<storage, read> l_scale: array<f32>; // [H][15]; any buffer when plain
@group(0) @binding(4) var<storage, read_write> beta: array<f32>; // [rows][H]
@group(0) @binding(5) var<storage, read_write> g: array<f32>;    // [rows][H]
@group(0) @binding(6) var<storage, read_write> lam: array<f32>;  // [rows][H][lambda_cols]
@group(0) @binding(7) var<storage, read_write> dabl: array<f32>; // backward: d abl
@group(0) @binding(8) var<storage, read_write> prow: array<f32>; // backward: parameter shares
@group(0) @binding(9) var<uniform> p: GateParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * p.heads) {
        return;
    }
    let r = i / p.heads;
    let h = i % p.heads;
    let row = r * p.abl_stride;
    let lrow = row + 2u * p.heads + h * 15u;
    let ls = h * 15u;
    if (p.backward == 0u) {
        beta[i] = sigmoid(abl[row + p.heads + h]);
        g[i] = -exp(a_log[h]) * softplus(abl[row + h] + dt_bias[h]);
        for (var l = 0u; l < p.lambda_cols; l++) {
            let lv = lambda_col(p.log_linear, l_scale[ls + l], abl[lrow + l], p.lam_scale);
            lam[i * p.lambda_cols + l] = lv;
        }
        return;
    }
    // Backward: beta, g, lam hold dβ, dg, dλ; the forward's β is recomputed.
    let bt = sigmoid(abl[row + p.heads + h]);
    dabl[row + p.heads + h] = beta[i] * bt * (1.0 - bt);
    let z = abl[row + h] + dt_bias[h];
    let ea = exp(a_log[h]);
    let dgv = g[i];
    let dz = dgv * (-ea) * dsoftplus(z);
    dabl[row + h] = dz;
    let pw = 2u * p.heads + 15u * p.heads;
    prow[r * pw + h] = dgv * (-ea * softplus(z));
    prow[r * pw + p.heads + h] = dz;
    if (p.log_linear != 0u) {
        for (var l = 0u; l < 15u; l++) {
            let u = l_scale[ls + l] * abl[lrow + l];
            var e = 0.0;
            if (l < p.levels) {
                e = lam[i * p.lambda_cols + l] * p.lam_scale * dsoftplus(u);
            }
            dabl[lrow + l] = e * l_scale[ls + l];
            prow[r * pw + 2u * p.heads + h * 15u + l] = e * abl[lrow + l];
        }
    }
}
