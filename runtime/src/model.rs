//! A model: its [`ModelConfig`] plus a [`WeightSource`] whose every tensor has been checked.

use crate::config::{Arch, ConfigError, ModelConfig};
use crate::quant::Activations;
use crate::tensor::{Role, TensorName, TensorView, WeightSource};

/// Why a model cannot be built from a config and a weight source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ModelError {
    /// The config is inconsistent.
    Config(ConfigError),
    /// A required tensor is absent.
    MissingTensor(TensorName),
    /// A tensor has the wrong shape: `(rows, cols)` expected and found.
    ShapeMismatch {
        /// Which tensor.
        name: TensorName,
        /// Expected (rows, cols).
        expected: (usize, usize),
        /// Found (rows, cols).
        found: (usize, usize),
    },
    /// A tensor that the recurrence needs in full precision is not stored as f32.
    NotF32(TensorName),
}

impl core::fmt::Display for ModelError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ModelError::Config(e) => write!(f, "invalid config: {e}"),
            ModelError::MissingTensor(n) => write!(f, "missing tensor {n}"),
            ModelError::ShapeMismatch {
                name,
                expected,
                found,
            } => write!(
                f,
                "tensor {name} has shape {}x{}, expected {}x{}",
                found.0, found.1, expected.0, expected.1
            ),
            ModelError::NotF32(n) => write!(f, "tensor {n} must be stored as f32"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ModelError {}

impl From<ConfigError> for ModelError {
    fn from(e: ConfigError) -> Self {
        ModelError::Config(e)
    }
}

/// A validated model. Cheap to copy: it borrows its weights.
#[derive(Clone, Copy)]
pub struct Model<'w> {
    config: ModelConfig,
    source: &'w dyn WeightSource,
    activations: Activations,
}

impl<'w> Model<'w> {
    /// Checks the config and the shape and storage of every tensor the model will read.
    pub fn new(config: ModelConfig, source: &'w dyn WeightSource) -> Result<Self, ModelError> {
        config.validate()?;
        let model = Self {
            config,
            source,
            activations: Activations::default(),
        };
        model.globals()?;
        for layer in 0..config.num_layers {
            model.mlp(layer)?;
            model.norms(layer)?;
            match config.arch {
                Arch::LogLinearMamba2 | Arch::Mamba2 => {
                    model.mamba2(layer)?;
                }
                Arch::LogLinearGatedDeltaNet | Arch::GatedDeltaNet => {
                    model.gdn(layer)?;
                }
            }
        }
        Ok(model)
    }

    /// The first tensor holding a NaN or an infinity, with that element's index. Not part of
    /// [`Model::new`]: it reads every weight, which a board should not do at each boot; the
    /// host tools check it once when they open a model, since the decoder would turn such a
    /// weight into garbage text without a word.
    pub fn first_non_finite(&self) -> Option<(TensorName, usize)> {
        self.config.tensor_names().find_map(|name| {
            let view = self.source.tensor(name)?;
            view.data.first_non_finite().map(|i| (name, i))
        })
    }

