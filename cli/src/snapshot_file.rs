//! Session snapshots on the host: `generate --save-snapshot FILE` / `--resume FILE`.
//!
//! The bytes are the runtime's snapshot format (`loglinear_runtime::snapshot`), the same a
//! board sends with `SNAP`, so a stream can move between a board and the host. Files are
//! written atomically: a temporary file in the same folder, flushed to disk, then renamed over
//! the target, so a crash or power cut leaves the old snapshot or the new one, never a mix.

use loglinear_converter::model_source::ModelSource;
use loglinear_runtime::snapshot::{self, Fingerprint, Header};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Errors of snapshot files, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    #[error("cannot read snapshot {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write snapshot {path}: {source}")]
    Write {
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

/// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync of the folder).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SnapshotFileError> {
    let write_err = |source| SnapshotFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "snapshot".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        // The rename itself is durable once the folder is synced (not possible everywhere).
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(write_err)
}
