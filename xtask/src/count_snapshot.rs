//! Instructions-per-token snapshots: `boards/<board>/insns.txt`, beside `size.txt`, written by
//! `cargo xtask count --update` and checked by `cargo xtask count --check`, which the test
//! command runs on every QEMU board built from `firmware/`.
//!
//! The count is exact and repeatable (QEMU's TCG plugin, `count.rs`), so a change of the
//! firmware's speed shows as a change of the figure. A growth of more than
//! [`TOLERANCE_PERCENT`] fails, and so does a fall of as much, so that the snapshot follows an
//! improvement and the next regression is measured from there.

use std::path::{Path, PathBuf};

/// Tokens of a snapshot's count (after the one-byte prompt of `count`).
pub const TOKENS: u64 = 4;
/// A change allowed either way, in percent of the snapshot.
pub const TOLERANCE_PERCENT: f64 = 5.0;

/// The snapshot file of the board whose `board.toml` is `board_toml`.
pub fn path(board_toml: &Path) -> PathBuf {
    board_toml.with_file_name("insns.txt")
}

/// The file for `insns_per_token` (comment lines, then one `insns_per_token N` line).
pub fn render(insns_per_token: i64) -> String {
    format!(
        "# Instructions per token of this board's firmware under QEMU, counted exactly: {TOKENS} \
         tokens\n# after the prompt \"X\", temperature 0, with the board's model, state and \
         activations.\n# `cargo xtask count --check` fails on a change of more than \
         {TOLERANCE_PERCENT} %;\n# `cargo xtask count --update BOARD` rewrites it.\n\
         insns_per_token {insns_per_token}\n"
    )
}

/// The figure of a snapshot file's text.
pub fn parse(text: &str) -> Result<i64, String> {
    let mut found = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let value = line
            .strip_prefix("insns_per_token ")
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|&v| v > 0)
            .ok_or_else(|| {
                format!(
                    "line {}: `{line}` is not `insns_per_token N` (N > 0)",
                    i + 1
                )
            })?;
        if found.replace(value).is_some() {
            return Err(format!("line {}: a second insns_per_token line", i + 1));
        }
    }
    found.ok_or_else(|| "no insns_per_token line".to_string())
}

/// Whether `measured` is within [`TOLERANCE_PERCENT`] of `snapshot`; the error says by how
/// much it is not, and which way.
pub fn check(snapshot: i64, measured: i64) -> Result<(), String> {
    let change = 100.0 * (measured - snapshot) as f64 / snapshot as f64;
    if change > TOLERANCE_PERCENT {
        Err(format!(
            "{measured} instructions per token, {change:.1} % more than the snapshot's \
             {snapshot} (at most {TOLERANCE_PERCENT} % more is allowed)"
        ))
    } else if change < -TOLERANCE_PERCENT {
        Err(format!(
            "{measured} instructions per token, {:.1} % fewer than the snapshot's {snapshot}: \
             record the gain",
            -change
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_snapshot_parses_back() {
        let text = render(3_650_000);
        assert_eq!(parse(&text), Ok(3_650_000));
        assert!(text.starts_with("# "), "{text}");
        assert_eq!(
            path(Path::new("boards/mps2-an386/board.toml")),
            Path::new("boards/mps2-an386/insns.txt")
        );
    }

    #[test]
    fn bad_snapshots_are_named() {
        assert!(parse("# only a comment\n")
            .unwrap_err()
            .contains("no insns_per_token"));
        let e = parse("insns_per_token twelve\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("twelve"), "{e}");
        assert!(parse("insns_per_token 0\n").is_err());
        assert!(parse("insns_per_token 5\ninsns_per_token 6\n")
            .unwrap_err()
            .contains("second"));
    }

    #[test]
    fn five_percent_either_way_passes_and_more_fails() {
        assert!(check(1000, 1050).is_ok());
        assert!(check(1000, 950).is_ok());
        let grew = check(1000, 1051).unwrap_err();
        assert!(grew.contains("5.1 % more"), "{grew}");
        let fell = check(1000, 900).unwrap_err();
        assert!(
            fell.contains("10.0 % fewer") && fell.contains("record"),
            "{fell}"
        );
    }
}
