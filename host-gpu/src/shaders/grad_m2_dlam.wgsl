// Inter-chunk dλ: for a reader row i of level m, dλ_i[7 + m] = exp(γ_i + dec) q_iᵀ X dO_i; every
// other column from 7 up is written 0 (columns no token reads get exactly 0). One workgroup per
// (chunk, head); thread = (row, quarter of dk), the quarters summed in a fixed order.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> d_o: array<f32>;
@group(0) @binding(3) var<storage, read> xy: array<f32>;
@group(0) @binding(4) var<storage, read> gam: array<f32>;
@group(0) @binding(5) var<storage, read> dec: array<f32>;
@group(0) @binding(6) var<storage, read_write> dlam: array<f32>;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = wg.y;
    let t0 = c * CHUNK;
    let n = min(CHUNK, P.t - t0);
    let row = lid % CHUNK;
    let part = lid / CHUNK;
    let levels = inter_levels();
    for (var col = C0P1; col < P.lam_cols; col++) {
        let m = col - C0P1;
        let reads = m < levels && chunk_role(m, c) == ROLE_READER;
        var s = 0.0;
        if (reads && row < n) {
            let mb = xy_base(0u, pair_of(m, c), h);
            let qr = qk_row(t0 + row, h);
            let orow = ((t0 + row) * P.heads + h) * P.dv;
            for (var a = part; a < P.dk; a += 4u) {
                var xd = 0.0;
                for (var e = 0u; e < P.dv; e++) {
                    xd += xy[mb + a * P.dv + e] * d_o[orow + e];
                }
                s += q[qr + a] * xd;
            }
        }
        red[lid] = s;
        workgroupBarrier();
        if (part == 0u && row < n) {
            var val = 0.0;
            if (reads) {
                let sum = ((red[row] + red[row + 64u]) + red[row + 128u]) + red[row + 192u];
                val = exp(gam[(t0 + row) * P.heads + h] + dec[dec_idx(m, c, h)]) * sum;
            }
            dlam[lam_idx(t0 + row, h, col)] = val;
        }
        workgroupBarrier();
    }
}
