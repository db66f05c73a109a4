//! The `no_std`, zero-copy GGUF v3 reader.
//!
//! [`GgufFile::parse`] walks the whole header once and checks every length, offset, dimension,
//! type and alignment with checked arithmetic, so that a truncated, malformed or hostile file is
//! a typed [`GgufError`], never a panic, an out-of-bounds read or an overflow. After that the
//! accessors re-walk the validated header without copying anything; tensor data are borrowed
//! straight from the input (flash or a mapped file).

use super::format::{self, ValueType};
use crate::quant::{BlockQ4_0, BlockQ8_0};
use crate::tensor::{DType, TensorData, TensorView};
use half::f16;

/// The largest number of dimensions ggml supports.
pub const MAX_DIMS: usize = 4;
/// The most tensors a file may have. Lookups walk the header, so model validation is
/// quadratic in this; 4096 covers 200 blocks of 20 tensors and bounds a hostile file's cost.
pub const MAX_TENSORS: u64 = 4096;
/// How deep arrays of arrays may nest in metadata.
const MAX_ARRAY_DEPTH: u32 = 4;

/// Where in the file a problem is: a byte offset, and the tensor index when it is a tensor's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum GgufError {
    /// The file ends inside `what`, which starts at byte `at`.
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Byte offset.
        at: usize,
    },
    /// The file does not start with `GGUF`.
    BadMagic,
    /// Only version 3 is read.
    UnsupportedVersion(u32),
    /// A key, string value or tensor name is not UTF-8.
    InvalidUtf8 {
        /// Byte offset of the string.
        at: usize,
    },
    /// A metadata value type id that GGUF does not define.
    UnknownValueType {
        /// The id.
        ty: u32,
        /// Byte offset.
        at: usize,
    },
    /// Arrays of arrays nest deeper than this reader allows.
    ArrayTooDeep {
        /// Byte offset.
        at: usize,
    },
    /// `general.alignment` is not a power of two between 1 and 65536, or not a u32.
    BadAlignment,
    /// A tensor problem.
    Tensor {
        /// Tensor index in the file.
        index: u64,
        /// What is wrong.
        problem: TensorProblem,
    },
    /// More tensors than [`MAX_TENSORS`].
    TooManyTensors(u64),
    /// A size computed from the file overflows.
    Overflow {
        /// Byte offset.
        at: usize,
    },
}

/// What is wrong with one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TensorProblem {
    /// 0 or more than 4 dimensions.
    DimCount(u32),
    /// A dimension is 0, or the element count overflows.
    BadDims,
    /// A ggml type this runtime does not read.
    UnsupportedType(u32),
    /// The first dimension is not a whole number of blocks of the type.
    NotWholeBlocks,
    /// The offset is not a multiple of the alignment.
    UnalignedOffset,
    /// The data run past the end of the file.
    OutOfBounds,
    /// The data's address is not aligned for its element type (align the buffer to 32 bytes).
    MisalignedBuffer,
}

impl core::fmt::Display for GgufError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GgufError::Truncated { what, at } => write!(f, "file truncated in {what} at byte {at}"),
            GgufError::BadMagic => write!(f, "not a GGUF file (bad magic)"),
            GgufError::UnsupportedVersion(v) => {
                write!(f, "GGUF version {v} is not supported (need 3)")
            }
            GgufError::InvalidUtf8 { at } => write!(f, "string at byte {at} is not UTF-8"),
            GgufError::UnknownValueType { ty, at } => {
                write!(f, "unknown metadata value type {ty} at byte {at}")
            }
            GgufError::ArrayTooDeep { at } => {
                write!(f, "metadata arrays nested too deep at byte {at}")
            }
            GgufError::BadAlignment => {
                write!(f, "general.alignment must be a u32 power of two ≤ 65536")
            }
            GgufError::Tensor { index, problem } => write!(f, "tensor #{index}: {problem}"),
            GgufError::TooManyTensors(n) => write!(f, "{n} tensors (at most {MAX_TENSORS})"),
            GgufError::Overflow { at } => write!(f, "size overflow at byte {at}"),
        }
    }
}

