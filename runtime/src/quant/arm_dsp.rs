//! Cortex-M4F / Cortex-M7 integer kernels (thumbv7em, DSP extension + FPv4/FPv5): SMLAD dual
//! 16-bit MACs, as ggml and CMSIS-NN do it on these cores. Bit-identical to
//! [`super::portable`]: the same exact integer sums per block, combined in the same float order
//! `s += (d_w · d_x) · isum` (VMUL, VCVT, then VMLA, which on VFP rounds the product before
//! the add: the same two roundings as Rust's `s + a * b`).
//!
//! # How
//!
//! A weight word holds 4 bytes. SMLAD multiplies two pairs of signed halfwords and adds both
//! products to an accumulator, so the bytes are spread to halfwords:
//! * Q8_0: `SXTB16 w` gives `[w0, w2]`, `SXTB16 w, ROR #8` gives `[w1, w3]`;
//! * Q4_0: byte j holds weight j (low nibble) and j + 16 (high nibble); with `m = 0x000F000F`,
//!   `w & m`, `(w >> 4) & m`, `(w >> 8) & m`, `(w >> 12) & m` (one AND with a shifted operand
//!   each) give the pairs `[q0, q2]`, `[q16, q18]`, `[q1, q3]`, `[q17, q19]` as 0..15; the −8
//!   offset is folded in per block with the activation block's `sum`: Σ (q − 8)·a = Σ q·a − 8·Σ a.
//!
//! The activations go the other way round: each chunk of up to [`CHUNK`] [`ActBlock`]s is
//! widened once per matvec, on the stack, to i16 pairs in exactly the order the weight
//! unpacking produces ([`WideQ8`], [`WideQ4`]), so one LDM feeds four SMLADs with no unpacking.
//! The [`ActBlock`] type itself (i8 quants in natural order) is the same on every target.
//!
//! Two rows run at once and share the activation loads. Per 2 rows × 1 block (64 MACs):
//! * Q8_0: 16 LDR + 32 SXTB16 + 32 SMLAD + 4 LDM = 84, plus 15 for the scales, the float
//!   combination and the loop: 99 instructions, 1.55 per MAC;
//! * Q4_0: 8 LDR + 32 AND + 32 SMLAD + 4 LDM = 76, plus 18: 94 instructions, 1.47 per MAC.
//!
//! Memory: weight words are read with LDR/LDRH at any 2-byte alignment (blocks are 34 and 18
//! bytes), which ARMv7-M allows unless `CCR.UNALIGN_TRP` is set (it is clear at reset and
//! nothing in this project sets it); LDM/VLDM only read the word-aligned wide buffers.

use core::arch::asm;

use super::{ActBlock, BlockQ4_0, BlockQ8_0, QK};

/// Activation blocks widened at a time (per chunk, on the stack: 8 × 72 B). Longer rows are
/// processed chunk by chunk, each row's float sum carried in `out` between chunks, which keeps
/// the float order of [`super::portable`] (one running sum over the blocks in order).
pub const CHUNK: usize = 8;

/// An activation block widened for the Q8_0 kernel: the scale, then for each weight word k
/// (bytes 4k..4k+3) the pairs `[a4k, a4k+2]`, `[a4k+1, a4k+3]` as i16 halves of a u32.
#[repr(C, align(4))]
#[derive(Clone, Copy)]
struct WideQ8 {
    d: f32,
    q: [u32; QK / 2],
}

/// An activation block widened for the Q4_0 kernel: the scale, for each weight word k
/// (k = 0..3) the pairs `[a4k, a4k+2]`, `[a16+4k, a16+4k+2]`, `[a4k+1, a4k+3]`,
/// `[a16+4k+1, a16+4k+3]`, then `16·sum | last` (`last` = 1 on the final block of a chunk:
/// the kernel's loop condition).
#[repr(C, align(4))]
#[derive(Clone, Copy)]
struct WideQ4 {
    d: f32,
    q: [u32; QK / 2],
    h: i32,
}

const _: () = assert!(core::mem::size_of::<WideQ8>() == 68);
const _: () = assert!(core::mem::size_of::<WideQ4>() == 72);

