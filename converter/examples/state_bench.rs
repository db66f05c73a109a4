//! State-step benchmark: the Fenwick state maths of one layer alone (merge, transition,
//! insert, readout for every head), the separate-pass steps against the fused steps
//! (`FenwickState::step_delta` / `step_decay`), f32 and f16 storage, in one run.
//!
//! ```text
//! cargo run --release -p loglinear-converter --example state_bench [-- STEPS [LAYERS]]
//! ```
//!
//! Shapes are the shipped models' layers: ll-gdn-mcu (2 heads, dk 64, dv 128, 15 levels),
//! gdn-mcu (the same with 1 level: the plain recurrence) and ll-mamba2-mcu (4 heads,
//! dk = d_state 64, dv = head_dim 64, 15 levels). Two workloads: `t = 16383` repeated (all 15
//! levels live, a one-level merge) and a sweep over t = 12288..16384 (the mix of merges and
//! live-level counts of long contexts). The separate-pass side ("old") is the runtime's plain
//! steps (`transition_delta`, `transition_decay`, `insert`, `read`) after an
//! element-by-element merge written here (the runtime's merge works in column blocks). LAYERS
//! (default 4, the shipped models' depth) independent layer states are stepped in turn, so
//! that the state sizes and cache misses are those of decoding (4 f32 layers do not fit in a
//! 2 MiB L2). Old and new are interleaved repetition by repetition (the machine is shared) and
//! the median time per layer step is reported. Each run also checks that old and new give
//! bit-identical states and outputs.

use std::hint::black_box;
use std::time::Instant;

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use half::f16;
use loglinear_runtime::rng::SplitMix64;
use loglinear_runtime::{FenwickState, HeadStep, LevelPolicy, StateElem};

/// Repetitions per variant (median reported).
const REPS: usize = 9;
/// Levels of the shipped models.
const LEVELS: usize = 15;

/// Step 1 of §4.2 element by element: levels `0..target` added into `target` (each element's
/// levels summed in order from zero, as the blocked merge of the runtime does), then zeroed.
fn merge_elementwise<E: StateElem>(st: &mut FenwickState<'_, E>, sh: Shape, t: u64) {
    let Some(target) = st.policy().merge_target(t) else {
        return;
    };
    let n = sh.heads * sh.dk * sh.dv;
    let target = target as usize;
    let (low, high) = st.as_mut_slice().split_at_mut(target * n);
    for (i, d) in high[..n].iter_mut().enumerate() {
        let mut acc = 0.0f32;
        for l in 0..target {
            acc += low[l * n + i].load();
        }
        *d = E::store(d.load() + acc);
    }
    low.fill(E::default());
}

/// Values in [-1, 1) from the project's generator.
fn uniform(rng: &mut SplitMix64) -> f32 {
    rng.unit_f32() * 2.0 - 1.0
}

#[derive(Clone, Copy, PartialEq)]
enum Form {
    Delta,
    Decay,
}

/// One layer shape.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    form: Form,
    heads: usize,
    dk: usize,
    dv: usize,
    /// Allocated levels: 15, or 1 for the plain recurrence (gdn-mcu).
    levels: usize,
}

/// Per-head inputs of one step (the same every step: the timing does not depend on values).
struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    alpha: Vec<f32>,
    beta: Vec<f32>,
    lam: Vec<f32>,
}

