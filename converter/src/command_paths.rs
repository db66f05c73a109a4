//! Every host command declares, in one place, each path it reads and each path it writes,
//! whichever flag names it ([`CommandPaths`]). [`CommandPaths::check`] runs before any work and
//! refuses:
//!
//! * an output that is an input or another output, by any spelling: the canonical path, a
//!   symbolic link, or the same device and inode (a hard link); a file an output folder would
//!   hold counts as that folder's;
//! * an output whose folder does not exist or does not take a new file;
//! * an input that does not exist, is not the kind of thing its flag reads, or cannot be read.
//!
//! Each refusal names the flag and the path as the user gave them. Outputs are then written
//! only through [`crate::output_file`], after the work, so a command that fails
//! leaves every previous output as it was.

use std::path::{Path, PathBuf};

use crate::output_file::{self, OutputFileError};

/// What an input path must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// A regular file (a GGUF model, a text, a snapshot).
    File,
    /// A folder (a checkpoint).
    Folder,
    /// A GGUF file or a checkpoint folder.
    Model,
    /// A device the command opens with settings of its own (a serial port): declared so that
    /// no output is written over it, and checked by the code that opens it, which knows what
    /// to suggest (`--list-ports`).
    Device,
}

/// What an output path becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writes {
    /// One file, written whole through a temporary file.
    File,
    /// A folder, created when missing (with missing folders above it), holding these entries.
    Folder {
        /// The files and folders the command writes directly inside it.
        holds: &'static [&'static str],
    },
}

/// One declared path: the flag that named it, and the path as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared<K> {
    /// The flag, spelled as the user sees it in `--help` (`--text`, or `MODEL` for a
    /// positional).
    pub flag: String,
    /// The path as given.
    pub path: PathBuf,
    /// What it is.
    pub kind: K,
}

/// Every path one command reads and writes.
#[derive(Clone, Debug, Default)]
pub struct CommandPaths {
    /// What it reads.
    pub inputs: Vec<Declared<Reads>>,
    /// What it writes.
    pub outputs: Vec<Declared<Writes>>,
}

/// Why a command's paths were refused. Every variant names the flag and the path given.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// An input does not exist.
    #[error("{flag} {}: no such {what}", path.display())]
    Missing {
        /// The flag.
        flag: String,
        /// The path.
        path: PathBuf,
        /// "file", "folder" or "file or folder".
        what: &'static str,
    },
    /// An input is a folder where a file is read, or the other way round.
    #[error("{flag} {}: {found}, not a {wanted}", path.display())]
    WrongKind {
        /// The flag.
        flag: String,
        /// The path.
        path: PathBuf,
        /// What is there ("a folder", "a file").
        found: &'static str,
        /// What the flag reads.
        wanted: &'static str,
    },
    /// An input exists but cannot be opened.
    #[error("{flag} {}: cannot be read ({source})", path.display())]
    Unreadable {
        /// The flag.
        flag: String,
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// An output is one of the inputs.
    #[error(
        "{output_flag} {}: that is the input {input_flag} {}; writing it would destroy it: \
         give another path (nothing was written)",
        output.display(),
        input.display()
    )]
    OutputIsInput {
        /// The output's flag.
        output_flag: String,
        /// The output path.
        output: PathBuf,
        /// The input's flag.
        input_flag: String,
        /// The input path.
        input: PathBuf,
    },
    /// Two outputs are the same file.
    #[error(
        "{first_flag} {} and {second_flag} {} are the same file: give each its own path \
         (nothing was written)",
        first.display(),
        second.display()
    )]
    OutputsCollide {
        /// The first output's flag.
        first_flag: String,
        /// Its path.
        first: PathBuf,
        /// The second output's flag.
        second_flag: String,
        /// Its path.
        second: PathBuf,
    },
    /// An output cannot be written.
    #[error("{flag}: {source}")]
    Unwritable {
        /// The output's flag.
        flag: String,
        /// Why.
        source: OutputFileError,
    },
}

impl CommandPaths {
    /// No paths.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares an input, if given.
    pub fn reads(mut self, flag: &str, path: Option<&Path>, kind: Reads) -> Self {
        if let Some(path) = path {
            self.inputs.push(Declared {
                flag: flag.to_string(),
                path: path.to_path_buf(),
                kind,
            });
        }
        self
    }

