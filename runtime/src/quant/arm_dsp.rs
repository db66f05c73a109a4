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
//! Around that: 10-13 instructions per pair of rows (storing the two sums, the next pair's
//! pointers; all inside the asm) and ~36 per block to widen the activations, once per matvec.
//! Measured kernel-only under QEMU (`cargo xtask kernel-check --bench`, 128 × 512): 1.58
//! (Q8_0) and 1.50 (Q4_0) instructions per MAC; `portable` takes 3.97 and 4.47. Q8_0 cannot
//! reach 1.5 this way: its two SXTB16 + two SMLAD + one LDR per weight word are 1.25 per MAC
//! before the scales (per row and block: LDRH, VCVTB, VMUL, VCVT, VMLA and half a VMOV pair
//! each for the scale and the sum, ~0.2 per MAC), which bit-identity with `portable` fixes.
//!
//! Memory: weight words are read with LDR/LDRH at any 2-byte alignment (blocks are 34 and 18
//! bytes), which ARMv7-M allows unless `CCR.UNALIGN_TRP` is set (it is clear at reset and
//! nothing in this project sets it); LDM/VLDM only read the word-aligned wide buffers.

use core::arch::asm;

use super::{ActBlock, BlockQ4_0, BlockQ8_0, QK};

/// Activation blocks widened at a time (per chunk, on the stack: 16 × 72 B = 1152 B; every
/// matrix of the shipped model has at most 16 blocks a row, so one chunk). Longer rows are
/// processed chunk by chunk, each row's float sum carried in `out` between chunks, which keeps
/// the float order of [`super::portable`] (one running sum over the blocks in order).
pub const CHUNK: usize = 16;

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

/// The rows of one chunk for the kernels: `pairs` pairs of rows from `w0`, the next pair
/// `skip` bytes after where the previous one's blocks end, results in `out`.
struct Rows {
    /// First block of the chunk in the pair's first row, and in its second.
    w0: *const u8,
    w1: *const u8,
    /// Bytes from the end of a pair's chunk blocks to the next pair's: 2 rows − the chunk.
    skip: usize,
    /// Two floats a pair; the sums are continued from what `out` holds.
    out: *mut f32,
    pairs: usize,
}

/// Checks that `pairs` pairs of rows starting at row `r0` (the second row of each pair
/// `second` rows after its first: 1, or 0 to run a row with itself), blocks `c0..c0 + n`, lie
/// inside `w` (`per_row` blocks a row) and that `out` has 2 · `pairs` floats; then the
/// pointers.
fn rows<W>(
    w: &[W],
    per_row: usize,
    c0: usize,
    n: usize,
    r0: usize,
    second: usize,
    out: &mut [f32],
) -> Rows {
    let pairs = out.len() / 2;
    assert!(n > 0 && c0 + n <= per_row && out.len() == 2 * pairs);
    if pairs > 0 {
        let last_row = r0 + 2 * (pairs - 1) + second;
        assert!((last_row + 1) * per_row <= w.len());
    }
    let size = core::mem::size_of::<W>();
    Rows {
        w0: w.as_ptr().wrapping_add(r0 * per_row + c0).cast(),
        w1: w.as_ptr().wrapping_add((r0 + second) * per_row + c0).cast(),
        skip: (2 * per_row - n) * size,
        out: out.as_mut_ptr(),
        pairs,
    }
}

