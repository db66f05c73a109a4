//! Random test data from the project's one generator, [`SplitMix64`]: a seed gives the same
//! values in every test and on every machine.

pub use loglinear_runtime::rng::SplitMix64;

/// Uniform in `[-1, 1)`.
pub fn symmetric(r: &mut SplitMix64) -> f64 {
    2.0 * r.unit_f64() - 1.0
}

/// `n` values uniform in `[-scale, scale)`.
pub fn uniform_f32(r: &mut SplitMix64, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| (2.0 * r.unit_f32() - 1.0) * scale).collect()
}

/// A standard normal value (Box–Muller; the first uniform is taken in `(0, 1]` so that its
/// logarithm is finite).
pub fn normal(r: &mut SplitMix64) -> f64 {
    let u1 = 1.0 - r.unit_f64();
    let u2 = r.unit_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_their_ranges_and_have_the_right_moments() {
        let mut r = SplitMix64::new(7);
        let n = 100_000;
        let s: Vec<f64> = (0..n).map(|_| symmetric(&mut r)).collect();
        assert!(s.iter().all(|x| (-1.0..1.0).contains(x)));
        let u = uniform_f32(&mut r, n, 3.0);
        assert!(u.iter().all(|x| (-3.0..3.0).contains(x)));
        let z: Vec<f64> = (0..n).map(|_| normal(&mut r)).collect();
        assert!(z.iter().all(|x| x.is_finite()));
        let mean = z.iter().sum::<f64>() / n as f64;
        let var = z.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
    }
}
