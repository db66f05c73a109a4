//! The tokenizer a model file carries in its `tokenizer.ggml.*` keys:
//!
//! * byte-level (`tokenizer.ggml.model` = `bytes`): token id = byte value, the vocabulary of
//!   256 of the shipped models ([`encode`], [`decode`]);
//! * GPT-2 byte-level BPE (`gpt2`, as llama.cpp writes it): [`Bpe`], which reads the token and
//!   merge strings in place from the file.
//!
//! [`Tokenizer::from_gguf`] picks one. Neither allocates: encoding writes ids into the caller's
//! buffer and decoding writes bytes into the caller's buffer, and a full buffer is an error.

#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod bpe;
pub mod byte_level;
pub mod pretokenize;

pub use bpe::Bpe;

use crate::gguf::format::tokenizer as key;
use crate::gguf::names::TOKENIZER_BYTES;
use crate::gguf::{GgufFile, MetaValue};
use bpe::Strings;

/// Encodes text as its bytes (the byte-level vocabulary).
pub fn encode(text: &[u8]) -> impl Iterator<Item = u32> + '_ {
    text.iter().map(|&b| b as u32)
}

/// The byte a token stands for in the byte-level vocabulary, or `None` if the id is not a byte.
pub fn decode(token: u32) -> Option<u8> {
    u8::try_from(token).ok()
}

/// Why a model file's tokenizer cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum TokenizerError {
    /// `tokenizer.ggml.model` is missing.
    Missing,
    /// `tokenizer.ggml.model` names a tokenizer this runtime does not implement.
    Unsupported,
    /// A `tokenizer.ggml.*` key has the wrong type or an unusable value.
    BadValue(&'static str),
}

/// Why text could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum EncodeError {
    /// The output buffer is full.
    OutputFull {
        /// The buffer's length in ids.
        capacity: usize,
    },
    /// A pre-tokenization piece is longer than the encoder's working memory.
    PieceTooLong {
        /// Byte offset of the piece in the text.
        at: usize,
        /// The longest piece, in bytes.
        limit: usize,
    },
    /// The vocabulary has no token for bytes the merges left as one symbol (a byte without its
    /// token, or a merge whose result is not a token).
    NoToken {
        /// Byte offset in the text.
        at: usize,
        /// Length in bytes.
        len: usize,
    },
}

/// Why a token could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DecodeError {
    /// The id is not in the vocabulary.
    UnknownToken(u32),
    /// The output buffer is shorter than the token's bytes.
    BufferTooSmall {
        /// The token's length in bytes.
        needed: usize,
        /// The buffer's length.
        capacity: usize,
    },
}

impl core::fmt::Display for TokenizerError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TokenizerError::Missing => write!(f, "the file has no {}", key::MODEL),
            TokenizerError::Unsupported => write!(
                f,
                "{} names a tokenizer this runtime does not implement ({TOKENIZER_BYTES}, {})",
                key::MODEL,
                key::MODEL_GPT2
            ),
            TokenizerError::BadValue(k) => write!(f, "metadata key {k} has a wrong type or value"),
        }
    }
}

impl core::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EncodeError::OutputFull { capacity } => {
                write!(f, "the text needs more than {capacity} tokens")
            }
            EncodeError::PieceTooLong { at, limit } => write!(
                f,
                "the word at byte {at} is longer than the encoder's {limit} bytes"
            ),
            EncodeError::NoToken { at, len } => write!(
                f,
                "the vocabulary has no token for the {len} bytes at byte {at}"
            ),
        }
    }
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DecodeError::UnknownToken(id) => write!(f, "token {id} is not in the vocabulary"),
            DecodeError::BufferTooSmall { needed, capacity } => {
                write!(f, "token needs {needed} bytes, the buffer has {capacity}")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TokenizerError {}
#[cfg(feature = "std")]
impl std::error::Error for EncodeError {}
#[cfg(feature = "std")]
impl std::error::Error for DecodeError {}

/// A model file's tokenizer.
#[derive(Clone, Copy, Debug)]
pub enum Tokenizer<'a> {
    /// Token id = byte value (256 tokens).
    Bytes,
    /// GPT-2 byte-level BPE.
    Bpe(Bpe<'a>),
}

/// The string array under `k`: `None` when absent, an error when it is something else or has
/// 2^32 strings or more (ids and ranks are u32).
fn strings<'a>(
    file: &GgufFile<'a>,
    k: &'static str,
) -> Result<Option<Strings<'a>>, TokenizerError> {
    let Some(value) = file.get(k) else {
        return Ok(None);
    };
    match value {
        MetaValue::Array(a) if a.len <= u64::from(u32::MAX) => {
            Strings::new(a).map(Some).ok_or(TokenizerError::BadValue(k))
        }
        _ => Err(TokenizerError::BadValue(k)),
    }
}

