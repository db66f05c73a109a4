// chunk_state, Mamba-2 (after chunk_state.wgsl): a thread per column of the dk x dv state,
// 64 columns per workgroup. No steps: S = e^{γ_{T-1}} S_scan + Σ_{s in bucket, s >= s0}
// e^{γ_{T-1} − γ_s} k_s v_sᵀ with the last chunk's local cumsums γ (exponents <= 0), one matrix
// entry at a time.

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> hstate: array<f32>;
@group(0) @binding(4) var<storage, read_write> state: array<f32>;
@group(0) @binding(5) var<storage, read> gam: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let col = wg.x * 64u + lid;
    let h = wg.y;
    let j = wg.z;
    if (col >= P.dv) {
        return;
    }
    let last = P.t - 1u;
    let bk = bucket(j);
    if (!bk.live) {
        for (var kk = 0u; kk < P.dk; kk++) {
            state[((j * P.heads + h) * P.dk + kk) * P.dv + col] = 0.0;
        }
        return;
    }
    let s0 = (P.nt - 1u) * CHUNK;
    let g_last = gam[last * P.heads + h];
    let a0 = max(bk.a, s0);
    for (var kk = 0u; kk < P.dk; kk++) {
        var x = 0.0;
        if (bk.from_scan) {
            x = exp(g_last) * hstate[((bk.m * P.heads + h) * P.dk + kk) * P.dv + col];
        }
        for (var t = a0; t < bk.b; t++) {
            let w = exp(g_last - gam[t * P.heads + h]);
            x += w * k[qk_row(t, h) + kk] * v[(t * P.heads + h) * P.dv + col];
        }
        state[((j * P.heads + h) * P.dk + kk) * P.dv + col] = x;
    }
}
