//! Cortex-M55 / M85 integer kernels: Helium (the M-profile Vector Extension, MVE). Bit-identical
//! to [`super::portable`]: each block's integer dot is exact, and the float steps per block are
//! those of [`super::portable::combine`] (the scale converted exactly by VCVTB, each product
//! rounded, VMLA rounding the product before the add), blocks in order from 0.
//!
//! # How
//!
//! A block is 32 weights against 32 activation quants. Helium's `VMLAV.S8` multiplies sixteen
//! signed byte pairs of two Q registers and adds all sixteen products into one general-purpose
//! register (`VMLAVA`: onto its value), so a block is two 16-byte halves:
//! * Q8_0: `VLDRB` the weight half and the activation half, `VMLAV(A)`: 6 instructions a block;
//! * Q4_0: byte j holds weight j (low nibble) and j + 16 (high nibble), so one `VLDRB` of the 16
//!   bytes, `VAND` with 0x0F for weights 0..15 and `VSHR #4` for 16..31 (0..15 either way, so
//!   the signed multiply is exact), against the activation's two halves: 7 instructions a block.
//!   The −8 offset is folded in per block with the activation block's `sum`:
//!   Σ (q − 8)·a = Σ q·a − 8·Σ a, as the other paths do.
//!
//! Memory: `VLDRB` loads bytes, so it needs no alignment (Q8_0 and Q4_0 blocks are 34 and 18
//! bytes, and their quants start 2 bytes in).
//!
//! One asm block per weight block: the scale, the dot and the float step, so that neither the
//! f16 conversion nor the integer-to-float step goes through software. It uses Q0-Q3 (D0-D7),
//! declared clobbered; MVE needs the FPU's coprocessor access (CPACR CP10/CP11), which
//! cortex-m-rt grants at reset on `eabihf` targets.

use core::arch::asm;

use super::{ActBlock, BlockQ4_0, BlockQ8_0};

/// One block of a row: `s += (d_w · d_x) · isum`, with `isum` from the Helium dot that
/// `$dot` (asm lines) leaves in r0 for the block at `{w}` against the activation block at
/// `{a}`. The f16 scale is converted by VCVTB (exact), the products are rounded one at a time
/// and VMLA rounds the product before the add: the float steps of `portable::combine`.
macro_rules! block_step {
    ($w:expr, $a:expr, $acc:expr, $($dot:literal),+ $(,)?) => {
        // SAFETY: `$w` and `$a` point to a whole weight block and a whole `ActBlock`, both
        // borrowed by the caller for the call; the asm reads within them only (offsets below
        // their sizes), writes only the declared registers, touches no stack, keeps the flags.
        unsafe {
            asm!(
                "ldrh {t}, [{w}]",
                "vmov {sw}, {t}",
                "vcvtb.f32.f16 {sw}, {sw}",
                "vldr {sx}, [{a}]",
                "vmul.f32 {sw}, {sw}, {sx}",
                $($dot,)+
                "vmov {sx}, r0",
                "vcvt.f32.s32 {sx}, {sx}",
                "vmla.f32 {s}, {sw}, {sx}",
                w = in(reg) $w,
                a = in(reg) $a,
                s = inout(sreg) $acc,
                t = out(reg) _,
                sw = out(sreg) _,
                sx = out(sreg) _,
                // VMLAV's accumulator is an even-numbered register.
                out("r0") _,
                out("r1") _,
                out("d0") _, out("d1") _, out("d2") _, out("d3") _,
                out("d4") _, out("d5") _, out("d6") _, out("d7") _,
                options(nostack, preserves_flags, readonly),
            )
        }
    };
}

/// out[r] = Σ over row r's blocks, in order from 0, of the float step `block` adds to the row's
/// sum: the row loop of both kernels.
#[inline(always)]
fn matvec<W>(w: &[W], act: &[ActBlock], out: &mut [f32], block: impl Fn(&W, &ActBlock, &mut f32)) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    for (o, row) in out.iter_mut().zip(w.chunks_exact(per_row)) {
        let mut s = 0.0f32;
        for (b, a) in row.iter().zip(act) {
            block(b, a, &mut s);
        }
        *o = s;
    }
}

/// out = W x for Q8_0 weights and quantized activations.
// Out of line: inlined into the large benchmark loop of firmware/src/bin/kernel_check.rs (fat
// LTO), the build failed in the assembler with "out of range pc-relative fixup value".
#[inline(never)]
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    // Block: d (f16) at 0, 32 quants at 2. ActBlock: d at 0, sum at 4, quants at 8.
    matvec(w, act, out, |b, a, s| {
        block_step!(
            b as *const BlockQ8_0,
            a as *const ActBlock,
            *s,
            "vldrb.u8 q0, [{w}, #2]",
            "vldrb.u8 q1, [{a}, #8]",
            "vmlav.s8 r0, q0, q1",
            "vldrb.u8 q2, [{w}, #18]",
            "vldrb.u8 q3, [{a}, #24]",
            "vmlava.s8 r0, q2, q3",
        )
    });
}

/// out = W x for Q4_0 weights and quantized activations.
// Out of line, as `matvec_q8_0`.
#[inline(never)]
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    // Block: d (f16) at 0, 16 bytes of nibbles at 2. r0 −= 8 · sum (sum at 4).
    matvec(w, act, out, |b, a, s| {
        block_step!(
            b as *const BlockQ4_0,
            a as *const ActBlock,
            *s,
            "vldrb.u8 q0, [{w}, #2]",
            "vmov.i8 q3, #0xf",
            "vand q1, q0, q3",
            "vshr.u8 q0, q0, #4",
            "vldrb.u8 q2, [{a}, #8]",
            "vmlav.s8 r0, q1, q2",
            "vldrb.u8 q2, [{a}, #24]",
            "vmlava.s8 r0, q0, q2",
            "ldr r1, [{a}, #4]",
            "sub.w r0, r0, r1, lsl #3",
        )
    });
}
