//! Exporting a model (a checkpoint, or any [`WeightSource`] with its [`ModelConfig`]) to a GGUF
//! v3 model file as `docs/model-file.md` describes it, with per-tensor storage types.
//!
//! Type choice: [`ExportOptions::matrix_type`] applies to the 2-D weight matrices
//! (projections, MLP, embedding, LM head). The recurrence-critical small tensors (`A_log`,
//! `dt_bias`, `D`, `L`, all norms, conv weights and conv bias) are always F32: the runtime
//! refuses a file where they are not. [`TypeOverride`]s (`PATTERN=TYPE`, like llama-quantize's
//! `--tensor-type`) change the type of the matrices whose GGUF name matches, the last match
//! winning. A matrix whose rows are not a multiple of 32 weights cannot be Q8_0/Q4_0 and falls
//! back to F16; the report says so.

use crate::checkpoint::Checkpoint;
use crate::gguf_writer::{GgufWriter, OwnedTensorData, Value, WriterError};
use crate::vocab::Vocabulary;
use globset::{GlobBuilder, GlobMatcher};
use loglinear_runtime::gguf::format::general;
use loglinear_runtime::gguf::names::{self, key};
use loglinear_runtime::quant::QK;
use loglinear_runtime::{
    DType, Model, ModelConfig, ModelError, Role, TensorName, TensorView, WeightSource,
};
use std::collections::HashMap;
use std::str::FromStr;

/// Why a model could not be exported. Every variant names the tensor, key or option.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The GGUF writer refused something.
    #[error(transparent)]
    Writer(#[from] WriterError),
    /// A tensor the config needs is not in the source.
    #[error("tensor `{0}` is missing from the source")]
    MissingTensor(String),
    /// The source holds a tensor that the config does not use.
    #[error("tensor `{0}` is not used by the config: refusing to drop it silently")]
    UnusedTensor(String),
    /// A vector tensor that is not 1-D.
    #[error("tensor `{name}` should be a vector, found shape {rows}x{cols}")]
    NotAVector {
        /// The tensor.
        name: String,
        /// Its rows.
        rows: usize,
        /// Its columns.
        cols: usize,
    },
    /// The exported weights do not make a valid model (wrong shape, ...).
    #[error("tensor `{name}`: {error}")]
    Model {
        /// GGUF name of the tensor, or `config` for a config error.
        name: String,
        /// The runtime's complaint.
        error: ModelError,
    },
    /// A config value does not fit the metadata type.
    #[error("metadata `{key}` = {value} does not fit a u32")]
    TooLarge {
        /// The key.
        key: String,
        /// The value.
        value: usize,
    },
    /// An override pattern that matches no tensor (a typo would otherwise go unnoticed).
    #[error("--tensor-type pattern `{0}` matches no tensor")]
    PatternMatchesNothing(String),
}

/// A storage type name that is not one of f32, f16, q8_0, q4_0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TypeParseError {
    /// Unknown type.
    #[error("unknown tensor type `{0}` (expected f32, f16, q8_0 or q4_0)")]
    UnknownType(String),
    /// `PATTERN=TYPE` without `=` or with an empty pattern.
    #[error("`{0}` is not PATTERN=TYPE")]
    NotAnOverride(String),
    /// A pattern that is not a glob (an unclosed `[` or `{`, a trailing `\`, ...).
    #[error("pattern `{pattern}`: {reason}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// What is wrong with it.
        reason: globset::ErrorKind,
    },
}

/// Parses `f32`, `f16`, `q8_0` or `q4_0` (any case).
pub fn parse_dtype(s: &str) -> Result<DType, TypeParseError> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "q8_0" => DType::Q8_0,
        "q4_0" => DType::Q4_0,
        _ => return Err(TypeParseError::UnknownType(s.to_string())),
    })
}

/// `PATTERN=TYPE`: matrices whose GGUF name matches `PATTERN` are stored as `TYPE`.
///
/// `PATTERN` is a glob (globset's syntax: `*` any run of characters, `?` one character,
/// `[0-3]` one of a set, `{up,down}` one of the alternatives, `\` escapes the next character)
/// searched anywhere in the name: `ffn_down` matches every block's `ffn_down.weight`, `blk.0.*`
/// every tensor of block 0, `output.weight` the LM head, `attn_*.weight` the GDN q/k/v/gate
/// projections, `blk.[0-3].ffn_*` the MLP of blocks 0 to 3.
#[derive(Clone, Debug)]
pub struct TypeOverride {
    pattern: String,
    matcher: GlobMatcher,
    dtype: DType,
}

