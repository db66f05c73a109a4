//! `cargo xtask ci`: every test of the repository, in order, stopping at the first failure, then
//! the time of each stage (`stages.rs`), with a warning when the whole run passes its budget.
//! `bash scripts/test.sh` installs the system packages and toolchain pieces first, then runs
//! this; on a machine that has them, `cargo xtask ci` alone does the same.
//!
//!  1. `cargo fmt --check` (the workspace and the no-alloc probe)
//!  2. `cargo clippy -D warnings` (the workspace, all targets; the runtime also as `no_std`)
//!     and `cargo doc` with rustdoc's warnings as errors
//!  3. `no_std` builds of loglinear-runtime for the four bare-metal targets, each with a check
//!     that no `alloc` crate is linked (see [`no_alloc`])
//!  4. `cargo test --release` of the workspace and of xtask (release: the golden tests step long
//!     sequences), built first, then run, so that the table shows both
//!  5. gguf-py (ggml's reference Python reader) reads and dequantizes model files written by
//!     `loglinear convert` at every tensor type
//!  6. the firmware under QEMU (`qemu`, each board a stage), the integer kernels on the boards'
//!     cores (`kernel-check`), instructions per token against the boards' snapshots (`count
//!     --check`), session snapshots (`session-snapshots`), the memory planner
//!     against the linked images and the size snapshots (`plan`), the real-chip board builds and
//!     their flashable images (`boards --kind hardware`, each board a stage); and beside all but
//!     the QEMU stage, in the background ([`BACKGROUND`]), the linux-aarch64 build (`boards
//!     --kind linux`) and the AArch64 NEON/sdot kernels under qemu-user (`aarch64`)
//!
//! Build output that no later stage reads is removed when its stage has passed (`disk.rs`):
//! a clean run otherwise peaks at about 15 GB.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::stages::{Stages, BUDGET_SECS};
use crate::tasks::{self, Repo};
use crate::{boards, count, disk, kernel_check, plan, qemu, session_snapshots};

/// The bare-metal targets the runtime builds for without `std` or `alloc`.
pub const NO_STD_TARGETS: [&str; 4] = [
    "thumbv7em-none-eabihf",
    "thumbv6m-none-eabi",
    "riscv32imac-unknown-none-elf",
    "thumbv8m.main-none-eabihf",
];

