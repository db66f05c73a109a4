// 64 × K by K × 64 tile products on cooperative matrices (tensor cores) with fp32 accuracy, for
// the chunk kernels whose tile products run in stages of KD values of K (chunk_intra_m2_coop,
// chunk_pre_contrib_m2_coop, chunk_pre_read_m2_coop). Needs the header of `CoopMatmul::wgsl_header` for S = 16 and
// subgroups of SG = 32 (the kernels' PWG = 256 threads are 8 subgroups) and chunk_common.wgsl.
//
// Exactness: each fp32 input x is split into x = hi + lo, hi = f16(x), lo = f16(x − hi), and
// each product taken as hi·hi + hi·lo + lo·hi, which keeps about 22 of fp32's 24 bits (the
// dropped lo·lo is 2^-22 of the product). f16's range is narrow (|x| < 65504, normal above
// 2^-14), so each stage of A and of B is first scaled by a power of two from its largest
// magnitude (exact in fp32), and the stage's partial product scaled back in f32.
//
// Layout: subgroup sg owns output rows 16 (sg / 2) .. + 16 and columns 32 (sg % 2) .. + 32 of
// the 64 × 64 tile, as two accumulators. A stage holds A (64 rows × KD) and B (KD × 64), both
// row-major as hi / lo f16 pairs.

const KD: u32 = 32u;
const CT: u32 = 64u; // rows and columns of the output tile
// Padded rows, multiples of 8 elements so that every row start stays 16-byte aligned (as
// cooperative loads want) while consecutive rows fall on other banks.
const AS: u32 = KD + 8u;
const BS: u32 = CT + 8u;
const OS: u32 = S + 4u;
const NSG: u32 = PWG / SG; // subgroups per workgroup
const PER: u32 = KD * CT / PWG; // values of A and of B per thread and stage

var<workgroup> a_hi: array<f16, CT * AS>; // [64 rows][AS]
var<workgroup> a_lo: array<f16, CT * AS>;
var<workgroup> b_hi: array<f16, KD * BS>; // [KD rows of K][BS]
var<workgroup> b_lo: array<f16, KD * BS>;
var<workgroup> peak: array<f32, 2u * NSG>; // per subgroup: largest |A|, largest |B|
var<workgroup> o_tile: array<f32, NSG * S * OS>; // per subgroup: one S×S accumulator, rows of OS

// The first row and column of subgroup sg's share of the output tile (see Layout above).
fn sub_row0(sg: u32) -> u32 {
    return (sg / 2u) * S;
}

fn sub_col0(sg: u32) -> u32 {
    return (sg % 2u) * 2u * S;
}

// A stage's values of one thread, element e = lid + j·PWG of each (the kernel picks the order
// that keeps its global loads coalesced): of A, (row e / KD, k e % KD) when `a_by_rows`, else
// (row e % CT, k e / CT); of B, (k e % KD, column e / KD) when `b_by_cols`, else
// (k e / CT, column e % CT).
struct Stage {
    a: array<f32, PER>,
    b: array<f32, PER>,
    a_by_rows: bool,
    b_by_cols: bool,
}

// The power of two 2^e with m · 2^-e < 2^15: values scaled by its inverse fit f16 with
// headroom; clamped so that both it and its inverse are normal fp32 numbers.
fn stage_scale(m: f32) -> f32 {
    return ldexp(1.0, clamp(frexp(m).exp - 15, -100, 100));
}

// acc0 / acc1 (columns c0 and c0 + S of rows r0 of the tile) += the stage's A B. Call it in
// uniform control flow: it synchronises the workgroup, before its stores and after its loads.
fn stage_product(st: ptr<function, Stage>, lid: u32, sg: u32, lane: u32,
                 acc0: ptr<function, MatC>, acc1: ptr<function, MatC>) {
    var am = 0.0;
    var bm = 0.0;
    for (var j = 0u; j < PER; j++) {
        am = max(am, abs((*st).a[j]));
        bm = max(bm, abs((*st).b[j]));
    }
    am = subgroupMax(am);
    bm = subgroupMax(bm);
    if (lane == 0u) {
        peak[sg] = am;
        peak[NSG + sg] = bm;
    }
    workgroupBarrier();
    for (var g = 0u; g < NSG; g++) {
        am = max(am, peak[g]);
        bm = max(bm, peak[NSG + g]);
    }
    let a_sc = stage_scale(am);
    let b_sc = stage_scale(bm);
    for (var j = 0u; j < PER; j++) {
        let e = lid + j * PWG;
        let ai = select((e % CT) * AS + e / CT, (e / KD) * AS + e % KD, (*st).a_by_rows);
        let x = (*st).a[j] / a_sc;
        let xh = f16(x);
        a_hi[ai] = xh;
        a_lo[ai] = f16(x - f32(xh));
        let bi = select((e / CT) * BS + e % CT, (e % KD) * BS + e / KD, (*st).b_by_cols);
        let y = (*st).b[j] / b_sc;
        let yh = f16(y);
        b_hi[bi] = yh;
        b_lo[bi] = f16(y - f32(yh));
    }
    workgroupBarrier();
    let r0 = sub_row0(sg);
    let c0 = sub_col0(sg);
    var p0 = MatC();
    var p1 = MatC();
    for (var ks = 0u; ks < KD; ks += S) {
        let ah = coopLoadT<MatA>(&a_hi[r0 * AS + ks], AS);
        let al = coopLoadT<MatA>(&a_lo[r0 * AS + ks], AS);
        let bh0 = coopLoadT<MatB>(&b_hi[ks * BS + c0], BS);
        let bl0 = coopLoadT<MatB>(&b_lo[ks * BS + c0], BS);
        let bh1 = coopLoadT<MatB>(&b_hi[ks * BS + c0 + S], BS);
        let bl1 = coopLoadT<MatB>(&b_lo[ks * BS + c0 + S], BS);
        p0 = coopMultiplyAdd(ah, bh0, p0);
        p0 = coopMultiplyAdd(ah, bl0, p0);
        p0 = coopMultiplyAdd(al, bh0, p0);
        p1 = coopMultiplyAdd(ah, bh1, p1);
        p1 = coopMultiplyAdd(ah, bl1, p1);
        p1 = coopMultiplyAdd(al, bh1, p1);
    }
    let back = a_sc * b_sc;
    *acc0 = *acc0 + p0 * back;
    *acc1 = *acc1 + p1 * back;
    workgroupBarrier();
}

// Stores accumulator `acc` of this subgroup in its o_tile block (rows of OS) for the kernel to
// read out: call `tile_block_done` after reading. Both in uniform control flow.
fn tile_block(acc: MatC, sg: u32) -> u32 {
    let ob = sg * S * OS;
    coopStoreT(acc, &o_tile[ob], OS);
    workgroupBarrier();
    return ob;
}

fn tile_block_done() {
    workgroupBarrier();
}
