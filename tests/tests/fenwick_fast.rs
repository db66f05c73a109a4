//! The fused state steps (`FenwickState::step_delta`, `step_decay`) and the blocked merge
//! against a straightforward reference written here: the separate passes of spec §4.2
//! (merge, transition, insert, readout), element by element, unfused. f32 and f16 storage,
//! random states, positions with different live-level sets (plain, below capacity, saturated),
//! shapes whose dv is and is not a multiple of the column blocks. Both must agree within 1e-6 relative (they are meant to be bit-identical).

use half::f16;
use loglinear_runtime::rng::SplitMix64;
use loglinear_runtime::{FenwickState, HeadStep, LevelPolicy, StateElem};

/// Relative tolerance of the comparison (the maths is the same, in the same order).
const TOL: f64 = 1e-6;

/// Deterministic test values in [-1, 1), from the runtime's generator.
struct Rng(SplitMix64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0.unit_f32() * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Form {
    Delta,
    Decay,
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    levels: usize,
    heads: usize,
    dk: usize,
    dv: usize,
}

/// The reference: §4.2 steps 1–4 for every head, separate passes, `[level][head][dk][dv]`.
struct Reference<'a, E: StateElem> {
    s: &'a mut [E],
    policy: LevelPolicy,
    sh: Shape,
}

impl<E: StateElem> Reference<'_, E> {
    fn at(&self, l: usize, h: usize, i: usize, j: usize) -> usize {
        ((l * self.sh.heads + h) * self.sh.dk + i) * self.sh.dv + j
    }

    fn merge(&mut self, t: u64) {
        let Some(target) = self.policy.merge_target(t) else {
            return;
        };
        let n = self.sh.heads * self.sh.dk * self.sh.dv;
        let target = target as usize;
        for e in 0..n {
            let mut acc = 0.0f32;
            for l in 0..target {
                acc += self.s[l * n + e].load();
            }
            let d = &mut self.s[target * n + e];
            *d = E::store(d.load() + acc);
        }
        for x in &mut self.s[..target * n] {
            *x = E::default();
        }
    }

    /// Transition, insert and readout of head `h`; returns the readout.
    fn head_step(&mut self, t: u64, h: usize, form: Form, head: &HeadInputs<'_>) -> Vec<f32> {
        let Shape { dk, dv, .. } = self.sh;
        let HeadInputs {
            alpha,
            beta,
            k,
            q,
            v,
            lam,
        } = *head;
        let history: Vec<u32> = self.policy.history_levels(t).collect();
        for &l in &history {
            let l = l as usize;
            match form {
                Form::Delta => {
                    let mut u = vec![0.0f32; dv];
                    for (i, &ki) in k.iter().enumerate() {
                        for (j, uj) in u.iter_mut().enumerate() {
                            *uj += ki * self.s[self.at(l, h, i, j)].load();
                        }
                    }
                    for (i, &ki) in k.iter().enumerate() {
                        let bk = beta * ki;
                        for (j, &uj) in u.iter().enumerate() {
                            let e = self.at(l, h, i, j);
                            self.s[e] = E::store(alpha * (self.s[e].load() - bk * uj));
                        }
                    }
                }
                Form::Decay => {
                    for i in 0..dk {
                        for j in 0..dv {
                            let e = self.at(l, h, i, j);
                            self.s[e] = E::store(alpha * self.s[e].load());
                        }
                    }
                }
            }
        }
        let b = if form == Form::Delta { beta } else { 1.0 };
        for (i, &ki) in k.iter().enumerate() {
            let bk = b * ki;
            for (j, &vj) in v.iter().enumerate() {
                let e = self.at(0, h, i, j);
                self.s[e] = E::store(self.s[e].load() + bk * vj);
            }
        }
        let mut out = vec![0.0f32; dv];
        let live = core::iter::once(0).chain(self.policy.live_upper_levels(t));
        for l in live {
            let w0 = lam[l as usize];
            for (i, &qi) in q.iter().enumerate() {
                let w = w0 * qi;
                for (j, o) in out.iter_mut().enumerate() {
                    *o += w * self.s[self.at(l as usize, h, i, j)].load();
                }
            }
        }
        out
    }
}

