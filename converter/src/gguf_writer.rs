//! A GGUF v3 writer (little-endian), byte-compatible with ggml's and gguf-py's readers.
//!
//! Layout: magic `GGUF`, version 3, tensor count (u64), metadata count (u64); the metadata
//! key/value pairs; the tensor infos (name, dims in ggml order, ggml type, offset relative to
//! the data section); padding to `general.alignment`; then the tensor data, each tensor padded
//! to the alignment. The conventions of loglinear files are in `docs/model-file.md`.

use half::f16;
use loglinear_runtime::quant::{BlockQ4_0, BlockQ8_0, QK};
use loglinear_runtime::{DType, TensorData};
use std::collections::HashSet;

use loglinear_runtime::gguf::format::general;
pub use loglinear_runtime::gguf::format::{ValueType, MAGIC, MAX_TENSOR_NAME, VERSION};

/// Why a GGUF file could not be written. Every variant names the key or tensor.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriterError {
    /// The same metadata key was added twice.
    #[error("metadata key `{0}` is set twice")]
    DuplicateKey(String),
    /// A metadata key that GGUF cannot hold (empty).
    #[error("metadata key `{0:?}` is invalid: keys must be non-empty")]
    BadKey(String),
    /// An array whose elements are not all of its declared type, or an array of arrays.
    #[error("metadata key `{key}`: array element {index} is {found:?}, expected {expected:?}")]
    ArrayElement {
        /// The key.
        key: String,
        /// The element.
        index: usize,
        /// The declared element type.
        expected: ValueType,
        /// The element's type.
        found: ValueType,
    },
    /// `general.alignment` is set to something other than the writer's alignment, or not a u32.
    #[error("`general.alignment` must be the u32 {expected}")]
    Alignment {
        /// The writer's alignment.
        expected: u32,
    },
    /// The same tensor name was added twice.
    #[error("tensor `{0}` is added twice")]
    DuplicateTensor(String),
    /// A tensor name that ggml cannot hold.
    #[error("tensor name `{0}` is empty or longer than {max} bytes", max = MAX_TENSOR_NAME - 1)]
    BadTensorName(String),
    /// The shape does not match the data.
    #[error("tensor `{name}`: shape {shape:?} has {expected} elements, data has {found}")]
    ShapeMismatch {
        /// The tensor.
        name: String,
        /// Its shape (rows, cols) or (n).
        shape: Vec<usize>,
        /// Elements the shape implies.
        expected: usize,
        /// Elements of the data.
        found: usize,
    },
    /// A shape that is empty, has more than two dimensions or a zero dimension.
    #[error("tensor `{name}`: shape {shape:?} must be (n) or (rows, cols), all positive")]
    BadShape {
        /// The tensor.
        name: String,
        /// The shape.
        shape: Vec<usize>,
    },
    /// A quantized tensor whose rows are not whole blocks.
    #[error(
        "tensor `{name}`: {dtype:?} needs rows of a multiple of {QK} weights, rows have {cols}"
    )]
    RowNotBlocks {
        /// The tensor.
        name: String,
        /// The type.
        dtype: DType,
        /// The row length.
        cols: usize,
    },
}

