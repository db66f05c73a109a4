//! `SNAP`: the session as a runtime snapshot (`loglinear_runtime::snapshot`, the format
//! `loglinear generate --save-snapshot` writes), hex-encoded over the serial link, so a host can
//! resume the stream with `loglinear generate --resume FILE` (docs/serial-protocol.md,
//! *Snapshots*). `RESTORE`: the reverse, a host's snapshot uploaded into the board's A/B store
//! ([`receive_restore`]).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use embedded_io::{Read, Write};
use loglinear_runtime::slot_store::{NorFlash, SlotInfo, SlotStore};
use loglinear_runtime::snapshot::{self, Crc32, SnapshotError};

use loglinear_protocol::request::hex_digit;
use loglinear_protocol::{self as protocol, Line, LineReader};
use loglinear_runtime::{Sampler, SamplerConfig, Session, StateElem};

/// Snapshot bytes per `HEX` line (twice as many hex digits).
const BYTES_PER_LINE: usize = 64;

/// Writes `SNAP bytes=<n> t=<t> fingerprint=<hex>`, the snapshot as `HEX <digits>` lines of 64
/// bytes, then `OK SNAP`; a failure ends with `ERR 6` instead.
pub fn reply_snap<W: Write, E: StateElem>(
    tx: &mut W,
    session: &Session<'_, E>,
    rng_state: u64,
    fingerprint: u64,
) -> Result<(), SnapshotError> {
    let len = snapshot::encoded_len(session)?;
    let _ = writeln!(
        tx,
        "SNAP bytes={len} t={} fingerprint={fingerprint:016x}",
        session.t()
    );
    let mut sampler = Sampler::new(SamplerConfig::default());
    sampler.set_rng_state(rng_state);
    let mut line = [0u8; 4 + 2 * BYTES_PER_LINE];
    if let Some(head) = line.get_mut(..4) {
        head.copy_from_slice(b"HEX ");
    }
    let mut filled = 4;
    let emit = |line: &[u8], tx: &mut W| -> Result<(), SnapshotError> {
        tx.write_all(line).map_err(|_| SnapshotError::Sink)?;
        tx.write_all(b"\n").map_err(|_| SnapshotError::Sink)
    };
    snapshot::write(session, &sampler, fingerprint, &mut |chunk: &[u8]| {
        for &b in chunk {
            const DIGITS: &[u8; 16] = b"0123456789abcdef";
            let digit = |x: u8| DIGITS.get(usize::from(x)).copied().unwrap_or(b'0');
            if let Some(d) = line.get_mut(filled..filled + 2) {
                d.copy_from_slice(&[digit(b >> 4), digit(b & 15)]);
            }
            filled += 2;
            if filled == line.len() {
                emit(&line, tx)?;
                filled = 4;
            }
        }
        Ok(())
    })?;
    if let Some(rest) = line.get(..filled).filter(|_| filled > 4) {
        emit(rest, tx)?;
    }
    let _ = writeln!(tx, "OK SNAP");
    let _ = tx.flush();
    Ok(())
}

/// Why a `RESTORE` upload was not committed (the store's newest slot is then unchanged).
#[derive(Debug)]
pub enum UploadError {
    /// `RESTORE` needs `bytes=<n>`.
    BadRequest,
    /// The announced size cannot be a snapshot or does not fit a slot.
    BadSize {
        /// Bytes announced.
        bytes: usize,
        /// Bytes a slot holds.
        capacity: usize,
    },
    /// A line other than `HEX <digits>` or `END` (kept: it runs as the next command), or end
    /// of input, before `END`.
    CutShort {
        /// Bytes received.
        got: usize,
    },
    /// A `HEX` line with an odd number of digits or a non-hex digit, or an overlong line.
    BadHex,
    /// `END` after another number of bytes than announced (or more bytes than announced).
    Length {
        /// Bytes announced.
        want: usize,
        /// Bytes received.
        got: usize,
    },
    /// Not a snapshot of this format (magic, or the length field disagrees).
    NotSnapshot,
    /// A snapshot of another model file.
    ModelMismatch,
    /// The snapshot's CRC-32 does not match its bytes.
    Corrupt,
    /// The store failed (the flash driver).
    Store,
}

impl core::fmt::Display for UploadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BadRequest => write!(f, "RESTORE needs bytes=<n>"),
            Self::BadSize { bytes, capacity } => write!(
                f,
                "bytes={bytes} is not a snapshot size this store holds (slot of {capacity} bytes)"
            ),
            Self::CutShort { got } => {
                write!(f, "upload cut short after {got} bytes (no END); not stored")
            }
            Self::BadHex => write!(f, "bad HEX line; not stored"),
            Self::Length { want, got } => {
                write!(f, "{got} bytes uploaded, {want} announced; not stored")
            }
            Self::NotSnapshot => write!(f, "not a snapshot; not stored"),
            Self::ModelMismatch => write!(f, "model mismatch: a snapshot of another model file"),
            Self::Corrupt => write!(f, "corrupt: CRC mismatch; not stored"),
            Self::Store => write!(f, "snapshot store failed"),
        }
    }
}

