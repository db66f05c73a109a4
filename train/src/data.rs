//! Training data: token streams from files, a validation split, random training windows from a
//! seeded generator whose whole state is one `u64` (saved in checkpoints, so a resumed run draws
//! the same windows as an uninterrupted one), and the fixed validation windows.
//!
//! File formats, chosen by the file name's suffix:
//! * `*.u16`: little-endian u16 token ids (2 bytes per token);
//! * `*.u32`: little-endian u32 token ids (4 bytes per token);
//! * anything else: raw bytes, one token per byte (the byte-level vocabulary of 256).

use loglinear_runtime::rng::SplitMix64;
use std::path::{Path, PathBuf};

/// Why training data could not be used. Every variant names the file or setting.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {len} bytes is not a whole number of {width}-byte tokens (format from the .u{bits} suffix)", bits = width * 8)]
    PartialToken {
        path: PathBuf,
        len: usize,
        width: usize,
    },
    #[error("{path}: token {token} at index {index} is outside the model's vocabulary of {vocab}")]
    TokenOutOfRange {
        path: PathBuf,
        index: usize,
        token: u32,
        vocab: usize,
    },
    #[error(
        "{what} has {len} tokens; windows of seq_len + 1 = {need} tokens need at least that many"
    )]
    TooShort {
        what: String,
        len: usize,
        need: usize,
    },
    #[error("--val-fraction must be in (0, 1), got {0}")]
    BadFraction(f64),
}

/// How token ids are stored in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenFormat {
    /// One token per byte.
    Bytes,
    /// Little-endian u16.
    U16,
    /// Little-endian u32.
    U32,
}

impl TokenFormat {
    /// The format a file name says: `.u16`, `.u32`, else bytes.
    pub fn of_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("u16") => TokenFormat::U16,
            Some(e) if e.eq_ignore_ascii_case("u32") => TokenFormat::U32,
            _ => TokenFormat::Bytes,
        }
    }

    fn width(self) -> usize {
        match self {
            TokenFormat::Bytes => 1,
            TokenFormat::U16 => 2,
            TokenFormat::U32 => 4,
        }
    }
}

/// The tokens of `bytes` in `format`, each checked against `vocab` (`path` is for messages).
pub fn decode_tokens(
    path: &Path,
    bytes: &[u8],
    format: TokenFormat,
    vocab: usize,
) -> Result<Vec<u32>, DataError> {
    let width = format.width();
    if bytes.len() % width != 0 {
        return Err(DataError::PartialToken {
            path: path.to_path_buf(),
            len: bytes.len(),
            width,
        });
    }
    let tokens: Vec<u32> = match format {
        TokenFormat::Bytes => bytes.iter().map(|&b| u32::from(b)).collect(),
        TokenFormat::U16 => bytes
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        TokenFormat::U32 => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    };
    if let Some((index, &token)) = tokens
        .iter()
        .enumerate()
        .find(|(_, &t)| t as usize >= vocab)
    {
        return Err(DataError::TokenOutOfRange {
            path: path.to_path_buf(),
            index,
            token,
            vocab,
        });
    }
    Ok(tokens)
}

/// Reads a token file (format from its suffix), checking every token against `vocab`.
pub fn load_tokens(path: &Path, vocab: usize) -> Result<Vec<u32>, DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decode_tokens(path, &bytes, TokenFormat::of_path(path), vocab)
}

/// Splits off the last `fraction` of the tokens for validation: (train, validation).
pub fn split_tail(mut tokens: Vec<u32>, fraction: f64) -> Result<(Vec<u32>, Vec<u32>), DataError> {
    if !(fraction > 0.0 && fraction < 1.0) {
        return Err(DataError::BadFraction(fraction));
    }
    let val_len = ((tokens.len() as f64) * fraction).round() as usize;
    let val = tokens.split_off(tokens.len() - val_len);
    Ok((tokens, val))
}

/// Fails unless `tokens` holds at least one window of `seq_len + 1`.
pub fn check_len(what: &str, tokens: &[u32], seq_len: usize) -> Result<(), DataError> {
    if tokens.len() < seq_len + 1 {
        return Err(DataError::TooShort {
            what: what.to_string(),
            len: tokens.len(),
            need: seq_len + 1,
        });
    }
    Ok(())
}

/// Appends `batch` uniformly random windows of `seq_len + 1` tokens of `tokens` to `out`
/// (window starts drawn from `rng`, one draw per window).
pub fn sample_windows(
    tokens: &[u32],
    seq_len: usize,
    batch: usize,
    rng: &mut SplitMix64,
    out: &mut Vec<u32>,
) -> Result<(), DataError> {
    check_len("the training data", tokens, seq_len)?;
    let starts = (tokens.len() - seq_len) as u64;
    for _ in 0..batch {
        let s = rng.below(starts) as usize;
        out.extend_from_slice(&tokens[s..s + seq_len + 1]);
    }
    Ok(())
}