/// Per-step inputs for every head.
struct Inputs {
    alpha: Vec<f32>,
    beta: Vec<f32>,
    k: Vec<f32>,
    q: Vec<f32>,
    v: Vec<f32>,
    lam: Vec<f32>,
}

/// One head's inputs at one step.
#[derive(Clone, Copy)]
struct HeadInputs<'a> {
    alpha: f32,
    beta: f32,
    k: &'a [f32],
    q: &'a [f32],
    v: &'a [f32],
    lam: &'a [f32],
}

impl Inputs {
    fn head(&self, sh: Shape, h: usize) -> HeadInputs<'_> {
        HeadInputs {
            alpha: self.alpha[h],
            beta: self.beta[h],
            k: &self.k[h * sh.dk..][..sh.dk],
            q: &self.q[h * sh.dk..][..sh.dk],
            v: &self.v[h * sh.dv..][..sh.dv],
            lam: &self.lam[h * sh.levels..][..sh.levels],
        }
    }
}

fn inputs(sh: Shape, rng: &mut Rng) -> Inputs {
    let mut k = rng.vec(sh.heads * sh.dk);
    for kh in k.chunks_exact_mut(sh.dk) {
        let n = kh.iter().map(|x| x * x).sum::<f32>().sqrt();
        kh.iter_mut().for_each(|x| *x /= n);
    }
    Inputs {
        alpha: (0..sh.heads)
            .map(|_| 0.8 + 0.2 * rng.next().abs())
            .collect(),
        beta: (0..sh.heads).map(|_| 0.5 + 0.5 * rng.next()).collect(),
        k,
        q: rng.vec(sh.heads * sh.dk),
        v: rng.vec(sh.heads * sh.dv),
        lam: (0..sh.heads * sh.levels)
            .map(|_| 1.0 + rng.next())
            .collect(),
    }
}

/// max |a − b| / max |b|, NaN-safe (a NaN anywhere gives infinity).
fn rel(a: &[f32], b: &[f32]) -> f64 {
    let num = a
        .iter()
        .zip(b)
        .map(|(x, y)| {
            let d = (*x as f64 - *y as f64).abs();
            if d.is_nan() {
                f64::INFINITY
            } else {
                d
            }
        })
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| (*y as f64).abs()).fold(0.0, f64::max);
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Runs `steps` consecutive steps from position `t0`, from the same random state, with the
/// reference and with the fused code, comparing every output and the final states. Returns
/// the largest relative difference seen.
fn compare<E: StateElem>(sh: Shape, form: Form, t0: u64, steps: u64, seed: u64) -> f64 {
    let policy = LevelPolicy::new(sh.levels).unwrap();
    let len = sh.levels * sh.heads * sh.dk * sh.dv;
    let mut rng = Rng(SplitMix64::new(seed));
    let init: Vec<E> = (0..len).map(|_| E::store(rng.next())).collect();
    let mut a = init.clone();
    let mut b = init;
    let mut worst = 0.0f64;
    let mut reference = Reference {
        s: &mut a,
        policy,
        sh,
    };
    let mut fused = FenwickState::new(&mut b, policy, sh.heads, sh.dk, sh.dv).unwrap();
    for t in t0..t0 + steps {
        let inp = inputs(sh, &mut rng);
        reference.merge(t);
        fused.merge(t);
        for h in 0..sh.heads {
            let head = inp.head(sh, h);
            let want = reference.head_step(t, h, form, &head);
            let HeadInputs {
                alpha,
                beta,
                k,
                q,
                v,
                lam,
            } = head;
            let mut got = v.to_vec();
            let step = HeadStep {
                t,
                head: h,
                k,
                q,
                lambda: |l: u32| lam[l as usize],
                v_out: &mut got,
            };
            match form {
                Form::Delta => fused.step_delta(step, alpha, beta),
                Form::Decay => fused.step_decay(step, alpha),
            }
            let e = rel(&got, &want);
            assert!(
                e <= TOL,
                "{} {form:?} {sh:?} t={t} head {h}: output differs by {e:e}",
                E::NAME
            );
            worst = worst.max(e);
        }
    }
    let sa: Vec<f32> = reference.s.iter().map(|x| x.load()).collect();
    let sb: Vec<f32> = fused.as_slice().iter().map(|x| x.load()).collect();
    let e = rel(&sb, &sa);
    assert!(
        e <= TOL,
        "{} {form:?} {sh:?} t0={t0}: state differs by {e:e}",
        E::NAME
    );
    worst.max(e)
}