/// Two i8 values as one word of i16 halves `[lo, hi]`.
#[inline(always)]
fn pair(lo: i8, hi: i8) -> u32 {
    (lo as i16 as u16 as u32) | ((hi as i16 as u16 as u32) << 16)
}

impl WideQ8 {
    const ZERO: Self = Self {
        d: 0.0,
        q: [0; QK / 2],
    };

    #[inline]
    fn widen(a: &ActBlock) -> Self {
        let x = &a.qs;
        let mut q = [0u32; QK / 2];
        for k in 0..QK / 4 {
            q[2 * k] = pair(x[4 * k], x[4 * k + 2]);
            q[2 * k + 1] = pair(x[4 * k + 1], x[4 * k + 3]);
        }
        Self { d: a.d, q }
    }
}

impl WideQ4 {
    const ZERO: Self = Self {
        d: 0.0,
        q: [0; QK / 2],
        h: 0,
    };

    #[inline]
    fn widen(a: &ActBlock, last: bool) -> Self {
        let x = &a.qs;
        let mut q = [0u32; QK / 2];
        for k in 0..4 {
            let (j, h) = (4 * k, 16 + 4 * k);
            q[4 * k] = pair(x[j], x[j + 2]);
            q[4 * k + 1] = pair(x[h], x[h + 2]);
            q[4 * k + 2] = pair(x[j + 1], x[j + 3]);
            q[4 * k + 3] = pair(x[h + 1], x[h + 3]);
        }
        // |sum| ≤ 32 · 128, so 16·sum fits easily.
        Self {
            d: a.d,
            q,
            h: (a.sum << 4) | last as i32,
        }
    }
}

/// One Q8_0 weight word (4 columns) of one row: `acc (+)= [w0,w2]·E + [w1,w3]·O`.
/// r5 = word, lr = scratch; `$op` is `smuad` (first word of a block: resets the sum) or
/// `smlad`.
macro_rules! q8_word {
    ($pw:literal, $acc:literal, $e:literal, $o:literal, smuad) => {
        concat!(
            "ldr r5, [",
            $pw,
            "], #4\n",
            "sxtb16 lr, r5\n",
            "smuad ",
            $acc,
            ", lr, ",
            $e,
            "\n",
            "sxtb16 r5, r5, ror #8\n",
            "smlad ",
            $acc,
            ", r5, ",
            $o,
            ", ",
            $acc,
            "\n",
        )
    };
    ($pw:literal, $acc:literal, $e:literal, $o:literal, smlad) => {
        concat!(
            "ldr r5, [",
            $pw,
            "], #4\n",
            "sxtb16 lr, r5\n",
            "smlad ",
            $acc,
            ", lr, ",
            $e,
            ", ",
            $acc,
            "\n",
            "sxtb16 r5, r5, ror #8\n",
            "smlad ",
            $acc,
            ", r5, ",
            $o,
            ", ",
            $acc,
            "\n",
        )
    };
}

/// 8 columns of both rows: one LDM of 4 activation words, two weight words per row.
macro_rules! q8_group {
    ($first:ident) => {
        concat!(
            "ldm r0!, {{r8-r11}}\n",
            q8_word!("r1", "r3", "r8", "r9", $first),
            q8_word!("r1", "r3", "r10", "r11", smlad),
            q8_word!("r2", "r4", "r8", "r9", $first),
            q8_word!("r2", "r4", "r10", "r11", smlad),
        )
    };
}

/// One Q4_0 weight word (8 weights) of one row against the 4 activation words r8..r11;
/// r12 = 0x000F000F, r5 = word, lr = scratch.
macro_rules! q4_word {
    ($pw:literal, $acc:literal, $first:literal) => {
        concat!(
            "ldr r5, [",
            $pw,
            "], #4\n",
            "and lr, r12, r5\n",
            $first, // smuad acc, lr, r8  |  smlad acc, lr, r8, acc
            "and lr, r12, r5, lsr #4\n",
            "smlad ",
            $acc,
            ", lr, r9, ",
            $acc,
            "\n",
            "and lr, r12, r5, lsr #8\n",
            "smlad ",
            $acc,
            ", lr, r10, ",
            $acc,
            "\n",
            "and r5, r12, r5, lsr #12\n",
            "smlad ",
            $acc,
            ", r5, r11, ",
            $acc,
            "\n",
        )
    };
}

