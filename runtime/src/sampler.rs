//! Token selection: greedy, temperature, top-k and top-p, driven by a seeded PRNG.
//!
//! Determinism across targets: the PRNG is SplitMix64 (integer only), probabilities use
//! `libm`'s `expf` (the same software routine everywhere) and plain f32 arithmetic in a fixed
//! order, and ties break towards the lower token id. So a board and a host given the same
//! logits, seed and settings pick the same tokens.

use crate::math::exp;
use crate::rng::SplitMix64;

/// Sampling settings.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SamplerConfig {
    /// 0 means greedy (argmax). Otherwise logits are divided by it before softmax.
    pub temperature: f32,
    /// Keep only the k most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches p; 1 keeps all.
    pub top_p: f32,
    /// PRNG seed.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// A sampler with its PRNG state.
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: SplitMix64,
}

/// Why sampling could not proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SampleError {
    /// No logits were given.
    Empty,
    /// The index scratch is shorter than the logits.
    ScratchTooSmall,
}

impl core::fmt::Display for SampleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SampleError::Empty => "no logits to sample from",
            SampleError::ScratchTooSmall => "the sampler's scratch is shorter than the vocabulary",
        })
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SampleError {}

impl Sampler {
    /// A sampler seeded from `cfg.seed`.
    pub fn new(cfg: SamplerConfig) -> Self {
        Self {
            cfg,
            rng: SplitMix64::new(cfg.seed),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// The PRNG state (to save and restore a stream).
    pub fn rng_state(&self) -> u64 {
        self.rng.state
    }

    /// Restores a PRNG state from [`Sampler::rng_state`].
    pub fn set_rng_state(&mut self, s: u64) {
        self.rng.state = s;
    }

    /// Picks a token from `logits`. `scratch` needs `logits.len()` entries (it holds the
    /// candidate order). Greedy never touches the PRNG.
    pub fn sample(&mut self, logits: &[f32], scratch: &mut [u32]) -> Result<u32, SampleError> {
        if logits.is_empty() {
            return Err(SampleError::Empty);
        }
        if self.cfg.temperature <= 0.0 || self.cfg.top_k == 1 {
            return Ok(argmax(logits));
        }
        let n = logits.len();
        let idx = scratch.get_mut(..n).ok_or(SampleError::ScratchTooSmall)?;
        for (i, s) in idx.iter_mut().enumerate() {
            *s = i as u32;
        }
        let k = if self.cfg.top_k == 0 {
            n
        } else {
            self.cfg.top_k.min(n)
        };
        let cand = top_k(idx, k, logits);
        let inv_t = 1.0 / self.cfg.temperature;
        let max = logits[cand[0] as usize];
        let total: f32 = cand
            .iter()
            .map(|&i| exp((logits[i as usize] - max) * inv_t))
            .sum();
        // top-p: shortest prefix whose mass reaches p.
        let mut keep = cand.len();
        if self.cfg.top_p < 1.0 {
            let mut acc = 0.0;
            for (j, &i) in cand.iter().enumerate() {
                acc += exp((logits[i as usize] - max) * inv_t) / total;
                if acc >= self.cfg.top_p {
                    keep = j + 1;
                    break;
                }
            }
        }
        let cand = &cand[..keep];
        let mass: f32 = cand
            .iter()
            .map(|&i| exp((logits[i as usize] - max) * inv_t))
            .sum();
        let target = self.rng.unit_f32() * mass;
        let mut acc = 0.0;
        for &i in cand {
            acc += exp((logits[i as usize] - max) * inv_t);
            if target < acc {
                return Ok(i);
            }
        }
        Ok(cand[cand.len() - 1])
    }
}

/// Moves the `k` most likely of the token ids `idx` to its front, most likely first, and
/// returns them. The order is descending by logit and ascending by id on ties: a strict total
/// order, so the result is unique and equals that of any correct sort.
///
/// A heap written here rather than core's `select_nth_unstable` and `sort_unstable`: those
/// link about 4 KB of pattern-defeating quicksort into the firmware (a 64 KiB budget), for
/// vocabularies of a few hundred tokens that a heap orders as fast. Keeps the `k` best in a
/// heap whose root is the least likely of them, then sorts the heap in place.
fn top_k<'a>(idx: &'a mut [u32], k: usize, logits: &[f32]) -> &'a mut [u32] {
    let before = |a: u32, b: u32| {
        let (la, lb) = (logits[a as usize], logits[b as usize]);
        lb.total_cmp(&la).then(a.cmp(&b)).is_lt()
    };
    // Sifts `heap[i]` down until no child comes after it.
    let sift_down = |heap: &mut [u32], mut i: usize| loop {
        let left = 2 * i + 1;
        if left >= heap.len() {
            break;
        }
        let right = left + 1;
        let last = if right < heap.len() && before(heap[left], heap[right]) {
            right
        } else {
            left
        };
        if !before(heap[i], heap[last]) {
            break;
        }
        heap.swap(i, last);
        i = last;
    };
    let k = k.min(idx.len());
    for i in (0..k / 2).rev() {
        sift_down(&mut idx[..k], i);
    }
    for j in k..idx.len() {
        if k > 0 && before(idx[j], idx[0]) {
            idx.swap(0, j);
            sift_down(&mut idx[..k], 0);
        }
    }
    for end in (1..k).rev() {
        idx.swap(0, end);
        sift_down(&mut idx[..end], 0);
    }
    &mut idx[..k]
}

