//! One level's pass of the fused decode step (`fenwick.rs`) over a block of [`COLS`] columns
//! of a state matrix, and the merge of a block, in the core's own instructions on the Arm
//! cores with a single-precision FPU that converts f16 in hardware
//! (`cfg(loglinear_arm_f16cvt)`: Cortex-M4F, M7, M33, M55), for f16 and f32 storage.
//!
//! Why by hand: written in Rust, the f16 pass widens a row of the block into a stack buffer
//! (`half_convert`'s asm cannot return values in float registers, see there), reloads it,
//! and with 16 columns spills the block's kᵀS and output. `cargo xtask count --breakdown`
//! measured about 23 instructions per element and live level on the M4F (the part's count at
//! position 16368 over the elements of the 11 to 15 live levels). Here a row of 8 values goes
//! from memory into S registers (VLDM; f16 then widened), is updated, stored (f16 narrowed
//! first) from registers, and kᵀS and the output stay in registers for the whole level: about
//! 9 instructions per element and live level in f16, counted the same way (BENCHMARKS.md,
//! "Where a token goes").
//!
//! Bit-identical to the Rust passes: the same operations in the same order, each rounded as
//! Rust rounds it (VMLA and VMLS are multiply-then-add with the product rounded, as LLVM
//! itself emits for `a + b * c` here; never the fused VFMA). `cargo xtask kernel-check`
//! compares the fused step and the merge with the plain separate steps under QEMU
//! (`firmware/src/bin/kernel_check.rs`), and every QEMU token run compares the board's tokens
//! with the host's, which runs the Rust passes.

/// Columns of a block.
pub const COLS: usize = 8;

/// A storage type the kernels take: f16 or f32.
pub trait KernelElem: Copy + sealed::Sealed {
    /// The slice as what it is.
    #[doc(hidden)]
    fn rows(s: &[Self]) -> Rows<'_>;
    /// The slice as what it is, mutable.
    #[doc(hidden)]
    fn rows_mut(s: &mut [Self]) -> RowsMut<'_>;
}

/// A slice of one of the [`KernelElem`] types.
#[doc(hidden)]
pub enum Rows<'a> {
    F16(&'a [half::f16]),
    F32(&'a [f32]),
}

/// A mutable slice of one of the [`KernelElem`] types.
#[doc(hidden)]
pub enum RowsMut<'a> {
    F16(&'a mut [half::f16]),
    F32(&'a mut [f32]),
}

impl KernelElem for half::f16 {
    fn rows(s: &[Self]) -> Rows<'_> {
        Rows::F16(s)
    }
    fn rows_mut(s: &mut [Self]) -> RowsMut<'_> {
        RowsMut::F16(s)
    }
}

impl KernelElem for f32 {
    fn rows(s: &[Self]) -> Rows<'_> {
        Rows::F32(s)
    }
    fn rows_mut(s: &mut [Self]) -> RowsMut<'_> {
        RowsMut::F32(s)
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for f32 {}
}

/// What a level's pass does to each row of its block, before storing it back.
#[derive(Clone, Copy)]
pub enum RowOp<'a> {
    /// Gated DeltaNet's transition: x ← α (x − β kᵢ u), with u = kᵀS of the block computed
    /// first, in a pass of its own.
    Delta {
        /// α.
        alpha: f32,
        /// β.
        beta: f32,
    },
    /// Mamba-2's transition: x ← x α.
    Decay {
        /// α.
        alpha: f32,
    },
    /// Level 0's insert: x ← x + (β kᵢ) v.
    Insert {
        /// β (1 for Mamba-2).
        beta: f32,
        /// The block's values.
        v: &'a [f32; COLS],
    },
}

