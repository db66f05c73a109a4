//! What `cargo xtask count` and `cargo xtask kernel-check` share: QEMU's `insn` TCG plugin,
//! which counts executed instructions exactly, running one request under QEMU with a time
//! limit and its output in files, and the board's model file.
//!
//! The plugin is built once into `target/qemu-plugin/libinsn.so` from Debian's QEMU source
//! package (`apt-get source --download-only qemu/bookworm-backports`; only the upstream tarball
//! is used: `include/qemu/qemu-plugin.h` and `tests/tcg/plugins/insn.c`). QEMU's files are
//! GPL-2.0-or-later and stay in target/ (see ../shared/spec/platform-notes.md, "Counting
//! instructions under QEMU"). It needs a deb-src entry for bookworm-backports (added if
//! missing), libglib2.0-dev and pkg-config (installed if missing), and gcc.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::process::{run_with_input, Ended, Stderr};
use crate::system;
use crate::tasks::{describe, output, run, runner_command};

/// The deb-src entry written when no source entry for bookworm-backports exists.
const BACKPORTS_SRC: &str = "/etc/apt/sources.list.d/bookworm-backports-src.sources";

/// The `insn` plugin's arguments: an inline add per instruction, no callback.
pub const INLINE: &str = ",inline=on";

/// The plugin's folder under the target folder.
pub fn plugin_dir(target_dir: &Path) -> PathBuf {
    target_dir.join("qemu-plugin")
}

/// `dir/libinsn.so`, built first if it is not there; returns its path.
pub fn ensure_plugin(dir: &Path) -> anyhow::Result<PathBuf> {
    let plugin = dir.join("libinsn.so");
    if plugin.is_file() {
        return Ok(plugin);
    }
    let src = qemu_sources(dir)?;
    compile(
        &src,
        &src.join("tests/tcg/plugins/insn.c"),
        &plugin,
        "QEMU's insn plugin",
    )?;
    Ok(plugin)
}

/// `dir/libpc_histogram.so`, the per-address counter of `count --breakdown`
/// (`xtask/plugins/pc_histogram.c`), built first if it is missing or older than its source;
/// returns its path.
pub fn ensure_histogram_plugin(dir: &Path) -> anyhow::Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/pc_histogram.c");
    let plugin = dir.join("libpc_histogram.so");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(built), Some(written)) = (modified(&plugin), modified(&source)) {
        if built >= written {
            return Ok(plugin);
        }
    }
    let src = qemu_sources(dir)?;
    compile(&src, &source, &plugin, "the pc_histogram plugin")?;
    Ok(plugin)
}

/// The folder `dir/src` holding `include/qemu/qemu-plugin.h` and `tests/tcg/plugins/insn.c`
/// from QEMU's upstream tarball (downloaded first if needed), with glib's headers installed.
fn qemu_sources(dir: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let has_glib = Command::new("pkg-config")
        .args(["--exists", "glib-2.0"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_glib {
        run(system::as_root(&["env"])?
            .args([
                "DEBIAN_FRONTEND=noninteractive",
                "apt-get",
                "install",
                "-y",
                "-q",
            ])
            .args(["--no-install-recommends", "libglib2.0-dev", "pkg-config"])
            .stdout(Stdio::null()))
        .context("installing libglib2.0-dev for the QEMU plugins")?;
    }
    let src = dir.join("src");
    let wanted = ["include/qemu/qemu-plugin.h", "tests/tcg/plugins/insn.c"];
    if wanted.iter().all(|f| src.join(f).is_file()) {
        return Ok(src);
    }
    let tarball = match find_tarball(dir)? {
        Some(t) => t,
        None => download_tarball(dir)?,
    };
    if src.exists() {
        std::fs::remove_dir_all(&src).with_context(|| format!("removing {}", src.display()))?;
    }
    std::fs::create_dir_all(&src).with_context(|| format!("creating {}", src.display()))?;
    run(Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&src)
        .args(["--strip-components=1", "--wildcards"])
        .args(wanted.map(|f| format!("*/{f}"))))
    .context("unpacking the plugin's sources from QEMU's tarball")?;
    eprintln!(
        "unpacked QEMU's plugin header from {}",
        tarball.file_name().unwrap_or_default().to_string_lossy()
    );
    Ok(src)
}

/// Compiles the plugin `source` against the header in `src` into `plugin` (through a temporary
/// file); `what` names it in messages.
fn compile(src: &Path, source: &Path, plugin: &Path, what: &str) -> anyhow::Result<()> {
    let glib = output(Command::new("pkg-config").args(["--cflags", "glib-2.0"]))?;
    let tmp = plugin.with_extension("so.tmp");
    run(Command::new("gcc")
        .args(["-O2", "-shared", "-fPIC"])
        .arg(format!("-I{}", src.join("include/qemu").display()))
        .args(glib.split_whitespace())
        .arg("-o")
        .arg(&tmp)
        .arg(source))
    .with_context(|| format!("compiling {what}"))?;
    std::fs::rename(&tmp, plugin).with_context(|| format!("writing {}", plugin.display()))?;
    eprintln!("built {} from {}", plugin.display(), source.display());
    Ok(())
}

/// QEMU's upstream tarball (`qemu_*.orig.tar.*`) in `dir`, if one was downloaded.
fn find_tarball(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| is_tarball(&n.to_string_lossy()))
        })
        .collect();
    found.sort();
    Ok(found.into_iter().next())
}

