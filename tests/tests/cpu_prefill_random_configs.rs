//! Shapes the golden and shipped models do not have, on small random models: Gated DeltaNet
//! with dk > 64 (the scan's two-product transition form) and odd dk/dv, and Mamba-2 with two
//! B/C groups shared by pairs of heads. Chunkwise prefill against stepping, as elsewhere.

mod cpu_prefill_common;

use cpu_prefill_common::*;
use loglinear_converter::{ExportOptions, ExportedModel};
use loglinear_runtime::ModelConfig;

/// A random model of `json`'s config: unit-variance projections, decays around e^-0.05 per
/// token, λ scales 1.
fn random_model(json: serde_json::Value, seed: u32) -> ExportedModel {
    let (config, _): (ModelConfig, _) = loglinear_converter::parse_config(&json).unwrap();
    let store = random_store(&config, seed, None);
    ExportedModel::from_source(config, &store, &ExportOptions::default(), &mut |_| {}).unwrap()
}

#[test]
fn gdn_with_wide_keys_matches_stepping() {
    // dk = 96 > 64: the transition is kept as K and W (two products per state).
    let m = random_model(
        serde_json::json!({"model_type": "h_gated_deltanet", "vocab_size": 64,
            "hidden_size": 48, "num_hidden_layers": 2, "num_heads": 2, "head_dim": 96,
            "expand_v": 1, "conv_size": 4, "norm_eps": 1e-6}),
        11,
    );
    let model = m.model().unwrap();
    assert!(model.config().head_k_dim > 64);
    let ids = lcg_ids(400, 64, 3);
    for t in [30, 64, 200, 400] {
        prefill_vs_stepping("gdn dk=96", &model, &ids[..t], 15, 4, TOL);
    }
    prefill_vs_stepping("gdn dk=96", &model, &ids, 5, 4, TOL);
}

#[test]
fn mamba2_with_two_groups_matches_stepping() {
    // 4 heads over 2 B/C groups; dv = head_dim 24 (not a multiple of 8), dk = state 40.
    let m = random_model(
        serde_json::json!({"model_type": "hattention", "vocab_size": 64, "hidden_size": 48,
            "num_hidden_layers": 2, "num_heads": 4, "head_dim": 24, "state_size": 40,
            "n_groups": 2, "expand": 2, "conv_kernel": 4, "layer_norm_epsilon": 1e-5}),
        12,
    );
    let model = m.model().unwrap();
    assert_eq!(model.config().num_groups, 2);
    let ids = lcg_ids(400, 64, 4);
    for t in [30, 129, 400] {
        prefill_vs_stepping("mamba2 2 groups", &model, &ids[..t], 15, 4, TOL);
    }
    prefill_vs_stepping("mamba2 2 groups", &model, &ids, 8, 4, TOL);
}