impl TypeOverride {
    /// An override, or [`TypeParseError::BadPattern`] if `pattern` is not a glob.
    pub fn new(pattern: &str, dtype: DType) -> Result<Self, TypeParseError> {
        // Escapes behave the same on every platform (globset's default turns them off on
        // Windows).
        let glob = |p: &str| GlobBuilder::new(p).backslash_escape(true).build();
        let bad = |e: globset::Error| TypeParseError::BadPattern {
            pattern: pattern.to_string(),
            reason: e.kind().clone(),
        };
        // The pattern alone first: its error names what the user wrote, and a trailing `\`
        // cannot escape the `*` added below.
        glob(pattern).map_err(bad)?;
        // globset matches whole names; `*` on both ends makes it a search.
        let matcher = glob(&format!("*{pattern}*"))
            .map_err(bad)?
            .compile_matcher();
        Ok(Self {
            pattern: pattern.to_string(),
            matcher,
            dtype,
        })
    }

    /// The pattern, as given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The type that matching matrices get.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Whether `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        self.matcher.is_match(name)
    }
}

impl FromStr for TypeOverride {
    type Err = TypeParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (pattern, ty) = s
            .rsplit_once('=')
            .filter(|(p, _)| !p.is_empty())
            .ok_or_else(|| TypeParseError::NotAnOverride(s.to_string()))?;
        Self::new(pattern, parse_dtype(ty)?)
    }
}

/// What to export and how.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// `general.name` (default: the architecture's name).
    pub name: Option<String>,
    /// Storage type of the 2-D weight matrices.
    pub matrix_type: DType,
    /// Per-tensor overrides, the last match winning.
    pub overrides: Vec<TypeOverride>,
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            name: None,
            matrix_type: DType::F32,
            overrides: Vec::new(),
        }
    }
}

/// Whether a role is a 2-D weight matrix (quantizable); the others are recurrence-critical.
pub const fn is_matrix(role: Role) -> bool {
    use Role::*;
    matches!(
        role,
        Embedding
            | LmHead
            | MlpGate
            | MlpUp
            | MlpDown
            | OutProj
            | InProj
            | QProj
            | KProj
            | VProj
            | AProj
            | BProj
            | GProj
            | LProj
    )
}

/// Whether a role is stored 1-D (`[n]`).
pub const fn is_vector(role: Role) -> bool {
    use Role::*;
    matches!(
        role,
        FinalNorm | MixerNorm | MlpNorm | ALog | DtBias | OutNorm | ConvBias | DSkip
    )
}

/// The GGUF name of a tensor: `token_embd.weight`, `blk.3.ffn_up.weight`, ...
pub fn gguf_name(name: TensorName) -> String {
    name.to_string()
}

/// Every tensor a model with this config reads, in file order.
pub fn expected_tensors(config: &ModelConfig) -> Vec<TensorName> {
    config.tensor_names().collect()
}

/// What happened to one tensor.
#[derive(Clone, Debug)]
pub struct TensorReport {
    /// GGUF name.
    pub name: String,
    /// Shape as the runtime sees it: `[n]` or `[rows, cols]`.
    pub shape: Vec<usize>,
    /// The type asked for (matrix type or override).
    pub requested: DType,
    /// The type stored.
    pub dtype: DType,
    /// Elements.
    pub elements: usize,
    /// Bytes of data (without alignment padding).
    pub bytes: usize,
    /// Why the stored type differs from the requested one, or other remarks.
    pub note: Option<String>,
}

/// An exported model held in memory: its tensors in their storage types. It is a
/// [`WeightSource`], so the runtime can run exactly the weights that go into the file.
#[derive(Clone, Debug)]
pub struct ExportedModel {
    config: ModelConfig,
    name: String,
    tensors: Vec<(TensorName, Vec<usize>, OwnedTensorData)>,
    index: HashMap<TensorName, usize>,
    report: Vec<TensorReport>,
    vocabulary: Option<Vocabulary>,
}

impl ExportedModel {
    /// Converts a checkpoint; every tensor it holds must be one the config uses.
    pub fn from_checkpoint(ckpt: &Checkpoint, opts: &ExportOptions) -> Result<Self, ExportError> {
        Self::from_checkpoint_with_progress(ckpt, opts, &mut |_| {})
    }

