//! The tokenizer a model file carries in its `tokenizer.ggml.*` keys: the byte-level vocabulary
//! of the shipped models, or a BPE vocabulary read from a checkpoint's `tokenizer.json`
//! (Hugging Face `tokenizers` format), written the way llama.cpp writes GPT-2-style BPE.

use crate::error::ImportError;
use crate::gguf_writer::Value;
use loglinear_runtime::gguf::format::tokenizer;
use loglinear_runtime::gguf::{names, GgufFile, MetaValue};
use serde_json::Value as Json;
use std::path::Path;

/// ggml token types (llama.cpp's `LLAMA_TOKEN_TYPE_*`).
pub mod token_type {
    /// An ordinary token.
    pub const NORMAL: i32 = 1;
    /// A special (control) token such as `<|endoftext|>`.
    pub const CONTROL: i32 = 3;
    /// A vocabulary slot the tokenizer does not use (the model's vocabulary is larger).
    pub const UNUSED: i32 = 5;
    /// A raw byte.
    pub const BYTE: i32 = 6;
}

/// A model's vocabulary.
#[derive(Clone, Debug, PartialEq)]
pub enum Vocabulary {
    /// Token id = byte value (256 tokens).
    Bytes,
    /// Byte-level BPE: tokens by id, their ggml types, and the merge rules in priority order.
    Bpe {
        /// Token strings, index = id.
        tokens: Vec<String>,
        /// ggml token type per token.
        token_types: Vec<i32>,
        /// Merges as `"left right"`.
        merges: Vec<String>,
    },
}

fn problem(path: &Path, what: impl Into<String>) -> ImportError {
    ImportError::Tokenizer {
        path: path.to_path_buf(),
        problem: what.into(),
    }
}

impl Vocabulary {
    /// Reads a `tokenizer.json` for a model with `vocab_size` embedding rows. Only BPE models are
    /// supported; ids must be unique and below `vocab_size` (unused ids are padded).
    pub fn from_tokenizer_json(
        path: &Path,
        text: &str,
        vocab_size: usize,
    ) -> Result<Self, ImportError> {
        let json: Json = serde_json::from_str(text).map_err(|e| problem(path, e.to_string()))?;
        let model = &json["model"];
        match model["type"].as_str() {
            Some("BPE") => {}
            other => {
                return Err(problem(
                    path,
                    format!("tokenizer model type {other:?} is not supported (only BPE)"),
                ))
            }
        }
        let vocab = model["vocab"]
            .as_object()
            .ok_or_else(|| problem(path, "`model.vocab` is missing or not an object"))?;
        let mut tokens: Vec<Option<String>> = vec![None; vocab_size];
        let mut types = vec![token_type::UNUSED; vocab_size];
        let mut place = |tok: &str, id: &Json, ty: i32| -> Result<(), ImportError> {
            let id = id
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| problem(path, format!("token {tok:?} has no valid id")))?;
            let slot = tokens.get_mut(id).ok_or_else(|| {
                problem(
                    path,
                    format!("token {tok:?} has id {id}, the model has {vocab_size} embeddings"),
                )
            })?;
            match slot {
                Some(prev) if prev != tok => {
                    return Err(problem(
                        path,
                        format!("id {id} is both {prev:?} and {tok:?}"),
                    ))
                }
                _ => *slot = Some(tok.to_string()),
            }
            types[id] = ty;
            Ok(())
        };
        for (tok, id) in vocab {
            place(tok, id, token_type::NORMAL)?;
        }
        for added in json["added_tokens"].as_array().into_iter().flatten() {
            let tok = added["content"]
                .as_str()
                .ok_or_else(|| problem(path, "an added token has no `content`"))?;
            let ty = if added["special"].as_bool() == Some(true) {
                token_type::CONTROL
            } else {
                token_type::NORMAL
            };
            place(tok, &added["id"], ty)?;
        }
        let merges = model["merges"]
            .as_array()
            .ok_or_else(|| problem(path, "`model.merges` is missing"))?
            .iter()
            .map(|m| match m {
                // Older files write "a b", newer ones ["a", "b"].
                Json::String(s) => Some(s.clone()),
                Json::Array(p) => match p.as_slice() {
                    [Json::String(a), Json::String(b)] => Some(format!("{a} {b}")),
                    _ => None,
                },
                _ => None,
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| problem(path, "a merge is neither \"a b\" nor [\"a\", \"b\"]"))?;
        let tokens = tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
            .collect();
        Ok(Vocabulary::Bpe {
            tokens,
            token_types: types,
            merges,
        })
    }

    /// The vocabulary of a GGUF file's `tokenizer.ggml.*` keys, if it has one we know.
    pub fn from_gguf(file: &GgufFile<'_>) -> Option<Self> {
        let strings = |key: &str| -> Option<Vec<String>> {
            match file.get(key)? {
                MetaValue::Array(a) => a.iter().map(|v| v.as_str().map(str::to_string)).collect(),
                _ => None,
            }
        };
        match file.get(tokenizer::MODEL)?.as_str()? {
            names::TOKENIZER_BYTES => Some(Vocabulary::Bytes),
            "gpt2" => {
                let token_types = match file.get(tokenizer::TOKEN_TYPE)? {
                    MetaValue::Array(a) => a
                        .iter()
                        .map(|v| match v {
                            MetaValue::I32(t) => Some(t),
                            _ => None,
                        })
                        .collect::<Option<Vec<_>>>()?,
                    _ => return None,
                };
                Some(Vocabulary::Bpe {
                    tokens: strings(tokenizer::TOKENS)?,
                    token_types,
                    merges: strings(tokenizer::MERGES).unwrap_or_default(),
                })
            }
            _ => None,
        }
    }

    /// The `tokenizer.ggml.*` metadata pairs.
    pub fn metadata(&self) -> Vec<(String, Value)> {
        let kv = |k: &str, v: Value| (k.to_string(), v);
        match self {
            Vocabulary::Bytes => vec![
                kv(tokenizer::MODEL, Value::string(names::TOKENIZER_BYTES)),
                kv(
                    tokenizer::TOKENS,
                    Value::strings((0..256).map(|b| format!("<0x{b:02X}>"))),
                ),
                kv(
                    tokenizer::TOKEN_TYPE,
                    Value::i32s(std::iter::repeat_n(token_type::BYTE, 256)),
                ),
            ],
            Vocabulary::Bpe {
                tokens,
                token_types,
                merges,
            } => vec![
                kv(tokenizer::MODEL, Value::string("gpt2")),
                kv(tokenizer::TOKENS, Value::strings(tokens.iter().cloned())),
                kv(
                    tokenizer::TOKEN_TYPE,
                    Value::i32s(token_types.iter().copied()),
                ),
                kv(tokenizer::MERGES, Value::strings(merges.iter().cloned())),
            ],
        }
    }

    /// Whether this is the byte-level vocabulary the runtime's tokenizer implements.
    pub fn is_bytes(&self) -> bool {
        matches!(self, Vocabulary::Bytes)
    }
}