/// One level's pass over the block whose first row starts at `s[0]`, rows `stride` halves
/// apart: each row i is loaded, changed by `op`, narrowed, stored, and its stored value read
/// out, `out` += (λ qᵢ) x. `None` when this build has no kernel or the arguments do not fit it
/// (`s` not 4-aligned or too short, an odd stride, no rows), and nothing is touched; the
/// caller then runs the Rust pass.
#[inline(always)]
pub fn level_pass<E: KernelElem>(
    s: &mut [E],
    stride: usize,
    k: &[f32],
    q: &[f32],
    lam: f32,
    op: RowOp<'_>,
    out: &mut [f32; COLS],
) -> Option<()> {
    let rows = k.len().min(q.len());
    let fits = rows > 0
        && stride % 2 == 0
        && (s.as_ptr() as usize) % 4 == 0
        && (rows - 1)
            .checked_mul(stride)
            .and_then(|n| n.checked_add(COLS))
            .is_some_and(|n| n <= s.len());
    if !fits {
        return None;
    }
    #[cfg(loglinear_arm_f16cvt)]
    {
        let (k, q) = (&k[..rows], &q[..rows]);
        match E::rows_mut(s) {
            RowsMut::F16(s) => arm::level_pass_f16(s, stride, k, q, lam, op, out),
            RowsMut::F32(s) => arm::level_pass_f32(s, stride, k, q, lam, op, out),
        }
        Some(())
    }
    #[cfg(not(loglinear_arm_f16cvt))]
    {
        let _ = (lam, op, out);
        None
    }
}

/// The merge of [`COLS`] columns (§4.2 step 1, as `fenwick`'s `merge_block`): `dst` +=
/// (0 + `low` level 0 + … + level `levels − 1`), the levels `level_len` halves apart, each
/// column summed in level order, and `dst` narrowed back. `None`, touching nothing, where
/// this build has no kernel or the arguments do not fit it (`low` or `dst` not 4-aligned, an
/// odd `level_len`, no level, too short a slice).
#[inline(always)]
pub fn merge_block<E: KernelElem>(
    low: &[E],
    levels: usize,
    level_len: usize,
    dst: &mut [E],
) -> Option<()> {
    let fits = levels > 0
        && level_len % 2 == 0
        && (low.as_ptr() as usize) % 4 == 0
        && (dst.as_ptr() as usize) % 4 == 0
        && dst.len() >= COLS
        && (levels - 1)
            .checked_mul(level_len)
            .and_then(|n| n.checked_add(COLS))
            .is_some_and(|n| n <= low.len());
    if !fits {
        return None;
    }
    #[cfg(loglinear_arm_f16cvt)]
    {
        match (E::rows(low), E::rows_mut(dst)) {
            (Rows::F16(low), RowsMut::F16(dst)) => {
                arm::merge_block_f16(low, levels, level_len, dst)
            }
            (Rows::F32(low), RowsMut::F32(dst)) => {
                arm::merge_block_f32(low, levels, level_len, dst)
            }
            _ => return None,
        }
        Some(())
    }
    #[cfg(not(loglinear_arm_f16cvt))]
    {
        None
    }
}

/// Whether this build has the kernels.
pub const AVAILABLE: bool = cfg!(loglinear_arm_f16cvt);

#[cfg(loglinear_arm_f16cvt)]
#[allow(unsafe_code)]
mod arm {
    use super::{RowOp, COLS};
    use core::arch::asm;

