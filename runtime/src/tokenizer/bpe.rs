//! GPT-2 byte-level BPE over a vocabulary read in place from the model file.
//!
//! Encoding follows `tokenizers`' `BPE` model behind its `ByteLevel` pre-tokenizer: the text is
//! cut into [`pieces`](super::pretokenize::pieces); each piece starts as one symbol per byte,
//! then the adjacent pair whose merge comes first in `tokenizer.ggml.merges` is merged (the
//! leftmost of equal pairs) until no pair has a merge; each symbol is then the token whose
//! string spells its bytes. Special tokens in the text are not recognised: text is text, and a
//! caller adds the bos/eos ids itself.
//!
//! Nothing is copied out of the file and nothing is allocated, so lookups walk the arrays of
//! the file: finding a merge's rank reads the merges up to the match (all of them when the pair
//! has none), and finding a token's id reads the tokens up to the match. A piece of `n` bytes
//! costs about `3n` merge lookups and at most `n` token lookups. That is negligible for small
//! vocabularies; for GPT-2's 50 000 merges on a microcontroller it is milliseconds per piece.
//! A host that encodes much text uses `tokenizers` (the converter's `HostTokenizer`) instead.
//!
//! One difference from `tokenizers` on files it would not load: a pair listed twice has its
//! first rank here, its last there.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use super::byte_level::{spelled, token_bytes};
use super::pretokenize::pieces;
use super::{DecodeError, EncodeError};
use crate::gguf::format::ValueType;
use crate::gguf::MetaArray;

/// A GGUF string array, read in place: each element is a u64 length and that many bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Strings<'a> {
    raw: &'a [u8],
    len: u64,
}

impl<'a> Strings<'a> {
    /// The array's strings, if it is an array of strings.
    pub(super) fn new(array: MetaArray<'a>) -> Option<Self> {
        (array.elem_type == ValueType::String.id()).then_some(Self {
            raw: array.raw,
            len: array.len,
        })
    }

    /// No strings.
    pub(super) const EMPTY: Strings<'static> = Strings { raw: &[], len: 0 };

    /// The number of strings.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// The strings' bytes in order. The reader validated the array, so the walk does not check
    /// UTF-8 again; a malformed array just ends early.
    fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = self.raw;
        (0..self.len).map_while(move |_| {
            let (len, tail) = rest.split_first_chunk::<8>()?;
            let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
            let (s, tail) = tail.split_at_checked(len)?;
            rest = tail;
            Some(s)
        })
    }
}

/// A byte-level BPE vocabulary: tokens by id and merges by rank, in the file's bytes.
#[derive(Clone, Copy, Debug)]
pub struct Bpe<'a> {
    tokens: Strings<'a>,
    merges: Strings<'a>,
    bos: Option<u32>,
    eos: Option<u32>,
}

/// The ids written so far into a caller's buffer.
struct Output<'o> {
    ids: &'o mut [u32],
    len: usize,
}

impl Output<'_> {
    fn push(&mut self, id: u32) -> Result<(), EncodeError> {
        let capacity = self.ids.len();
        let slot = self
            .ids
            .get_mut(self.len)
            .ok_or(EncodeError::OutputFull { capacity })?;
        *slot = id;
        self.len += 1;
        Ok(())
    }
}

impl<'a> Bpe<'a> {
    /// A vocabulary of `tokens` (fewer than 2^32) and `merges` (fewer than 2^32) with the given
    /// special ids (below the token count). The caller checked these bounds.
    pub(super) fn new(
        tokens: Strings<'a>,
        merges: Strings<'a>,
        bos: Option<u32>,
        eos: Option<u32>,
    ) -> Self {
        Self {
            tokens,
            merges,
            bos,
            eos,
        }
    }

    /// The number of tokens.
    pub fn len(&self) -> u32 {
        u32::try_from(self.tokens.len()).unwrap_or(u32::MAX)
    }

    /// Whether the vocabulary has no tokens (never, for one from a model file).
    pub fn is_empty(&self) -> bool {
        self.tokens.len() == 0
    }

