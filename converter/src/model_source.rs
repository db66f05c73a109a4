//! Opening a model from either a checkpoint folder or a GGUF model file.
//!
//! A GGUF file is read into a buffer aligned for its tensors' element types and parsed in place
//! with the runtime's reader ([`GgufModel`]); an [`IndexedGguf`] then looks tensors up by name
//! through a hash map instead of re-walking the file header on every lookup.

use crate::checkpoint::{Checkpoint, ImportError};
use crate::tokenize::{HostTokenizer, TokenizeError};
use crate::vocab::Vocabulary;
use loglinear_runtime::gguf::names;
use loglinear_runtime::gguf::{GgufFile, GgufModel, ModelFileError};
use loglinear_runtime::{Model, ModelConfig, ModelError, TensorName, TensorView, WeightSource};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why a model could not be opened. Every variant names the path.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A checkpoint folder that does not import.
    #[error("{path}: {source}")]
    Checkpoint {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: ImportError,
    },
    /// A file that cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A GGUF file that is not a valid loglinear model file.
    #[error("{path}: {error}{tensor}")]
    ModelFile {
        /// The file.
        path: PathBuf,
        /// What the runtime's reader found.
        error: ModelFileError,
        /// The name of the tensor the error indexes, as ` (`name`)`, or empty.
        tensor: String,
    },
    /// The model has no tokenizer this tool knows.
    #[error("{path}: has no tokenizer this tool knows (tokenizer.ggml.model bytes or gpt2)")]
    NoTokenizer {
        /// The file or folder.
        path: PathBuf,
    },
    /// The model's BPE vocabulary does not make a tokenizer.
    #[error("{path}: {source}")]
    HostTokenizer {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: TokenizeError,
    },
    /// A weight is NaN or infinite.
    #[error(
        "{path}: tensor {tensor} holds a NaN or an infinity (element {index}); the file is damaged"
    )]
    NonFinite {
        /// The file.
        path: PathBuf,
        /// The tensor's name in the file.
        tensor: String,
        /// The element's index in the tensor.
        index: usize,
    },
    /// The weights do not make a model (only for sources that were not checked on load).
    #[error("{path}: {error}")]
    Model {
        /// The file or folder.
        path: PathBuf,
        /// The runtime's complaint.
        error: ModelError,
    },
}

impl LoadError {
    /// The reader's `error` on the GGUF file `bytes` at `path`. The runtime's error is `Copy`
    /// and names a stray tensor by its index; the name is looked up here.
    pub fn model_file(path: &Path, bytes: &[u8], error: ModelFileError) -> Self {
        let tensor = match error {
            ModelFileError::UnexpectedTensor(i) => GgufFile::parse(bytes)
                .ok()
                .and_then(|f| f.tensors().nth(usize::try_from(i).ok()?))
                .map(|t| format!(" (`{}`)", t.name))
                .unwrap_or_default(),
            _ => String::new(),
        };
        LoadError::ModelFile {
            path: path.to_path_buf(),
            error,
            tensor,
        }
    }
}

/// File bytes in a buffer aligned to 8 bytes, so that the reader can view F32/F16/block data
/// in place.
#[derive(Clone, Debug, Default)]
pub struct AlignedBytes {
    words: Vec<u64>,
    len: usize,
}

impl AlignedBytes {
    /// A copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> Self {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
        Self {
            words,
            len: bytes.len(),
        }
    }

    /// Reads a file.
    pub fn read(path: &Path) -> Result<Self, LoadError> {
        std::fs::read(path)
            .map(|b| Self::from_slice(&b))
            .map_err(|source| LoadError::Io {
                path: path.to_path_buf(),
                source,
            })
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[..self.len]
    }
}

/// A parsed GGUF model whose tensors are found through a hash map.
pub struct IndexedGguf<'a> {
    gguf: GgufModel<'a>,
    views: HashMap<TensorName, TensorView<'a>>,
}

impl<'a> IndexedGguf<'a> {
    /// Parses and validates a model file (see [`GgufModel::parse`]).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ModelFileError> {
        let gguf = GgufModel::parse(bytes)?;
        let views = gguf
            .file()
            .tensors()
            .filter_map(|t| {
                let (layer, role) = names::parse_tensor_name(t.name)?;
                Some((TensorName { layer, role }, t.view()?))
            })
            .collect();
        Ok(Self { gguf, views })
    }

    /// The parsed file.
    pub fn gguf(&self) -> &GgufModel<'a> {
        &self.gguf
    }

    /// The config from the metadata.
    pub fn config(&self) -> &ModelConfig {
        self.gguf.config()
    }

    /// The runtime model.
    pub fn model(&self) -> Result<Model<'_>, ModelError> {
        Model::new(*self.config(), self)
    }

    /// Fails, naming the tensor, if a weight is NaN or infinite (`path` is for the message).
    pub fn refuse_non_finite(&self, path: &Path) -> Result<(), LoadError> {
        let model = self.model().map_err(|error| LoadError::Model {
            path: path.to_path_buf(),
            error,
        })?;
        refuse_non_finite(&model, path)
    }
}

