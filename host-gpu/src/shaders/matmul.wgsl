// Y[m][n] = Σ_k X[m][k] · W[n][k]  (Y = X·Wᵀ, a linear layer over all tokens at once).
// Preceded by one weights_*.wgsl, which declares binding 0 and load_w().
// Each workgroup computes a 64×64 tile of Y, stepping K 16 at a time through workgroup memory;
// each of its 16×16 threads accumulates a 4×4 sub-block (rows ly + 16i, columns lx + 16j).
struct MatmulParams {
    m: u32,
    n: u32,
    k: u32,
    x_offset: u32, // first element of X
    x_stride: u32, // elements per X row
    y_offset: u32, // first element of Y
    y_stride: u32, // elements per Y row (Y may be a column slice of a wider buffer)
    _pad: u32,
}

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<uniform> p: MatmulParams;

const TILE: u32 = 64u;
const KT: u32 = 16u;
// Tiles are stored k-major with a padded row of 65 so that both the stores (lanes differ in k)
// and the loads (lanes differ in the row) hit distinct memory banks.
const PAD: u32 = 65u;

var<workgroup> x_tile: array<f32, 1040>; // [16 k][65] rows of X
var<workgroup> w_tile: array<f32, 1040>; // [16 k][65] rows of W

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    // Row i of the thread's 4×4 block, columns j = 0..3 as the vector lanes. Plain variables,
    // not an indexed array, so that they stay in registers.
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
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
            x_tile[kk * PAD + r] = xv;
            var wv = 0.0;
            if (col0 + r < p.n && gk < p.k) {
                wv = load_w(col0 + r, gk, p.k);
            }
            w_tile[kk * PAD + r] = wv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KT; kk++) {
            let base = kk * PAD;
            let b = vec4<f32>(
                w_tile[base + lid.x],
                w_tile[base + lid.x + 16u],
                w_tile[base + lid.x + 32u],
                w_tile[base + lid.x + 48u],
            );
            acc0 += x_tile[base + lid.y] * b;
            acc1 += x_tile[base + lid.y + 16u] * b;
            acc2 += x_tile[base + lid.y + 32u] * b;
            acc3 += x_tile[base + lid.y + 48u] * b;
        }
        workgroupBarrier();
    }
    store_row(row0 + lid.y, col0 + lid.x, acc0);
    store_row(row0 + lid.y + 16u, col0 + lid.x, acc1);
    store_row(row0 + lid.y + 32u, col0 + lid.x, acc2);
    store_row(row0 + lid.y + 48u, col0 + lid.x, acc3);
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
