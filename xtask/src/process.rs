//! Running QEMU and the host client with a time limit: the request script on QEMU's stdin, its
//! output in files, and the pty of a `-serial pty` run.

use std::ffi::OsString;
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::reply;
use crate::tasks::{describe, runner_command};

/// How often a wait looks at a child or a file.
const POLL: Duration = Duration::from_millis(10);

/// `base` with `suffix` appended (`target/qemu-test/mps2-an386-1` + `.out`).
pub fn suffixed(base: &Path, suffix: &str) -> PathBuf {
    let mut name = OsString::from(base.as_os_str());
    name.push(suffix);
    PathBuf::from(name)
}

/// A file's text (any bytes that are not UTF-8 replaced), with the path in the error.
pub fn read_text(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Creates a file for a child's output.
pub fn create(path: &Path) -> anyhow::Result<File> {
    File::create(path).with_context(|| format!("creating {}", path.display()))
}

/// How a child with a time limit ended.
pub enum Ended {
    /// It exited by itself.
    Exited(ExitStatus),
    /// It ran past its limit and was killed.
    TimedOut(Duration),
}

impl Ended {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        matches!(self, Ended::Exited(s) if s.success())
    }
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Exited(status) => write!(f, "{status}"),
            Ended::TimedOut(limit) => write!(
                f,
                "timed out after {} s and was killed",
                limit.as_secs_f64()
            ),
        }
    }
}

/// A child process with a deadline; dropped while it runs, it is killed, so that no error path
/// leaves a QEMU behind.
pub struct Timed {
    child: Child,
    started: Instant,
    limit: Duration,
}

impl Timed {
    /// Starts `cmd`, to be killed `limit` after now.
    pub fn spawn(cmd: &mut Command, limit: Duration) -> anyhow::Result<Self> {
        let started = Instant::now();
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", describe(cmd)))?;
        Ok(Self {
            child,
            started,
            limit,
        })
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Whether its time is up.
    pub fn expired(&self) -> bool {
        self.started.elapsed() >= self.limit
    }

    /// Waits until it exits or its time is up (then kills it).
    pub fn wait(&mut self) -> anyhow::Result<Ended> {
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for a child")? {
                return Ok(Ended::Exited(status));
            }
            if self.expired() {
                self.kill();
                return Ok(Ended::TimedOut(self.limit));
            }
            thread::sleep(POLL);
        }
    }

    /// Kills it and reaps it.
    pub fn kill(&mut self) {
        // Errors mean it has exited already.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        if self.running() {
            self.kill();
        }
    }
}

/// One QEMU run of a firmware image with a request script on its stdin, stdout in
/// `<base>.out` and stderr (the firmware's semihosting log, QEMU's messages) in `<base>.err`.
pub struct QemuRun<'a> {
    /// Board and case, for messages.
    pub label: &'a str,
    /// The board.toml runner line (`runner` or `uart_runner`).
    pub runner: &'a str,
    /// The image.
    pub elf: &'a Path,
    /// The path of the output files without their suffix.
    pub base: &'a Path,
    /// How long QEMU may run before it counts as hung.
    pub limit: Duration,
    /// Send the script only once the board has printed `READY`: a UART drops what arrives
    /// before the firmware has enabled its receiver (the STM32L4 USART model, like the chip).
    pub wait_ready: bool,
}

impl QemuRun<'_> {
    /// Runs QEMU with `script` on stdin; returns its stdout and the wall time. Any exit status
    /// but 0 is an error, a run past the limit as well.
    pub fn run(&self, script: &[u8]) -> anyhow::Result<(String, Duration)> {
        let (out_path, err_path) = (suffixed(self.base, ".out"), suffixed(self.base, ".err"));
        let mut cmd = runner_command(self.runner, self.elf)?;
        let (ended, elapsed) = run_with_input(
            &mut cmd,
            script,
            &out_path,
            Stderr::File(&err_path),
            self.limit,
            self.wait_ready,
        )?;
        if !ended.success() {
            eprint!("{}", read_text(&err_path).unwrap_or_default());
            bail!(
                "{}: QEMU {ended} ({}), output in {}, log in {}",
                self.label,
                describe(&cmd),
                out_path.display(),
                err_path.display()
            );
        }
        Ok((read_text(&out_path)?, elapsed))
    }
}

