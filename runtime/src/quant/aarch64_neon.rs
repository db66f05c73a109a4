//! NEON integer kernels for AArch64. Bit-identical to [`super::portable`].
//!
//! Two flavours of the per-block integer dot, both exact for every i8 input (−128 included):
//! * **NEON** (every AArch64 core with Advanced SIMD): `smull`/`smull2` form the 16 i16
//!   products of each half block (|w·q| ≤ 2^14 fits i16), `saddlp`/`sadalp` widen them pairwise
//!   into i32x4 partial sums.
//! * **sdot** (Armv8.2 dot-product extension, `dotprod`; Cortex-A55/A76 and later, Apple M1+):
//!   `sdot` sums four i8 × i8 products into each i32 lane directly, two instructions a block.
//!   The `vdotq_s32` intrinsic is still unstable, so the instruction is written as inline asm
//!   inside a function compiled with the `dotprod` feature, used only after a run-time check.
//!
//! Q4_0's nibbles (0..=15) are multiplied as they are and the −8 offset is taken off as
//! `− 8 · Σ q`, as the reference does. Four rows share each activation load; lane r of an f32x4
//! accumulator is row r, and every block adds `(d_w · d_x) · isum` with a separate multiply and
//! add (no fused multiply-add), blocks in order, from 0.0: exactly [`portable::combine`].
//!
//! Compiled only where NEON is a static target feature (every AArch64 Linux, macOS, Android
//! target), so the NEON flavour needs no run-time check.

use core::arch::aarch64::*;
use core::arch::asm;

use half::f16;

use super::{portable, ActBlock, BlockQ4_0, BlockQ8_0};

/// Rows processed together (one f32x4 accumulator lane each).
const ROWS: usize = 4;

/// Whether this CPU has the dot-product instructions (`sdot`).
#[inline]
pub fn dotprod_available() -> bool {
    #[cfg(feature = "std")]
    {
        std::arch::is_aarch64_feature_detected!("dotprod")
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(target_feature = "dotprod")
    }
}

/// [`portable::matvec_q8_0`] with NEON.
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    // SAFETY: NEON is a static target feature of every build that compiles this module
    // (`cfg(target_feature = "neon")` on its `mod` line), so every CPU running it has NEON.
    unsafe { matvec_q8_0_neon(w, act, out) }
}

/// [`portable::matvec_q4_0`] with NEON.
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    // SAFETY: as in `matvec_q8_0`: NEON is a static target feature of this build.
    unsafe { matvec_q4_0_neon(w, act, out) }
}

/// [`portable::matvec_q8_0`] with `sdot` (falls back to [`matvec_q8_0`] without it).
pub fn matvec_q8_0_dot(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    if !dotprod_available() {
        return matvec_q8_0(w, act, out);
    }
    // SAFETY: the CPU has the dot-product extension (checked just above) and NEON (a static
    // target feature of this build), the callee's features.
    unsafe { matvec_q8_0_sdot(w, act, out) }
}

/// [`portable::matvec_q4_0`] with `sdot` (falls back to [`matvec_q4_0`] without it).
pub fn matvec_q4_0_dot(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    if !dotprod_available() {
        return matvec_q4_0(w, act, out);
    }
    // SAFETY: as in `matvec_q8_0_dot`: dotprod checked just above, NEON static.
    unsafe { matvec_q4_0_sdot(w, act, out) }
}

#[target_feature(enable = "neon")]
fn matvec_q8_0_neon(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(
        w,
        act,
        out,
        |b| b.d.to_bits(),
        |b, a| q8_0_products(b, a),
        |_| 0,
    );
}

#[target_feature(enable = "neon")]
fn matvec_q4_0_neon(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(
        w,
        act,
        out,
        |b| b.d.to_bits(),
        |b, a| q4_0_products(b, a),
        |a| 8 * a.sum,
    );
}

#[target_feature(enable = "neon,dotprod")]
fn matvec_q8_0_sdot(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(
        w,
        act,
        out,
        |b| b.d.to_bits(),
        |b, a| q8_0_products_sdot(b, a),
        |_| 0,
    );
}

#[target_feature(enable = "neon,dotprod")]
fn matvec_q4_0_sdot(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(
        w,
        act,
        out,
        |b| b.d.to_bits(),
        |b, a| q4_0_products_sdot(b, a),
        |a| 8 * a.sum,
    );
}

/// A block's 32 activation quants as two halves.
type Act = (int8x16_t, int8x16_t);

#[inline]
#[target_feature(enable = "neon")]
fn load_act(a: &ActBlock) -> Act {
    // SAFETY: `a.qs` is 32 readable bytes: two 16-byte loads at offsets 0 and 16.
    unsafe { (vld1q_s8(a.qs.as_ptr()), vld1q_s8(a.qs[16..].as_ptr())) }
}

/// Σ (i8 × i8) over two 16-lane pairs, as i32x4 partial sums, with `smull` + `sadalp`.
#[inline]
#[target_feature(enable = "neon")]
fn dot_mull(w: Act, a: Act) -> int32x4_t {
    let p0 = vmull_s8(vget_low_s8(w.0), vget_low_s8(a.0));
    let p1 = vmull_high_s8(w.0, a.0);
    let p2 = vmull_s8(vget_low_s8(w.1), vget_low_s8(a.1));
    let p3 = vmull_high_s8(w.1, a.1);
    let s = vpaddlq_s16(p0);
    let s = vpadalq_s16(s, p1);
    let s = vpadalq_s16(s, p2);
    vpadalq_s16(s, p3)
}

