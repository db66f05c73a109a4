//! The GPU chunk scan against the CPU runtime decoder (`FenwickState` stepped token by token,
//! with the saturating `LevelPolicy`) for few levels, where the top level holds everything older:
//! outputs and the final state, both forms, partial chunks, shared q/k and odd dk/dv.

use loglinear_host_gpu::chunk_scan::{
    run_scan, run_scan_with_strategy, ChunkScan, Form, ScanBuffers, ScanInputs, ScanIo,
    ScanKernels, ScanShape, ScanStrategy,
};
use loglinear_host_gpu::Gpu;
use loglinear_runtime::{FenwickState, LevelPolicy};
use loglinear_tests::random::{normal, SplitMix64};
use loglinear_tests::{assert_close, rel_max, tol};

struct Inputs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    lam: Vec<f32>,
}

impl Inputs {
    fn scan(&self) -> ScanInputs<'_> {
        ScanInputs {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            g: &self.g,
            beta: &self.beta,
            lam: &self.lam,
        }
    }
}

fn inputs(s: &ScanShape, seed: u64) -> Inputs {
    let mut r = SplitMix64::new(seed);
    let nqk = s.t * s.qk_heads;
    let mut q: Vec<f32> = (0..nqk * s.dk).map(|_| normal(&mut r) as f32).collect();
    let mut k: Vec<f32> = (0..nqk * s.dk).map(|_| normal(&mut r) as f32).collect();
    let scale = (s.dk as f32).powf(-0.25);
    if s.form == Form::Gdn {
        // k l2-normalised, q scaled by dk^-1/2 (what the layer feeds the operator).
        for row in k.chunks_mut(s.dk) {
            let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= n);
        }
        q.iter_mut().for_each(|x| *x /= (s.dk as f32).sqrt());
    } else {
        q.iter_mut().for_each(|x| *x *= scale);
        k.iter_mut().for_each(|x| *x *= scale);
    }
    let v = (0..s.t * s.heads * s.dv)
        .map(|_| normal(&mut r) as f32)
        .collect();
    let g = (0..s.t * s.heads)
        .map(|_| -(normal(&mut r) as f32 - 4.0).exp())
        .collect();
    let beta = (0..s.t * s.heads)
        .map(|_| 1.0 / (1.0 + (-(normal(&mut r) as f32)).exp()))
        .collect();
    let lam = (0..s.t * s.heads * s.lambda_cols)
        .map(|_| (1.0 + (normal(&mut r) as f32).exp()).ln())
        .collect();
    Inputs {
        q,
        k,
        v,
        g,
        beta,
        lam,
    }
}

/// The runtime decoder over all T tokens (the call order of runtime/src/layers/*.rs).
fn decoder(s: &ScanShape, x: &Inputs) -> (Vec<f32>, Vec<f32>) {
    let policy = LevelPolicy::new(s.levels).unwrap();
    let mut data = vec![0f32; s.levels * s.heads * s.dk * s.dv];
    let mut st = FenwickState::new(&mut data, policy, s.heads, s.dk, s.dv).unwrap();
    let mut out = vec![0f32; s.t * s.heads * s.dv];
    let mut u = vec![0f32; s.dv];
    for t in 0..s.t {
        st.merge(t as u64);
        for h in 0..s.heads {
            let th = t * s.heads + h;
            let qk = (t * s.qk_heads + if s.qk_heads == 1 { 0 } else { h }) * s.dk;
            let (q, k) = (&x.q[qk..][..s.dk], &x.k[qk..][..s.dk]);
            let v = &x.v[th * s.dv..][..s.dv];
            let alpha = x.g[th].exp();
            let beta = if s.form == Form::Gdn { x.beta[th] } else { 1.0 };
            match s.form {
                Form::Gdn => st.transition_delta(t as u64, h, alpha, beta, k, &mut u),
                Form::Mamba2 => st.transition_decay(t as u64, h, alpha),
            }
            st.insert(h, k, v, beta);
            let lam = &x.lam[th * s.lambda_cols..][..s.lambda_cols];
            st.read(
                t as u64,
                h,
                q,
                |l| lam[l as usize],
                &mut out[th * s.dv..][..s.dv],
            );
        }
    }
    (out, data)
}

