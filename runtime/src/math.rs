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
