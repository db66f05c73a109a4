//! AVX2 integer kernels for x86_64, chosen at run time. Bit-identical to [`super::portable`].
//!
//! Per block, as ggml: the 32 i8 products are formed with `vpmaddubsw` (u8 × i8 pairs summed
//! to i16; for Q8_0 the weights' signs are moved onto the activations first with `vpsignb`),
//! widened with `vpmaddwd`, and reduced to one i32 per (row, block). Eight rows share each
//! activation load. The float side keeps the reference order exactly: lane r of an f32x8
//! accumulator is row r, and each block adds `(d_w · d_x) · isum` with a separate multiply
//! and add (no FMA), blocks in order, from 0.0.
//!
//! Exactness of the integer side:
//! * Q8_0: `vpsignb(a, w)` negates `a` where `w < 0`; that is exact unless `a = −128`, which
//!   [`ActBlock::quantize`] never produces (its quants lie in −127..=127). Weights may be
//!   −128: `|−128|` is 128 as the unsigned operand of `vpmaddubsw`. A pair sums to at most
//!   2 · 128 · 127 = 32512 < 2^15: no i16 saturation.
//! * Q4_0: the nibbles 0..=15 are the unsigned operand directly (2 · 15 · 128 < 2^15), and
//!   the offset is taken off afterwards as `− 8 · Σ q`, as the reference does.
//!
//! Needs AVX2 and F16C (the weight scales are converted eight at a time; every AVX2 CPU has
//! F16C, but both are checked). With `std` the check is a run-time CPUID probe (cached by the
//! standard library); without `std`, only a binary compiled with both features uses this path.

use core::arch::x86_64::*;

use super::{portable, ActBlock, BlockQ4_0, BlockQ8_0};

/// Rows processed together (one f32x8 accumulator lane each).
const ROWS: usize = 8;

/// Whether this CPU has AVX2 and F16C.
#[inline]
pub fn available() -> bool {
    #[cfg(feature = "std")]
    {
        std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(all(target_feature = "avx2", target_feature = "f16c"))
    }
}

/// [`portable::matvec_q8_0`] with AVX2 (falls back to it on a CPU without AVX2).
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    let kernels = Kernels {
        portable: portable::matvec_q8_0,
        rows8: rows8_q8_0,
        row1: row1_q8_0,
    };
    matvec(w, act, out, kernels);
}

/// [`portable::matvec_q4_0`] with AVX2 (falls back to it on a CPU without AVX2).
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    let kernels = Kernels {
        portable: portable::matvec_q4_0,
        rows8: rows8_q4_0,
        row1: row1_q4_0,
    };
    matvec(w, act, out, kernels);
}

/// The kernels of one weight block type `B`.
struct Kernels<B> {
    /// The reference, for a CPU without AVX2 or an empty row.
    portable: fn(&[B], &[ActBlock], &mut [f32]),
    /// [`ROWS`] rows of `act.len()` blocks (`w`) into `out`. Needs AVX2 and F16C.
    rows8: unsafe fn(&[B], &[ActBlock], &mut [f32; ROWS]),
    /// One row of `act.len()` blocks. Needs AVX2 and F16C.
    row1: unsafe fn(&[B], &[ActBlock]) -> f32,
}

/// out = W x: groups of [`ROWS`] rows, then the rows left over one by one. Inlined into each
/// public matvec, so that the kernels are direct calls.
#[inline(always)]
fn matvec<B>(w: &[B], act: &[ActBlock], out: &mut [f32], kernels: Kernels<B>) {
    let per_row = act.len();
    if per_row == 0 || !available() {
        return (kernels.portable)(w, act, out);
    }
    // As the reference: rows beyond the weights are left alone.
    let rows = out.len().min(w.len() / per_row);
    let out = &mut out[..rows];
    let w = &w[..rows * per_row];
    let full = rows / ROWS * ROWS;
    let (out8, out1) = out.split_at_mut(full);
    let (w8, w1) = w.split_at(full * per_row);
    for (o, wr) in out8
        .chunks_exact_mut(ROWS)
        .zip(w8.chunks_exact(ROWS * per_row))
    {
        let o: &mut [f32; ROWS] = o.try_into().expect("chunk of ROWS");
        // SAFETY: `available()` returned true above, so the CPU has AVX2 and F16C, the
        // features the kernel is compiled for. `wr` holds exactly ROWS rows of `act.len()`
        // blocks (chunks_exact), which is its precondition.
        unsafe { (kernels.rows8)(wr, act, o) };
    }
    for (o, row) in out1.iter_mut().zip(w1.chunks_exact(per_row)) {
        // SAFETY: as above, the CPU has AVX2 and F16C; `row` and `act` have the same length.
        *o = unsafe { (kernels.row1)(row, act) };
    }
}

