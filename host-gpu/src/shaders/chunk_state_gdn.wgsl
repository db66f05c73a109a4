// chunk_state, Gated DeltaNet (after chunk_state.wgsl).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> g: array<f32>;
@group(0) @binding(4) var<storage, read> beta: array<f32>;
@group(0) @binding(5) var<storage, read> hstate: array<f32>;
@group(0) @binding(6) var<storage, read_write> state: array<f32>;

// Gated DeltaNet: the tokens of the last chunk stepped like the decoder, S = α (S − β k (kᵀ S))
// (+ β k vᵀ inside the bucket). The column block's dk x SB state lives in workgroup memory; thread
// (column c = lid % SB, part p = lid / SB) owns rows p, p + SP, p + 2 SP, ... of column c, so that
// the SP parts of a column share each token's kᵀ S through `red` (one barrier per token, `red`
// alternating between two halves so that a thread may run a token ahead of a slow one).
const SB: u32 = 16u; // columns per workgroup
const SP: u32 = 16u; // parts per column (SB * SP = the workgroup size)
var<workgroup> sg: array<f32, 4096>; // [MAX_DK][SB]
var<workgroup> red: array<f32, 512>; // [2][SP][SB]

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = lid % SB;
    let p = lid / SB;
    let col = wg.x * SB + c;
    let h = wg.y;
    let j = wg.z;
    let own = col < P.dv; // every thread takes part in the barriers
    let bk = bucket(j);
    let out = (j * P.heads + h) * P.dk * P.dv + col;
    if (!bk.live) {
        if (own) {
            for (var kk = p; kk < P.dk; kk += SP) {
                state[out + kk * P.dv] = 0.0;
            }
        }
        return; // uniform: the whole workgroup has one level
    }
    for (var kk = p; kk < P.dk; kk += SP) {
        var x = 0.0;
        if (bk.from_scan && own) {
            x = hstate[((bk.m * P.heads + h) * P.dk + kk) * P.dv + col];
        }
        sg[kk * SB + c] = x;
    }
    // A state that starts at zero stays zero until its bucket's first token.
    var t = (P.nt - 1u) * C;
    if (!bk.from_scan) {
        t = max(t, bk.a);
    }
    for (var par = 0u; t < P.t; t++) {
        let alpha = exp(g[t * P.heads + h]);
        let kr = qk_row(t, h);
        let bt = beta[t * P.heads + h];
        var part = 0.0;
        for (var kk = p; kk < P.dk; kk += SP) {
            part += k[kr + kk] * sg[kk * SB + c];
        }
        red[(par * SP + p) * SB + c] = part;
        workgroupBarrier();
        var uu = 0.0;
        for (var q = 0u; q < SP; q++) {
            uu += red[(par * SP + q) * SB + c];
        }
        var bv = 0.0;
        if (t >= bk.a && t < bk.b && own) {
            bv = bt * v[(t * P.heads + h) * P.dv + col];
        }
        for (var kk = p; kk < P.dk; kk += SP) {
            let kv = k[kr + kk];
            let x = sg[kk * SB + c];
            sg[kk * SB + c] = alpha * (x - bt * kv * uu) + kv * bv;
        }
        par ^= 1u;
    }
    if (own) {
        for (var kk = p; kk < P.dk; kk += SP) {
            state[out + kk * P.dv] = sg[kk * SB + c];
        }
    }
}