macro_rules! q4_group {
    (first) => {
        concat!(
            "ldm r0!, {{r8-r11}}\n",
            q4_word!("r1", "r3", "smuad r3, lr, r8\n"),
            q4_word!("r2", "r4", "smuad r4, lr, r8\n"),
        )
    };
    (next) => {
        concat!(
            "ldm r0!, {{r8-r11}}\n",
            q4_word!("r1", "r3", "smlad r3, lr, r8, r3\n"),
            q4_word!("r2", "r4", "smlad r4, lr, r8, r4\n"),
        )
    };
}

/// Both rows' scales times the block's activation scale: s0 = d_w0 · d_x, s1 = d_w1 · d_x.
/// Reads the f16 scales with LDRH (advancing the row pointers to the quants) and d_x with
/// VLDMIA (advancing the activation pointer).
macro_rules! scales {
    () => {
        concat!(
            "ldrh r5, [r1], #2\n",
            "ldrh lr, [r2], #2\n",
            "vmov s0, s1, r5, lr\n",
            "vcvtb.f32.f16 s0, s0\n",
            "vcvtb.f32.f16 s1, s1\n",
            "vldmia r0!, {{s2}}\n",
            "vmul.f32 s0, s0, s2\n",
            "vmul.f32 s1, s1, s2\n",
        )
    };
}

/// s6 += s0 · float(r3), s7 += s1 · float(r4) (product rounded, then the sum: VMLA).
macro_rules! combine {
    () => {
        concat!(
            "vmov s3, s4, r3, r4\n",
            "vcvt.f32.s32 s3, s3\n",
            "vcvt.f32.s32 s4, s4\n",
            "vmla.f32 s6, s0, s3\n",
            "vmla.f32 s7, s1, s4\n",
        )
    };
}

/// Continues the float sums `(s0, s1)` of two rows over `row0.len()` blocks: for each block b,
/// `s += (d_w · d_x) · isum_b`, in block order. Both rows and `wide` have the same length ≥ 1.
#[inline]
fn pair_q8(row0: &[BlockQ8_0], row1: &[BlockQ8_0], wide: &[WideQ8], s: [f32; 2]) -> [f32; 2] {
    let n = wide.len();
    assert!(n > 0 && row0.len() == n && row1.len() == n);
    let (mut s0, mut s1) = (s[0].to_bits(), s[1].to_bits());
    // SAFETY: the loop runs exactly n ≥ 1 times (r12 counts down from n) and each pass reads
    // one 34-byte block from each row pointer (LDRH + 8 LDR, post-incremented) and one 68-byte
    // `WideQ8` (VLDMIA + 4 LDM): n blocks of `row0`, `row1` and `wide`, all in bounds (checked
    // above). `wide` is 4-aligned (LDM/VLDM); the weight reads are LDRH at even addresses and
    // LDR, which ARMv7-M performs unaligned (module doc). Nothing is written to memory but the
    // VPUSH/VPOP pair on the stack (balanced). Every core register written is an operand or
    // declared clobbered; s0-s7 are saved and restored by VPUSH/VPOP (the compiler is not told
    // about them: stable Rust lacks the `vfp2` feature for float register operands). The
    // flags and the FPSCR's cumulative exception bits change, which `asm!` allows without
    // `preserves_flags`; the rounding mode is untouched.
    unsafe {
        asm!(
            "vpush {{s0-s7}}",
            "vmov s6, s7, r3, r4",
            "2:",
            scales!(),
            q8_group!(smuad),
            q8_group!(smlad),
            q8_group!(smlad),
            q8_group!(smlad),
            combine!(),
            "subs r12, r12, #1",
            "bne 2b",
            "vmov r3, r4, s6, s7",
            "vpop {{s0-s7}}",
            inout("r0") wide.as_ptr() => _,
            inout("r1") row0.as_ptr() => _,
            inout("r2") row1.as_ptr() => _,
            inout("r3") s0,
            inout("r4") s1,
            inout("r12") n => _,
            out("r5") _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            out("lr") _,
        );
    }
    [f32::from_bits(s0), f32::from_bits(s1)]
}

