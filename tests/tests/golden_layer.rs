//! Whole layers against `golden/layer`: the mixer alone (`y_mixer`) and the pre-norm block
//! (`y_block`), for every layer case and sequence length in the manifest.

use loglinear_runtime::fenwick::state_len;
use loglinear_runtime::layers::{mixer_scratch_len, mixer_step, LayerState};
use loglinear_runtime::{FenwickState, LevelPolicy, Model, Probe, Session, SessionConfig};
use loglinear_tests::golden_layer::layer_model;
use loglinear_tests::*;
use serde_json::Value;

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
            let fenwick = FenwickState::new(
                &mut state,
                policy,
                config.num_heads,
                config.head_k_dim,
                config.head_v_dim,
            )
            .unwrap();
            let mut conv = vec![0f32; config.conv_channels() * config.conv_kernel];
            let mut layer_state = LayerState {
                fenwick,
                conv: &mut conv,
                t: 0,
            };
            let mut scratch = vec![0f32; mixer_scratch_len(&config)];
            let xs = x.f32();
            let mut y = vec![0f32; t_len * d];
            for t in 0..t_len {
                let (xt, yt) = (&xs[t * d..][..d], &mut y[t * d..][..d]);
                layer_state.t = t as u64;
                mixer_step(&model, 0, &mut layer_state, xt, yt, &mut scratch, &mut []).unwrap();
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