/// The test runs: the workspace, then xtask on its own. `cargo xtask` builds xtask with the
/// features that xtask alone asks of its dependencies (`-p xtask`); tested inside the workspace,
/// its dependencies would get the workspace's features and be compiled a second time (probe-rs
/// and espflash among them), so it is tested the way it is built.
const TEST_RUNS: [&[&str]; 2] = [
    &["test", "--workspace", "--exclude", "xtask", "--release"],
    &["test", "-p", "xtask", "--release"],
];

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the task: every stage, then the table of their times (also when one fails, which is
/// marked) and a warning if the run took longer than its budget.
pub fn run(repo: &Repo, _args: Args) -> anyhow::Result<()> {
    let mut stages = Stages::new();
    if let Some(secs) = setup_secs() {
        stages.record_earlier(
            "set-up: packages, targets, the xtask build (scripts/test.sh)",
            secs,
        );
    }
    let result = every_stage(repo, &mut stages);
    section("Stage timings");
    print!("{}", stages.table());
    // Next to a failure's error: a build that ran out of space shows only cargo's exit status.
    println!("disk: {}", disk::space_left(&repo.target_dir));
    if let Some(warning) = stages.over_budget(BUDGET_SECS) {
        println!("{warning}");
    }
    result?;
    section(&format!(
        "All checks passed in {:.0} s",
        stages.total_secs()
    ));
    Ok(())
}

/// The variable in which scripts/test.sh passes the Unix time at which it started, so that the
/// table counts its set-up too.
const TEST_SH_START: &str = "LOGLINEAR_TEST_START";

/// Seconds from scripts/test.sh's start ([`TEST_SH_START`]) to now; `None` when this run did
/// not come from it.
fn setup_secs() -> Option<f64> {
    let start: u64 = std::env::var(TEST_SH_START).ok()?.trim().parse().ok()?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some((now - start as f64).max(0.0))
}

/// The stages, in order, stopping at the first that fails.
fn every_stage(repo: &Repo, stages: &mut Stages) -> anyhow::Result<()> {
    let cargo = |args: &[&str]| {
        let mut cmd = Command::new("cargo");
        cmd.args(args);
        cmd
    };

    stages.run("fmt", |_| {
        section("cargo fmt --check");
        tasks::run(&mut cargo(&["fmt", "--all", "--", "--check"]))?;
        // The probe is not a workspace member, so `cargo fmt --all` does not see it.
        tasks::run(Command::new("rustfmt").args([
            "--edition",
            "2021",
            "--check",
            "scripts/no-alloc-probe/lib.rs",
        ]))
    })?;

    stages.run("clippy", |_| {
        section("cargo clippy (workspace, all targets, -D warnings)");
        tasks::run(&mut cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))?;
        // The runtime again as firmware sees it (no `std` feature), so cfg-dependent warnings
        // show too: on thumbv7em (the SMLAD kernels) and on a Cortex-M55 (the SMLAD and Helium
        // kernels, which runtime/build.rs enables from the rustflags).
        tasks::run(&mut cargo(&[
            "clippy",
            "-p",
            "loglinear-runtime",
            "--no-default-features",
            "--target",
            NO_STD_TARGETS[0],
            "--",
            "-D",
            "warnings",
        ]))?;
        tasks::run(
            cargo(&[
                "clippy",
                "-p",
                "loglinear-runtime",
                "--no-default-features",
                "--target",
                "thumbv8m.main-none-eabihf",
                "--",
                "-D",
                "warnings",
            ])
            .env("RUSTFLAGS", "-C target-cpu=cortex-m55"),
        )
    })?;

    stages.run("doc", |_| {
        section("cargo doc (workspace, -D warnings)");
        tasks::run(
            cargo(&["doc", "--workspace", "--no-deps", "-q"]).env("RUSTDOCFLAGS", "-D warnings"),
        )
    })?;

    for target in NO_STD_TARGETS {
        stages.run(format!("no_std build {target}"), |_| {
            section(&format!("no_std build: {target}"));
            no_alloc(repo, target)
        })?;
    }

    let mut test_executables = Vec::new();
    stages.run("cargo test build", |_| {
        section("cargo test --workspace --release: build");
        for args in TEST_RUNS {
            test_executables.extend(disk::built_test_executables(cargo(args).arg("--no-run"))?);
        }
        Ok(())
    })?;
    stages.run("cargo test run", |_| {
        section("cargo test --workspace --release");
        let mut ignored = Vec::new();
        for args in TEST_RUNS {
            ignored.extend(run_tests(&mut cargo(args))?);
        }
        println!("\n{} tests ignored, each with its reason:", ignored.len());
        for line in &ignored {
            println!("  {line}");
        }
        // No later stage runs them: about a third of the run's build output.
        disk::free("the test executables", &test_executables, &repo.target_dir)
    })?;

    stages.run("gguf-py", |_| {
        section("gguf-py reads our model files (every tensor type)");
        gguf_py(repo)
    })?;

    // The QEMU stage runs first and alone: its sustained-UART check sends 64 KiB at full speed,
    // and a build beside it made that one QEMU run four times as long.
    stages.run("qemu", |stages| {
        section("Firmware under QEMU, token-identical to the host (cargo xtask qemu)");
        qemu::run(repo, tasks::default_args()?, stages)?;
        // The UART images' own build folder: only the QEMU stage builds there.
        disk::free(
            "target/firmware-uart",
            &[repo.target_dir.join("firmware-uart")],
            &repo.target_dir,
        )
    })?;
    let background = Background::start(repo)?;
    let foreground = checks_and_boards(repo, stages);
    if foreground.is_err() {
        background.stop();
    }
    let background = background.join(stages);
    foreground?;
    background
}

