//! f16 ↔ f32 conversion of the decode state: one instruction per value where the core
//! converts in hardware, `half` elsewhere, with the same bits either way.
//!
//! The Cortex-M4F and M7 (FPv4-SP, FPv5) and the Armv8-M cores with an FPU (M33, M55, M85)
//! convert between half and single precision in one instruction, VCVTB/VCVTT (bottom or top
//! half of an S register). `half` has no Arm M-profile path and converts in software there,
//! which cost the M4F 2.4 instructions per weight-MAC of a token (`cargo xtask count`,
//! BENCHMARKS.md). `runtime/build.rs` sets `cfg(loglinear_arm_f16cvt)` for those targets.
//!
//! The hardware conversion rounds to nearest even (FPSCR.RMode at its reset value), keeps
//! subnormal halves exact (FZ does not apply to half-precision conversions), and quiets a NaN
//! keeping the top of its payload, as `half` does; with FPSCR.DN set (default-NaN mode, off at
//! reset and never set by this crate) a NaN would become the default NaN instead.
//! `cargo xtask kernel-check` compares the two on every Arm board under QEMU: all 65,536
//! halves widened, and f32 values at, beside and between every pair of neighbouring halves
//! narrowed (`firmware/src/bin/kernel_check.rs`).

use half::f16;

/// Whether this build converts with the core's instructions (`true`) or through `half`.
pub const HARDWARE: bool = cfg!(loglinear_arm_f16cvt);

/// f16 → f32 (exact).
#[inline(always)]
pub fn widen(h: f16) -> f32 {
    #[cfg(loglinear_arm_f16cvt)]
    return arm::widen(h);
    #[cfg(not(loglinear_arm_f16cvt))]
    return h.to_f32();
}

/// f32 → f16, rounded to nearest even.
#[inline(always)]
pub fn narrow(x: f32) -> f16 {
    #[cfg(loglinear_arm_f16cvt)]
    return arm::narrow(x);
    #[cfg(not(loglinear_arm_f16cvt))]
    return f16::from_f32(x);
}

/// Widens `src` into `dst` (the shorter one's length).
#[inline(always)]
pub fn widen_slice(src: &[f16], dst: &mut [f32]) {
    #[cfg(loglinear_arm_f16cvt)]
    arm::widen_slice(src, dst);
    #[cfg(not(loglinear_arm_f16cvt))]
    {
        use half::slice::HalfFloatSliceExt as _;
        let n = src.len().min(dst.len());
        // `half`'s slice conversion: F16C or fp16 vector instructions on hosts with `std`.
        src[..n].convert_to_f32_slice(&mut dst[..n]);
    }
}

/// Narrows `src` into `dst` (the shorter one's length), then leaves in `src` the values as
/// stored (narrowed and widened again): what a later read of `dst` sees.
#[inline(always)]
pub fn narrow_slice_read_back(src: &mut [f32], dst: &mut [f16]) {
    #[cfg(loglinear_arm_f16cvt)]
    arm::narrow_slice_read_back(src, dst);
    #[cfg(not(loglinear_arm_f16cvt))]
    {
        use half::slice::HalfFloatSliceExt as _;
        let n = src.len().min(dst.len());
        dst[..n].convert_from_f32_slice(&src[..n]);
        dst[..n].convert_to_f32_slice(&mut src[..n]);
    }
}

// Inline assembly, because stable Rust has neither an f16 type nor intrinsics for VCVTB/VCVTT
// on Arm M-profile. Nor can the blocks take float register operands: stable Rust enables its
// `vfp2` feature, which `sreg` operands need, only on cores with double precision, not on the
// M4F or M33. So each block saves the S registers it uses (VPUSH/VPOP, balanced) and moves
// values through core registers, and the slice forms convert a whole block per asm block, so
// that the save and restore are paid once per call.
#[cfg(loglinear_arm_f16cvt)]
#[allow(unsafe_code)]
mod arm {
    use core::arch::asm;
    use half::f16;

    #[inline(always)]
    pub fn widen(h: f16) -> f32 {
        let mut bits = u32::from(h.to_bits());
        // SAFETY: the block touches only `bits` and s0, which it saves and restores on the
        // stack (balanced VPUSH/VPOP). The targets of this cfg all have VCVTB
        // (runtime/build.rs). It changes FPSCR's cumulative exception bits only.
        unsafe {
            asm!(
                "vpush {{s0}}",
                "vmov s0, {bits}",
                "vcvtb.f32.f16 s0, s0",
                "vmov {bits}, s0",
                "vpop {{s0}}",
                bits = inout(reg) bits,
                options(nomem, preserves_flags),
            );
        }
        f32::from_bits(bits)
    }

