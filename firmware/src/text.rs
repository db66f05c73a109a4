//! Prompt text to token ids, and token ids to the bytes of `TOK` lines, by the model file's
//! tokenizer: bytes for a byte-level vocabulary, GPT-2 byte-level BPE (the runtime's
//! [`Bpe`](loglinear_runtime::tokenizer::Bpe), reading the vocabulary in place from flash)
//! when the build's model has one. build.rs sets `cfg(tokenizer_bpe)` from the model file, so
//! a byte-level image carries no BPE code.

use embedded_io::Write;
use loglinear_protocol::reply_tok;
#[cfg(not(tokenizer_bpe))]
use loglinear_runtime::gguf::format;
use loglinear_runtime::gguf::GgufFile;
#[cfg(not(tokenizer_bpe))]
use loglinear_runtime::tokenizer;
use loglinear_runtime::tokenizer::TokenizerError;
#[cfg(tokenizer_bpe)]
use loglinear_runtime::tokenizer::{pretokenize::pieces, Bpe, EncodeError, Tokenizer};

/// The longest pre-tokenization piece a BPE prompt may hold, in bytes: the encoder's working
/// memory is 12 bytes of stack per byte of piece. Longer runs (of spaces, say) are refused.
#[cfg(tokenizer_bpe)]
pub const MAX_PIECE: usize = 128;

/// The longest token, in bytes, that a `TOK` line carries.
#[cfg(tokenizer_bpe)]
const MAX_TOKEN_BYTES: usize = 64;

/// Why a prompt was not fed.
pub enum FeedError<E> {
    /// The prompt does not encode (a BPE piece over [`MAX_PIECE`], or bytes without a token).
    #[cfg(tokenizer_bpe)]
    Encode(EncodeError),
    /// A step of the model failed.
    Step(E),
}

/// The model's tokenizer.
pub struct Text<'a> {
    #[cfg(tokenizer_bpe)]
    bpe: Bpe<'a>,
    #[cfg(not(tokenizer_bpe))]
    _file: core::marker::PhantomData<&'a ()>,
}

impl<'a> Text<'a> {
    /// The tokenizer of `file`, which must be the kind this image was built for.
    pub fn new(file: &GgufFile<'a>) -> Result<Self, TokenizerError> {
        #[cfg(tokenizer_bpe)]
        {
            match Tokenizer::from_gguf(file)? {
                Tokenizer::Bpe(bpe) => Ok(Self { bpe }),
                Tokenizer::Bytes => Err(TokenizerError::Unsupported),
            }
        }
        #[cfg(not(tokenizer_bpe))]
        {
            // Read the one key only, so that a byte-level image links no BPE code.
            let kind = file.get(format::tokenizer::MODEL).and_then(|v| v.as_str());
            match kind {
                Some(format::tokenizer::MODEL_GPT2) => Err(TokenizerError::Unsupported),
                _ => Ok(Self {
                    _file: core::marker::PhantomData,
                }),
            }
        }
    }

    /// Feeds the tokens of `prompt` to `step`, in order.
    pub fn feed<E>(
        &self,
        prompt: &[u8],
        mut step: impl FnMut(u32) -> Result<(), E>,
    ) -> Result<(), FeedError<E>> {
        #[cfg(tokenizer_bpe)]
        {
            // Piece by piece, so that the ids of one piece at a time are on the stack: BPE
            // never merges across pieces, so this is the whole text's encoding. A first pass
            // only encodes, so that a prompt that does not encode leaves the session as it was.
            let mut ids = [0u32; MAX_PIECE];
            for piece in pieces(prompt) {
                self.bpe
                    .encode::<MAX_PIECE>(piece, &mut ids)
                    .map_err(FeedError::Encode)?;
            }
            for piece in pieces(prompt) {
                let n = self
                    .bpe
                    .encode::<MAX_PIECE>(piece, &mut ids)
                    .map_err(FeedError::Encode)?;
                for &id in ids.get(..n).unwrap_or(&[]) {
                    step(id).map_err(FeedError::Step)?;
                }
            }
            Ok(())
        }
        #[cfg(not(tokenizer_bpe))]
        {
            tokenizer::encode(prompt)
                .try_for_each(&mut step)
                .map_err(FeedError::Step)
        }
    }

    /// Writes the `TOK` line of token `id`.
    pub fn reply<W: Write>(&self, tx: &mut W, id: u32) {
        #[cfg(tokenizer_bpe)]
        {
            let mut bytes = [0u8; MAX_TOKEN_BYTES];
            // A token longer than a TOK line carries, or not in the vocabulary, is sent by id.
            let n = self.bpe.decode(id, &mut bytes).unwrap_or(0);
            reply_tok(tx, id, bytes.get(..n).unwrap_or(&[]));
        }
        #[cfg(not(tokenizer_bpe))]
        {
            match tokenizer::decode(id) {
                Some(b) => reply_tok(tx, id, &[b]),
                None => reply_tok(tx, id, &[]),
            }
        }
    }
}
