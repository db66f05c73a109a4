//! A golden layer case as a one-block model, shared by the CPU (`tests/golden_layer.rs`) and
//! GPU (`tests/gpu_golden_layer.rs`) layer tests.

use crate::Array;
use loglinear_converter::{parse_config, Tensor, TensorStore};
use loglinear_runtime::{ModelConfig, Role, TensorName};
use serde_json::Value;
use std::collections::HashMap;

/// The official `model_type` of each golden layer kind.
pub fn model_type(kind: &str) -> &'static str {
    match kind {
        "ll_mamba2" => "hattention",
        "mamba2" => "mamba2mlp",
        "ll_gdn" => "h_gated_deltanet",
        "gdn" => "gated_deltanet",
        other => panic!("layer kind `{other}` is not implemented"),
    }
}

/// A one-block model whose embedding rows are the layer inputs, so that feeding token t feeds
/// x_t to the block. The final norm and LM head are placeholders.
pub fn layer_model(
    name: &str,
    entry: &Value,
    arrays: &HashMap<String, Array>,
    x: &Array,
) -> (ModelConfig, TensorStore) {
    let mut cfg = entry["config"].clone();
    let kind = entry["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: no kind"));
    let t_len = x.shape[1];
    cfg["model_type"] = model_type(kind).into();
    cfg["vocab_size"] = t_len.into();
    cfg["num_hidden_layers"] = 1.into();
    let (config, layout) = parse_config(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
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
            .unwrap_or_else(|| panic!("{name}: unknown weight `{key}`"));
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
    store.insert(
        TensorName::model(Role::Embedding),
        Tensor {
            rows: t_len,
            cols: d,
            data: x.f32(),
        },
    );
    store.insert(
        TensorName::model(Role::FinalNorm),
        Tensor {
            rows: 1,
            cols: d,
            data: vec![1.0; d],
        },
    );
    store.insert(
        TensorName::model(Role::LmHead),
        Tensor {
            rows: t_len,
            cols: d,
            data: vec![0.0; t_len * d],
        },
    );
    (config, store)
}
