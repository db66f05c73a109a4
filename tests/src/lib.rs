//! Shared helpers for the integration tests: where the data lives, reading safetensors
//! references, and the relative error metric of the golden README.
//!
//! The model fixtures, which import checkpoints through `loglinear-converter`, sit behind the
//! default feature `models`: `loglinear-host-gpu`'s tests take only the golden helpers
//! (`default-features = false`), so the GPU crate's tree holds no converter.

#[cfg(feature = "models")]
pub mod bpe_fixture;
pub mod golden;
#[cfg(feature = "models")]
pub mod golden_layer;
#[cfg(feature = "models")]
pub mod microbit_model;
#[cfg(feature = "models")]
pub mod prefill_fixture;
pub mod random;
#[cfg(feature = "models")]
pub mod shipped;
#[cfg(feature = "models")]
pub mod snapshot_fixture;

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A folder from an environment variable, a relative path taken from the repository root
/// (cargo runs tests inside `tests/`, which is not where a user types the command).
fn dir_from_env(var: &str, default: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(d) => repo_root().join(PathBuf::from(d)),
        None => repo_root().join(default),
    }
}

/// The golden folder: `LOGLINEAR_GOLDEN_DIR`, or the project copy `tests/golden`.
pub fn golden_dir() -> PathBuf {
    dir_from_env("LOGLINEAR_GOLDEN_DIR", "tests/golden")
}

/// The trained models: `LOGLINEAR_MODELS_DIR`, or the project copy `models/`.
pub fn models_dir() -> PathBuf {
    dir_from_env("LOGLINEAR_MODELS_DIR", "models")
}

/// `../shared` beside the checkout, if present (developer machines and CI have it).
pub fn shared_dir() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared");
    d.is_dir().then_some(d)
}

/// The golden `manifest.json`.
pub fn manifest() -> Value {
    let path = golden_dir().join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cases of one manifest section, sorted by name. Panics (fails the test) if the section is
/// missing or empty: a golden run that checks nothing must not pass.
pub fn cases(manifest: &Value, section: &str) -> Vec<(String, Value)> {
    let obj = manifest[section]
        .as_object()
        .unwrap_or_else(|| panic!("manifest has no `{section}` section"));
    assert!(!obj.is_empty(), "manifest section `{section}` is empty");
    let mut v: Vec<_> = obj.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// A tensor read as f64 with its shape.
#[derive(Clone, Debug)]
pub struct Array {
    /// Shape.
    pub shape: Vec<usize>,
    /// Row-major values.
    pub data: Vec<f64>,
}

impl Array {
    /// Values cast to f32 (the golden inputs are f32-representable).
    pub fn f32(&self) -> Vec<f32> {
        self.data.iter().map(|&x| x as f32).collect()
    }
    /// Values as token ids.
    pub fn ids(&self) -> Vec<u32> {
        self.data.iter().map(|&x| x as u32).collect()
    }
}

/// Every tensor of a safetensors file, as f64 (F64, F32, I64 supported).
pub fn read_arrays(path: &Path) -> HashMap<String, Array> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    st.tensors()
        .into_iter()
        .map(|(k, v)| {
            let b = v.data();
            let data: Vec<f64> = match v.dtype() {
                Dtype::F64 => b
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect(),
                Dtype::F32 => b
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
                    .collect(),
                Dtype::I64 => b
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64)
                    .collect(),
                d => panic!("{}: tensor {k} has unsupported dtype {d:?}", path.display()),
            };
            (
                k,
                Array {
                    shape: v.shape().to_vec(),
                    data,
                },
            )
        })
        .collect()
}

/// Fetches a tensor or fails naming the file and key.
pub fn get<'a>(arrays: &'a HashMap<String, Array>, key: &str, what: &str) -> &'a Array {
    arrays
        .get(key)
        .unwrap_or_else(|| panic!("{what}: golden tensor `{key}` is missing"))
}