    /// The beginning-of-sequence token, if the file names one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, if the file names one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// The token's string as the file spells it (GPT-2's characters), `None` past the end.
    /// Reads the tokens before it.
    pub fn token_text(&self, id: u32) -> Option<&'a [u8]> {
        self.tokens.iter().nth(usize::try_from(id).ok()?)
    }

    /// The id of the first token that spells `bytes`. Reads the tokens up to it.
    pub fn token_id(&self, bytes: &[u8]) -> Option<u32> {
        let i = self
            .tokens
            .iter()
            .position(|t| t.iter().copied().eq(spelled(bytes)))?;
        u32::try_from(i).ok()
    }

    /// The rank of the first merge of `left` with `right` (lower merges first). Reads the
    /// merges up to it.
    pub fn merge_rank(&self, left: &[u8], right: &[u8]) -> Option<u32> {
        // A merge is "left right"; the spelled bytes never hold a space (it is `Ġ`), so the one
        // space separates the halves without ambiguity.
        let i = self.merges.iter().position(|m| {
            m.iter().copied().eq(spelled(left)
                .chain(core::iter::once(b' '))
                .chain(spelled(right)))
        })?;
        u32::try_from(i).ok()
    }

    /// Writes the bytes token `id` stands for ([`token_bytes`]) into `out` and returns their
    /// count.
    pub fn decode(&self, id: u32, out: &mut [u8]) -> Result<usize, DecodeError> {
        let text = self.token_text(id).ok_or(DecodeError::UnknownToken(id))?;
        // The reader checked that every string is UTF-8.
        let text = core::str::from_utf8(text).map_err(|_| DecodeError::UnknownToken(id))?;
        let needed = token_bytes(text).count();
        let capacity = out.len();
        let dst = out
            .get_mut(..needed)
            .ok_or(DecodeError::BufferTooSmall { needed, capacity })?;
        for (d, b) in dst.iter_mut().zip(token_bytes(text)) {
            *d = b;
        }
        Ok(needed)
    }

    /// Encodes `text` into `out` and returns the number of ids. `PIECE` is the longest piece,
    /// in bytes, that can be encoded (the working memory is two `PIECE`-long arrays on the
    /// stack); a longer one is [`EncodeError::PieceTooLong`].
    pub fn encode<const PIECE: usize>(
        &self,
        text: &[u8],
        out: &mut [u32],
    ) -> Result<usize, EncodeError> {
        let mut output = Output { ids: out, len: 0 };
        let mut at = 0;
        for piece in pieces(text) {
            self.encode_piece::<PIECE>(piece, at, &mut output)?;
            at += piece.len();
        }
        Ok(output.len)
    }

    /// BPE on one piece that starts at byte `at` of the text.
    fn encode_piece<const PIECE: usize>(
        &self,
        piece: &[u8],
        at: usize,
        out: &mut Output<'_>,
    ) -> Result<(), EncodeError> {
        // The live symbols are `start[..live]`: symbol k is `piece[start[k]..start[k + 1]]`
        // (the last one ends with the piece); `rank[k]` is the rank of merging k with k + 1.
        let mut start_buf = [0usize; PIECE];
        let mut rank_buf = [None::<u32>; PIECE];
        let too_long = EncodeError::PieceTooLong { at, limit: PIECE };
        let start = start_buf.get_mut(..piece.len()).ok_or(too_long)?;
        let rank = rank_buf.get_mut(..piece.len()).ok_or(too_long)?;
        for (k, s) in start.iter_mut().enumerate() {
            *s = k;
        }
        let mut live = piece.len();
        let symbol = |start: &[usize], live: usize, k: usize| -> &[u8] {
            let from = start.get(k).copied().unwrap_or(piece.len());
            let to = match start.get(k + 1) {
                Some(&to) if k + 1 < live => to,
                _ => piece.len(),
            };
            piece.get(from..to).unwrap_or(&[])
        };
        let pair_rank = |start: &[usize], live: usize, k: usize| {
            if k + 1 < live {
                self.merge_rank(symbol(start, live, k), symbol(start, live, k + 1))
            } else {
                None
            }
        };
        for (k, slot) in rank.iter_mut().enumerate() {
            *slot = pair_rank(start, live, k);
        }
        loop {
            let best = rank
                .iter()
                .take(live.saturating_sub(1))
                .enumerate()
                .filter_map(|(k, r)| Some(((*r)?, k)))
                .min();
            let Some((_, k)) = best else { break };
            // Symbol k + 1 joins symbol k: drop its start and rank.
            if let Some(tail) = start.get_mut(k + 1..live) {
                tail.rotate_left(1.min(tail.len()));
            }
            if let Some(tail) = rank.get_mut(k + 1..live) {
                tail.rotate_left(1.min(tail.len()));
            }
            live -= 1;
            let r = pair_rank(start, live, k);
            if let Some(slot) = rank.get_mut(k) {
                *slot = r;
            }
            if let Some(prev) = k.checked_sub(1) {
                let r = pair_rank(start, live, prev);
                if let Some(slot) = rank.get_mut(prev) {
                    *slot = r;
                }
            }
        }
        for k in 0..live {
            let bytes = symbol(start, live, k);
            let id = self.token_id(bytes).ok_or(EncodeError::NoToken {
                at: at + start.get(k).copied().unwrap_or(0),
                len: bytes.len(),
            })?;
            out.push(id)?;
        }
        Ok(())
    }
}