    /// [`ExportedModel::from_checkpoint`], calling `progress` after each tensor.
    pub fn from_checkpoint_with_progress(
        ckpt: &Checkpoint,
        opts: &ExportOptions,
        progress: &mut dyn FnMut(&TensorReport),
    ) -> Result<Self, ExportError> {
        let expected = expected_tensors(&ckpt.config);
        if let Some(extra) = ckpt.store.names().find(|n| !expected.contains(n)) {
            return Err(ExportError::UnusedTensor(
                ckpt.layout.key(extra).unwrap_or_else(|| gguf_name(extra)),
            ));
        }
        Ok(Self::from_source(ckpt.config, &ckpt.store, opts, progress)?
            .with_vocabulary(ckpt.vocabulary.clone()))
    }

    /// Sets the tokenizer written to `tokenizer.ggml.*` (by default byte-level for a vocabulary
    /// of 256 and none otherwise).
    pub fn with_vocabulary(mut self, vocabulary: Option<Vocabulary>) -> Self {
        self.vocabulary = vocabulary;
        self
    }

    /// Converts the tensors that `config` needs from `source`, in any storage type: tensors
    /// already in the target type are copied as they are, the others are dequantized to f32
    /// and stored (quantized) as asked.
    pub fn from_source(
        config: ModelConfig,
        source: &dyn WeightSource,
        opts: &ExportOptions,
        progress: &mut dyn FnMut(&TensorReport),
    ) -> Result<Self, ExportError> {
        let expected = expected_tensors(&config);
        let gguf_names: Vec<String> = expected.iter().map(|&n| gguf_name(n)).collect();
        for o in &opts.overrides {
            if !gguf_names.iter().any(|n| o.matches(n)) {
                return Err(ExportError::PatternMatchesNothing(o.pattern().to_string()));
            }
        }
        let mut out = Self {
            config,
            name: opts
                .name
                .clone()
                .unwrap_or_else(|| config.arch.name().to_string()),
            tensors: Vec::with_capacity(expected.len()),
            index: HashMap::new(),
            report: Vec::with_capacity(expected.len()),
            vocabulary: (config.vocab_size == 256).then_some(Vocabulary::Bytes),
        };
        for (&tn, gname) in expected.iter().zip(gguf_names) {
            let view = source
                .tensor(tn)
                .ok_or_else(|| ExportError::MissingTensor(gname.clone()))?;
            let (tensor, shape, report) = convert_one(tn, gname, view, opts)?;
            progress(&report);
            out.index.insert(tn, out.tensors.len());
            out.tensors.push((tn, shape, tensor));
            out.report.push(report);
        }
        Model::new(config, &out).map_err(|error| ExportError::Model {
            name: match error {
                ModelError::MissingTensor(n)
                | ModelError::NotF32(n)
                | ModelError::ShapeMismatch { name: n, .. } => gguf_name(n),
                ModelError::Config(_) => "config".to_string(),
            },
            error,
        })?;
        Ok(out)
    }

    /// The config.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// What was stored for each tensor, in file order.
    pub fn report(&self) -> &[TensorReport] {
        &self.report
    }

    /// The runtime model over the exported weights.
    pub fn model(&self) -> Result<Model<'_>, ModelError> {
        Model::new(self.config, self)
    }

    /// The metadata pairs of the file, in order (`general.*`, `{arch}.*`, `tokenizer.*`).
    pub fn metadata(&self) -> Result<Vec<(String, Value)>, ExportError> {
        let mut kv = metadata(&self.config, &self.name)?;
        if let Some(v) = &self.vocabulary {
            kv.extend(v.metadata());
        }
        Ok(kv)
    }

    /// The converted tensors in file order: name, GGUF shape (`[n]` or `[rows, cols]`), data.
    pub fn tensors(&self) -> impl Iterator<Item = (TensorName, &[usize], &OwnedTensorData)> + '_ {
        self.tensors.iter().map(|(n, s, d)| (*n, s.as_slice(), d))
    }

    /// The GGUF file.
    pub fn to_gguf(&self) -> Result<Vec<u8>, ExportError> {
        let mut w = GgufWriter::new(names::ALIGNMENT);
        for (k, v) in self.metadata()? {
            w.add(k, v)?;
        }
        for (tn, shape, data) in &self.tensors {
            w.add_tensor(gguf_name(*tn), shape, data.clone())?;
        }
        Ok(w.to_bytes())
    }
}