impl WeightSource for IndexedGguf<'_> {
    fn tensor(&self, name: TensorName) -> Option<TensorView<'_>> {
        self.views.get(&name).copied()
    }
}

/// Fails, naming the tensor, if a weight of `model` is NaN or infinite (`path` is for the
/// message): the one finiteness check of every command that loads a GGUF file (`inspect`,
/// `plan`, `quantize`, `generate`, `eval`, `bench`), so that none calls a model fine that
/// another refuses. A checkpoint folder gets the same test ([`Model::first_non_finite`]) in
/// [`Checkpoint::load`], which names the checkpoint's own key.
pub fn refuse_non_finite(model: &Model<'_>, path: &Path) -> Result<(), LoadError> {
    match model.first_non_finite() {
        Some((name, index)) => Err(LoadError::NonFinite {
            path: path.to_path_buf(),
            tensor: crate::export::gguf_name(name),
            index,
        }),
        None => Ok(()),
    }
}

/// Whether `path` is a GGUF file (starts with `GGUF`) rather than a checkpoint folder.
pub fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    if path.is_dir() {
        return false;
    }
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && &magic == b"GGUF"
}

/// A model opened from disk: a checkpoint folder or the bytes of a GGUF file.
pub enum ModelSource {
    /// `config.json` + `model.safetensors`.
    Checkpoint(Box<Checkpoint>),
    /// A GGUF model file (checked to parse when opened).
    Gguf(AlignedBytes),
}

impl ModelSource {
    /// Opens a checkpoint folder, or a GGUF file (anything that is not a folder).
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        if path.is_dir() {
            // Checkpoint::load refuses non-finite weights itself, naming the checkpoint's key.
            Checkpoint::load(path)
                .map(|c| ModelSource::Checkpoint(Box::new(c)))
                .map_err(|source| LoadError::Checkpoint {
                    path: path.to_path_buf(),
                    source,
                })
        } else {
            let bytes = AlignedBytes::read(path)?;
            let file = IndexedGguf::parse(bytes.as_bytes())
                .map_err(|error| LoadError::model_file(path, bytes.as_bytes(), error))?;
            file.refuse_non_finite(path)?;
            Ok(ModelSource::Gguf(bytes))
        }
    }

    /// Runs `f` on the model (the borrow of the weights lasts for the call).
    pub fn with_model<R>(
        &self,
        path: &Path,
        f: impl FnOnce(&Model<'_>) -> R,
    ) -> Result<R, LoadError> {
        let model_err = |error| LoadError::Model {
            path: path.to_path_buf(),
            error,
        };
        match self {
            ModelSource::Checkpoint(c) => {
                let m = Model::new(c.config, &c.store).map_err(model_err)?;
                Ok(f(&m))
            }
            ModelSource::Gguf(bytes) => {
                let g = IndexedGguf::parse(bytes.as_bytes())
                    .map_err(|error| LoadError::model_file(path, bytes.as_bytes(), error))?;
                let m = g.model().map_err(model_err)?;
                Ok(f(&m))
            }
        }
    }

    /// The model's tokenizer, if it has one this tool knows.
    pub fn vocabulary(&self) -> Option<Vocabulary> {
        match self {
            ModelSource::Checkpoint(c) => c.vocabulary.clone(),
            ModelSource::Gguf(bytes) => GgufFile::parse(bytes.as_bytes())
                .ok()
                .as_ref()
                .and_then(Vocabulary::from_gguf),
        }
    }

    /// The model's tokenizer for encoding and decoding on the host (`path` is for messages).
    pub fn host_tokenizer(&self, path: &Path) -> Result<HostTokenizer, LoadError> {
        let vocabulary = self.vocabulary().ok_or_else(|| LoadError::NoTokenizer {
            path: path.to_path_buf(),
        })?;
        HostTokenizer::new(&vocabulary).map_err(|source| LoadError::HostTokenizer {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A short description: "GGUF file" or "checkpoint (layout)".
    pub fn kind(&self) -> String {
        match self {
            ModelSource::Checkpoint(c) => format!("checkpoint ({} layout)", c.layout.model_type()),
            ModelSource::Gguf(_) => "GGUF model file".to_string(),
        }
    }
}
