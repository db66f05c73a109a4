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

var<workgroup> x_tile: array<f32, 1024>; // [64 rows of X][16 k]
var<workgroup> w_tile: array<f32, 1024>; // [64 rows of W][16 k]

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }
    for (var k0 = 0u; k0 < p.k; k0 += KT) {
        for (var e = li; e < TILE * KT; e += 256u) {
            let r = e / KT;
            let gk = k0 + e % KT;
            var xv = 0.0;
            if (row0 + r < p.m && gk < p.k) {
                xv = x[p.x_offset + (row0 + r) * p.x_stride + gk];
            }
            x_tile[e] = xv;
            var wv = 0.0;
            if (col0 + r < p.n && gk < p.k) {
                wv = load_w(col0 + r, gk, p.k);
            }
            w_tile[e] = wv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < KT; kk++) {
            var a: array<f32, 4>;
            var b: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                a[i] = x_tile[(lid.y + 16u * i) * KT + kk];
                b[i] = w_tile[(lid.x + 16u * i) * KT + kk];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] += a[i] * b[j];
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let r = row0 + lid.y + 16u * i;
        for (var j = 0u; j < 4u; j++) {
            let c = col0 + lid.x + 16u * j;
            if (r < p.m && c < p.n) {
                y[p.y_offset + r * p.y_stride + c] = acc[i * 4u + j];
            }
        }
    }
}
