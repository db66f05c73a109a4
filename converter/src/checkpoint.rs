//! Loading a checkpoint folder (`config.json` + `model.safetensors`) into memory.

use crate::config_json::{parse_config, parse_lenient_json};
pub use crate::error::ImportError;
use crate::layout::Layout;
use crate::vocab::Vocabulary;
use loglinear_runtime::{Model, ModelConfig, ModelError, TensorName, TensorView, WeightSource};
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

/// An owned f32 tensor with its 2-D view shape.
#[derive(Clone, Debug)]
pub struct Tensor {
    /// Rows of the 2-D view.
    pub rows: usize,
    /// Columns of the 2-D view.
    pub cols: usize,
    /// Row-major data.
    pub data: Vec<f32>,
}

/// Owned tensors by name: a [`WeightSource`] over host memory.
#[derive(Clone, Debug, Default)]
pub struct TensorStore {
    tensors: HashMap<TensorName, Tensor>,
}

impl TensorStore {
    /// Adds or replaces a tensor.
    pub fn insert(&mut self, name: TensorName, t: Tensor) {
        self.tensors.insert(name, t);
    }

    /// The names of the tensors held, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = TensorName> + '_ {
        self.tensors.keys().copied()
    }

    /// The tensors held, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (TensorName, &Tensor)> + '_ {
        self.tensors.iter().map(|(n, t)| (*n, t))
    }

    /// Reads every tensor of a safetensors buffer whose key `name_of` maps to a name; a key it
    /// maps to `None` is an [`ImportError::UnknownKey`]-style error built by `unknown`.
    pub fn from_safetensors(
        path: &Path,
        bytes: &[u8],
        mut name_of: impl FnMut(&str) -> Result<Option<TensorName>, ImportError>,
    ) -> Result<(Self, HashMap<TensorName, String>), ImportError> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| ImportError::Safetensors {
            path: path.to_path_buf(),
            message: crate::error::safetensors_problem(&e),
        })?;
        let mut store = TensorStore::default();
        let mut keys = HashMap::new();
        // In name order: safetensors lists tensors in hash order, and the first refused key
        // must be the same on every run.
        let mut tensors = st.tensors();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, view) in tensors {
            let Some(name) = name_of(&key)? else { continue };
            let data = to_f32(&key, view.dtype(), view.data())?;
            let shape = view.shape();
            let (rows, cols) = match shape {
                [] => (1, 1),
                [n] => (1, *n),
                [r, rest @ ..] => (*r, rest.iter().product()),
            };
            store.insert(name, Tensor { rows, cols, data });
            keys.insert(name, key);
        }
        Ok((store, keys))
    }
}

impl WeightSource for TensorStore {
    fn tensor(&self, name: TensorName) -> Option<TensorView<'_>> {
        let t = self.tensors.get(&name)?;
        TensorView::f32(t.rows, t.cols, &t.data)
    }
}