/// Continues the float sums of `rows.pairs` pairs of rows over the chunk's `wide.len()`
/// blocks (for each block b, `s += (d_w · d_x) · isum_b`, in block order).
// One copy: called once or twice per chunk, so inlining only multiplies the code.
#[inline(never)]
fn run_q8(rows: Rows, wide: &[WideQ8]) {
    let n = wide.len();
    if rows.pairs == 0 {
        return;
    }
    // SAFETY: `rows` was built by `rows()`, which checked that every pair's two rows, blocks
    // c0..c0 + n, lie inside the weight slice and that `out` holds 2 · pairs floats. For each
    // pair the block loop runs exactly n ≥ 1 times (r12 counts down from n) and each pass
    // reads one 34-byte block from each row pointer (LDRH + 8 LDR, post-incremented) and one
    // 68-byte `WideQ8` (VLDMIA + 4 LDM); then the row pointers skip to the next pair (the
    // `skip` computed in `rows()`), r0 and r12 are reloaded from the stack and the pair's two
    // sums are stored to out[0..2] (VSTR), out advancing by 8 bytes until it reaches the end
    // (lr). `wide` is 4-aligned (LDM/VLDM); weight reads are LDRH at even addresses and LDR,
    // which ARMv7-M performs unaligned (module doc). The PUSH/POP and VPUSH/VPOP pairs on the
    // stack are balanced. Every core register written is an operand or declared clobbered;
    // s0-s7 are saved and restored by VPUSH/VPOP (the compiler is not told about them: stable
    // Rust lacks the `vfp2` feature for float register operands). The flags and the FPSCR's
    // cumulative exception bits change, which `asm!` allows without `preserves_flags`; the
    // rounding mode is untouched.
    unsafe {
        asm!(
            "vpush {{s0-s7}}",
            "push {{r0, r5, r12, lr}}",
            "3:",
            "vldr s6, [r3]",
            "vldr s7, [r3, #4]",
            "vmov s5, r3",
            "2:",
            scales!(),
            q8_group!(smuad),
            q8_group!(smlad),
            q8_group!(smlad),
            q8_group!(smlad),
            combine!(),
            "subs r12, r12, #1",
            "bne 2b",
            "vmov r3, s5",
            "vstr s6, [r3]",
            "vstr s7, [r3, #4]",
            "add r3, r3, #8",
            "ldrd r0, r5, [sp]",
            "add r1, r1, r5",
            "add r2, r2, r5",
            "ldrd r12, r5, [sp, #8]",
            "cmp r3, r5",
            "bne 3b",
            "add sp, sp, #16",
            "vpop {{s0-s7}}",
            inout("r0") wide.as_ptr() => _,
            inout("r1") rows.w0 => _,
            inout("r2") rows.w1 => _,
            inout("r3") rows.out => _,
            inout("r5") rows.skip => _,
            inout("r12") n => _,
            inout("lr") rows.out.wrapping_add(2 * rows.pairs) => _,
            out("r4") _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
        );
    }
}

/// As [`run_q8`] for Q4_0; the last element of `wide` carries the `last` flag, and no other.
// One copy: called once or twice per chunk, so inlining only multiplies the code.
#[inline(never)]
fn run_q4(rows: Rows, wide: &[WideQ4]) {
    let n = wide.len();
    if rows.pairs == 0 {
        return;
    }
    // The block loop stops at the first flagged block: the last one must be, and (for a right
    // result, not for memory safety) no other.
    assert!(n > 0 && wide[n - 1].h & 1 == 1);
    debug_assert!(wide[..n - 1].iter().all(|b| b.h & 1 == 0));
    // SAFETY: as in `run_q8`, with 18-byte weight blocks (LDRH + 4 LDR per row per pass) and
    // 72-byte `WideQ4` blocks (VLDMIA + 4 LDM + LDR). A pair's block loop ends after the
    // block whose `h` has bit 0 set (ASRS moves it to C; BCC loops while it is clear), at the
    // latest the n-th (asserted above), so at most n blocks of each row and of `wide` are
    // read. r12 holds the mask throughout.
    unsafe {
        asm!(
            "vpush {{s0-s7}}",
            "push {{r0, r5, lr}}",
            "3:",
            "vldr s6, [r3]",
            "vldr s7, [r3, #4]",
            "vmov s5, r3",
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
            "vmov r3, s5",
            "vstr s6, [r3]",
            "vstr s7, [r3, #4]",
            "add r3, r3, #8",
            "ldrd r0, r5, [sp]",
            "add r1, r1, r5",
            "add r2, r2, r5",
            "ldr r5, [sp, #8]",
            "cmp r3, r5",
            "bne 3b",
            "add sp, sp, #12",
            "vpop {{s0-s7}}",
            inout("r0") wide.as_ptr() => _,
            inout("r1") rows.w0 => _,
            inout("r2") rows.w1 => _,
            inout("r3") rows.out => _,
            inout("r5") rows.skip => _,
            in("r12") 0x000F_000Fu32,
            inout("lr") rows.out.wrapping_add(2 * rows.pairs) => _,
            out("r4") _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
        );
    }
}

/// One chunk (blocks `c0..c0 + wide.len()` of every row) for all rows of `out`: pairs of rows
/// in one kernel call, an odd last row paired with itself into a scratch pair.
#[inline(always)]
fn chunk<W, A>(
    w: &[W],
    per_row: usize,
    c0: usize,
    wide: &[A],
    out: &mut [f32],
    run: impl Fn(Rows, &[A]),
) {
    let n = wide.len();
    let even = out.len() & !1;
    let (pairs, tail) = out.split_at_mut(even);
    run(rows(w, per_row, c0, n, 0, 1, pairs), wide);
    if let [last] = tail {
        let mut pair = [*last; 2];
        run(rows(w, per_row, c0, n, even, 0, &mut pair), wide);
        *last = pair[0];
    }
}