/// Both inter-chunk strategies.
const STRATEGIES: [ScanStrategy; 2] = [ScanStrategy::LevelWalk, ScanStrategy::Precomputed];

/// Checks every strategy against the decoder; `worst` holds the worst error per form and
/// strategy (mamba2 walk, mamba2 precomputed, gdn walk, gdn precomputed = its fallback).
fn check(gpu: &Gpu, s: ScanShape, seed: u64, worst: &mut [f64; 4]) {
    for (i, strategy) in STRATEGIES.into_iter().enumerate() {
        let w = &mut worst[2 * usize::from(s.form == Form::Gdn) + i];
        check_with(gpu, s, strategy, &inputs(&s, seed), w);
    }
}

fn report(what: &str, worst: &[f64; 4]) {
    eprintln!(
        "{what}: worst rel_max mamba2 walk {:.3e}, mamba2 precomputed {:.3e}, gdn walk {:.3e}, \
         gdn precomputed {:.3e}",
        worst[0], worst[1], worst[2], worst[3]
    );
}

fn check_with(gpu: &Gpu, s: ScanShape, strategy: ScanStrategy, x: &Inputs, worst: &mut f64) {
    let (o_ref, s_ref) = decoder(&s, x);
    let (o, st) = run_scan_with_strategy(gpu, s, strategy, &x.scan())
        .unwrap_or_else(|e| panic!("{s:?} {strategy:?}: {e}"));
    let wide = |a: &[f32]| a.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    let (o_ref, s_ref) = (wide(&o_ref), wide(&s_ref));
    let what = format!(
        "{:?} {} T={} levels={} dk={} dv={} qk_heads={}",
        s.form,
        strategy.name(),
        s.t,
        s.levels,
        s.dk,
        s.dv,
        s.qk_heads
    );
    *worst = worst.max(rel_max(&o, &o_ref));
    assert_close(&o, &o_ref, tol::OPERATOR, &format!("{what}: o"));
    let lvl = s.heads * s.dk * s.dv;
    for l in 0..s.levels {
        let (ours, refs) = (&st[l * lvl..][..lvl], &s_ref[l * lvl..][..lvl]);
        if refs.iter().all(|&r| r == 0.0) {
            assert!(
                ours.iter().all(|&x| x == 0.0),
                "{what}: level {l} should be empty"
            );
        } else {
            *worst = worst.max(rel_max(ours, refs));
            assert_close(
                ours,
                refs,
                tol::OPERATOR,
                &format!("{what}: state level {l}"),
            );
        }
    }
}

fn shape(form: Form, t: usize, levels: usize, qk_heads: usize, dk: usize, dv: usize) -> ScanShape {
    ScanShape {
        form,
        t,
        heads: 2,
        qk_heads,
        dk,
        dv,
        lambda_cols: 15,
        levels,
    }
}

#[test]
fn saturating_levels_match_the_runtime_decoder() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut worst = [0.0; 4];
    let mut seed = 1;
    for form in [Form::Mamba2, Form::Gdn] {
        for levels in [2, 3, 4] {
            for t in [1, 63, 64, 65, 130, 200] {
                check(&gpu, shape(form, t, levels, 2, 16, 8), seed, &mut worst);
                seed += 1;
            }
        }
    }
    report("saturating levels", &worst);
}

#[test]
fn plain_shared_qk_odd_sizes_and_saturated_chunk_levels() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut worst = [0.0; 4];
    let mut seed = 100;
    for form in [Form::Mamba2, Form::Gdn] {
        // levels 1: the plain single-state model.
        for t in [1, 100, 200] {
            check(&gpu, shape(form, t, 1, 2, 16, 8), seed, &mut worst);
            seed += 1;
        }
        // Shared q/k (Mamba-2 with n_groups = 1) and dk, dv that are not multiples of the tiles.
        check(&gpu, shape(form, 150, 15, 1, 20, 13), seed, &mut worst);
        check(&gpu, shape(form, 77, 3, 2, 36, 21), seed + 1, &mut worst);
        // levels 9 (top 8, the saturated scan is chunk level 1) with 8 chunks: it saturates.
        check(&gpu, shape(form, 500, 9, 2, 16, 8), seed + 2, &mut worst);
        // levels 15 over 8 chunks: every chunk level exact.
        check(&gpu, shape(form, 500, 15, 1, 16, 8), seed + 3, &mut worst);
        // levels 10 (saturated scan at chunk level 2) over 16 chunks, partial last chunk: three
        // blocks of four chunks feed the saturated prefix.
        check(&gpu, shape(form, 1000, 10, 2, 16, 8), seed + 4, &mut worst);
        seed += 10;
    }
    report("plain / shared / odd sizes", &worst);
}

