//! The defmt log of a HAL board crate's QEMU image (feature `defmt-semihosting`): its frames on
//! QEMU's stderr (firmware/src/defmt_stderr.rs), decoded with the ELF's own table by defmt's
//! decoder.

use std::path::Path;

use anyhow::Context;
use defmt_decoder::{DecodeError, Table};

/// One decoded log line.
#[derive(Debug, PartialEq, Eq)]
pub struct LogLine {
    /// `ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE`, or empty for a `println`.
    pub level: String,
    /// The message, formatted.
    pub text: String,
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:<5}] {}", self.level, self.text)
    }
}

/// The log lines in `stream` (the bytes of a run's stderr) of the image `elf`. Bytes that are
/// no frame, such as a message QEMU prints, are skipped with the frame they fall in.
pub fn decode(elf: &Path, stream: &[u8]) -> anyhow::Result<Vec<LogLine>> {
    let bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let table = Table::parse(&bytes)
        .with_context(|| format!("reading the defmt table of {}", elf.display()))?
        .with_context(|| format!("{} has no defmt table", elf.display()))?;
    let mut decoder = table.new_stream_decoder();
    decoder.received(stream);
    let mut lines = Vec::new();
    loop {
        match decoder.decode() {
            Ok(frame) => lines.push(LogLine {
                level: frame
                    .level()
                    .map(|l| l.as_str().to_uppercase())
                    .unwrap_or_default(),
                text: frame.display_message().to_string(),
            }),
            Err(DecodeError::UnexpectedEof) => break,
            Err(DecodeError::Malformed) => {}
        }
    }
    Ok(lines)
}
