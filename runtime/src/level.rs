//! Fenwick-tree level assignment (spec §2) and the capacity policy.

/// Number of λ columns per head in every released model (official `MAX_NUM_LEVELS`,
/// T_max = 16384, spec §2.3). It is also the default number of state levels.
pub const LAMBDA_LEVELS: usize = 15;

/// Number of bits of `x`: ⌊log2 x⌋ + 1 for x > 0, and 0 for x = 0.
#[inline]
pub const fn bitlen(x: u64) -> u32 {
    u64::BITS - x.leading_zeros()
}

/// Levels that a sequence of `t` tokens reaches with no saturated top level: bitlen(t − 1) + 1
/// (1 for t ≤ 1). Training uses exactly these, one λ column each.
#[inline]
pub const fn exact_levels(t: u64) -> usize {
    bitlen(t.saturating_sub(1)) as usize + 1
}

/// Level of key `s` for query `t` (s ≤ t): 0 on the diagonal, else bitlen(t XOR s) (spec §2.1).
/// This is the unbounded rule; [`LevelPolicy`] says how a fixed number of levels saturates.
#[inline]
pub const fn level_of(t: u64, s: u64) -> u32 {
    if t == s {
        0
    } else {
        bitlen(t ^ s)
    }
}

/// How many levels a state keeps, and what happens when the sequence outgrows them.
///
/// # Capacity policy: a saturating top level
/// With `levels` = n the levels are 0..=top, top = n − 1. While t < 2^top the state is exactly
/// the Fenwick state of spec §4 (live levels {0} ∪ {ℓ : bit ℓ−1 of t}). The official decoder
/// crashes at t = 2^top (the merge would target level top+1). Here the merge target is clamped
/// to `top`, so level `top` becomes an "everything older" bucket:
///
/// * merge at token t > 0 goes into level `min(tz(t) + 1, top)`;
/// * levels 1..top−1 follow bit ℓ−1 of t exactly as before;
/// * level `top` holds every token s < ⌊t / 2^(top−1)⌋·2^(top−1), and is live iff t ≥ 2^(top−1).
///
/// Its weight is λ column `top`, the last trained column. Memory stays fixed forever and the
/// result is bit-identical to the unbounded Fenwick state for every t < 2^top.
///
/// `levels == 1` is the plain (single-state) recurrence of Mamba-2 and Gated DeltaNet: level 0
/// holds the whole history and nothing is ever merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LevelPolicy {
    levels: u32,
}

impl LevelPolicy {
    /// A policy with `levels` ≥ 1 levels; `None` for 0 or more than 64.
    pub const fn new(levels: usize) -> Option<Self> {
        if levels == 0 || levels > 64 {
            None
        } else {
            Some(Self {
                levels: levels as u32,
            })
        }
    }

    /// Number of allocated levels.
    #[inline]
    pub const fn levels(&self) -> usize {
        self.levels as usize
    }

    /// Index of the top level.
    #[inline]
    pub const fn top(&self) -> u32 {
        self.levels - 1
    }

    /// Tokens the state holds without saturating: 2^top (the official decoder's limit).
    pub const fn exact_capacity(&self) -> u64 {
        1u64 << self.top()
    }

    /// Level that levels `0..target` merge into at the start of the step for token `t`,
    /// or `None` when nothing merges (t = 0, or the plain single-state case).
    #[inline]
    pub const fn merge_target(&self, t: u64) -> Option<u32> {
        if t == 0 || self.levels == 1 {
            return None;
        }
        let m = t.trailing_zeros() + 1;
        Some(if m < self.top() { m } else { self.top() })
    }

    /// Whether level `l` holds tokens while token `t` is processed (after the merge).
    #[inline]
    pub const fn is_live(&self, t: u64, l: u32) -> bool {
        let top = self.top();
        if l == 0 {
            true
        } else if l > top {
            false
        } else if l == top {
            (t >> (top - 1)) != 0
        } else {
            (t >> (l - 1)) & 1 == 1
        }
    }

    /// The live levels ≥ 1 at token `t`, ascending, in O(popcount) time.
    #[inline]
    pub fn live_upper_levels(&self, t: u64) -> LiveLevels {
        let top = self.top();
        if top == 0 {
            return LiveLevels { bits: 0, top: None };
        }
        // Levels 1..top-1 are bits 0..top-2 of t.
        let mask = (1u64 << (top - 1)) - 1;
        LiveLevels {
            bits: t & mask,
            top: if (t >> (top - 1)) != 0 {
                Some(top)
            } else {
                None
            },
        }
    }

    /// The levels whose contents carry history into token `t` (after the merge), and so take
    /// the per-token transition: the live levels ≥ 1, or level 0 alone in the plain
    /// single-state case, where it holds the whole history.
    #[inline]
    pub fn history_levels(&self, t: u64) -> LiveLevels {
        if self.levels == 1 {
            LiveLevels {
                bits: 0,
                top: Some(0),
            }
        } else {
            self.live_upper_levels(t)
        }
    }

    /// Number of live levels at token `t`, level 0 included.
    pub fn live_count(&self, t: u64) -> usize {
        1 + self.live_upper_levels(t).count()
    }
}

/// Iterator over the live levels ≥ 1 (see [`LevelPolicy::live_upper_levels`]).
#[derive(Clone, Debug)]
pub struct LiveLevels {
    bits: u64,
    top: Option<u32>,
}

impl Iterator for LiveLevels {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.bits != 0 {
            let b = self.bits.trailing_zeros();
            self.bits &= self.bits - 1;
            Some(b + 1)
        } else {
            self.top.take()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example_of_spec_2_2() {
        let rows: [&[u32]; 9] = [
            &[0],
            &[1, 0],
            &[2, 2, 0],
            &[2, 2, 1, 0],
            &[3, 3, 3, 3, 0],
            &[3, 3, 3, 3, 1, 0],
            &[3, 3, 3, 3, 2, 2, 0],
            &[3, 3, 3, 3, 2, 2, 1, 0],
            &[4, 4, 4, 4, 4, 4, 4, 4, 0],
        ];
        for (t, row) in rows.iter().enumerate() {
            for (s, &l) in row.iter().enumerate() {
                assert_eq!(level_of(t as u64, s as u64), l, "t={t} s={s}");
            }
        }
    }

    #[test]
    fn live_levels_match_buckets_below_capacity() {
        let p = LevelPolicy::new(15).unwrap();
        for t in 0..(1u64 << 14) {
            let expect: u64 = (1..15).filter(|&l| (t >> (l - 1)) & 1 == 1).count() as u64;
            assert_eq!(p.live_upper_levels(t).count() as u64, expect);
            for l in p.live_upper_levels(t) {
                assert!(p.is_live(t, l));
                // A level holds exactly the keys whose level_of is l.
                let lo = (t >> l) << l;
                assert_eq!(level_of(t, lo), l);
            }
        }
    }

    #[test]
    fn plain_policy_has_one_level_and_never_merges() {
        let p = LevelPolicy::new(1).unwrap();
        assert_eq!(p.merge_target(12345), None);
        assert_eq!(p.live_count(12345), 1);
        assert!(LevelPolicy::new(0).is_none());
    }
}
