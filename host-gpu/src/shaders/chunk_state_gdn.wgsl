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
// alternating between two halves so that a thread may run a token ahead of a slow one). A step
// is short, so global loads would bound it: α, β and β v of the chunk are staged once, and each
// token's k row is loaded during the step before it, into one of three rows of `kb` (the step
// reads row t % 3 and writes row (t + 1) % 3 while a thread a step ahead writes (t + 2) % 3).
const SB: u32 = 16u; // columns per workgroup
const SP: u32 = 16u; // parts per column (SB * SP = the workgroup size)
var<workgroup> sg: array<f32, 4096>; // [MAX_DK][SB]
var<workgroup> red: array<f32, 512>; // [2][SP][SB]
var<workgroup> kb: array<f32, 768>; // [3][MAX_DK]: k rows of this step and the next
var<workgroup> tok: array<vec2<f32>, 64>; // [C]: (α, β) of the last chunk's tokens
var<workgroup> bvs: array<f32, 1024>; // [C][SB]: β v inside the bucket, else 0

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
    let s0 = (P.nt - 1u) * CHUNK;
    for (var e = lid; e < CHUNK; e += 256u) {
        let t = s0 + e;
        if (t < P.t) {
            tok[e] = vec2<f32>(exp(g[t * P.heads + h]), beta[t * P.heads + h]);
        }
    }
    for (var e = lid; e < CHUNK * SB; e += 256u) {
        let t = s0 + e / SB;
        let vc = wg.x * SB + e % SB;
        var x = 0.0;
        // The bucket ends at or before T, so this reads only tokens of the chunk.
        if (t >= bk.a && t < bk.b && vc < P.dv) {
            x = beta[t * P.heads + h] * v[(t * P.heads + h) * P.dv + vc];
        }
        bvs[e] = x;
    }
    // A state that starts at zero stays zero until its bucket's first token.
    var t = s0;
    if (!bk.from_scan) {
        t = max(t, bk.a);
    }
    if (lid < P.dk) {
        kb[lid] = k[qk_row(min(t, P.t - 1u), h) + lid];
    }
    workgroupBarrier();
    var cur = 0u; // kb row of step t
    for (var par = 0u; t < P.t; t++) {
        var kn = 0.0;
        if (lid < P.dk) {
            kn = k[qk_row(min(t + 1u, P.t - 1u), h) + lid];
        }
        let kr = cur * MAX_DK;
        var part = 0.0;
        for (var kk = p; kk < P.dk; kk += SP) {
            part += kb[kr + kk] * sg[kk * SB + c];
        }
        red[(par * SP + p) * SB + c] = part;
        let next = select(cur + 1u, 0u, cur == 2u);
        if (lid < P.dk) {
            kb[next * MAX_DK + lid] = kn;
        }
        workgroupBarrier();
        var uu = 0.0;
        for (var q = 0u; q < SP; q++) {
            uu += red[(par * SP + q) * SB + c];
        }
        let ab = tok[t - s0];
        let bv = bvs[(t - s0) * SB + c];
        for (var kk = p; kk < P.dk; kk += SP) {
            let kv = kb[kr + kk];
            let x = sg[kk * SB + c];
            sg[kk * SB + c] = ab.x * (x - ab.y * kv * uu) + kv * bv;
        }
        par ^= 1u;
        cur = next;
    }
    if (own) {
        for (var kk = p; kk < P.dk; kk += SP) {
            state[out + kk * P.dv] = sg[kk * SB + c];
        }
    }
}
