// GDN operator inputs from the conv output rows [q (H·dk) | k (H·dk) | v (H·dv)]:
//   forward:  q_used = l2norm(q)·s, k_used = l2norm(k), v copied; l2norm(x) = x·ρ,
//             ρ = (Σx² + 1e-6)^-½, s = dk^-½
//   backward: dq = s·(ρ·dq_used − q·ρ³·Σ(dq_used·q)), dk likewise with s = 1, dv copied
// One thread per (row, head). Both entries bind the same buffers: `fwd_*` are read by the
// backward and written by the forward.
struct QkvParams {
    rows: u32,
    heads: u32,
    dk: u32,
    dv: u32,
    channels: u32,
    q_scale: f32,
    backward: u32,
}

@group(0) @binding(0) var<storage, read_write> qkv: array<f32>;  // conv output / its gradient
@group(0) @binding(1) var<storage, read> x: array<f32>;          // conv output (backward)
@group(0) @binding(2) var<storage, read_write> q: array<f32>;
@group(0) @binding(3) var<storage, read_write> k: array<f32>;
@group(0) @binding(4) var<storage, read_write> v: array<f32>;
@group(0) @binding(5) var<uniform> p: QkvParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.rows * p.heads) {
        return;
    }
    let r = i / p.heads;
    let h = i % p.heads;
    let row = r * p.channels;
    let kd = p.heads * p.dk;
    let qb = row + h * p.dk;
    let kb = row + kd + h * p.dk;
    let vb = row + 2u * kd + h * p.dv;
    var sq = 0.0;
    var sk = 0.0;
    for (var j = 0u; j < p.dk; j++) {
        sq += x[qb + j] * x[qb + j];
        sk += x[kb + j] * x[kb + j];
    }
    let rq = 1.0 / sqrt(sq + 1e-6);
    let rk = 1.0 / sqrt(sk + 1e-6);
    if (p.backward == 0u) {
        for (var j = 0u; j < p.dk; j++) {
            q[i * p.dk + j] = (x[qb + j] * rq) * p.q_scale;
            k[i * p.dk + j] = x[kb + j] * rk;
        }
        for (var j = 0u; j < p.dv; j++) {
            v[i * p.dv + j] = x[vb + j];
        }
        return;
    }
    var dotq = 0.0;
    var dotk = 0.0;
    for (var j = 0u; j < p.dk; j++) {
        dotq += q[i * p.dk + j] * x[qb + j];
        dotk += k[i * p.dk + j] * x[kb + j];
    }
    let cq = rq * rq * rq * dotq;
    let ck = rk * rk * rk * dotk;
    for (var j = 0u; j < p.dk; j++) {
        qkv[qb + j] = p.q_scale * (rq * q[i * p.dk + j] - x[qb + j] * cq);
        qkv[kb + j] = rk * k[i * p.dk + j] - x[kb + j] * ck;
    }
    for (var j = 0u; j < p.dv; j++) {
        qkv[vb + j] = v[i * p.dv + j];
    }
}