/// The validation windows: non-overlapping, window w covering tokens
/// `[w·seq_len, w·seq_len + seq_len]` (seq_len predictions each; neighbours share one token, so
/// every token after the first is predicted once), at most `max` of them (0 = all). The same
/// protocol as `loglinear eval` and the shipped models' TRAINING.md.
pub fn eval_windows(tokens: &[u32], seq_len: usize, max: usize) -> Vec<&[u32]> {
    let count = crate::eval::window_count(tokens.len(), seq_len);
    let count = if max == 0 { count } else { count.min(max) };
    (0..count)
        .map(|w| &tokens[w * seq_len..w * seq_len + seq_len + 1])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_the_suffix() {
        assert_eq!(TokenFormat::of_path(Path::new("a.txt")), TokenFormat::Bytes);
        assert_eq!(TokenFormat::of_path(Path::new("a.U16")), TokenFormat::U16);
        assert_eq!(TokenFormat::of_path(Path::new("d/a.u32")), TokenFormat::U32);
        let p = Path::new("x");
        assert_eq!(
            decode_tokens(p, b"ab", TokenFormat::Bytes, 256).unwrap(),
            [97, 98]
        );
        assert_eq!(
            decode_tokens(p, &[1, 0, 0, 1], TokenFormat::U16, 300).unwrap(),
            [1, 256]
        );
        assert_eq!(
            decode_tokens(p, &[7, 0, 1, 0], TokenFormat::U32, 70000).unwrap(),
            [65543]
        );
    }

    #[test]
    fn bad_files_are_named_errors() {
        let p = Path::new("t.u16");
        let e = decode_tokens(p, &[1, 0, 2], TokenFormat::U16, 256).unwrap_err();
        assert!(e.to_string().contains("t.u16"), "{e}");
        let e = decode_tokens(p, &[1, 0, 0, 1], TokenFormat::U16, 256).unwrap_err();
        assert!(
            matches!(
                e,
                DataError::TokenOutOfRange {
                    index: 1,
                    token: 256,
                    ..
                }
            ),
            "{e}"
        );
        let e = load_tokens(Path::new("/nonexistent/file"), 256).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/file"), "{e}");
        assert!(split_tail(vec![1, 2], 1.0).is_err());
        assert!(split_tail(vec![1, 2], f64::NAN).is_err());
    }

    #[test]
    fn split_keeps_the_tail_for_validation() {
        let (t, v) = split_tail((0..100).collect(), 0.1).unwrap();
        assert_eq!(t, (0..90).collect::<Vec<_>>());
        assert_eq!(v, (90..100).collect::<Vec<_>>());
    }

    #[test]
    fn windows_are_in_range_reproducible_and_resumable() {
        let tokens: Vec<u32> = (0..50).collect();
        let mut a = SplitMix64::new(7);
        let mut out = Vec::new();
        sample_windows(&tokens, 9, 1000, &mut a, &mut out).unwrap();
        assert_eq!(out.len(), 1000 * 10);
        let mut starts = std::collections::HashSet::new();
        for w in out.chunks_exact(10) {
            // Consecutive tokens, ending inside the data.
            assert!(w.windows(2).all(|p| p[1] == p[0] + 1));
            assert!(w[9] < 50);
            starts.insert(w[0]);
        }
        assert_eq!(starts.len(), 41, "every start 0..=40 is drawn");
        // Resuming from a saved state continues the same sequence.
        let mut b = SplitMix64::new(7);
        let mut first = Vec::new();
        sample_windows(&tokens, 9, 600, &mut b, &mut first).unwrap();
        let mut resumed = SplitMix64::new(b.state);
        sample_windows(&tokens, 9, 400, &mut resumed, &mut first).unwrap();
        assert_eq!(first, out);
        let e = sample_windows(&tokens[..5], 9, 1, &mut a, &mut out).unwrap_err();
        assert!(e.to_string().contains("need at least"), "{e}");
    }

    #[test]
    fn eval_windows_tile_the_data() {
        let tokens: Vec<u32> = (0..25).collect();
        let w = eval_windows(&tokens, 8, 0);
        assert_eq!(w.len(), 3);
        assert_eq!(w[0], &tokens[0..9]);
        assert_eq!(w[2], &tokens[16..25]);
        assert_eq!(eval_windows(&tokens, 8, 2).len(), 2);
        assert!(eval_windows(&tokens[..8], 8, 0).is_empty());
    }
}
