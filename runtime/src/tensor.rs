//! Read-only weight views and the trait through which a model's weights are found.
//!
//! The maths only ever sees a [`TensorView`]: a shape plus borrowed data. Whoever owns the
//! bytes (a safetensors checkpoint on a host, a model file in flash) implements
//! [`WeightSource`]. New storage types (F16, Q8_0, Q4_0) become new [`TensorData`] variants
//! with their own kernels, without touching the layers.

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

/// Borrowed tensor data.
#[derive(Clone, Copy, Debug)]
pub enum TensorData<'a> {
    /// Row-major f32.
    F32(&'a [f32]),
}

/// A 2-D view: `rows × cols`. Vectors are `n × 1`; a depthwise conv weight (C, 1, W) is `C × W`.
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
    /// A row-major f32 view; `None` if `data.len() != rows * cols`.
    pub fn f32(rows: usize, cols: usize, data: &'a [f32]) -> Option<Self> {
        (rows.checked_mul(cols)? == data.len()).then_some(Self {
            rows,
            cols,
            data: TensorData::F32(data),
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data as f32 if it is stored that way (small recurrent-critical tensors always are).
    pub fn as_f32(&self) -> Option<&'a [f32]> {
        match self.data {
            TensorData::F32(d) => Some(d),
        }
    }

    /// out = W x, with W this `rows × cols` matrix. `x` has `cols` and `out` has `rows` entries.
    pub fn matvec(&self, x: &[f32], out: &mut [f32]) {
        match self.data {
            TensorData::F32(w) => {
                for (o, row) in out[..self.rows].iter_mut().zip(w.chunks_exact(self.cols)) {
                    *o = crate::math::dot(row, &x[..self.cols]);
                }
            }
        }
    }

    /// Copies row `r` into `out` (embedding lookup).
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        match self.data {
            TensorData::F32(w) => {
                out[..self.cols].copy_from_slice(&w[r * self.cols..(r + 1) * self.cols])
            }
        }
    }
}

/// Where a model's weights come from.
pub trait WeightSource {
    /// The tensor with this name, or `None` if there is none.
    fn tensor(&self, name: TensorName) -> Option<TensorView<'_>>;
}
