//! Properties of the Fenwick state: the live-level rule over a million tokens, and the state
//! and outputs against the quadratic (parallel) definition on random small cases, with and
//! without a saturating top level.

use loglinear_runtime::{level_of, FenwickState, LevelPolicy};
use loglinear_tests::random::{symmetric, SplitMix64};
use proptest::prelude::*;

/// 1×1 states with α = 1 and k = v = 1 hold token counts: the real merge code, checked
/// against the occupancy rule of spec §4.1 at every t < 2^20.
#[test]
fn live_levels_are_level_zero_and_the_set_bits_of_t_up_to_2_pow_20() {
    let levels = 21;
    let policy = LevelPolicy::new(levels).unwrap();
    let mut data = vec![0f32; levels];
    let mut st = FenwickState::new(&mut data, policy, 1, 1, 1).unwrap();
    for t in 0..(1u64 << 20) {
        st.merge(t);
        st.transition_decay(t, 0, 1.0);
        st.insert(0, &[1.0], &[1.0], 1.0);
        let s = st.as_slice();
        let mut expected_live = 1;
        assert_eq!(s[0], 1.0);
        for l in 1..levels as u32 {
            let live = (t >> (l - 1)) & 1 == 1;
            expected_live += live as usize;
            assert_eq!(policy.is_live(t, l), live, "t={t} l={l}");
            let want = if live { (1u64 << (l - 1)) as f32 } else { 0.0 };
            assert_eq!(s[l as usize], want, "t={t} level {l}");
        }
        assert_eq!(policy.live_count(t), expected_live, "t={t}");
    }
}

proptest! {
    #[test]
    fn live_level_iterator_matches_the_bit_rule(t in 0u64..(1 << 20), levels in 1usize..=21) {
        let p = LevelPolicy::new(levels).unwrap();
        let top = levels as u32 - 1;
        let got: Vec<u32> = p.live_upper_levels(t).collect();
        let want: Vec<u32> = (1..=top)
            .filter(|&l| if l == top { t >> (l - 1) != 0 } else { (t >> (l - 1)) & 1 == 1 })
            .collect();
        prop_assert_eq!(got, want);
    }
}

/// Random operator inputs `[T][heads][..]` and the shape they were made for.
struct Inputs {
    heads: usize,
    dk: usize,
    /// GDN (β and the delta rule) or Mamba-2 (β = 1, decay only).
    gdn: bool,
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
    g: Vec<f64>,
    beta: Vec<f64>,
    lam: Vec<f64>,
}

/// f32-representable random inputs, [T][H][..].
fn inputs(seed: u64, t_len: usize, h: usize, dk: usize, dv: usize, gdn: bool, nl: usize) -> Inputs {
    let mut r = SplitMix64::new(seed);
    let f = |x: f64| x as f32 as f64;
    let mut k: Vec<f64> = (0..t_len * h * dk).map(|_| symmetric(&mut r)).collect();
    if gdn {
        for row in k.chunks_mut(dk) {
            let n = row.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-3);
            row.iter_mut().for_each(|x| *x /= n);
        }
    }
    Inputs {
        heads: h,
        dk,
        gdn,
        q: (0..t_len * h * dk).map(|_| f(symmetric(&mut r))).collect(),
        k: k.into_iter().map(f).collect(),
        v: (0..t_len * h * dv).map(|_| f(symmetric(&mut r))).collect(),
        g: (0..t_len * h).map(|_| f(-0.3 * r.unit_f64())).collect(),
        beta: (0..t_len * h)
            .map(|_| f(if gdn { r.unit_f64() } else { 1.0 }))
            .collect(),
        lam: (0..t_len * h * nl).map(|_| f(2.0 * r.unit_f64())).collect(),
    }
}