impl core::fmt::Display for TensorProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TensorProblem::DimCount(n) => write!(f, "{n} dimensions (1 to 4 allowed)"),
            TensorProblem::BadDims => write!(f, "a zero dimension or an element count overflow"),
            TensorProblem::UnsupportedType(t) => {
                write!(f, "ggml type {t} is not supported (F32, F16, Q8_0, Q4_0)")
            }
            TensorProblem::NotWholeBlocks => {
                write!(f, "rows are not a whole number of quant blocks")
            }
            TensorProblem::UnalignedOffset => {
                write!(f, "data offset is not a multiple of the alignment")
            }
            TensorProblem::OutOfBounds => write!(f, "data run past the end of the file"),
            TensorProblem::MisalignedBuffer => {
                write!(f, "data address misaligned for its type (align the buffer)")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GgufError {}

/// A bounds-checked little-endian cursor.
#[derive(Clone)]
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], GgufError> {
        let at = self.pos;
        let end = at.checked_add(n).ok_or(GgufError::Overflow { at })?;
        let s = self
            .bytes
            .get(at..end)
            .ok_or(GgufError::Truncated { what, at })?;
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &'static str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn len(&mut self, what: &'static str) -> Result<usize, GgufError> {
        let at = self.pos;
        usize::try_from(self.u64(what)?).map_err(|_| GgufError::Overflow { at })
    }
    fn string(&mut self, what: &'static str) -> Result<&'a str, GgufError> {
        let n = self.len(what)?;
        let at = self.pos;
        let s = self.take(n, what)?;
        core::str::from_utf8(s).map_err(|_| GgufError::InvalidUtf8 { at })
    }
}

/// A metadata value, borrowed from the file.
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum MetaValue<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(&'a str),
    Array(MetaArray<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> MetaValue<'a> {
    /// The value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            MetaValue::U8(_) => ValueType::U8,
            MetaValue::I8(_) => ValueType::I8,
            MetaValue::U16(_) => ValueType::U16,
            MetaValue::I16(_) => ValueType::I16,
            MetaValue::U32(_) => ValueType::U32,
            MetaValue::I32(_) => ValueType::I32,
            MetaValue::F32(_) => ValueType::F32,
            MetaValue::Bool(_) => ValueType::Bool,
            MetaValue::Str(_) => ValueType::String,
            MetaValue::Array(_) => ValueType::Array,
            MetaValue::U64(_) => ValueType::U64,
            MetaValue::I64(_) => ValueType::I64,
            MetaValue::F64(_) => ValueType::F64,
        }
    }

    /// The value as an unsigned integer, if it is one of the integer types and not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v as u64),
            MetaValue::U16(v) => Some(v as u64),
            MetaValue::U32(v) => Some(v as u64),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    /// The value as a float, if it is F32 or F64.
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            MetaValue::F32(v) => Some(v),
            MetaValue::F64(v) => Some(v as f32),
            _ => None,
        }
    }
    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&'a str> {
        match *self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
    /// The bool, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }
}

/// An array value: element type id, count and the raw (validated) element bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MetaArray<'a> {
    /// GGUF element type id.
    pub elem_type: u32,
    /// Number of elements.
    pub len: u64,
    /// The encoded elements.
    pub raw: &'a [u8],
}

impl<'a> MetaArray<'a> {
    /// The elements, decoded one by one.
    pub fn iter(&self) -> impl Iterator<Item = MetaValue<'a>> + 'a {
        let mut c = Cursor {
            bytes: self.raw,
            pos: 0,
        };
        let ty = self.elem_type;
        (0..self.len).map_while(move |_| read_value(&mut c, ty, 1).ok())
    }
}

/// Fixed byte size of a scalar value type id, `None` for strings, arrays and unknown ids.
fn scalar_size(ty: u32) -> Option<usize> {
    ValueType::from_id(ty)?.scalar_size()
}

