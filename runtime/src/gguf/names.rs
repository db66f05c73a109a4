//! The loglinear GGUF conventions: architecture names, metadata keys and tensor names.
//! The writer (converter) and the reader (runtime) both use these, so they cannot disagree.
//! `docs/model-file.md` documents them for other tools.

use crate::config::Arch;
use crate::tensor::Role;

/// `general.architecture` of each model kind.
pub const fn arch_name(arch: Arch) -> &'static str {
    match arch {
        Arch::LogLinearGatedDeltaNet => "loglinear_gdn",
        Arch::LogLinearMamba2 => "loglinear_mamba2",
        Arch::GatedDeltaNet => "gated_deltanet",
        Arch::Mamba2 => "mamba2",
    }
}

/// The model kind a `general.architecture` value names.
pub fn arch_from_name(name: &str) -> Option<Arch> {
    [
        Arch::LogLinearGatedDeltaNet,
        Arch::LogLinearMamba2,
        Arch::GatedDeltaNet,
        Arch::Mamba2,
    ]
    .into_iter()
    .find(|&a| arch_name(a) == name)
}

/// Alignment of tensor data in our files (ggml's default is 32 too).
pub const ALIGNMENT: u32 = 32;

/// The value of `{arch}.capacity_policy` for the saturating top level (see `LevelPolicy`).
pub const CAPACITY_POLICY_SATURATE: &str = "saturate_top_level";

/// `tokenizer.ggml.model` for the byte-level vocabulary (token id = byte value).
pub const TOKENIZER_BYTES: &str = "bytes";

/// Metadata keys under the architecture prefix, `{arch}.{key}`.
pub mod key {
    /// u32: vocabulary size.
    pub const VOCAB_SIZE: &str = "vocab_size";
    /// u32: model width D.
    pub const EMBEDDING_LENGTH: &str = "embedding_length";
    /// u32: number of blocks.
    pub const BLOCK_COUNT: &str = "block_count";
    /// u32: SwiGLU intermediate size.
    pub const FEED_FORWARD_LENGTH: &str = "feed_forward_length";
    /// u32: heads.
    pub const HEAD_COUNT: &str = "head_count";
    /// u32: key size per head (Mamba-2 state size N, GDN head_dim).
    pub const HEAD_K_DIM: &str = "head_k_dim";
    /// u32: value size per head (Mamba-2 head_dim P, GDN head_dim · expand_v).
    pub const HEAD_V_DIM: &str = "head_v_dim";
    /// u32: Mamba-2 B/C groups (GDN: = head_count).
    pub const GROUP_COUNT: &str = "group_count";
    /// u32: short-convolution width.
    pub const CONV_KERNEL: &str = "conv_kernel";
    /// bool: Mamba-2 conv bias.
    pub const CONV_BIAS: &str = "conv_bias";
    /// u32: Mamba-2 gated-norm group size.
    pub const NORM_GROUP_SIZE: &str = "norm_group_size";
    /// f32: RMSNorm epsilon.
    pub const NORM_EPSILON: &str = "norm_epsilon";
    /// u32: λ columns per head (15, or 0 for plain models).
    pub const LAMBDA_LEVELS: &str = "lambda_levels";
    /// u32: state levels a session keeps by default.
    pub const STATE_LEVELS: &str = "state_levels";
    /// string: what happens past 2^(levels−1) tokens.
    pub const CAPACITY_POLICY: &str = "capacity_policy";
}