#[test]
fn model_sized_heads() {
    // The real models' largest head sizes (LL-GDN mid: dk 192, dv 384) and the kernels' dk limit.
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let mut worst = [0.0; 4];
    for (form, dk, dv, seed) in [(Form::Gdn, 192, 384, 300), (Form::Mamba2, 256, 64, 301)] {
        let s = ScanShape {
            heads: 1,
            ..shape(form, 150, 15, 1, dk, dv)
        };
        check(&gpu, s, seed, &mut worst);
    }
    report("model-sized heads", &worst);
}

/// Mamba-2 states far outside f16's range, both ways: 1024 tokens that barely decay, with k, v
/// of one sign so that the level states sum up, v scaled to put them over 10^5 (above f16's
/// largest value) or near 10^-4 (where f16 is subnormal): a kernel that took its tile products
/// in f16 without scaling would fail here, and the fp32 kernels must hold fp32's tolerance.
#[test]
fn mamba2_states_beyond_f16_range() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let s = shape(Form::Mamba2, 1024, 15, 2, 32, 64);
    for (v_scale, seed) in [(1024.0, 400), (1e-6, 401)] {
        let mut x = inputs(&s, seed);
        x.k.iter_mut().for_each(|k| *k = k.abs());
        x.v.iter_mut().for_each(|v| *v = v.abs() * v_scale);
        x.g.iter_mut().for_each(|g| *g *= 1e-3);
        let largest = decoder(&s, &x).1.iter().fold(0f32, |m, v| m.max(v.abs()));
        eprintln!("v × {v_scale:e}: largest state element {largest:.3e}");
        let mut worst = 0.0;
        for strategy in STRATEGIES {
            check_with(&gpu, s, strategy, &x, &mut worst);
        }
        eprintln!("v × {v_scale:e}: worst rel_max {worst:.3e}");
    }
}

#[test]
fn bad_shapes_are_errors() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let ok = shape(Form::Mamba2, 10, 3, 2, 16, 8);
    let x = inputs(&ok, 7);
    let run = |s: ScanShape| run_scan(&gpu, s, &x.scan());
    assert!(run(ok).is_ok());
    assert!(run(ScanShape { t: 0, ..ok }).is_err());
    assert!(run(ScanShape { dk: 300, ..ok }).is_err());
    assert!(run(ScanShape { qk_heads: 3, ..ok }).is_err());
    assert!(run(ScanShape { levels: 16, ..ok }).is_err());
    assert!(run(ScanShape { t: 11, ..ok }).is_err()); // buffers too short
    assert!(run(ScanShape {
        form: Form::Gdn,
        ..ok
    })
    .is_ok());
    assert!(run(ScanShape {
        form: Form::Gdn,
        t: 5,
        ..ok
    })
    .is_err()); // beta too long
}

#[test]
fn precomputed_strategy_runs_for_mamba2_and_falls_back_for_gdn() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    for (form, want) in [
        (Form::Mamba2, ScanStrategy::Precomputed),
        (Form::Gdn, ScanStrategy::LevelWalk),
    ] {
        let s = shape(form, 200, 15, 2, 16, 8);
        let kernels = ScanKernels::new(&gpu, form).unwrap();
        let x = inputs(&s, 9);
        let buf = |name: &str, d: &[f32]| gpu.storage_from(name, d).unwrap();
        let (q, k, v, g, lam) = (
            buf("q", &x.q),
            buf("k", &x.k),
            buf("v", &x.v),
            buf("g", &x.g),
            buf("lam", &x.lam),
        );
        let beta = buf("beta", &x.beta);
        let o = gpu
            .storage_zeroed("o", (s.t * s.heads * s.dv * 4) as u64)
            .unwrap();
        let state = gpu
            .storage_zeroed("state", (s.levels * s.heads * s.dk * s.dv * 4) as u64)
            .unwrap();
        let io = ScanIo {
            q: &q,
            k: &k,
            v: &v,
            g: &g,
            beta: &beta,
            lam: &lam,
            o: &o,
            state: Some(&state),
        };
        let scan =
            ChunkScan::with_strategy(&gpu, &kernels, s, io, ScanStrategy::Precomputed).unwrap();
        assert_eq!(scan.strategy(), want, "{form:?}");
        assert!(
            scan.step_labels()
                .iter()
                .any(|l| l.starts_with("chunk_pre_"))
                == (want == ScanStrategy::Precomputed)
        );
    }
    assert_eq!(ScanStrategy::parse("walk"), Some(ScanStrategy::LevelWalk));
    assert_eq!(
        ScanStrategy::parse("Precomputed"),
        Some(ScanStrategy::Precomputed)
    );
    assert_eq!(ScanStrategy::parse("fast"), None);
}