    /// The config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The weight source.
    pub fn source(&self) -> &'w dyn WeightSource {
        self.source
    }

    /// How matvecs with quantized weights treat their input ([`Activations::F32`] unless set).
    pub fn activations(&self) -> Activations {
        self.activations
    }

    /// The same model, its quantized matvecs running with `mode`.
    pub fn with_activations(mut self, mode: Activations) -> Self {
        self.activations = mode;
        self
    }

    /// Activation blocks a step needs: the widest input any matrix reads.
    pub fn act_blocks(&self) -> usize {
        let c = &self.config;
        crate::quant::act_blocks(c.hidden_size.max(c.intermediate_size).max(c.d_inner()))
    }

    /// Tensors looked up together, in one pass over a source that scans; taken one by one
    /// with [`Found::view`] and [`Found::small`].
    fn find<const N: usize>(&self, names: [TensorName; N]) -> Found<'w, N> {
        let mut views = [None; N];
        self.source.tensors_into(&names, &mut views);
        Found {
            config: self.config,
            names,
            views,
        }
    }

    /// Embedding, final norm and LM head.
    pub fn globals(&self) -> Result<GlobalWeights<'w>, ModelError> {
        let n = TensorName::model;
        let f = self.find([n(Role::Embedding), n(Role::FinalNorm), n(Role::LmHead)]);
        Ok(GlobalWeights {
            embedding: f.view(n(Role::Embedding))?,
            final_norm: f.small(n(Role::FinalNorm))?,
            lm_head: f.view(n(Role::LmHead))?,
        })
    }

    /// The two pre-norms of block `layer`.
    pub fn norms(&self, layer: usize) -> Result<BlockNorms<'w>, ModelError> {
        let n = |r| TensorName::block(layer, r);
        let f = self.find([n(Role::MixerNorm), n(Role::MlpNorm)]);
        Ok(BlockNorms {
            mixer: f.small(n(Role::MixerNorm))?,
            mlp: f.small(n(Role::MlpNorm))?,
        })
    }

    /// The SwiGLU MLP of block `layer`.
    pub fn mlp(&self, layer: usize) -> Result<MlpWeights<'w>, ModelError> {
        let n = |r| TensorName::block(layer, r);
        let f = self.find([n(Role::MlpGate), n(Role::MlpUp), n(Role::MlpDown)]);
        Ok(MlpWeights {
            gate: f.view(n(Role::MlpGate))?,
            up: f.view(n(Role::MlpUp))?,
            down: f.view(n(Role::MlpDown))?,
        })
    }

    /// The (Log-Linear) Mamba-2 mixer of block `layer`.
    pub fn mamba2(&self, layer: usize) -> Result<Mamba2Weights<'w>, ModelError> {
        let c = &self.config;
        let n = |r| TensorName::block(layer, r);
        let f = self.find([
            n(Role::InProj),
            n(Role::Conv),
            n(Role::ConvBias),
            n(Role::DtBias),
            n(Role::ALog),
            n(Role::DSkip),
            n(Role::LambdaScale),
            n(Role::OutNorm),
            n(Role::OutProj),
        ]);
        Ok(Mamba2Weights {
            in_proj: f.view(n(Role::InProj))?,
            conv: f.small(n(Role::Conv))?,
            conv_bias: if c.conv_bias {
                Some(f.small(n(Role::ConvBias))?)
            } else {
                None
            },
            dt_bias: f.small(n(Role::DtBias))?,
            a_log: f.small(n(Role::ALog))?,
            d_skip: f.small(n(Role::DSkip))?,
            lambda_scale: self.lambda_scale(&f, layer)?,
            norm: f.small(n(Role::OutNorm))?,
            out_proj: f.view(n(Role::OutProj))?,
        })
    }

    /// The (Log-Linear) Gated DeltaNet mixer of block `layer`.
    pub fn gdn(&self, layer: usize) -> Result<GdnWeights<'w>, ModelError> {
        let c = &self.config;
        let n = |r| TensorName::block(layer, r);
        let f = self.find([
            n(Role::QProj),
            n(Role::KProj),
            n(Role::VProj),
            n(Role::AProj),
            n(Role::BProj),
            n(Role::GProj),
            n(Role::LProj),
            n(Role::QConv),
            n(Role::KConv),
            n(Role::VConv),
            n(Role::ALog),
            n(Role::DtBias),
            n(Role::LambdaScale),
            n(Role::OutNorm),
            n(Role::OutProj),
        ]);
        Ok(GdnWeights {
            q_proj: f.view(n(Role::QProj))?,
            k_proj: f.view(n(Role::KProj))?,
            v_proj: f.view(n(Role::VProj))?,
            a_proj: f.view(n(Role::AProj))?,
            b_proj: f.view(n(Role::BProj))?,
            g_proj: f.view(n(Role::GProj))?,
            l_proj: if c.arch.is_log_linear() {
                Some(f.view(n(Role::LProj))?)
            } else {
                None
            },
            q_conv: f.small(n(Role::QConv))?,
            k_conv: f.small(n(Role::KConv))?,
            v_conv: f.small(n(Role::VConv))?,
            a_log: f.small(n(Role::ALog))?,
            dt_bias: f.small(n(Role::DtBias))?,
            lambda_scale: self.lambda_scale(&f, layer)?,
            o_norm: f.small(n(Role::OutNorm))?,
            o_proj: f.view(n(Role::OutProj))?,
        })
    }

    fn lambda_scale<const N: usize>(
        &self,
        f: &Found<'w, N>,
        layer: usize,
    ) -> Result<Option<&'w [f32]>, ModelError> {
        if self.config.arch.is_log_linear() {
            Ok(Some(f.small(TensorName::block(layer, Role::LambdaScale))?))
        } else {
            Ok(None)
        }
    }
}