fn to_f32(key: &str, dtype: Dtype, b: &[u8]) -> Result<Vec<f32>, ImportError> {
    let chunks = |n: usize| b.chunks_exact(n);
    Ok(match dtype {
        Dtype::F32 => chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::F64 => chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32)
            .collect(),
        Dtype::F16 => chunks(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::BF16 => chunks(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        other => {
            return Err(ImportError::Dtype {
                key: key.to_string(),
                dtype: other.to_string(),
            })
        }
    })
}

/// An imported checkpoint: config, layout and f32 weights.
#[derive(Debug)]
pub struct Checkpoint {
    /// The runtime config.
    pub config: ModelConfig,
    /// The layout it was read from.
    pub layout: Layout,
    /// The weights.
    pub store: TensorStore,
    /// The tokenizer: from `tokenizer.json` (with the bos/eos of `tokenizer_config.json`) when
    /// the folder has one, else byte-level for a vocabulary of 256, else none.
    pub vocabulary: Option<Vocabulary>,
}

fn read(path: &Path) -> Result<Vec<u8>, ImportError> {
    std::fs::read(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses `config.json` bytes (`path` is for messages).
fn config_from_bytes(path: &Path, bytes: &[u8]) -> Result<(ModelConfig, Layout), ImportError> {
    let text = String::from_utf8_lossy(bytes);
    let json = parse_lenient_json(&text).map_err(|source| ImportError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    parse_config(&json)
}

impl Checkpoint {
    /// Loads `dir/config.json` and `dir/model.safetensors`, and checks that the weights fit.
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, ImportError> {
        let dir = dir.as_ref();
        let cfg_path = dir.join("config.json");
        let (config, layout) = config_from_bytes(&cfg_path, &read(&cfg_path)?)?;
        let st_path = dir.join("model.safetensors");
        let bytes = read(&st_path)?;
        let mut ckpt = Self::from_parts(config, layout, &st_path, &bytes)?;
        let tok_path = dir.join("tokenizer.json");
        if tok_path.exists() {
            let text = String::from_utf8_lossy(&read(&tok_path)?).into_owned();
            let mut vocabulary =
                Vocabulary::from_tokenizer_json(&tok_path, &text, config.vocab_size)?;
            let special_path = dir.join("tokenizer_config.json");
            if special_path.exists() {
                let text = String::from_utf8_lossy(&read(&special_path)?).into_owned();
                vocabulary.apply_tokenizer_config(&special_path, &text)?;
            }
            ckpt.vocabulary = Some(vocabulary);
        }
        Ok(ckpt)
    }

    /// Imports a checkpoint from the bytes of its `config.json` and `model.safetensors` (no
    /// tokenizer): what [`Checkpoint::load`] does after reading the files. Any bytes give a
    /// checkpoint or a typed error (the `checkpoint_import` fuzz target checks this).
    pub fn from_bytes(config_json: &[u8], safetensors: &[u8]) -> Result<Self, ImportError> {
        let (config, layout) = config_from_bytes(Path::new("config.json"), config_json)?;
        Self::from_parts(config, layout, Path::new("model.safetensors"), safetensors)
    }

    /// Builds a checkpoint from a parsed config and safetensors bytes (`path` is for messages).
    pub fn from_parts(
        config: ModelConfig,
        layout: Layout,
        path: &Path,
        bytes: &[u8],
    ) -> Result<Self, ImportError> {
        let layers = config.num_layers;
        let (store, _) =
            TensorStore::from_safetensors(path, bytes, |key| match layout.parse_key(key) {
                Some(n) if n.layer.is_none_or(|l| (l as usize) < layers) => Ok(Some(n)),
                _ => Err(ImportError::UnknownKey {
                    key: key.to_string(),
                    layout,
                }),
            })?;
        let ckpt = Self {
            config,
            layout,
            store,
            vocabulary: (config.vocab_size == 256).then_some(Vocabulary::Bytes),
        };
        let model = ckpt.model()?;
        if let Some((name, index)) = model.first_non_finite() {
            let key = layout.key(name).unwrap_or_else(|| name.to_string());
            return Err(ImportError::NonFinite { key, index });
        }
        Ok(ckpt)
    }

    /// The runtime model over these weights.
    pub fn model(&self) -> Result<Model<'_>, ImportError> {
        Model::new(self.config, &self.store).map_err(|error| {
            let key = match error {
                ModelError::MissingTensor(n)
                | ModelError::NotF32(n)
                | ModelError::ShapeMismatch { name: n, .. } => {
                    self.layout.key(n).unwrap_or_else(|| n.to_string())
                }
                ModelError::Config(_) => "config.json".to_string(),
            };
            ImportError::Tensor { key, error }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_json() -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/ll-gdn-mcu/config.json");
        std::fs::read(path).unwrap()
    }

    #[test]
    fn the_refused_key_is_the_same_on_every_run_and_named_in_user_terms() {
        let data = [0u8; 4];
        let keys: Vec<String> = (0..24)
            .map(|i| format!("stray.{:02}.weight", 23 - i))
            .collect();
        let views: Vec<_> = keys
            .iter()
            .map(|k| {
                let v = safetensors::tensor::TensorView::new(Dtype::F32, vec![1], &data).unwrap();
                (k.clone(), v)
            })
            .collect();
        let bytes = safetensors::serialize(views, None).unwrap();
        for _ in 0..16 {
            let err = Checkpoint::from_bytes(&config_json(), &bytes).unwrap_err();
            let msg = err.to_string();
            assert_eq!(
                msg, "unexpected tensor `stray.00.weight` for model_type h_gated_deltanet",
                "{msg}"
            );
        }
    }

    #[test]
    fn a_nan_or_infinite_weight_is_refused_with_its_key() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/ll-gdn-mcu");
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = st
            .tensors()
            .into_iter()
            .map(|(k, v)| (k, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
            .collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        let victim = tensors
            .iter()
            .position(|t| t.0.ends_with("mlp.down_proj.weight") && t.1 == Dtype::F32)
            .unwrap();
        for value in [f32::NAN, f32::INFINITY] {
            let mut damaged = tensors.clone();
            damaged[victim].3[20..24].copy_from_slice(&value.to_le_bytes());
            let views: Vec<_> = damaged
                .iter()
                .map(|(k, d, shape, data)| {
                    let v = safetensors::tensor::TensorView::new(*d, shape.clone(), data);
                    (k.clone(), v.unwrap())
                })
                .collect();
            let out = safetensors::serialize(views, None).unwrap();
            let err = Checkpoint::from_bytes(&config_json(), &out).unwrap_err();
            match &err {
                ImportError::NonFinite { key, index } => {
                    assert_eq!((key.as_str(), *index), (tensors[victim].0.as_str(), 5))
                }
                other => panic!("{other}"),
            }
        }
        assert!(Checkpoint::from_bytes(&config_json(), &bytes).is_ok());
    }

    #[test]
    fn each_layout_is_named_by_its_model_type() {
        for layout in [
            Layout::Hattention,
            Layout::FlaLogLinearMamba2,
            Layout::Mamba2Mlp,
            Layout::HGatedDeltaNet,
            Layout::GatedDeltaNet,
        ] {
            assert_eq!(Layout::from_model_type(layout.model_type()), Some(layout));
        }
    }
}
