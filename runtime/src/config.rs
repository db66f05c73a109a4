//! The model description: architecture and dimensions. Format readers (config.json,
//! model-file metadata) build a [`ModelConfig`]; [`ModelConfig::validate`] checks it.

use crate::level::LAMBDA_LEVELS;
use crate::tensor::{Role, TensorName};

/// The four supported architectures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Arch {
    /// Log-Linear Mamba-2 (official `hattention`, fla `log_linear_mamba2`), spec §6.1.
    LogLinearMamba2,
    /// Plain Mamba-2 (official `mamba2mlp`).
    Mamba2,
    /// Log-Linear Gated DeltaNet (official `h_gated_deltanet`), spec §6.2.
    LogLinearGatedDeltaNet,
    /// Plain Gated DeltaNet (fla `gated_deltanet`).
    GatedDeltaNet,
}

impl Arch {
    /// Whether the mixer has per-level λ weights and a Fenwick state.
    pub const fn is_log_linear(self) -> bool {
        matches!(self, Arch::LogLinearMamba2 | Arch::LogLinearGatedDeltaNet)
    }
    /// Whether the mixer is a Mamba-2 one.
    pub const fn is_mamba2(self) -> bool {
        matches!(self, Arch::LogLinearMamba2 | Arch::Mamba2)
    }
    /// A stable lowercase name.
    pub const fn name(self) -> &'static str {
        match self {
            Arch::LogLinearMamba2 => "log-linear-mamba2",
            Arch::Mamba2 => "mamba2",
            Arch::LogLinearGatedDeltaNet => "log-linear-gated-deltanet",
            Arch::GatedDeltaNet => "gated-deltanet",
        }
    }
}

/// Everything the maths needs to know about a model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelConfig {
    /// Architecture.
    pub arch: Arch,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width D.
    pub hidden_size: usize,
    /// Number of blocks.
    pub num_layers: usize,
    /// SwiGLU MLP intermediate size.
    pub intermediate_size: usize,
    /// RMSNorm epsilon (all norms of the model).
    pub norm_eps: f32,
    /// Heads H.
    pub num_heads: usize,
    /// Key/query size per head: Mamba-2 `state_size` N, GDN `head_dim`.
    pub head_k_dim: usize,
    /// Value size per head: Mamba-2 `head_dim` P, GDN `head_dim · expand_v`.
    pub head_v_dim: usize,
    /// Mamba-2 B/C groups (heads share them); equal to `num_heads` for GDN.
    pub num_groups: usize,
    /// Short-convolution width.
    pub conv_kernel: usize,
    /// Whether the Mamba-2 conv has a bias.
    pub conv_bias: bool,
    /// Mamba-2 gated RMSNorm group size (official: the whole d_inner; fla: d_inner / groups).
    pub norm_group_size: usize,
    /// λ columns per head (15 for log-linear models, 0 for plain ones).
    pub lambda_levels: usize,
}

