// Y[m][n] = Σ_k X[m][k] · W[n][k] on cooperative matrices (tensor cores): the product of
// matmul.wgsl, with the inputs rounded to ET.
// Preceded by a header that ops/mod.rs writes from the adapter's configuration: the `enable`
// directives, `alias ET` (the input element type, f16 or f32), `alias MatA/MatB/MatC` (the
// S×S cooperative matrix types; C always f32), `const S`, `const SG` (the adapter's fixed
// subgroup size) and `const THREADS` (8 subgroups); then f16.wgsl, one weights_*.wgsl and
// common/matmul_io.wgsl.
//
// A workgroup computes an 8S×8S tile of Y (128×128 for S = 16) with 8 subgroups in 2 rows × 4
// columns, each owning 4S×2S of the tile as 4×2 accumulators. Each K step stages 8S rows ×
// 32 k of X and of W in workgroup memory as ET (W dequantized by load_w); every subgroup then
// loads its 4 A and 2 B matrices per S of k and does 8 multiply-adds. A large tile matters: the
// staging (global loads, dequantization, rounding) is what limits this kernel, and it is paid
// once per element of the tile edge, while the product grows with its area. The result leaves
// one accumulator at a time through a small per-subgroup area, so that Y's edges are written
// with bounds checks.
const TILE: u32 = 8u * S;
const KT: u32 = 32u;
// Padded rows: multiples of 8 elements keep every row start 16-byte aligned (as cooperative
// loads and stores want) while shifting consecutive rows across memory banks.
const KS: u32 = 40u;
const OS: u32 = S + 4u;
const STAGE: u32 = TILE * KS;
const OUT: u32 = 8u * S * OS;

var<workgroup> x_tile: array<ET, STAGE>; // [TILE rows of X][KS]
var<workgroup> w_tile: array<ET, STAGE>; // [TILE rows of W][KS]
var<workgroup> o_tile: array<f32, OUT>; // per subgroup: one S×S accumulator, rows of OS

@compute @workgroup_size(THREADS)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let row0 = wg.y * TILE;
    let col0 = wg.x * TILE;
    // This subgroup's 4S×2S share of the tile.
    let sr = (sg / 4u) * 4u * S;
    let sc = (sg % 4u) * 2u * S;
    var acc00 = MatC();
    var acc01 = MatC();
    var acc10 = MatC();
    var acc11 = MatC();
    var acc20 = MatC();
    var acc21 = MatC();
    var acc30 = MatC();
    var acc31 = MatC();
    for (var k0 = 0u; k0 < p.k; k0 += KT) {
        // Four consecutive k of one row per thread and pass; eight threads cover a row's 32 k.
        for (var e = li; e < TILE * (KT / 4u); e += THREADS) {
            let r = e / (KT / 4u);
            let kq = (e % (KT / 4u)) * 4u;
            let xr = row0 + r;
            let wr = col0 + r;
            let xbase = p.x_offset + xr * p.x_stride + k0 + kq;
            for (var i = 0u; i < 4u; i++) {
                let gk = k0 + kq + i;
                var xv = 0.0;
                if (xr < p.m && gk < p.k) {
                    xv = x[xbase + i];
                }
                x_tile[r * KS + kq + i] = ET(xv);
                var wv = 0.0;
                if (wr < p.n && gk < p.k) {
                    wv = load_w(wr, gk, p.k);
                }
                w_tile[r * KS + kq + i] = ET(wv);
            }
        }
        workgroupBarrier();
        for (var ks = 0u; ks < KT; ks += S) {
            // A (rows of X × k) is row-major in x_tile; B (k × rows of W) is column-major in
            // w_tile (each W row is a column of B, contiguous in k).
            let a0 = coopLoadT<MatA>(&x_tile[sr * KS + ks], KS);
            let a1 = coopLoadT<MatA>(&x_tile[(sr + S) * KS + ks], KS);
            let a2 = coopLoadT<MatA>(&x_tile[(sr + 2u * S) * KS + ks], KS);
            let a3 = coopLoadT<MatA>(&x_tile[(sr + 3u * S) * KS + ks], KS);
            let b0 = coopLoad<MatB>(&w_tile[sc * KS + ks], KS);
            let b1 = coopLoad<MatB>(&w_tile[(sc + S) * KS + ks], KS);
            acc00 = coopMultiplyAdd(a0, b0, acc00);
            acc01 = coopMultiplyAdd(a0, b1, acc01);
            acc10 = coopMultiplyAdd(a1, b0, acc10);
            acc11 = coopMultiplyAdd(a1, b1, acc11);
            acc20 = coopMultiplyAdd(a2, b0, acc20);
            acc21 = coopMultiplyAdd(a2, b1, acc21);
            acc30 = coopMultiplyAdd(a3, b0, acc30);
            acc31 = coopMultiplyAdd(a3, b1, acc31);
        }
        workgroupBarrier();
    }
    let o = sg * S * OS;
    coopStoreT(acc00, &o_tile[o], OS);
    emit(o, lane, row0 + sr, col0 + sc);
    coopStoreT(acc01, &o_tile[o], OS);
    emit(o, lane, row0 + sr, col0 + sc + S);
    coopStoreT(acc10, &o_tile[o], OS);
    emit(o, lane, row0 + sr + S, col0 + sc);
    coopStoreT(acc11, &o_tile[o], OS);
    emit(o, lane, row0 + sr + S, col0 + sc + S);
    coopStoreT(acc20, &o_tile[o], OS);
    emit(o, lane, row0 + sr + 2u * S, col0 + sc);
    coopStoreT(acc21, &o_tile[o], OS);
    emit(o, lane, row0 + sr + 2u * S, col0 + sc + S);
    coopStoreT(acc30, &o_tile[o], OS);
    emit(o, lane, row0 + sr + 3u * S, col0 + sc);
    coopStoreT(acc31, &o_tile[o], OS);
    emit(o, lane, row0 + sr + 3u * S, col0 + sc + S);
}

// Copies the S×S block at o_tile[o] to Y rows r0.., columns c0.. inside Y. The barriers make
// the cooperative store visible before the copy and the copy done before the next store.
fn emit(o: u32, lane: u32, r0: u32, c0: u32) {
    workgroupBarrier();
    for (var e = lane; e < S * S; e += SG) {
        let r = r0 + e / S;
        let c = c0 + e % S;
        if (r < p.m && c < p.n) {
            y[p.y_offset + r * p.y_stride + c] = o_tile[o + (e / S) * OS + e % S];
        }
    }
    workgroupBarrier();
}