fn read_value<'a>(c: &mut Cursor<'a>, ty: u32, depth: u32) -> Result<MetaValue<'a>, GgufError> {
    const W: &str = "metadata value";
    let Some(value_type) = ValueType::from_id(ty) else {
        return Err(GgufError::UnknownValueType {
            ty,
            at: c.pos.saturating_sub(4),
        });
    };
    Ok(match value_type {
        ValueType::U8 => MetaValue::U8(c.array::<1>(W)?[0]),
        ValueType::I8 => MetaValue::I8(c.array::<1>(W)?[0] as i8),
        ValueType::U16 => MetaValue::U16(u16::from_le_bytes(c.array(W)?)),
        ValueType::I16 => MetaValue::I16(i16::from_le_bytes(c.array(W)?)),
        ValueType::U32 => MetaValue::U32(u32::from_le_bytes(c.array(W)?)),
        ValueType::I32 => MetaValue::I32(i32::from_le_bytes(c.array(W)?)),
        ValueType::F32 => MetaValue::F32(f32::from_le_bytes(c.array(W)?)),
        ValueType::Bool => MetaValue::Bool(c.array::<1>(W)?[0] != 0),
        ValueType::String => MetaValue::Str(c.string(W)?),
        ValueType::Array => {
            let at = c.pos;
            if depth >= MAX_ARRAY_DEPTH {
                return Err(GgufError::ArrayTooDeep { at });
            }
            let elem_type = c.u32("array type")?;
            let len = c.u64("array length")?;
            let start = c.pos;
            match scalar_size(elem_type) {
                Some(size) => {
                    let n = usize::try_from(len)
                        .ok()
                        .and_then(|n| n.checked_mul(size))
                        .ok_or(GgufError::Overflow { at })?;
                    c.take(n, "array elements")?;
                }
                None if elem_type == ValueType::String.id()
                    || elem_type == ValueType::Array.id() =>
                {
                    // Each element takes at least 8 bytes, so the loop is bounded by the file.
                    for _ in 0..len {
                        read_value(c, elem_type, depth + 1)?;
                    }
                }
                None => return Err(GgufError::UnknownValueType { ty: elem_type, at }),
            }
            MetaValue::Array(MetaArray {
                elem_type,
                len,
                raw: c.bytes.get(start..c.pos).unwrap_or(&[]),
            })
        }
        ValueType::U64 => MetaValue::U64(u64::from_le_bytes(c.array(W)?)),
        ValueType::I64 => MetaValue::I64(i64::from_le_bytes(c.array(W)?)),
        ValueType::F64 => MetaValue::F64(f64::from_le_bytes(c.array(W)?)),
    })
}

/// One tensor of the file.
#[derive(Clone, Copy, Debug)]
pub struct TensorInfo<'a> {
    /// Name.
    pub name: &'a str,
    /// Number of dimensions (1..=4).
    pub n_dims: u32,
    /// Dimensions in ggml order (fastest first); unused ones are 1.
    pub dims: [u64; MAX_DIMS],
    /// Storage type.
    pub dtype: DType,
    /// Offset of the data from the data section.
    pub offset: u64,
    /// The data bytes.
    pub data: &'a [u8],
}

impl<'a> TensorInfo<'a> {
    /// Elements per row (ggml's `ne[0]`).
    pub fn cols(&self) -> usize {
        self.dims[0] as usize
    }
    /// Rows: the product of the other dimensions.
    pub fn rows(&self) -> usize {
        self.dims[1..].iter().product::<u64>() as usize
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.rows() * self.cols()
    }
    /// Whether the tensor is empty (never, after validation).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A typed 2-D view of the data (rows × cols) without copying.
    pub fn view(&self) -> Option<TensorView<'a>> {
        let data = match self.dtype {
            DType::F32 => TensorData::F32(bytemuck::try_cast_slice::<u8, f32>(self.data).ok()?),
            DType::F16 => TensorData::F16(bytemuck::try_cast_slice::<u8, f16>(self.data).ok()?),
            DType::Q8_0 => {
                TensorData::Q8_0(bytemuck::try_cast_slice::<u8, BlockQ8_0>(self.data).ok()?)
            }
            DType::Q4_0 => {
                TensorData::Q4_0(bytemuck::try_cast_slice::<u8, BlockQ4_0>(self.data).ok()?)
            }
        };
        TensorView::new(self.rows(), self.cols(), data)
    }
}

/// A validated GGUF v3 file borrowed from memory.
#[derive(Clone, Copy, Debug)]
pub struct GgufFile<'a> {
    bytes: &'a [u8],
    n_kv: u64,
    kv_start: usize,
    n_tensors: u64,
    tensors_start: usize,
    data_start: usize,
    alignment: usize,
}

