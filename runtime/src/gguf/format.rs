//! The GGUF v3 container as ggml defines it: the magic, the version, ggml's limits, the
//! metadata value types with their ids, and the `general.*` and `tokenizer.ggml.*` keys. The
//! reader here and the converter's writer both use these definitions, so they cannot disagree.
//! (The loglinear keys and tensor names are in [`super::names`].)

/// `GGUF` in file order.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// The only version read and written.
pub const VERSION: u32 = 3;
/// ggml's `GGML_MAX_NAME`: tensor names must be shorter than this.
pub const MAX_TENSOR_NAME: usize = 64;

/// The `general.*` keys.
pub mod general {
    /// string: the model kind (`names::arch_name`).
    pub const ARCHITECTURE: &str = "general.architecture";
    /// string: the model's name.
    pub const NAME: &str = "general.name";
    /// u32: the alignment of tensor data, a power of two.
    pub const ALIGNMENT: &str = "general.alignment";
}

/// The `tokenizer.ggml.*` keys.
pub mod tokenizer {
    /// string: the tokenizer kind (`bytes`, `gpt2`).
    pub const MODEL: &str = "tokenizer.ggml.model";
    /// string array: the token texts.
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    /// i32 array: ggml's token types.
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    /// string array: the BPE merges, `"left right"`, first merged first.
    pub const MERGES: &str = "tokenizer.ggml.merges";
    /// u32: the beginning-of-sequence token id.
    pub const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
    /// u32: the end-of-sequence token id.
    pub const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
    /// The `MODEL` value of GPT-2-style byte-level BPE.
    pub const MODEL_GPT2: &str = "gpt2";
}

/// GGUF metadata value types (`gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[allow(missing_docs)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    /// Every type, in id order.
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The id in the file.
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// The type of an id, `None` for ids GGUF does not define.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.get(usize::try_from(id).ok()?).copied()
    }

    /// The type's name as gguf-py prints it (`u32`, `string`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    /// The fixed byte size of a scalar type, `None` for strings and arrays.
    pub const fn scalar_size(self) -> Option<usize> {
        Some(match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 => 8,
            ValueType::String | ValueType::Array => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids of ggml's `gguf_type` enum (ggml/include/gguf.h).
    #[test]
    fn value_type_ids_are_ggmls() {
        let ids: [(ValueType, u32); 13] = [
            (ValueType::U8, 0),
            (ValueType::I8, 1),
            (ValueType::U16, 2),
            (ValueType::I16, 3),
            (ValueType::U32, 4),
            (ValueType::I32, 5),
            (ValueType::F32, 6),
            (ValueType::Bool, 7),
            (ValueType::String, 8),
            (ValueType::Array, 9),
            (ValueType::U64, 10),
            (ValueType::I64, 11),
            (ValueType::F64, 12),
        ];
        for (ty, id) in ids {
            assert_eq!(ty.id(), id);
            assert_eq!(ValueType::from_id(id), Some(ty));
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(ValueType::from_id(u32::MAX), None);
    }
}