    /// Declares an output, if given.
    pub fn writes(mut self, flag: &str, path: Option<&Path>, kind: Writes) -> Self {
        if let Some(path) = path {
            self.outputs.push(Declared {
                flag: flag.to_string(),
                path: path.to_path_buf(),
                kind,
            });
        }
        self
    }

    /// Every check of the module's documentation, in order: inputs, then outputs against
    /// inputs and against each other, then each output's folder.
    pub fn check(&self) -> Result<(), PathError> {
        for input in &self.inputs {
            check_input(input)?;
        }
        for (i, output) in self.outputs.iter().enumerate() {
            for input in &self.inputs {
                if overlaps(output, &input.path) {
                    return Err(PathError::OutputIsInput {
                        output_flag: output.flag.clone(),
                        output: output.path.clone(),
                        input_flag: input.flag.clone(),
                        input: input.path.clone(),
                    });
                }
            }
            for other in &self.outputs[..i] {
                if overlaps(output, &other.path) || overlaps(other, &output.path) {
                    return Err(PathError::OutputsCollide {
                        first_flag: other.flag.clone(),
                        first: other.path.clone(),
                        second_flag: output.flag.clone(),
                        second: output.path.clone(),
                    });
                }
            }
        }
        for output in &self.outputs {
            check_output(output).map_err(|source| PathError::Unwritable {
                flag: output.flag.clone(),
                source,
            })?;
        }
        Ok(())
    }
}

fn check_input(input: &Declared<Reads>) -> Result<(), PathError> {
    if input.kind == Reads::Device {
        return Ok(());
    }
    let (flag, path) = (input.flag.clone(), input.path.clone());
    let what = match input.kind {
        Reads::File => "file",
        Reads::Folder => "folder",
        Reads::Model => "model file or checkpoint folder",
        Reads::Device => "device",
    };
    let meta = match std::fs::metadata(&input.path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PathError::Missing { flag, path, what })
        }
        Err(source) => return Err(PathError::Unreadable { flag, path, source }),
    };
    let wrong = |found, wanted| PathError::WrongKind {
        flag: input.flag.clone(),
        path: input.path.clone(),
        found,
        wanted,
    };
    match input.kind {
        Reads::File if meta.is_dir() => return Err(wrong("a folder", "file")),
        Reads::Folder if !meta.is_dir() => return Err(wrong("a file", "folder")),
        _ => {}
    }
    // Opening it is the one sure test of permission.
    let opened = match meta.is_dir() {
        true => std::fs::read_dir(&input.path).map(drop),
        false => std::fs::File::open(&input.path).map(drop),
    };
    opened.map_err(|source| PathError::Unreadable { flag, path, source })
}

fn check_output(output: &Declared<Writes>) -> Result<(), OutputFileError> {
    match output.kind {
        Writes::File => output_file::check_writable(&output.path),
        Writes::Folder { .. } => output_file::check_folder_writable(&output.path),
    }
}

/// Whether writing `output` would write `path`, or inside it: the same file or folder, a file
/// of an output folder's entries at `path` or above it, or an output file inside the folder
/// `path` where that folder already holds the name.
fn overlaps(output: &Declared<Writes>, path: &Path) -> bool {
    if same_place(&output.path, path) {
        return true;
    }
    match output.kind {
        // An output folder's entries: `path` is one of them, or inside one.
        Writes::Folder { holds } => {
            let at = place(path);
            holds.iter().any(|entry| {
                let entry = output.path.join(entry);
                let entry_at = place(&entry);
                at.ancestors().any(|a| a == entry_at) || same_place(&entry, path)
            })
        }
        Writes::File => output_file::refuse_input_as_output(&output.path, &[path]).is_err(),
    }
}

/// Whether `a` and `b` name the same file or folder: the same device and inode where both
/// exist (hard and symbolic links included), else the same absolute place.
fn same_place(a: &Path, b: &Path) -> bool {
    same_file::is_same_file(a, b).unwrap_or(false) || place(a) == place(b)
}

/// `path` made absolute with its symbolic links resolved as far as it exists: the canonical
/// form of its longest existing ancestor, joined with the rest.
fn place(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    for existing in absolute.ancestors() {
        if let Ok(canonical) = std::fs::canonicalize(existing) {
            let rest = absolute.strip_prefix(existing).unwrap_or(Path::new(""));
            return normalize(&canonical.join(rest));
        }
    }
    normalize(&absolute)
}

