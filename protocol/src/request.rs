//! Parameters of the `GEN` and `RESET` commands (`docs/serial-protocol.md`): `key=value` words,
//! then for `GEN` an optional `prompt=` that takes the rest of the line.
//!
//! ```text
//! n=32 temperature=0.8 top_k=0 top_p=1 seed=0 prompt=ROMEO:\n
//! ```
//!
//! Every key is optional (missing ones keep [`GenParams::default`]). The prompt is escaped text
//! (`\n`, `\t`, `\r`, `\\`, `\xHH`), unescaped in place. Unknown keys, bad numbers, unknown
//! escapes and an empty prompt are errors, never guesses. Nothing here can panic: no indexing,
//! no `unwrap`.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use core::fmt;

use crate::decimal;

/// Default prompt on a fresh session (the host CLI's default, `ROMEO:\n`).
pub const DEFAULT_PROMPT: &[u8] = b"ROMEO:\n";
/// At most this many tokens per `GEN`.
pub const MAX_TOKENS: usize = 1024;

/// One `GEN` command's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenParams<'a> {
    /// Tokens to generate.
    pub tokens: usize,
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = no top-k cut.
    pub top_k: usize,
    /// 1 = no nucleus cut.
    pub top_p: f32,
    /// Sampler seed.
    pub seed: u64,
    /// Prompt bytes (unescaped); `None`: no new input.
    pub prompt: Option<&'a [u8]>,
}

impl Default for GenParams<'_> {
    fn default() -> Self {
        Self {
            tokens: 32,
            temperature: 0.8,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            prompt: None,
        }
    }
}

/// Why a parameter list was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamError<'a> {
    /// A word is not `key=value`.
    NotKeyValue(&'a str),
    /// A key this command does not know.
    UnknownKey(&'a str),
    /// A value that does not parse or is out of range, for this key.
    BadValue(&'static str),
    /// The prompt is empty.
    EmptyPrompt,
    /// A backslash escape in the prompt that is not `\n`, `\t`, `\r`, `\\` or `\xHH`.
    BadEscape,
}

impl fmt::Display for ParamError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::NotKeyValue(w) => write!(f, "expected key=value, got {w}"),
            ParamError::UnknownKey(k) => write!(f, "unknown key {k}"),
            ParamError::BadValue(k) => write!(f, "bad value for {k}"),
            ParamError::EmptyPrompt => write!(f, "the prompt must not be empty"),
            ParamError::BadEscape => write!(f, "bad escape in the prompt"),
        }
    }
}

/// Parses the parameters of `GEN` (the line after the command word). The prompt is unescaped
/// in place, so the result borrows `args`.
pub fn parse_gen(args: &mut [u8]) -> Result<GenParams<'_>, ParamError<'_>> {
    let mut req = GenParams::default();
    // Split off `prompt=...` first: it may contain spaces.
    let (params, prompt) = split_prompt(args);
    let params = core::str::from_utf8(params).map_err(|_| ParamError::BadValue("prompt"))?;
    for word in params.split_ascii_whitespace() {
        let (k, v) = word.split_once('=').ok_or(ParamError::NotKeyValue(word))?;
        match k {
            "n" => {
                req.tokens = v
                    .parse()
                    .ok()
                    .filter(|n| *n <= MAX_TOKENS)
                    .ok_or(ParamError::BadValue("n"))?
            }
            "temperature" => {
                req.temperature =
                    decimal::parse_f32(v).ok_or(ParamError::BadValue("temperature"))?
            }
            "top_k" => req.top_k = v.parse().map_err(|_| ParamError::BadValue("top_k"))?,
            "top_p" => {
                req.top_p = decimal::parse_f32(v)
                    .filter(|p| *p > 0.0 && *p <= 1.0)
                    .ok_or(ParamError::BadValue("top_p"))?
            }
            "seed" => req.seed = v.parse().map_err(|_| ParamError::BadValue("seed"))?,
            _ => return Err(ParamError::UnknownKey(k)),
        }
    }
    if let Some(p) = prompt {
        let n = unescape(p).ok_or(ParamError::BadEscape)?;
        match p.get(..n) {
            Some(text) if !text.is_empty() => req.prompt = Some(text),
            _ => return Err(ParamError::EmptyPrompt),
        }
    }
    Ok(req)
}

/// Parses the parameters of `RESET`: an optional `levels=L`, at most `max_levels`. Returns the
/// requested levels (`None`: keep the current ones).
pub fn parse_reset(args: &str, max_levels: usize) -> Result<Option<usize>, ParamError<'_>> {
    let mut levels = None;
    for word in args.split_ascii_whitespace() {
        let (k, v) = word.split_once('=').ok_or(ParamError::NotKeyValue(word))?;
        match k {
            "levels" => {
                levels = Some(
                    v.parse()
                        .ok()
                        .filter(|l| (1..=max_levels).contains(l))
                        .ok_or(ParamError::BadValue("levels"))?,
                )
            }
            _ => return Err(ParamError::UnknownKey(k)),
        }
    }
    Ok(levels)
}

/// Splits `args` at a `prompt=` word (at the start or after a space) into the parameters
/// before it and the escaped prompt after it.
fn split_prompt(args: &mut [u8]) -> (&mut [u8], Option<&mut [u8]>) {
    const KEY: &[u8] = b"prompt=";
    let at = args
        .windows(KEY.len())
        .enumerate()
        .find(|&(i, w)| {
            w == KEY && (i == 0 || i.checked_sub(1).and_then(|j| args.get(j)) == Some(&b' '))
        })
        .map(|(i, _)| i);
    match at {
        Some(i) if i <= args.len() => {
            let (params, rest) = args.split_at_mut(i);
            let prompt = rest.get_mut(KEY.len()..);
            (params, prompt)
        }
        _ => (args, None),
    }
}

/// Rewrites `\n`, `\t`, `\r`, `\\` and `\xHH` in place; returns the new length, or `None` for
/// any other backslash sequence (a trailing lone backslash included).
pub fn unescape(buf: &mut [u8]) -> Option<usize> {
    let (mut r, mut w) = (0usize, 0usize);
    while let Some(&b) = buf.get(r) {
        let (out, used) = if b == b'\\' {
            match buf.get(r + 1).copied()? {
                b'n' => (b'\n', 2),
                b't' => (b'\t', 2),
                b'r' => (b'\r', 2),
                b'\\' => (b'\\', 2),
                b'x' => {
                    let hi = hex_digit(*buf.get(r + 2)?)?;
                    let lo = hex_digit(*buf.get(r + 3)?)?;
                    ((hi << 4) | lo, 4)
                }
                _ => return None,
            }
        } else {
            (b, 1)
        };
        *buf.get_mut(w)? = out;
        w += 1;
        r += used;
    }
    Some(w)
}

/// The value of one hexadecimal digit (either case), the protocol's escapes and `HEX` lines.
pub fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}
