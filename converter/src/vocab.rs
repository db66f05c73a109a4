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
    /// GPT-2 byte-level BPE: tokens by id, their ggml types, the merge rules in priority order
    /// and the special ids.
    Bpe {
        /// Token strings, index = id.
        tokens: Vec<String>,
        /// ggml token type per token.
        token_types: Vec<i32>,
        /// Merges as `"left right"`.
        merges: Vec<String>,
        /// The beginning-of-sequence token, if the tokenizer names one.
        bos: Option<u32>,
        /// The end-of-sequence token, if the tokenizer names one.
        eos: Option<u32>,
    },
}

fn problem(path: &Path, what: impl Into<String>) -> ImportError {
    ImportError::Tokenizer {
        path: path.to_path_buf(),
        problem: what.into(),
    }
}

/// The id of the first token whose text is `content`.
fn token_id(path: &Path, tokens: &[String], content: &str) -> Result<u32, ImportError> {
    tokens
        .iter()
        .position(|t| t == content)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| {
            problem(
                path,
                format!("special token {content:?} is not in the vocabulary"),
            )
        })
}

/// The special tokens a `TemplateProcessing` post-processor (alone or in a `Sequence`) puts
/// before and after a single sequence: the bos and eos token texts, as llama.cpp reads them.
fn template_specials(post_processor: &Json) -> (Option<&str>, Option<&str>) {
    let processors = match post_processor["processors"].as_array() {
        Some(list) => list.iter().collect(),
        None => vec![post_processor],
    };
    fn special(item: Option<&Json>) -> Option<&str> {
        item?["SpecialToken"]["id"].as_str()
    }
    for p in processors {
        if p["type"].as_str() != Some("TemplateProcessing") {
            continue;
        }
        let single = p["single"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        if single.len() > 1 {
            return (special(single.first()), special(single.last()));
        }
    }
    (None, None)
}

/// Refuses a `tokenizer.json` whose text processing differs from GPT-2's byte-level BPE, which
/// is all the runtime's encoder does: it would give other tokens than the model was trained on.
fn require_gpt2_byte_level(path: &Path, json: &Json) -> Result<(), ImportError> {
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
    let unsupported = |what: &str| {
        problem(
            path,
            format!("{what} is not supported (only GPT-2 byte-level BPE)"),
        )
    };
    for flag in ["byte_fallback", "ignore_merges"] {
        if model[flag].as_bool() == Some(true) {
            return Err(unsupported(&format!("`model.{flag}: true`")));
        }
    }
    for affix in ["continuing_subword_prefix", "end_of_word_suffix"] {
        if model[affix].as_str().is_some_and(|s| !s.is_empty()) {
            return Err(unsupported(&format!("`model.{affix}`")));
        }
    }
    if !json["normalizer"].is_null() {
        return Err(unsupported("a normalizer"));
    }
    let pre = &json["pre_tokenizer"];
    let gpt2 = pre["type"].as_str() == Some("ByteLevel")
        && pre["add_prefix_space"].as_bool() != Some(true)
        && pre["use_regex"].as_bool() != Some(false);
    if !gpt2 {
        return Err(unsupported(&format!(
            "pre_tokenizer {pre} (GPT-2's is ByteLevel without add_prefix_space)"
        )));
    }
    Ok(())
}

/// The token text a special-token entry names: `"<s>"` or `{"content": "<s>", ...}`.
fn special_content(entry: &Json) -> Option<&str> {
    entry.as_str().or_else(|| entry["content"].as_str())
}

impl Vocabulary {
    /// Reads a `tokenizer.json` for a model with `vocab_size` embedding rows. Only GPT-2
    /// byte-level BPE is supported; ids must be unique and below `vocab_size` (unused ids are
    /// padded). The bos/eos tokens are those a `TemplateProcessing` post-processor puts first and
    /// last (`tokenizer_config.json` overrides them, [`Vocabulary::apply_tokenizer_config`]).
    pub fn from_tokenizer_json(
        path: &Path,
        text: &str,
        vocab_size: usize,
    ) -> Result<Self, ImportError> {
        let json: Json = serde_json::from_str(text).map_err(|e| problem(path, e.to_string()))?;
        require_gpt2_byte_level(path, &json)?;
        let model = &json["model"];
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
        let tokens: Vec<String> = tokens
            .into_iter()
            .enumerate()
            .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
            .collect();
        let (bos, eos) = template_specials(&json["post_processor"]);
        let id = |content: Option<&str>| -> Result<Option<u32>, ImportError> {
            content.map(|c| token_id(path, &tokens, c)).transpose()
        };
        let (bos, eos) = (id(bos)?, id(eos)?);
        Ok(Vocabulary::Bpe {
            tokens,
            token_types: types,
            merges,
            bos,
            eos,
        })
    }

    /// Takes the bos/eos tokens that a `tokenizer_config.json` names (`bos_token`,
    /// `eos_token`: a string or `{"content": ...}`), as llama.cpp's converter does; a field that
    /// is absent or null keeps the `tokenizer.json` choice. No-op for the byte vocabulary.
    pub fn apply_tokenizer_config(&mut self, path: &Path, text: &str) -> Result<(), ImportError> {
        let Vocabulary::Bpe {
            tokens, bos, eos, ..
        } = self
        else {
            return Ok(());
        };
        let json: Json = serde_json::from_str(text).map_err(|e| problem(path, e.to_string()))?;
        for (field, slot) in [("bos_token", bos), ("eos_token", eos)] {
            let entry = &json[field];
            if entry.is_null() {
                continue;
            }
            let content = special_content(entry).ok_or_else(|| {
                problem(
                    path,
                    format!("`{field}` is neither a string nor {{\"content\": ...}}"),
                )
            })?;
            *slot = Some(token_id(path, tokens, content)?);
        }
        Ok(())
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
            tokenizer::MODEL_GPT2 => {
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
                let tokens = strings(tokenizer::TOKENS)?;
                let special = |key: &str| {
                    let id = u32::try_from(file.get(key)?.as_u64()?).ok()?;
                    (usize::try_from(id).ok()? < tokens.len()).then_some(id)
                };
                Some(Vocabulary::Bpe {
                    token_types,
                    merges: strings(tokenizer::MERGES).unwrap_or_default(),
                    bos: special(tokenizer::BOS_ID),
                    eos: special(tokenizer::EOS_ID),
                    tokens,
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
                bos,
                eos,
            } => {
                let mut pairs = vec![
                    kv(tokenizer::MODEL, Value::string(tokenizer::MODEL_GPT2)),
                    kv(tokenizer::TOKENS, Value::strings(tokens.iter().cloned())),
                    kv(
                        tokenizer::TOKEN_TYPE,
                        Value::i32s(token_types.iter().copied()),
                    ),
                    kv(tokenizer::MERGES, Value::strings(merges.iter().cloned())),
                ];
                for (key, id) in [(tokenizer::BOS_ID, bos), (tokenizer::EOS_ID, eos)] {
                    if let Some(id) = id {
                        pairs.push(kv(key, Value::U32(*id)));
                    }
                }
                pairs
            }
        }
    }

    /// Whether this is the byte-level vocabulary the runtime's tokenizer implements.
    pub fn is_bytes(&self) -> bool {
        matches!(self, Vocabulary::Bytes)
    }
}