/// Where a run's standard error goes.
pub enum Stderr<'a> {
    /// Into the standard output's file (`2>&1`).
    Merged,
    /// Into its own file.
    File(&'a Path),
    /// Nowhere.
    Discard,
}

/// Runs `cmd` with `input` on its stdin (then closed) and its stdout in the file `stdout`,
/// killed after `limit`; returns how it ended and the wall time. With `wait_ready` the input
/// goes out only once stdout holds a `READY ` line.
pub fn run_with_input(
    cmd: &mut Command,
    input: &[u8],
    stdout: &Path,
    stderr: Stderr<'_>,
    limit: Duration,
    wait_ready: bool,
) -> anyhow::Result<(Ended, Duration)> {
    let out = create(stdout)?;
    let err = match stderr {
        Stderr::Merged => Stdio::from(
            out.try_clone()
                .with_context(|| format!("opening {}", stdout.display()))?,
        ),
        Stderr::File(path) => Stdio::from(create(path)?),
        Stderr::Discard => Stdio::null(),
    };
    cmd.stdin(Stdio::piped()).stdout(out).stderr(err);
    let start = Instant::now();
    let mut child = Timed::spawn(cmd, limit)?;
    if wait_ready {
        while child.running() && !child.expired() {
            if std::fs::read(stdout).is_ok_and(|out| reply::has_ready(&out)) {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
    // A thread feeds stdin, so that a child that stops reading still meets its deadline. Its
    // write errors (the child gone before reading it all) show in the output that follows.
    let stdin = child.child.stdin.take();
    let input = input.to_vec();
    let feeder = thread::spawn(move || {
        if let Some(mut stdin) = stdin {
            let _ = stdin.write_all(&input);
        }
    });
    let ended = child.wait()?;
    let _ = feeder.join();
    Ok((ended, start.elapsed()))
}

/// Runs a host command with stdout and stderr in files, killed after `limit`; returns how it
/// ended and the wall time.
pub fn run_timed(
    cmd: &mut Command,
    out: &Path,
    err: &Path,
    limit: Duration,
) -> anyhow::Result<(Ended, Duration)> {
    cmd.stdin(Stdio::null())
        .stdout(create(out)?)
        .stderr(create(err)?);
    let start = Instant::now();
    let ended = Timed::spawn(cmd, limit)?.wait()?;
    Ok((ended, start.elapsed()))
}

/// A pty opened for reading and writing, its reads non-blocking (a wait for a line must not
/// take bytes that arrive later, which belong to the host client).
pub fn open_pty(path: &Path) -> anyhow::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    // std sets O_NONBLOCK only through its socket types. The flag belongs to the open file
    // (ioctl FIONBIO on Linux, fcntl elsewhere), so it takes through a socket view of the
    // descriptor just as well.
    let view = UnixStream::from(OwnedFd::from(file));
    view.set_nonblocking(true)
        .with_context(|| format!("making {} non-blocking", path.display()))?;
    Ok(File::from(OwnedFd::from(view)))
}

/// Reads the pty byte by byte until a line that starts with `READY ` has come (true), QEMU has
/// exited or `limit` has passed (false). It reads no further than that line.
pub fn read_ready(pty: &mut File, qemu: &mut Timed, limit: Duration) -> anyhow::Result<bool> {
    let deadline = Instant::now() + limit;
    let mut line = Vec::new();
    let mut byte = [0u8];
    loop {
        match pty.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => {
                if line.starts_with(b"READY ") {
                    return Ok(true);
                }
                line.clear();
            }
            Ok(1) => line.push(byte[0]),
            Ok(_) => thread::sleep(POLL),
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context("reading the pty"),
        }
        if Instant::now() >= deadline || !qemu.running() {
            return Ok(false);
        }
    }
}

/// Writes all of `bytes` to a non-blocking file, waiting while it is full, for at most `limit`.
pub fn write_all_waiting(file: &mut File, bytes: &[u8], limit: Duration) -> std::io::Result<()> {
    let deadline = Instant::now() + limit;
    let mut rest = bytes;
    while !rest.is_empty() {
        match file.write(rest) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(POLL)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
