//! Read-only weight views and the trait through which a model's weights are found.
//!
//! The maths only ever sees a [`TensorView`]: a shape plus borrowed data. Whoever owns the
//! bytes (a safetensors checkpoint on a host, a model file in flash) implements
//! [`WeightSource`]. New storage types (F16, Q8_0, Q4_0) become new [`TensorData`] variants
//! with their own kernels, without touching the layers.

use crate::quant::{self, ActBlock, Activations, BlockQ4_0, BlockQ8_0, QK};
use half::f16;

/// What a tensor is for, independent of any file format's key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[allow(missing_docs)]
pub enum Role {
    // Model level.
    Embedding,
    FinalNorm,
    LmHead,
    // Every block.
    MixerNorm,
    MlpNorm,
    MlpGate,
    MlpUp,
    MlpDown,
    // Shared by both mixers.
    ALog,
    DtBias,
    /// λ scale `L` (heads × 15), log-linear mixers only.
    LambdaScale,
    /// Mamba-2 `norm.weight` / GDN `o_norm.weight`.
    OutNorm,
    /// Mamba-2 `out_proj` / GDN `o_proj`.
    OutProj,
    // Mamba-2 only.
    InProj,
    Conv,
    ConvBias,
    DSkip,
    // Gated DeltaNet only.
    QProj,
    KProj,
    VProj,
    AProj,
    BProj,
    GProj,
    LProj,
    QConv,
    KConv,
    VConv,
}

impl Role {
    /// Every role: model-level ones first, then a block's in data-flow order (the canonical
    /// tensor order of a model file).
    pub const ALL: [Role; 27] = [
        Role::Embedding,
        Role::FinalNorm,
        Role::LmHead,
        Role::MixerNorm,
        Role::InProj,
        Role::Conv,
        Role::ConvBias,
        Role::QProj,
        Role::KProj,
        Role::VProj,
        Role::AProj,
        Role::BProj,
        Role::GProj,
        Role::LProj,
        Role::QConv,
        Role::KConv,
        Role::VConv,
        Role::DtBias,
        Role::ALog,
        Role::DSkip,
        Role::LambdaScale,
        Role::OutNorm,
        Role::OutProj,
        Role::MlpNorm,
        Role::MlpGate,
        Role::MlpUp,
        Role::MlpDown,
    ];

    /// Whether the role is a model-level tensor (embedding, final norm, LM head).
    pub const fn is_model_level(self) -> bool {
        matches!(self, Role::Embedding | Role::FinalNorm | Role::LmHead)
    }
}

/// A tensor's identity: its role and, for block tensors, the layer index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TensorName {
    /// Block index, `None` for model-level tensors.
    pub layer: Option<u16>,
    /// What the tensor is.
    pub role: Role,
}

impl TensorName {
    /// A model-level tensor.
    pub const fn model(role: Role) -> Self {
        Self { layer: None, role }
    }
    /// A tensor of block `layer`.
    pub const fn block(layer: usize, role: Role) -> Self {
        Self {
            layer: Some(layer as u16),
            role,
        }
    }
}

/// The tensor's name in a model file: `token_embd.weight`, `blk.3.ffn_gate.weight`.
impl core::fmt::Display for TensorName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let suffix = crate::gguf::names::tensor_suffix(self.role);
        match self.layer {
            Some(l) => write!(f, "blk.{l}.{suffix}"),
            None => f.write_str(suffix),
        }
    }
}

/// Storage type of a tensor, with ggml's type ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 32-weight blocks of i8 with an f16 scale.
    Q8_0,
    /// 32-weight blocks of 4-bit values with an f16 scale.
    Q4_0,
}