/// The GGUF tensor name suffix of a role (`blk.{i}.{suffix}` for block tensors).
pub const fn tensor_suffix(role: Role) -> &'static str {
    match role {
        Role::Embedding => "token_embd.weight",
        Role::FinalNorm => "output_norm.weight",
        Role::LmHead => "output.weight",
        Role::MixerNorm => "attn_norm.weight",
        Role::MlpNorm => "ffn_norm.weight",
        Role::MlpGate => "ffn_gate.weight",
        Role::MlpUp => "ffn_up.weight",
        Role::MlpDown => "ffn_down.weight",
        Role::ALog => "ssm_a_log",
        Role::DtBias => "ssm_dt.bias",
        Role::LambdaScale => "ssm_lambda_scale",
        Role::OutNorm => "ssm_norm.weight",
        Role::OutProj => "ssm_out.weight",
        Role::InProj => "ssm_in.weight",
        Role::Conv => "ssm_conv1d.weight",
        Role::ConvBias => "ssm_conv1d.bias",
        Role::DSkip => "ssm_d",
        Role::QProj => "attn_q.weight",
        Role::KProj => "attn_k.weight",
        Role::VProj => "attn_v.weight",
        Role::AProj => "ssm_a_proj.weight",
        Role::BProj => "ssm_beta.weight",
        Role::GProj => "attn_gate.weight",
        Role::LProj => "ssm_lambda.weight",
        Role::QConv => "ssm_conv1d_q.weight",
        Role::KConv => "ssm_conv1d_k.weight",
        Role::VConv => "ssm_conv1d_v.weight",
    }
}

/// Every role, model-level ones first.
pub const ALL_ROLES: [Role; 27] = Role::ALL;

/// Whether a role is a model-level tensor (no `blk.{i}.` prefix).
pub const fn is_model_level(role: Role) -> bool {
    role.is_model_level()
}

/// Whether a GGUF tensor name is the name of `(layer, role)`, without allocating.
pub fn name_matches(name: &str, layer: Option<u16>, role: Role) -> bool {
    name_bytes_match(name.as_bytes(), layer, role)
}

/// [`name_matches`] on raw bytes, for walking a validated file without re-checking UTF-8.
pub fn name_bytes_match(name: &[u8], layer: Option<u16>, role: Role) -> bool {
    split_name(name).is(layer, role)
}

/// A tensor name read as [`name_bytes_match`] reads it: split once, so that a scan can test
/// it against several wanted tensors.
#[derive(Clone, Copy, Debug)]
pub enum SplitName<'a> {
    /// `blk.{layer}.{suffix}`, the layer written canonically.
    Block(u16, &'a [u8]),
    /// A name without the `blk.` prefix: a model-level tensor's suffix, if any.
    Model(&'a [u8]),
    /// A `blk.` name without a canonical layer index: no tensor's name.
    Neither,
}

/// Splits a tensor name (see [`SplitName`]).
pub fn split_name(name: &[u8]) -> SplitName<'_> {
    let Some(rest) = name.strip_prefix(b"blk.") else {
        return SplitName::Model(name);
    };
    let Some(dot) = rest.iter().position(|&b| b == b'.') else {
        return SplitName::Neither;
    };
    let (idx, tail) = (&rest[..dot], &rest[dot + 1..]);
    match parse_index_bytes(idx) {
        Some(l) => SplitName::Block(l, tail),
        None => SplitName::Neither,
    }
}

/// A layer index written canonically (decimal digits, no leading zero, at most 65535), digit
/// by digit: a scan splits every tensor name it passes, and UTF-8 validation and `str::parse`
/// cost more than the rest of the scan.
fn parse_index_bytes(s: &[u8]) -> Option<u16> {
    if s.is_empty() || s.len() > 5 || (s.len() > 1 && s[0] == b'0') {
        return None;
    }
    let mut v: u32 = 0;
    for &b in s {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(b - b'0');
    }
    u16::try_from(v).ok()
}

impl SplitName<'_> {
    /// The layer this names a tensor of: `Some(None)` for a model-level name, `None` for no
    /// tensor's name.
    pub fn layer(&self) -> Option<Option<u16>> {
        match self {
            SplitName::Block(l, _) => Some(Some(*l)),
            SplitName::Model(_) => Some(None),
            SplitName::Neither => None,
        }
    }

    /// Whether this is the name of `(layer, role)`.
    pub fn is(&self, layer: Option<u16>, role: Role) -> bool {
        // The layer first: in a scan most names are of another layer.
        match (*self, layer) {
            (SplitName::Model(name), None) => {
                is_model_level(role) && name == tensor_suffix(role).as_bytes()
            }
            (SplitName::Block(l, tail), Some(want)) => {
                l == want && tail == tensor_suffix(role).as_bytes()
            }
            _ => false,
        }
    }
}

