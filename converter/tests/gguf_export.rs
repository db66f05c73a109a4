//! The GGUF export end to end: the runtime's own GGUF reader reads back what the writer wrote,
//! tensor for tensor and key for key; type selection, overrides and the F16 fallback.

use loglinear_converter::export::{expected_tensors, gguf_name, ExportedModel, TypeOverride};
use loglinear_converter::model_source::AlignedBytes;
use loglinear_converter::{
    export_gguf, Checkpoint, ExportError, ExportOptions, Tensor, TensorStore,
};
use loglinear_runtime::gguf::{names, GgufFile, MetaValue};
use loglinear_runtime::quant::{BlockQ4_0, BlockQ8_0};
use loglinear_runtime::rng::SplitMix64;
use loglinear_runtime::{Arch, DType, ModelConfig, Role, TensorName, WeightSource};
use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A small log-linear GDN whose width (48) is not a multiple of 32.
fn odd_config() -> ModelConfig {
    ModelConfig {
        arch: Arch::LogLinearGatedDeltaNet,
        vocab_size: 256,
        hidden_size: 48,
        num_layers: 2,
        intermediate_size: 64,
        norm_eps: 1e-6,
        num_heads: 2,
        head_k_dim: 16,
        head_v_dim: 32,
        num_groups: 2,
        conv_kernel: 4,
        conv_bias: false,
        norm_group_size: 32,
        lambda_levels: 15,
    }
}

/// Deterministic pseudo-random weights for every tensor of `c`.
fn store(c: &ModelConfig) -> TensorStore {
    let mut s = TensorStore::default();
    let mut r = SplitMix64::new(1);
    for name in expected_tensors(c) {
        let (rows, cols) = c.tensor_shape(name.role);
        let data = (0..rows * cols)
            .map(|_| (r.unit_f32() - 0.5) * 0.2)
            .collect();
        s.insert(name, Tensor { rows, cols, data });
    }
    s
}

fn opts(t: DType, overrides: &[&str]) -> ExportOptions {
    ExportOptions {
        name: Some("test".into()),
        matrix_type: t,
        overrides: overrides.iter().map(|o| o.parse().unwrap()).collect(),
    }
}

#[test]
fn rows_that_are_not_whole_blocks_fall_back_to_f16_and_say_so() {
    let c = odd_config();
    let s = store(&c);
    let e = ExportedModel::from_source(c, &s, &opts(DType::Q4_0, &[]), &mut |_| {}).unwrap();
    for r in e.report() {
        let (_, role) = names::parse_tensor_name(&r.name).unwrap();
        let cols = *r.shape.last().unwrap();
        let want = if r.shape.len() == 1 || !loglinear_converter::export::is_matrix(role) {
            DType::F32
        } else if cols % 32 == 0 {
            DType::Q4_0
        } else {
            DType::F16
        };
        assert_eq!(r.dtype, want, "{}", r.name);
        assert_eq!(
            r.requested == DType::Q4_0,
            loglinear_converter::export::is_matrix(role)
        );
        if want == DType::F16 {
            assert!(
                r.note.as_deref().unwrap().contains("not a multiple of 32"),
                "{}",
                r.name
            );
        }
    }
    // Both kinds occur: width-48 inputs fall back, the 64-wide ffn_down / ssm_out do not.
    let find = |n: &str| e.report().iter().find(|r| r.name == n).unwrap().dtype;
    assert_eq!(find("blk.0.attn_q.weight"), DType::F16);
    assert_eq!(find("blk.0.ffn_down.weight"), DType::Q4_0);
    assert_eq!(find("blk.1.ssm_out.weight"), DType::Q4_0);
    e.model().unwrap();
}