impl DType {
    /// ggml's `ggml_type` id.
    pub const fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q8_0 => 8,
        }
    }

    /// The type with this ggml id, if supported.
    pub const fn from_ggml_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => DType::F32,
            1 => DType::F16,
            2 => DType::Q4_0,
            8 => DType::Q8_0,
            _ => return None,
        })
    }

    /// Weights per block (1 for float types).
    pub const fn block_len(self) -> usize {
        match self {
            DType::F32 | DType::F16 => 1,
            DType::Q8_0 | DType::Q4_0 => QK,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 => 2,
            DType::Q8_0 => core::mem::size_of::<BlockQ8_0>(),
            DType::Q4_0 => core::mem::size_of::<BlockQ4_0>(),
        }
    }

    /// Bytes of `n` elements, `None` if `n` is not a whole number of blocks or overflows.
    pub const fn bytes_for(self, n: usize) -> Option<usize> {
        if n % self.block_len() != 0 {
            return None;
        }
        (n / self.block_len()).checked_mul(self.block_bytes())
    }

    /// Lowercase name as ggml spells it ("f32", "q8_0", ...).
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::Q8_0 => "q8_0",
            DType::Q4_0 => "q4_0",
        }
    }
}

/// Borrowed tensor data, row-major; quantized rows are whole blocks.
#[derive(Clone, Copy, Debug)]
pub enum TensorData<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// 16-bit floats.
    F16(&'a [f16]),
    /// Q8_0 blocks.
    Q8_0(&'a [BlockQ8_0]),
    /// Q4_0 blocks.
    Q4_0(&'a [BlockQ4_0]),
}

impl TensorData<'_> {
    /// The storage type.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::Q8_0(_) => DType::Q8_0,
            TensorData::Q4_0(_) => DType::Q4_0,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(d) => d.len(),
            TensorData::F16(d) => d.len(),
            TensorData::Q8_0(d) => d.len() * QK,
            TensorData::Q4_0(d) => d.len() * QK,
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index of the first element that is NaN or infinite, or `None`. For a quantized
    /// tensor it is the first element of the first block whose scale is (the quants are
    /// integers).
    pub fn first_non_finite(&self) -> Option<usize> {
        match self {
            TensorData::F32(d) => d.iter().position(|v| !v.is_finite()),
            TensorData::F16(d) => d.iter().position(|v| !v.is_finite()),
            TensorData::Q8_0(d) => d.iter().position(|b| !b.d.is_finite()).map(|i| i * QK),
            TensorData::Q4_0(d) => d.iter().position(|b| !b.d.is_finite()).map(|i| i * QK),
        }
    }
}

/// A 2-D view: `rows × cols`. Vectors are one row (`1 × n`, as ggml's 1-D tensors); a
/// depthwise conv weight (C, 1, W) is `C × W`.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    /// Number of rows (output features of a linear layer).
    pub rows: usize,
    /// Number of columns (input features of a linear layer).
    pub cols: usize,
    /// The elements.
    pub data: TensorData<'a>,
}

impl<'a> TensorView<'a> {
    /// A view over `data`; `None` unless it holds exactly `rows × cols` elements and, for
    /// block types, each row is a whole number of blocks.
    pub fn new(rows: usize, cols: usize, data: TensorData<'a>) -> Option<Self> {
        let n = rows.checked_mul(cols)?;
        if n != data.len() || cols % data.dtype().block_len() != 0 {
            return None;
        }
        Some(Self { rows, cols, data })
    }

    /// A row-major f32 view; `None` if `data.len() != rows * cols`.
    pub fn f32(rows: usize, cols: usize, data: &'a [f32]) -> Option<Self> {
        Self::new(rows, cols, TensorData::F32(data))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The storage type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The data as f32 if it is stored that way (small recurrent-critical tensors always are).
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self.data {
            TensorData::F32(d) => Some(d),
            _ => None,
        }
    }