/// Whether a file name is that of QEMU's upstream tarball.
fn is_tarball(name: &str) -> bool {
    name.starts_with("qemu_") && name.contains(".orig.tar.")
}

/// Downloads QEMU's source package from bookworm-backports into `dir` (adding a deb-src entry
/// first if apt has none) and returns the upstream tarball.
fn download_tarball(dir: &Path) -> anyhow::Result<PathBuf> {
    let sources = apt_source_files();
    if needs_deb_src(&sources) {
        let uri = std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources")
            .ok()
            .and_then(|text| debian_uri(&text))
            .unwrap_or_else(|| "http://deb.debian.org/debian".to_string());
        let entry = deb_src_entry(&uri);
        let mut tee = system::as_root(&["tee"])?;
        tee.arg(BACKPORTS_SRC)
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        let mut child = tee
            .spawn()
            .with_context(|| format!("starting {}", describe(&tee)))?;
        child
            .stdin
            .take()
            .context("tee has no stdin")?
            .write_all(entry.as_bytes())
            .with_context(|| format!("writing {BACKPORTS_SRC}"))?;
        let status = child
            .wait()
            .with_context(|| format!("waiting for {}", describe(&tee)))?;
        if !status.success() {
            bail!("{} failed ({status})", describe(&tee));
        }
        eprintln!("added {BACKPORTS_SRC} ({uri})");
    }
    run(system::as_root(&["env"])?
        .args(["DEBIAN_FRONTEND=noninteractive", "apt-get", "update", "-q"])
        .stdout(Stdio::null()))
    .context("apt-get update for QEMU's source package")?;
    // Only the upstream tarball is used; some mirrors lack the .dsc or .debian.tar.xz, so a
    // failure counts only if the tarball did not arrive.
    let log_path = dir.join("apt-source.log");
    let log =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .with_context(|| format!("opening {}", log_path.display()))?;
    let mut apt = Command::new("apt-get");
    apt.args(["source", "--download-only", "qemu/bookworm-backports"])
        .current_dir(dir)
        .stdout(log)
        .stderr(log_err);
    let status = apt
        .status()
        .with_context(|| format!("starting {}", describe(&apt)))?;
    if let Some(tarball) = find_tarball(dir)? {
        return Ok(tarball);
    }
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    bail!(
        "apt-get source qemu/bookworm-backports ({status}) brought no qemu_*.orig.tar.* into {}: \
         {} (full log: {})",
        dir.display(),
        last_lines(&text, 3),
        log_path.display()
    )
}

/// Every apt source list: `/etc/apt/sources.list` and the files under
/// `/etc/apt/sources.list.d/`, with their text (unreadable ones left out).
fn apt_source_files() -> Vec<(PathBuf, String)> {
    let mut paths = vec![PathBuf::from("/etc/apt/sources.list")];
    let mut dirs = vec![PathBuf::from("/etc/apt/sources.list.d")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                paths.push(path);
            }
        }
    }
    paths
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect()
}

