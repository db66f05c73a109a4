//! Round trips checkpoint → GGUF → runtime: the F32 file reproduces every golden model check
//! exactly as the checkpoint does, quantized shipped models stay within their measured error,
//! quantized golden models lose accuracy in type order, and the
//! trained models' greedy continuations come out of the F32 file byte for byte.

use loglinear_converter::export::{dequantize, gguf_name, ExportOptions, ExportedModel};
use loglinear_converter::gguf_writer::{GgufWriter, OwnedTensorData};
use loglinear_converter::model_source::AlignedBytes;
use loglinear_converter::Checkpoint;
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::quant::Activations;
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::{DType, Session, SessionConfig, TensorView};
use loglinear_tests::golden::{check_model, full_sequence_error};
use loglinear_tests::shipped::quantized_prompt_errors;
use loglinear_tests::*;

#[test]
fn f32_files_match_golden_like_checkpoints() {
    let m = manifest();
    for (name, entry) in cases(&m, "model") {
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap();
        let bytes = gguf_as(&ckpt, DType::F32);
        let file = GgufModel::parse(bytes.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(file.config(), &ckpt.config, "{name}: config round trip");
        let model = file.model().unwrap();
        let g = read_arrays(&dir.join("golden.safetensors"));
        check_model(&format!("{name} (gguf f32)"), &model, &g, tol::MODEL);
    }
}

/// Bounds on how far a shipped model's prompt logits move when its matrices are stored as each
/// type (`shipped::quantized_prompt_errors`, f32 activations), about 1.5× the figures measured
/// when this test was written: ll-gdn-mcu F16 8.9e-4, Q8_0 1.33e-2, Q4_0 0.220; ll-mamba2-mcu
/// 3.7e-4, 9.9e-3, 0.101; gdn-mcu 5.4e-4, 2.0e-2, 0.210. The trained models' bits per byte per
/// type are in BENCHMARKS.md.
const QUANT_BOUNDS: [(&str, [(DType, f64); 3]); 3] = [
    (
        "ll-gdn-mcu",
        [
            (DType::F16, 1.4e-3),
            (DType::Q8_0, 2e-2),
            (DType::Q4_0, 0.33),
        ],
    ),
    (
        "ll-mamba2-mcu",
        [
            (DType::F16, 6e-4),
            (DType::Q8_0, 1.5e-2),
            (DType::Q4_0, 0.15),
        ],
    ),
    (
        "gdn-mcu",
        [(DType::F16, 8e-4), (DType::Q8_0, 3e-2), (DType::Q4_0, 0.32)],
    ),
];

#[test]
fn quantized_shipped_models_stay_within_their_measured_error() {
    for (name, bounds) in QUANT_BOUNDS {
        let dtypes = bounds.map(|(dtype, _)| dtype);
        let errors = quantized_prompt_errors(name, &dtypes, Activations::F32);
        for ((dtype, bound), e) in bounds.into_iter().zip(errors) {
            eprintln!("{name} {}: prompt logits rel_max {e:.2e}", dtype.name());
            assert!(e <= bound, "{name} {}: {e:.2e} > {bound:.0e}", dtype.name());
        }
    }
}

/// Every golden stress model, whatever the set: each quantized file runs the full sequences,
/// and a coarser type is never more accurate (F16, then Q8_0, then Q4_0). No numeric bound:
/// the error depends on the weights, and a bound measured on one set says nothing of another.
#[test]
fn quantized_golden_models_lose_accuracy_in_type_order() {
    let m = manifest();
    let mut checked = 0;
    for (name, entry) in cases(&m, "model") {
        if entry["style"] != "stress" {
            continue;
        }
        let dir = golden_dir().join(entry["dir"].as_str().unwrap());
        let ckpt = Checkpoint::load(&dir).unwrap();
        let g = read_arrays(&dir.join("golden.safetensors"));
        let mut last = 0.0;
        for dtype in [DType::F16, DType::Q8_0, DType::Q4_0] {
            let bytes = gguf_as(&ckpt, dtype);
            let file = GgufModel::parse(bytes.as_bytes()).unwrap();
            let e = full_sequence_error(&file.model().unwrap(), &g);
            eprintln!("{name} {}: logits rel_max {e:.2e}", dtype.name());
            assert!(e.is_finite(), "{name} {}: error {e}", dtype.name());
            assert!(e > last, "{name}: coarser types must not be more accurate");
            last = e;
        }
        checked += 1;
    }
    assert!(checked > 0, "no stress model in the golden set");
}

#[test]
fn trained_models_reproduce_greedy_from_the_f32_file() {
    for model_name in ["ll-gdn-mcu", "ll-mamba2-mcu", "gdn-mcu"] {
        let dir = models_dir().join(model_name);
        let ckpt = Checkpoint::load(&dir).unwrap();
        let bytes = gguf_as(&ckpt, DType::F32);
        let file = GgufModel::parse(bytes.as_bytes()).unwrap();
        let model = file.model().unwrap();
        let exp = read_arrays(&dir.join("prompts/expected.safetensors"));
        let cfg = SessionConfig::default();
        let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
        let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
        for id in get(&exp, "prompt_ids", model_name).ids() {
            s.step(id).unwrap();
        }
        assert_close(
            s.logits(),
            &get(&exp, "last_prompt_logits", model_name).data,
            tol::MODEL,
            model_name,
        );
        let mut sampler = Sampler::new(SamplerConfig::default());
        let mut scratch = vec![0u32; model.config().vocab_size];
        for (i, want) in get(&exp, "greedy_ids", model_name)
            .ids()
            .into_iter()
            .enumerate()
        {
            let next = sampler.sample(s.logits(), &mut scratch).unwrap();
            assert_eq!(
                next, want,
                "{model_name}: greedy byte {i} from the F32 file"
            );
            s.step(next).unwrap();
        }
    }
}

/// Patches the u32 value of metadata `key` in a model file.
fn patch_u32(bytes: &[u8], key: &str, value: u32) -> Vec<u8> {
    let pos = bytes
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap()
        + key.len();
    assert_eq!(&bytes[pos..pos + 4], &4u32.to_le_bytes(), "{key} is a u32");
    let mut b = bytes.to_vec();
    b[pos + 4..pos + 8].copy_from_slice(&value.to_le_bytes());
    b
}

#[test]
fn hostile_model_files_give_typed_errors() {
    use loglinear_runtime::gguf::{GgufError, ModelFileError};
    use loglinear_runtime::{ConfigError, ModelError, Role, TensorName};
    let ckpt = Checkpoint::load(golden_dir().join("model/hattention_stress")).unwrap();
    let good = gguf_as(&ckpt, DType::F32).as_bytes().to_vec();
    let parse = |b: &[u8]| {
        GgufModel::parse(AlignedBytes::from_slice(b).as_bytes())
            .map(|_| ())
            .err()
    };

    // A layer count that would make validation iterate for ever is refused at once.
    let e = parse(&patch_u32(&good, "loglinear_mamba2.block_count", u32::MAX));
    assert_eq!(
        e,
        Some(ModelFileError::Model(ModelError::Config(
            ConfigError::TooManyLayers
        )))
    );
    // One block more than the file holds: the first tensor of that block is named as missing.
    let layers = ckpt.config.num_layers;
    let e = parse(&patch_u32(
        &good,
        "loglinear_mamba2.block_count",
        layers as u32 + 1,
    ));
    assert!(
        matches!(e, Some(ModelFileError::MissingTensor(name)) if name.layer == Some(layers as u16)),
        "{e:?}"
    );
    // A dimension that disagrees with the tensors names the tensor.
    let e = parse(&patch_u32(
        &good,
        "loglinear_mamba2.feed_forward_length",
        ckpt.config.intermediate_size as u32 + 32,
    ));
    assert!(
        matches!(e, Some(ModelFileError::Model(ModelError::ShapeMismatch { name, .. })) if name.role == Role::MlpGate),
        "{e:?}"
    );
    // The session levels the writer recorded must be the ones this reader keeps.
    let e = parse(&patch_u32(&good, "loglinear_mamba2.state_levels", 7));
    assert_eq!(e, Some(ModelFileError::BadValue("state_levels")));
    // A missing key is named with the file's architecture prefix.
    let mut b = good.clone();
    let key = b"loglinear_mamba2.feed_forward_length";
    let p = b.windows(key.len()).position(|w| w == key).unwrap();
    b[p + key.len() - 1] = b'X';
    let e = parse(&b).unwrap();
    assert_eq!(
        e,
        ModelFileError::MissingKey {
            arch: "loglinear_mamba2",
            key: "feed_forward_length"
        }
    );
    assert_eq!(
        e.to_string(),
        "metadata key loglinear_mamba2.feed_forward_length is missing"
    );
    // An unknown architecture, a truncated file, a wrong version.
    let mut b = good.clone();
    let p = b
        .windows(16)
        .position(|w| w == b"loglinear_mamba2")
        .unwrap();
    b[p..p + 16].copy_from_slice(b"loglinear_mambaX");
    assert_eq!(parse(&b), Some(ModelFileError::UnknownArchitecture));
    assert!(matches!(
        parse(&good[..good.len() - 1]),
        Some(ModelFileError::Gguf(GgufError::Tensor { .. }))
    ));
    let mut b = good.clone();
    b[4] = 2;
    assert_eq!(
        parse(&b),
        Some(ModelFileError::Gguf(GgufError::UnsupportedVersion(2)))
    );
    // The exporter keeps a recurrence-critical tensor f32 whatever the overrides say, and
    // says so; a file written elsewhere with such a tensor quantized is refused, naming it.
    let opts = ExportOptions {
        overrides: vec!["ssm_norm.weight=q8_0".parse().unwrap()],
        ..Default::default()
    };
    let m = ExportedModel::from_checkpoint(&ckpt, &opts).unwrap();
    let r = m
        .report()
        .iter()
        .find(|r| r.name == "blk.0.ssm_norm.weight")
        .unwrap();
    assert_eq!(r.dtype, DType::F32);
    assert!(
        r.note
            .as_deref()
            .unwrap_or("")
            .contains("recurrence-critical"),
        "{r:?}"
    );
    let mut w = GgufWriter::new(32);
    for (k, v) in m.metadata().unwrap() {
        w.add(k, v).unwrap();
    }
    for (name, shape, data) in m.tensors() {
        let data = if name == TensorName::block(0, Role::OutNorm) {
            let f = dequantize(&TensorView::new(1, data.len(), data.as_data()).unwrap());
            OwnedTensorData::from_f32(&f, f.len(), DType::F16).unwrap()
        } else {
            data.clone()
        };
        w.add_tensor(gguf_name(name), shape, data).unwrap();
    }
    let e = parse(&w.to_bytes());
    assert!(
        matches!(
            e,
            Some(ModelFileError::Model(ModelError::NotF32(TensorName {
                role: Role::OutNorm,
                layer: Some(0)
            })))
        ),
        "{e:?}"
    );
    assert_eq!(parse(&good), None);
}

/// The shipped default model is exactly what `loglinear convert models/ll-gdn-mcu --type q8_0
/// --name ll-gdn-mcu` writes today, and it still produces the golden greedy continuation.
#[test]
fn shipped_default_model_is_a_fresh_conversion() {
    let shipped = std::fs::read(models_dir().join("ll-gdn-mcu-q8_0.gguf")).unwrap();
    let ckpt = Checkpoint::load(models_dir().join("ll-gdn-mcu")).unwrap();
    let opts = ExportOptions {
        name: Some("ll-gdn-mcu".into()),
        matrix_type: DType::Q8_0,
        ..Default::default()
    };
    let fresh = ExportedModel::from_checkpoint(&ckpt, &opts)
        .unwrap()
        .to_gguf()
        .unwrap();
    assert!(
        fresh == shipped,
        "models/ll-gdn-mcu-q8_0.gguf is stale: re-run the conversion"
    );

    let bytes = AlignedBytes::from_slice(&shipped);
    let file = GgufModel::parse(bytes.as_bytes()).unwrap();
    let model = file.model().unwrap();
    let exp = read_arrays(&models_dir().join("ll-gdn-mcu/prompts/expected.safetensors"));
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(&model, &cfg).unwrap()];
    let mut s = Session::<f32>::new(&model, &mut arena, cfg).unwrap();
    for id in get(&exp, "prompt_ids", "default").ids() {
        s.step(id).unwrap();
    }
    let mut sampler = Sampler::new(SamplerConfig::default());
    let mut scratch = vec![0u32; 256];
    let want = get(&exp, "greedy_ids", "default").ids();
    let mut got = Vec::new();
    for _ in 0..want.len() {
        let next = sampler.sample(s.logits(), &mut scratch).unwrap();
        got.push(next);
        s.step(next).unwrap();
    }
    // Measured: Q8_0 keeps all 64 greedy bytes of this model (smallest top-2 margin 0.044).
    assert_eq!(got, want);
}
