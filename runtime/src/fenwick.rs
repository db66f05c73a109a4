//! The Fenwick level state of one layer and its exact decode step (spec §4.2).
//!
//! Storage is a caller-provided slice laid out `[level][head][dk][dv]` (the golden files'
//! layout), in f32 or f16 ([`StateElem`]). Arithmetic is always f32; f16 only narrows what is
//! stored between steps.

use crate::level::LevelPolicy;

/// A scalar type the state can be stored in.
pub trait StateElem: Copy + Default + bytemuck::Pod + 'static {
    /// Short name for reports ("f32", "f16").
    const NAME: &'static str;
    /// Widen to f32.
    fn load(self) -> f32;
    /// Narrow from f32 (round to nearest even).
    fn store(x: f32) -> Self;
}

impl StateElem for f32 {
    const NAME: &'static str = "f32";
    #[inline(always)]
    fn load(self) -> f32 {
        self
    }
    #[inline(always)]
    fn store(x: f32) -> Self {
        x
    }
}

impl StateElem for half::f16 {
    const NAME: &'static str = "f16";
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(x: f32) -> Self {
        half::f16::from_f32(x)
    }
}

/// The per-level states of one layer: `levels × heads` matrices of `dk × dv`.
pub struct FenwickState<'a, E: StateElem> {
    data: &'a mut [E],
    policy: LevelPolicy,
    heads: usize,
    dk: usize,
    dv: usize,
}

/// Number of elements a [`FenwickState`] needs.
pub const fn state_len(levels: usize, heads: usize, dk: usize, dv: usize) -> usize {
    levels * heads * dk * dv
}

impl<'a, E: StateElem> FenwickState<'a, E> {
    /// Wraps `data`, which must hold exactly [`state_len`] elements; `None` otherwise.
    pub fn new(
        data: &'a mut [E],
        policy: LevelPolicy,
        heads: usize,
        dk: usize,
        dv: usize,
    ) -> Option<Self> {
        if data.len() != state_len(policy.levels(), heads, dk, dv) {
            return None;
        }
        Some(Self {
            data,
            policy,
            heads,
            dk,
            dv,
        })
    }

    /// The capacity policy.
    pub fn policy(&self) -> LevelPolicy {
        self.policy
    }

    #[inline]
    fn level_len(&self) -> usize {
        self.heads * self.dk * self.dv
    }

    #[inline]
    fn matrix_range(&self, level: u32, head: usize) -> core::ops::Range<usize> {
        let m = self.dk * self.dv;
        let start = level as usize * self.level_len() + head * m;
        start..start + m
    }

    /// The stored `dk × dv` matrix of one level and head (row-major, dk rows).
    pub fn matrix(&self, level: u32, head: usize) -> &[E] {
        &self.data[self.matrix_range(level, head)]
    }

    /// All stored elements, `[level][head][dk][dv]`.
    pub fn as_slice(&self) -> &[E] {
        self.data
    }

    /// All stored elements, mutable (for loading a state handed over from a prefill).
    pub fn as_mut_slice(&mut self) -> &mut [E] {
        self.data
    }

    /// Zeroes every level.
    pub fn clear(&mut self) {
        self.data.fill(E::default());
    }

    /// Step 1 of §4.2 for all heads: before token `t`, levels `0..target` are added into
    /// `target` and zeroed. Levels below the target are all live, so no dead level is touched.
    pub fn merge(&mut self, t: u64) {
        let Some(target) = self.policy.merge_target(t) else {
            return;
        };
        let n = self.level_len();
        let target = target as usize;
        let (low, high) = self.data.split_at_mut(target * n);
        let dst = &mut high[..n];
        for (i, d) in dst.iter_mut().enumerate() {
            // Same order as the reference: S[target] += (S[0] + … + S[target-1]).
            let mut acc = 0.0f32;
            for l in 0..target {
                acc += low[l * n + i].load();
            }
            *d = E::store(d.load() + acc);
        }
        low.fill(E::default());
    }

    /// Step 2 of §4.2, Mamba-2 form, one head: S ← α S on every level holding history
    /// ([`LevelPolicy::history_levels`]).
    pub fn transition_decay(&mut self, t: u64, head: usize, alpha: f32) {
        for l in self.policy.history_levels(t) {
            let r = self.matrix_range(l, head);
            for s in &mut self.data[r] {
                *s = E::store(alpha * s.load());
            }
        }
    }

