//! The operator in both forms against `golden/operator`: outputs for every position and the
//! per-level Fenwick states after the last token, stepping the real decoder.

use loglinear_runtime::{FenwickState, LevelPolicy, LAMBDA_LEVELS};
use loglinear_tests::*;
use serde_json::Value;

struct Case {
    name: String,
    form: String,
    b: usize,
    t: usize,
    h: usize,
    dk: usize,
    dv: usize,
    arrays: std::collections::HashMap<String, Array>,
}

fn load(name: &str, entry: &Value) -> Case {
    let dim = |k: &str| {
        entry[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: manifest field `{k}`")) as usize
    };
    let file = entry["file"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: no `file`"));
    Case {
        name: name.to_string(),
        form: entry["form"].as_str().unwrap_or_default().to_string(),
        b: dim("B"),
        t: dim("T"),
        h: dim("H"),
        dk: dim("dk"),
        dv: dim("dv"),
        arrays: read_arrays(&golden_dir().join(file)),
    }
}

/// Runs the Fenwick decoder over one batch row; returns outputs [T,H,dv] and the final state.
fn run(c: &Case, batch: usize, levels: usize) -> (Vec<f32>, Vec<f32>) {
    let gdn = match c.form.as_str() {
        "gdn" => true,
        "mamba2" => false,
        other => panic!("{}: operator form `{other}` is not implemented", c.name),
    };
    let (t_len, h, dk, dv) = (c.t, c.h, c.dk, c.dv);
    let q = get(&c.arrays, "q", &c.name).f32();
    let k = get(&c.arrays, "k", &c.name).f32();
    let v = get(&c.arrays, "v", &c.name).f32();
    let g = get(&c.arrays, "g", &c.name).f32();
    let lam = get(&c.arrays, "lam", &c.name);
    let nl = *lam.shape.last().unwrap();
    assert_eq!(nl, LAMBDA_LEVELS, "{}: λ width", c.name);
    let lam = lam.f32();
    let beta = if gdn {
        Some(get(&c.arrays, "beta", &c.name).f32())
    } else {
        None
    };
    let policy = LevelPolicy::new(levels).unwrap();
    let mut data = vec![0f32; levels * h * dk * dv];
    let mut st = FenwickState::new(&mut data, policy, h, dk, dv).unwrap();
    let mut out = vec![0f32; t_len * h * dv];
    let mut u = vec![0f32; dv];
    for t in 0..t_len {
        st.merge(t as u64);
        for hh in 0..h {
            let bt = (batch * t_len + t) * h + hh;
            let (qs, ks, vs) = (
                &q[bt * dk..][..dk],
                &k[bt * dk..][..dk],
                &v[bt * dv..][..dv],
            );
            let alpha = g[bt].exp();
            let b = beta.as_ref().map_or(1.0, |b| b[bt]);
            if gdn {
                st.transition_delta(t as u64, hh, alpha, b, ks, &mut u);
            } else {
                st.transition_decay(t as u64, hh, alpha);
            }
            st.insert(hh, ks, vs, b);
            let lam_row = &lam[bt * nl..][..nl];
            // Plain runs (one level) use λ = 1: the `_lameq` reduction.
            let lam_of = |l: u32| {
                if levels == 1 {
                    1.0
                } else {
                    lam_row[l as usize]
                }
            };
            st.read(
                t as u64,
                hh,
                qs,
                lam_of,
                &mut out[(t * h + hh) * dv..][..dv],
            );
        }
    }
    (out, data)
}

#[test]
fn operator_outputs_and_states_match_golden() {
    let m = manifest();
    let mut checked = 0;
    for (name, entry) in cases(&m, "operator") {
        let c = load(&name, &entry);
        let per_b_o = c.t * c.h * c.dv;
        let lvl = c.h * c.dk * c.dv;
        for b in 0..c.b {
            let (o, s) = run(&c, b, LAMBDA_LEVELS);
            let o_ref = &get(&c.arrays, "o", &name).data[b * per_b_o..][..per_b_o];
            assert_close(&o, o_ref, tol::OPERATOR, &format!("{name} o (batch {b})"));
            let s_ref = get(&c.arrays, "S", &name);
            assert_eq!(s_ref.shape[1], LAMBDA_LEVELS, "{name}: S levels");
            let s_ref = &s_ref.data[b * LAMBDA_LEVELS * lvl..][..LAMBDA_LEVELS * lvl];
            let last = (c.t - 1) as u64;
            for l in 0..LAMBDA_LEVELS {
                let (ours, refs) = (&s[l * lvl..][..lvl], &s_ref[l * lvl..][..lvl]);
                let live = l == 0 || (last >> (l - 1)) & 1 == 1;
                if live {
                    assert_close(
                        ours,
                        refs,
                        tol::OPERATOR,
                        &format!("{name} S level {l} (batch {b})"),
                    );
                } else {
                    assert!(
                        refs.iter().all(|&x| x == 0.0),
                        "{name}: golden level {l} should be empty"
                    );
                    assert!(
                        ours.iter().all(|&x| x == 0.0),
                        "{name}: dead level {l} is not zero"
                    );
                }
            }
            if name.ends_with("_lameq") {
                let (o_plain, s_plain) = run(&c, b, 1);
                let op = &get(&c.arrays, "o_plain", &name).data[b * per_b_o..][..per_b_o];
                assert_close(&o_plain, op, tol::OPERATOR, &format!("{name} o_plain"));
                let sp = &get(&c.arrays, "S_plain", &name).data[b * lvl..][..lvl];
                assert_close(&s_plain, sp, tol::OPERATOR, &format!("{name} S_plain"));
            }
        }
        checked += 1;
    }
    eprintln!("checked {checked} operator cases");
}