impl WeightSource for ExportedModel {
    fn tensor(&self, name: TensorName) -> Option<TensorView<'_>> {
        let (_, shape, data) = &self.tensors[*self.index.get(&name)?];
        let (rows, cols) = match shape.as_slice() {
            [n] => (1, *n),
            [r, c] => (*r, *c),
            _ => return None,
        };
        TensorView::new(rows, cols, data.as_data())
    }
}

/// The f32 values of a view, row-major.
pub fn dequantize(view: &TensorView<'_>) -> Vec<f32> {
    if let Some(d) = view.as_f32() {
        return d.to_vec();
    }
    let mut out = vec![0f32; view.rows * view.cols];
    if view.cols > 0 {
        for (r, row) in out.chunks_exact_mut(view.cols).enumerate() {
            view.row_into(r, row);
        }
    }
    out
}

fn convert_one(
    tn: TensorName,
    name: String,
    view: TensorView<'_>,
    opts: &ExportOptions,
) -> Result<(OwnedTensorData, Vec<usize>, TensorReport), ExportError> {
    let (rows, cols) = (view.rows, view.cols);
    let shape = if is_vector(tn.role) {
        if rows != 1 {
            return Err(ExportError::NotAVector { name, rows, cols });
        }
        vec![cols]
    } else {
        vec![rows, cols]
    };
    let mut notes = Vec::new();
    let (requested, mut dtype) = if is_matrix(tn.role) {
        let t = opts
            .overrides
            .iter()
            .rev()
            .find(|o| o.matches(&name))
            .map_or(opts.matrix_type, |o| o.dtype());
        (t, t)
    } else {
        let t = opts
            .overrides
            .iter()
            .rev()
            .find(|o| o.matches(&name))
            .map_or(DType::F32, |o| o.dtype());
        if t != DType::F32 {
            notes.push(format!(
                "kept f32 instead of {}: recurrence-critical",
                t.name()
            ));
        }
        (t, DType::F32)
    };
    if matches!(dtype, DType::Q8_0 | DType::Q4_0) && cols % QK != 0 {
        notes.push(format!(
            "f16 instead of {}: rows of {cols} are not a multiple of {QK}",
            dtype.name()
        ));
        dtype = DType::F16;
    }
    let source = view.dtype();
    let data = if source == dtype {
        OwnedTensorData::from_view(view.data)
    } else {
        if matches!(source, DType::Q8_0 | DType::Q4_0) {
            notes.push(format!("requantized from {}", source.name()));
        }
        let f = dequantize(&view);
        // `cols` is a multiple of the block length here, so this cannot fail.
        OwnedTensorData::from_f32(&f, cols, dtype).unwrap_or(OwnedTensorData::F32(f))
    };
    let report = TensorReport {
        name,
        shape: shape.clone(),
        requested,
        dtype: data.dtype(),
        elements: data.len(),
        bytes: data.byte_len(),
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    };
    Ok((data, shape, report))
}

fn u32_value(key: &str, v: usize) -> Result<Value, ExportError> {
    u32::try_from(v)
        .map(Value::U32)
        .map_err(|_| ExportError::TooLarge {
            key: key.to_string(),
            value: v,
        })
}

/// The `general.*` and `{arch}.*` metadata pairs `docs/model-file.md` lists, for a model of
/// this config (the tokenizer's come from [`Vocabulary::metadata`]).
pub fn metadata(config: &ModelConfig, name: &str) -> Result<Vec<(String, Value)>, ExportError> {
    let arch = names::arch_name(config.arch);
    let k = |s: &str| format!("{arch}.{s}");
    let c = config;
    let mut kv = vec![
        (general::ARCHITECTURE.to_string(), Value::string(arch)),
        (general::NAME.to_string(), Value::string(name)),
        (general::ALIGNMENT.to_string(), Value::U32(names::ALIGNMENT)),
    ];
    for (key, v) in [
        (key::VOCAB_SIZE, c.vocab_size),
        (key::EMBEDDING_LENGTH, c.hidden_size),
        (key::BLOCK_COUNT, c.num_layers),
        (key::FEED_FORWARD_LENGTH, c.intermediate_size),
        (key::HEAD_COUNT, c.num_heads),
        (key::HEAD_K_DIM, c.head_k_dim),
        (key::HEAD_V_DIM, c.head_v_dim),
        (key::GROUP_COUNT, c.num_groups),
        (key::CONV_KERNEL, c.conv_kernel),
    ] {
        let key = k(key);
        let v = u32_value(&key, v)?;
        kv.push((key, v));
    }
    kv.push((k(key::CONV_BIAS), Value::Bool(c.conv_bias)));
    let key = k(key::NORM_GROUP_SIZE);
    kv.push((key.clone(), u32_value(&key, c.norm_group_size)?));
    kv.push((k(key::NORM_EPSILON), Value::F32(c.norm_eps)));
    let key = k(key::LAMBDA_LEVELS);
    kv.push((key.clone(), u32_value(&key, c.lambda_levels)?));
    let key = k(key::STATE_LEVELS);
    kv.push((key.clone(), u32_value(&key, c.default_state_levels())?));
    kv.push((
        k(key::CAPACITY_POLICY),
        Value::string(names::CAPACITY_POLICY_SATURATE),
    ));
    Ok(kv)
}

