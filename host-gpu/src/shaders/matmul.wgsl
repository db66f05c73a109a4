// Y[m][n] = Σ_k X[m][k] · W[n][k]  (Y = X·Wᵀ, a linear layer over all tokens at once).
// Preceded by one weights_*.wgsl, which declares binding 0 and load_w(), then
// common/matmul_io.wgsl and common/tile64.wgsl. Each workgroup computes a 64×64 tile of Y,
// stepping K 16 at a time through workgroup memory (rows of X, rows of W).
@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    var acc = zero16();
    for (var k0 = 0u; k0 < p.k; k0 += KT) {
        // 64 rows × 16 k of X and of W; consecutive threads read consecutive k of a row.
        for (var e = li; e < TILE * KT; e += 256u) {
            let r = e / KT;
            let kk = e % KT;
            let gk = k0 + kk;
            var xv = 0.0;
            if (row0 + r < p.m && gk < p.k) {
                xv = x[p.x_offset + (row0 + r) * p.x_stride + gk];
            }
            row_tile[kk * PAD + r] = xv;
            var wv = 0.0;
            if (col0 + r < p.n && gk < p.k) {
                wv = load_w(col0 + r, gk, p.k);
            }
            col_tile[kk * PAD + r] = wv;
        }
        workgroupBarrier();
        acc = tile_products(acc, lid.x, lid.y);
        workgroupBarrier();
    }
    store_row(row0 + lid.y, col0 + lid.x, acc.a);
    store_row(row0 + lid.y + 16u, col0 + lid.x, acc.b);
    store_row(row0 + lid.y + 32u, col0 + lid.x, acc.c);
    store_row(row0 + lid.y + 48u, col0 + lid.x, acc.d);
}

// Y[r][c + 16j] = v[j] for the columns inside Y.
fn store_row(r: u32, c: u32, v: vec4<f32>) {
    if (r >= p.m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (c + 16u * j < p.n) {
            y[p.y_offset + r * p.y_stride + c + 16u * j] = v[j];
        }
    }
}
