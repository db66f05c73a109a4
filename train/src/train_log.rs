//! `OUT/train_log.csv` of `loglinear train`: one row per optimizer step. The training loop
//! writes it and `loglinear loss-plot` reads it, both through [`LogRow`] and [`HEADER`].

use std::path::{Path, PathBuf};

/// The log's first line.
pub const HEADER: &str = "step,tokens,lr,loss,bits_per_token,grad_norm,val_bits_per_token,seconds";

/// One optimizer step.
#[derive(Clone, Debug, PartialEq)]
pub struct LogRow {
    /// The step, from 1.
    pub step: u64,
    /// Training tokens seen up to and including this step.
    pub tokens: u64,
    /// The learning rate of this step.
    pub lr: f64,
    /// Mean training loss over the step's predicted tokens, nats.
    pub loss: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Validation bits per token, on validation steps.
    pub val_bits_per_token: Option<f64>,
    /// Seconds since this command started training.
    pub seconds: f64,
}

impl LogRow {
    /// The training loss in bits per token.
    pub fn bits_per_token(&self) -> f64 {
        self.loss / std::f64::consts::LN_2
    }

    /// The row as a line of the log (no line end).
    pub fn csv(&self) -> String {
        let val = self
            .val_bits_per_token
            .map(|b| format!("{b:.5}"))
            .unwrap_or_default();
        format!(
            "{},{},{:.6e},{:.6},{:.6},{:.6},{val},{:.3}",
            self.step,
            self.tokens,
            self.lr,
            self.loss,
            self.bits_per_token(),
            self.grad_norm,
            self.seconds
        )
    }
}

/// Why a training log does not read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The first line is not [`HEADER`].
    #[error("{}: not a `loglinear train` log: the first line is {found:?}, expected {HEADER:?}", path.display())]
    Header { path: PathBuf, found: String },
    /// A row that does not parse.
    #[error("{}, line {line}: {message}", path.display())]
    Row {
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        message: String,
    },
    /// A log with a header and no steps.
    #[error("{}: the log has no steps", .0.display())]
    Empty(PathBuf),
}

/// Reads a training log; rows must have increasing steps.
pub fn read(path: &Path) -> Result<Vec<LogRow>, LogError> {
    let text = std::fs::read_to_string(path).map_err(|source| LogError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Parses a training log's text (`path` names it in errors).
pub fn parse(path: &Path, text: &str) -> Result<Vec<LogRow>, LogError> {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    if first.trim_end() != HEADER {
        return Err(LogError::Header {
            path: path.to_path_buf(),
            found: first.chars().take(120).collect(),
        });
    }
    let mut rows: Vec<LogRow> = Vec::new();
    for (i, line) in lines.enumerate() {
        let line_no = i + 2;
        if line.trim().is_empty() {
            continue;
        }
        let row_err = |message: String| LogError::Row {
            path: path.to_path_buf(),
            line: line_no,
            message,
        };
        let row = parse_row(line).map_err(row_err)?;
        if let Some(last) = rows.last() {
            if row.step <= last.step {
                return Err(row_err(format!(
                    "step {} after step {}: steps must increase",
                    row.step, last.step
                )));
            }
        }
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(LogError::Empty(path.to_path_buf()));
    }
    Ok(rows)
}

/// One row's fields, or what is wrong with them.
fn parse_row(line: &str) -> Result<LogRow, String> {
    let fields: Vec<&str> = line.split(',').collect();
    let names: Vec<&str> = HEADER.split(',').collect();
    if fields.len() != names.len() {
        return Err(format!(
            "{} fields, expected {} ({HEADER})",
            fields.len(),
            names.len()
        ));
    }
    let number = |k: usize| -> Result<f64, String> {
        let v: f64 = fields[k]
            .trim()
            .parse()
            .map_err(|_| format!("{} {:?} is not a number", names[k], fields[k]))?;
        if v.is_finite() {
            Ok(v)
        } else {
            Err(format!("{} is {v}", names[k]))
        }
    };
    let count = |k: usize| -> Result<u64, String> {
        fields[k]
            .trim()
            .parse()
            .map_err(|_| format!("{} {:?} is not a whole number", names[k], fields[k]))
    };
    let val = match fields[6].trim() {
        "" => None,
        _ => Some(number(6)?),
    };
    Ok(LogRow {
        step: count(0)?,
        tokens: count(1)?,
        lr: number(2)?,
        loss: number(3)?,
        grad_norm: number(5)?,
        val_bits_per_token: val,
        seconds: number(7)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(step: u64, val: Option<f64>) -> LogRow {
        LogRow {
            step,
            tokens: step * 16_384,
            lr: 2e-3,
            loss: 1.5,
            grad_norm: 0.25,
            val_bits_per_token: val,
            seconds: step as f64 * 0.25,
        }
    }

    #[test]
    fn rows_written_read_back() {
        let rows = vec![row(1, None), row(2, Some(2.125)), row(3, None)];
        let text: String = std::iter::once(HEADER.to_string())
            .chain(rows.iter().map(LogRow::csv))
            .map(|l| l + "\n")
            .collect();
        let back = parse(Path::new("log.csv"), &text).unwrap();
        assert_eq!(back, rows);
        assert!((back[0].bits_per_token() - 1.5 / std::f64::consts::LN_2).abs() < 1e-12);
    }

    #[test]
    fn bad_logs_name_the_fault() {
        let p = Path::new("runs/a/train_log.csv");
        let err = |text: &str| parse(p, text).unwrap_err().to_string();
        assert!(err("step,loss\n1,2\n").contains("not a `loglinear train` log"));
        assert!(err(&format!("{HEADER}\n")).contains("no steps"));
        let e = err(&format!("{HEADER}\n1,2,3\n"));
        assert!(e.contains("line 2") && e.contains("3 fields"), "{e}");
        let e = err(&format!("{HEADER}\n1,16384,2e-3,abc,1,1,,0.1\n"));
        assert!(e.contains("loss \"abc\" is not a number"), "{e}");
        let e = err(&format!("{HEADER}\n1,16384,2e-3,NaN,1,1,,0.1\n"));
        assert!(e.contains("loss is NaN"), "{e}");
        let two = format!("{HEADER}\n{}\n{}\n", row(2, None).csv(), row(2, None).csv());
        assert!(err(&two).contains("line 3: step 2 after step 2"));
        assert!(parse(Path::new("missing"), "").is_err());
    }
}
