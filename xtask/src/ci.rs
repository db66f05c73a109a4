//! `cargo xtask ci`: every test of the repository, in order, stopping at the first failure.
//! `bash scripts/test.sh` installs the system packages and toolchain pieces first, then runs
//! this; on a machine that has them, `cargo xtask ci` alone does the same.
//!
//!  1. `cargo fmt --check` (the workspace and the no-alloc probe)
//!  2. `cargo clippy -D warnings` (the workspace, all targets; the runtime also as `no_std`)
//!     and `cargo doc` with rustdoc's warnings as errors
//!  3. `no_std` builds of loglinear-runtime for the four bare-metal targets, each with a check
//!     that no `alloc` crate is linked (see [`no_alloc`])
//!  4. `cargo test --workspace --release` (release: the golden tests step long sequences)
//!  5. gguf-py (ggml's reference Python reader) reads and dequantizes model files written by
//!     `loglinear convert` at every tensor type
//!  6. the firmware under QEMU (`qemu`), the integer kernels on the boards' cores
//!     (`kernel-check`), session snapshots (`session-snapshots`), the memory planner against the
//!     linked images and the size snapshots (`plan`), the real-chip board builds and their
//!     flashable images (`boards`)
//!  7. the AArch64 NEON/sdot kernels under qemu-user (`aarch64`)

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};

use crate::tasks::{self, Repo};

/// The bare-metal targets the runtime builds for without `std` or `alloc`.
pub const NO_STD_TARGETS: [&str; 4] = [
    "thumbv7em-none-eabihf",
    "thumbv6m-none-eabi",
    "riscv32imac-unknown-none-elf",
    "thumbv8m.main-none-eabihf",
];

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the task.
pub fn run(repo: &Repo, _args: Args) -> anyhow::Result<()> {
    let start = Instant::now();
    let cargo = |args: &[&str]| {
        let mut cmd = Command::new("cargo");
        cmd.args(args);
        cmd
    };

    section("cargo fmt --check");
    tasks::run(&mut cargo(&["fmt", "--all", "--", "--check"]))?;
    // The probe is not a workspace member, so `cargo fmt --all` does not see it.
    tasks::run(Command::new("rustfmt").args([
        "--edition",
        "2021",
        "--check",
        "scripts/no-alloc-probe/lib.rs",
    ]))?;

    section("cargo clippy (workspace, all targets, -D warnings)");
    tasks::run(&mut cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    // The runtime again as firmware sees it (no `std` feature), so cfg-dependent warnings show
    // too: on thumbv7em (the SMLAD kernels) and on a Cortex-M55 (the SMLAD and Helium kernels,
    // which runtime/build.rs enables from the rustflags).
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
    )?;

    section("cargo doc (workspace, -D warnings)");
    tasks::run(
        cargo(&["doc", "--workspace", "--no-deps", "-q"]).env("RUSTDOCFLAGS", "-D warnings"),
    )?;

    for target in NO_STD_TARGETS {
        section(&format!("no_std build: {target}"));
        no_alloc(repo, target)?;
    }

    section("cargo test --workspace --release");
    let ignored = run_tests(&mut cargo(&["test", "--workspace", "--release"]))?;
    println!("\n{} tests ignored, each with its reason:", ignored.len());
    for line in &ignored {
        println!("  {line}");
    }

    section("gguf-py reads our model files (every tensor type)");
    gguf_py(repo)?;

    for (title, task) in [
        ("Firmware under QEMU, token-identical to the host", "qemu"),
        (
            "Integer kernels against the portable ones on the boards' cores, under QEMU",
            "kernel-check",
        ),
        ("Session snapshots under QEMU", "session-snapshots"),
        (
            "Memory planner vs the linked firmware, size snapshots",
            "plan",
        ),
        (
            "Real-chip board crates build, and their flashable images check (nothing flashed)",
            "boards",
        ),
        (
            "AArch64 integer kernels (NEON, sdot) under qemu-user",
            "aarch64",
        ),
    ] {
        section(&format!("{title} (cargo xtask {task})"));
        let exe = std::env::current_exe().context("finding the xtask executable")?;
        tasks::run(Command::new(exe).arg(task))?;
    }

    section(&format!(
        "All checks passed in {} s",
        start.elapsed().as_secs()
    ));
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