/// As [`pair_q8`] for Q4_0; the last element of `wide` carries the `last` flag, and no other.
#[inline]
fn pair_q4(row0: &[BlockQ4_0], row1: &[BlockQ4_0], wide: &[WideQ4], s: [f32; 2]) -> [f32; 2] {
    let n = wide.len();
    assert!(n > 0 && row0.len() == n && row1.len() == n);
    assert!(wide[..n - 1].iter().all(|b| b.h & 1 == 0) && wide[n - 1].h & 1 == 1);
    let (mut s0, mut s1) = (s[0].to_bits(), s[1].to_bits());
    // SAFETY: as in `pair_q8`, with 18-byte weight blocks (LDRH + 4 LDR per row per pass) and
    // 72-byte `WideQ4` blocks (VLDMIA + 4 LDM + LDR). The loop ends after the block whose `h`
    // has bit 0 set (ASRS moves it to C; BCC loops while it is clear), which is exactly the
    // n-th (asserted above), so n blocks of each slice are read and no more.
    unsafe {
        asm!(
            "vpush {{s0-s7}}",
            "vmov s6, s7, r3, r4",
            "2:",
            scales!(),
            q4_group!(first),
            q4_group!(next),
            q4_group!(next),
            q4_group!(next),
            // isum = Σ q·a − 8·sum; h = 16·sum | last.
            "ldr r5, [r0], #4",
            "asrs r5, r5, #1",
            "sub r3, r3, r5",
            "sub r4, r4, r5",
            combine!(),
            "bcc 2b",
            "vmov r3, r4, s6, s7",
            "vpop {{s0-s7}}",
            inout("r0") wide.as_ptr() => _,
            inout("r1") row0.as_ptr() => _,
            inout("r2") row1.as_ptr() => _,
            inout("r3") s0,
            inout("r4") s1,
            in("r12") 0x000F_000Fu32,
            out("r5") _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            out("lr") _,
        );
    }
    [f32::from_bits(s0), f32::from_bits(s1)]
}

/// Runs `pair` over every pair of rows for one chunk of widened activations: blocks
/// `c0..c0 + n` of each row, sums carried in `out`. An odd last row runs paired with itself.
#[inline(always)]
fn rows_in_pairs<W, A>(
    w: &[W],
    per_row: usize,
    c0: usize,
    wide: &[A],
    out: &mut [f32],
    pair: impl Fn(&[W], &[W], &[A], [f32; 2]) -> [f32; 2],
) {
    let n = wide.len();
    let rows = out.len();
    let mut r = 0;
    while r < rows {
        let r1 = if r + 1 < rows { r + 1 } else { r };
        let row0 = &w[r * per_row + c0..][..n];
        let row1 = &w[r1 * per_row + c0..][..n];
        let s = pair(row0, row1, wide, [out[r], out[r1]]);
        out[r] = s[0];
        out[r1] = s[1];
        r += 2;
    }
}

/// out = W x for Q8_0 weights and quantized activations (as [`super::portable::matvec_q8_0`]).
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    let rows = out.len().min(w.len() / per_row);
    let out = &mut out[..rows];
    out.fill(0.0);
    let mut wide = [WideQ8::ZERO; CHUNK];
    for c0 in (0..per_row).step_by(CHUNK) {
        let n = (per_row - c0).min(CHUNK);
        for (d, a) in wide.iter_mut().zip(&act[c0..c0 + n]) {
            *d = WideQ8::widen(a);
        }
        rows_in_pairs(w, per_row, c0, &wide[..n], out, pair_q8);
    }
}

/// out = W x for Q4_0 weights and quantized activations (as [`super::portable::matvec_q4_0`]).
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    let rows = out.len().min(w.len() / per_row);
    let out = &mut out[..rows];
    out.fill(0.0);
    let mut wide = [WideQ4::ZERO; CHUNK];
    for c0 in (0..per_row).step_by(CHUNK) {
        let n = (per_row - c0).min(CHUNK);
        for (i, (d, a)) in wide.iter_mut().zip(&act[c0..c0 + n]).enumerate() {
            *d = WideQ4::widen(a, i + 1 == n);
        }
        rows_in_pairs(w, per_row, c0, &wide[..n], out, pair_q4);
    }
}