    // The register plan of every block below. Stable Rust cannot name S registers as operands
    // or clobbers on these cores (see half_convert.rs), so each block saves all 32 on the
    // stack on entry and restores them on exit:
    //   s0-s3    an f16 row's 8 halves, packed    s4     kᵢ, then β kᵢ, or qᵢ, then λ qᵢ
    //   s5-s7    α, β, λ (`consts`)               s8-s15 the row in f32
    //   s16-s23  u = kᵀS, v, or the merge's sum   s24-s31 the output
    //
    // Loading a row into s8-s15 from {p}, and storing it back; a stored f16 row is widened
    // again, since the readout and any later pass see the stored value.
    macro_rules! load_f16 {
        () => {
            "vldmia {p}, {{s0-s3}}\n vcvtb.f32.f16 s8, s0\n vcvtt.f32.f16 s9, s0\n \
             vcvtb.f32.f16 s10, s1\n vcvtt.f32.f16 s11, s1\n vcvtb.f32.f16 s12, s2\n \
             vcvtt.f32.f16 s13, s2\n vcvtb.f32.f16 s14, s3\n vcvtt.f32.f16 s15, s3\n"
        };
    }
    macro_rules! narrow_f16 {
        () => {
            "vcvtb.f16.f32 s0, s8\n vcvtt.f16.f32 s0, s9\n vcvtb.f16.f32 s1, s10\n \
             vcvtt.f16.f32 s1, s11\n vcvtb.f16.f32 s2, s12\n vcvtt.f16.f32 s2, s13\n \
             vcvtb.f16.f32 s3, s14\n vcvtt.f16.f32 s3, s15\n vstmia {p}, {{s0-s3}}\n"
        };
    }
    macro_rules! store_f16 {
        () => {
            concat!(
                narrow_f16!(),
                "vcvtb.f32.f16 s8, s0\n vcvtt.f32.f16 s9, s0\n vcvtb.f32.f16 s10, s1\n \
                 vcvtt.f32.f16 s11, s1\n vcvtb.f32.f16 s12, s2\n vcvtt.f32.f16 s13, s2\n \
                 vcvtb.f32.f16 s14, s3\n vcvtt.f32.f16 s15, s3\n"
            )
        };
    }
    macro_rules! load_f32 {
        () => {
            "vldmia {p}, {{s8-s15}}\n"
        };
    }
    macro_rules! store_f32 {
        () => {
            "vstmia {p}, {{s8-s15}}\n"
        };
    }
    // out += (λ qᵢ) x, then the next row.
    macro_rules! read_out_and_advance {
        () => {
            "vldmia {q}!, {{s4}}\n vmul.f32 s4, s7, s4\n \
             vmla.f32 s24, s4, s8\n vmla.f32 s25, s4, s9\n vmla.f32 s26, s4, s10\n \
             vmla.f32 s27, s4, s11\n vmla.f32 s28, s4, s12\n vmla.f32 s29, s4, s13\n \
             vmla.f32 s30, s4, s14\n vmla.f32 s31, s4, s15\n \
             add {p}, {p}, {stride}\n subs {n}, {n}, #1\n"
        };
    }

