//! GPT-2's pre-tokenization: text is cut into pieces by the regular expression
//!
//! ```text
//! 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//! ```
//!
//! (`tokenizers`' `ByteLevel` pre-tokenizer with `use_regex`), and BPE runs on each piece alone.
//! A `no_std` build has no regex engine that does look-ahead, so [`Pieces`] is that expression
//! written out as a scanner: the alternatives are tried in order at the end of the previous
//! match, as a backtracking engine does, and since every character is a letter, a number, a
//! white space or none of these, the matches cover the text.
//!
//! `\s` is Unicode's White_Space property, which `char::is_whitespace` implements; `\p{L}` and
//! `\p{N}` are general categories, which `core` does not expose, so they come from the
//! `unicode-properties` crate (`no_std`, no allocation).
//!
//! The input is bytes: a byte that does not start a valid UTF-8 sequence is a character of its
//! own in the "none of these" class (as U+FFFD would be), so any input gets pieces that
//! concatenate back to it.

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// What the expression sees in a character.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// `\p{L}`.
    Letter,
    /// `\p{N}`.
    Number,
    /// `\s`.
    Space,
    /// `[^\s\p{L}\p{N}]`, and bytes that are not UTF-8.
    Other,
}

/// The character at the start of `bytes` (`None` for a byte that does not start a valid UTF-8
/// sequence) and its length in bytes; `None` at the end.
fn next_char(bytes: &[u8]) -> Option<(Option<char>, usize)> {
    let len = match *bytes.first()? {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return Some((None, 1)),
    };
    let c = bytes
        .get(..len)
        .and_then(|s| core::str::from_utf8(s).ok())
        .and_then(|s| s.chars().next());
    Some(match c {
        Some(c) => (Some(c), len),
        None => (None, 1),
    })
}

fn class(c: Option<char>) -> Class {
    let Some(c) = c else {
        return Class::Other;
    };
    if c.is_whitespace() {
        return Class::Space;
    }
    match c.general_category_group() {
        GeneralCategoryGroup::Letter => Class::Letter,
        GeneralCategoryGroup::Number => Class::Number,
        _ => Class::Other,
    }
}

/// The class of the character at the start of `bytes` and its length; `None` at the end.
fn next_class(bytes: &[u8]) -> Option<(Class, usize)> {
    next_char(bytes).map(|(c, len)| (class(c), len))
}

/// The length of the run of characters of class `want` at the start of `bytes`, and the length
/// of its last character.
fn run(bytes: &[u8], want: Class) -> (usize, usize) {
    let (mut end, mut last) = (0, 0);
    while let Some((class, len)) = bytes.get(end..).and_then(next_class) {
        if class != want {
            break;
        }
        last = len;
        end += len;
    }
    (end, last)
}

/// The length of the piece at the start of `text` (not empty); 0 only at the end.
fn piece_len(text: &[u8]) -> usize {
    let Some((first, first_len)) = next_char(text) else {
        return 0;
    };
    // 's|'t|'re|'ve|'m|'ll|'d
    if first == Some('\'') {
        let rest = text.get(1..).unwrap_or(&[]);
        for suffix in [&b"s"[..], b"t", b"re", b"ve", b"m", b"ll", b"d"] {
            if rest.starts_with(suffix) {
                return 1 + suffix.len();
            }
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
    let after_space = text.get(first_len..).unwrap_or(&[]);
    let (lead, class) = match (first, next_class(after_space)) {
        (Some(' '), Some((next, _))) if next != Class::Space => (first_len, next),
        _ => (0, class(first)),
    };
    if class != Class::Space {
        return lead + run(text.get(lead..).unwrap_or(&[]), class).0;
    }
    // `\s+(?!\S)|\s+`: the whole run of white space at the end of the text or when it is one
    // character; else all of it but the last character, which then goes with what follows.
    let (end, last) = run(text, Class::Space);
    if end == text.len() || end == last {
        end
    } else {
        end - last
    }
}

/// The pieces of a text, in order; they concatenate to the text.
#[derive(Clone, Debug)]
pub struct Pieces<'t> {
    rest: &'t [u8],
}

/// Cuts `text` into GPT-2's pre-tokenization pieces.
pub fn pieces(text: &[u8]) -> Pieces<'_> {
    Pieces { rest: text }
}

impl<'t> Iterator for Pieces<'t> {
    type Item = &'t [u8];

    fn next(&mut self) -> Option<&'t [u8]> {
        let len = piece_len(self.rest);
        if len == 0 {
            return None;
        }
        let (piece, rest) = self.rest.split_at_checked(len)?;
        self.rest = rest;
        Some(piece)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn cut(text: &str) -> Vec<&str> {
        pieces(text.as_bytes())
            .map(|p| core::str::from_utf8(p).unwrap())
            .collect()
    }

    #[test]
    fn cuts_like_gpt2() {
        assert_eq!(cut("Hello world"), ["Hello", " world"]);
        assert_eq!(cut("don't we'LL"), ["don", "'t", " we", "'", "LL"]);
        assert_eq!(cut("a  b"), ["a", " ", " b"]);
        assert_eq!(cut("a \n\tb  "), ["a", " \n", "\t", "b", "  "]);
        assert_eq!(cut("x\ny"), ["x", "\n", "y"]);
        assert_eq!(cut("12ab 3.5"), ["12", "ab", " 3", ".", "5"]);
        assert_eq!(cut("!!'s ?!"), ["!!'", "s", " ?!"]);
        assert_eq!(
            cut("日本語 \u{e9}\u{301}"),
            ["日本語", " \u{e9}", "\u{301}"]
        );
        assert_eq!(cut(""), Vec::<&str>::new());
    }

    #[test]
    fn invalid_utf8_bytes_are_other_characters() {
        let text = b"a\xff\xfe!b \xc3";
        let p: Vec<&[u8]> = pieces(text).collect();
        assert_eq!(p, [&b"a"[..], b"\xff\xfe!", b"b", b" \xc3"]);
    }
}