/// Index of the largest logit, the lowest index on ties (NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_is_argmax_with_low_tie_break() {
        let mut s = Sampler::new(SamplerConfig::default());
        let mut scratch = [0u32; 4];
        assert_eq!(s.sample(&[1.0, 3.0, 3.0, 0.0], &mut scratch), Ok(1));
    }

    #[test]
    fn top_k_one_and_tiny_top_p_are_greedy() {
        let logits = [0.5, 2.0, 1.0, -1.0];
        let mut scratch = [0u32; 4];
        for cfg in [
            SamplerConfig {
                temperature: 1.0,
                top_k: 1,
                ..Default::default()
            },
            SamplerConfig {
                temperature: 1.0,
                top_p: 1e-6,
                seed: 7,
                ..Default::default()
            },
        ] {
            let mut s = Sampler::new(cfg);
            for _ in 0..20 {
                assert_eq!(s.sample(&logits, &mut scratch), Ok(1));
            }
        }
    }

    #[test]
    fn top_k_never_leaves_the_top_set_and_seed_repeats() {
        let logits = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        let cfg = SamplerConfig {
            temperature: 2.0,
            top_k: 3,
            top_p: 1.0,
            seed: 42,
        };
        let mut a = Sampler::new(cfg);
        let mut b = Sampler::new(cfg);
        let mut scratch = [0u32; 6];
        let mut seen = [0u32; 6];
        for _ in 0..2000 {
            let x = a.sample(&logits, &mut scratch).unwrap();
            assert_eq!(b.sample(&logits, &mut scratch).unwrap(), x);
            seen[x as usize] += 1;
        }
        assert_eq!(&seen[..3], &[0, 0, 0]);
        assert!(
            seen[3] > 0 && seen[4] > seen[3] && seen[5] > seen[4],
            "{seen:?}"
        );
    }

    #[test]
    fn frequencies_follow_softmax() {
        let logits = [0.0f32, (2.0f32).ln(), (3.0f32).ln()]; // p = 1/6, 2/6, 3/6
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            seed: 1,
            ..Default::default()
        });
        let mut scratch = [0u32; 3];
        let mut seen = [0f32; 3];
        let n = 60_000;
        for _ in 0..n {
            seen[s.sample(&logits, &mut scratch).unwrap() as usize] += 1.0;
        }
        for (i, p) in [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0].iter().enumerate() {
            assert!((seen[i] / n as f32 - p).abs() < 0.01, "{seen:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn top_k_equals_a_full_sort(
            logits in proptest::collection::vec(-4i8..4, 1..300),
            k in 0usize..310,
            nan_at in proptest::option::of(0usize..300),
        ) {
            // Few distinct values, so ties are common; a NaN sorts as the largest value.
            let mut logits: Vec<f32> = logits.iter().map(|&v| f32::from(v) * 0.5).collect();
            if let Some(i) = nan_at.filter(|&i| i < logits.len()) {
                logits[i] = f32::NAN;
            }
            let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
            let mut sorted = idx.clone();
            sorted.sort_by(|&a, &b| {
                logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b))
            });
            let k = k.min(logits.len());
            proptest::prop_assert_eq!(top_k(&mut idx, k, &logits), &sorted[..k]);
        }
    }

    #[test]
    fn errors_instead_of_panics() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&[], &mut []), Err(SampleError::Empty));
        assert_eq!(
            s.sample(&[1.0, 2.0], &mut [0]),
            Err(SampleError::ScratchTooSmall)
        );
    }
}
