//! ggml's quantized block layouts (bit-exact with ggml/gguf-py) and the kernels that work on
//! them directly.
//!
//! * Q8_0: 32 weights as `d · q`, d an f16 scale and q i8 (34 bytes).
//! * Q4_0: 32 weights as `d · (q − 8)`, q a 4-bit value; byte j holds weight j in its low nibble
//!   and weight j + 16 in its high nibble (18 bytes).
//!
//! Two ways to multiply a quantized matrix by an f32 vector x:
//! * **f32 activations** ([`BlockQ8_0::dot`], [`BlockQ4_0::dot`]): each weight is scaled and
//!   multiplied by x in f32. Exact up to f32 rounding; what the golden tests pin down.
//! * **Q8 activations** ([`matvec_q8_0`], [`matvec_q4_0`]): x is quantized once per matvec to
//!   32-value i8 blocks ([`ActBlock`], as ggml's `vec_dot_type`), every block product is an
//!   integer dot, and only the per-block sum is scaled in f32. This is what integer SIMD
//!   (SMLAD, sdot, AVX2 maddubs) accelerates, and what a core without an FPU can run fast.
//!
//! Every architecture's integer kernel lives in its own file and is checked against
//! [`portable`], the reference. The integer sums are exact, and every kernel combines the
//! per-block sums in the same order, so all paths give bit-identical results.

pub mod portable;

// One file per architecture (candle-style); each is checked bit for bit against `portable`.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[allow(unsafe_code)]
pub mod aarch64_neon;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub mod x86_avx2;
// Cortex-M4F/M7: thumbv7em-*-eabihf (runtime/build.rs sets the cfg from the target triple:
// stable Rust does not expose Arm's `dsp` feature to `cfg`).
#[cfg(loglinear_arm_dsp)]
#[allow(unsafe_code)]
pub mod arm_dsp;
// Cortex-M55/M85 Helium: thumbv8m.main with a core that has MVE (cfg from runtime/build.rs,
// which reads the rustflags).
#[cfg(loglinear_arm_mve)]
#[allow(unsafe_code)]
pub mod arm_mve;
// Cortex-M0/M0+ (thumbv6m, cfg from runtime/build.rs): safe Rust, so also built for the host
// tests.
#[cfg(any(loglinear_arm_m0, test))]
pub mod arm_m0;

use core::sync::atomic::{AtomicU8, Ordering};
use half::f16;

/// Weights per block for Q8_0 and Q4_0.
pub const QK: usize = 32;

/// A Q8_0 block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quants.
    pub qs: [i8; QK],
}

/// A Q4_0 block.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed 4-bit quants.
    pub qs: [u8; QK / 2],
}

// ggml's sizes: a file written elsewhere must map onto these structs byte for byte.
const _: () = assert!(core::mem::size_of::<BlockQ8_0>() == 34);
const _: () = assert!(core::mem::size_of::<BlockQ4_0>() == 18);
const _: () = assert!(core::mem::align_of::<BlockQ8_0>() == 2);
const _: () = assert!(core::mem::align_of::<BlockQ4_0>() == 2);

impl BlockQ8_0 {
    /// Quantizes 32 weights as ggml's `quantize_row_q8_0_ref`: d = max|x| / 127, q = round(x / d).
    pub fn quantize(x: &[f32; QK]) -> Self {
        let amax = crate::math::max_abs(x);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK];
        for (q, v) in qs.iter_mut().zip(x) {
            *q = crate::math::round_to_i8(v * id);
        }
        Self {
            d: f16::from_f32(d),
            qs,
        }
    }

    /// The 32 weights.
    pub fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = d * q as f32;
        }
    }

    /// Σ w·x over the block.
    #[inline]
    pub fn dot(&self, x: &[f32]) -> f32 {
        let s: f32 = self.qs.iter().zip(x).map(|(&q, v)| q as f32 * v).sum();
        s * self.d.to_f32()
    }
}