/// Parses the arguments of `RESTORE bytes=<n>`.
pub fn parse_restore(args: &str) -> Result<usize, UploadError> {
    let mut words = args.split_ascii_whitespace();
    let n = words
        .next()
        .and_then(|w| w.strip_prefix("bytes="))
        .and_then(|n| n.parse().ok())
        .ok_or(UploadError::BadRequest)?;
    if words.next().is_some() {
        return Err(UploadError::BadRequest);
    }
    Ok(n)
}

/// A line that ended an upload early: it runs as the next command.
pub struct Pending {
    buf: [u8; protocol::MAX_LINE],
    len: Option<usize>,
}

impl Pending {
    pub const fn new() -> Self {
        Self {
            buf: [0; protocol::MAX_LINE],
            len: None,
        }
    }

    /// The kept line, once.
    pub fn take(&mut self) -> Option<&mut [u8]> {
        let n = self.len.take()?;
        self.buf.get_mut(..n)
    }

    fn keep(&mut self, line: &[u8]) {
        if let Some(dst) = self.buf.get_mut(..line.len()) {
            dst.copy_from_slice(line);
            self.len = Some(line.len());
        }
    }
}

/// Receives the `HEX` lines of a `RESTORE bytes=<total>` upload up to `END` and streams them
/// straight into the store's inactive slot (no RAM copy of the snapshot). The slot's commit
/// record is written only once the whole upload checks: `total` bytes, the snapshot magic and
/// length field, this model's fingerprint and the snapshot's CRC-32; on any failure the
/// previous newest slot stays the newest. A line that is neither `HEX` nor `END` ends the upload
/// (cut short) and is kept in `pending` to run as the next command.
pub fn receive_restore<R: Read, F: NorFlash>(
    store: &mut SlotStore<F>,
    total: usize,
    fingerprint: u64,
    lines: &mut LineReader,
    rx: &mut R,
    pending: &mut Pending,
) -> Result<SlotInfo, UploadError> {
    let capacity = store.capacity();
    if total < snapshot::HEADER_LEN + 4 || total > capacity {
        return Err(UploadError::BadSize {
            bytes: total,
            capacity,
        });
    }
    let body_end = total - 4;
    let mut failure = None;
    let saved = store.save_with(|sink| {
        let mut got = 0usize;
        let mut crc = Crc32::new();
        let mut head = [0u8; snapshot::HEADER_LEN];
        let mut tail = [0u8; 4];
        let mut bytes = [0u8; protocol::MAX_LINE / 2];
        let fail = |e: UploadError, failure: &mut Option<UploadError>| {
            *failure = Some(e);
            Err(SnapshotError::Source)
        };
        loop {
            let line = match lines.next_line(rx) {
                Line::Complete(line) => line,
                Line::TooLong => return fail(UploadError::BadHex, &mut failure),
                Line::CutShort | Line::Eof | Line::Io => {
                    return fail(UploadError::CutShort { got }, &mut failure)
                }
            };
            if line == b"END" {
                break;
            }
            let Some(digits) = line.strip_prefix(b"HEX ") else {
                pending.keep(line);
                return fail(UploadError::CutShort { got }, &mut failure);
            };
            if digits.len() % 2 != 0 {
                return fail(UploadError::BadHex, &mut failure);
            }
            let n = digits.len() / 2;
            let Some(out) = bytes.get_mut(..n) else {
                return fail(UploadError::BadHex, &mut failure);
            };
            for (b, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
                let (Some(hi), Some(lo)) = (
                    pair.first().and_then(|&d| hex_digit(d)),
                    pair.get(1).and_then(|&d| hex_digit(d)),
                ) else {
                    return fail(UploadError::BadHex, &mut failure);
                };
                *b = hi << 4 | lo;
            }
            if got + n > total {
                return fail(
                    UploadError::Length {
                        want: total,
                        got: got + n,
                    },
                    &mut failure,
                );
            }
            for &b in out.iter() {
                if let Some(h) = head.get_mut(got) {
                    *h = b;
                }
                if got < body_end {
                    crc.update(core::slice::from_ref(&b));
                } else if let Some(t) = tail.get_mut(got - body_end) {
                    *t = b;
                }
                got += 1;
            }
            sink(out)?;
        }
        if got != total {
            return fail(UploadError::Length { want: total, got }, &mut failure);
        }
        let field = |at: usize, n: usize| head.get(at..at + n).unwrap_or(&[]);
        let le64 = |b: &[u8]| b.try_into().map(u64::from_le_bytes).unwrap_or(0);
        let le32 = |b: &[u8]| b.try_into().map(u32::from_le_bytes).unwrap_or(0);
        if field(0, 8) != snapshot::MAGIC || le32(field(60, 4)) as usize != total {
            return fail(UploadError::NotSnapshot, &mut failure);
        }
        if le64(field(24, 8)) != fingerprint {
            return fail(UploadError::ModelMismatch, &mut failure);
        }
        if crc.finish() != u32::from_le_bytes(tail) {
            return fail(UploadError::Corrupt, &mut failure);
        }
        Ok(())
    });
    match (saved, failure) {
        (_, Some(e)) => Err(e),
        (Ok(info), None) => Ok(info),
        (Err(_), None) => Err(UploadError::Store),
    }
}