/// Why a [`ModelConfig`] is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ConfigError {
    /// A dimension that must be positive is zero.
    ZeroDimension(&'static str),
    /// Heads are not a multiple of groups.
    HeadsNotDivisibleByGroups,
    /// The gated-norm group size does not divide d_inner.
    BadNormGroupSize,
    /// λ width is not 15 for a log-linear model, or not 0 for a plain one.
    BadLambdaLevels,
    /// Some size overflows `usize`.
    Overflow,
    /// More blocks than tensor names can index (65,535).
    TooManyLayers,
    /// The RMSNorm epsilon is negative, NaN or infinite.
    BadNormEps,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::ZeroDimension(d) => write!(f, "dimension `{d}` is zero"),
            ConfigError::HeadsNotDivisibleByGroups => {
                write!(f, "num_heads is not a multiple of n_groups")
            }
            ConfigError::BadNormGroupSize => write!(f, "norm group size does not divide d_inner"),
            ConfigError::BadLambdaLevels => write!(
                f,
                "log-linear models need {LAMBDA_LEVELS} lambda levels, plain ones 0"
            ),
            ConfigError::Overflow => write!(
                f,
                "a tensor size overflows: vocab_size, hidden_size, num_heads, head_k_dim, \
                 head_v_dim or num_layers is too large"
            ),
            ConfigError::TooManyLayers => write!(f, "more than {} layers", u16::MAX),
            ConfigError::BadNormEps => {
                write!(f, "the norm epsilon must be a finite number ≥ 0")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ConfigError {}

impl ModelConfig {
    /// Checks that the dimensions are consistent and the norm epsilon usable: every check the
    /// model-file reader applies to a config, so that the converter refuses before writing
    /// what the reader would refuse after.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_layers", self.num_layers),
            ("intermediate_size", self.intermediate_size),
            ("num_heads", self.num_heads),
            ("head_k_dim", self.head_k_dim),
            ("head_v_dim", self.head_v_dim),
            ("num_groups", self.num_groups),
            ("conv_kernel", self.conv_kernel),
        ] {
            if v == 0 {
                return Err(ConfigError::ZeroDimension(name));
            }
        }
        if self.num_layers > u16::MAX as usize {
            return Err(ConfigError::TooManyLayers);
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return Err(ConfigError::BadNormEps);
        }
        if self.num_heads % self.num_groups != 0 {
            return Err(ConfigError::HeadsNotDivisibleByGroups);
        }
        let want = if self.arch.is_log_linear() {
            LAMBDA_LEVELS
        } else {
            0
        };
        if self.lambda_levels != want {
            return Err(ConfigError::BadLambdaLevels);
        }
        // Every size used below must fit comfortably.
        let big = self
            .num_heads
            .checked_mul(self.head_k_dim)
            .and_then(|x| x.checked_mul(self.head_v_dim))
            .and_then(|x| x.checked_mul(64))
            .and_then(|x| x.checked_mul(self.num_layers));
        let proj = self
            .in_proj_rows()
            .checked_mul(self.hidden_size)
            .and_then(|x| x.checked_mul(4));
        if big.is_none() || proj.is_none() {
            return Err(ConfigError::Overflow);
        }
        if self.arch.is_mamba2()
            && (self.norm_group_size == 0 || self.d_inner() % self.norm_group_size != 0)
        {
            return Err(ConfigError::BadNormGroupSize);
        }
        Ok(())
    }

    /// Mamba-2 d_inner = H · P; GDN value_dim = H · dv.
    pub fn d_inner(&self) -> usize {
        self.num_heads.saturating_mul(self.head_v_dim)
    }

    /// GDN key_dim = H · dk.
    pub fn key_dim(&self) -> usize {
        self.num_heads.saturating_mul(self.head_k_dim)
    }

    /// Channels of the short convolution(s): Mamba-2 conv_dim = d_inner + 2·G·N; GDN q+k+v.
    pub fn conv_channels(&self) -> usize {
        if self.arch.is_mamba2() {
            self.d_inner().saturating_add(
                2usize.saturating_mul(self.num_groups.saturating_mul(self.head_k_dim)),
            )
        } else {
            self.key_dim()
                .saturating_mul(2)
                .saturating_add(self.d_inner())
        }
    }

    /// Mamba-2 in_proj rows: z, xBC, dt, and H·15 λ inputs for the log-linear form.
    pub fn in_proj_rows(&self) -> usize {
        self.d_inner()
            .saturating_add(self.conv_channels())
            .saturating_add(self.num_heads)
            .saturating_add(self.num_heads.saturating_mul(self.lambda_levels))
    }

    /// Number of state levels a session keeps by default: 15 for log-linear, 1 for plain.
    pub fn default_state_levels(&self) -> usize {
        if self.arch.is_log_linear() {
            LAMBDA_LEVELS
        } else {
            1
        }
    }

    /// Whether a model of this config has a tensor with `role` (in every block, for block
    /// roles).
    pub fn has_role(&self, role: Role) -> bool {
        use Role::*;
        let gdn = !self.arch.is_mamba2();
        match role {
            Embedding | FinalNorm | LmHead => true,
            MixerNorm | MlpNorm | MlpGate | MlpUp | MlpDown | ALog | DtBias | OutNorm | OutProj => {
                true
            }
            LambdaScale => self.arch.is_log_linear(),
            InProj | Conv | DSkip => !gdn,
            ConvBias => !gdn && self.conv_bias,
            QProj | KProj | VProj | AProj | BProj | GProj | QConv | KConv | VConv => gdn,
            LProj => gdn && self.arch.is_log_linear(),
        }
    }

    /// The (rows, cols) of the tensor with `role`: matrices are out × in, vectors one row (1 × n), conv
    /// weights channels × width, λ scales heads × 15.
    pub fn tensor_shape(&self, role: Role) -> (usize, usize) {
        use Role::*;
        let (d, h) = (self.hidden_size, self.num_heads);
        let (kd, vd) = (self.key_dim(), self.d_inner());
        match role {
            Embedding | LmHead => (self.vocab_size, d),
            FinalNorm | MixerNorm | MlpNorm => (1, d),
            MlpGate | MlpUp => (self.intermediate_size, d),
            MlpDown => (d, self.intermediate_size),
            ALog | DtBias | DSkip => (1, h),
            LambdaScale => (h, self.lambda_levels),
            OutNorm if self.arch.is_mamba2() => (1, vd),
            OutNorm => (1, self.head_v_dim),
            OutProj => (d, vd),
            InProj => (self.in_proj_rows(), d),
            Conv => (self.conv_channels(), self.conv_kernel),
            ConvBias => (1, self.conv_channels()),
            QProj | KProj => (kd, d),
            VProj | GProj => (vd, d),
            AProj | BProj => (h, d),
            LProj => (h * self.lambda_levels, d),
            QConv | KConv => (kd, self.conv_kernel),
            VConv => (vd, self.conv_kernel),
        }
    }

    /// Number of tensors of the model (what [`ModelConfig::tensor_names`] yields), computed
    /// without iterating, so a hostile layer count costs nothing.
    pub fn tensor_count(&self) -> Option<u64> {
        let globals = Role::ALL.iter().filter(|r| r.is_model_level()).count() as u64;
        let per_block = Role::ALL
            .iter()
            .filter(|&&r| !r.is_model_level() && self.has_role(r))
            .count() as u64;
        per_block
            .checked_mul(self.num_layers as u64)?
            .checked_add(globals)
    }

    /// Every tensor of the model in canonical order: model-level ones, then block by block in
    /// [`Role::ALL`] order.
    pub fn tensor_names(&self) -> impl Iterator<Item = TensorName> + '_ {
        let globals = Role::ALL
            .into_iter()
            .filter(|r| r.is_model_level())
            .map(TensorName::model);
        let blocks = (0..self.num_layers).flat_map(move |l| {
            Role::ALL
                .into_iter()
                .filter(move |&r| !r.is_model_level() && self.has_role(r))
                .map(move |r| TensorName::block(l, r))
        });
        globals.chain(blocks)
    }
}