impl BlockQ4_0 {
    /// Quantizes 32 weights as ggml's `quantize_row_q4_0_ref`: the signed value of largest
    /// magnitude maps to −8, d = max / −8, q = min(15, ⌊x / d + 8.5⌋).
    pub fn quantize(x: &[f32; QK]) -> Self {
        let mut amax = 0.0f32;
        let mut max = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; QK / 2];
        for (j, q) in qs.iter_mut().enumerate() {
            let q0 = ((x[j] * id + 8.5) as i32).min(15) as u8;
            let q1 = ((x[j + QK / 2] * id + 8.5) as i32).min(15) as u8;
            *q = q0 | (q1 << 4);
        }
        Self {
            d: f16::from_f32(d),
            qs,
        }
    }

    /// The 32 weights.
    pub fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (j, &b) in self.qs.iter().enumerate() {
            out[j] = d * ((b & 0x0F) as i32 - 8) as f32;
            out[j + QK / 2] = d * ((b >> 4) as i32 - 8) as f32;
        }
    }

    /// Σ w·x over the block.
    #[inline]
    pub fn dot(&self, x: &[f32]) -> f32 {
        let (lo, hi) = x.split_at(QK / 2);
        let mut s = 0.0f32;
        for ((&b, a), c) in self.qs.iter().zip(lo).zip(hi) {
            s += ((b & 0x0F) as i32 - 8) as f32 * a + ((b >> 4) as i32 - 8) as f32 * c;
        }
        s * self.d.to_f32()
    }
}

/// 32 activations quantized for the integer kernels: `x ≈ d · q`, d = max|x| / 127 and
/// q = round(x / d), as ggml's `quantize_row_q8_0`, but with an f32 scale (an activation block
/// is scratch, never stored, so there is no reason to round its scale to f16) and the sum of
/// the quants, which Q4_0's offset of 8 needs: Σ (w − 8)·q = Σ w·q − 8·Σ q.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ActBlock {
    /// Scale.
    pub d: f32,
    /// Σ qs.
    pub sum: i32,
    /// Quants, in −127..=127: [`ActBlock::quantize`] never makes −128, and the AVX2 Q8_0
    /// kernel relies on it (its `vpsignb` cannot negate −128).
    pub qs: [i8; QK],
}

const _: () = assert!(core::mem::size_of::<ActBlock>() == 40);

impl ActBlock {
    /// Quantizes 32 activations (see the type's doc).
    #[inline]
    pub fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK];
        let amax = crate::math::max_abs(x);
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK];
        let mut sum = 0i32;
        for (q, v) in qs.iter_mut().zip(x) {
            // |v · id| ≤ 127 up to rounding, and the conversion saturates: never out of range.
            *q = crate::math::round_to_i8(v * id);
            sum += *q as i32;
        }
        Self { d, sum, qs }
    }
}

/// Activation blocks needed for an input of `cols` values (`cols` a multiple of [`QK`]).
pub const fn act_blocks(cols: usize) -> usize {
    cols.div_ceil(QK)
}

/// Quantizes `x` into `out` block by block. Returns the blocks written, `None` unless
/// `x.len()` is a multiple of [`QK`] and `out` is long enough.
pub fn quantize_activations<'a>(x: &[f32], out: &'a mut [ActBlock]) -> Option<&'a [ActBlock]> {
    if x.len() % QK != 0 || out.len() < x.len() / QK {
        return None;
    }
    let out = &mut out[..x.len() / QK];
    for (o, xs) in out.iter_mut().zip(x.chunks_exact(QK)) {
        *o = ActBlock::quantize(xs);
    }
    Some(out)
}

/// How a matvec with quantized weights treats its input vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Activations {
    /// Multiply in f32 (each weight dequantized on the fly). Matches the reference maths up
    /// to f32 rounding.
    #[default]
    F32,
    /// Quantize the input to [`ActBlock`]s once per matvec and use the integer kernels.
    /// Faster, and the only fast way on a core without an FPU; costs a little accuracy
    /// (BENCHMARKS.md, "Q8 activations").
    Q8,
}

impl Activations {
    /// Short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            Activations::F32 => "f32",
            Activations::Q8 => "q8",
        }
    }
}

/// Which implementation of the integer kernels runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum KernelPath {
    /// [`portable`]: plain Rust, every target.
    Portable,
    /// [`x86_avx2`]: AVX2, chosen at run time on x86_64.
    Avx2,
    /// `aarch64_neon`: NEON `smull`/`sadalp`, every AArch64 core.
    Neon,
    /// `aarch64_neon`: the `sdot` dot-product instructions (Armv8.2+ `dotprod`), chosen at
    /// run time on AArch64.
    NeonDot,
    /// `arm_dsp`: SMLAD dual 16-bit MACs, Cortex-M4F/M7 (thumbv7em-*-eabihf).
    ArmDsp,
    /// `arm_m0`: plain integer Rust shaped for Thumb-1, Cortex-M0/M0+ (thumbv6m).
    ArmM0,
    /// `arm_mve`: Helium (MVE) `VMLAV` byte dots, Cortex-M55/M85 (thumbv8m.main with MVE).
    Helium,
}

