//! The GPU chunk scan against every `golden/operator` case: outputs `o` and the Fenwick states
//! `S` after the last token (as many levels as `S` holds), and for `_lameq` cases the plain
//! single-state run (levels = 1) against `o_plain` / `S_plain`. Tolerance: golden README §7
//! (fp32, 2e-5).

use loglinear_host_gpu::chunk_scan::{
    run_scan_with_strategy, Form, ScanInputs, ScanShape, ScanStrategy,
};
use loglinear_host_gpu::Gpu;
use loglinear_tests::*;

#[test]
fn chunk_scan_matches_golden_operator_cases() {
    let gpu = Gpu::new().expect("GPU adapter (lavapipe in CI)");
    let m = manifest();
    let mut checked = [0usize; 2];
    // Worst error per form and strategy: mamba2 walk, mamba2 precomputed, gdn walk, gdn
    // precomputed (which falls back to the walk).
    let mut worst: [(f64, String); 4] = Default::default();
    let labels = [
        "mamba2 walk",
        "mamba2 precomputed",
        "gdn walk",
        "gdn precomputed",
    ];
    for (name, entry) in cases(&m, "operator") {
        let dim = |k: &str| entry[k].as_u64().unwrap_or_else(|| panic!("{name}: `{k}`")) as usize;
        let (b_n, t, h, dk, dv) = (dim("B"), dim("T"), dim("H"), dim("dk"), dim("dv"));
        let form = match entry["form"].as_str() {
            Some("mamba2") => Form::Mamba2,
            Some("gdn") => Form::Gdn,
            other => panic!("{name}: form {other:?}"),
        };
        let arrays = read_arrays(&golden_dir().join(entry["file"].as_str().unwrap()));
        let f = |key: &str| get(&arrays, key, &name).f32();
        let (q, k, v, g, lam) = (f("q"), f("k"), f("v"), f("g"), f("lam"));
        let beta = if form == Form::Gdn {
            f("beta")
        } else {
            Vec::new()
        };
        let lam_cols = get(&arrays, "lam", &name).shape[3];
        let levels = get(&arrays, "S", &name).shape[1];
        assert_eq!(
            lam_cols, levels,
            "{name}: λ width against the levels of `S`"
        );
        let (per_qk, per_v, per_g, per_l) = (t * h * dk, t * h * dv, t * h, t * h * lam_cols);
        let lvl = h * dk * dv;
        for b in 0..b_n {
            let sl = |x: &[f32], n: usize| x[b * n..][..n].to_vec();
            let beta_b = if beta.is_empty() {
                vec![0.0]
            } else {
                sl(&beta, per_g)
            };
            let run = |levels: usize, strategy: ScanStrategy| {
                let shape = ScanShape {
                    form,
                    t,
                    heads: h,
                    qk_heads: h,
                    dk,
                    dv,
                    lambda_cols: lam_cols,
                    levels,
                };
                let inputs = ScanInputs {
                    q: &sl(&q, per_qk),
                    k: &sl(&k, per_qk),
                    v: &sl(&v, per_v),
                    g: &sl(&g, per_g),
                    beta: &beta_b,
                    lam: &sl(&lam, per_l),
                };
                run_scan_with_strategy(&gpu, shape, strategy, &inputs)
                    .unwrap_or_else(|e| panic!("{name} {strategy:?}: {e}"))
            };
            let mut check = |ours: &[f32], refs: &[f64], what: String| {
                let e = rel_max(ours, refs);
                let i = 2 * usize::from(form == Form::Gdn)
                    + usize::from(what.contains(" precomputed "));
                let w = &mut worst[i];
                if e > w.0 {
                    *w = (e, what.clone());
                }
                assert_close(ours, refs, tol::OPERATOR, &what);
            };
            for strategy in [ScanStrategy::LevelWalk, ScanStrategy::Precomputed] {
                let (o, s) = run(levels, strategy);
                check(
                    &o,
                    &get(&arrays, "o", &name).data[b * per_v..][..per_v],
                    format!("{name} {} o (batch {b})", strategy.name()),
                );
                let s_ref = &get(&arrays, "S", &name).data[b * levels * lvl..][..levels * lvl];
                let last = (t - 1) as u64;
                for l in 0..levels {
                    let (ours, refs) = (&s[l * lvl..][..lvl], &s_ref[l * lvl..][..lvl]);
                    if l == 0 || (last >> (l - 1)) & 1 == 1 {
                        check(
                            ours,
                            refs,
                            format!("{name} {} S level {l} (batch {b})", strategy.name()),
                        );
                    } else {
                        assert!(
                            ours.iter().all(|&x| x == 0.0),
                            "{name}: dead level {l} is not zero"
                        );
                    }
                }
                if name.ends_with("_lameq") {
                    let (o_plain, s_plain) = run(1, strategy);
                    let op = &get(&arrays, "o_plain", &name).data[b * per_v..][..per_v];
                    check(
                        &o_plain,
                        op,
                        format!("{name} {} o_plain (batch {b})", strategy.name()),
                    );
                    let sp = &get(&arrays, "S_plain", &name).data[b * lvl..][..lvl];
                    check(
                        &s_plain,
                        sp,
                        format!("{name} {} S_plain (batch {b})", strategy.name()),
                    );
                }
            }
        }
        checked[usize::from(form == Form::Gdn)] += 1;
    }
    eprintln!(
        "checked {} mamba2 and {} gdn operator cases; worst rel_max:",
        checked[0], checked[1]
    );
    for (label, (e, what)) in labels.iter().zip(&worst) {
        eprintln!("  {label}: {e:.3e} ({what})");
    }
    assert!(
        checked.iter().all(|&n| n > 0),
        "the set lacks a form: {} mamba2, {} gdn operator cases",
        checked[0],
        checked[1]
    );
}
