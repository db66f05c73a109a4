//! Multi-query associative recall (MQAR) data, the synthetic recall task of Zoology (Arora,
//! Eyuboglu et al., "Zoology: Measuring and improving recall in efficient language models"),
//! laid out as Zoology's `multiquery_ar` (`zoology/data/associative_recall.py`, `_mqar`) lays
//! it out, and the accuracy Zoology reports on it.
//!
//! One example of length `L` with `n` key–value pairs:
//!
//! * positions `0..2n`: `k_0 v_0 k_1 v_1 …`, keys distinct and drawn from `1..vocab/2`, values
//!   distinct and drawn from `vocab/2..vocab`;
//! * the rest holds one query per pair: pair `i`'s key again at position `2n + 2·g_i`, where the
//!   gaps `g_i` are distinct, drawn without replacement from `0..(L − 2n)/2` with probability
//!   ∝ `(g + 1)^(a − 1)` (the power law of `power_a = a`; Zoology's default 0.01 makes short
//!   gaps much likelier, as repeated bigrams in real text);
//! * every other position (odd offsets after the pairs, and unused query slots) is a uniformly
//!   random token of `0..vocab` (`random_non_queries`), or 0 without it;
//! * the target at a query's position is its pair's value (next-token prediction: after the
//!   key comes its value); every other position is ignored, which Zoology writes as label −100
//!   and this module as `mask = false` (target 0 there).
//!
//! Differences from Zoology, on purpose: the random stream. Zoology draws from numpy's global
//! Mersenne Twister for the whole set (`np.random.seed(seed)`) and from torch's for the random
//! fill; here each example has its own SplitMix64 stream seeded from `(seed, index)`, so an
//! example depends only on its seed and index (batches can be made in any order or in
//! parallel) and the data do not depend on numpy or torch versions. The distributions are the
//! same: uniform keys and values without replacement, numpy's successive weighted draws
//! without replacement for the gaps, uniform fill. Integers in `0..m` are taken as the high
//! 64 bits of `u64 × m` (bias below m/2^64, far under any measurable level).

use loglinear_runtime::rng::SplitMix64;

/// Why data could not be made or scored: the module's error, whose `Config`, `LengthMismatch`
/// and `LogitShape` are the data's.
pub use super::MqarError;

/// Zoology's vocabulary for MQAR.
pub const ZOOLOGY_VOCAB: usize = 8192;
/// The sequence length of these runs.
pub const ZOOLOGY_SEQ_LEN: usize = 256;
/// Key–value pair counts swept.
pub const ZOOLOGY_KV_PAIRS: [usize; 5] = [4, 8, 16, 32, 64];
/// Zoology's training examples per key–value setting (`original_mqar_configs.py`), in
/// `ZOOLOGY_KV_PAIRS` order: the default `--train-examples`, whose proportions a mixed batch
/// follows.
pub const ZOOLOGY_TRAIN_EXAMPLES: [usize; 5] = [100_000, 20_000, 20_000, 20_000, 20_000];
/// Zoology's power-law parameter for query gaps (train and test).
pub const ZOOLOGY_POWER_A: f64 = 0.01;
/// Zoology's test split uses the training seed plus this.
pub const ZOOLOGY_TEST_SEED_OFFSET: u64 = 10;

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MqarConfig {
    /// Vocabulary size; keys come from `1..vocab/2`, values from `vocab/2..vocab`.
    pub vocab_size: usize,
    /// Tokens per example.
    pub seq_len: usize,
    /// Key–value pairs per example (each is queried once).
    pub num_kv_pairs: usize,
    /// Power-law parameter of the query gaps (1.0: uniform).
    pub power_a: f64,
    /// Fill non-query positions with uniformly random tokens (else 0).
    pub random_non_queries: bool,
}

impl MqarConfig {
    /// Zoology's settings (vocab 8192, power_a 0.01, random fill) at length 256 with
    /// `num_kv_pairs` pairs.
    pub fn zoology(num_kv_pairs: usize) -> Self {
        Self {
            vocab_size: ZOOLOGY_VOCAB,
            seq_len: ZOOLOGY_SEQ_LEN,
            num_kv_pairs,
            power_a: ZOOLOGY_POWER_A,
            random_non_queries: true,
        }
    }