#[test]
fn overrides_last_match_wins_and_critical_tensors_stay_f32() {
    let c = odd_config();
    let s = store(&c);
    let o = opts(
        DType::Q8_0,
        &["ffn_down=q4_0", "blk.1.*=f32", "ssm_a_log=f16", "norm=q8_0"],
    );
    let e = ExportedModel::from_source(c, &s, &o, &mut |_| {}).unwrap();
    let get = |n: &str| e.report().iter().find(|r| r.name == n).unwrap().clone();
    assert_eq!(get("blk.0.ffn_down.weight").dtype, DType::Q4_0);
    assert_eq!(get("blk.1.ffn_down.weight").dtype, DType::F32);
    assert_eq!(get("blk.0.ffn_up.weight").dtype, DType::F16); // 48 wide: fallback
    assert_eq!(get("blk.0.ssm_out.weight").dtype, DType::Q8_0);
    let a = get("blk.0.ssm_a_log");
    assert_eq!(a.dtype, DType::F32);
    assert!(a.note.unwrap().contains("recurrence-critical"));
    assert_eq!(get("output_norm.weight").dtype, DType::F32);

    let bad = opts(DType::Q8_0, &["no_such_tensor=f16"]);
    assert!(matches!(
        ExportedModel::from_source(c, &s, &bad, &mut |_| {}),
        Err(ExportError::PatternMatchesNothing(p)) if p == "no_such_tensor"
    ));
}

#[test]
fn missing_and_misshapen_tensors_are_named() {
    let c = odd_config();
    let mut s = store(&c);
    s.insert(
        TensorName::block(1, Role::KProj),
        Tensor {
            rows: 3,
            cols: 48,
            data: vec![0.0; 144],
        },
    );
    let err = ExportedModel::from_source(c, &s, &opts(DType::F32, &[]), &mut |_| {}).unwrap_err();
    assert!(
        matches!(&err, ExportError::Model { name, .. } if name == "blk.1.attn_k.weight"),
        "{err}"
    );
    let mut partial = TensorStore::default();
    for (n, t) in s.iter().filter(|(n, _)| n.role != Role::VConv) {
        partial.insert(n, t.clone());
    }
    let err =
        ExportedModel::from_source(c, &partial, &opts(DType::F32, &[]), &mut |_| {}).unwrap_err();
    assert!(
        matches!(&err, ExportError::MissingTensor(n) if n == "blk.0.ssm_conv1d_v.weight"),
        "{err}"
    );
}

