//! Whole models against `golden/model`: full-sequence logits (T = 100 and 300) and hidden
//! states by stepping, and the decode trace (prefill by stepping, Fenwick and conv states
//! level by level, then single steps with logits at each).

use loglinear_converter::Checkpoint;
use loglinear_runtime::{Model, Probe, Session, SessionConfig};
use loglinear_tests::*;
use std::collections::HashMap;

fn session<'m>(model: &Model<'m>, arena: &'m mut Vec<u8>) -> Session<'m, f32> {
    let cfg = SessionConfig::default();
    arena.resize(Session::<f32>::arena_bytes(model, &cfg).unwrap(), 0);
    Session::new(model, arena, cfg).unwrap()
}

/// Steps `ids`, returning all logits and the residual after each block per position.
fn run(model: &Model<'_>, ids: &[u32]) -> (Vec<f32>, Vec<Vec<f32>>) {
    let mut arena = Vec::new();
    let mut s = session(model, &mut arena);
    let mut logits = Vec::new();
    let mut hidden = vec![Vec::new(); model.config().num_layers];
    for &id in ids {
        let l = s
            .step_observed(id, &mut |layer, p, v| {
                if p == Probe::BlockOut {
                    hidden[layer].extend_from_slice(v);
                }
            })
            .unwrap();
        logits.extend_from_slice(l);
    }
    (logits, hidden)
}

fn check_full_sequences(name: &str, model: &Model<'_>, g: &HashMap<String, Array>) {
    let mut n = 0;
    for key in g.keys().filter(|k| k.starts_with("ids_T")) {
        let t = &key["ids_T".len()..];
        let ids = g[key].ids();
        let (logits, hidden) = run(model, &ids);
        let what = format!("{name} logits_T{t}");
        assert_close(
            &logits,
            &get(g, &format!("logits_T{t}"), &what).data,
            tol::MODEL,
            &what,
        );
        for (layer, h) in hidden.iter().enumerate() {
            if let Some(r) = g.get(&format!("hidden_T{t}.layer{layer}")) {
                assert_close(
                    h,
                    &r.data,
                    tol::MODEL,
                    &format!("{name} hidden_T{t}.layer{layer}"),
                );
            }
        }
        n += 1;
    }
    assert!(n > 0, "{name}: no full-sequence case");
}

fn check_decode(name: &str, model: &Model<'_>, g: &HashMap<String, Array>) {
    let c = *model.config();
    let prefill = get(g, "decode.prefill_len", name).data[0] as usize;
    let ids: Vec<u32> = g
        .keys()
        .filter_map(|k| {
            k.strip_prefix("ids_T")
                .and_then(|t| t.parse::<usize>().ok())
        })
        .max()
        .map(|t| g[&format!("ids_T{t}")].ids())
        .unwrap();
    let mut arena = Vec::new();
    let mut s = session(model, &mut arena);
    for &id in &ids[..prefill] {
        s.step(id).unwrap();
    }
    assert_close(
        s.logits(),
        &get(g, "decode.prefill_last_logits", name).data,
        tol::MODEL,
        &format!("{name} prefill logits"),
    );

    // States after the prefill, level by level.
    let lvl = c.num_heads * c.head_k_dim * c.head_v_dim;
    let last = (prefill - 1) as u64;
    for layer in 0..c.num_layers {
        let ours = s.layer_state(layer);
        let key = if c.arch.is_log_linear() {
            "fenwick"
        } else {
            "ssm"
        };
        let r = get(g, &format!("decode.state.layer{layer}.{key}"), name);
        let levels = if c.arch.is_log_linear() {
            r.shape[0]
        } else {
            1
        };
        assert_eq!(
            ours.len(),
            levels * lvl,
            "{name}: state size of layer {layer}"
        );
        for l in 0..levels {
            let (a, b) = (&ours[l * lvl..][..lvl], &r.data[l * lvl..][..lvl]);
            if l == 0 || s.policy().is_live(last, l as u32) {
                assert_close(a, b, tol::MODEL, &format!("{name} layer {layer} level {l}"));
            } else {
                assert!(
                    a.iter().all(|&x| x == 0.0),
                    "{name}: dead level {l} of layer {layer} not zero"
                );
                assert!(
                    b.iter().all(|&x| x == 0.0),
                    "{name}: golden level {l} should be empty"
                );
            }
        }
        let conv = s.conv_state(layer);
        let conv_ref: Vec<f64> = if c.arch.is_mamba2() {
            get(g, &format!("decode.state.layer{layer}.conv"), name)
                .data
                .clone()
        } else {
            ["q", "k", "v"]
                .iter()
                .flat_map(|p| {
                    get(g, &format!("decode.state.layer{layer}.conv_{p}"), name)
                        .data
                        .clone()
                })
                .collect()
        };
        assert_close(
            conv,
            &conv_ref,
            tol::MODEL,
            &format!("{name} layer {layer} conv state"),
        );
    }

    // Then single steps.
    let step_ids = get(g, "decode.step_ids", name).ids();
    let step_logits = get(g, "decode.step_logits", name);
    let v = c.vocab_size;
    assert_eq!(
        step_logits.data.len(),
        step_ids.len() * v,
        "{name}: step logits shape"
    );
    for (i, &id) in step_ids.iter().enumerate() {
        let l = s.step(id).unwrap();
        assert_close(
            l,
            &step_logits.data[i * v..][..v],
            tol::MODEL,
            &format!("{name} decode step {i}"),
        );
    }
}

#[test]
fn models_match_golden() {
    let m = manifest();
    let mut checked = 0;
    for (name, entry) in cases(&m, "model") {
        let dir = golden_dir().join(
            entry["dir"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no dir")),
        );
        let ckpt = Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = ckpt.model().unwrap();
        let g = read_arrays(&dir.join("golden.safetensors"));
        check_full_sequences(&name, &model, &g);
        check_decode(&name, &model, &g);
        checked += 1;
    }
    eprintln!("checked {checked} models");
}
