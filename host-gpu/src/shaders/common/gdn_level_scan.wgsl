// The workgroup state and phase A of the GDN backward's level scans (grad_gdn_hscan.wgsl,
// grad_gdn_dhscan.wgsl): one workgroup per (BV columns of dv, head, level), 2C threads, the BV
// columns as two vec4 halves. Needs grad_gdn_common.wgsl and the kernel's `fpt` (the transposed
// fpack) and `states` (the level states it stores: H or dL/dH) bindings.
const BV: u32 = 8u;
var<workgroup> st: array<vec4<f32>, 512>;  // [MAX_DK][2]: the state columns of this workgroup
var<workgroup> part: array<vec4<f32>, 256>; // [dk half][C][2]: partial sums of phase A
var<workgroup> xw: array<vec4<f32>, 128>;  // [C][2]: the chunk's product X (or dX)

// The state to zero, by the workgroup's 128 threads (ns = 2 dk vec4 halves).
fn zero_state(lid: u32, ns: u32) {
    for (var e = lid; e < ns; e += 128u) {
        st[e] = vec4<f32>(0.0);
    }
}

// The workgroup's state (its nbv of the BV columns from v0) into `states` at sb.
fn store_state(lid: u32, ns: u32, sb: u32, v0: u32, nbv: u32) {
    for (var e = lid; e < ns; e += 128u) {
        let d = (e % 2u) * 4u;
        let s = st[e];
        for (var j = 0u; j < 4u; j++) {
            if (d + j < nbv) {
                states[sb + (e / 2u) * P.dv + v0 + d + j] = s[j];
            }
        }
    }
}

// Phase A: thread lid < 2C (row ai = lid % C, dk half ak = lid / C) writes to part[lid] the
// partial sums over its dk half of row ai of fpack block `which` (transposed) of chunk c times
// the state; zeros for rows past n and where `zero`.
fn partial_products(lid: u32, c: u32, h: u32, n: u32, which: u32, zero: bool) {
    if (lid < 2u * CHUNK) {
        let ai = lid % CHUNK;
        let ak = lid / CHUNK;
        let kh = (P.dk + 1u) / 2u;
        var p0 = vec4<f32>(0.0);
        var p1 = vec4<f32>(0.0);
        if (ai < n && !zero) {
            let f = ft_at(c, h, which) + ai;
            let k1 = min(P.dk, (ak + 1u) * kh);
            var kk = ak * kh;
            // Four rows per step: four loads in flight rather than one waited for at once
            // (as chunk_scan_gdn.wgsl's products).
            for (; kk + 3u < k1; kk += 4u) {
                let f0 = fpt[f + kk * CHUNK];
                let f1 = fpt[f + (kk + 1u) * CHUNK];
                let f2 = fpt[f + (kk + 2u) * CHUNK];
                let f3 = fpt[f + (kk + 3u) * CHUNK];
                let s = kk * 2u;
                p0 += f0 * st[s] + f1 * st[s + 2u] + f2 * st[s + 4u] + f3 * st[s + 6u];
                p1 += f0 * st[s + 1u] + f1 * st[s + 3u] + f2 * st[s + 5u] + f3 * st[s + 7u];
            }
            for (; kk < k1; kk++) {
                let fv = fpt[f + kk * CHUNK];
                p0 += fv * st[kk * 2u];
                p1 += fv * st[kk * 2u + 1u];
            }
        }
        part[lid * 2u] = p0;
        part[lid * 2u + 1u] = p1;
    }
}
