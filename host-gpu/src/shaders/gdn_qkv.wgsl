// GDN scan inputs q, k, v from the conv output [T][q (H·dk) | k (H·dk) | v (H·dv)]:
// q_used = l2norm(q)·dk^-½, k_used = l2norm(k), l2norm(x) = x · (1 / sqrt(Σx² + 1e-6)).
struct QkvParams {
    t: u32,
    heads: u32,
    dk: u32,
    dv: u32,
    channels: u32,
    q_scale: f32,
}

@group(0) @binding(0) var<storage, read> qkv: array<f32>;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<uniform> p: QkvParams;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let i = flat_index(wg, nw, li);
    if (i >= p.t * p.heads) {
        return;
    }
    let t = i / p.heads;
    let h = i % p.heads;
    let row = t * p.channels;
    let kd = p.heads * p.dk;
    let qb = row + h * p.dk;
    let kb = row + kd + h * p.dk;
    var sq = 0.0;
    var sk = 0.0;
    for (var j = 0u; j < p.dk; j++) {
        sq += qkv[qb + j] * qkv[qb + j];
        sk += qkv[kb + j] * qkv[kb + j];
    }
    let rq = 1.0 / sqrt(sq + 1e-6);
    let rk = 1.0 / sqrt(sk + 1e-6);
    for (var j = 0u; j < p.dk; j++) {
        q[i * p.dk + j] = (qkv[qb + j] * rq) * p.q_scale;
        k[i * p.dk + j] = qkv[kb + j] * rk;
    }
    let vb = row + 2u * kd + h * p.dv;
    for (var j = 0u; j < p.dv; j++) {
        v[i * p.dv + j] = qkv[vb + j];
    }
}