/// Tensors [`Model::find`] looked up together.
struct Found<'w, const N: usize> {
    config: ModelConfig,
    names: [TensorName; N],
    views: [Option<TensorView<'w>>; N],
}

impl<'w, const N: usize> Found<'w, N> {
    /// A tensor, checked against the shape the config implies.
    fn view(&self, name: TensorName) -> Result<TensorView<'w>, ModelError> {
        let (rows, cols) = self.config.tensor_shape(name.role);
        let v = self
            .names
            .iter()
            .position(|n| *n == name)
            .and_then(|i| self.views[i])
            .ok_or(ModelError::MissingTensor(name))?;
        if (v.rows, v.cols) != (rows, cols) {
            return Err(ModelError::ShapeMismatch {
                name,
                expected: (rows, cols),
                found: (v.rows, v.cols),
            });
        }
        Ok(v)
    }

    /// A tensor the recurrence needs in full precision.
    fn small(&self, name: TensorName) -> Result<&'w [f32], ModelError> {
        self.view(name)?.as_f32().ok_or(ModelError::NotF32(name))
    }
}

/// Model-level weights.
#[allow(missing_docs)]
pub struct GlobalWeights<'w> {
    pub embedding: TensorView<'w>,
    pub final_norm: &'w [f32],
    pub lm_head: TensorView<'w>,
}

/// The pre-norm weights of one block.
#[allow(missing_docs)]
pub struct BlockNorms<'w> {
    pub mixer: &'w [f32],
    pub mlp: &'w [f32],
}

/// SwiGLU MLP weights: down(SiLU(gate x) ⊙ up x).
#[allow(missing_docs)]
pub struct MlpWeights<'w> {
    pub gate: TensorView<'w>,
    pub up: TensorView<'w>,
    pub down: TensorView<'w>,
}

/// Mamba-2 mixer weights (spec §6.1). `lambda_scale` is `L` for the log-linear form.
#[allow(missing_docs)]
pub struct Mamba2Weights<'w> {
    pub in_proj: TensorView<'w>,
    pub conv: &'w [f32],
    pub conv_bias: Option<&'w [f32]>,
    pub dt_bias: &'w [f32],
    pub a_log: &'w [f32],
    pub d_skip: &'w [f32],
    pub lambda_scale: Option<&'w [f32]>,
    pub norm: &'w [f32],
    pub out_proj: TensorView<'w>,
}

/// Gated DeltaNet mixer weights (spec §6.2). `l_proj` and `lambda_scale` for the log-linear form.
#[allow(missing_docs)]
pub struct GdnWeights<'w> {
    pub q_proj: TensorView<'w>,
    pub k_proj: TensorView<'w>,
    pub v_proj: TensorView<'w>,
    pub a_proj: TensorView<'w>,
    pub b_proj: TensorView<'w>,
    pub g_proj: TensorView<'w>,
    pub l_proj: Option<TensorView<'w>>,
    pub q_conv: &'w [f32],
    pub k_conv: &'w [f32],
    pub v_conv: &'w [f32],
    pub a_log: &'w [f32],
    pub dt_bias: &'w [f32],
    pub lambda_scale: Option<&'w [f32]>,
    pub o_norm: &'w [f32],
    pub o_proj: TensorView<'w>,
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;
    use crate::tensor::Role;

    #[test]
    fn errors_name_tensors_as_the_model_file_does() {
        let gate = TensorName::block(3, Role::MlpGate);
        assert_eq!(
            ModelError::MissingTensor(gate).to_string(),
            "missing tensor blk.3.ffn_gate.weight"
        );
        assert_eq!(
            ModelError::NotF32(TensorName::model(Role::FinalNorm)).to_string(),
            "tensor output_norm.weight must be stored as f32"
        );
    }
}