impl Inputs {
    fn new(sh: Shape, rng: &mut SplitMix64) -> Self {
        let mut vecs = |n: usize| (0..n).map(|_| uniform(rng)).collect::<Vec<f32>>();
        let mut q = vecs(sh.heads * sh.dk);
        let mut k = vecs(sh.heads * sh.dk);
        let v = vecs(sh.heads * sh.dv);
        // Unit k and q as the GDN layer makes them (keeps α(I − βkkᵀ) a contraction).
        for x in q.chunks_exact_mut(sh.dk).chain(k.chunks_exact_mut(sh.dk)) {
            let n = x.iter().map(|a| a * a).sum::<f32>().sqrt();
            x.iter_mut().for_each(|a| *a /= n);
        }
        // α near 1 as in trained models: a smaller one would decay the levels that
        // `t = 16383` repeated never refreshes into f32 subnormals within a repetition,
        // which are slow on x86 and would time the subnormal path instead of the maths.
        let alpha = (0..sh.heads).map(|h| 0.999 - 0.0002 * h as f32).collect();
        let beta = (0..sh.heads).map(|h| 0.3 + 0.1 * h as f32).collect();
        let lam = (0..sh.heads * LEVELS)
            .map(|i| 0.5 + (i % 7) as f32 * 0.1)
            .collect();
        Self {
            q,
            k,
            v,
            alpha,
            beta,
            lam,
        }
    }
}

/// One layer step with the separate passes; outputs into `out` (heads × dv).
fn step_old<E: StateElem>(
    st: &mut FenwickState<'_, E>,
    sh: Shape,
    inp: &Inputs,
    t: u64,
    out: &mut [f32],
) {
    let mut u = vec![0f32; sh.dv];
    merge_elementwise(st, sh, t);
    for h in 0..sh.heads {
        let k = &inp.k[h * sh.dk..][..sh.dk];
        let q = &inp.q[h * sh.dk..][..sh.dk];
        let v = &inp.v[h * sh.dv..][..sh.dv];
        let o = &mut out[h * sh.dv..][..sh.dv];
        let lam = |l: u32| inp.lam[h * LEVELS + l as usize];
        match sh.form {
            Form::Delta => {
                st.transition_delta(t, h, inp.alpha[h], inp.beta[h], k, &mut u);
                st.insert(h, k, v, inp.beta[h]);
            }
            Form::Decay => {
                st.transition_decay(t, h, inp.alpha[h]);
                st.insert(h, k, v, 1.0);
            }
        }
        st.read(t, h, q, lam, o);
    }
}