/// A typed metadata value.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    /// Elements of one type (checked when the key is added).
    Array(ValueType, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A string value.
    pub fn string(s: impl Into<String>) -> Self {
        Value::String(s.into())
    }

    /// An array of strings.
    pub fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Self {
        Value::Array(
            ValueType::String,
            items.into_iter().map(|s| Value::String(s.into())).collect(),
        )
    }

    /// An array of i32.
    pub fn i32s(items: impl IntoIterator<Item = i32>) -> Self {
        Value::Array(ValueType::I32, items.into_iter().map(Value::I32).collect())
    }

    fn check(&self, key: &str) -> Result<(), WriterError> {
        if let Value::Array(expected, items) = self {
            for (index, v) in items.iter().enumerate() {
                let found = v.value_type();
                // GGUF allows nested arrays, but no reader of ours needs them; refuse them so
                // that the element type alone describes an array.
                if found != *expected || found == ValueType::Array {
                    return Err(WriterError::ArrayElement {
                        key: key.to_string(),
                        index,
                        expected: *expected,
                        found,
                    });
                }
            }
        }
        Ok(())
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Value::U8(v) => out.push(*v),
            Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::Bool(v) => out.push(u8::from(*v)),
            Value::String(s) => write_str(out, s),
            Value::Array(t, items) => {
                out.extend_from_slice(&t.id().to_le_bytes());
                out.extend_from_slice(&(items.len() as u64).to_le_bytes());
                for v in items {
                    v.write(out);
                }
            }
            Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
            Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        }
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Owned tensor data, row-major, in one of the storage types of [`DType`].
#[derive(Clone, Debug, PartialEq)]
pub enum OwnedTensorData {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 16-bit floats.
    F16(Vec<f16>),
    /// Q8_0 blocks.
    Q8_0(Vec<BlockQ8_0>),
    /// Q4_0 blocks.
    Q4_0(Vec<BlockQ4_0>),
}

impl OwnedTensorData {
    /// Stores row-major f32 `data` whose rows have `cols` elements as `dtype`, quantizing
    /// block by block with ggml's reference quantizers. `None` if a quantized type is asked for
    /// and `cols` is not a multiple of 32.
    pub fn from_f32(data: &[f32], cols: usize, dtype: DType) -> Option<Self> {
        Some(match dtype {
            DType::F32 => OwnedTensorData::F32(data.to_vec()),
            DType::F16 => OwnedTensorData::F16(data.iter().map(|&v| f16::from_f32(v)).collect()),
            DType::Q8_0 | DType::Q4_0 => {
                if cols == 0 || cols % QK != 0 || data.len() % cols != 0 {
                    return None;
                }
                let blocks = data.chunks_exact(QK).map(|c| {
                    let mut b = [0f32; QK];
                    b.copy_from_slice(c);
                    b
                });
                if dtype == DType::Q8_0 {
                    OwnedTensorData::Q8_0(blocks.map(|b| BlockQ8_0::quantize(&b)).collect())
                } else {
                    OwnedTensorData::Q4_0(blocks.map(|b| BlockQ4_0::quantize(&b)).collect())
                }
            }
        })
    }

    /// A copy of borrowed data.
    pub fn from_view(data: TensorData<'_>) -> Self {
        match data {
            TensorData::F32(d) => OwnedTensorData::F32(d.to_vec()),
            TensorData::F16(d) => OwnedTensorData::F16(d.to_vec()),
            TensorData::Q8_0(d) => OwnedTensorData::Q8_0(d.to_vec()),
            TensorData::Q4_0(d) => OwnedTensorData::Q4_0(d.to_vec()),
        }
    }

    /// The borrowed form the runtime reads.
    pub fn as_data(&self) -> TensorData<'_> {
        match self {
            OwnedTensorData::F32(d) => TensorData::F32(d),
            OwnedTensorData::F16(d) => TensorData::F16(d),
            OwnedTensorData::Q8_0(d) => TensorData::Q8_0(d),
            OwnedTensorData::Q4_0(d) => TensorData::Q4_0(d),
        }
    }

    /// The storage type.
    pub fn dtype(&self) -> DType {
        self.as_data().dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.as_data().len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes in the file.
    pub fn byte_len(&self) -> usize {
        match self {
            OwnedTensorData::F32(d) => d.len() * 4,
            OwnedTensorData::F16(d) => d.len() * 2,
            OwnedTensorData::Q8_0(d) => d.len() * core::mem::size_of::<BlockQ8_0>(),
            OwnedTensorData::Q4_0(d) => d.len() * core::mem::size_of::<BlockQ4_0>(),
        }
    }

    /// Appends the little-endian file bytes (ggml's block layouts).
    pub fn write_le(&self, out: &mut Vec<u8>) {
        out.reserve(self.byte_len());
        match self {
            OwnedTensorData::F32(d) => d
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            OwnedTensorData::F16(d) => d
                .iter()
                .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            OwnedTensorData::Q8_0(d) => {
                for b in d {
                    out.extend_from_slice(&b.d.to_le_bytes());
                    out.extend(b.qs.iter().map(|&q| q as u8));
                }
            }
            OwnedTensorData::Q4_0(d) => {
                for b in d {
                    out.extend_from_slice(&b.d.to_le_bytes());
                    out.extend_from_slice(&b.qs);
                }
            }
        }
    }
}

/// One tensor to be written.
#[derive(Clone, Debug)]
pub struct TensorEntry {
    /// GGUF name.
    pub name: String,
    /// Shape as the runtime sees it: `[n]` or `[rows, cols]`.
    pub shape: Vec<usize>,
    /// The data.
    pub data: OwnedTensorData,
}

impl TensorEntry {
    /// ggml's `ne`: fastest dimension first (`[cols, rows]`).
    pub fn ggml_dims(&self) -> Vec<u64> {
        self.shape.iter().rev().map(|&d| d as u64).collect()
    }
}

/// Builds a GGUF v3 file in memory.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    alignment: u32,
    kv: Vec<(String, Value)>,
    keys: HashSet<String>,
    tensors: Vec<TensorEntry>,
    tensor_names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new(loglinear_runtime::gguf::names::ALIGNMENT)
    }
}