/// Widens `act` into `wide`: [`WideQ8::widen`] for each block (the reference, checked in
/// debug builds), with SXTB16: 36 instructions a block.
fn widen_q8(act: &[ActBlock], wide: &mut [WideQ8]) {
    let n = act.len();
    assert!(n > 0 && wide.len() == n);
    // SAFETY: n ≥ 1 passes (r2 counts down), each reading one 40-byte `ActBlock` (d, then
    // past `sum` to the 8 quant words; LDR, word-aligned) and writing one 68-byte `WideQ8`
    // (STR + 8 STRD, word-aligned), both slices n long (asserted). Only operand registers
    // and the flags change.
    unsafe {
        asm!(
            "2:",
            "ldr r3, [r0], #8",
            "str r3, [r1], #4",
            ".rept 8",
            "ldr r3, [r0], #4",
            "sxtb16 r4, r3",
            "sxtb16 r3, r3, ror #8",
            "strd r4, r3, [r1], #8",
            ".endr",
            "subs r2, r2, #1",
            "bne 2b",
            inout("r0") act.as_ptr() => _,
            inout("r1") wide.as_mut_ptr() => _,
            inout("r2") n => _,
            out("r3") _,
            out("r4") _,
            options(nostack),
        );
    }
    debug_assert!(wide
        .iter()
        .zip(act)
        .all(|(w, a)| (w.d.to_bits(), w.q) == (a.d.to_bits(), WideQ8::widen(a).q)));
}

/// Widens `act` into `wide` ([`WideQ4::widen`] for each block, with SXTB16), the last block
/// flagged.
fn widen_q4(act: &[ActBlock], wide: &mut [WideQ4]) {
    let n = act.len();
    assert!(n > 0 && wide.len() == n);
    // SAFETY: n ≥ 1 passes (r2 counts down), each reading one 40-byte `ActBlock` (d, sum,
    // then its 8 quant words at r0 + 0..32, LDR, word-aligned) and writing one 72-byte
    // `WideQ4` (STR d, 4 STM of 4 words, STR h, word-aligned), both slices n long (asserted).
    // Only operand registers and the flags change.
    unsafe {
        asm!(
            "2:",
            "ldr r3, [r0], #4",
            "ldr r4, [r0], #4",
            "str r3, [r1], #4",
            ".rept 4",
            "ldr r5, [r0, #16]",
            "ldr r3, [r0], #4",
            "sxtb16 r8, r3",
            "sxtb16 r9, r5",
            "sxtb16 r10, r3, ror #8",
            "sxtb16 r11, r5, ror #8",
            "stm r1!, {{r8-r11}}",
            ".endr",
            "add r0, r0, #16",
            "lsl r4, r4, #4",
            "str r4, [r1], #4",
            "subs r2, r2, #1",
            "bne 2b",
            inout("r0") act.as_ptr() => _,
            inout("r1") wide.as_mut_ptr() => _,
            inout("r2") n => _,
            out("r3") _,
            out("r4") _,
            out("r5") _,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
            options(nostack),
        );
    }
    wide[n - 1].h |= 1;
    debug_assert!(wide.iter().zip(act).enumerate().all(|(i, (w, a))| {
        let want = WideQ4::widen(a, i + 1 == n);
        (w.d.to_bits(), w.q, w.h) == (want.d.to_bits(), want.q, want.h)
    }));
}

/// out = W x for Q8_0 weights and quantized activations (as [`super::portable::matvec_q8_0`]).
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(w, act, out, WideQ8::ZERO, widen_q8, run_q8);
}

/// out = W x for Q4_0 weights and quantized activations (as [`super::portable::matvec_q4_0`]).
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    matvec(w, act, out, WideQ4::ZERO, widen_q4, run_q4);
}

/// out = W x, a chunk of activation blocks at a time: `widen` makes the chunk's wide blocks
/// (from `zero`), `run` continues every row's sum over them. Inlined into each public matvec,
/// so each is the one loop with its own kernels.
#[inline(always)]
fn matvec<W, A: Copy>(
    w: &[W],
    act: &[ActBlock],
    out: &mut [f32],
    zero: A,
    widen: impl Fn(&[ActBlock], &mut [A]),
    run: impl Fn(Rows, &[A]),
) {
    let per_row = act.len();
    if per_row == 0 {
        out.fill(0.0);
        return;
    }
    let rows = out.len().min(w.len() / per_row);
    let out = &mut out[..rows];
    out.fill(0.0);
    let mut wide = [zero; CHUNK];
    for c0 in (0..per_row).step_by(CHUNK) {
        let n = (per_row - c0).min(CHUNK);
        widen(&act[c0..c0 + n], &mut wide[..n]);
        chunk(w, per_row, c0, &wide[..n], out, &run);
    }
}