impl<'a> GgufFile<'a> {
    /// Parses and validates `bytes`. For zero-copy F32/F16/quant views the buffer should be
    /// aligned to 32 bytes (or at least 4); a misaligned one is an error, not a copy.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, GgufError> {
        let mut c = Cursor { bytes, pos: 0 };
        if c.take(4, "magic")? != format::MAGIC {
            return Err(GgufError::BadMagic);
        }
        let version = c.u32("version")?;
        if version != format::VERSION {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = c.u64("tensor count")?;
        if n_tensors > MAX_TENSORS {
            return Err(GgufError::TooManyTensors(n_tensors));
        }
        let n_kv = c.u64("metadata count")?;
        let kv_start = c.pos;
        let mut alignment = super::names::ALIGNMENT as usize;
        for _ in 0..n_kv {
            let key = c.string("metadata key")?;
            let ty = c.u32("metadata type")?;
            let value = read_value(&mut c, ty, 0)?;
            if key == format::general::ALIGNMENT {
                alignment = match value {
                    MetaValue::U32(a) if a.is_power_of_two() && a <= 65536 => a as usize,
                    _ => return Err(GgufError::BadAlignment),
                };
            }
        }
        let tensors_start = c.pos;
        for index in 0..n_tensors {
            read_tensor_header(&mut c).map_err(|e| e.at(index))?;
        }
        let at = c.pos;
        let data_start = at
            .checked_next_multiple_of(alignment)
            .ok_or(GgufError::Overflow { at })?;
        let file = Self {
            bytes,
            n_kv,
            kv_start,
            n_tensors,
            tensors_start,
            data_start,
            alignment,
        };
        // Second pass: every tensor's data is in bounds, aligned and viewable.
        let mut c = Cursor {
            bytes,
            pos: tensors_start,
        };
        for index in 0..n_tensors {
            let h = read_tensor_header(&mut c).map_err(|problem| problem.at(index))?;
            file.locate(&h)
                .map_err(|problem| GgufError::Tensor { index, problem })?;
        }
        Ok(file)
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Data alignment.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Number of metadata entries.
    pub fn metadata_len(&self) -> u64 {
        self.n_kv
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> u64 {
        self.n_tensors
    }

    /// Every metadata entry in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&'a str, MetaValue<'a>)> + 'a {
        let mut c = Cursor {
            bytes: self.bytes,
            pos: self.kv_start,
        };
        (0..self.n_kv).map_while(move |_| {
            let key = c.string("metadata key").ok()?;
            let ty = c.u32("metadata type").ok()?;
            Some((key, read_value(&mut c, ty, 0).ok()?))
        })
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<MetaValue<'a>> {
        self.metadata().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The value of `{prefix}.{key}`, if present (no allocation).
    pub fn get_prefixed(&self, prefix: &str, key: &str) -> Option<MetaValue<'a>> {
        self.metadata()
            .find(|(k, _)| {
                k.strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix('.'))
                    .is_some_and(|r| r == key)
            })
            .map(|(_, v)| v)
    }