/// `.` and `..` taken out lexically (only below the canonical part, where no link is left).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "loglinear-command-paths-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn inputs_must_exist_and_be_what_their_flag_reads() {
        let d = folder("inputs");
        let file = d.join("text.txt");
        std::fs::write(&file, b"text").unwrap();
        let check = |path: &Path, kind| CommandPaths::new().reads("--x", Some(path), kind).check();
        assert!(check(&file, Reads::File).is_ok());
        assert!(check(&d, Reads::Model).is_ok());
        let e = check(&d.join("nope"), Reads::File).unwrap_err();
        assert!(e.to_string().starts_with("--x ") && e.to_string().ends_with("no such file"));
        let e = check(&d, Reads::File).unwrap_err().to_string();
        assert!(e.ends_with("a folder, not a file"), "{e}");
        let e = check(&file, Reads::Folder).unwrap_err().to_string();
        assert!(e.ends_with("a file, not a folder"), "{e}");
    }

    #[test]
    fn an_output_is_refused_over_an_input_or_another_output_by_any_spelling() {
        let d = folder("overlap");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let input = d.join("model.gguf");
        std::fs::write(&input, b"model").unwrap();
        let hard = d.join("hard.gguf");
        std::fs::hard_link(&input, &hard).unwrap();
        let mut spellings = vec![d.join("sub/../model.gguf"), hard];
        #[cfg(unix)]
        {
            let link = d.join("link.gguf");
            std::os::unix::fs::symlink(&input, &link).unwrap();
            spellings.push(link);
        }
        for out in &spellings {
            let e = CommandPaths::new()
                .reads("--model", Some(&input), Reads::File)
                .writes("--save", Some(out), Writes::File)
                .check()
                .unwrap_err();
            assert!(matches!(e, PathError::OutputIsInput { .. }), "{e}");
            assert!(e.to_string().contains("--save") && e.to_string().contains("--model"));
        }
        // Two outputs, neither existing yet, by two spellings of one path.
        let e = CommandPaths::new()
            .writes("--a", Some(&d.join("new.csv")), Writes::File)
            .writes("--b", Some(&d.join("sub/../new.csv")), Writes::File)
            .check()
            .unwrap_err();
        assert!(matches!(e, PathError::OutputsCollide { .. }), "{e}");
        // An output folder's entries: a file it will write, and one inside a folder it holds.
        let run = d.join("run");
        std::fs::create_dir_all(run.join("checkpoint")).unwrap();
        std::fs::write(run.join("train_log.csv"), b"log").unwrap();
        std::fs::write(run.join("checkpoint/config.json"), b"{}").unwrap();
        let holds = &["checkpoint", "train_log.csv"];
        for inside in ["train_log.csv", "checkpoint/config.json", "checkpoint"] {
            let e = CommandPaths::new()
                .reads("--data", Some(&run.join(inside)), Reads::Model)
                .writes("--output", Some(&run), Writes::Folder { holds })
                .check()
                .unwrap_err();
            assert!(
                matches!(e, PathError::OutputIsInput { .. }),
                "{inside}: {e}"
            );
        }
        // Another file in that folder, or a new output beside the input, is fine.
        std::fs::write(run.join("notes.txt"), b"n").unwrap();
        CommandPaths::new()
            .reads("--data", Some(&run.join("notes.txt")), Reads::File)
            .writes("--output", Some(&run), Writes::Folder { holds })
            .writes("--export", Some(&d.join("m.gguf")), Writes::File)
            .check()
            .unwrap();
        assert_eq!(std::fs::read(&input).unwrap(), b"model");
    }

    #[test]
    fn outputs_need_a_folder_that_takes_a_file() {
        let d = folder("outputs");
        let e = CommandPaths::new()
            .writes("--export", Some(&d.join("nope/x.gguf")), Writes::File)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--export: cannot write") && e.contains("no such folder"),
            "{e}"
        );
        let file = d.join("plain");
        std::fs::write(&file, b"keep").unwrap();
        let holds = &["checkpoint"];
        let e = CommandPaths::new()
            .writes("--output", Some(&file), Writes::Folder { holds })
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a file"), "{e}");
        // A missing output folder is created later, below an existing one.
        CommandPaths::new()
            .writes("--output", Some(&d.join("a/b")), Writes::Folder { holds })
            .check()
            .unwrap();
        assert!(!d.join("a").exists(), "the check creates nothing");
    }
}
