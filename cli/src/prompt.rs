//! The `--prompt` text of `generate` and `serial`: backslash escapes, as in C and Rust strings,
//! so that a shell argument can carry any byte.
//!
//! `\n` `\t` `\r` `\0` `\\` `\"` `\'`, `\xHH` (one byte, any value: the models read bytes) and
//! `\u{H…}` (a Unicode scalar value, written as its UTF-8 bytes). Any other backslash is an
//! error that names it, never a guess.

/// Why a prompt's escapes do not read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// A backslash followed by something that is not an escape.
    #[error("the prompt has an unknown escape `{0}` at byte {1}: use \\n \\t \\r \\0 \\\\ \\\" \\' \\xHH or \\u{{H…}}")]
    Unknown(String, usize),
    /// `\x` without two hex digits.
    #[error("the prompt's `\\x` at byte {0} needs two hex digits (\\x41)")]
    Hex(usize),
    /// `\u{…}` that is not a Unicode scalar value.
    #[error("the prompt's `\\u` at byte {0} needs a Unicode scalar value in braces (\\u{{e9}})")]
    Unicode(usize),
}

/// The bytes `text` stands for, its escapes replaced.
pub fn unescape(text: &str) -> Result<Vec<u8>, PromptError> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let Some((_, e)) = chars.next() else {
            return Err(PromptError::Unknown("\\".into(), at));
        };
        match e {
            'n' => out.push(b'\n'),
            't' => out.push(b'\t'),
            'r' => out.push(b'\r'),
            '0' => out.push(0),
            '\\' | '"' | '\'' => out.push(e as u8),
            'x' => {
                let hex: String = (0..2)
                    .filter_map(|_| chars.next().map(|(_, h)| h))
                    .collect();
                let byte = (hex.len() == 2)
                    .then(|| u8::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or(PromptError::Hex(at))?;
                out.push(byte);
            }
            'u' => {
                if chars.next().map(|(_, b)| b) != Some('{') {
                    return Err(PromptError::Unicode(at));
                }
                let mut hex = String::new();
                loop {
                    match chars.next() {
                        Some((_, '}')) => break,
                        Some((_, h)) if h.is_ascii_hexdigit() && hex.len() < 6 => hex.push(h),
                        _ => return Err(PromptError::Unicode(at)),
                    }
                }
                let c = u32::from_str_radix(&hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or(PromptError::Unicode(at))?;
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            other => return Err(PromptError::Unknown(format!("\\{other}"), at)),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_escape_reads_as_its_bytes() {
        assert_eq!(
            unescape(r#"ROMEO:\n\tx\r\0\\\"\'\x41\xff\u{e9}\u{1F600}é"#).unwrap(),
            b"ROMEO:\n\tx\r\0\\\"'A\xff\xc3\xa9\xf0\x9f\x98\x80\xc3\xa9"
        );
        assert_eq!(unescape("plain text").unwrap(), b"plain text");
    }

    #[test]
    fn bad_escapes_are_named_with_their_place() {
        assert_eq!(
            unescape(r"ab\q"),
            Err(PromptError::Unknown(r"\q".into(), 2))
        );
        assert_eq!(unescape("ab\\"), Err(PromptError::Unknown("\\".into(), 2)));
        assert_eq!(unescape(r"\x4"), Err(PromptError::Hex(0)));
        assert_eq!(unescape(r"\xg1"), Err(PromptError::Hex(0)));
        assert_eq!(unescape(r"\u41"), Err(PromptError::Unicode(0)));
        assert_eq!(unescape(r"\u{d800}"), Err(PromptError::Unicode(0)));
        assert_eq!(unescape(r"\u{1234567}"), Err(PromptError::Unicode(0)));
        assert_eq!(unescape(r"\u{41"), Err(PromptError::Unicode(0)));
    }
}