    /// Every tensor in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorInfo<'a>> + 'a {
        let file = *self;
        let mut c = Cursor {
            bytes: self.bytes,
            pos: self.tensors_start,
        };
        (0..self.n_tensors).map_while(move |_| file.info(&read_tensor_header(&mut c).ok()?))
    }

    /// The first tensor whose name bytes satisfy `pred`. Cheaper than filtering
    /// [`GgufFile::tensors`]: only the matching header is fully decoded, the others are skipped
    /// by their lengths (the file was validated by [`GgufFile::parse`]).
    pub fn find_tensor(&self, pred: impl Fn(&[u8]) -> bool) -> Option<TensorInfo<'a>> {
        let mut first = None;
        self.visit_tensors(
            |name| pred(name).then_some(0),
            |_, info| {
                first = Some(info);
                true
            },
        );
        first
    }

    /// One pass over the tensor headers in file order: each tensor whose name bytes `pick`
    /// maps to an index is decoded and given to `found` with that index, until `found` returns
    /// `true` or a header does not decode. As [`find_tensor`](Self::find_tensor),
    /// the others are skipped by their lengths, so that one pass finds several tensors.
    pub fn visit_tensors(
        &self,
        mut pick: impl FnMut(&[u8]) -> Option<usize>,
        mut found: impl FnMut(usize, TensorInfo<'a>) -> bool,
    ) {
        let mut c = Cursor {
            bytes: self.bytes,
            pos: self.tensors_start,
        };
        for _ in 0..self.n_tensors {
            let start = c.pos;
            let Ok(n) = c.len("tensor name") else { return };
            let Ok(name) = c.take(n, "tensor name") else {
                return;
            };
            let Ok(n_dims) = c.u32("tensor dimension count") else {
                return;
            };
            if let Some(i) = pick(name) {
                c.pos = start;
                let info = read_tensor_header(&mut c).ok().and_then(|h| self.info(&h));
                match info {
                    Some(info) if !found(i, info) => continue,
                    _ => return,
                }
            }
            // dims (8 bytes each), type (4) and offset (8).
            let Some(skip) = (n_dims as usize)
                .checked_mul(8)
                .and_then(|d| d.checked_add(12))
            else {
                return;
            };
            if c.take(skip, "tensor header").is_err() {
                return;
            }
        }
    }

    /// The tensor called `name`, if present.
    pub fn tensor(&self, name: &str) -> Option<TensorInfo<'a>> {
        self.tensors().find(|t| t.name == name)
    }

    /// The [`TensorInfo`] of a parsed header, with its data located.
    fn info(&self, h: &Header<'a>) -> Option<TensorInfo<'a>> {
        Some(TensorInfo {
            name: h.name,
            n_dims: h.n_dims,
            dims: h.dims,
            dtype: h.dtype,
            offset: h.offset,
            data: self.locate(h).ok()?,
        })
    }

    /// The data bytes of a tensor, checked.
    fn locate(&self, h: &Header<'a>) -> Result<&'a [u8], TensorProblem> {
        let offset = usize::try_from(h.offset).map_err(|_| TensorProblem::OutOfBounds)?;
        if offset % self.alignment != 0 {
            return Err(TensorProblem::UnalignedOffset);
        }
        let start = self
            .data_start
            .checked_add(offset)
            .ok_or(TensorProblem::OutOfBounds)?;
        let end = start
            .checked_add(h.bytes)
            .ok_or(TensorProblem::OutOfBounds)?;
        let data = self
            .bytes
            .get(start..end)
            .ok_or(TensorProblem::OutOfBounds)?;
        let align = match h.dtype {
            DType::F32 => 4,
            DType::F16 | DType::Q8_0 | DType::Q4_0 => 2,
        };
        if data.as_ptr().align_offset(align) != 0 {
            return Err(TensorProblem::MisalignedBuffer);
        }
        Ok(data)
    }
}

/// A parsed tensor header (before locating its data).
struct Header<'a> {
    name: &'a str,
    n_dims: u32,
    dims: [u64; MAX_DIMS],
    dtype: DType,
    offset: u64,
    bytes: usize,
}

/// A header problem: either a file-level error or a tensor one still missing its index.
enum HeaderError {
    File(GgufError),
    Tensor(TensorProblem),
}

impl HeaderError {
    fn at(self, index: u64) -> GgufError {
        match self {
            HeaderError::File(e) => e,
            HeaderError::Tensor(problem) => GgufError::Tensor { index, problem },
        }
    }
}

impl From<GgufError> for HeaderError {
    fn from(e: GgufError) -> Self {
        HeaderError::File(e)
    }
}

