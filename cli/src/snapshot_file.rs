//! Session snapshots on the host: `generate --save-snapshot FILE` / `--resume FILE`.
//!
//! The bytes are the runtime's snapshot format (`loglinear_runtime::snapshot`), the same a
//! board sends with `SNAP`, so a stream can move between a board and the host. Files are
//! written atomically: a temporary file in the same folder, flushed to disk, then renamed over
//! the target, so a crash or power cut leaves the old snapshot or the new one, never a mix.

use loglinear_converter::model_source::ModelSource;
use loglinear_runtime::snapshot::{self, Fingerprint, Header};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Errors of snapshot files, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    #[error("cannot read snapshot {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("snapshot {path}: {error}")]
    Invalid {
        path: PathBuf,
        error: snapshot::SnapshotError,
    },
}

/// The model fingerprint snapshots carry: FNV-1a-64 of the GGUF file's bytes, or for a
/// checkpoint folder of `config.json` followed by `model.safetensors`.
pub fn fingerprint(path: &Path, source: &ModelSource) -> Result<u64, SnapshotFileError> {
    match source {
        ModelSource::Gguf(bytes) => Ok(snapshot::model_fingerprint(bytes.as_bytes())),
        ModelSource::Checkpoint(_) => {
            let mut f = Fingerprint::new();
            for name in ["config.json", "model.safetensors"] {
                let p = path.join(name);
                let read_err = |source| SnapshotFileError::Read {
                    path: p.clone(),
                    source,
                };
                let mut file = std::fs::File::open(&p).map_err(read_err)?;
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = file.read(&mut buf).map_err(read_err)?;
                    if n == 0 {
                        break;
                    }
                    f.update(&buf[..n]);
                }
            }
            Ok(f.finish())
        }
    }
}

/// Reads a snapshot file and checks it (magic, version, length, CRC, header).
pub fn read(path: &Path) -> Result<(Vec<u8>, Header), SnapshotFileError> {
    let bytes = std::fs::read(path).map_err(|source| SnapshotFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let header = snapshot::peek(&bytes).map_err(|error| SnapshotFileError::Invalid {
        path: path.to_path_buf(),
        error,
    })?;
    Ok((bytes, header))
}