/// One layer step with the fused code; outputs into `out` (heads × dv).
fn step_new<E: StateElem>(
    st: &mut FenwickState<'_, E>,
    sh: Shape,
    inp: &Inputs,
    t: u64,
    out: &mut [f32],
) {
    st.merge(t);
    for h in 0..sh.heads {
        let k = &inp.k[h * sh.dk..][..sh.dk];
        let q = &inp.q[h * sh.dk..][..sh.dk];
        let o = &mut out[h * sh.dv..][..sh.dv];
        o.copy_from_slice(&inp.v[h * sh.dv..][..sh.dv]);
        let step = HeadStep {
            t,
            head: h,
            k,
            q,
            lambda: |l: u32| inp.lam[h * LEVELS + l as usize],
            v_out: o,
        };
        match sh.form {
            Form::Delta => st.step_delta(step, inp.alpha[h], inp.beta[h]),
            Form::Decay => st.step_decay(step, inp.alpha[h]),
        }
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Times `steps` layer steps of old and new code at the positions `ts` (cycled), interleaved
/// over [`REPS`] repetitions; returns (old µs, new µs) per layer step, medians.
fn time_pair<E: StateElem>(sh: Shape, ts: &[u64], steps: usize, layers: usize) -> (f64, f64) {
    let policy = LevelPolicy::new(sh.levels).expect("levels");
    let len = sh.levels * sh.heads * sh.dk * sh.dv;
    let mut rng = SplitMix64::new(0x9e37_79b9_7f4a_7c15);
    let init: Vec<E> = (0..len)
        .map(|_| E::store(0.1 * uniform(&mut rng)))
        .collect();
    let inp = Inputs::new(sh, &mut rng);
    let mut out = vec![0f32; sh.heads * sh.dv];

    // Correctness first: the same steps from the same state give identical bits.
    let mut a = init.clone();
    let mut b = init.clone();
    let mut oa = out.clone();
    let mut ob = out.clone();
    {
        let mut old = FenwickState::new(&mut a, policy, sh.heads, sh.dk, sh.dv).expect("len");
        let mut new = FenwickState::new(&mut b, policy, sh.heads, sh.dk, sh.dv).expect("len");
        for &t in ts.iter().cycle().take(ts.len().min(64)) {
            step_old(&mut old, sh, &inp, t, &mut oa);
            step_new(&mut new, sh, &inp, t, &mut ob);
            let same_out = oa.iter().zip(&ob).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same_out,
                "{} {}: outputs differ at t = {t}",
                sh.name,
                E::NAME
            );
        }
    }
    let same_state = a
        .iter()
        .zip(&b)
        .all(|(x, y)| x.load().to_bits() == y.load().to_bits());
    assert!(same_state, "{} {}: states differ", sh.name, E::NAME);

    // `layers` independent layer states stepped in turn, as a model does: with 4 the state
    // (3.75 MiB in f32) no longer fits in L2, as in real decoding.
    let (mut t_old, mut t_new) = (Vec::new(), Vec::new());
    let per_step = (steps * layers) as f64;
    for _ in 0..REPS {
        let mut data = init.repeat(layers);
        let start = Instant::now();
        for &t in ts.iter().cycle().take(steps) {
            for layer in data.chunks_exact_mut(len) {
                let mut old =
                    FenwickState::new(layer, policy, sh.heads, sh.dk, sh.dv).expect("len");
                step_old(&mut old, sh, &inp, black_box(t), &mut out);
            }
        }
        black_box(&out);
        t_old.push(start.elapsed().as_secs_f64() * 1e6 / per_step);

        let mut data = init.repeat(layers);
        let start = Instant::now();
        for &t in ts.iter().cycle().take(steps) {
            for layer in data.chunks_exact_mut(len) {
                let mut new =
                    FenwickState::new(layer, policy, sh.heads, sh.dk, sh.dv).expect("len");
                step_new(&mut new, sh, &inp, black_box(t), &mut out);
            }
        }
        black_box(&out);
        t_new.push(start.elapsed().as_secs_f64() * 1e6 / per_step);
    }
    (median(t_old), median(t_new))
}

#[derive(Parser)]
#[command(about = "One layer's Fenwick state step: the separate-pass code against the fused steps")]
struct Args {
    /// Layer steps per repetition.
    #[arg(default_value_t = 2000)]
    steps: usize,
    /// Independent layer states stepped in turn.
    #[arg(default_value_t = 4, value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    layers: usize,
}

fn main() {
    let Args { steps, layers } = Args::parse();
    let shapes = [
        Shape {
            name: "ll-gdn-mcu",
            form: Form::Delta,
            heads: 2,
            dk: 64,
            dv: 128,
            levels: LEVELS,
        },
        Shape {
            name: "gdn-mcu (plain)",
            form: Form::Delta,
            heads: 2,
            dk: 64,
            dv: 128,
            levels: 1,
        },
        Shape {
            name: "ll-mamba2-mcu",
            form: Form::Decay,
            heads: 4,
            dk: 64,
            dv: 64,
            levels: LEVELS,
        },
    ];
    let fixed = [16383u64];
    let sweep: Vec<u64> = (12288..16384).collect();
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "state step of one layer, µs per layer step (median of {REPS}), {steps} steps of \
         {layers} layers per repetition; loadavg at start: {}",
        loadavg.trim()
    );
    println!("| shape | state | t | old µs | fused µs | old / fused |");
    println!("| --- | --- | --- | ---: | ---: | ---: |");
    for sh in shapes {
        for (label, ts) in [("16383", &fixed[..]), ("12288..16384", &sweep[..])] {
            let (o, n) = time_pair::<f32>(sh, ts, steps, layers);
            println!(
                "| {} | f32 | {label} | {o:.1} | {n:.1} | {:.2} |",
                sh.name,
                o / n
            );
            let (o, n) = time_pair::<f16>(sh, ts, steps, layers);
            println!(
                "| {} | f16 | {label} | {o:.1} | {n:.1} | {:.2} |",
                sh.name,
                o / n
            );
        }
    }
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg at end: {}", loadavg.trim());
}