impl GgufWriter {
    /// An empty file with this data alignment (a power of two; 32 in loglinear files).
    ///
    /// # Panics
    /// If `alignment` is not a power of two.
    pub fn new(alignment: u32) -> Self {
        assert!(
            alignment.is_power_of_two(),
            "alignment must be a power of two"
        );
        Self {
            alignment,
            kv: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            tensor_names: HashSet::new(),
        }
    }

    /// The data alignment.
    pub fn alignment(&self) -> u32 {
        self.alignment
    }

    /// Adds a metadata pair. Pairs are written in the order added; `general.alignment` is
    /// added automatically (first) if it was not added.
    pub fn add(&mut self, key: impl Into<String>, value: Value) -> Result<(), WriterError> {
        let key = key.into();
        if key.is_empty() {
            return Err(WriterError::BadKey(key));
        }
        if self.keys.contains(&key) {
            return Err(WriterError::DuplicateKey(key));
        }
        if key == general::ALIGNMENT && value != Value::U32(self.alignment) {
            return Err(WriterError::Alignment {
                expected: self.alignment,
            });
        }
        value.check(&key)?;
        self.keys.insert(key.clone());
        self.kv.push((key, value));
        Ok(())
    }

    /// Adds a tensor of shape `[n]` or `[rows, cols]` (rows of `cols` elements, row-major).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        shape: &[usize],
        data: OwnedTensorData,
    ) -> Result<(), WriterError> {
        let name = name.into();
        if name.is_empty() || name.len() >= MAX_TENSOR_NAME {
            return Err(WriterError::BadTensorName(name));
        }
        if self.tensor_names.contains(&name) {
            return Err(WriterError::DuplicateTensor(name));
        }
        if shape.is_empty() || shape.len() > 2 || shape.contains(&0) {
            return Err(WriterError::BadShape {
                name,
                shape: shape.to_vec(),
            });
        }
        let expected = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| WriterError::BadShape {
                name: name.clone(),
                shape: shape.to_vec(),
            })?;
        if expected != data.len() {
            return Err(WriterError::ShapeMismatch {
                name,
                shape: shape.to_vec(),
                expected,
                found: data.len(),
            });
        }
        let cols = *shape.last().unwrap_or(&1);
        let dtype = data.dtype();
        if cols % dtype.block_len() != 0 {
            return Err(WriterError::RowNotBlocks { name, dtype, cols });
        }
        self.tensor_names.insert(name.clone());
        self.tensors.push(TensorEntry {
            name,
            shape: shape.to_vec(),
            data,
        });
        Ok(())
    }

    /// The tensors added so far.
    pub fn tensors(&self) -> &[TensorEntry] {
        &self.tensors
    }

    fn pad(&self, n: usize) -> usize {
        let a = self.alignment as usize;
        n.div_ceil(a) * a
    }

    /// The whole file.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut kv: Vec<(&str, Value)> = Vec::with_capacity(self.kv.len() + 1);
        if !self.keys.contains(general::ALIGNMENT) {
            kv.push((general::ALIGNMENT, Value::U32(self.alignment)));
        }
        kv.extend(self.kv.iter().map(|(k, v)| (k.as_str(), v.clone())));

        let data_len: usize = self
            .tensors
            .iter()
            .map(|t| self.pad(t.data.byte_len()))
            .sum();
        let mut out = Vec::with_capacity(4096 + data_len);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(kv.len() as u64).to_le_bytes());
        for (k, v) in &kv {
            write_str(&mut out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            v.write(&mut out);
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            let dims = t.ggml_dims();
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.data.dtype().ggml_id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += self.pad(t.data.byte_len());
        }
        out.resize(self.pad(out.len()), 0);
        for t in &self.tensors {
            t.data.write_le(&mut out);
            out.resize(self.pad(out.len()), 0);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn header_kv_and_tensor_layout_match_the_spec() {
        let mut w = GgufWriter::new(32);
        w.add("general.name", Value::string("t")).unwrap();
        w.add_tensor("a", &[3], OwnedTensorData::F32(vec![1.0, 2.0, 3.0]))
            .unwrap();
        w.add_tensor(
            "b",
            &[2, 32],
            OwnedTensorData::from_f32(&[0.5; 64], 32, DType::Q8_0).unwrap(),
        )
        .unwrap();
        let b = w.to_bytes();
        assert_eq!(&b[..4], b"GGUF");
        assert_eq!(u32_at(&b, 4), 3);
        assert_eq!(u64_at(&b, 8), 2);
        assert_eq!(u64_at(&b, 16), 2);
        // First pair: general.alignment (u32 32), added automatically.
        let mut p = 24;
        assert_eq!(u64_at(&b, p), 17);
        assert_eq!(&b[p + 8..p + 25], b"general.alignment");
        p += 25;
        assert_eq!(u32_at(&b, p), 4);
        assert_eq!(u32_at(&b, p + 4), 32);
        p += 8;
        // general.name = "t"
        assert_eq!(u64_at(&b, p), 12);
        p += 8 + 12;
        assert_eq!(u32_at(&b, p), 8);
        assert_eq!(u64_at(&b, p + 4), 1);
        assert_eq!(b[p + 12], b't');
        p += 13;
        // Tensor "a": 1-D [3], F32, offset 0.
        assert_eq!(u64_at(&b, p), 1);
        assert_eq!(b[p + 8], b'a');
        p += 9;
        assert_eq!(u32_at(&b, p), 1);
        assert_eq!(u64_at(&b, p + 4), 3);
        assert_eq!(u32_at(&b, p + 12), 0);
        assert_eq!(u64_at(&b, p + 16), 0);
        p += 24;
        // Tensor "b": ne = [32, 2], Q8_0, offset 32 (12 bytes of "a" padded).
        assert_eq!(u64_at(&b, p), 1);
        p += 9;
        assert_eq!(u32_at(&b, p), 2);
        assert_eq!((u64_at(&b, p + 4), u64_at(&b, p + 12)), (32, 2));
        assert_eq!(u32_at(&b, p + 20), 8);
        assert_eq!(u64_at(&b, p + 24), 32);
        p += 32;
        let data = p.div_ceil(32) * 32;
        assert!(b[p..data].iter().all(|&x| x == 0));
        assert_eq!(
            f32::from_le_bytes(b[data + 4..data + 8].try_into().unwrap()),
            2.0
        );
        // Q8_0 block: d = 0.5/127 as f16, then q = 127 everywhere.
        let blk = data + 32;
        assert_eq!(
            f16::from_le_bytes([b[blk], b[blk + 1]]),
            f16::from_f32(0.5 / 127.0)
        );
        assert!(b[blk + 2..blk + 34].iter().all(|&q| q == 127));
        assert_eq!(b.len(), blk + 2 * 34 + (96 - 68));
        assert_eq!(b.len() % 32, 0);
    }

    #[test]
    fn refuses_bad_input() {
        let mut w = GgufWriter::default();
        w.add("k", Value::U32(1)).unwrap();
        assert_eq!(
            w.add("k", Value::U8(1)),
            Err(WriterError::DuplicateKey("k".into()))
        );
        assert!(matches!(
            w.add("general.alignment", Value::U32(64)),
            Err(WriterError::Alignment { expected: 32 })
        ));
        assert!(matches!(
            w.add(
                "arr",
                Value::Array(ValueType::I32, vec![Value::I32(1), Value::U8(2)])
            ),
            Err(WriterError::ArrayElement { index: 1, .. })
        ));
        assert!(matches!(
            w.add_tensor("x", &[2, 3], OwnedTensorData::F32(vec![0.0; 5])),
            Err(WriterError::ShapeMismatch {
                expected: 6,
                found: 5,
                ..
            })
        ));
        assert!(matches!(
            w.add_tensor("x", &[2, 0], OwnedTensorData::F32(vec![])),
            Err(WriterError::BadShape { .. })
        ));
        assert!(matches!(
            w.add_tensor("x".repeat(64), &[1], OwnedTensorData::F32(vec![0.0])),
            Err(WriterError::BadTensorName(_))
        ));
        w.add_tensor("x", &[1], OwnedTensorData::F32(vec![0.0]))
            .unwrap();
        assert!(matches!(
            w.add_tensor("x", &[1], OwnedTensorData::F32(vec![0.0])),
            Err(WriterError::DuplicateTensor(_))
        ));
        assert!(OwnedTensorData::from_f32(&[0.0; 48], 48, DType::Q4_0).is_none());
    }

    #[test]
    fn q4_0_bytes_follow_ggml_nibble_order() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 16.0).collect();
        let t = OwnedTensorData::from_f32(&x, 32, DType::Q4_0).unwrap();
        let mut b = Vec::new();
        t.write_le(&mut b);
        assert_eq!(b.len(), 18);
        // max |x| is -16 at j = 0, so d = 2 and q0 = 0; weight 16 (x = 0) is q = 8, high nibble.
        assert_eq!(f16::from_le_bytes([b[0], b[1]]).to_f32(), 2.0);
        assert_eq!(b[2] & 0x0F, 0);
        assert_eq!(b[2] >> 4, 8);
    }
}
