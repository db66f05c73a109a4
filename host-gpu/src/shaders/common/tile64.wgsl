// The register-blocked 64×64 product tile of matmul.wgsl and train_matmul.wgsl: 16×16 threads,
// each accumulating a 4×4 block (rows ly + 16i, columns lx + 16j) in a Rows16 (needs
// rows16.wgsl), KT k at a time.
const TILE: u32 = 64u;
const KT: u32 = 16u;
// Tiles are stored k-major with a padded row of 65 so that both the stores (lanes differ in k)
// and the loads (lanes differ in the row) hit distinct memory banks.
const PAD: u32 = 65u;

var<workgroup> row_tile: array<f32, 1040>; // [16 k][65] rows of the product
var<workgroup> col_tile: array<f32, 1040>; // [16 k][65] columns of the product

// `acc` plus the products of the KT staged k, for the thread at (lx, ly).
fn tile_products(acc: Rows16, lx: u32, ly: u32) -> Rows16 {
    var sum = acc;
    for (var kk = 0u; kk < KT; kk++) {
        let base = kk * PAD;
        let cols = vec4<f32>(
            col_tile[base + lx],
            col_tile[base + lx + 16u],
            col_tile[base + lx + 32u],
            col_tile[base + lx + 48u],
        );
        let rows = vec4<f32>(
            row_tile[base + ly],
            row_tile[base + ly + 16u],
            row_tile[base + ly + 32u],
            row_tile[base + ly + 48u],
        );
        sum = add_outer(sum, rows, cols);
    }
    return sum;
}
