//! Checkpoint layouts: which key holds which tensor.

use loglinear_runtime::{Arch, Role, TensorName};

/// A checkpoint layout (key prefix and names), named after the `model_type` that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Official Log-Linear Mamba-2 (`hattention`, `HAttentionForCausalLM`).
    Hattention,
    /// fla's port (`log_linear_mamba2`): same keys as `hattention`.
    FlaLogLinearMamba2,
    /// Official plain Mamba-2 baseline (`mamba2mlp`; also accepted as `mamba2`).
    Mamba2Mlp,
    /// Official Log-Linear Gated DeltaNet (`h_gated_deltanet`).
    HGatedDeltaNet,
    /// fla plain Gated DeltaNet (`gated_deltanet`).
    GatedDeltaNet,
}

impl Layout {
    /// The layout a `model_type` string names.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Some(match model_type {
            "hattention" => Layout::Hattention,
            "log_linear_mamba2" => Layout::FlaLogLinearMamba2,
            "mamba2mlp" | "mamba2" => Layout::Mamba2Mlp,
            "h_gated_deltanet" => Layout::HGatedDeltaNet,
            "gated_deltanet" => Layout::GatedDeltaNet,
            _ => return None,
        })
    }

    /// The `model_type` of `config.json` that names this layout (the first of its spellings).
    pub fn model_type(self) -> &'static str {
        match self {
            Layout::Hattention => "hattention",
            Layout::FlaLogLinearMamba2 => "log_linear_mamba2",
            Layout::Mamba2Mlp => "mamba2mlp",
            Layout::HGatedDeltaNet => "h_gated_deltanet",
            Layout::GatedDeltaNet => "gated_deltanet",
        }
    }

    /// The architecture this layout holds.
    pub fn arch(self) -> Arch {
        match self {
            Layout::Hattention | Layout::FlaLogLinearMamba2 => Arch::LogLinearMamba2,
            Layout::Mamba2Mlp => Arch::Mamba2,
            Layout::HGatedDeltaNet => Arch::LogLinearGatedDeltaNet,
            Layout::GatedDeltaNet => Arch::GatedDeltaNet,
        }
    }

    /// The model prefix: `backbone.` (Mamba-2 family) or `model.` (Gated DeltaNet family).
    pub fn prefix(self) -> &'static str {
        if self.arch().is_mamba2() {
            "backbone."
        } else {
            "model."
        }
    }

    /// Key of a model-level tensor.
    pub fn model_key(self, role: Role) -> Option<String> {
        let p = self.prefix();
        let gdn = !self.arch().is_mamba2();
        Some(match role {
            Role::Embedding => format!("{p}embeddings.weight"),
            Role::FinalNorm if gdn => format!("{p}norm.weight"),
            Role::FinalNorm => format!("{p}norm_f.weight"),
            Role::LmHead => "lm_head.weight".to_string(),
            _ => return None,
        })
    }

    /// Key of a block tensor relative to `…layers.{i}.` (the golden layer files use these).
    pub fn block_key(self, role: Role) -> Option<&'static str> {
        if self.arch().is_mamba2() {
            Some(match role {
                Role::MixerNorm => "mixer_norm.weight",
                Role::MlpNorm => "mlp_norm.weight",
                Role::MlpGate => "mlp.gate_proj.weight",
                Role::MlpUp => "mlp.up_proj.weight",
                Role::MlpDown => "mlp.down_proj.weight",
                Role::InProj => "mixer.in_proj.weight",
                Role::Conv => "mixer.conv1d.weight",
                Role::ConvBias => "mixer.conv1d.bias",
                Role::DtBias => "mixer.dt_bias",
                Role::ALog => "mixer.A_log",
                Role::DSkip => "mixer.D",
                Role::LambdaScale => "mixer.L",
                Role::OutNorm => "mixer.norm.weight",
                Role::OutProj => "mixer.out_proj.weight",
                _ => return None,
            })
        } else {
            Some(match role {
                Role::MixerNorm => "attn_norm.weight",
                Role::MlpNorm => "mlp_norm.weight",
                Role::MlpGate => "mlp.gate_proj.weight",
                Role::MlpUp => "mlp.up_proj.weight",
                Role::MlpDown => "mlp.down_proj.weight",
                Role::QProj => "attn.q_proj.weight",
                Role::KProj => "attn.k_proj.weight",
                Role::VProj => "attn.v_proj.weight",
                Role::AProj => "attn.a_proj.weight",
                Role::BProj => "attn.b_proj.weight",
                Role::GProj => "attn.g_proj.weight",
                Role::LProj => "attn.l_proj.weight",
                Role::QConv => "attn.q_conv1d.weight",
                Role::KConv => "attn.k_conv1d.weight",
                Role::VConv => "attn.v_conv1d.weight",
                Role::ALog => "attn.A_log",
                Role::DtBias => "attn.dt_bias",
                Role::LambdaScale => "attn.L",
                Role::OutNorm => "attn.o_norm.weight",
                Role::OutProj => "attn.o_proj.weight",
                _ => return None,
            })
        }
    }

    /// The tensor a full checkpoint key names, if any. Accepts the official load-hook alias
    /// `backbone.embedding.weight`.
    pub fn parse_key(self, key: &str) -> Option<TensorName> {
        for role in [Role::Embedding, Role::FinalNorm, Role::LmHead] {
            if self.model_key(role).as_deref() == Some(key) {
                return Some(TensorName::model(role));
            }
        }
        if self.arch().is_mamba2() && key == "backbone.embedding.weight" {
            return Some(TensorName::model(Role::Embedding));
        }
        let rest = key.strip_prefix(self.prefix())?.strip_prefix("layers.")?;
        let (idx, rel) = rest.split_once('.')?;
        if idx.len() > 1 && idx.starts_with('0') {
            return None;
        }
        let layer: u16 = idx.parse().ok()?;
        self.parse_block_key(rel).map(|role| TensorName {
            layer: Some(layer),
            role,
        })
    }

    /// The role of a block-relative key: the one [`Layout::block_key`] names it (each key of a
    /// layout names one role).
    pub fn parse_block_key(self, rel: &str) -> Option<Role> {
        Role::ALL
            .into_iter()
            .find(|&r| self.block_key(r) == Some(rel))
    }

    /// The full key of a tensor.
    pub fn key(self, name: TensorName) -> Option<String> {
        match name.layer {
            None => self.model_key(name.role),
            Some(l) => Some(format!(
                "{}layers.{l}.{}",
                self.prefix(),
                self.block_key(name.role)?
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each block key of a layout names one role, so parsing it finds that role.
    #[test]
    fn block_keys_parse_back() {
        let layouts = [
            Layout::Hattention,
            Layout::FlaLogLinearMamba2,
            Layout::Mamba2Mlp,
            Layout::HGatedDeltaNet,
            Layout::GatedDeltaNet,
        ];
        for layout in layouts {
            for role in Role::ALL {
                if let Some(key) = layout.block_key(role) {
                    assert_eq!(layout.parse_block_key(key), Some(role), "{layout:?} {key}");
                    let full = layout.key(TensorName::block(3, role)).unwrap();
                    assert_eq!(layout.parse_key(&full), Some(TensorName::block(3, role)));
                }
            }
        }
    }
}
