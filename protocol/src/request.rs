//! Parameters of the `GEN` and `RESET` commands (`docs/serial-protocol.md`): `key=value` words,
//! then for `GEN` an optional `prompt=` that takes the rest of the line.
//!
//! ```text
//! n=32 temperature=0.8 top_k=0 top_p=1 seed=0 prompt=ROMEO:\n
//! ```
//!
//! Every key is optional (missing ones keep [`GenParams::default`]). The prompt is escaped text
//! (see [`unescape`]), unescaped in place. Unknown keys, bad numbers, unknown
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
    /// A backslash escape in the prompt that does not read (see [`unescape`]).
    BadEscape(EscapeError),
}

impl fmt::Display for ParamError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::NotKeyValue(w) => write!(f, "expected key=value, got {w}"),
            ParamError::UnknownKey(k) => write!(f, "unknown key {k}"),
            ParamError::BadValue(k) => write!(f, "bad value for {k}"),
            ParamError::EmptyPrompt => write!(f, "the prompt must not be empty"),
            ParamError::BadEscape(e) => write!(f, "the prompt {e}"),
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
        let n = unescape(p).map_err(ParamError::BadEscape)?;
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

/// What is wrong with a backslash escape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EscapeKind {
    /// A backslash followed by something that is not an escape, or by nothing.
    Unknown,
    /// `\x` without two hex digits.
    Hex,
    /// `\u` without a Unicode scalar value in braces.
    Unicode,
}

/// A backslash escape that does not read, and the byte offset of its backslash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EscapeError {
    /// What is wrong.
    pub kind: EscapeKind,
    /// Offset of the backslash in the escaped text.
    pub at: usize,
}

impl fmt::Display for EscapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = self.at;
        match self.kind {
            EscapeKind::Unknown => write!(
                f,
                "has an unknown escape at byte {at}: use \\n \\t \\r \\0 \\\\ \\\" \\' \\xHH or \\u{{H…}}"
            ),
            EscapeKind::Hex => write!(f, "has a `\\x` at byte {at} without two hex digits (\\x41)"),
            EscapeKind::Unicode => write!(
                f,
                "has a `\\u` at byte {at} without a Unicode scalar value in braces (\\u{{e9}})"
            ),
        }
    }
}

/// Rewrites backslash escapes in place, as in C and Rust strings, so that a line of text can
/// carry any byte: `\n` `\t` `\r` `\0` `\\` `\"` `\'`, `\xHH` (one byte, any value) and `\u{H…}`
/// (a Unicode scalar value, 1 to 6 hex digits, written as its UTF-8 bytes). Every escape is
/// longer than what it stands for, so the text shrinks and the rewrite fits in place. Returns
/// the new length; any other backslash is an error at its offset. The one reader of escapes:
/// the firmware's `GEN`, and the host's `--prompt` flags.
pub fn unescape(buf: &mut [u8]) -> Result<usize, EscapeError> {
    let (mut r, mut w) = (0usize, 0usize);
    while let Some(&b) = buf.get(r) {
        let err = |kind| EscapeError { kind, at: r };
        // The bytes to write (at most 4, a UTF-8 scalar) and the input bytes they replace.
        let mut out = [b, 0, 0, 0];
        let (len, used) = if b != b'\\' {
            (1, 1)
        } else {
            let one = |byte: u8| ([byte, 0, 0, 0], 1, 2);
            let (bytes, len, used) = match buf.get(r + 1).copied() {
                Some(b'n') => one(b'\n'),
                Some(b't') => one(b'\t'),
                Some(b'r') => one(b'\r'),
                Some(b'0') => one(0),
                Some(e @ (b'\\' | b'"' | b'\'')) => one(e),
                Some(b'x') => {
                    let digit = |i| buf.get(r + i).copied().and_then(hex_digit);
                    match (digit(2), digit(3)) {
                        (Some(hi), Some(lo)) => ([(hi << 4) | lo, 0, 0, 0], 1, 4),
                        _ => return Err(err(EscapeKind::Hex)),
                    }
                }
                Some(b'u') => {
                    let (c, used) = unicode_escape(buf.get(r..).unwrap_or(&[]))
                        .ok_or(err(EscapeKind::Unicode))?;
                    let mut bytes = [0u8; 4];
                    let len = c.encode_utf8(&mut bytes).len();
                    (bytes, len, used)
                }
                _ => return Err(err(EscapeKind::Unknown)),
            };
            out = bytes;
            (len, used)
        };
        for &o in out.get(..len).unwrap_or(&[]) {
            // `w` never passes `r`: every escape is longer than its bytes.
            *buf.get_mut(w).ok_or(err(EscapeKind::Unknown))? = o;
            w += 1;
        }
        r += used;
    }
    Ok(w)
}

