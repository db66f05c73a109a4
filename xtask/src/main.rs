//! `cargo xtask <command>`: the project's build and check tasks, in Rust rather than shell.
//!
//! * `image-check --board <board> <elf>`: would the firmware image boot on the board? The
//!   segments lie in the board's memory, the vector table (Cortex-M) or entry point (RISC-V) is
//!   valid, and an RP2040 second stage has a valid CRC (`image.rs`). The board is read with
//!   the memory planner's parser, the one reader of `board.toml`.
//! * `esp-image --board <board> <app.bin>`: would the ESP-IDF bootloader boot the app image
//!   that `espflash save-image` wrote? Header, segments in the board's windows, entry point,
//!   checksum, SHA-256, app descriptor (`esp_image.rs`).
//! * `uf2-check --board <board> <file.uf2>`: the same boot checks on the flash contents that
//!   a UF2 file writes (`uf2.rs`): what a user drags onto the RP2040's BOOTSEL drive.
//! * `size-by-crate <elf>`: code and read-only data of an image summed by crate (`size.rs`).
//!
//! The test and benchmark tasks, which build firmware and run it (`tasks.rs` holds what they
//! share):
//!
//! * `qemu [BOARD...]`: the firmware under QEMU, token for token against the host (`qemu.rs`).
//! * `kernel-check [--bench] [BOARD...]`: the integer kernels on the boards' own cores under
//!   QEMU, bit for bit against the portable ones; `--bench` counts their instructions per MAC
//!   (`kernel_check.rs`).
//! * `count [BOARD...]`: instructions per generated token, counted under QEMU with its `insn`
//!   plugin (`count.rs`); `--breakdown` splits them by part (`breakdown.rs`), `--check` and
//!   `--update` keep them in `boards/<board>/insns.txt` (`count_snapshot.rs`).
//! * `boards [--update] [BOARD...]`: the real-chip board crates and the Linux board build, their
//!   flashable images check, their sizes match the snapshots (`boards.rs`).
//! * `plan [--update] [BOARD...]`: the memory planner against the linked QEMU firmware (arena,
//!   statics, code estimate), the size snapshots, and a model that does not fit failing the
//!   build with the planner's report (`plan.rs`; the snapshots in `snapshot.rs`).
//! * `session-snapshots [BOARD]`: session snapshots between a board under QEMU and the host,
//!   and the board's A/B snapshot store (`session_snapshots.rs`).
//! * `aarch64`: the NEON/sdot kernels of the runtime under qemu-user (`aarch64.rs`).
//! * `ci`: every test, in order: what `bash scripts/test.sh` runs once it has installed the
//!   system packages (`ci.rs`).

mod aarch64;
mod board_tools;
mod boards;
mod breakdown;
mod ci;
mod count;
mod count_snapshot;
mod defmt_log;
mod disk;
mod esp_image;
mod image;
mod insn;
mod kernel_check;
mod plan;
mod process;
mod qemu;
mod reply;
mod session_snapshots;
mod size;
mod snapshot;
mod stages;
mod system;
mod tasks;
mod uf2;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use loglinear_planner::BoardProfile;
use stages::Stages;

