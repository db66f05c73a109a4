//! Whole layers against `golden/layer`: the mixer alone (`y_mixer`) and the pre-norm block
//! (`y_block`), for every layer case and sequence length in the manifest.

use loglinear_converter::{parse_config, Layout, Tensor, TensorStore};
use loglinear_runtime::fenwick::state_len;
use loglinear_runtime::layers::{mixer_scratch_len, mixer_step};
use loglinear_runtime::{
    FenwickState, LevelPolicy, Model, ModelConfig, Probe, Role, Session, SessionConfig, TensorName,
};
use loglinear_tests::*;
use serde_json::Value;

/// The official `model_type` of each golden layer kind.
fn model_type(kind: &str) -> &'static str {
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
fn layer_model(
    name: &str,
    entry: &Value,
    arrays: &std::collections::HashMap<String, Array>,
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
        let role =
            layout_role(layout, key).unwrap_or_else(|| panic!("{name}: unknown weight `{key}`"));
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

fn layout_role(layout: Layout, key: &str) -> Option<Role> {
    layout.parse_block_key(key)
}

#[test]
fn layers_match_golden() {
    let m = manifest();
    let mut checked = 0;
    for (name, entry) in cases(&m, "layer") {
        let file = entry["file"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no file"));
        let arrays = read_arrays(&golden_dir().join(file));
        let ts: Vec<u64> = entry["T"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no T"))
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        assert!(!ts.is_empty(), "{name}: no sequence lengths");
        for t_len in ts {
            let what = format!("{name} T{t_len}");
            let x = get(&arrays, &format!("T{t_len}.x"), &what);
            assert_eq!(x.shape[0], 1, "{what}: batch");
            let (config, store) = layer_model(&name, &entry, &arrays, x);
            let model = Model::new(config, &store).unwrap_or_else(|e| panic!("{what}: {e}"));
            let d = config.hidden_size;
            let t_len = t_len as usize;

            // The mixer alone on x.
            let policy = LevelPolicy::new(config.default_state_levels()).unwrap();
            let mut state = vec![
                0f32;
                state_len(
                    policy.levels(),
                    config.num_heads,
                    config.head_k_dim,
                    config.head_v_dim
                )
            ];
            let mut fen = FenwickState::new(
                &mut state,
                policy,
                config.num_heads,
                config.head_k_dim,
                config.head_v_dim,
            )
            .unwrap();
            let mut conv = vec![0f32; config.conv_channels() * config.conv_kernel];
            let mut scratch = vec![0f32; mixer_scratch_len(&config)];
            let xs = x.f32();
            let mut y = vec![0f32; t_len * d];
            for t in 0..t_len {
                let (xt, yt) = (&xs[t * d..][..d], &mut y[t * d..][..d]);
                mixer_step(
                    &model,
                    0,
                    &mut fen,
                    &mut conv,
                    t as u64,
                    xt,
                    yt,
                    &mut scratch,
                    &mut [],
                )
                .unwrap();
            }
            let y_ref = get(&arrays, &format!("T{t_len}.y_mixer"), &what);
            assert_close(&y, &y_ref.data, tol::LAYER, &format!("{what} y_mixer"));

            // The whole pre-norm block, through a session.
            let cfg = SessionConfig::default();
            let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
            let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
            let mut yb = vec![0f32; t_len * d];
            for t in 0..t_len {
                s.step_observed(t as u32, &mut |_, probe, v| {
                    if probe == Probe::BlockOut {
                        yb[t * d..][..d].copy_from_slice(v);
                    }
                })
                .unwrap();
            }
            let yb_ref = get(&arrays, &format!("T{t_len}.y_block"), &what);
            assert_close(&yb, &yb_ref.data, tol::LAYER, &format!("{what} y_block"));
            checked += 1;
        }
    }
    eprintln!("checked {checked} layer cases");
}