/// Whether apt lacks a source entry for bookworm-backports: no list names the suite, or none
/// of the lists that name it has a deb-src line.
fn needs_deb_src(sources: &[(PathBuf, String)]) -> bool {
    !sources
        .iter()
        .filter(|(_, text)| text.contains("bookworm-backports"))
        .any(|(_, text)| text.contains("deb-src"))
}

/// The first `URIs:` of a deb822 `debian.sources` file.
fn debian_uri(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("URIs:"))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string)
}

/// The deb822 deb-src entry for bookworm-backports from the mirror `uri`.
fn deb_src_entry(uri: &str) -> String {
    format!(
        "Types: deb-src\nURIs: {uri}\nSuites: bookworm-backports\nComponents: main\n\
         Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
}

/// Runs `cmd` with `input` on its standard input (then closed) and its standard output in the
/// file `stdout`, killing it after `timeout`. Returns its exit status; a timeout is an error
/// that names the board and the output files.
pub fn run_logged(
    board: &str,
    cmd: &mut Command,
    input: &str,
    stdout: &Path,
    stderr: Stderr<'_>,
    timeout: Duration,
) -> anyhow::Result<ExitStatus> {
    let files = match stderr {
        Stderr::File(path) => format!("{} and {}", stdout.display(), path.display()),
        _ => stdout.display().to_string(),
    };
    let (ended, _) = run_with_input(cmd, input.as_bytes(), stdout, stderr, timeout, false)
        .with_context(|| format!("{board}: running {}", describe(cmd)))?;
    match ended {
        Ended::Exited(status) => Ok(status),
        Ended::TimedOut(_) => bail!(
            "{board}: {} timed out after {} s (QEMU_TIMEOUT / --qemu-timeout) on `{}`; its \
             output is in {files}",
            describe(cmd),
            timeout.as_secs(),
            input.trim_end().replace('\n', "; ")
        ),
    }
}

/// One request run under the plugin.
pub struct Counted<'a> {
    /// The board, for messages.
    pub board: &'a str,
    /// Its `runner` line from board.toml.
    pub runner: &'a str,
    /// The firmware image.
    pub elf: &'a Path,
    /// The plugin library.
    pub plugin: &'a Path,
    /// The plugin's arguments, each after a comma (`,inline=on` for `insn`).
    pub plugin_args: &'a str,
    /// The file of QEMU's standard output (the firmware's replies).
    pub stdout: &'a Path,
    /// The file of QEMU's standard error (the firmware's log and the plugin's count).
    pub stderr: &'a Path,
    /// The time limit of the run.
    pub timeout: Duration,
}

impl Counted<'_> {
    /// Runs `request` under `-icount shift=0 -plugin PLUGIN,ARGS -d plugin` and returns the
    /// plugin's `total insns`. The run must succeed and print a line for which
    /// `done` holds (`what` names that line in messages).
    pub fn count(
        &self,
        request: &str,
        done: impl Fn(&str) -> bool,
        what: &str,
    ) -> anyhow::Result<u64> {
        let mut cmd = runner_command(self.runner, self.elf)
            .with_context(|| format!("{}: the board's runner", self.board))?;
        cmd.args(["-icount", "shift=0", "-plugin"])
            .arg(format!("{}{}", self.plugin.display(), self.plugin_args))
            .args(["-d", "plugin"]);
        let shown = request.trim_end().replace('\n', "; ");
        let status = run_logged(
            self.board,
            &mut cmd,
            request,
            self.stdout,
            Stderr::File(self.stderr),
            self.timeout,
        )?;
        let out = std::fs::read_to_string(self.stdout)
            .with_context(|| format!("{}: reading {}", self.board, self.stdout.display()))?;
        let err = std::fs::read_to_string(self.stderr)
            .with_context(|| format!("{}: reading {}", self.board, self.stderr.display()))?;
        if !status.success() {
            bail!(
                "{}: `{shown}` under the insn plugin failed ({status})\n--- {}:\n{}\n--- {}:\n{}",
                self.board,
                self.stdout.display(),
                last_lines(&out, 10),
                self.stderr.display(),
                last_lines(&err, 10)
            );
        }
        if !out.lines().any(done) {
            bail!(
                "{}: `{shown}`: no {what} in {}\n--- {}:\n{}\n--- {}:\n{}",
                self.board,
                self.stdout.display(),
                self.stdout.display(),
                last_lines(&out, 10),
                self.stderr.display(),
                last_lines(&err, 10)
            );
        }
        total_insns(&err).with_context(|| {
            format!(
                "{}: `{shown}`: no 'total insns: N' line from the plugin in {}",
                self.board,
                self.stderr.display()
            )
        })
    }
}

