//! Scalar maths used by the layers. One place, so that every path (decoder, tests, later
//! kernels) rounds the same way.
//!
//! Why `libm` and not `micromath`: `micromath` was measured against `libm` on the inputs the
//! golden layers feed these functions (`tests/tests/micromath_error.rs`, table in
//! BENCHMARKS.md). Its worst relative errors are 2.4e-3 (exp), 2.6e-1 (ln, near 1, as in
//! softplus of a very negative input), 6.1e-2 (sqrt) and 8.0e-4 (sigmoid): every one far above
//! the 2e-5 operator tolerance. So every function here uses `libm` (≤ 1.4e-7 against f64 on the
//! same inputs), which is also the same software routine on every target.

/// e^x.
#[inline]
pub fn exp(x: f32) -> f32 {
    libm::expf(x)
}

/// Natural logarithm.
#[inline]
pub fn ln(x: f32) -> f32 {
    libm::logf(x)
}

/// Square root.
#[inline]
pub fn sqrt(x: f32) -> f32 {
    libm::sqrtf(x)
}

/// Logistic sigmoid, 1 / (1 + e^-x), written so that neither branch overflows.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    if x >= 0.0 {
        1.0 / (1.0 + exp(-x))
    } else {
        let e = exp(x);
        e / (1.0 + e)
    }
}

/// softplus(x) = ln(1 + e^x), with PyTorch's linear regime above 20 (`torch.nn.functional.softplus`
/// uses threshold 20), which the reference models were trained with.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        libm::log1pf(exp(x))
    }
}

/// SiLU (swish): x · sigmoid(x).
#[inline]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// `roundf(x) as i8` (half away from zero, then saturating, NaN to 0) in a few instructions:
/// `libm::roundf` is a call per value, and quantizing a token's activations calls it thousands
/// of times. Exact: `x - trunc(x)` is exact for every finite f32, and beyond ±2^31 the
/// saturated truncation saturates the same way.
#[inline]
pub fn round_to_i8(x: f32) -> i8 {
    let t = x as i32;
    let frac = x - t as f32;
    let r = if frac >= 0.5 {
        t.saturating_add(1)
    } else if frac <= -0.5 {
        t.saturating_sub(1)
    } else {
        t
    };
    r.clamp(i8::MIN as i32, i8::MAX as i32) as i8
}

/// max |x| over a slice, NaNs ignored as `f32::max` ignores them, 0 for an empty one; a
/// comparison per value, where `f32::max` is a libm call (`fmaxf`) on cores without VMAXNM.
#[inline]
pub fn max_abs(x: &[f32]) -> f32 {
    let mut m = 0.0f32;
    for v in x {
        let a = v.abs();
        if a > m {
            m = a;
        }
    }
    m
}

/// Dot product of two equal-length slices.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// RMSNorm: `out = x / sqrt(mean(x²) + eps) · w`.
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / sqrt(ms + eps);
    for ((o, xi), wi) in out.iter_mut().zip(x).zip(w) {
        *o = xi * r * wi;
    }
}

/// In-place RMSNorm (see [`rmsnorm`]).
pub fn rmsnorm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let r = 1.0 / sqrt(ms + eps);
    for (xi, wi) in x.iter_mut().zip(w) {
        *xi = *xi * r * wi;
    }
}

/// l2norm as fla's `l2norm_fwd`: `x · rsqrt(Σx² + 1e-6)` (spec §6.2, golden README §5).
pub fn l2norm_in_place(x: &mut [f32]) {
    let r = 1.0 / sqrt(x.iter().map(|v| v * v).sum::<f32>() + 1e-6);
    for v in x {
        *v *= r;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values the quantizers feed `round_to_i8`: every f32 from −300 to 300 at and one ulp
    /// either side of each half-integer, a sweep of bit patterns over the whole range, and the
    /// specials; each must equal `roundf(x) as i8`.
    #[test]
    fn round_to_i8_is_roundf_then_as() {
        let check = |x: f32| {
            assert_eq!(
                round_to_i8(x),
                libm::roundf(x) as i8,
                "{x:e} ({:#x})",
                x.to_bits()
            )
        };
        for h in -600..=600 {
            let x = h as f32 * 0.5;
            for y in [
                x,
                f32::from_bits(x.to_bits().wrapping_add(1)),
                f32::from_bits(x.to_bits().wrapping_sub(1)),
            ] {
                check(y);
                check(-y);
            }
        }
        for bits in (0..=u32::MAX).step_by(4099) {
            check(f32::from_bits(bits));
        }
        for x in [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            2147483520.0,
            2147483648.0,
            -2147483648.0,
            -2147483904.0,
            0.49999997,
            -0.49999997,
            127.49999,
            -127.5,
            -128.5,
        ] {
            check(x);
        }
    }

    #[test]
    fn max_abs_is_the_fold_of_max() {
        let xs = [0.5f32, -3.0, f32::NAN, 2.0, -0.0];
        let fold = |x: &[f32]| x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert_eq!(max_abs(&xs), fold(&xs));
        assert_eq!(max_abs(&[]), 0.0);
        assert_eq!(max_abs(&[f32::NAN]).to_bits(), fold(&[f32::NAN]).to_bits());
        assert_eq!(max_abs(&[-f32::INFINITY, 1.0]), f32::INFINITY);
    }
}