/// The `(layer, role)` a GGUF tensor name stands for.
pub fn parse_tensor_name(name: &str) -> Option<(Option<u16>, Role)> {
    if let Some(rest) = name.strip_prefix("blk.") {
        let (idx, tail) = rest.split_once('.')?;
        let layer = parse_index(idx)?;
        let role = ALL_ROLES
            .into_iter()
            .find(|&r| !is_model_level(r) && tensor_suffix(r) == tail)?;
        Some((Some(layer), role))
    } else {
        let role = ALL_ROLES
            .into_iter()
            .find(|&r| is_model_level(r) && tensor_suffix(r) == name)?;
        Some((None, role))
    }
}

/// A canonical decimal index: digits only, no leading zero, fits u16.
fn parse_index(s: &str) -> Option<u16> {
    parse_index_bytes(s.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_indices_parse_as_str_indices() {
        for s in [
            "0", "7", "10", "00", "01", "65535", "65536", "99999", "123456", "", "1a", "-1", "+1",
            " 1",
        ] {
            assert_eq!(parse_index_bytes(s.as_bytes()), parse_index(s), "{s:?}");
        }
        for v in 0..=70_000u32 {
            let s = v.to_string();
            assert_eq!(parse_index_bytes(s.as_bytes()), parse_index(&s), "{s}");
        }
    }

    #[test]
    fn a_split_name_matches_what_its_parts_say() {
        let split = split_name(b"blk.12.ffn_gate.weight");
        assert!(split.is(Some(12), Role::MlpGate));
        assert!(!split.is(Some(1), Role::MlpGate));
        assert!(!split.is(None, Role::MlpGate));
        assert!(!split.is(Some(12), Role::MlpUp));
        assert!(split_name(b"output_norm.weight").is(None, Role::FinalNorm));
        assert!(!split_name(b"output_norm.weight").is(Some(0), Role::FinalNorm));
        // Only canonical indices name a layer.
        for bad in [
            &b"blk.012.ffn_gate.weight"[..],
            b"blk.x.ffn_gate.weight",
            b"blk.3",
        ] {
            assert!(ALL_ROLES.iter().all(|&r| !split_name(bad).is(Some(12), r)
                && !split_name(bad).is(Some(3), r)
                && !split_name(bad).is(None, r)));
        }
    }

    #[test]
    fn names_round_trip() {
        for role in ALL_ROLES {
            let layer = if is_model_level(role) { None } else { Some(12) };
            let mut buf = [0u8; 64];
            let name = match layer {
                None => tensor_suffix(role),
                Some(_) => {
                    let s = tensor_suffix(role).as_bytes();
                    buf[..7].copy_from_slice(b"blk.12.");
                    buf[7..7 + s.len()].copy_from_slice(s);
                    core::str::from_utf8(&buf[..7 + s.len()]).unwrap()
                }
            };
            assert_eq!(parse_tensor_name(name), Some((layer, role)), "{name}");
            assert!(name_matches(name, layer, role));
        }
        assert_eq!(parse_tensor_name("blk.012.ssm_d"), None);
        assert_eq!(parse_tensor_name("blk.99999999.ssm_d"), None);
        assert_eq!(parse_tensor_name("blk.1.nope"), None);
        for a in [
            Arch::LogLinearGatedDeltaNet,
            Arch::LogLinearMamba2,
            Arch::GatedDeltaNet,
            Arch::Mamba2,
        ] {
            assert_eq!(arch_from_name(arch_name(a)), Some(a));
        }
    }
}