/// Σ (i8 × i8) over two 16-lane pairs, as i32x4 partial sums, with `sdot`.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn dot_sdot(w: Act, a: Act) -> int32x4_t {
    let mut acc = vdupq_n_s32(0);
    // SAFETY: `sdot` only reads and writes the named vector registers (no memory, no flags);
    // the CPU has it because this function is compiled with, and only called under, the
    // `dotprod` feature.
    unsafe {
        asm!(
            "sdot {acc:v}.4s, {w0:v}.16b, {a0:v}.16b",
            "sdot {acc:v}.4s, {w1:v}.16b, {a1:v}.16b",
            acc = inout(vreg) acc,
            w0 = in(vreg) w.0,
            a0 = in(vreg) a.0,
            w1 = in(vreg) w.1,
            a1 = in(vreg) a.1,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// A Q8_0 block's quants as two halves.
#[inline]
#[target_feature(enable = "neon")]
fn load_q8_0(w: &BlockQ8_0) -> Act {
    // SAFETY: `w.qs` is 32 readable bytes: two 16-byte loads at offsets 0 and 16.
    unsafe { (vld1q_s8(w.qs.as_ptr()), vld1q_s8(w.qs[16..].as_ptr())) }
}

/// A Q4_0 block's nibbles (0..=15, no offset) in the activations' order: low nibbles are
/// weights 0..16, high nibbles weights 16..32.
#[inline]
#[target_feature(enable = "neon")]
fn load_q4_0(w: &BlockQ4_0) -> Act {
    // SAFETY: `w.qs` is 16 readable bytes.
    let packed = unsafe { vld1q_u8(w.qs.as_ptr()) };
    let lo = vandq_u8(packed, vdupq_n_u8(0x0F));
    let hi = vshrq_n_u8::<4>(packed);
    (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
}

#[inline]
#[target_feature(enable = "neon")]
fn q8_0_products(w: &BlockQ8_0, a: Act) -> int32x4_t {
    dot_mull(load_q8_0(w), a)
}

#[inline]
#[target_feature(enable = "neon")]
fn q4_0_products(w: &BlockQ4_0, a: Act) -> int32x4_t {
    dot_mull(load_q4_0(w), a)
}

#[inline]
#[target_feature(enable = "neon,dotprod")]
fn q8_0_products_sdot(w: &BlockQ8_0, a: Act) -> int32x4_t {
    dot_sdot(load_q8_0(w), a)
}

#[inline]
#[target_feature(enable = "neon,dotprod")]
fn q4_0_products_sdot(w: &BlockQ4_0, a: Act) -> int32x4_t {
    dot_sdot(load_q4_0(w), a)
}

/// Four f16 scales (as bits) to f32x4 with `fcvtl`, exact (subnormals included). The
/// `vcvt_f32_f16` intrinsic needs the unstable f16 vector type; `fcvtl` itself is base NEON.
#[inline]
#[target_feature(enable = "neon")]
fn scales4(bits: [u16; 4]) -> float32x4_t {
    // SAFETY: `bits` is 8 readable bytes.
    let h = unsafe { vld1_u16(bits.as_ptr()) };
    let out: float32x4_t;
    // SAFETY: `fcvtl` only reads and writes the named vector registers (no memory, no flags)
    // and is base Advanced SIMD, which this function is compiled for.
    unsafe {
        asm!(
            "fcvtl {out:v}.4s, {h:v}.4h",
            out = lateout(vreg) out,
            h = in(vreg) h,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    out
}

/// out = W x: rows in groups of four, then one at a time. `products` gives a block's integer
/// dot as i32x4 partial sums; `offset` is subtracted from the reduced sum (Q4_0's 8 · Σ q).
#[inline]
#[target_feature(enable = "neon")]
fn matvec<W>(
    w: &[W],
    act: &[ActBlock],
    out: &mut [f32],
    scale_bits: impl Fn(&W) -> u16,
    products: impl Fn(&W, Act) -> int32x4_t,
    offset: impl Fn(&ActBlock) -> i32,
) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    // As the reference: rows beyond the weights are left alone.
    let rows = out.len().min(w.len() / per_row);
    let full = rows / ROWS * ROWS;
    let (out4, out1) = out[..rows].split_at_mut(full);
    let (w4, w1) = w[..rows * per_row].split_at(full * per_row);
    for (o, wr) in out4
        .chunks_exact_mut(ROWS)
        .zip(w4.chunks_exact(ROWS * per_row))
    {
        let (r0, rest) = wr.split_at(per_row);
        let (r1, rest) = rest.split_at(per_row);
        let (r2, r3) = rest.split_at(per_row);
        let mut acc = vdupq_n_f32(0.0);
        for ((((a, b0), b1), b2), b3) in act.iter().zip(r0).zip(r1).zip(r2).zip(r3) {
            let av = load_act(a);
            let s01 = vpaddq_s32(products(b0, av), products(b1, av));
            let s23 = vpaddq_s32(products(b2, av), products(b3, av));
            let isum = vsubq_s32(vpaddq_s32(s01, s23), vdupq_n_s32(offset(a)));
            let d_w = scales4([
                scale_bits(b0),
                scale_bits(b1),
                scale_bits(b2),
                scale_bits(b3),
            ]);
            let term = vmulq_f32(vmulq_n_f32(d_w, a.d), vcvtq_f32_s32(isum));
            acc = vaddq_f32(acc, term);
        }
        // SAFETY: `o` is a chunk of exactly 4 writable f32s.
        unsafe { vst1q_f32(o.as_mut_ptr(), acc) };
    }
    for (o, row) in out1.iter_mut().zip(w1.chunks_exact(per_row)) {
        let scale = |b: &W| f16::from_bits(scale_bits(b)).to_f32();
        *o = portable::combine(row, act, scale, |b, a| {
            vaddvq_s32(products(b, load_act(a))) - offset(a)
        });
    }
}