/// The plugin's count: the last `total insns: N` line.
pub fn total_insns(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("total insns: "))
        .filter_map(|n| n.parse().ok())
        .next_back()
}

/// The last `n` lines of `text`, for messages (`(empty)` if none).
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    if tail.trim().is_empty() {
        "(empty)".to_string()
    } else {
        tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_last_total_line_counts() {
        let err = "[INFO ] activations q8, integer kernels helium\ncpu 0 insns: 10694785\n\
                   total insns: 10694785\n";
        assert_eq!(total_insns(err), Some(10694785));
        assert_eq!(total_insns("total insns: 1\ntotal insns: 22\n"), Some(22));
        assert_eq!(total_insns("cpu 0 insns: 5\n"), None);
        assert_eq!(total_insns("total insns: x\n"), None);
        assert_eq!(total_insns(" total insns: 5\n"), None);
    }

    #[test]
    fn a_deb_src_entry_is_added_only_when_backports_has_none() {
        let list = |entries: &[&str]| -> Vec<(PathBuf, String)> {
            entries
                .iter()
                .map(|t| (PathBuf::from("x"), t.to_string()))
                .collect()
        };
        assert!(needs_deb_src(&list(&[])));
        assert!(needs_deb_src(&list(&["Types: deb\nSuites: bookworm\n"])));
        assert!(needs_deb_src(&list(&[
            "Types: deb\nSuites: bookworm-backports\n",
            "Types: deb-src\nSuites: bookworm\n"
        ])));
        assert!(!needs_deb_src(&list(&[
            "Types: deb\nSuites: bookworm\n",
            "Types: deb deb-src\nSuites: bookworm-backports\n"
        ])));
        assert!(!needs_deb_src(&list(&[
            "deb-src http://deb.debian.org/debian bookworm-backports main\n"
        ])));
    }

    #[test]
    fn the_mirror_comes_from_debian_sources() {
        let text = "Types: deb\nURIs: http://mirror.example/debian extra\nSuites: bookworm\n\
                    URIs: http://second/\n";
        assert_eq!(
            debian_uri(text).as_deref(),
            Some("http://mirror.example/debian")
        );
        assert_eq!(debian_uri("Types: deb\n"), None);
        assert!(deb_src_entry("http://m/d").starts_with("Types: deb-src\nURIs: http://m/d\n"));
        assert!(is_tarball("qemu_10.0.2+ds.orig.tar.xz"));
        assert!(!is_tarball("qemu_10.0.2+ds-1.debian.tar.xz"));
    }

    #[test]
    fn messages_quote_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(last_lines("", 2), "(empty)");
    }

    #[test]
    fn a_run_past_its_limit_is_killed_and_named() {
        let dir = std::env::temp_dir().join(format!("xtask-insn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("sleep.out");
        let started = Instant::now();
        let e = run_logged(
            "some-board",
            Command::new("sleep").arg("30"),
            "",
            &out,
            Stderr::Merged,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10));
        let msg = e.to_string();
        assert!(
            msg.contains("some-board") && msg.contains("timed out"),
            "{msg}"
        );
        assert!(msg.contains(&out.display().to_string()), "{msg}");
        let status = run_logged(
            "some-board",
            Command::new("sh").args(["-c", "read line; echo got $line; echo oops >&2"]),
            "hello\n",
            &out,
            Stderr::Merged,
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(status.success());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "got hello\noops\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Builds the plugin from nothing into a fresh folder: apt (root or sudo, and the network),
    /// the QEMU source download (~40 MB) and gcc, so it runs only on request
    /// (`cargo test -p xtask -- --ignored`).
    #[test]
    #[ignore = "needs root, the network and a 40 MB download: run with --ignored"]
    fn the_plugin_builds_into_an_empty_folder() {
        let dir = std::env::temp_dir().join(format!("xtask-plugin-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let plugin = ensure_plugin(&dir).unwrap();
        assert!(plugin.is_file());
        assert!(std::fs::metadata(&plugin).unwrap().len() > 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