impl KernelPath {
    /// Short name for reports.
    pub const fn name(self) -> &'static str {
        match self {
            KernelPath::Portable => "portable",
            KernelPath::Avx2 => "avx2",
            KernelPath::Neon => "neon",
            KernelPath::NeonDot => "neon-sdot",
            KernelPath::ArmDsp => "arm-dsp",
            KernelPath::ArmM0 => "arm-m0",
            KernelPath::Helium => "helium",
        }
    }

    /// Whether this CPU runs the path.
    pub fn is_available(self) -> bool {
        match self {
            KernelPath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => x86_avx2::available(),
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            KernelPath::Neon => true,
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            KernelPath::NeonDot => aarch64_neon::dotprod_available(),
            #[cfg(loglinear_arm_dsp)]
            KernelPath::ArmDsp => true,
            #[cfg(loglinear_arm_m0)]
            KernelPath::ArmM0 => true,
            #[cfg(loglinear_arm_mve)]
            KernelPath::Helium => true,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every path, slowest first.
    pub const ALL: &'static [KernelPath] = &[
        KernelPath::Portable,
        KernelPath::Avx2,
        KernelPath::Neon,
        KernelPath::NeonDot,
        KernelPath::ArmDsp,
        KernelPath::ArmM0,
        KernelPath::Helium,
    ];

    /// The paths this CPU runs, slowest first (for benchmarks and cross-checks).
    pub fn available() -> impl Iterator<Item = KernelPath> {
        Self::ALL.iter().copied().filter(|p| p.is_available())
    }

    /// The path the kernels use: the one forced with [`set_forced_path`] if any, else the
    /// fastest this CPU runs.
    pub fn best() -> Self {
        if let Some(path) = forced_path() {
            return path;
        }
        Self::available().last().unwrap_or(KernelPath::Portable)
    }
}

/// [`set_forced_path`]'s choice: 0 = none, else 1 + the path's index in [`KernelPath::ALL`].
/// An atomic (load/store only, which every target has) so that a benchmark can pin a path for
/// the whole process without threading it through every model and session.
static FORCED_PATH: AtomicU8 = AtomicU8::new(0);

/// Makes [`KernelPath::best`], the path every quantized matvec takes, return `path` (`None`:
/// the fastest again). Process-wide; for benchmarks and cross-checks. Returns `false`, and
/// changes nothing, if this CPU does not run `path`.
pub fn set_forced_path(path: Option<KernelPath>) -> bool {
    let code = match path {
        None => 0,
        Some(p) if p.is_available() => match KernelPath::ALL.iter().position(|&q| q == p) {
            Some(i) => i as u8 + 1,
            None => return false,
        },
        Some(_) => return false,
    };
    FORCED_PATH.store(code, Ordering::Relaxed);
    true
}

/// The path forced with [`set_forced_path`], if any.
pub fn forced_path() -> Option<KernelPath> {
    match FORCED_PATH.load(Ordering::Relaxed) {
        0 => None,
        code => KernelPath::ALL.get(code as usize - 1).copied(),
    }
}

/// `out[r]` = Σ_b (d_w · d_x) · (w_b · q_b) over row r of `w` (`rows × cols` weights, `cols / 32`
/// blocks a row) and the quantized activations `act`, on `path`. `out` has `rows` entries.
pub fn matvec_q8_0_on(path: KernelPath, w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 if x86_avx2::available() => x86_avx2::matvec_q8_0(w, act, out),
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        KernelPath::Neon => aarch64_neon::matvec_q8_0(w, act, out),
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        KernelPath::NeonDot => aarch64_neon::matvec_q8_0_dot(w, act, out),
        #[cfg(loglinear_arm_dsp)]
        KernelPath::ArmDsp => arm_dsp::matvec_q8_0(w, act, out),
        #[cfg(loglinear_arm_m0)]
        KernelPath::ArmM0 => arm_m0::matvec_q8_0(w, act, out),
        #[cfg(loglinear_arm_mve)]
        KernelPath::Helium => arm_mve::matvec_q8_0(w, act, out),
        _ => portable::matvec_q8_0(w, act, out),
    }
}

