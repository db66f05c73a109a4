// GDN backward, step 7: per (chunk, head), dβ from the row sums of step 5, dg as the reverse
// cumsum of dγ inside the chunk (γ is the chunk-local inclusive cumsum of g), and the
// inter-chunk dλ columns c0 + 1 + m as the sums of grad_gdn_lvl's per-dk-block partials
// (0 in the columns a chunk does not read, and in the columns past the exact levels).

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> tiles: array<f32>;
@group(0) @binding(2) var<storage, read_write> dg: array<f32>;
@group(0) @binding(3) var<storage, read_write> dbeta: array<f32>;
@group(0) @binding(4) var<storage, read> dlp: array<f32>;
@group(0) @binding(5) var<storage, read_write> dlam: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let c = wg.x;
    let h = P.head0 + wg.y;
    let t0 = c * CHUNK;
    let n = chunk_rows(c);
    let base = ch_base(c, h);
    if (lid < n) {
        let t = t0 + lid;
        var s = 0.0;
        for (var r = lid; r < n; r++) {
            s += tiles[base + ROW_DG + r];
        }
        dg[t * P.heads + h] = s;
        dbeta[t * P.heads + h] = tiles[base + ROW_DB + lid];
        for (var col = C0P1; col < P.lam_cols; col++) {
            let m = col - C0P1;
            var x = 0.0;
            if (m < P.n_scans && reads(c, m)) {
                for (var b = 0u; b < n_lb(); b++) {
                    x += dlp[dlp_idx(t, h, m, b)];
                }
            }
            dlam[lam_idx(t, h, col)] = x;
        }
    }
}
