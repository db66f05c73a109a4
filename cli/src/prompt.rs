//! The `--prompt` text of `generate` and `serial`: backslash escapes, as in C and Rust strings,
//! so that a shell argument can carry any byte. The escapes are the serial protocol's
//! ([`loglinear_protocol::request::unescape`]), so a prompt reads the same on the host and in a
//! board's `GEN`.

use loglinear_protocol::request::{self, EscapeError, EscapeKind};

/// Why a prompt's escapes do not read: the escape as the user wrote it, and what is wrong.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("--prompt: `{escape}` at byte {}: {}", error.at, what(error.kind))]
pub struct PromptError {
    /// The escape's text (the backslash and what follows, up to a few characters).
    escape: String,
    /// The protocol's error.
    error: EscapeError,
}

fn what(kind: EscapeKind) -> &'static str {
    match kind {
        EscapeKind::Unknown => {
            "not an escape; use \\n \\t \\r \\0 \\\\ \\\" \\' \\xHH or \\u{H…} (a literal \\ is \\\\)"
        }
        EscapeKind::Hex => "\\x needs two hex digits (\\x41)",
        EscapeKind::Unicode => "\\u needs a Unicode scalar value in braces (\\u{e9})",
    }
}

/// The bytes `--prompt` stands for, its escapes replaced. The argument is taken as the bytes
/// the shell passed (the tokenizers are byte-level), so a prompt that is not UTF-8 is fed as
/// it is.
pub fn unescape_arg(arg: &std::ffi::OsStr) -> Result<Vec<u8>, PromptError> {
    unescape(arg.as_encoded_bytes())
}

/// The bytes `text` stands for, its escapes replaced.
pub fn unescape(text: &[u8]) -> Result<Vec<u8>, PromptError> {
    let mut bytes = text.to_vec();
    match request::unescape(&mut bytes) {
        Ok(n) => {
            bytes.truncate(n);
            Ok(bytes)
        }
        Err(error) => {
            let escape = String::from_utf8_lossy(text.get(error.at..).unwrap_or_default())
                .chars()
                .take(match error.kind {
                    EscapeKind::Unicode => 10,
                    EscapeKind::Hex => 4,
                    EscapeKind::Unknown => 2,
                })
                .collect();
            Err(PromptError { escape, error })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_read_as_the_protocol_reads_them() {
        assert_eq!(
            unescape(r#"ROMEO:\n\t\\\"\x41\u{e9}é"#.as_bytes()).unwrap(),
            b"ROMEO:\n\t\\\"A\xc3\xa9\xc3\xa9"
        );
    }

    #[test]
    fn bad_escapes_are_quoted_with_their_place() {
        let e = unescape(r"ab\q".as_bytes()).unwrap_err().to_string();
        assert!(
            e.contains(r"`\q` at byte 2") && e.contains("not an escape"),
            "{e}"
        );
        let e = unescape(r"\x4".as_bytes()).unwrap_err().to_string();
        assert!(
            e.contains(r"`\x4` at byte 0") && e.contains("two hex digits"),
            "{e}"
        );
        let e = unescape(r"é\u{d800}".as_bytes()).unwrap_err().to_string();
        assert!(e.contains(r"`\u{d800}` at byte 2"), "{e}");
        let e = unescape("ab\\".as_bytes()).unwrap_err().to_string();
        assert!(e.contains(r"`\` at byte 2"), "{e}");
        assert!(e.starts_with("--prompt: "), "names the flag: {e}");
    }

    #[test]
    fn a_prompt_that_is_not_utf8_is_its_bytes() {
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            let arg = std::ffi::OsStr::from_bytes(b"caf\xe9 \\x41");
            assert_eq!(unescape_arg(arg).unwrap(), b"caf\xe9 A");
        }
    }
}