/// The token id under `k`: `None` when absent, an error when it is not a u32 below `n_tokens`.
fn token_id(
    file: &GgufFile<'_>,
    k: &'static str,
    n_tokens: u64,
) -> Result<Option<u32>, TokenizerError> {
    match file.get(k) {
        None => Ok(None),
        Some(MetaValue::U32(id)) if u64::from(id) < n_tokens => Ok(Some(id)),
        Some(_) => Err(TokenizerError::BadValue(k)),
    }
}

impl<'a> Tokenizer<'a> {
    /// The tokenizer that `file`'s `tokenizer.ggml.*` keys describe. The arrays stay in the
    /// file; this checks their types and sizes, not every string.
    pub fn from_gguf(file: &GgufFile<'a>) -> Result<Self, TokenizerError> {
        let model = file.get(key::MODEL).ok_or(TokenizerError::Missing)?;
        match model.as_str().ok_or(TokenizerError::BadValue(key::MODEL))? {
            TOKENIZER_BYTES => Ok(Tokenizer::Bytes),
            key::MODEL_GPT2 => {
                let tokens = strings(file, key::TOKENS)?
                    .filter(|t| t.len() > 0)
                    .ok_or(TokenizerError::BadValue(key::TOKENS))?;
                let merges = strings(file, key::MERGES)?.unwrap_or(Strings::EMPTY);
                let bos = token_id(file, key::BOS_ID, tokens.len())?;
                let eos = token_id(file, key::EOS_ID, tokens.len())?;
                Ok(Tokenizer::Bpe(Bpe::new(tokens, merges, bos, eos)))
            }
            _ => Err(TokenizerError::Unsupported),
        }
    }

    /// The number of tokens.
    pub fn vocab_len(&self) -> u32 {
        match self {
            Tokenizer::Bytes => 256,
            Tokenizer::Bpe(b) => b.len(),
        }
    }

    /// The beginning-of-sequence token, if the file names one.
    pub fn bos(&self) -> Option<u32> {
        match self {
            Tokenizer::Bytes => None,
            Tokenizer::Bpe(b) => b.bos(),
        }
    }

    /// The end-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<u32> {
        match self {
            Tokenizer::Bytes => None,
            Tokenizer::Bpe(b) => b.eos(),
        }
    }

    /// Encodes `text` into `out` and returns the number of ids. `PIECE` bounds the working
    /// memory of BPE (see [`Bpe::encode`]); the byte-level tokenizer needs none.
    pub fn encode<const PIECE: usize>(
        &self,
        text: &[u8],
        out: &mut [u32],
    ) -> Result<usize, EncodeError> {
        match self {
            Tokenizer::Bytes => {
                let capacity = out.len();
                let dst = out
                    .get_mut(..text.len())
                    .ok_or(EncodeError::OutputFull { capacity })?;
                for (d, id) in dst.iter_mut().zip(encode(text)) {
                    *d = id;
                }
                Ok(text.len())
            }
            Tokenizer::Bpe(b) => b.encode::<PIECE>(text, out),
        }
    }

    /// Writes the bytes token `id` stands for into `out` and returns their count.
    pub fn decode(&self, id: u32, out: &mut [u8]) -> Result<usize, DecodeError> {
        match self {
            Tokenizer::Bytes => {
                let b = decode(id).ok_or(DecodeError::UnknownToken(id))?;
                let dst = out.first_mut().ok_or(DecodeError::BufferTooSmall {
                    needed: 1,
                    capacity: 0,
                })?;
                *dst = b;
                Ok(1)
            }
            Tokenizer::Bpe(b) => b.decode(id, out),
        }
    }
}

#[cfg(test)]
mod tests;