    // SAFETY (every block of `rows!`): the caller (`super::level_pass`, `super::merge_block`)
    // checked that the storage is 4-aligned, the stride and level length even, and the slices
    // long enough for their rows (levels) of `COLS` values `stride` (`level_len`) apart, so
    // every VLDMIA/VSTMIA of a row at {p} (four words for f16, eight for f32) and at {d} is
    // aligned and inside its slice; `k` and `q` hold `rows` floats each (one VLDMIA per row
    // from each), `consts` 11 and `out`, `v` and `zeros` 8 (whole-array VLDMIA/VSTMIA,
    // f32-aligned). s0-s31 are saved on entry and restored on exit (balanced VPUSH/VPOP, 128
    // bytes of stack); the core registers written are operands. Each changes the flags (SUBS)
    // and FPSCR's cumulative exception bits only.
    macro_rules! rows {
        ($pass:ident, $merge:ident, $ty:ty, $load:ident, $store:ident, $store_last:ident) => {
            /// See `super::level_pass`; the caller has checked the arguments.
            pub fn $pass(
                    s: &mut [$ty],
                    stride: usize,
                    k: &[f32],
                    q: &[f32],
                    lam: f32,
                    op: RowOp<'_>,
                    out: &mut [f32; COLS],
                ) {
                    let rows = k.len();
                    let stride_bytes = stride * core::mem::size_of::<$ty>();
                    // α, β, λ, then 8 zeros (u's start: +0, as the Rust pass's `[0.0; W]`).
                    let (alpha, beta) = match op {
                        RowOp::Delta { alpha, beta } => (alpha, beta),
                        RowOp::Decay { alpha } => (alpha, 0.0),
                        RowOp::Insert { beta, .. } => (0.0, beta),
                    };
                    let consts = [alpha, beta, lam, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
                    let p = s.as_mut_ptr();
                    match op {
                        RowOp::Delta { .. } => unsafe {
                            asm!(
                                "vpush {{s16-s31}}",
                                "vpush {{s0-s15}}",
                                "vldmia {c}!, {{s5-s7}}",
                                "vldmia {c}, {{s16-s23}}",
                                "vldmia {out}, {{s24-s31}}",
                                // u = Σᵢ kᵢ xᵢ over the rows, in order.
                                "mov {n}, {rows}",
                                "2:",
                                $load!(),
                                "vldmia {k}!, {{s4}}",
                                "vmla.f32 s16, s4, s8",
                                "vmla.f32 s17, s4, s9",
                                "vmla.f32 s18, s4, s10",
                                "vmla.f32 s19, s4, s11",
                                "vmla.f32 s20, s4, s12",
                                "vmla.f32 s21, s4, s13",
                                "vmla.f32 s22, s4, s14",
                                "vmla.f32 s23, s4, s15",
                                "add {p}, {p}, {stride}",
                                "subs {n}, {n}, #1",
                                "bne 2b",
                                // Back to the first row and the first kᵢ.
                                "mls {p}, {rows}, {stride}, {p}",
                                "sub {k}, {k}, {rows}, lsl #2",
                                // x ← α (x − (β kᵢ) u), stored; out += (λ qᵢ) x.
                                "mov {n}, {rows}",
                                "3:",
                                $load!(),
                                "vldmia {k}!, {{s4}}",
                                "vmul.f32 s4, s6, s4",
                                "vmls.f32 s8, s4, s16",
                                "vmls.f32 s9, s4, s17",
                                "vmls.f32 s10, s4, s18",
                                "vmls.f32 s11, s4, s19",
                                "vmls.f32 s12, s4, s20",
                                "vmls.f32 s13, s4, s21",
                                "vmls.f32 s14, s4, s22",
                                "vmls.f32 s15, s4, s23",
                                "vmul.f32 s8, s5, s8",
                                "vmul.f32 s9, s5, s9",
                                "vmul.f32 s10, s5, s10",
                                "vmul.f32 s11, s5, s11",
                                "vmul.f32 s12, s5, s12",
                                "vmul.f32 s13, s5, s13",
                                "vmul.f32 s14, s5, s14",
                                "vmul.f32 s15, s5, s15",
                                $store!(),
                                read_out_and_advance!(),
                                "bne 3b",
                                "vstmia {out}, {{s24-s31}}",
                                "vpop {{s0-s15}}",
                                "vpop {{s16-s31}}",
                                p = inout(reg) p => _,
                                k = inout(reg) k.as_ptr() => _,
                                q = inout(reg) q.as_ptr() => _,
                                c = inout(reg) consts.as_ptr() => _,
                                out = in(reg) out.as_mut_ptr(),
                                rows = in(reg) rows,
                                stride = in(reg) stride_bytes,
                                n = out(reg) _,
                            );
                        },
                        RowOp::Decay { .. } => unsafe {
                            asm!(
                                "vpush {{s16-s31}}",
                                "vpush {{s0-s15}}",
                                "vldmia {c}, {{s5-s7}}",
                                "vldmia {out}, {{s24-s31}}",
                                // x ← x α, stored; out += (λ qᵢ) x.
                                "mov {n}, {rows}",
                                "3:",
                                $load!(),
                                "vmul.f32 s8, s8, s5",
                                "vmul.f32 s9, s9, s5",
                                "vmul.f32 s10, s10, s5",
                                "vmul.f32 s11, s11, s5",
                                "vmul.f32 s12, s12, s5",
                                "vmul.f32 s13, s13, s5",
                                "vmul.f32 s14, s14, s5",
                                "vmul.f32 s15, s15, s5",
                                $store!(),
                                read_out_and_advance!(),
                                "bne 3b",
                                "vstmia {out}, {{s24-s31}}",
                                "vpop {{s0-s15}}",
                                "vpop {{s16-s31}}",
                                p = inout(reg) p => _,
                                q = inout(reg) q.as_ptr() => _,
                                c = in(reg) consts.as_ptr(),
                                out = in(reg) out.as_mut_ptr(),
                                rows = in(reg) rows,
                                stride = in(reg) stride_bytes,
                                n = out(reg) _,
                            );
                        },
                        RowOp::Insert { v, .. } => unsafe {
                            asm!(
                                "vpush {{s16-s31}}",
                                "vpush {{s0-s15}}",
                                "vldmia {c}, {{s5-s7}}",
                                "vldmia {v}, {{s16-s23}}",
                                "vldmia {out}, {{s24-s31}}",
                                // x ← x + (β kᵢ) v, stored; out += (λ qᵢ) x.
                                "mov {n}, {rows}",
                                "3:",
                                $load!(),
                                "vldmia {k}!, {{s4}}",
                                "vmul.f32 s4, s6, s4",
                                "vmla.f32 s8, s4, s16",
                                "vmla.f32 s9, s4, s17",
                                "vmla.f32 s10, s4, s18",
                                "vmla.f32 s11, s4, s19",
                                "vmla.f32 s12, s4, s20",
                                "vmla.f32 s13, s4, s21",
                                "vmla.f32 s14, s4, s22",
                                "vmla.f32 s15, s4, s23",
                                $store!(),
                                read_out_and_advance!(),
                                "bne 3b",
                                "vstmia {out}, {{s24-s31}}",
                                "vpop {{s0-s15}}",
                                "vpop {{s16-s31}}",
                                p = inout(reg) p => _,
                                k = inout(reg) k.as_ptr() => _,
                                q = inout(reg) q.as_ptr() => _,
                                c = in(reg) consts.as_ptr(),
                                v = in(reg) v.as_ptr(),
                                out = in(reg) out.as_mut_ptr(),
                                rows = in(reg) rows,
                                stride = in(reg) stride_bytes,
                                n = out(reg) _,
                            );
                        },
                    }
                }

            /// See `super::merge_block`; the caller has checked the arguments.
            pub fn $merge(low: &[$ty], levels: usize, level_len: usize, dst: &mut [$ty]) {
                    let zeros = [0.0f32; COLS];
                    unsafe {
                        asm!(
                            "vpush {{s16-s31}}",
                            "vpush {{s0-s15}}",
                            // acc = 0, then acc += each level's block, in order.
                            "vldmia {z}, {{s16-s23}}",
                            "2:",
                            $load!(),
                            "vadd.f32 s16, s16, s8",
                            "vadd.f32 s17, s17, s9",
                            "vadd.f32 s18, s18, s10",
                            "vadd.f32 s19, s19, s11",
                            "vadd.f32 s20, s20, s12",
                            "vadd.f32 s21, s21, s13",
                            "vadd.f32 s22, s22, s14",
                            "vadd.f32 s23, s23, s15",
                            "add {p}, {p}, {stride}",
                            "subs {n}, {n}, #1",
                            "bne 2b",
                            // dst = dst + acc, stored.
                            "mov {p}, {d}",
                            $load!(),
                            "vadd.f32 s8, s8, s16",
                            "vadd.f32 s9, s9, s17",
                            "vadd.f32 s10, s10, s18",
                            "vadd.f32 s11, s11, s19",
                            "vadd.f32 s12, s12, s20",
                            "vadd.f32 s13, s13, s21",
                            "vadd.f32 s14, s14, s22",
                            "vadd.f32 s15, s15, s23",
                            $store_last!(),
                            "vpop {{s0-s15}}",
                            "vpop {{s16-s31}}",
                            p = inout(reg) low.as_ptr() => _,
                            n = inout(reg) levels => _,
                            d = in(reg) dst.as_mut_ptr(),
                            z = in(reg) zeros.as_ptr(),
                            stride = in(reg) level_len * core::mem::size_of::<$ty>(),
                        );
                    }
                }
        };
    }

    rows!(
        level_pass_f16,
        merge_block_f16,
        half::f16,
        load_f16,
        store_f16,
        narrow_f16
    );
    rows!(
        level_pass_f32,
        merge_block_f32,
        f32,
        load_f32,
        store_f32,
        store_f32
    );
}
