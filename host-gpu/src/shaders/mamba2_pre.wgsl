// Mamba-2 per-token, per-head scan inputs from the in_proj output zx = [z | xBC | dt | dl] and
// the conv output xs: dt = softplus(dt_raw + dt_bias), g = −exp(A_log)·dt, v = xs·dt,
// λ = softplus(L·dl) (log-linear) or 1 (plain).
struct PreParams {
    t: u32,
    heads: u32,
    head_dim: u32,
    d_inner: u32,
    conv_channels: u32,
    in_rows: u32,
    lambda_cols: u32,
    log_linear: u32,
}

@group(0) @binding(0) var<storage, read> zx: array<f32>;
@group(0) @binding(1) var<storage, read> xbc: array<f32>;
@group(0) @binding(2) var<storage, read> vecs: array<f32>; // [dt_bias H][A_log H][D H][L H·15]
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> lam: array<f32>;
@group(0) @binding(6) var<uniform> p: PreParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.heads) {
        return;
    }
    let t = i / p.heads;
    let h = i % p.heads;
    let zrow = t * p.in_rows;
    let dt = softplus(zx[zrow + p.d_inner + p.conv_channels + h] + vecs[h]);
    g[i] = -exp(vecs[p.heads + h]) * dt;
    let xrow = t * p.conv_channels + h * p.head_dim;
    let vrow = i * p.head_dim;
    for (var j = 0u; j < p.head_dim; j++) {
        v[vrow + j] = xbc[xrow + j] * dt;
    }
    let dl = zrow + p.d_inner + p.conv_channels + p.heads + h * p.lambda_cols;
    let ls = 3u * p.heads + h * p.lambda_cols;
    for (var l = 0u; l < p.lambda_cols; l++) {
        lam[i * p.lambda_cols + l] = lambda_col(p.log_linear, vecs[ls + l], zx[dl + l], 1.0);
    }
}