/// [Π_{r=s+1..t} A_r] x for head `hh`, with A_r = α_r (I − β_r k_r k_rᵀ) (GDN) or α_r I, in f64.
fn carry(x: &mut [f64], inp: &Inputs, s: usize, t: usize, hh: usize) {
    let (h, dk, gdn) = (inp.heads, inp.dk, inp.gdn);
    for r in s + 1..=t {
        let i = r * h + hh;
        if gdn {
            let kr = &inp.k[i * dk..][..dk];
            let d: f64 = kr.iter().zip(x.iter()).map(|(a, b)| a * b).sum();
            x.iter_mut()
                .zip(kr)
                .for_each(|(xi, ki)| *xi -= inp.beta[i] * ki * d);
        }
        x.iter_mut().for_each(|xi| *xi *= inp.g[i].exp());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn fenwick_matches_the_quadratic_definition(
        seed in any::<u64>(), gdn in any::<bool>(), t_len in 1usize..90, h in 1usize..3,
        dk in 1usize..6, dv in 1usize..5, levels in prop::sample::select(vec![2usize, 3, 4, 5, 7, 15]),
    ) {
        let nl = 15;
        let inp = inputs(seed, t_len, h, dk, dv, gdn, nl);
        let policy = LevelPolicy::new(levels).unwrap();
        let top = policy.top();
        // Saturated level of a key: min(level_of, top) (see LevelPolicy).
        let lev = |t: usize, s: usize| level_of(t as u64, s as u64).min(top);

        // Quadratic reference outputs, f64.
        let mut o_ref = vec![0f64; t_len * h * dv];
        for t in 0..t_len {
            for hh in 0..h {
                let i = t * h + hh;
                for s in 0..=t {
                    let j = s * h + hh;
                    let mut w = inp.k[j * dk..][..dk].to_vec();
                    carry(&mut w, &inp, s, t, hh);
                    let qk: f64 = inp.q[i * dk..][..dk].iter().zip(&w).map(|(a, b)| a * b).sum();
                    let p = inp.lam[i * nl + lev(t, s) as usize] * inp.beta[j] * qk;
                    for c in 0..dv {
                        o_ref[i * dv + c] += p * inp.v[j * dv + c];
                    }
                }
            }
        }

        // The decoder, f32.
        let mut data = vec![0f32; levels * h * dk * dv];
        let mut st = FenwickState::new(&mut data, policy, h, dk, dv).unwrap();
        let mut o = vec![0f32; t_len * h * dv];
        let mut u = vec![0f32; dv];
        let f = |x: &[f64]| x.iter().map(|&v| v as f32).collect::<Vec<f32>>();
        for t in 0..t_len {
            st.merge(t as u64);
            for hh in 0..h {
                let i = t * h + hh;
                let (q, k, v) = (f(&inp.q[i * dk..][..dk]), f(&inp.k[i * dk..][..dk]), f(&inp.v[i * dv..][..dv]));
                let alpha = (inp.g[i] as f32).exp();
                if gdn {
                    st.transition_delta(t as u64, hh, alpha, inp.beta[i] as f32, &k, &mut u);
                } else {
                    st.transition_decay(t as u64, hh, alpha);
                }
                st.insert(hh, &k, &v, inp.beta[i] as f32);
                let lam = |l: u32| inp.lam[i * nl + l as usize] as f32;
                st.read(t as u64, hh, &q, lam, &mut o[i * dv..][..dv]);
            }
        }
        let e = loglinear_tests::rel_max(&o, &o_ref);
        prop_assert!(e < 2e-5, "outputs rel_max {e:e}");

        // States after the last token against the bucket definition. The metric is the golden
        // README's, per state tensor (all levels of a head): a saturated level can decay to
        // f32 denormals, where a per-level ratio would measure underflow, not the algorithm.
        let t = t_len - 1;
        let m = dk * dv;
        for hh in 0..h {
            let mut ours = Vec::new();
            let mut refs = Vec::new();
            for l in 0..levels as u32 {
                let mut s_ref = vec![0f64; m];
                for s in (0..=t).filter(|&s| lev(t, s) == l) {
                    let j = s * h + hh;
                    let mut w = inp.k[j * dk..][..dk].to_vec();
                    carry(&mut w, &inp, s, t, hh);
                    for a in 0..dk {
                        for c in 0..dv {
                            s_ref[a * dv + c] += inp.beta[j] * w[a] * inp.v[j * dv + c];
                        }
                    }
                }
                let level = st.matrix(l, hh);
                if !policy.is_live(t as u64, l) {
                    prop_assert!(level.iter().all(|&x| x == 0.0), "dead level {l} not zero");
                    prop_assert!(s_ref.iter().all(|&x| x == 0.0), "bucket of dead level {l} not empty");
                }
                ours.extend_from_slice(level);
                refs.extend(s_ref);
            }
            let e = loglinear_tests::rel_max(&ours, &refs);
            prop_assert!(e < 2e-5, "head {hh} states: rel_max {e:e}");
        }
    }
}