    /// Checks the settings as Zoology's asserts do, plus what makes the draws possible.
    pub fn check(&self) -> Result<(), MqarError> {
        let bad = |why: &'static str| Err(MqarError::Config(why));
        if self.seq_len == 0 || self.seq_len % 2 != 0 {
            return bad("seq_len must be even and positive");
        }
        if self.vocab_size <= self.seq_len {
            return bad("vocab_size must exceed seq_len");
        }
        if self.num_kv_pairs == 0 || self.num_kv_pairs * 4 > self.seq_len {
            return bad("num_kv_pairs must be positive and at most seq_len / 4");
        }
        if self.num_kv_pairs >= self.vocab_size / 2 {
            return bad("num_kv_pairs must be below vocab_size / 2 (distinct keys)");
        }
        if self.vocab_size > u32::MAX as usize {
            return bad("vocab_size must fit in u32");
        }
        if !(self.power_a.is_finite() && self.power_a > 0.0) {
            return bad("power_a must be positive and finite");
        }
        Ok(())
    }

    /// Where query slots begin: after the `2 · num_kv_pairs` key–value tokens.
    pub fn context_size(&self) -> usize {
        2 * self.num_kv_pairs
    }

    /// Number of possible gaps (query slots): `(seq_len − context_size) / 2`.
    pub fn gap_space(&self) -> usize {
        (self.seq_len - self.context_size()) / 2
    }
}

/// Examples stored row-major, `[examples][seq_len]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqarBatch {
    /// Tokens per example.
    pub seq_len: usize,
    /// Input tokens.
    pub inputs: Vec<u32>,
    /// Next-token targets; 0 where `mask` is false.
    pub targets: Vec<u32>,
    /// Whether a position is scored (a query; Zoology's label ≠ −100).
    pub mask: Vec<bool>,
}

impl MqarBatch {
    /// Number of examples.
    pub fn len(&self) -> usize {
        self.inputs.len() / self.seq_len.max(1)
    }

    /// Whether there is no example.
    pub fn is_empty(&self) -> bool {
        self.inputs.is_empty()
    }

    /// Zoology's labels: the target where scored, −100 elsewhere.
    pub fn labels_i64(&self) -> Vec<i64> {
        self.targets
            .iter()
            .zip(&self.mask)
            .map(|(&t, &m)| if m { i64::from(t) } else { -100 })
            .collect()
    }
}

/// Uniform in `0..m` (`m > 0`).
fn below(rng: &mut SplitMix64, m: usize) -> usize {
    rng.below(m as u64) as usize
}

/// The stream of example `index` of `seed`: the two are mixed through one SplitMix64 step
/// each, so neighbouring seeds and indices give unrelated streams.
fn example_rng(seed: u64, index: u64) -> SplitMix64 {
    let mut s = SplitMix64::new(seed);
    let a = s.next_u64();
    let mut i = SplitMix64::new(index ^ 0xD1B5_4A32_D192_ED03);
    SplitMix64::new(a ^ i.next_u64())
}