/// As [`matvec_q8_0_on`] for Q4_0 weights.
pub fn matvec_q4_0_on(path: KernelPath, w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 if x86_avx2::available() => x86_avx2::matvec_q4_0(w, act, out),
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        KernelPath::Neon => aarch64_neon::matvec_q4_0(w, act, out),
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        KernelPath::NeonDot => aarch64_neon::matvec_q4_0_dot(w, act, out),
        #[cfg(loglinear_arm_dsp)]
        KernelPath::ArmDsp => arm_dsp::matvec_q4_0(w, act, out),
        #[cfg(loglinear_arm_m0)]
        KernelPath::ArmM0 => arm_m0::matvec_q4_0(w, act, out),
        #[cfg(loglinear_arm_mve)]
        KernelPath::Helium => arm_mve::matvec_q4_0(w, act, out),
        _ => portable::matvec_q4_0(w, act, out),
    }
}

/// [`matvec_q8_0_on`] on [`KernelPath::best`].
#[inline]
pub fn matvec_q8_0(w: &[BlockQ8_0], act: &[ActBlock], out: &mut [f32]) {
    matvec_q8_0_on(KernelPath::best(), w, act, out)
}

/// [`matvec_q4_0_on`] on [`KernelPath::best`].
#[inline]
pub fn matvec_q4_0(w: &[BlockQ4_0], act: &[ActBlock], out: &mut [f32]) {
    matvec_q4_0_on(KernelPath::best(), w, act, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(scale: f32) -> [f32; QK] {
        core::array::from_fn(|i| (i as f32 - 13.3) * scale)
    }

    #[test]
    fn q8_0_round_trip_is_within_half_a_step() {
        let x = ramp(0.37);
        let b = BlockQ8_0::quantize(&x);
        let mut y = [0f32; QK];
        b.dequantize(&mut y);
        let step = b.d.to_f32();
        for (a, c) in x.iter().zip(&y) {
            assert!((a - c).abs() <= 0.5 * step + 1e-6, "{a} vs {c}");
        }
        let ones = [1f32; QK];
        assert!((b.dot(&ones) - y.iter().sum::<f32>()).abs() < 1e-4);
    }

    #[test]
    fn q4_0_round_trip_is_within_one_step() {
        let x = ramp(-0.11);
        let b = BlockQ4_0::quantize(&x);
        let mut y = [0f32; QK];
        b.dequantize(&mut y);
        let step = b.d.to_f32().abs();
        for (a, c) in x.iter().zip(&y) {
            assert!((a - c).abs() <= step + 1e-6, "{a} vs {c}");
        }
        let xs: [f32; QK] = core::array::from_fn(|i| i as f32);
        let want: f32 = y.iter().zip(&xs).map(|(a, b)| a * b).sum();
        assert!((b.dot(&xs) - want).abs() < 1e-3);
    }

    /// A deterministic pseudo-random vector (no dev-dependency needed).
    fn noise(n: usize, seed: u32, scale: f32) -> [f32; 4 * QK] {
        let mut s = seed;
        core::array::from_fn(|i| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            if i < n {
                ((s >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * scale
            } else {
                0.0
            }
        })
    }

    #[test]
    fn forced_path_overrides_best_until_cleared() {
        // Every path gives bit-identical results, so forcing one here cannot upset the tests
        // running beside this one.
        for path in KernelPath::available() {
            assert!(set_forced_path(Some(path)));
            assert_eq!((forced_path(), KernelPath::best()), (Some(path), path));
        }
        for path in KernelPath::ALL.iter().filter(|p| !p.is_available()) {
            assert!(!set_forced_path(Some(*path)));
        }
        assert!(set_forced_path(None));
        assert_eq!(forced_path(), None);
        assert_eq!(Some(KernelPath::best()), KernelPath::available().last());
    }

    #[test]
    fn activation_blocks_round_within_half_a_step() {
        let x = noise(QK, 7, 3.0);
        let a = ActBlock::quantize(&x[..QK]);
        assert_eq!(a.sum, a.qs.iter().map(|&q| q as i32).sum::<i32>());
        for (v, &q) in x.iter().zip(&a.qs) {
            assert!((v - a.d * q as f32).abs() <= 0.5 * a.d + 1e-6);
        }
        assert_eq!(a.qs.iter().map(|q| q.unsigned_abs()).max(), Some(127));
        let z = ActBlock::quantize(&[0.0; QK]);
        assert_eq!((z.d, z.sum, z.qs), (0.0, 0, [0; QK]));
    }

    #[test]
    fn integer_matvec_matches_f32_matvec_within_activation_rounding() {
        // 3 rows × 4 blocks, both weight types.
        let cols = 4 * QK;
        let x = noise(cols, 1, 2.0);
        let mut act = [ActBlock::default(); 4];
        let act = quantize_activations(&x, &mut act).unwrap();
        let mut w8 = [BlockQ8_0::quantize(&[0.0; QK]); 12];
        let mut w4 = [BlockQ4_0::quantize(&[0.0; QK]); 12];
        for (i, (b8, b4)) in w8.iter_mut().zip(w4.iter_mut()).enumerate() {
            let v = noise(QK, 100 + i as u32, 1.0);
            let v: &[f32; QK] = v[..QK].try_into().unwrap();
            *b8 = BlockQ8_0::quantize(v);
            *b4 = BlockQ4_0::quantize(v);
        }
        let (mut got, mut want) = ([0f32; 3], [0f32; 3]);
        for path in KernelPath::available() {
            matvec_q8_0_on(path, &w8, act, &mut got);
            // The f32-activation matvec the session uses without Q8.
            crate::tensor::TensorView::new(3, cols, crate::tensor::TensorData::Q8_0(&w8))
                .unwrap()
                .matvec(&x[..cols], &mut want);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 0.02 * (1.0 + w.abs()),
                    "{path:?} q8_0 {g} vs {w}"
                );
            }
            matvec_q4_0_on(path, &w4, act, &mut got);
            // The f32-activation matvec the session uses without Q8.
            crate::tensor::TensorView::new(3, cols, crate::tensor::TensorData::Q4_0(&w4))
                .unwrap()
                .matvec(&x[..cols], &mut want);
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 0.02 * (1.0 + w.abs()),
                    "{path:?} q4_0 {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn every_kernel_path_is_bit_identical_to_portable() {
        let cols = 4 * QK;
        for seed in 0..20u32 {
            let x = noise(cols, seed, 1.0 + seed as f32);
            let mut act = [ActBlock::default(); 4];
            let act = quantize_activations(&x, &mut act).unwrap();
            let w8: [BlockQ8_0; 8] = core::array::from_fn(|i| {
                let v = noise(QK, seed * 31 + i as u32, 0.5);
                BlockQ8_0::quantize(v[..QK].try_into().unwrap())
            });
            let w4: [BlockQ4_0; 8] = core::array::from_fn(|i| {
                let v = noise(QK, seed * 37 + i as u32, 0.5);
                BlockQ4_0::quantize(v[..QK].try_into().unwrap())
            });
            let (mut want, mut got) = ([0f32; 2], [0f32; 2]);
            for path in KernelPath::available() {
                portable::matvec_q8_0(&w8, act, &mut want);
                matvec_q8_0_on(path, &w8, act, &mut got);
                assert_eq!(
                    want.map(f32::to_bits),
                    got.map(f32::to_bits),
                    "{path:?} q8_0"
                );
                portable::matvec_q4_0(&w4, act, &mut want);
                matvec_q4_0_on(path, &w4, act, &mut got);
                assert_eq!(
                    want.map(f32::to_bits),
                    got.map(f32::to_bits),
                    "{path:?} q4_0"
                );
            }
        }
    }

    /// A deterministic pseudo-random byte stream for the shape sweep below.
    struct Lcg(u32);

    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            self.0 >> 8
        }
        fn i8(&mut self) -> i8 {
            self.next() as u8 as i8
        }
    }

    /// Weight quants of one kind of extreme (`kind` 0..6): random, all −128, all +127, ±127
    /// alternating, −128/+127 alternating, all zero.
    fn extreme_q(kind: u32, rng: &mut Lcg) -> [i8; QK] {
        core::array::from_fn(|j| match kind {
            1 => -128,
            2 => 127,
            3 => [127, -127][j % 2],
            4 => [-128, 127][j % 2],
            5 => 0,
            _ => rng.i8(),
        })
    }

    /// A weight scale: mostly ordinary, sometimes zero, negative zero, the largest finite
    /// f16, or a subnormal.
    fn extreme_scale(rng: &mut Lcg) -> f16 {
        match rng.next() % 8 {
            0 => f16::ZERO,
            1 => f16::NEG_ZERO,
            2 => f16::MAX,
            3 => f16::from_bits(0x0001),
            _ => f16::from_f32((rng.next() % 2000) as f32 / 1000.0 - 1.0),
        }
    }

    /// Activation blocks: random quants (−127..=127, as [`ActBlock::quantize`] makes them),
    /// or all ±127, with ordinary or zero scales.
    fn extreme_act(rng: &mut Lcg, n: usize) -> std::vec::Vec<ActBlock> {
        (0..n)
            .map(|i| {
                let qs: [i8; QK] = core::array::from_fn(|j| match i % 4 {
                    1 => 127,
                    2 => [-127, 127][j % 2],
                    _ => (rng.i8()).max(-127),
                });
                let d = match i % 5 {
                    3 => 0.0,
                    _ => (rng.next() % 1000) as f32 / 97.0,
                };
                ActBlock {
                    d,
                    sum: qs.iter().map(|&q| q as i32).sum(),
                    qs,
                }
            })
            .collect()
    }

    #[test]
    fn every_kernel_path_is_bit_identical_to_portable_on_many_shapes_and_extremes() {
        // Row counts around the SIMD kernels' row groups (4 and 8) and block counts from one
        // to a 4096-wide row; every kind of extreme weight, scale and activation.
        let mut rng = Lcg(12345);
        let mut checked = 0;
        for &rows in &[1usize, 3, 4, 7, 8, 9, 12, 16, 17, 33] {
            for &blocks in &[1usize, 2, 3, 5, 16, 128] {
                let act = extreme_act(&mut rng, blocks);
                let w8: std::vec::Vec<BlockQ8_0> = (0..rows * blocks)
                    .map(|i| BlockQ8_0 {
                        d: extreme_scale(&mut rng),
                        qs: extreme_q((i as u32 / 3) % 6, &mut rng),
                    })
                    .collect();
                let w4: std::vec::Vec<BlockQ4_0> = (0..rows * blocks)
                    .map(|i| BlockQ4_0 {
                        d: extreme_scale(&mut rng),
                        qs: core::array::from_fn(|_| match (i / 2) % 4 {
                            1 => 0x00,
                            2 => 0xFF,
                            3 => 0x0F,
                            _ => rng.next() as u8,
                        }),
                    })
                    .collect();
                // One spare output: rows past the weights must be left alone, as portable does.
                let mut want = std::vec![7.0f32; rows + 1];
                let mut got = want.clone();
                for path in KernelPath::available() {
                    portable::matvec_q8_0(&w8, &act, &mut want);
                    got.fill(7.0);
                    matvec_q8_0_on(path, &w8, &act, &mut got);
                    let bits =
                        |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<std::vec::Vec<_>>();
                    assert_eq!(bits(&want), bits(&got), "{path:?} q8_0 {rows}×{blocks}");
                    portable::matvec_q4_0(&w4, &act, &mut want);
                    got.fill(7.0);
                    matvec_q4_0_on(path, &w4, &act, &mut got);
                    assert_eq!(bits(&want), bits(&got), "{path:?} q4_0 {rows}×{blocks}");
                    checked += 1;
                }
            }
        }
        assert!(checked >= 60);
    }

    /// The paths named in `LOGLINEAR_EXPECT_KERNELS` (comma-separated [`KernelPath::name`]s,
    /// `!name` for one that must be absent) match this CPU's, so that a detection bug cannot
    /// silently skip a kernel in the cross-checks above. Set by `cargo xtask aarch64`, which
    /// runs the tests on emulated cores with and without `sdot`.
    #[cfg(feature = "std")]
    #[test]
    fn expected_kernel_paths_are_available() {
        let Ok(list) = std::env::var("LOGLINEAR_EXPECT_KERNELS") else {
            return;
        };
        for item in list.split(',').filter(|s| !s.is_empty()) {
            let (want, name) = match item.strip_prefix('!') {
                Some(name) => (false, name),
                None => (true, item),
            };
            let path = KernelPath::ALL.iter().find(|p| p.name() == name);
            let path = path.unwrap_or_else(|| panic!("unknown kernel path {name}"));
            assert_eq!(path.is_available(), want, "{name}");
        }
    }

    #[test]
    fn quantize_activations_refuses_partial_blocks_and_short_scratch() {
        let x = [1.0f32; QK + 1];
        let mut act = [ActBlock::default(); 2];
        assert!(quantize_activations(&x, &mut act).is_none());
        assert!(quantize_activations(&[1.0; 3 * QK], &mut act).is_none());
        assert_eq!(
            quantize_activations(&[1.0; 2 * QK], &mut act).map(|a| a.len()),
            Some(2)
        );
    }

    #[test]
    fn zero_blocks_stay_zero() {
        let z = [0f32; QK];
        assert_eq!(BlockQ8_0::quantize(&z).dot(&ramp(1.0)), 0.0);
        assert_eq!(BlockQ4_0::quantize(&z).dot(&ramp(1.0)), 0.0);
    }
}