#[derive(Parser)]
#[command(about = "loglinear's build and check tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Checks that a firmware ELF would boot on a board, without the board: segments inside
    /// its memory map, a valid vector table or entry point, an RP2040 second stage's CRC.
    ImageCheck {
        /// Board name (a folder under boards/) or a folder holding a board.toml.
        #[arg(long)]
        board: String,
        /// The firmware ELF file.
        elf: PathBuf,
    },
    /// Checks that a UF2 file would boot on a board: the flash contents it writes pass the
    /// `image-check` checks (vector table, second stage's CRC); blocks well-formed and for the
    /// RP2040 family.
    Uf2Check {
        /// Board name (a folder under boards/) or a folder holding a board.toml.
        #[arg(long)]
        board: String,
        /// The UF2 file.
        uf2: PathBuf,
    },
    /// Checks that an ESP app image (from `espflash save-image`) would boot on a board: its
    /// header, segments in the board's memory windows, entry point, checksum, SHA-256 and app
    /// descriptor.
    EspImage {
        /// Board name (a folder under boards/) or a folder holding a board.toml.
        #[arg(long)]
        board: String,
        /// The app image file.
        image: PathBuf,
    },
    /// Code and read-only data of a firmware ELF summed by the crate that defines each symbol.
    SizeByCrate {
        /// The firmware ELF file.
        elf: PathBuf,
    },
    /// The firmware under QEMU, token for token against the host runtime.
    Qemu(qemu::Args),
    /// The integer kernels under QEMU on the boards' own cores, against the portable ones.
    KernelCheck(kernel_check::Args),
    /// Instructions per generated token under QEMU (a benchmark).
    Count(count::Args),
    /// The real-chip and Linux board builds, their images and size snapshots.
    Boards(boards::Args),
    /// The memory planner against the linked QEMU firmware, and its size snapshots.
    Plan(plan::Args),
    /// Session snapshots between a board under QEMU and the host; the board's snapshot store.
    SessionSnapshots(session_snapshots::Args),
    /// The runtime's AArch64 kernels under qemu-user.
    Aarch64(aarch64::Args),
    /// Every test of the repository, in order.
    Ci(ci::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Qemu(args) => with_stages(|s| qemu::run(&tasks::Repo::enter()?, args, s)),
        Command::KernelCheck(args) => {
            with_stages(|s| kernel_check::run(&tasks::Repo::enter()?, args, s))
        }
        Command::Count(args) => count::run(&tasks::Repo::enter()?, args),
        Command::Boards(args) => with_stages(|s| boards::run(&tasks::Repo::enter()?, args, s)),
        Command::Plan(args) => plan::run(&tasks::Repo::enter()?, args),
        Command::SessionSnapshots(args) => session_snapshots::run(&tasks::Repo::enter()?, args),
        Command::Aarch64(args) => aarch64::run(&tasks::Repo::enter()?, args),
        Command::Ci(args) => ci::run(&tasks::Repo::enter()?, args),
        Command::ImageCheck { board, elf } => {
            image::check_elf_file(&BoardProfile::find(&board)?, &elf)
        }
        Command::Uf2Check { board, uf2 } => uf2::check_file(&BoardProfile::find(&board)?, &uf2),
        Command::EspImage { board, image } => {
            esp_image::check_file(&BoardProfile::find(&board)?, &image)
        }
        Command::SizeByCrate { elf } => {
            let bytes =
                std::fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
            let sums = size::by_crate(&bytes)
                .with_context(|| format!("{} is not an ELF file", elf.display()))?;
            let model = sums.get(size::MODEL_ROW).copied();
            let mut rows: Vec<_> = sums.into_iter().collect();
            rows.sort_by_key(|(name, b)| (std::cmp::Reverse(b.code + b.rodata), name.clone()));
            println!("| crate | code (B) | read-only data (B) |");
            println!("| --- | ---: | ---: |");
            let (mut code, mut rodata) = (0, 0);
            for (name, b) in rows {
                println!("| {name} | {} | {} |", b.code, b.rodata);
                code += b.code;
                rodata += b.rodata;
            }
            println!("| total | {code} | {rodata} |");
            if let Some(model) = model {
                println!(
                    "\nwithout the model file: {} B (code {code} B, read-only data {} B)",
                    code + rodata - model.rodata,
                    rodata - model.rodata
                );
            }
            Ok(())
        }
    }
}

/// Runs a task whose parts are stages, then prints their times, passed or failed.
fn with_stages(task: impl FnOnce(&mut Stages) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let mut stages = Stages::new();
    let result = task(&mut stages);
    println!("\nstage timings:");
    print!("{}", stages.table());
    result
}
