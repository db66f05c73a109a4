//! `SNAP`: the session as a runtime snapshot (`loglinear_runtime::snapshot`, the format
//! `loglinear generate --save-snapshot` writes), hex-encoded over the serial link, so a host can
//! resume the stream with `loglinear generate --resume FILE` (docs/serial-protocol.md,
//! *Snapshots*).

use embedded_io::Write;
use loglinear_runtime::snapshot::{self, SnapshotError};
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