    #[inline(always)]
    pub fn narrow(x: f32) -> f16 {
        let mut bits = x.to_bits();
        // SAFETY: as in `widen`; VCVTB.F16.F32 writes the bottom half of s0, the only half
        // kept.
        unsafe {
            asm!(
                "vpush {{s0}}",
                "vmov s0, {bits}",
                "vcvtb.f16.f32 s0, s0",
                "vmov {bits}, s0",
                "vpop {{s0}}",
                bits = inout(reg) bits,
                options(nomem, preserves_flags),
            );
        }
        f16::from_bits(bits as u16)
    }

    #[inline(always)]
    pub fn widen_slice(src: &[f16], dst: &mut [f32]) {
        let n = src.len().min(dst.len());
        let pairs = n / 2;
        if pairs > 0 {
            // SAFETY: `src` holds at least 2 · pairs halves and `dst` at least 2 · pairs
            // floats (n is the shorter length): the loop runs `pairs` ≥ 1 times, each reading
            // one word of `src` (LDR, which Armv7-M and Armv8-M Main perform at any even
            // address) and writing two floats of `dst` (VSTMIA: `dst` is 4-aligned as an f32
            // slice). s0-s2 are saved and restored on the stack (balanced VPUSH/VPOP); the
            // core registers written are operands. It changes the flags (SUBS) and FPSCR's
            // cumulative exception bits only.
            unsafe {
                asm!(
                    "vpush {{s0-s2}}",
                    "2:",
                    "ldr {t}, [{src}], #4",
                    "vmov s0, {t}",
                    "vcvtb.f32.f16 s1, s0",
                    "vcvtt.f32.f16 s2, s0",
                    "vstmia {dst}!, {{s1, s2}}",
                    "subs {n}, {n}, #1",
                    "bne 2b",
                    "vpop {{s0-s2}}",
                    src = inout(reg) src.as_ptr() => _,
                    dst = inout(reg) dst.as_mut_ptr() => _,
                    n = inout(reg) pairs => _,
                    t = out(reg) _,
                );
            }
        }
        if n % 2 == 1 {
            dst[n - 1] = widen(src[n - 1]);
        }
    }

    #[inline(always)]
    pub fn narrow_slice_read_back(src: &mut [f32], dst: &mut [f16]) {
        let n = src.len().min(dst.len());
        let pairs = n / 2;
        if pairs > 0 {
            // SAFETY: `src` holds at least 2 · pairs floats and `dst` at least 2 · pairs
            // halves: the loop runs `pairs` ≥ 1 times, each reading and rewriting two floats
            // of `src` (VLDMIA, VSTMIA: 4-aligned as an f32 slice) and writing one word of
            // `dst` (STR, at any even address as in `widen_slice`). Registers, stack and
            // flags as in `widen_slice`.
            unsafe {
                asm!(
                    "vpush {{s0-s2}}",
                    "2:",
                    "vldmia {src}, {{s1, s2}}",
                    "vcvtb.f16.f32 s0, s1",
                    "vcvtt.f16.f32 s0, s2",
                    "vmov {t}, s0",
                    "str {t}, [{dst}], #4",
                    "vcvtb.f32.f16 s1, s0",
                    "vcvtt.f32.f16 s2, s0",
                    "vstmia {src}!, {{s1, s2}}",
                    "subs {n}, {n}, #1",
                    "bne 2b",
                    "vpop {{s0-s2}}",
                    src = inout(reg) src.as_mut_ptr() => _,
                    dst = inout(reg) dst.as_mut_ptr() => _,
                    n = inout(reg) pairs => _,
                    t = out(reg) _,
                );
            }
        }
        if n % 2 == 1 {
            dst[n - 1] = narrow(src[n - 1]);
            src[n - 1] = widen(dst[n - 1]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_agree_with_the_scalar_conversions() {
        // Odd lengths leave a remainder for the pair loops where there are pair loops.
        for len in [0usize, 1, 2, 3, 16, 17] {
            let halves: std::vec::Vec<f16> = (0..len)
                .map(|i| f16::from_bits((i as u16).wrapping_mul(7919)))
                .collect();
            let mut wide = std::vec![0.0f32; len];
            widen_slice(&halves, &mut wide);
            for (h, w) in halves.iter().zip(&wide) {
                assert_eq!(w.to_bits(), widen(*h).to_bits(), "{h:?}");
            }
            let mut floats: std::vec::Vec<f32> =
                (0..len).map(|i| (i as f32 - 7.3) * 1.0e-3).collect();
            let want: std::vec::Vec<f16> = floats.iter().map(|&x| narrow(x)).collect();
            let mut got = std::vec![f16::ZERO; len];
            narrow_slice_read_back(&mut floats, &mut got);
            assert_eq!(got, want);
            for (x, h) in floats.iter().zip(&got) {
                assert_eq!(x.to_bits(), widen(*h).to_bits());
            }
        }
    }
}
