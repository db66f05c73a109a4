//! Every file the host tools write goes through [`write_atomic`]: a temporary file in the same
//! folder, written in full, synced, then renamed over the target. A failed write (a full disk,
//! a path under a regular file, an interrupted process) leaves the previous file as it was.
//! [`refuse_input_as_output`] stops a command from writing over one of its own inputs, however
//! the two paths are spelled.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an output file was not written. Every variant names the path the user gave.
#[derive(Debug, thiserror::Error)]
pub enum OutputFileError {
    /// The output's folder does not exist.
    #[error("cannot write {}: no such folder {}", path.display(), folder.display())]
    NoFolder {
        /// The output path.
        path: PathBuf,
        /// Its folder.
        folder: PathBuf,
    },
    /// The output's folder is a file.
    #[error("cannot write {}: {} is a file, not a folder", path.display(), folder.display())]
    NotAFolder {
        /// The output path.
        path: PathBuf,
        /// Its would-be folder.
        folder: PathBuf,
    },
    /// The output's folder does not take a new file (permissions, a read-only or full disk).
    #[error("cannot write {}: its folder {} does not take a new file ({})", path.display(), folder.display(), source.kind())]
    Folder {
        /// The output path.
        path: PathBuf,
        /// Its folder.
        folder: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Writing or syncing the temporary file failed (the output is untouched).
    #[error("cannot write {}: {source} (the file is unchanged)", path.display())]
    Write {
        /// The output path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The finished temporary file could not replace the output (the output is untouched).
    #[error("cannot replace {}: {source} (the file is unchanged)", path.display())]
    Replace {
        /// The output path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The output path is a folder.
    #[error("cannot write {}: it is a folder; give a file path", path.display())]
    IsFolder {
        /// The output path.
        path: PathBuf,
    },
    /// The output path is a device, a pipe or a socket: renaming a file over it would replace
    /// it (`/dev/null` among them, for root), and writing into it is not writing a file.
    #[error("cannot write {}: it is a device or a pipe, not a file; give a file path", path.display())]
    NotAFile {
        /// The output path.
        path: PathBuf,
    },
    /// The output is one of the command's inputs.
    #[error("the output {} is the input {}: give another output path", output.display(), input.display())]
    OutputIsInput {
        /// The output path as given.
        output: PathBuf,
        /// The input path as given.
        input: PathBuf,
    },
}

/// Writes `path` with what `fill` writes: into a temporary file in `path`'s folder, synced to
/// disk, then renamed over `path` and the folder synced. Nothing replaces `path` unless every
/// step succeeds.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputFileError> {
    stage_with(path, fill)?.commit()
}

/// [`write_atomic_with`] for a library that writes to a path of its own (an image encoder):
/// `fill` writes the file at the temporary path it is given, which ends as `path` does (the
/// library may choose its format by the extension). `fill`'s error stops the write and leaves
/// `path` as it was.
pub fn write_atomic_via<E: From<OutputFileError>>(
    path: &Path,
    fill: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    stage_via(path, fill)?.commit()?;
    Ok(())
}

/// An output written in full to a temporary file beside it, not yet in its place. A command
/// with several outputs stages them all, then commits them, so that a failure while making
/// any of them leaves every previous output as it was. Dropped without a commit, it removes
/// the temporary file.
pub struct StagedFile {
    tmp: tempfile::NamedTempFile,
    path: PathBuf,
    folder: PathBuf,
}

impl StagedFile {
    /// The path it will replace.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the temporary file over the output and syncs the folder.
    pub fn commit(self) -> Result<(), OutputFileError> {
        persist(self.tmp, &self.path, &self.folder)
    }
}

/// Stages `path` with what `fill` writes (see [`write_atomic_with`]).
pub fn stage_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<StagedFile, OutputFileError> {
    refuse_special(path)?;
    let folder = folder_of(path);
    let mut tmp = temporary_in(&folder, path, ".tmp")?;
    let write_err = |source| OutputFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        fill(&mut w).map_err(write_err)?;
        w.flush().map_err(write_err)?;
    }
    tmp.as_file().sync_all().map_err(write_err)?;
    Ok(StagedFile {
        tmp,
        path: path.to_path_buf(),
        folder,
    })
}

/// Stages bytes already in memory.
pub fn stage(path: &Path, bytes: &[u8]) -> Result<StagedFile, OutputFileError> {
    stage_with(path, |w| w.write_all(bytes))
}

/// Stages `path` through a library that writes a path of its own (see [`write_atomic_via`]).
pub fn stage_via<E: From<OutputFileError>>(
    path: &Path,
    fill: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<StagedFile, E> {
    refuse_special(path)?;
    let folder = folder_of(path);
    let suffix = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let tmp = temporary_in(&folder, path, &suffix)?;
    fill(tmp.path())?;
    let synced = std::fs::File::open(tmp.path()).and_then(|f| f.sync_all());
    synced.map_err(|source| OutputFileError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(StagedFile {
        tmp,
        path: path.to_path_buf(),
        folder,
    })
}

/// Commits every staged file, in order.
pub fn commit_all(staged: Vec<StagedFile>) -> Result<(), OutputFileError> {
    staged.into_iter().try_for_each(StagedFile::commit)
}

/// A temporary file in `path`'s folder, or why the folder does not take one.
fn temporary_in(
    folder: &Path,
    path: &Path,
    suffix: &str,
) -> Result<tempfile::NamedTempFile, OutputFileError> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(".loglinear-").suffix(suffix);
    #[cfg(unix)]
    builder.permissions(permissions_for(path));
    builder.tempfile_in(folder).map_err(|source| {
        let (path, folder) = (path.to_path_buf(), folder.to_path_buf());
        // The first existing ancestor tells a missing folder from one under a file.
        match folder.ancestors().find(|a| a.exists()) {
            Some(a) if a.is_file() => OutputFileError::NotAFolder {
                path,
                folder: a.to_path_buf(),
            },
            _ if !folder.exists() => OutputFileError::NoFolder { path, folder },
            _ => OutputFileError::Folder {
                path,
                folder,
                source,
            },
        }
    })
}

/// The permissions the file at `path` is written with: those of the file it replaces, else
/// what `File::create` gives a new file (read and write for all, less the umask). tempfile's
/// own default is owner-only, right for a secret and wrong for a model file.
#[cfg(unix)]
fn permissions_for(path: &Path) -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m.permissions(),
        // The mode given to open(2), which the umask then narrows.
        _ => std::fs::Permissions::from_mode(0o666),
    }
}

