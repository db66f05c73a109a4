//! Shared by the cpu-prefill tests: the prefill-vs-stepping check, and the fixtures of
//! `loglinear_tests::prefill_fixture` (sessions, token streams, random models) re-exported.
#![allow(dead_code)]

use loglinear_cpu_prefill::{prefill, prefill_into, Prefill, PrefillOptions};
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::Model;
pub use loglinear_tests::prefill_fixture::*;
use loglinear_tests::{check_rel_max, tol};

/// Worst errors of one comparison.
#[derive(Clone, Copy, Debug, Default)]
pub struct Errors {
    pub states: f64,
    pub conv: f64,
    pub logits: f64,
    pub continued: f64,
}

impl Errors {
    pub fn max(self, o: Errors) -> Errors {
        Errors {
            states: self.states.max(o.states),
            conv: self.conv.max(o.conv),
            logits: self.logits.max(o.logits),
            continued: self.continued.max(o.continued),
        }
    }
}

/// Prefills `ids` chunkwise (2 threads) and steps them on a session: the Fenwick states, conv
/// states and last logits must agree within `tol`; then both continue `greedy` greedy steps
/// (the prefilled one after `prefill_into`) and must pick the same tokens with close logits.
pub fn prefill_vs_stepping(
    what: &str,
    model: &Model<'_>,
    ids: &[u32],
    levels: usize,
    greedy: usize,
    tol: f64,
) -> Errors {
    let opts = PrefillOptions {
        levels: Some(levels),
        threads: Some(2),
        all_logits: false,
    };
    let p: Prefill = prefill(model, ids, &opts).unwrap();
    assert_eq!(p.t, ids.len());
    assert_eq!(p.levels, levels);

    let mut a_step = arena(model, levels);
    let mut stepped = session(model, &mut a_step, levels);
    for &id in ids {
        stepped.step(id).unwrap();
    }
    let what = format!("{what} T={} levels={levels}", ids.len());
    let mut e = Errors {
        states: check_rel_max(
            &format!("{what} states"),
            &p.states,
            &wide(stepped.states()),
            tol,
        ),
        conv: check_rel_max(
            &format!("{what} conv"),
            &p.conv,
            &wide(stepped.conv_states()),
            tol,
        ),
        logits: check_rel_max(
            &format!("{what} last logits"),
            &p.last_logits,
            &wide(stepped.logits()),
            tol,
        ),
        continued: 0.0,
    };
    // Dead levels (nothing in their bucket after token T−1) are exactly zero in both.
    let c = model.config();
    let level_len = c.num_heads * c.head_k_dim * c.head_v_dim;
    let policy = stepped.policy();
    let last = ids.len() as u64 - 1;
    for (i, (ours, theirs)) in p
        .states
        .chunks_exact(level_len)
        .zip(stepped.states().chunks_exact(level_len))
        .enumerate()
    {
        let level = (i % levels) as u32;
        if !policy.is_live(last, level) {
            assert!(
                ours.iter().chain(theirs).all(|&x| x == 0.0),
                "{what}: dead level {level} of layer {} is not zero",
                i / levels
            );
        }
    }

    if greedy > 0 {
        let mut a_pre = arena(model, levels);
        let mut handed = session(model, &mut a_pre, levels);
        prefill_into(model, ids, &mut handed, &opts).unwrap();
        assert_eq!(handed.t(), ids.len() as u64);
        assert_eq!(handed.logits(), &p.last_logits[..]);
        let v = model.config().vocab_size;
        let mut scratch = vec![0u32; v];
        let mut s1 = Sampler::new(SamplerConfig::default());
        let mut s2 = Sampler::new(SamplerConfig::default());
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for i in 0..greedy {
            let a = s1.sample(handed.logits(), &mut scratch).unwrap();
            let b = s2.sample(stepped.logits(), &mut scratch).unwrap();
            assert_eq!(a, b, "{what}: greedy token {i} differs");
            ours.extend_from_slice(handed.step(a).unwrap());
            theirs.extend_from_slice(stepped.step(b).unwrap());
        }
        e.continued = check_rel_max(
            &format!("{what} continued logits"),
            &ours,
            &wide(&theirs),
            tol,
        );
    }
    e
}

/// The model tolerance of the golden README (logits, decode logits and model states).
pub const TOL: f64 = tol::MODEL;
