// Panels of KP dk columns of a chunk's q and k, staged in workgroup memory for the score tiles
// of chunk_intra_m2 and chunk_intra_gdn: read straight from q and k, a thread's eight (Mamba-2)
// or twelve (GDN) rows per column miss the cache, which the kernels' workgroup tiles leave
// small. The kernel defines KP (a multiple of 4) and, over the workgroup memory it lends to the
// panels (its tiles, free until the scores are stored), panel_put(x, r, q, k) for element
// (row r, panel column x) and q_panel4(x, r) / k_panel4(x, r) for rows r..r+3 of panel column
// x. Needs the kernel's `q` and `k` bindings and chunk_common.wgsl.

// Stride of a panel column: odd, so that the stores (lanes differ in the column) spread over
// the memory banks.
const KPS: u32 = 65u;

// Columns x0 .. x0 + KP of the chunk's q and k; zero past its n rows and past dk, so that the
// products run over whole panels. Each thread loads four consecutive columns of a row per pass.
fn stage_panel(t0: u32, n: u32, h: u32, x0: u32, lid: u32) {
    for (var e = lid; e < CHUNK * (KP / 4u); e += 256u) {
        let r = e / (KP / 4u);
        let x = (e % (KP / 4u)) * 4u;
        var qv = vec4<f32>(0.0);
        var kv = vec4<f32>(0.0);
        if (r < n) {
            let b = qk_row(t0 + r, h) + x0 + x;
            for (var d = 0u; d < 4u; d++) {
                if (x0 + x + d < P.dk) {
                    qv[d] = q[b + d];
                    kv[d] = k[b + d];
                }
            }
        }
        for (var d = 0u; d < 4u; d++) {
            panel_put(x + d, r, qv[d], kv[d]);
        }
    }
}