fn read_tensor_header<'a>(c: &mut Cursor<'a>) -> Result<Header<'a>, HeaderError> {
    let name = c.string("tensor name")?;
    let n_dims = c.u32("tensor dimension count")?;
    if n_dims == 0 || n_dims as usize > MAX_DIMS {
        return Err(HeaderError::Tensor(TensorProblem::DimCount(n_dims)));
    }
    let mut dims = [1u64; MAX_DIMS];
    for d in dims.iter_mut().take(n_dims as usize) {
        *d = c.u64("tensor dimension")?;
    }
    let ty = c.u32("tensor type")?;
    let offset = c.u64("tensor offset")?;
    let dtype =
        DType::from_ggml_id(ty).ok_or(HeaderError::Tensor(TensorProblem::UnsupportedType(ty)))?;
    let mut n: usize = 1;
    for &d in &dims {
        let d = usize::try_from(d).ok().filter(|&d| d > 0);
        n = d
            .and_then(|d| n.checked_mul(d))
            .ok_or(HeaderError::Tensor(TensorProblem::BadDims))?;
    }
    if dims[0] as usize % dtype.block_len() != 0 {
        return Err(HeaderError::Tensor(TensorProblem::NotWholeBlocks));
    }
    let bytes = dtype
        .bytes_for(n)
        .ok_or(HeaderError::Tensor(TensorProblem::BadDims))?;
    Ok(Header {
        name,
        n_dims,
        dims,
        dtype,
        offset,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small valid file: two metadata entries (one a string array) and two tensors.
    fn sample() -> ([u64; 64], usize) {
        let mut b: std::vec::Vec<u8> = std::vec::Vec::new();
        let s = |x: &str| [&(x.len() as u64).to_le_bytes()[..], x.as_bytes()].concat();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes()); // tensors
        b.extend_from_slice(&2u64.to_le_bytes()); // kv
        b.extend(s("general.alignment"));
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&32u32.to_le_bytes());
        b.extend(s("names"));
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes());
        b.extend(s("a"));
        b.extend(s("bc"));
        // tensor 0: f32 [3, 2]
        b.extend(s("w"));
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        b.extend_from_slice(&2u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        // tensor 1: q8_0 [32]
        b.extend(s("q"));
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&32u64.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&32u64.to_le_bytes());
        let data_start = b.len().next_multiple_of(32);
        b.resize(data_start, 0);
        for i in 0..6 {
            b.extend_from_slice(&(i as f32).to_le_bytes());
        }
        b.resize(data_start + 32, 0);
        b.extend_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        b.extend(0..32u8);
        // Copy into u64 storage so the buffer is 8-byte aligned.
        let n = b.len();
        let mut words = [0u64; 64];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..n].copy_from_slice(&b);
        (words, n)
    }

    #[test]
    fn reads_metadata_and_tensors_in_place() {
        let (words, n) = sample();
        let bytes = &bytemuck::cast_slice::<u64, u8>(&words)[..n];
        let f = GgufFile::parse(bytes).unwrap();
        assert_eq!(f.get("general.alignment"), Some(MetaValue::U32(32)));
        let Some(MetaValue::Array(a)) = f.get("names") else {
            panic!()
        };
        let names: [Option<&str>; 2] = {
            let mut it = a.iter();
            [
                it.next().and_then(|v| v.as_str()),
                it.next().and_then(|v| v.as_str()),
            ]
        };
        assert_eq!(names, [Some("a"), Some("bc")]);
        let w = f.tensor("w").unwrap();
        assert_eq!((w.rows(), w.cols()), (2, 3));
        let v = w.view().unwrap();
        assert_eq!(v.as_f32().unwrap(), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let p = v.as_f32().unwrap().as_ptr() as usize;
        let base = bytes.as_ptr() as usize;
        assert!(
            p >= base && p < base + n && (p - base) % 32 == 0,
            "zero-copy, aligned"
        );
        let q = f.tensor("q").unwrap().view().unwrap();
        let mut row = [0f32; 32];
        q.row_into(0, &mut row);
        assert_eq!(row[31], 15.5);
    }

    #[test]
    fn every_truncation_and_bit_flip_is_an_error_or_still_safe() {
        let (words, n) = sample();
        let bytes = &bytemuck::cast_slice::<u64, u8>(&words)[..n];
        for cut in 0..n {
            assert!(GgufFile::parse(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut w2 = words;
        for i in 0..n * 8 {
            let b = bytemuck::cast_slice_mut::<u64, u8>(&mut w2);
            b[i / 8] ^= 1 << (i % 8);
            if let Ok(f) = GgufFile::parse(&b[..n]) {
                // Whatever parses must be fully walkable.
                let _ = f.metadata().count();
                for t in f.tensors() {
                    let _ = t.view();
                }
            }
            let b = bytemuck::cast_slice_mut::<u64, u8>(&mut w2);
            b[i / 8] ^= 1 << (i % 8);
        }
    }

    #[test]
    fn hostile_headers_are_typed_errors() {
        let (words, n) = sample();
        let good = &bytemuck::cast_slice::<u64, u8>(&words)[..n];
        let mut w = words;
        let b = bytemuck::cast_slice_mut::<u64, u8>(&mut w);
        b[4] = 2;
        assert_eq!(
            GgufFile::parse(&b[..n]).unwrap_err(),
            GgufError::UnsupportedVersion(2)
        );
        let mut w = words;
        let b = bytemuck::cast_slice_mut::<u64, u8>(&mut w);
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(GgufFile::parse(&b[..n]).is_err());
        assert_eq!(GgufFile::parse(b"GGML").unwrap_err(), GgufError::BadMagic);
        // Misaligned buffer: the same bytes one byte further on.
        let mut shifted = [0u8; 600];
        shifted[1..1 + n].copy_from_slice(good);
        let off = (shifted.as_ptr() as usize + 1) % 4;
        if off != 0 {
            assert!(matches!(
                GgufFile::parse(&shifted[1..1 + n]),
                Err(GgufError::Tensor {
                    problem: TensorProblem::MisalignedBuffer,
                    ..
                })
            ));
        }
    }
}