    /// out = W x, with W this `rows × cols` matrix. `x` has `cols` and `out` has `rows` entries.
    /// Quantized weights are used in place, block by block.
    pub fn matvec(&self, x: &[f32], out: &mut [f32]) {
        let x = &x[..self.cols];
        let out = &mut out[..self.rows];
        match self.data {
            TensorData::F32(w) => {
                for (o, row) in out.iter_mut().zip(w.chunks_exact(self.cols)) {
                    *o = crate::math::dot(row, x);
                }
            }
            TensorData::F16(w) => {
                for (o, row) in out.iter_mut().zip(w.chunks_exact(self.cols)) {
                    *o = row.iter().zip(x).map(|(a, b)| a.to_f32() * b).sum();
                }
            }
            TensorData::Q8_0(w) => {
                for (o, row) in out.iter_mut().zip(w.chunks_exact(self.cols / QK)) {
                    *o = row
                        .iter()
                        .zip(x.chunks_exact(QK))
                        .map(|(b, xs)| b.dot(xs))
                        .sum();
                }
            }
            TensorData::Q4_0(w) => {
                for (o, row) in out.iter_mut().zip(w.chunks_exact(self.cols / QK)) {
                    *o = row
                        .iter()
                        .zip(x.chunks_exact(QK))
                        .map(|(b, xs)| b.dot(xs))
                        .sum();
                }
            }
        }
    }

    /// out = W x, with `x` prepared by [`MatvecInput::new`]: quantized weights use the integer
    /// kernels when the input carries Q8 activations, every other case is [`TensorView::matvec`].
    pub fn matvec_input(&self, x: &MatvecInput<'_>, out: &mut [f32]) {
        let act = x.q8.filter(|a| a.len() * QK == self.cols);
        let out = &mut out[..self.rows];
        match (self.data, act) {
            (TensorData::Q8_0(w), Some(a)) => quant::matvec_q8_0(w, a, out),
            (TensorData::Q4_0(w), Some(a)) => quant::matvec_q4_0(w, a, out),
            _ => self.matvec(x.x, out),
        }
    }

    /// Copies (dequantizes) row `r` into `out` (embedding lookup).
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        let c = self.cols;
        let out = &mut out[..c];
        match self.data {
            TensorData::F32(w) => out.copy_from_slice(&w[r * c..(r + 1) * c]),
            TensorData::F16(w) => {
                for (o, v) in out.iter_mut().zip(&w[r * c..(r + 1) * c]) {
                    *o = v.to_f32();
                }
            }
            TensorData::Q8_0(w) => {
                for (b, o) in w[r * c / QK..(r + 1) * c / QK]
                    .iter()
                    .zip(out.chunks_exact_mut(QK))
                {
                    b.dequantize(o);
                }
            }
            TensorData::Q4_0(w) => {
                for (b, o) in w[r * c / QK..(r + 1) * c / QK]
                    .iter()
                    .zip(out.chunks_exact_mut(QK))
                {
                    b.dequantize(o);
                }
            }
        }
    }
}

/// An input vector for [`TensorView::matvec_input`]: the f32 values and, with
/// [`Activations::Q8`], their quantization, made once and shared by every matrix that reads
/// the same vector (GDN's seven input projections, the MLP's gate and up).
#[derive(Clone, Copy, Debug)]
pub struct MatvecInput<'a> {
    /// The values.
    pub x: &'a [f32],
    /// Their Q8 blocks, if quantized.
    pub q8: Option<&'a [ActBlock]>,
}

impl<'a> MatvecInput<'a> {
    /// Prepares `x` for `mode`, quantizing into `scratch` for [`Activations::Q8`]. An input
    /// whose length is not a whole number of blocks, or a scratch too short, falls back to
    /// f32 (never wrong, only slower).
    pub fn new(x: &'a [f32], mode: Activations, scratch: &'a mut [ActBlock]) -> Self {
        let q8 = match mode {
            Activations::F32 => None,
            Activations::Q8 => quant::quantize_activations(x, scratch),
        };
        Self { x, q8 }
    }

    /// `x` as is, for f32 maths.
    pub fn f32(x: &'a [f32]) -> Self {
        Self { x, q8: None }
    }
}

/// Where a model's weights come from.
pub trait WeightSource {
    /// The tensor with this name, or `None` if there is none.
    fn tensor(&self, name: TensorName) -> Option<TensorView<'_>>;

    /// [`tensor`](Self::tensor) of each name, into `out` (as far as the shorter of the two
    /// goes). A source that finds tensors by scanning can find them all in one pass.
    fn tensors_into<'s>(&'s self, names: &[TensorName], out: &mut [Option<TensorView<'s>>]) {
        for (name, o) in names.iter().zip(out) {
            *o = self.tensor(*name);
        }
    }
}