    /// Step 2 of §4.2, Gated DeltaNet form, one head: S ← α (S − β k (kᵀ S)) on every level
    /// holding history. `u` is scratch of at least `dv` floats.
    pub fn transition_delta(
        &mut self,
        t: u64,
        head: usize,
        alpha: f32,
        beta: f32,
        k: &[f32],
        u: &mut [f32],
    ) {
        let (dk, dv) = (self.dk, self.dv);
        let u = &mut u[..dv];
        for l in self.policy.history_levels(t) {
            let r = self.matrix_range(l, head);
            let s = &mut self.data[r];
            // u = kᵀ S (a dv-vector), then one pass S[i][j] = α (S[i][j] − β k[i] u[j]).
            u.fill(0.0);
            for i in 0..dk {
                let ki = k[i];
                for (uj, sij) in u.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                    *uj += ki * sij.load();
                }
            }
            for i in 0..dk {
                let bk = beta * k[i];
                for (sij, uj) in s[i * dv..(i + 1) * dv].iter_mut().zip(u.iter()) {
                    *sij = E::store(alpha * (sij.load() - bk * uj));
                }
            }
        }
    }

    /// Step 3 of §4.2, one head: S[0] += β k vᵀ. After the merge level 0 is zero, so this is
    /// the spec's assignment; in the plain case it adds the token to the single state.
    pub fn insert(&mut self, head: usize, k: &[f32], v: &[f32], beta: f32) {
        let dv = self.dv;
        let r = self.matrix_range(0, head);
        let s = &mut self.data[r];
        for (i, &ki) in k.iter().enumerate().take(self.dk) {
            let bk = beta * ki;
            for (sij, &vj) in s[i * dv..(i + 1) * dv].iter_mut().zip(v) {
                *sij = E::store(sij.load() + bk * vj);
            }
        }
    }

    /// Step 4 of §4.2, one head: out = Σ_ℓ λ(ℓ) · S[ℓ]ᵀ q over the live levels only.
    pub fn read(
        &self,
        t: u64,
        head: usize,
        q: &[f32],
        lambda: impl Fn(u32) -> f32,
        out: &mut [f32],
    ) {
        let out = &mut out[..self.dv];
        out.fill(0.0);
        self.read_level(0, head, q, lambda(0), out);
        for l in self.policy.live_upper_levels(t) {
            self.read_level(l, head, q, lambda(l), out);
        }
    }

    #[inline]
    fn read_level(&self, level: u32, head: usize, q: &[f32], lam: f32, out: &mut [f32]) {
        let dv = self.dv;
        let s = &self.data[self.matrix_range(level, head)];
        for (i, &qi) in q.iter().enumerate().take(self.dk) {
            let w = lam * qi;
            for (o, sij) in out.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                *o += w * sij.load();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With 1×1 states, α = 1 and k = v = 1 every level's value is its token count, so the
    /// real merge code can be checked against the occupancy rule for long runs.
    fn run_counts(levels: usize, steps: u64, mut check: impl FnMut(u64, &[f32])) {
        let policy = LevelPolicy::new(levels).unwrap();
        let mut data = [0f32; 64];
        let mut st = FenwickState::new(&mut data[..levels], policy, 1, 1, 1).unwrap();
        for t in 0..steps {
            st.merge(t);
            st.transition_decay(t, 0, 1.0);
            st.insert(0, &[1.0], &[1.0], 1.0);
            check(t, st.as_slice());
        }
    }

    #[test]
    fn occupancy_follows_buckets_below_capacity() {
        run_counts(21, 1 << 16, |t, s| {
            assert_eq!(s[0], 1.0);
            for l in 1..21u32 {
                let want = if (t >> (l - 1)) & 1 == 1 {
                    (1u64 << (l - 1)) as f32
                } else {
                    0.0
                };
                assert_eq!(s[l as usize], want, "t={t} level={l}");
            }
        });
    }

    #[test]
    fn saturating_top_level_holds_everything_older() {
        let levels = 6; // top = 5: exact up to 32 tokens, saturating after
        let top = 5u32;
        run_counts(levels, 1000, |t, s| {
            let total: f32 = s.iter().sum();
            assert_eq!(total, (t + 1) as f32, "no token lost at t={t}");
            for l in 1..top {
                let want = if (t >> (l - 1)) & 1 == 1 {
                    (1u64 << (l - 1)) as f32
                } else {
                    0.0
                };
                assert_eq!(s[l as usize], want, "t={t} level={l}");
            }
            assert_eq!(
                s[top as usize],
                ((t >> (top - 1)) << (top - 1)) as f32,
                "t={t}"
            );
        });
    }
}
