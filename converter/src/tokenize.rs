//! Host-side tokenization of a model's [`Vocabulary`]: byte-level models map bytes to ids, BPE
//! models encode with Hugging Face `tokenizers` (a BPE model from the file's tokens and merges
//! behind GPT-2's `ByteLevel` pre-tokenizer), which gives the same ids as the runtime's `no_std`
//! encoder, and faster, since it hashes pairs where the runtime walks the file.
//!
//! Decoding maps each token through the runtime's byte table instead of `tokenizers`' decoder,
//! which returns a `String`: a token can end inside a UTF-8 character, and a streaming caller
//! needs its bytes, not a replacement character.

use crate::vocab::Vocabulary;
use loglinear_runtime::tokenizer::byte_level::token_bytes;
use std::collections::HashMap;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::Tokenizer;

/// Why a vocabulary could not be used to encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// `tokenizers` refused the vocabulary (for example a merge of tokens it does not have).
    #[error("the BPE vocabulary is unusable: {0}")]
    Build(String),
    /// `tokenizers` failed to encode.
    #[error("encoding failed: {0}")]
    Encode(String),
    /// Text for a BPE vocabulary that is not UTF-8.
    #[error("the text is not UTF-8 (byte {at}), and this model's BPE vocabulary encodes text")]
    NotUtf8 {
        /// Offset of the first byte that is not UTF-8.
        at: usize,
    },
    /// An id the vocabulary does not have.
    #[error("token {id} is not in the vocabulary of {len} tokens")]
    UnknownToken {
        /// The id.
        id: u32,
        /// The vocabulary size.
        len: usize,
    },
}

/// A model's tokenizer on the host.
pub struct HostTokenizer {
    kind: Kind,
}

enum Kind {
    /// Token id = byte value.
    Bytes,
    /// GPT-2 byte-level BPE.
    Bpe {
        tokenizer: Box<Tokenizer>,
        /// Token texts by id, for decoding.
        tokens: Vec<String>,
        /// Ids of the padding rows of the embedding (token type UNUSED): no text decodes to
        /// them, so generation never picks them.
        unused: Vec<u32>,
        bos: Option<u32>,
        eos: Option<u32>,
    },
}

impl HostTokenizer {
    /// The tokenizer of `vocabulary`. Special tokens in the text are not recognised, as in
    /// the runtime: text is text, and a caller adds the bos/eos ids itself.
    pub fn new(vocabulary: &Vocabulary) -> Result<Self, TokenizeError> {
        let kind = match vocabulary {
            Vocabulary::Bytes => Kind::Bytes,
            Vocabulary::Bpe {
                tokens,
                token_types,
                merges,
                bos,
                eos,
            } => {
                // The first of equal token strings wins, as in the runtime's lookup.
                let mut ids = HashMap::new();
                for (id, token) in (0u32..).zip(tokens) {
                    ids.entry(token.clone()).or_insert(id);
                }
                let vocab: Vocab = ids.into_iter().collect();
                let merges = merges
                    .iter()
                    .map(|m| {
                        m.split_once(' ')
                            .map(|(a, b)| (a.to_string(), b.to_string()))
                            .ok_or_else(|| {
                                TokenizeError::Build(format!("merge {m:?} is not \"left right\""))
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let bpe = BPE::builder()
                    .vocab_and_merges(vocab, merges)
                    .build()
                    .map_err(|e| TokenizeError::Build(e.to_string()))?;
                let mut tokenizer = Tokenizer::new(bpe);
                tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
                tokenizer.with_decoder(Some(ByteLevel::new(false, true, true)));
                Kind::Bpe {
                    tokenizer: Box::new(tokenizer),
                    tokens: tokens.clone(),
                    unused: (0u32..)
                        .zip(token_types)
                        .filter(|&(_, &t)| t == crate::vocab::token_type::UNUSED)
                        .map(|(id, _)| id)
                        .collect(),
                    bos: *bos,
                    eos: *eos,
                }
            }
        };
        Ok(Self { kind })
    }

    /// The `tokenizers` tokenizer of a BPE vocabulary (with the `ByteLevel` decoder), for
    /// callers that want more of its API (offsets, decoding to a `String`); `None` for bytes.
    pub fn bpe(&self) -> Option<&Tokenizer> {
        match &self.kind {
            Kind::Bytes => None,
            Kind::Bpe { tokenizer, .. } => Some(tokenizer),
        }
    }

    /// Ids that are padding, not tokens (token type UNUSED); empty for bytes.
    pub fn unused_ids(&self) -> &[u32] {
        match &self.kind {
            Kind::Bytes => &[],
            Kind::Bpe { unused, .. } => unused,
        }
    }

    /// The number of tokens.
    pub fn vocab_len(&self) -> usize {
        match &self.kind {
            Kind::Bytes => 256,
            Kind::Bpe { tokens, .. } => tokens.len(),
        }
    }

    /// The beginning-of-sequence token, if the vocabulary names one.
    pub fn bos(&self) -> Option<u32> {
        match &self.kind {
            Kind::Bytes => None,
            Kind::Bpe { bos, .. } => *bos,
        }
    }

    /// The end-of-sequence token, if the vocabulary names one.
    pub fn eos(&self) -> Option<u32> {
        match &self.kind {
            Kind::Bytes => None,
            Kind::Bpe { eos, .. } => *eos,
        }
    }

    /// The ids of `text`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizeError> {
        match &self.kind {
            Kind::Bytes => Ok(text.bytes().map(u32::from).collect()),
            Kind::Bpe { tokenizer, .. } => tokenizer
                .encode_fast(text, false)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| TokenizeError::Encode(e.to_string())),
        }
    }

    /// The ids of `bytes`: the bytes themselves for a byte-level vocabulary, the encoding of
    /// their text for BPE (which must then be UTF-8).
    pub fn encode_bytes(&self, bytes: &[u8]) -> Result<Vec<u32>, TokenizeError> {
        match &self.kind {
            Kind::Bytes => Ok(bytes.iter().map(|&b| u32::from(b)).collect()),
            Kind::Bpe { .. } => {
                let text = std::str::from_utf8(bytes).map_err(|e| TokenizeError::NotUtf8 {
                    at: e.valid_up_to(),
                })?;
                self.encode(text)
            }
        }
    }

    /// The bytes of `ids`, token by token (a token may hold part of a UTF-8 character).
    pub fn decode(&self, ids: &[u32]) -> Result<Vec<u8>, TokenizeError> {
        let mut bytes = Vec::new();
        for &id in ids {
            let unknown = TokenizeError::UnknownToken {
                id,
                len: self.vocab_len(),
            };
            match &self.kind {
                Kind::Bytes => bytes.push(u8::try_from(id).map_err(|_| unknown)?),
                Kind::Bpe { tokens, .. } => {
                    let text = usize::try_from(id)
                        .ok()
                        .and_then(|i| tokens.get(i))
                        .ok_or(unknown)?;
                    bytes.extend(token_bytes(text));
                }
            }
        }
        Ok(bytes)
    }
}
