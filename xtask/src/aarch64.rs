//! `cargo xtask aarch64`: the quantized-kernel tests of loglinear-runtime for
//! aarch64-unknown-linux-gnu under qemu-user, twice:
//!
//! * `-cpu max` (Armv8.x with the dot-product extension): the NEON and the `sdot` kernels both
//!   run, and each is checked bit for bit against the portable one;
//! * `-cpu cortex-a53` (Armv8.0, no `dotprod`): the run-time check must find no `sdot`, and the
//!   NEON kernel (and the `sdot` entry points' fallback) is checked.
//!
//! `LOGLINEAR_EXPECT_KERNELS` makes the test `expected_kernel_paths_are_available` fail if the
//! detected paths differ from what the emulated core has, so neither run can pass vacuously.
//! Needs qemu-aarch64, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross, and the Rust target
//! (`bash scripts/test.sh` installs them).

use std::process::Command;

use crate::tasks::{self, Repo};

/// The Rust target of the runs.
const TARGET: &str = "aarch64-unknown-linux-gnu";

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the task.
pub fn run(_repo: &Repo, _args: Args) -> anyhow::Result<()> {
    let version = tasks::output(Command::new("qemu-aarch64").arg("--version"))?;
    println!("qemu: {}", version.lines().next().unwrap_or(""));
    for (cpu, expect) in [
        ("max", "portable,neon,neon-sdot,!avx2"),
        ("cortex-a53", "portable,neon,!neon-sdot"),
    ] {
        println!("== loglinear-runtime quant tests on qemu-aarch64 -cpu {cpu} (expect: {expect})");
        tasks::run(
            Command::new("cargo")
                .args([
                    "test",
                    "-q",
                    "-p",
                    "loglinear-runtime",
                    "--release",
                    "--target",
                ])
                .args([TARGET, "--lib", "quant"])
                .env(
                    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
                    "aarch64-linux-gnu-gcc",
                )
                .env(
                    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
                    format!("qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu {cpu}"),
                )
                .env("LOGLINEAR_EXPECT_KERNELS", expect),
        )?;
    }
    println!("aarch64 kernel tests passed");
    Ok(())
}