/// Shapes: the shipped models' (dv 128 and 64), dv not a multiple of the blocks (exercising
/// the narrow and single-column tails), a saturating 5-level policy and the plain one.
const SHAPES: [Shape; 6] = [
    Shape {
        levels: 15,
        heads: 2,
        dk: 64,
        dv: 128,
    },
    Shape {
        levels: 15,
        heads: 4,
        dk: 64,
        dv: 64,
    },
    Shape {
        levels: 15,
        heads: 2,
        dk: 7,
        dv: 83,
    },
    Shape {
        levels: 5,
        heads: 3,
        dk: 5,
        dv: 21,
    },
    Shape {
        levels: 1,
        heads: 2,
        dk: 9,
        dv: 70,
    },
    Shape {
        levels: 1,
        heads: 1,
        dk: 4,
        dv: 3,
    },
];

/// Positions with different live-level sets: t = 0 (no merge), small t, all levels live
/// below capacity (16383), the first saturated merge (16384) and deep in saturation.
const POSITIONS: [u64; 9] = [0, 1, 2, 3, 6, 100, 1023, 16383, 16384 + 4095];

fn check_all<E: StateElem>(form: Form) {
    let mut worst = 0.0f64;
    for (si, sh) in SHAPES.iter().enumerate() {
        for (pi, &t) in POSITIONS.iter().enumerate() {
            let seed = 0x1234_5678 ^ ((si as u64) << 32) ^ ((pi as u64) << 40);
            worst = worst.max(compare::<E>(*sh, form, t, 3, seed));
        }
        // A run of consecutive steps from 0: merges of every depth up to 2^6.
        worst = worst.max(compare::<E>(*sh, form, 0, 70, 0xfeed ^ si as u64));
    }
    println!("{} {form:?}: worst relative difference {worst:e}", E::NAME);
}

#[test]
fn fused_delta_matches_reference_f32() {
    check_all::<f32>(Form::Delta);
}

#[test]
fn fused_delta_matches_reference_f16() {
    check_all::<f16>(Form::Delta);
}

#[test]
fn fused_decay_matches_reference_f32() {
    check_all::<f32>(Form::Decay);
}

#[test]
fn fused_decay_matches_reference_f16() {
    check_all::<f16>(Form::Decay);
}

/// The fused steps leave nothing to chance on short inputs: slices shorter than dk or dv
/// make them do nothing (no panic, no change).
#[test]
fn short_inputs_do_nothing() {
    let policy = LevelPolicy::new(3).unwrap();
    let mut data = vec![0.5f32; 3 * 2 * 4];
    let before = data.clone();
    let mut st = FenwickState::new(&mut data, policy, 1, 2, 4).unwrap();
    let mut out = [1.0f32; 4];
    let short_k = HeadStep {
        t: 5,
        head: 0,
        k: &[1.0],
        q: &[1.0, 0.0],
        lambda: |_| 1.0,
        v_out: &mut out,
    };
    st.step_delta(short_k, 0.9, 0.5);
    let short_v = HeadStep {
        t: 5,
        head: 0,
        k: &[1.0, 0.0],
        q: &[1.0, 0.0],
        lambda: |_| 1.0,
        v_out: &mut out[..3],
    };
    st.step_decay(short_v, 0.9);
    assert_eq!(out, [1.0; 4]);
    assert_eq!(st.as_slice(), &before[..]);
}