/// Exports a checkpoint to a GGUF v3 file.
pub fn export_gguf(ckpt: &Checkpoint, opts: &ExportOptions) -> Result<Vec<u8>, ExportError> {
    ExportedModel::from_checkpoint(ckpt, opts)?.to_gguf()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(pattern: &str) -> TypeOverride {
        TypeOverride::new(pattern, DType::F16).unwrap()
    }

    #[test]
    fn patterns_are_unanchored_globs() {
        assert!(o("ffn_down").matches("blk.3.ffn_down.weight"));
        assert!(o("blk.0.*").matches("blk.0.attn_q.weight"));
        assert!(!o("blk.1.*").matches("blk.11.attn_q.weight"));
        assert!(o("attn_*.weight").matches("blk.2.attn_gate.weight"));
        assert!(!o("attn_*.weight").matches("blk.2.ssm_out.weight"));
        assert!(o("output.weight").matches("output.weight"));
        assert!(!o("output.weight").matches("output_norm.weight"));
        assert!(o("*").matches("anything"));
        assert!(o("**").matches("anything"));
    }

    #[test]
    fn patterns_have_globsets_classes_and_alternatives() {
        assert!(o("blk.?.ffn").matches("blk.3.ffn_up.weight"));
        assert!(!o("blk.?.ffn").matches("blk.11.ffn_up.weight"));
        assert!(o("blk.[0-3].").matches("blk.2.attn_q.weight"));
        assert!(!o("blk.[0-3].").matches("blk.4.attn_q.weight"));
        assert!(o("blk.[!0].").matches("blk.4.attn_q.weight"));
        assert!(!o("blk.[!0].").matches("blk.0.attn_q.weight"));
        assert!(o("ffn_{up,down}").matches("blk.0.ffn_down.weight"));
        assert!(!o("ffn_{up,down}").matches("blk.0.ffn_gate.weight"));
        assert!(o(r"output\.weight").matches("output.weight"));
    }

    #[test]
    fn a_bad_pattern_is_refused_by_name() {
        for (arg, pattern) in [
            ("blk.[0=q8_0", "blk.[0"),
            ("ffn_{up=q8_0", "ffn_{up"),
            ("ffn_up}=q8_0", "ffn_up}"),
            ("blk.[3-0]=q8_0", "blk.[3-0]"),
            ("output\\=q8_0", "output\\"),
        ] {
            let err = arg.parse::<TypeOverride>().unwrap_err();
            assert!(
                matches!(&err, TypeParseError::BadPattern { pattern: p, .. } if p == pattern),
                "{arg}: {err:?}"
            );
            assert!(err.to_string().contains(&format!("`{pattern}`")), "{err}");
        }
    }

    #[test]
    fn override_parsing() {
        let t = "blk.0.*=Q4_0".parse::<TypeOverride>().unwrap();
        assert_eq!((t.pattern(), t.dtype()), ("blk.0.*", DType::Q4_0));
        assert!(matches!(
            "ffn=q5_k".parse::<TypeOverride>(),
            Err(TypeParseError::UnknownType(_))
        ));
        assert!(matches!(
            "=q8_0".parse::<TypeOverride>(),
            Err(TypeParseError::NotAnOverride(_))
        ));
        assert!(matches!(
            "q8_0".parse::<TypeOverride>(),
            Err(TypeParseError::NotAnOverride(_))
        ));
    }

    #[test]
    fn every_role_is_matrix_vector_or_small_2d() {
        for role in names::ALL_ROLES {
            assert!(!(is_matrix(role) && is_vector(role)), "{role:?}");
        }
    }
}