/// The stages after the QEMU boards' (kernel-check, snapshots, plan, the hardware boards), in
/// the foreground while [`Background`] builds for AArch64.
fn checks_and_boards(repo: &Repo, stages: &mut Stages) -> anyhow::Result<()> {
    stages.run("kernel-check", |stages| {
        section(
            "Integer kernels against the portable ones on the boards' cores, under QEMU \
             (cargo xtask kernel-check)",
        );
        kernel_check::run(repo, tasks::default_args()?, stages)?;
        disk::free(
            "target/firmware-kernel-check",
            &[repo.target_dir.join("firmware-kernel-check")],
            &repo.target_dir,
        )
    })?;
    stages.run("count --check", |_| {
        section(
            "Instructions per token against boards/<board>/insns.txt, within 5 % \
             (cargo xtask count --check)",
        );
        count::run(repo, tasks::task_args(&["--check"])?)
    })?;
    stages.run("session-snapshots", |_| {
        section("Session snapshots under QEMU (cargo xtask session-snapshots)");
        session_snapshots::run(repo, tasks::default_args()?)
    })?;
    stages.run("plan", |_| {
        section("Memory planner vs the linked firmware, size snapshots (cargo xtask plan)");
        plan::run(repo, tasks::default_args()?)
    })?;
    stages.run("boards --kind hardware", |stages| {
        section(
            "Real-chip board crates build, and their flashable images check (nothing flashed) \
             (cargo xtask boards --kind hardware)",
        );
        boards::run(repo, tasks::task_args(&["--kind", "hardware"])?, stages)
    })
}

/// The tasks that build for AArch64 Linux, which `cargo xtask ci` runs beside the kernel-check,
/// snapshot, plan and hardware-board stages: those spend much of their time in one QEMU run or
/// one single-threaded LTO link, so a core stays idle. Each is a child `xtask` with its output
/// in a log file, printed when it is joined, and its own target folder, so that no build waits
/// on another's cargo lock.
const BACKGROUND: [(&str, &[&str]); 2] = [
    (
        "boards --kind linux: the linux-aarch64 CLI (in the background)",
        &["boards", "--kind", "linux"],
    ),
    (
        "aarch64: NEON and sdot kernels under qemu-user (in the background)",
        &["aarch64"],
    ),
];

/// The [`BACKGROUND`] tasks, run in order on a thread.
struct Background {
    thread: std::thread::JoinHandle<Vec<Finished>>,
    running: Arc<Running>,
    log: PathBuf,
}

/// The background task running now, shared with [`Background::stop`].
#[derive(Default)]
struct Running {
    /// Its process id, which is also its process group's (`run_logged`); 0 when none runs.
    pid: AtomicU32,
    /// Set by [`Background::stop`]: end the task running and start no other.
    stopped: AtomicBool,
}

impl Running {
    /// Ends the running task's process group: the child xtask and the cargo and rustc
    /// processes under it.
    fn kill(&self) {
        let pid = self.pid.load(Ordering::SeqCst);
        if pid != 0 {
            // A failure means the group has ended already.
            let _ = Command::new("kill")
                .args(["-TERM", &format!("-{pid}")])
                .status();
        }
    }
}

/// A background task that ended.
struct Finished {
    name: &'static str,
    secs: f64,
    result: anyhow::Result<()>,
}

