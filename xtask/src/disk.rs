//! Disk space of a CI run: `cargo xtask ci` on a clean checkout peaks at about 15 GB of build
//! output, and a CI machine's disk may have little more free. Files that no later stage reads
//! are removed in CI once their stage has passed (test executables after the test run, the private
//! firmware folders of the QEMU and kernel-check stages), and the space left is printed, so
//! that a build that fails for want of space says so next to its error.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::tasks;

/// Runs `cmd` (a `cargo test ... --no-run`) with JSON messages and returns the test
/// executables it built; diagnostics still go to stderr, rendered.
pub fn built_test_executables(cmd: &mut Command) -> anyhow::Result<Vec<PathBuf>> {
    let out = cmd
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("starting {}", tasks::describe(cmd)))?;
    anyhow::ensure!(
        out.status.success(),
        "{} failed ({})",
        tasks::describe(cmd),
        out.status
    );
    Ok(test_executables(&String::from_utf8_lossy(&out.stdout)))
}

/// The `executable` of every `compiler-artifact` message with a test profile.
fn test_executables(messages: &str) -> Vec<PathBuf> {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["profile"]["test"] == true)
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .collect()
}

/// In a CI run (`CI` set, as scripts/test.sh is run there): removes `paths` (files or folders;
/// missing ones are skipped) and prints what that freed and the space left on the disk of
/// `target_dir`. Elsewhere they are kept, so that the next local run rebuilds nothing.
pub fn free(what: &str, paths: &[PathBuf], target_dir: &Path) -> anyhow::Result<()> {
    if std::env::var_os("CI").is_none() {
        println!("disk: {what} kept (CI unset); {}", space_left(target_dir));
        return Ok(());
    }
    remove(what, paths, target_dir)
}

/// [`free`] whatever the environment.
fn remove(what: &str, paths: &[PathBuf], target_dir: &Path) -> anyhow::Result<()> {
    let mut freed = 0u64;
    for path in paths {
        freed += size_of(path);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
        }
    }
    println!(
        "disk: removed {what} ({} MB); {}",
        freed / 1_000_000,
        space_left(target_dir)
    );
    Ok(())
}

/// "N MB free on the disk of PATH", from `df`, or why not.
pub fn space_left(path: &Path) -> String {
    let out = Command::new("df").arg("-Pk").arg(path).output();
    let kb = out.ok().and_then(|o| {
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        // `df -P`: a header, then `filesystem blocks used available capacity mount`.
        text.lines()
            .nth(1)?
            .split_whitespace()
            .nth(3)?
            .parse::<u64>()
            .ok()
    });
    match kb {
        Some(kb) => format!("{} MB free on the disk of {}", kb / 1000, path.display()),
        None => format!(
            "df could not tell the space free on the disk of {}",
            path.display()
        ),
    }
}

/// Bytes under `path` (a file's size, a folder's files summed; links not followed).
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| size_of(&e.path()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_test_artifacts_count() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","profile":{"test":true},"executable":"/t/deps/a-1"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","profile":{"test":false},"executable":"/t/loglinear"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","profile":{"test":true},"executable":null}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
            "\nnot json\n",
        );
        assert_eq!(test_executables(messages), [PathBuf::from("/t/deps/a-1")]);
    }

    #[test]
    fn remove_removes_files_and_folders_and_skips_missing_ones() {
        let dir = std::env::temp_dir().join(format!("xtask-disk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/f"), [0u8; 100]).unwrap();
        std::fs::write(dir.join("g"), [0u8; 10]).unwrap();
        assert_eq!(size_of(&dir), 110);
        remove(
            "test files",
            &[dir.join("sub"), dir.join("g"), dir.join("missing")],
            &dir,
        )
        .unwrap();
        assert!(!dir.join("sub").exists() && !dir.join("g").exists());
        std::fs::remove_dir(&dir).unwrap();
        assert!(space_left(Path::new("/")).contains("MB free"));
    }
}
