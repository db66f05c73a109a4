//! Chunkwise CPU prefill against token-by-token stepping on the shipped (trained) models: the
//! f32 checkpoints, the Q8_0 model file, and F16 / Q4_0 exports (weights dequantized once per
//! prefill). The prompt is the models' TRAINING.md text, byte-level.

mod cpu_prefill_common;

use cpu_prefill_common::*;
use loglinear_converter::model_source::{AlignedBytes, IndexedGguf};
use loglinear_converter::Checkpoint;
use loglinear_runtime::DType;
use loglinear_tests::{export_as, models_dir};

/// The first `n` bytes of TRAINING.md as tokens.
fn prompt(n: usize) -> Vec<u32> {
    let text = std::fs::read(models_dir().join("ll-gdn-mcu/TRAINING.md")).unwrap();
    assert!(text.len() >= n, "TRAINING.md is shorter than {n} bytes");
    text[..n].iter().map(|&b| u32::from(b)).collect()
}

/// Every f32 checkpoint: a long prompt (12 full chunks and a partial one, levels up to 10),
/// a prompt that saturates 4 levels, and one shorter than a chunk.
#[test]
fn checkpoints_match_stepping() {
    let ids = prompt(800);
    let mut worst = Errors::default();
    for dir in ["ll-gdn-mcu", "ll-mamba2-mcu", "gdn-mcu"] {
        let ckpt = Checkpoint::load(models_dir().join(dir)).unwrap();
        let model = ckpt.model().unwrap();
        let levels = model.config().default_state_levels();
        worst = worst.max(prefill_vs_stepping(dir, &model, &ids, levels, 16, TOL));
        worst = worst.max(prefill_vs_stepping(dir, &model, &ids[..40], levels, 4, TOL));
        if model.config().arch.is_log_linear() {
            worst = worst.max(prefill_vs_stepping(dir, &model, &ids[..300], 4, 8, TOL));
        }
    }
    eprintln!("worst over the checkpoints: {worst:?}");
}

/// The Q8_0 model file, and F16 and Q4_0 exports of the Mamba-2 checkpoint: the prefill
/// dequantizes each matrix once; stepping multiplies the quantized blocks in place.
#[test]
fn quantized_models_match_stepping() {
    let ids = prompt(500);
    let bytes = AlignedBytes::read(&models_dir().join("ll-gdn-mcu-q8_0.gguf")).unwrap();
    let gguf = IndexedGguf::parse(bytes.as_bytes()).unwrap();
    let model = gguf.model().unwrap();
    assert_eq!(model.mlp(0).unwrap().up.dtype(), DType::Q8_0);
    let levels = model.config().default_state_levels();
    let mut worst = prefill_vs_stepping("ll-gdn-mcu q8_0", &model, &ids, levels, 16, TOL);

    let ckpt = Checkpoint::load(models_dir().join("ll-mamba2-mcu")).unwrap();
    for dtype in [DType::F16, DType::Q4_0] {
        let exported = export_as(&ckpt, dtype);
        let model = exported.model().unwrap();
        assert_eq!(model.mlp(0).unwrap().up.dtype(), dtype);
        let what = format!("ll-mamba2-mcu {}", dtype.name());
        let levels = model.config().default_state_levels();
        worst = worst.max(prefill_vs_stepping(&what, &model, &ids, levels, 16, TOL));
    }
    eprintln!("worst over the quantized models: {worst:?}");
}