/// The 32 quants of a Q8_0 block, sign-adjusted against the activations, multiplied and
/// summed in pairs to i32x8.
#[inline]
#[target_feature(enable = "avx2")]
fn q8_0_products(w: &BlockQ8_0, a: __m256i) -> __m256i {
    // SAFETY: `w.qs` is 32 readable bytes; `loadu` has no alignment requirement.
    let q = unsafe { _mm256_loadu_si256(w.qs.as_ptr().cast()) };
    let abs_w = _mm256_sign_epi8(q, q);
    let signed_a = _mm256_sign_epi8(a, q);
    let pairs = _mm256_maddubs_epi16(abs_w, signed_a);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// Σ w·q of a Q4_0 block (nibbles 0..=15, before the −8 offset) as i32x8 partial sums.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_0_products(w: &BlockQ4_0, a: __m256i) -> __m256i {
    // SAFETY: `w.qs` is 16 readable bytes; `loadu` has no alignment requirement.
    let packed = unsafe { _mm_loadu_si128(w.qs.as_ptr().cast()) };
    let low = _mm_set1_epi8(0x0F);
    // Weights 0..16 are the low nibbles, 16..32 the high ones: the activations' order.
    let lo = _mm_and_si128(packed, low);
    let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), low);
    let nibbles = _mm256_set_m128i(hi, lo);
    let pairs = _mm256_maddubs_epi16(nibbles, a);
    _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
}

/// The 32 activation quants of a block.
#[inline]
#[target_feature(enable = "avx2")]
fn load_act(a: &ActBlock) -> __m256i {
    // SAFETY: `a.qs` is 32 readable bytes; `loadu` has no alignment requirement.
    unsafe { _mm256_loadu_si256(a.qs.as_ptr().cast()) }
}

/// Lane r = the sum of the eight i32 lanes of `v[r]`.
#[inline]
#[target_feature(enable = "avx2")]
fn reduce8(v: &[__m256i; ROWS]) -> __m256i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h45 = _mm256_hadd_epi32(v[4], v[5]);
    let h67 = _mm256_hadd_epi32(v[6], v[7]);
    // Per 128-bit half: [Σ₀, Σ₁, Σ₂, Σ₃] of that half's four lanes.
    let h0123 = _mm256_hadd_epi32(h01, h23);
    let h4567 = _mm256_hadd_epi32(h45, h67);
    let lows = _mm256_permute2x128_si256(h0123, h4567, 0x20);
    let highs = _mm256_permute2x128_si256(h0123, h4567, 0x31);
    _mm256_add_epi32(lows, highs)
}

/// The eight rows' f16 scales of block `b` as f32x8 (exact conversion).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn scales8(bits: [u16; ROWS]) -> __m256 {
    // SAFETY: `bits` is 16 readable bytes; `loadu` has no alignment requirement.
    let h = unsafe { _mm_loadu_si128(bits.as_ptr().cast()) };
    _mm256_cvtph_ps(h)
}

/// `acc + (d_w · d_x) · isum`, lane by lane, as [`portable::combine`] does per row.
#[inline]
#[target_feature(enable = "avx2")]
fn combine8(acc: __m256, d_w: __m256, d_x: f32, isum: __m256i) -> __m256 {
    let scale = _mm256_mul_ps(d_w, _mm256_set1_ps(d_x));
    _mm256_add_ps(acc, _mm256_mul_ps(scale, _mm256_cvtepi32_ps(isum)))
}

/// Eight rows of Q8_0 (`w` = 8 rows of `act.len()` blocks) into `out`.
#[target_feature(enable = "avx2,f16c")]
fn rows8_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32; ROWS]) {
    let per_row = act.len();
    let mut acc = _mm256_setzero_ps();
    for (b, a) in act.iter().enumerate() {
        let av = load_act(a);
        let sums: [__m256i; ROWS] =
            core::array::from_fn(|r| q8_0_products(&w[r * per_row + b], av));
        let bits: [u16; ROWS] = core::array::from_fn(|r| w[r * per_row + b].d.to_bits());
        acc = combine8(acc, scales8(bits), a.d, reduce8(&sums));
    }
    // SAFETY: `out` is 8 writable f32s; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Eight rows of Q4_0 (`w` = 8 rows of `act.len()` blocks) into `out`.
#[target_feature(enable = "avx2,f16c")]
fn rows8_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32; ROWS]) {
    let per_row = act.len();
    let mut acc = _mm256_setzero_ps();
    for (b, a) in act.iter().enumerate() {
        let av = load_act(a);
        let sums: [__m256i; ROWS] =
            core::array::from_fn(|r| q4_0_products(&w[r * per_row + b], av));
        let bits: [u16; ROWS] = core::array::from_fn(|r| w[r * per_row + b].d.to_bits());
        let isum = _mm256_sub_epi32(reduce8(&sums), _mm256_set1_epi32(8 * a.sum));
        acc = combine8(acc, scales8(bits), a.d, isum);
    }
    // SAFETY: `out` is 8 writable f32s; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), acc) };
}

/// Sum of the eight i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// One Q8_0 row (the rows left over after the groups of eight).
#[target_feature(enable = "avx2")]
fn row1_q8_0(row: &[BlockQ8_0], act: &[ActBlock]) -> f32 {
    portable::combine(
        row,
        act,
        |b| b.d.to_f32(),
        |w, a| hsum(q8_0_products(w, load_act(a))),
    )
}

/// One Q4_0 row (the rows left over after the groups of eight).
#[target_feature(enable = "avx2")]
fn row1_q4_0(row: &[BlockQ4_0], act: &[ActBlock]) -> f32 {
    portable::combine(
        row,
        act,
        |b| b.d.to_f32(),
        |w, a| hsum(q4_0_products(w, load_act(a))) - 8 * a.sum,
    )
}
