//! Whole-model golden checks, shared by the checkpoint tests and the model-file round trips:
//! full-sequence logits and hidden states by stepping, and the decode trace (prefill by
//! stepping, Fenwick and conv states level by level, then single steps).

use crate::{assert_close, get, Array};
use loglinear_runtime::{Model, Probe, Session, SessionConfig};
use std::collections::HashMap;

/// Runs every whole-model check of one golden case against `model`, with tolerance `tol`
/// (the README's 1e-4 for exact fp32 weights; larger, measured bounds for quantized ones).
pub fn check_model(name: &str, model: &Model<'_>, g: &HashMap<String, Array>, tol: f64) {
    check_full_sequences(name, model, g, tol);
    check_decode(name, model, g, tol);
}

/// The largest logits error over the full-sequence cases (for measuring quantized models).
pub fn full_sequence_error(model: &Model<'_>, g: &HashMap<String, Array>) -> f64 {
    let mut worst = 0.0f64;
    for key in g.keys().filter(|k| k.starts_with("ids_T")) {
        let t = &key["ids_T".len()..];
        let (logits, _) = run(model, &g[key].ids());
        worst = worst.max(crate::rel_max(&logits, &g[&format!("logits_T{t}")].data));
    }
    worst
}

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

fn check_full_sequences(name: &str, model: &Model<'_>, g: &HashMap<String, Array>, tol: f64) {
    let mut n = 0;
    for key in g.keys().filter(|k| k.starts_with("ids_T")) {
        let t = &key["ids_T".len()..];
        let ids = g[key].ids();
        let (logits, hidden) = run(model, &ids);
        let what = format!("{name} logits_T{t}");
        assert_close(
            &logits,
            &get(g, &format!("logits_T{t}"), &what).data,
            tol,
            &what,
        );
        for (layer, h) in hidden.iter().enumerate() {
            if let Some(r) = g.get(&format!("hidden_T{t}.layer{layer}")) {
                assert_close(h, &r.data, tol, &format!("{name} hidden_T{t}.layer{layer}"));
            }
        }
        n += 1;
    }
    assert!(n > 0, "{name}: no full-sequence case");
}

fn check_decode(name: &str, model: &Model<'_>, g: &HashMap<String, Array>, tol: f64) {
    let c = *model.config();
    let prefill = get(g, "decode.prefill_len", name).data[0] as usize;
    let ids = crate::decode_ids(g, name);
    let mut arena = Vec::new();
    let mut s = session(model, &mut arena);
    for &id in &ids[..prefill] {
        s.step(id).unwrap();
    }
    assert_close(
        s.logits(),
        &get(g, "decode.prefill_last_logits", name).data,
        tol,
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
                assert_close(a, b, tol, &format!("{name} layer {layer} level {l}"));
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
            tol,
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
            tol,
            &format!("{name} decode step {i}"),
        );
    }
}
