// GDN per-token, per-head gates from abl = [a (H) | b (H) | l_proj x (H·15, log-linear only)]:
// β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias), λ = softplus(L·l)·√dk (or 1 when plain).
struct GdnGateParams {
    t: u32,
    heads: u32,
    lambda_cols: u32,
    abl_stride: u32,
    log_linear: u32,
    lam_scale: f32,
}

@group(0) @binding(0) var<storage, read> abl: array<f32>;
@group(0) @binding(1) var<storage, read> vecs: array<f32>; // [dt_bias H][A_log H][unused H][L H·15]
@group(0) @binding(2) var<storage, read_write> beta: array<f32>;
@group(0) @binding(3) var<storage, read_write> g: array<f32>;
@group(0) @binding(4) var<storage, read_write> lam: array<f32>;
@group(0) @binding(5) var<uniform> p: GdnGateParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.heads) {
        return;
    }
    let t = i / p.heads;
    let h = i % p.heads;
    let row = t * p.abl_stride;
    beta[i] = sigmoid(abl[row + p.heads + h]);
    g[i] = -exp(vecs[p.heads + h]) * softplus(abl[row + h] + vecs[h]);
    let lrow = row + 2u * p.heads + h * p.lambda_cols;
    let ls = 3u * p.heads + h * p.lambda_cols;
    for (var l = 0u; l < p.lambda_cols; l++) {
        lam[i * p.lambda_cols + l] = lambda_col(p.log_linear, vecs[ls + l], abl[lrow + l], p.lam_scale);
    }
}