/// The folder a new file at `path` goes into.
fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Renames the finished temporary file over `path` and syncs the folder: the rename is durable
/// once the folder is synced. Not every system can sync a folder, and the file itself is
/// complete either way.
fn persist(
    tmp: tempfile::NamedTempFile,
    path: &Path,
    folder: &Path,
) -> Result<(), OutputFileError> {
    tmp.persist(path).map_err(|e| OutputFileError::Replace {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    if let Ok(d) = std::fs::File::open(folder) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Checks, before any long work, that `path` can be written later: it is not a folder, a
/// device or a pipe, and its folder takes a new file (one is created there and removed).
pub fn check_writable(path: &Path) -> Result<(), OutputFileError> {
    if path.is_dir() {
        return Err(OutputFileError::IsFolder {
            path: path.to_path_buf(),
        });
    }
    refuse_special(path)?;
    temporary_in(&folder_of(path), path, ".tmp").map(drop)
}

/// Refuses an existing `path` (links followed) that is neither a regular file nor a folder.
fn refuse_special(path: &Path) -> Result<(), OutputFileError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => Err(OutputFileError::NotAFile {
            path: path.to_path_buf(),
        }),
        _ => Ok(()),
    }
}

/// Checks, before any long work, that the folder `path` can be written later: an existing
/// folder that takes a new file, or a missing one whose nearest existing ancestor is a folder
/// that takes one (the folders are made then).
pub fn check_folder_writable(path: &Path) -> Result<(), OutputFileError> {
    let existing = path
        .ancestors()
        .find(|a| !a.as_os_str().is_empty() && a.exists())
        .unwrap_or(Path::new("."));
    if existing.is_file() {
        return Err(OutputFileError::NotAFolder {
            path: path.to_path_buf(),
            folder: existing.to_path_buf(),
        });
    }
    temporary_in(existing, path, ".tmp").map(drop)
}

/// [`write_atomic_with`] for bytes already in memory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutputFileError> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Refuses `output` when it is the same file as one of `inputs`: the same path by another
/// spelling (`dir/../file`), a symbolic link or a hard link. An input that is a folder (a
/// checkpoint) counts as all the files directly in it. Inputs that do not exist and an output
/// that does not exist yet cannot be the same file.
pub fn refuse_input_as_output(output: &Path, inputs: &[&Path]) -> Result<(), OutputFileError> {
    for input in inputs {
        if same_file::is_same_file(output, input).unwrap_or(false) {
            return Err(OutputFileError::OutputIsInput {
                output: output.to_path_buf(),
                input: input.to_path_buf(),
            });
        }
        // A checkpoint input is a folder: writing inside it is writing over it.
        if input.is_dir() {
            let inside = output
                .parent()
                .is_some_and(|p| same_file::is_same_file(p, input).unwrap_or(false));
            let name_taken = output
                .file_name()
                .is_some_and(|n| input.join(n).exists() && inside);
            if name_taken {
                return Err(OutputFileError::OutputIsInput {
                    output: output.to_path_buf(),
                    input: input.join(output.file_name().unwrap_or_default()),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "loglinear-output-file-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[cfg(unix)]
    #[test]
    fn new_files_get_create_permissions_and_replaced_files_keep_theirs() {
        use std::os::unix::fs::PermissionsExt;
        let d = folder("mode");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let reference = d.join("reference");
        std::fs::File::create(&reference).unwrap();
        let out = d.join("out.gguf");
        write_atomic(&out, b"new").unwrap();
        assert_eq!(mode(&out), mode(&reference), "as File::create makes it");
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&out, b"again").unwrap();
        assert_eq!(mode(&out), 0o640, "a replaced file keeps its mode");
        std::fs::remove_dir_all(&d).ok();
    }

    fn leftovers(d: &Path) -> Vec<String> {
        std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary() {
        let d = folder("replace");
        let out = d.join("out.bin");
        std::fs::write(&out, b"old").unwrap();
        write_atomic(&out, b"new contents").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new contents");
        assert!(leftovers(&d).is_empty());
    }

    #[test]
    fn a_failed_write_keeps_the_previous_file() {
        let d = folder("failed");
        let out = d.join("out.bin");
        std::fs::write(&out, b"old").unwrap();
        let err = write_atomic_with(&out, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(matches!(err, OutputFileError::Write { .. }), "{err}");
        assert!(err.to_string().contains("out.bin"), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), b"old");
        assert!(leftovers(&d).is_empty());
    }

    #[test]
    fn a_path_writer_gets_a_temporary_path_with_the_same_extension() {
        let d = folder("via");
        let out = d.join("chart.png");
        std::fs::write(&out, b"old").unwrap();
        write_atomic_via(&out, |tmp: &Path| -> Result<(), OutputFileError> {
            assert_eq!(tmp.extension().unwrap(), "png");
            assert_ne!(tmp, out);
            std::fs::write(tmp, b"new").unwrap();
            Ok(())
        })
        .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        let failed = write_atomic_via(&out, |tmp: &Path| {
            std::fs::write(tmp, b"half").unwrap();
            Err(OutputFileError::Write {
                path: out.clone(),
                source: std::io::Error::other("encoder failed"),
            })
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&out).unwrap(), b"new");
        let left: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn a_path_under_a_regular_file_is_named() {
        let d = folder("under-file");
        let file = d.join("plain.txt");
        std::fs::write(&file, b"keep").unwrap();
        let err = write_atomic(&file.join("out.bin"), b"x").unwrap_err();
        assert!(matches!(err, OutputFileError::NotAFolder { .. }), "{err}");
        assert!(err.to_string().contains("plain.txt is a file"), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    }

    #[test]
    fn writability_is_checked_without_leaving_a_file() {
        let d = folder("check");
        assert!(check_writable(&d.join("new.bin")).is_ok());
        assert!(matches!(
            check_writable(&d),
            Err(OutputFileError::IsFolder { .. })
        ));
        // A device: renaming over it would replace it.
        #[cfg(unix)]
        {
            let null = Path::new("/dev/null");
            let err = check_writable(null).unwrap_err();
            assert!(matches!(err, OutputFileError::NotAFile { .. }), "{err}");
            let err = write_atomic(null, b"x").unwrap_err();
            assert!(matches!(err, OutputFileError::NotAFile { .. }), "{err}");
        }
        let err = check_writable(&d.join("missing").join("new.bin")).unwrap_err();
        assert!(matches!(err, OutputFileError::NoFolder { .. }), "{err}");
        let want = format!("no such folder {}", d.join("missing").display());
        assert!(err.to_string().ends_with(&want), "{err}");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
    }

    #[test]
    fn the_input_by_any_spelling_is_refused() {
        let d = folder("same");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let input = d.join("model.gguf");
        std::fs::write(&input, b"model").unwrap();
        let other = d.join("sub").join("..").join("model.gguf");
        assert!(refuse_input_as_output(&other, &[&input]).is_err());
        #[cfg(unix)]
        {
            let link = d.join("link.gguf");
            std::os::unix::fs::symlink(&input, &link).unwrap();
            assert!(refuse_input_as_output(&link, &[&input]).is_err());
        }
        let hard = d.join("hard.gguf");
        std::fs::hard_link(&input, &hard).unwrap();
        assert!(refuse_input_as_output(&hard, &[&input]).is_err());
        // A new path, or another existing file, is fine.
        assert!(refuse_input_as_output(&d.join("new.gguf"), &[&input]).is_ok());
        std::fs::write(d.join("else.gguf"), b"x").unwrap();
        assert!(refuse_input_as_output(&d.join("else.gguf"), &[&input]).is_ok());
        // A file of an input folder is that input's.
        std::fs::write(d.join("sub").join("model.safetensors"), b"w").unwrap();
        let inside = d.join("sub").join("model.safetensors");
        assert!(refuse_input_as_output(&inside, &[&d.join("sub")]).is_err());
        assert_eq!(std::fs::read(&input).unwrap(), b"model");
    }
}