/// `\u{H…}` at the start of `text`: the scalar value and the escape's length.
fn unicode_escape(text: &[u8]) -> Option<(char, usize)> {
    let rest = text.strip_prefix(b"\\u{")?;
    let close = rest.iter().position(|&c| c == b'}')?;
    let digits = rest.get(..close)?;
    if digits.is_empty() || digits.len() > 6 {
        return None;
    }
    let value = digits
        .iter()
        .try_fold(0u32, |v, &d| Some((v << 4) | u32::from(hex_digit(d)?)))?;
    Some((char::from_u32(value)?, 3 + close + 1))
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

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::unwrap_used)] // a test may panic: that is its failure
mod tests {
    extern crate std;
    use super::*;

    fn unescaped(text: &str) -> Result<std::vec::Vec<u8>, EscapeError> {
        let mut buf = text.as_bytes().to_vec();
        let n = unescape(&mut buf)?;
        buf.truncate(n);
        Ok(buf)
    }

    #[test]
    fn every_escape_reads_as_its_bytes() {
        assert_eq!(
            unescaped(r#"ROMEO:\n\tx\r\0\\\"\'\x41\xff\xFF\u{e9}\u{1F600}\u{10FFFF}é"#).unwrap(),
            b"ROMEO:\n\tx\r\0\\\"'A\xff\xff\xc3\xa9\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\xc3\xa9"
        );
        assert_eq!(unescaped("plain text").unwrap(), b"plain text");
        assert_eq!(unescaped("").unwrap(), b"");
    }

    #[test]
    fn bad_escapes_are_named_with_their_offset() {
        let e = |kind, at| Err(EscapeError { kind, at });
        assert_eq!(unescaped(r"ab\q"), e(EscapeKind::Unknown, 2));
        assert_eq!(unescaped("ab\\"), e(EscapeKind::Unknown, 2));
        assert_eq!(unescaped(r"\n\x4"), e(EscapeKind::Hex, 2));
        assert_eq!(unescaped(r"\xg1"), e(EscapeKind::Hex, 0));
        assert_eq!(unescaped(r"\u41"), e(EscapeKind::Unicode, 0));
        assert_eq!(unescaped(r"\u{}"), e(EscapeKind::Unicode, 0));
        assert_eq!(unescaped(r"\u{d800}"), e(EscapeKind::Unicode, 0));
        assert_eq!(unescaped(r"\u{110000}"), e(EscapeKind::Unicode, 0));
        assert_eq!(unescaped(r"\u{1234567}"), e(EscapeKind::Unicode, 0));
        assert_eq!(unescaped(r"\u{41"), e(EscapeKind::Unicode, 0));
        assert_eq!(unescaped(r"é\u{x}"), e(EscapeKind::Unicode, 2));
        let msg = std::format!(
            "{}",
            ParamError::BadEscape(EscapeError {
                kind: EscapeKind::Hex,
                at: 7
            })
        );
        assert!(msg.contains("at byte 7"), "{msg}");
    }

    #[test]
    fn gen_unescapes_its_prompt_or_says_where_it_fails() {
        let mut line = *b"n=4 prompt=a\\u{e9}\\tb";
        let p = parse_gen(&mut line).unwrap();
        assert_eq!(p.prompt, Some(&b"a\xc3\xa9\tb"[..]));
        let mut line = *b"n=4 prompt=ab\\q";
        assert_eq!(
            parse_gen(&mut line).unwrap_err(),
            ParamError::BadEscape(EscapeError {
                kind: EscapeKind::Unknown,
                at: 2
            })
        );
    }
}
