//! A model read from a GGUF file: the [`ModelConfig`] from metadata, and the tensors as a
//! [`WeightSource`] over the file's bytes.

use super::names::{self, key};
use super::reader::{GgufError, GgufFile, MetaValue};
use crate::config::{ConfigError, ModelConfig};
use crate::model::{Model, ModelError};
use crate::tensor::{TensorName, TensorView, WeightSource};

/// Why a GGUF file is not a usable model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ModelFileError {
    /// The file itself is malformed.
    Gguf(GgufError),
    /// `general.architecture` is missing or names no supported model.
    UnknownArchitecture,
    /// A required metadata key under the architecture prefix is missing.
    MissingKey {
        /// The architecture prefix (`general.architecture`).
        arch: &'static str,
        /// The key after the prefix.
        key: &'static str,
    },
    /// A metadata key has the wrong type or an unusable value.
    BadValue(&'static str),
    /// The norm epsilon is negative, NaN or infinite.
    BadNormEpsilon {
        /// The architecture prefix (`general.architecture`).
        arch: &'static str,
        /// The value found, as f32 bits (so that the error stays `Eq`).
        value_bits: u32,
    },
    /// The capacity policy is not one this runtime implements.
    UnsupportedCapacityPolicy,
    /// The file has a tensor this model does not use (index in the file).
    UnexpectedTensor(u64),
    /// A tensor the model needs is not in the file.
    MissingTensor(TensorName),
    /// The file has `found` tensors where the model has `expected`, and which tensor is
    /// missing or extra could not be told (duplicates, or a config that implies too many).
    TensorCount {
        /// Tensors the config implies.
        expected: u64,
        /// Tensors in the file.
        found: u64,
    },
    /// A tensor fails the model's checks (missing, shape, storage).
    Model(ModelError),
}

impl core::fmt::Display for ModelFileError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ModelFileError::Gguf(e) => write!(f, "{e}"),
            ModelFileError::UnknownArchitecture => {
                write!(f, "general.architecture is missing or unsupported")
            }
            ModelFileError::MissingKey { arch, key } => {
                write!(f, "metadata key {arch}.{key} is missing")
            }
            ModelFileError::BadValue(k) => write!(f, "metadata key {k} has a wrong type or value"),
            ModelFileError::BadNormEpsilon { arch, value_bits } => {
                // Said in words: formatting the f32 would link float printing (about 19 KB of
                // flash) into every firmware image.
                let value = f32::from_bits(*value_bits);
                let what = match (value.is_nan(), value.is_infinite()) {
                    (true, _) => "NaN",
                    (_, true) => "infinite",
                    _ => "negative",
                };
                write!(
                    f,
                    "metadata key {arch}.{} is {what}: the norm epsilon must be a finite \
                     number ≥ 0",
                    key::NORM_EPSILON
                )
            }
            ModelFileError::UnsupportedCapacityPolicy => write!(f, "unsupported capacity_policy"),
            ModelFileError::UnexpectedTensor(i) => {
                write!(f, "tensor #{i} is not part of this model")
            }
            ModelFileError::MissingTensor(name) => {
                write!(f, "tensor {name} is missing")
            }
            ModelFileError::TensorCount { expected, found } => {
                write!(f, "{found} tensors in the file, the model has {expected}")
            }
            ModelFileError::Model(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ModelFileError {}

impl From<GgufError> for ModelFileError {
    fn from(e: GgufError) -> Self {
        ModelFileError::Gguf(e)
    }
}

impl From<ModelError> for ModelFileError {
    fn from(e: ModelError) -> Self {
        ModelFileError::Model(e)
    }
}

/// A model file: validated GGUF plus its config.
#[derive(Clone, Copy, Debug)]
pub struct GgufModel<'a> {
    file: GgufFile<'a>,
    config: ModelConfig,
}

