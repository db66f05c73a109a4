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

mod esp_image;
mod image;
mod size;
mod uf2;

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use loglinear_planner::BoardProfile;

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
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::ImageCheck { board, elf } => {
            let profile = BoardProfile::find(&board)?;
            let bytes =
                std::fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
            let img = image::Image::from_elf32(&bytes)
                .with_context(|| format!("{} is not a 32-bit ELF file", elf.display()))?;
            let report = image::check(&profile, &img);
            print!("{report}");
            if !report.problems.is_empty() {
                bail!(
                    "{}: the image would not boot on {} ({} problems above)",
                    elf.display(),
                    profile.name,
                    report.problems.len()
                );
            }
            Ok(())
        }
        Command::Uf2Check { board, uf2 } => {
            let profile = BoardProfile::find(&board)?;
            let bytes =
                std::fs::read(&uf2).with_context(|| format!("reading {}", uf2.display()))?;
            let origins: Vec<u64> = profile.regions().map(|(_, r)| r.origin).collect();
            let img = uf2::read(&bytes, uf2::RP2040_FAMILY, &origins)
                .with_context(|| format!("{} is not a valid RP2040 UF2 file", uf2.display()))?;
            let report = image::check(&profile, &img);
            print!("{report}");
            if !report.problems.is_empty() {
                bail!(
                    "{}: the UF2 file would not boot on {} ({} problems above)",
                    uf2.display(),
                    profile.name,
                    report.problems.len()
                );
            }
            Ok(())
        }
        Command::EspImage { board, image } => {
            let profile = BoardProfile::find(&board)?;
            let bytes =
                std::fs::read(&image).with_context(|| format!("reading {}", image.display()))?;
            let report = esp_image::check(&profile, &bytes)
                .with_context(|| format!("{} is not a readable app image", image.display()))?;
            print!("{report}");
            if !report.problems.is_empty() {
                bail!(
                    "{}: the bootloader would not boot it on {} ({} problems above)",
                    image.display(),
                    profile.name,
                    report.problems.len()
                );
            }
            Ok(())
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
