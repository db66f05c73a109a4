// dg (spec §7.4): dG_i = q_i·dq_i − k_i·dk_i with the complete dq, dk (intra plus every level),
// then dg_i = Σ_{r >= i} dG_r, a reverse cumsum over the whole sequence in f32 (no exponentials
// here), in two dispatches over blocks of 256 tokens:
// * `main`, workgroup = (block, head): inclusive suffix sums inside the block into dg, the
//   block's total into `tot`;
// * `grad_m2_dg_carry.wgsl`, workgroup = (block, head): adds the totals of the later blocks, summed from the
//   last block backwards (the order of a serial walk from the end, so results do not depend
//   on the blocking of the dispatch).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> dq: array<f32>;
@group(0) @binding(4) var<storage, read> dk: array<f32>;
@group(0) @binding(5) var<storage, read_write> dg: array<f32>;
@group(0) @binding(6) var<storage, read_write> tot: array<f32>;

var<workgroup> buf: array<f32, 256>;
var<workgroup> part: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wg.x;
    let h = wg.y;
    let t = b * 256u + lid;
    // dG of the block's tokens, 16 at a time with 16 lanes per token (coalesced row reads),
    // the lanes' partial sums added in lane order.
    let lane = lid % 16u;
    for (var t16 = 0u; t16 < 256u; t16 += 16u) {
        let tt = b * 256u + t16 + lid / 16u;
        var s = 0.0;
        if (tt < P.t) {
            let r = qk_row(tt, h);
            for (var a = lane; a < P.dk; a += 16u) {
                s += q[r + a] * dq[r + a] - k[r + a] * dk[r + a];
            }
        }
        part[lid] = s;
        workgroupBarrier();
        if (lid < 16u) {
            var x = 0.0;
            for (var l = 0u; l < 16u; l++) {
                x += part[lid * 16u + l];
            }
            buf[t16 + lid] = x;
        }
        workgroupBarrier();
    }
    // Inclusive suffix sums inside the block.
    for (var off = 1u; off < 256u; off = off * 2u) {
        var y = buf[lid];
        if (lid + off < 256u) {
            y += buf[lid + off];
        }
        workgroupBarrier();
        buf[lid] = y;
        workgroupBarrier();
    }
    if (t < P.t) {
        dg[t * P.heads + h] = buf[lid];
    }
    if (lid == 0u) {
        tot[h * ((P.t + 255u) / 256u) + b] = buf[0];
    }
}