/// A level walk whose reader rows exceed the binding limit runs in head groups (one group's
/// rows at a time) and gives what the decoder gives. The limit is lowered so that 2 of the 4
/// heads fit: T = 2048 has 5 chunk levels of 16 reader chunks, 80 slots of 64 rows × dv = 16
/// per head (327,680 bytes), and every other buffer is smaller.
#[test]
fn level_walk_in_head_groups_matches_the_decoder() {
    let mut gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    gpu.limits.max_storage_buffer_binding_size = 2 * 80 * 64 * 16 * 4;
    let mut worst = [0.0; 4];
    for (i, form) in [Form::Mamba2, Form::Gdn].into_iter().enumerate() {
        let s = ScanShape {
            heads: 4,
            ..shape(form, 2048, 15, 4, 16, 16)
        };
        let x = inputs(&s, 40 + i as u64);
        let bufs = ScanBuffers::new(&gpu, &s, &x.scan()).unwrap();
        let kernels = ScanKernels::new(&gpu, form).unwrap();
        let scan = ChunkScan::with_strategy(&gpu, &kernels, s, bufs.io(), ScanStrategy::LevelWalk)
            .unwrap();
        let combines = scan
            .step_labels()
            .iter()
            .filter(|l| **l == "chunk_combine")
            .count();
        assert_eq!(combines, 2, "{form:?}: two head groups of 2");
        check_with(&gpu, s, ScanStrategy::LevelWalk, &x, &mut worst[2 * i]);
    }
    report("level walk in head groups", &worst);
}

#[test]
fn without_a_state_buffer_the_scan_skips_chunk_state_and_o_is_unchanged() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    for form in [Form::Mamba2, Form::Gdn] {
        let s = shape(form, 150, 15, 2, 16, 8);
        let kernels = ScanKernels::new(&gpu, form).unwrap();
        let x = inputs(&s, 11);
        let buf = |name: &str, d: &[f32]| gpu.storage_from(name, d).unwrap();
        let (q, k, v, g, beta, lam) = (
            buf("q", &x.q),
            buf("k", &x.k),
            buf("v", &x.v),
            buf("g", &x.g),
            buf("beta", &x.beta),
            buf("lam", &x.lam),
        );
        let zeros =
            |name: &str, floats: usize| gpu.storage_zeroed(name, (floats * 4) as u64).unwrap();
        let state = zeros("state", s.levels * s.heads * s.dk * s.dv);
        let outputs: Vec<Vec<f32>> = [Some(&state), None]
            .into_iter()
            .map(|state| {
                let o = zeros("o", s.t * s.heads * s.dv);
                let io = ScanIo {
                    q: &q,
                    k: &k,
                    v: &v,
                    g: &g,
                    beta: &beta,
                    lam: &lam,
                    o: &o,
                    state,
                };
                let scan = ChunkScan::new(&gpu, &kernels, s, io).unwrap();
                assert_eq!(
                    scan.step_labels().contains(&"chunk_state"),
                    state.is_some(),
                    "{form:?}: chunk_state runs exactly when a state buffer is given"
                );
                let mut enc = gpu.encoder("scan");
                scan.encode(&mut enc);
                gpu.submit_and_wait(enc).unwrap();
                gpu.read_f32(&o).unwrap()
            })
            .collect();
        assert!(outputs[0].iter().any(|&x| x != 0.0), "{form:?}: o is empty");
        assert_eq!(
            outputs[0], outputs[1],
            "{form:?}: o depends on the state buffer"
        );
    }
}