/// The lengths `n` of the tensors named `{prefix}{n}{suffix}`, shortest first: the golden
/// sets name their sequences by length (`ids_T300`, `T50.x`), and another set has other
/// lengths.
fn lengths(arrays: &HashMap<String, Array>, prefix: &str, suffix: &str) -> Vec<usize> {
    let mut v: Vec<usize> = arrays
        .keys()
        .filter_map(|k| k.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// The sequence lengths of a golden model case (its `ids_T{n}` tensors), shortest first.
/// Fails naming the case if it has none.
pub fn model_lengths(g: &HashMap<String, Array>, what: &str) -> Vec<usize> {
    let v = lengths(g, "ids_T", "");
    assert!(!v.is_empty(), "{what}: no `ids_T<n>` tensor");
    v
}

/// The token ids of a golden model case's longest sequence: the one its decode trace
/// (`decode.*`) follows.
pub fn decode_ids(g: &HashMap<String, Array>, what: &str) -> Vec<u32> {
    let t = *model_lengths(g, what).last().unwrap();
    get(g, &format!("ids_T{t}"), what).ids()
}

/// The sequence lengths of a golden layer case (its `T{n}.x` tensors), shortest first. Fails
/// naming the case if it has none.
pub fn layer_lengths(arrays: &HashMap<String, Array>, what: &str) -> Vec<usize> {
    let v = lengths(arrays, "T", ".x");
    assert!(!v.is_empty(), "{what}: no `T<n>.x` tensor");
    v
}

/// The length whose intermediates (`T{n}.inter.*`) a golden layer case stores.
pub fn layer_inter_length(arrays: &HashMap<String, Array>, what: &str) -> usize {
    layer_lengths(arrays, what)
        .into_iter()
        .find(|t| {
            arrays
                .keys()
                .any(|k| k.starts_with(&format!("T{t}.inter.")))
        })
        .unwrap_or_else(|| panic!("{what}: no `T<n>.inter.*` intermediates"))
}

/// The golden README's metric: max|a − b| / max|b|.
pub fn rel_max(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let num = a
        .iter()
        .zip(b)
        .map(|(x, y)| (*x as f64 - y).abs())
        .fold(0.0, f64::max);
    let den = b.iter().map(|y| y.abs()).fold(0.0, f64::max);
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

/// Asserts `rel_max(a, b) <= tol`, naming the case.
#[track_caller]
pub fn assert_close(a: &[f32], b: &[f64], tol: f64, what: &str) {
    let e = rel_max(a, b);
    assert!(
        e.is_finite() && e <= tol,
        "{what}: rel_max {e:.3e} > {tol:.0e}"
    );
}

/// [`assert_close`] that also prints the error (seen with `--nocapture`) and returns it, for
/// tests that report their worst case.
#[track_caller]
pub fn check_rel_max(what: &str, ours: &[f32], reference: &[f64], tol: f64) -> f64 {
    assert_close(ours, reference, tol, what);
    let e = rel_max(ours, reference);
    eprintln!("{what}: rel_max {e:.2e} (tolerance {tol:.0e})");
    e
}

/// Tolerances of golden README §7 for an exact-fp32 implementation.
pub mod tol {
    /// Operator outputs and states.
    pub const OPERATOR: f64 = 2e-5;
    /// Layer outputs.
    pub const LAYER: f64 = 5e-5;
    /// Logits, decode logits and model states.
    pub const MODEL: f64 = 1e-4;
}

#[cfg(feature = "models")]
/// `ckpt` converted with its matrices stored as `dtype`, everything else as the converter's
/// defaults.
pub fn export_as(
    ckpt: &loglinear_converter::Checkpoint,
    dtype: loglinear_runtime::DType,
) -> loglinear_converter::ExportedModel {
    let opts = loglinear_converter::ExportOptions {
        matrix_type: dtype,
        ..Default::default()
    };
    loglinear_converter::ExportedModel::from_checkpoint(ckpt, &opts).unwrap()
}

#[cfg(feature = "models")]
/// The model file of [`export_as`], in memory aligned for the model reader.
pub fn gguf_as(
    ckpt: &loglinear_converter::Checkpoint,
    dtype: loglinear_runtime::DType,
) -> loglinear_converter::model_source::AlignedBytes {
    let file = export_as(ckpt, dtype).to_gguf().unwrap();
    loglinear_converter::model_source::AlignedBytes::from_slice(&file)
}

#[cfg(feature = "models")]
/// The tensors of an untrained model of `config`: every value uniform in
/// [-scale / 2, scale / 2), from a linear congruential sequence (glibc's constants) that goes on
/// from `seed`.
pub fn uniform_store(
    config: &loglinear_runtime::ModelConfig,
    seed: &mut u32,
    scale: f32,
) -> loglinear_converter::TensorStore {
    let mut store = loglinear_converter::TensorStore::default();
    for name in config.tensor_names() {
        let (rows, cols) = config.tensor_shape(name.role);
        let data = (0..rows * cols)
            .map(|_| {
                *seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                ((*seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * scale
            })
            .collect();
        store.insert(name, loglinear_converter::Tensor { rows, cols, data });
    }
    store
}

/// Everything a model file from an untrusted source goes through: parse, walk all metadata and
/// tensors, and if it is a valid model, step it once. Shared by the fuzz target
/// (`fuzz/fuzz_targets/gguf_model.rs`) and the corpus replay test, so both exercise the same
/// paths. It must never panic, whatever `data` holds.
pub fn exercise_model_file(data: &[u8]) {
    use loglinear_runtime::gguf::{GgufFile, GgufModel, MetaValue};
    use loglinear_runtime::{Session, SessionConfig};
    // Copy into u64 words so that the buffer's alignment is not what decides.
    let mut words = vec![0u64; data.len().div_ceil(8)];
    let bytes: &mut [u8] = bytemuck_bytes(&mut words);
    bytes[..data.len()].copy_from_slice(data);
    let bytes = &bytes[..data.len()];
    if let Ok(f) = GgufFile::parse(bytes) {
        for (_, v) in f.metadata() {
            if let MetaValue::Array(a) = v {
                a.iter().take(1 << 16).for_each(drop);
            }
        }
        for t in f.tensors() {
            let _ = t.view();
        }
    }
    if let Ok(m) = GgufModel::parse(bytes) {
        let Ok(model) = m.model() else { return };
        let cfg = SessionConfig::default();
        match Session::<f32>::arena_bytes(&model, &cfg) {
            Ok(n) if n <= 64 << 20 => {
                let mut arena = vec![0u8; n];
                if let Ok(mut s) = Session::<f32>::new(&model, &mut arena, cfg) {
                    let _ = s.step(0);
                }
            }
            _ => {}
        }
    }
}

fn bytemuck_bytes(words: &mut [u64]) -> &mut [u8] {
    let n = words.len() * 8;
    &mut bytemuck::cast_slice_mut::<u64, u8>(words)[..n]
}