/// Converts a shipped model at every type and reads the bytes back with the runtime's reader.
#[test]
fn shipped_model_round_trips_through_the_runtime_reader() {
    let ckpt = Checkpoint::load(repo().join("models/ll-gdn-mcu")).unwrap();
    let c = ckpt.config;
    for t in [DType::F32, DType::F16, DType::Q8_0, DType::Q4_0] {
        let bytes = export_gguf(&ckpt, &opts(t, &[])).unwrap();
        let aligned = AlignedBytes::from_slice(&bytes);
        let f = GgufFile::parse(aligned.as_bytes()).unwrap();
        assert_eq!(f.alignment(), 32);
        let arch = names::arch_name(c.arch);
        assert_eq!(
            f.get("general.architecture").and_then(|v| v.as_str()),
            Some(arch)
        );
        let u = |k| f.get_prefixed(arch, k).and_then(|v| v.as_u64());
        assert_eq!(u(names::key::VOCAB_SIZE), Some(256));
        assert_eq!(u(names::key::EMBEDDING_LENGTH), Some(c.hidden_size as u64));
        assert_eq!(u(names::key::HEAD_V_DIM), Some(c.head_v_dim as u64));
        assert_eq!(u(names::key::LAMBDA_LEVELS), Some(15));
        assert_eq!(u(names::key::STATE_LEVELS), Some(15));
        assert_eq!(
            f.get_prefixed(arch, names::key::NORM_EPSILON),
            Some(MetaValue::F32(c.norm_eps))
        );
        let Some(MetaValue::Array(toks)) = f.get("tokenizer.ggml.tokens") else {
            panic!("no tokens")
        };
        let toks: Vec<_> = toks
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(toks[0x41], "<0x41>");
        assert_eq!(toks.len(), 256);

        let names_in_file: Vec<_> = f.tensors().map(|t| t.name.to_string()).collect();
        let want: Vec<_> = expected_tensors(&c).into_iter().map(gguf_name).collect();
        assert_eq!(names_in_file, want);
        for info in f.tensors() {
            let (layer, role) = names::parse_tensor_name(info.name).unwrap();
            let orig = ckpt.store.tensor(TensorName { layer, role }).unwrap();
            let orig = orig.as_f32().unwrap();
            assert_eq!(info.offset % 32, 0);
            assert_eq!(info.len(), orig.len(), "{}", info.name);
            let critical = !loglinear_converter::export::is_matrix(role);
            let dtype = if critical { DType::F32 } else { t };
            assert_eq!(info.dtype, dtype, "{}", info.name);
            if info.n_dims == 1 {
                assert_eq!(info.dims[0] as usize, orig.len());
            }
            // The bytes are exactly the runtime's own encoding of the checkpoint's values.
            let cols = info.cols();
            match dtype {
                DType::F32 => {
                    let got: &[f32] = bytemuck::cast_slice(info.data);
                    assert_eq!(got, orig, "{}", info.name);
                }
                DType::F16 => {
                    let got: &[half::f16] = bytemuck::cast_slice(info.data);
                    assert!(got
                        .iter()
                        .zip(orig)
                        .all(|(a, b)| *a == half::f16::from_f32(*b)));
                }
                DType::Q8_0 => {
                    let got: &[BlockQ8_0] = bytemuck::cast_slice(info.data);
                    for (b, x) in got.iter().zip(orig.chunks_exact(32)) {
                        assert_eq!(*b, BlockQ8_0::quantize(x.try_into().unwrap()));
                    }
                    assert_eq!(got.len() * 32, orig.len());
                    assert_eq!(cols % 32, 0);
                }
                DType::Q4_0 => {
                    let got: &[BlockQ4_0] = bytemuck::cast_slice(info.data);
                    for (b, x) in got.iter().zip(orig.chunks_exact(32)) {
                        assert_eq!(*b, BlockQ4_0::quantize(x.try_into().unwrap()));
                    }
                    assert_eq!(got.len() * 32, orig.len());
                }
            }
        }
    }
}

#[test]
fn overrides_parse_like_the_cli() {
    let o: TypeOverride = "blk.*.ffn_*=q4_0".parse().unwrap();
    assert!(o.matches("blk.3.ffn_up.weight"));
    assert!(!o.matches("output.weight"));
}

/// The runtime's `GgufModel` accepts what `convert` writes and runs the same logits as the
/// checkpoint, bit for bit, at f32.
#[test]
fn gguf_model_runs_the_exported_file() {
    use loglinear_converter::model_source::IndexedGguf;
    use loglinear_runtime::gguf::GgufModel;
    use loglinear_runtime::{Session, SessionConfig};
    let ckpt = Checkpoint::load(repo().join("models/ll-gdn-mcu")).unwrap();
    let bytes = export_gguf(&ckpt, &opts(DType::F32, &[])).unwrap();
    let aligned = AlignedBytes::from_slice(&bytes);
    let g = GgufModel::parse(aligned.as_bytes()).unwrap();
    assert_eq!(*g.config(), ckpt.config);
    let indexed = IndexedGguf::parse(aligned.as_bytes()).unwrap();
    let (a, b) = (ckpt.model().unwrap(), indexed.model().unwrap());
    let cfg = SessionConfig::default();
    let mut ra = vec![0u8; Session::<f32>::arena_bytes(&a, &cfg).unwrap()];
    let mut rb = vec![0u8; Session::<f32>::arena_bytes(&b, &cfg).unwrap()];
    let mut sa = Session::<f32>::new(&a, &mut ra, cfg).unwrap();
    let mut sb = Session::<f32>::new(&b, &mut rb, cfg).unwrap();
    for &t in b"ROMEO:\n" {
        let la = sa.step(t as u32).unwrap().to_vec();
        assert_eq!(la, sb.step(t as u32).unwrap());
    }
}
