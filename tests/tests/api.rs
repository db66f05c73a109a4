//! Session and import behaviour a user relies on: clear errors instead of panics, fixed memory
//! past the capacity, f16 state storage, reset.

use loglinear_converter::{Checkpoint, ImportError};
use loglinear_runtime::{Session, SessionConfig, SessionError, StepError};
use loglinear_tests::*;
use std::collections::HashMap;
use std::path::PathBuf;

fn default_model() -> Checkpoint {
    Checkpoint::load(models_dir().join("ll-gdn-mcu")).unwrap()
}

#[test]
fn a_small_arena_is_refused_with_the_size_needed() {
    let ckpt = default_model();
    let model = ckpt.model().unwrap();
    let cfg = SessionConfig::default();
    let needed = Session::<f32>::arena_bytes(&model, &cfg).unwrap();
    let mut arena = vec![0u8; needed - 1];
    match Session::<f32>::new(&model, &mut arena, cfg) {
        Err(SessionError::ArenaTooSmall {
            needed: n,
            available,
        }) => {
            assert_eq!((n, available), (needed, needed - 1));
        }
        other => panic!("expected ArenaTooSmall, got {:?}", other.err()),
    }
    // f16 storage needs less.
    assert!(Session::<half::f16>::arena_bytes(&model, &cfg).unwrap() < needed);
    // Any start alignment works with the advertised size.
    let mut big = vec![0u8; needed + 8];
    for off in 0..4 {
        assert!(
            Session::<f32>::new(&model, &mut big[off..off + needed], cfg).is_ok(),
            "offset {off}"
        );
    }
}

#[test]
fn bad_levels_and_tokens_are_errors() {
    let ckpt = default_model();
    let model = ckpt.model().unwrap();
    for levels in [0, 1, 16] {
        let cfg = SessionConfig {
            levels: Some(levels),
            ..Default::default()
        };
        assert_eq!(
            Session::<f32>::arena_bytes(&model, &cfg),
            Err(SessionError::InvalidLevels(levels))
        );
    }
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
    let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
    assert_eq!(
        s.step(256).err(),
        Some(StepError::TokenOutOfRange {
            token: 256,
            vocab_size: 256
        })
    );
    assert_eq!(s.t(), 0, "a refused token is not consumed");
}

#[test]
fn decoding_past_the_capacity_keeps_fixed_memory() {
    // 4 levels: exact for 8 tokens, then the top level saturates.
    let ckpt = default_model();
    let model = ckpt.model().unwrap();
    let cfg = SessionConfig {
        levels: Some(4),
        ..Default::default()
    };
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
    let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
    let allocated = s.allocated_state_bytes();
    let text = std::fs::read(models_dir().join("ll-gdn-mcu/TRAINING.md")).unwrap();
    for (i, &b) in text.iter().take(600).enumerate() {
        let logits = s.step(b as u32).unwrap();
        assert!(
            logits.iter().all(|x| x.is_finite()),
            "non-finite logits at {i}"
        );
        let t = i as u64;
        let want = 1 + (1..3).filter(|&l| (t >> (l - 1)) & 1 == 1).count() + usize::from(t >= 4);
        assert_eq!(s.live_levels(), want, "t={t}");
        assert_eq!(s.allocated_state_bytes(), allocated);
    }
}

#[test]
fn reset_and_f16_state() {
    let ckpt = default_model();
    let model = ckpt.model().unwrap();
    let cfg = SessionConfig::default();
    let prompt = b"ROMEO:\n";
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
    let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
    let first: Vec<Vec<f32>> = prompt
        .iter()
        .map(|&b| s.step(b as u32).unwrap().to_vec())
        .collect();
    s.reset();
    assert_eq!(s.t(), 0);
    for (&b, want) in prompt.iter().zip(&first) {
        assert_eq!(
            s.step(b as u32).unwrap(),
            want.as_slice(),
            "reset must give a fresh session"
        );
    }
    let mut arena16 = vec![0u8; Session::<half::f16>::arena_bytes(&model, &cfg).unwrap()];
    let mut s16 = Session::<half::f16>::new(&model, &mut arena16, cfg).unwrap();
    for (&b, want) in prompt.iter().zip(&first) {
        let l = s16.step(b as u32).unwrap();
        let want: Vec<f64> = want.iter().map(|&x| x as f64).collect();
        assert!(rel_max(l, &want) < 1e-2, "f16 state drifts too far");
    }
}

