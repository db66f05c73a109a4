//! GPU layer ops against `golden/layer` (the 4 stress layers; every layer with the full set): the ops before and after the
//! chunk scan on their own (the scan output replaced by the golden `o`), then whole mixers
//! (`y_mixer`) and pre-norm blocks (`y_block`) at T = 50 and 200.

use loglinear_converter::{parse_config, Tensor, TensorStore};
use loglinear_host_gpu::{Gpu, GpuModel, PrefillOptions};
use loglinear_runtime::{Model, ModelConfig, Role, TensorName};
use loglinear_tests::*;
use serde_json::Value;
use std::collections::HashMap;

const KINDS: [&str; 4] = ["ll_mamba2", "mamba2", "ll_gdn", "gdn"];

fn model_type(kind: &str) -> &'static str {
    match kind {
        "ll_mamba2" => "hattention",
        "mamba2" => "mamba2mlp",
        "ll_gdn" => "h_gated_deltanet",
        "gdn" => "gated_deltanet",
        other => panic!("layer kind `{other}` is not implemented"),
    }
}

/// A one-block model whose embedding rows are the layer inputs (token t feeds x_t), built as
/// tests/tests/golden_layer.rs builds it.
fn layer_model(
    entry: &Value,
    arrays: &HashMap<String, Array>,
    x: &Array,
) -> (ModelConfig, TensorStore) {
    let mut cfg = entry["config"].clone();
    let kind = entry["kind"].as_str().unwrap();
    let t_len = x.shape[1];
    cfg["model_type"] = model_type(kind).into();
    cfg["vocab_size"] = t_len.into();
    cfg["num_hidden_layers"] = 1.into();
    let (config, layout) = parse_config(&cfg).unwrap();
    let mut store = TensorStore::default();
    for (key, a) in arrays {
        if key.starts_with('T')
            && key
                .split('.')
                .next()
                .is_some_and(|p| p[1..].parse::<u32>().is_ok())
        {
            continue; // T{n}.* are data, not weights
        }
        let role = layout
            .parse_block_key(key)
            .unwrap_or_else(|| panic!("unknown weight `{key}`"));
        let (rows, cols) = match a.shape.as_slice() {
            [n] => (1, *n),
            [r, rest @ ..] => (*r, rest.iter().product()),
            [] => (1, 1),
        };
        store.insert(
            TensorName::block(0, role),
            Tensor {
                rows,
                cols,
                data: a.f32(),
            },
        );
    }
    let d = config.hidden_size;
    let model_tensor = |rows, data| Tensor {
        rows,
        cols: d,
        data,
    };
    store.insert(
        TensorName::model(Role::Embedding),
        model_tensor(t_len, x.f32()),
    );
    store.insert(
        TensorName::model(Role::FinalNorm),
        model_tensor(1, vec![1.0; d]),
    );
    store.insert(
        TensorName::model(Role::LmHead),
        model_tensor(t_len, vec![0.0; t_len * d]),
    );
    (config, store)
}

fn layer_case(kind: &str) -> (Value, HashMap<String, Array>) {
    let m = manifest();
    let (_, entry) = cases(&m, "layer")
        .into_iter()
        .find(|(_, e)| e["kind"] == kind && e["style"] == "stress")
        .unwrap_or_else(|| panic!("no stress layer of kind {kind}"));
    let arrays = read_arrays(&golden_dir().join(entry["file"].as_str().unwrap()));
    (entry, arrays)
}

/// Every layer case of the manifest: the 4 stress layers of the project copy, plus the `init`
/// ones when `LOGLINEAR_GOLDEN_DIR` points at the full set.
fn all_layer_cases() -> Vec<(String, Value, HashMap<String, Array>)> {
    let m = manifest();
    cases(&m, "layer")
        .into_iter()
        .map(|(name, entry)| {
            let arrays = read_arrays(&golden_dir().join(entry["file"].as_str().unwrap()));
            (name, entry, arrays)
        })
        .collect()
}

/// Pre-scan ops (projections, conv, gates, λ, q/k/v for the scan) and post-scan ops (skip,
/// gate, norms, out_proj) at T = 50, with the golden `o` standing in for the scan.
#[test]
fn ops_around_the_scan_match_golden() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    for kind in KINDS {
        let (entry, arrays) = layer_case(kind);
        let x = get(&arrays, "T50.x", kind);
        let (config, store) = layer_model(&entry, &arrays, x);
        let model = Model::new(config, &store).unwrap();
        let gm = GpuModel::new(&gpu, &model).unwrap();
        let o = get(&arrays, "T50.inter.o", kind).f32();
        let tr = gm.mixer_trace(0, &x.f32(), Some(&o)).unwrap();
        let mut compared = 0;
        for (name, ours) in &tr.inter {
            if *name == "o" {
                continue;
            }
            let r = get(&arrays, &format!("T50.inter.{name}"), kind);
            check_rel_max(&format!("{kind} T50 {name}"), ours, &r.data, tol::LAYER);
            compared += 1;
        }
        assert!(
            compared >= 8,
            "{kind}: only {compared} intermediates compared"
        );
        let y = get(&arrays, "T50.y_mixer", kind);
        check_rel_max(
            &format!("{kind} T50 y_mixer (golden o)"),
            &tr.y_mixer,
            &y.data,
            tol::LAYER,
        );
    }
}

/// Whole mixers and blocks, the chunk scan included, at every T, for every layer case of the
/// manifest.
#[test]
fn layers_match_golden() {
    let gpu = Gpu::new_fp32().expect("GPU adapter");
    let all = all_layer_cases();
    let stress = all
        .iter()
        .filter(|(_, e, _)| e["style"] == "stress")
        .count();
    assert_eq!(stress, KINDS.len(), "expected a stress layer of every kind");
    for (name, entry, arrays) in &all {
        let (entry, arrays) = (entry.clone(), arrays);
        for t in [50usize, 200] {
            let what = format!("{name} T{t}");
            let x = get(arrays, &format!("T{t}.x"), &what);
            let (config, store) = layer_model(&entry, arrays, x);
            let model = Model::new(config, &store).unwrap();
            let gm = GpuModel::new(&gpu, &model).unwrap();
            let tr = gm.mixer_trace(0, &x.f32(), None).unwrap();
            let y = get(arrays, &format!("T{t}.y_mixer"), &what);
            check_rel_max(&format!("{what} y_mixer"), &tr.y_mixer, &y.data, tol::LAYER);
            if t == 50 {
                let o = get(arrays, "T50.inter.o", &what);
                check_rel_max(&format!("{what} o"), &tr.inter["o"], &o.data, tol::LAYER);
            }
            let ids: Vec<u32> = (0..t as u32).collect();
            let opts = PrefillOptions {
                levels: config.default_state_levels(),
                all_logits: false,
                hidden: true,
                profile: false,
            };
            let p = gm.prefill_with(&ids, &opts).unwrap();
            let yb = get(arrays, &format!("T{t}.y_block"), &what);
            check_rel_max(
                &format!("{what} y_block"),
                &p.hidden.as_ref().unwrap()[0],
                &yb.data,
                tol::LAYER,
            );
        }
    }
}