/// `count` distinct integers from `lo..hi`, uniformly, in draw order.
fn distinct(rng: &mut SplitMix64, lo: usize, hi: usize, count: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(count);
    while out.len() < count {
        let x = lo + below(rng, hi - lo);
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// `count` distinct indices of `weights`, drawn one after another with probability
/// proportional to the weights left (numpy's `choice(replace=False, p=…)`).
fn weighted_distinct(rng: &mut SplitMix64, weights: &[f64], count: usize) -> Vec<usize> {
    let mut left = weights.to_vec();
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let total: f64 = left.iter().sum();
        let mut u = rng.unit_f64() * total;
        // Falls back to the last positive weight if rounding runs past the end.
        let mut pick = left.iter().rposition(|&w| w > 0.0).unwrap_or(0);
        for (i, &w) in left.iter().enumerate() {
            if w > 0.0 && u < w {
                pick = i;
                break;
            }
            u -= w;
        }
        left[pick] = 0.0;
        out.push(pick);
    }
    out
}

/// The power-law weights of gaps `0..space`: `(g + 1)^(a − 1)`.
fn gap_weights(cfg: &MqarConfig) -> Vec<f64> {
    (1..=cfg.gap_space())
        .map(|i| (i as f64).powf(cfg.power_a - 1.0))
        .collect()
}

/// Writes example `index` of `seed` into `inputs`, `targets`, `mask` (each `seq_len` long).
fn write_example(
    cfg: &MqarConfig,
    weights: &[f64],
    seed: u64,
    index: u64,
    inputs: &mut [u32],
    targets: &mut [u32],
    mask: &mut [bool],
) {
    let mut rng = example_rng(seed, index);
    let n = cfg.num_kv_pairs;
    let half = cfg.vocab_size / 2;
    let keys = distinct(&mut rng, 1, half, n);
    let values = distinct(&mut rng, half, cfg.vocab_size, n);
    let gaps = weighted_distinct(&mut rng, weights, n);
    let mut filled = vec![false; cfg.seq_len];
    for i in 0..n {
        inputs[2 * i] = keys[i] as u32;
        inputs[2 * i + 1] = values[i] as u32;
        filled[2 * i] = true;
        filled[2 * i + 1] = true;
        let q = cfg.context_size() + 2 * gaps[i];
        inputs[q] = keys[i] as u32;
        targets[q] = values[i] as u32;
        mask[q] = true;
        filled[q] = true;
    }
    for (x, _) in inputs.iter_mut().zip(&filled).filter(|(_, &f)| !f) {
        *x = if cfg.random_non_queries {
            below(&mut rng, cfg.vocab_size) as u32
        } else {
            0
        };
    }
}

/// Examples `first..first + count` of `seed`: example `i` depends only on `(cfg, seed, i)`.
pub fn generate_range(
    cfg: &MqarConfig,
    seed: u64,
    first: u64,
    count: usize,
) -> Result<MqarBatch, MqarError> {
    cfg.check()?;
    let l = cfg.seq_len;
    let weights = gap_weights(cfg);
    let mut batch = MqarBatch {
        seq_len: l,
        inputs: vec![0; count * l],
        targets: vec![0; count * l],
        mask: vec![false; count * l],
    };
    for (e, ((inputs, targets), mask)) in batch
        .inputs
        .chunks_exact_mut(l)
        .zip(batch.targets.chunks_exact_mut(l))
        .zip(batch.mask.chunks_exact_mut(l))
        .enumerate()
    {
        write_example(cfg, &weights, seed, first + e as u64, inputs, targets, mask);
    }
    Ok(batch)
}

/// `count` examples of `seed` (examples `0..count`).
pub fn generate(cfg: &MqarConfig, seed: u64, count: usize) -> Result<MqarBatch, MqarError> {
    generate_range(cfg, seed, 0, count)
}

/// Zoology's split: `train` examples of `seed` and `test` examples of `seed + 10`.
pub fn train_test(
    cfg: &MqarConfig,
    seed: u64,
    train: usize,
    test: usize,
) -> Result<(MqarBatch, MqarBatch), MqarError> {
    Ok((
        generate(cfg, seed, train)?,
        generate(cfg, seed.wrapping_add(ZOOLOGY_TEST_SEED_OFFSET), test)?,
    ))
}

/// Accuracy on the scored positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqarAccuracy {
    /// Scored positions predicted right.
    pub correct: usize,
    /// Scored positions.
    pub scored: usize,
}

impl MqarAccuracy {
    /// Fraction right (Zoology's `valid/accuracy`: the mean over all non-ignored labels);
    /// 0 when nothing is scored.
    pub fn fraction(&self) -> f64 {
        if self.scored == 0 {
            0.0
        } else {
            self.correct as f64 / self.scored as f64
        }
    }
}

/// Accuracy of predicted tokens (argmax per position) against the targets where `mask` holds.
pub fn mqar_accuracy(
    predictions: &[u32],
    targets: &[u32],
    mask: &[bool],
) -> Result<MqarAccuracy, MqarError> {
    if predictions.len() != targets.len() || targets.len() != mask.len() {
        return Err(MqarError::LengthMismatch {
            predictions: predictions.len(),
            targets: targets.len(),
            mask: mask.len(),
        });
    }
    let (mut correct, mut scored) = (0, 0);
    for ((&p, &t), _) in predictions
        .iter()
        .zip(targets)
        .zip(mask)
        .filter(|(_, &m)| m)
    {
        scored += 1;
        correct += usize::from(p == t);
    }
    Ok(MqarAccuracy { correct, scored })
}

/// [`mqar_accuracy`] from logits `[positions][vocab]`, taking the first largest logit of each
/// row (the runtime's greedy choice).
pub fn mqar_accuracy_from_logits(
    logits: &[f32],
    vocab: usize,
    targets: &[u32],
    mask: &[bool],
) -> Result<MqarAccuracy, MqarError> {
    if vocab == 0 || logits.len() % vocab != 0 {
        return Err(MqarError::LogitShape {
            len: logits.len(),
            vocab,
        });
    }
    let predictions: Vec<u32> = logits
        .chunks_exact(vocab)
        .map(loglinear_runtime::sampler::argmax)
        .collect();
    mqar_accuracy(&predictions, targets, mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_draws_follow_the_weights() {
        // Two of weights [1, 3]: both are always drawn; the first draw is index 1 three times
        // in four.
        let mut rng = SplitMix64::new(7);
        let (mut first_is_1, n) = (0, 20_000);
        for _ in 0..n {
            let d = weighted_distinct(&mut rng, &[1.0, 3.0], 2);
            assert!(d == [0, 1] || d == [1, 0]);
            first_is_1 += usize::from(d[0] == 1);
        }
        let f = first_is_1 as f64 / n as f64;
        assert!((f - 0.75).abs() < 0.015, "{f}");
    }
}