impl Background {
    fn start(repo: &Repo) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("finding the xtask executable")?;
        let target_dir = repo.target_dir.join("cross");
        let log = repo.target_dir.join("ci-background.log");
        let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let running = Arc::new(Running::default());
        println!(
            "\nin the background, output in {}: {}",
            log.display(),
            BACKGROUND.map(|(name, _)| name).join("; ")
        );
        let thread = {
            let running = Arc::clone(&running);
            std::thread::spawn(move || {
                let mut finished = Vec::new();
                for (name, args) in BACKGROUND {
                    if running.stopped.load(Ordering::SeqCst) {
                        break;
                    }
                    let start = Instant::now();
                    let mut cmd = Command::new(&exe);
                    cmd.args(args).env("CARGO_TARGET_DIR", &target_dir);
                    let result = run_logged(&mut cmd, &file, &running);
                    let failed = result.is_err();
                    finished.push(Finished {
                        name,
                        secs: start.elapsed().as_secs_f64(),
                        result,
                    });
                    if failed {
                        break;
                    }
                }
                finished
            })
        };
        Ok(Self {
            thread,
            running,
            log,
        })
    }

    /// Ends the task running now and starts no other.
    fn stop(&self) {
        self.running.stopped.store(true, Ordering::SeqCst);
        self.running.kill();
    }

    /// Waits for the tasks, prints their output and puts their times in `stages`.
    fn join(self, stages: &mut Stages) -> anyhow::Result<()> {
        let finished = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the background thread panicked"))?;
        section(&format!(
            "Background tasks (output of {})",
            self.log.display()
        ));
        let text = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        print!("{text}");
        let mut first_error = None;
        for task in finished {
            stages.record(task.name, task.secs, task.result.is_ok());
            if let Err(e) = task.result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Runs `cmd` in a process group of its own, with its standard output and error appended to
/// `log`, its process id in `running` while it runs.
fn run_logged(cmd: &mut Command, log: &File, running: &Running) -> anyhow::Result<()> {
    let what = tasks::describe(cmd);
    let mut child = cmd
        .stdout(log.try_clone()?)
        .stderr(log.try_clone()?)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    running.pid.store(child.id(), Ordering::SeqCst);
    // A stop between the caller's check and the spawn ends this task too.
    if running.stopped.load(Ordering::SeqCst) {
        running.kill();
    }
    let status = child.wait();
    running.pid.store(0, Ordering::SeqCst);
    let status = status.with_context(|| format!("waiting for {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn section(title: &str) {
    println!("\n==== {title} ====");
}

/// Runs a `cargo test` command with its output passed through, and returns the lines of the
/// tests it ignored (`test NAME ... ignored, REASON`), so that a run says what it skipped.
fn run_tests(cmd: &mut Command) -> anyhow::Result<Vec<String>> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", tasks::describe(cmd)))?;
    let stdout = child.stdout.take().context("the test run's stdout")?;
    let mut ignored = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading the test run's output")?;
        println!("{line}");
        if let Some(test) = ignored_test(&line) {
            ignored.push(test.to_string());
        }
    }
    let status = child.wait().context("waiting for the test run")?;
    if !status.success() {
        bail!("{} failed ({status})", tasks::describe(cmd));
    }
    Ok(ignored)
}

/// `NAME ... ignored[, REASON]` of a libtest result line for an ignored test.
fn ignored_test(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("test ")?;
    let (_, verdict) = rest.split_once(" ... ")?;
    (verdict == "ignored" || verdict.starts_with("ignored, ")).then_some(rest)
}

/// A `no_std` build of the runtime for `target`, and the proof that it links no `alloc`.
///
/// A successful build for these targets proves there is no `std` (they have none). It does not
/// prove there is no `alloc`: their sysroots ship `alloc`, so any crate with
/// `extern crate alloc` still compiles as an rlib. Two checks close that gap:
///
/// * Authoritative: build `scripts/no-alloc-probe`, a `#![no_std]` staticlib that links
///   loglinear-runtime (no default features) and defines no `#[global_allocator]`. A final
///   artifact makes rustc load the whole crate graph, and if `alloc` is anywhere in it rustc
///   stops with "no global memory allocator found but one is required". A staticlib needs no
///   linker or memory map, so this works for every bare-metal target. The probe uses the
///   workspace's Cargo.lock (copied), so it checks exactly the versions the workspace builds.
/// * Early, with a readable answer: `cargo tree` lists the features each non-proc-macro
///   dependency of the runtime is built with for that target; one named `std` or `alloc` fails
///   the step and names the crate. Proc-macros run on the host and may use std, so they are
///   left out.
fn no_alloc(repo: &Repo, target: &str) -> anyhow::Result<()> {
    tasks::run(Command::new("cargo").args([
        "build",
        "-p",
        "loglinear-runtime",
        "--no-default-features",
        "--target",
        target,
        "--release",
    ]))?;
    let tree = tasks::output(Command::new("cargo").args([
        "tree",
        "-p",
        "loglinear-runtime",
        "--no-default-features",
        "--target",
        target,
        "-e",
        "normal,no-proc-macro",
        "--prefix",
        "none",
        "--no-dedupe",
        "-f",
        "{p}|{f}",
    ]))?;
    let (crates, bad) = std_features(&tree);
    if !bad.is_empty() {
        bail!(
            "a dependency of loglinear-runtime enables std/alloc on {target}:\n  {}",
            bad.join("\n  ")
        );
    }
    println!("dependencies and enabled features on {target} (none may be std/alloc):");
    for c in crates {
        println!("  {c}");
    }
    let probe = repo.root.join("scripts/no-alloc-probe");
    std::fs::copy(repo.root.join("Cargo.lock"), probe.join("Cargo.lock"))
        .context("copying Cargo.lock to the no-alloc probe")?;
    tasks::run(
        Command::new("cargo")
            .arg("build")
            .arg("--manifest-path")
            .arg(probe.join("Cargo.toml"))
            .args(["--target", target, "--release", "--target-dir"])
            .arg(&repo.target_dir),
    )?;
    println!("ok: loglinear-runtime links without alloc on {target}");
    Ok(())
}

/// The `{p}|{f}` lines of `cargo tree`, sorted and deduplicated, and a line for each `std` or
/// `alloc` feature among them.
fn std_features(tree: &str) -> (Vec<&str>, Vec<String>) {
    let mut crates: Vec<&str> = tree.lines().filter(|l| !l.trim().is_empty()).collect();
    crates.sort_unstable();
    crates.dedup();
    let mut bad = Vec::new();
    for line in &crates {
        let (package, features) = line.split_once('|').unwrap_or((line, ""));
        for f in features.split(',').filter(|f| *f == "std" || *f == "alloc") {
            bad.push(format!("{package} has feature \"{f}\""));
        }
    }
    (crates, bad)
}

/// gguf-py (installed by scripts/test.sh) reads model files of every tensor type written by
/// `loglinear convert`, and they match their checkpoints (tests/gguf_py_check.py).
fn gguf_py(repo: &Repo) -> anyhow::Result<()> {
    let cli = repo.host_cli()?;
    let dir = repo.target_dir.join("gguf-py-check");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for checkpoint in [
        "models/ll-gdn-mcu",
        "tests/golden/model/hattention_stress",
        "tests/golden/model/gated_deltanet_stress",
    ] {
        let name = checkpoint.rsplit('/').next().unwrap_or(checkpoint);
        for ty in ["f32", "f16", "q8_0", "q4_0"] {
            let out = dir.join(format!("{name}-{ty}.gguf"));
            tasks::output(
                Command::new(&cli)
                    .args(["convert", checkpoint, "-o"])
                    .arg(&out)
                    .args(["--type", ty, "--no-eval"]),
            )?;
            tasks::run(
                Command::new("python3")
                    .arg("tests/gguf_py_check.py")
                    .arg(&out)
                    .arg(checkpoint),
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_tests_are_picked_from_the_output() {
        assert_eq!(
            ignored_test("test a::b ... ignored, needs a GPU"),
            Some("a::b ... ignored, needs a GPU")
        );
        assert_eq!(
            ignored_test("test coop ... ignored"),
            Some("coop ... ignored")
        );
        assert_eq!(ignored_test("test a ... ok"), None);
        assert_eq!(ignored_test("test result: ok. 2 passed; 0 ignored"), None);
        assert_eq!(ignored_test("running 2 tests"), None);
    }

    #[test]
    fn std_or_alloc_features_are_named() {
        let tree = "half v2.7.1|\nlibm v0.2.16|\nhalf v2.7.1|\nbytemuck v1.25.0|derive\n";
        let (crates, bad) = std_features(tree);
        assert_eq!(crates.len(), 3);
        assert!(bad.is_empty());
        let (_, bad) = std_features("half v2.7.1|alloc,std\n");
        assert_eq!(
            bad,
            [
                "half v2.7.1 has feature \"alloc\"",
                "half v2.7.1 has feature \"std\""
            ]
        );
    }
}