impl<'a> GgufModel<'a> {
    /// Parses `bytes`, reads the config and checks that the tensors are exactly the model's,
    /// with the right shapes and storage.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ModelFileError> {
        let file = GgufFile::parse(bytes)?;
        let arch = file
            .get(super::format::general::ARCHITECTURE)
            .and_then(|v| v.as_str())
            .and_then(names::arch_from_name)
            .ok_or(ModelFileError::UnknownArchitecture)?;
        let prefix = names::arch_name(arch);
        let get = |k: &'static str| {
            file.get_prefixed(prefix, k)
                .ok_or(ModelFileError::MissingKey {
                    arch: prefix,
                    key: k,
                })
        };
        let dim = |k: &'static str| -> Result<usize, ModelFileError> {
            get(k)?
                .as_u64()
                .and_then(|v| usize::try_from(v).ok())
                .ok_or(ModelFileError::BadValue(k))
        };
        let config = ModelConfig {
            arch,
            vocab_size: dim(key::VOCAB_SIZE)?,
            hidden_size: dim(key::EMBEDDING_LENGTH)?,
            num_layers: dim(key::BLOCK_COUNT)?,
            intermediate_size: dim(key::FEED_FORWARD_LENGTH)?,
            norm_eps: get(key::NORM_EPSILON)?
                .as_f32()
                .ok_or(ModelFileError::BadValue(key::NORM_EPSILON))?,
            num_heads: dim(key::HEAD_COUNT)?,
            head_k_dim: dim(key::HEAD_K_DIM)?,
            head_v_dim: dim(key::HEAD_V_DIM)?,
            num_groups: dim(key::GROUP_COUNT)?,
            conv_kernel: dim(key::CONV_KERNEL)?,
            conv_bias: get(key::CONV_BIAS)?
                .as_bool()
                .ok_or(ModelFileError::BadValue(key::CONV_BIAS))?,
            norm_group_size: dim(key::NORM_GROUP_SIZE)?,
            lambda_levels: dim(key::LAMBDA_LEVELS)?,
        };
        if !(config.norm_eps.is_finite() && config.norm_eps >= 0.0) {
            return Err(ModelFileError::BadNormEpsilon {
                arch: prefix,
                value_bits: config.norm_eps.to_bits(),
            });
        }
        if let Some(v) = file.get_prefixed(prefix, key::CAPACITY_POLICY) {
            if v.as_str() != Some(names::CAPACITY_POLICY_SATURATE) {
                return Err(ModelFileError::UnsupportedCapacityPolicy);
            }
        }
        config
            .validate()
            .map_err(|e| ModelFileError::Model(ModelError::Config(e)))?;
        // The writer records the levels a session keeps by default; a file that says other
        // than this runtime would keep was written for another reader.
        if let Some(v) = file.get_prefixed(prefix, key::STATE_LEVELS) {
            let levels = v.as_u64().and_then(|l| usize::try_from(l).ok());
            if levels != Some(config.default_state_levels()) {
                return Err(ModelFileError::BadValue(key::STATE_LEVELS));
            }
        }
        // Exactly the model's tensors: as many as the config implies (checked first, so that a
        // hostile layer count is refused before anything iterates over layers), every name known
        // and in range; with the per-tensor checks of `Model::new` no duplicate or stray tensor
        // can hide.
        let expected = config
            .tensor_count()
            .ok_or(ModelFileError::Model(ModelError::Config(
                ConfigError::Overflow,
            )))?;
        let used = |name: &str| {
            names::parse_tensor_name(name).is_some_and(|(layer, role)| match layer {
                None => true,
                Some(l) => (l as usize) < config.num_layers && config.has_role(role),
            })
        };
        // A stray tensor is named first, also when it makes the count wrong.
        if let Some(index) = file.tensors().position(|t| !used(t.name)) {
            return Err(ModelFileError::UnexpectedTensor(index as u64));
        }
        if file.tensor_count() < expected {
            // Every file tensor is one of the model's, so among the first `found + 1` names
            // the config implies one is missing: the search stops there, whatever the count.
            let present = |n: &TensorName| {
                file.tensors()
                    .any(|t| names::parse_tensor_name(t.name) == Some((n.layer, n.role)))
            };
            let limit = usize::try_from(file.tensor_count()).unwrap_or(usize::MAX);
            if let Some(name) = config
                .tensor_names()
                .take(limit.saturating_add(1))
                .find(|n| !present(n))
            {
                return Err(ModelFileError::MissingTensor(name));
            }
        }
        if file.tensor_count() != expected {
            return Err(ModelFileError::TensorCount {
                expected,
                found: file.tensor_count(),
            });
        }
        let me = Self { file, config };
        Model::new(config, &me)?;
        Ok(me)
    }

    /// The config from the metadata.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The underlying file.
    pub fn file(&self) -> &GgufFile<'a> {
        &self.file
    }

    /// The runtime model over this file.
    pub fn model(&self) -> Result<Model<'_>, ModelError> {
        Model::new(self.config, self)
    }

    /// A metadata value under the architecture prefix.
    pub fn arch_value(&self, k: &str) -> Option<MetaValue<'a>> {
        self.file
            .get_prefixed(names::arch_name(self.config.arch), k)
    }
}

impl WeightSource for GgufModel<'_> {
    fn tensor(&self, name: TensorName) -> Option<TensorView<'_>> {
        let mut out = [None];
        self.tensors_into(&[name], &mut out);
        out[0]
    }

    /// One pass over the file's tensor headers for up to 16 names at a time: a token
    /// looks its weights up layer by layer, and a scan per tensor cost the M4F 0.15
    /// instructions per weight-MAC (`cargo xtask count --breakdown`).
    fn tensors_into<'s>(&'s self, names: &[TensorName], out: &mut [Option<TensorView<'s>>]) {
        for (names, out) in names.chunks(BATCH).zip(out.chunks_mut(BATCH)) {
            let n = names.len().min(out.len());
            if n == 0 {
                continue;
            }
            let (names, out) = (&names[..n], &mut out[..n]);
            out.fill(None);
            let mut done = [false; BATCH];
            let mut left = n;
            // A layer's weights are asked for together: a name of another layer is skipped
            // without testing it against each wanted one.
            let layer = names[0].layer;
            let one_layer = names.iter().all(|t| t.layer == layer);
            self.file.visit_tensors(
                |name| {
                    let split = names::split_name(name);
                    if one_layer && split.layer() != Some(layer) {
                        return None;
                    }
                    names.iter().position(|t| split.is(t.layer, t.role))
                },
                |i, info| {
                    // The first tensor of a name counts, as in a lookup of one; a name asked
                    // for twice gets it twice.
                    if !done[i] {
                        for (j, t) in names.iter().enumerate() {
                            if *t == names[i] && !done[j] {
                                done[j] = true;
                                out[j] = info.view();
                                left -= 1;
                            }
                        }
                    }
                    left == 0
                },
            );
        }
    }
}

/// Names [`GgufModel`] looks up in one pass.
const BATCH: usize = 16;
