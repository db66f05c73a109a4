// Shared by the kernels of the precomputed inter-chunk strategy (Mamba-2; see chunk_scan/mod.rs).
// The including kernel declares `gam` (local cumsums γ) and the uniform `P`.
//
// The strategy keeps one buffer `xs[NT - 1][heads][dk][dv]`: first every source chunk's own
// contribution K̃_cᵀ V_c (decayed to the end of chunk c), then, in place, the Blelloch up-sweep
// of those (slot s with m trailing one bits ends up holding the sum of the 2^m chunks ending at
// s, decayed to the end of s), and for the saturated level the running prefix. A chunk c reading
// chunk level m reads slot ((c >> m) << m) − 1, decayed by the chunks between: every decay is
// the exponential of a sum of chunk decays Γ ≤ 0 (spec §7.5: no global cumsums).

const PWG: u32 = 256u; // threads of every precomputed kernel

var<workgroup> dred: array<f32, 256>;

// Γ of chunk c (a full chunk: only the last chunk can be partial, and it is never a source).
fn chunk_decay(c: u32, h: u32) -> f32 {
    return gam[(c * CHUNK + CHUNK - 1u) * P.heads + h];
}

// Σ Γ_c over the chunks [c_from, c_to), summed by the whole workgroup; every thread gets the sum.
// Call it in uniform control flow.
fn decay_sum(h: u32, c_from: u32, c_to: u32, lid: u32) -> f32 {
    var s = 0.0;
    for (var c = c_from + lid; c < c_to; c += PWG) {
        s += chunk_decay(c, h);
    }
    workgroupBarrier(); // every thread has read the previous sum
    dred[lid] = s;
    workgroupBarrier();
    for (var w = PWG / 2u; w > 0u; w = w / 2u) {
        if (lid < w) {
            dred[lid] += dred[lid + w];
        }
        workgroupBarrier();
    }
    return dred[0];
}