/// A scratch copy of a golden checkpoint whose tensors `edit` may change.
fn edited_checkpoint(
    tag: &str,
    edit: impl FnOnce(&mut HashMap<String, (Vec<usize>, Vec<f32>)>),
) -> PathBuf {
    let src = golden_dir().join("model/h_gated_deltanet_stress");
    let dir = std::env::temp_dir().join(format!("loglinear-api-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let mut t: HashMap<String, (Vec<usize>, Vec<f32>)> =
        read_arrays(&src.join("model.safetensors"))
            .into_iter()
            .map(|(k, a)| (k, (a.shape.clone(), a.f32())))
            .collect();
    edit(&mut t);
    let bytes: HashMap<String, Vec<u8>> = t
        .iter()
        .map(|(k, (_, d))| (k.clone(), d.iter().flat_map(|x| x.to_le_bytes()).collect()))
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = t
        .iter()
        .map(|(k, (shape, _))| {
            (
                k.clone(),
                safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.clone(),
                    &bytes[k],
                )
                .unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
    dir
}

#[test]
fn import_errors_name_the_key() {
    let dir = edited_checkpoint("missing", |t| {
        t.remove("model.layers.1.attn.l_proj.weight");
    });
    let e = Checkpoint::load(&dir).unwrap_err().to_string();
    assert!(
        e.contains("model.layers.1.attn.l_proj.weight") && e.contains("missing"),
        "{e}"
    );

    let dir = edited_checkpoint("unknown", |t| {
        t.insert(
            "model.layers.0.attn.bogus.weight".into(),
            (vec![2], vec![0.0; 2]),
        );
    });
    let e = Checkpoint::load(&dir).unwrap_err().to_string();
    assert!(e.contains("model.layers.0.attn.bogus.weight"), "{e}");

    let dir = edited_checkpoint("extra-layer", |t| {
        t.insert(
            "model.layers.7.attn_norm.weight".into(),
            (vec![64], vec![1.0; 64]),
        );
    });
    let e = Checkpoint::load(&dir).unwrap_err().to_string();
    assert!(e.contains("model.layers.7.attn_norm.weight"), "{e}");

    let dir = edited_checkpoint("shape", |t| {
        t.insert(
            "model.layers.0.attn.q_proj.weight".into(),
            (vec![63, 64], vec![0.0; 63 * 64]),
        );
    });
    let e = Checkpoint::load(&dir).unwrap_err().to_string();
    assert!(
        e.contains("model.layers.0.attn.q_proj.weight") && e.contains("63x64"),
        "{e}"
    );

    // A truncated weights file and a missing folder are errors, not panics.
    let dir = edited_checkpoint("truncated", |_| {});
    let f = dir.join("model.safetensors");
    let bytes = std::fs::read(&f).unwrap();
    for cut in [0, 7, 8, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&f, &bytes[..cut]).unwrap();
        assert!(
            matches!(Checkpoint::load(&dir), Err(ImportError::Safetensors { .. })),
            "cut at {cut}"
        );
    }
    assert!(matches!(
        Checkpoint::load(dir.join("nope")),
        Err(ImportError::Io { .. })
    ));
}

#[test]
fn official_configs_with_bare_infinity_load() {
    for name in [
        "hattention_stress",
        "mamba2mlp_stress",
        "log_linear_mamba2_stress",
    ] {
        let dir = golden_dir().join("model").join(name);
        let text = std::fs::read_to_string(dir.join("config.json")).unwrap();
        assert!(
            text.contains("Infinity"),
            "{name} should exercise the Infinity path"
        );
        Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
