//! `cargo xtask boards`: builds every board that cannot run here (the hardware boards and the
//! Linux board) and checks what would be flashed or copied onto it:
//!
//!   cargo xtask boards [BOARD...]            (default: every board whose kind is not `qemu`)
//!   cargo xtask boards --update [BOARD...]   rewrite the boards' size.txt
//!   cargo xtask boards --kind hardware|linux  only the chips, or only the Linux boards
//!
//! * stm32h743, nrf52840, rp2040, esp32c3: each board's own crate (`boards/<board>/Cargo.toml`,
//!   on its vendor's HAL: embassy-stm32, embassy-nrf, embassy-rp, esp-hal), built from its
//!   folder, with the model, state type and levels of its board.toml, so firmware/build.rs's
//!   fit check runs against the real memory map. Checks that `.bss` (the session arena) lies in
//!   the board's [memory.ram], that an RP2040 image has its 256-byte `.boot2` at [memory.boot2],
//!   that the image has no semihosting trap (it must run without a probe; checked with
//!   llvm-objdump where it is installed), and that it would boot (`image.rs`: segments in the
//!   memory map, the vector table, the RP2040 second stage's CRC). `cargo fmt --check` and
//!   clippy (-D warnings) check every board crate, and the firmware library as they build it.
//!   Each image's sizes must match `boards/<board>/size.txt` (bss exactly, the others within
//!   max(4 KiB, 2 %); `snapshot.rs`, as for the QEMU boards in `cargo xtask plan`).
//! * linux-aarch64: a std build of loglinear-runtime and of the `loglinear` CLI for
//!   aarch64-unknown-linux-gnu (linked with Debian's gcc-aarch64-linux-gnu), an AArch64 ELF.
//! * for each hardware board, its runner (board.toml and .cargo/config.toml agree) names a chip
//!   that the tool itself lists: probe-rs's built-in chip list (what `probe-rs chip info`
//!   reads), espflash's `--chip` values; so does board.toml's `probe_rs_chip`.
//! * rp2040 (a board with [memory.boot2]): elf2uf2-rs's converter writes the UF2 file, and
//!   `uf2.rs` checks what it would write to flash (vector table, second stage's CRC). esp32c3
//!   (an espflash runner): espflash's image writer makes the app image that `espflash
//!   save-image` writes, and `esp_image.rs` reads it back (header, segments, checksum, SHA-256,
//!   app descriptor).
//!
//! The tools' parts come from their crates, linked into xtask (`board_tools.rs`), so that no
//! command-line tool is installed for the checks; a user who flashes installs them (each board's
//! README).
//!
//! Installs what it needs on Debian 12: the Rust targets; gcc-aarch64-linux-gnu and
//! libc6-dev-arm64-cross with apt (as root, or through sudo). Nothing is flashed: no board is
//! attached here. The firmware builds into target/boards-build, apart from target/firmware of
//! the QEMU boards, because the firmware's ELF path is the same for every board of one target.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use loglinear_planner::{Board, BoardProfile, LinuxBoard, Transport};

use crate::snapshot::{self, Elf};
use crate::stages::Stages;
use crate::tasks::{self, has_own_crate, BoardCrateBuild, FirmwareBuild, Repo};
use crate::{board_tools, esp_image, image, system, uf2};

/// The Linux target whose cross linker and C library this task installs, with their Debian
/// packages and the file that shows the C library is there.
const AARCH64: &str = "aarch64-unknown-linux-gnu";
const AARCH64_PACKAGES: [&str; 2] = ["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];
const AARCH64_LIBC: &str = "/usr/aarch64-linux-gnu/lib/libc.so";

/// The board whose target and settings check the firmware library as the HAL board crates
/// build it (feature `link`, defmt over RTT).
const LIBRARY_CLIPPY_BOARD: &str = "stm32h743";

/// The sections listed for each image: where the vector table, code, model, statics and arena
/// went.
const LISTED: [&str; 6] = [
    ".boot2",
    ".vector_table",
    ".text",
    ".rodata",
    ".data",
    ".bss",
];
/// What is flashed (the summary's flash figure): everything loaded from flash.
const FLASHED: [&str; 5] = [".boot2", ".vector_table", ".text", ".rodata", ".data"];
/// The statics in RAM (the summary's RAM figure); riscv-rt's `.stack`, the rest of the RAM
/// region, is left out.
const STATICS: [&str; 2] = [".data", ".bss"];

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {
    /// Rewrite `boards/<board>/size.txt` from the builds instead of checking them.
    #[arg(long)]
    update: bool,
    /// Only the boards of this kind: `hardware` (the chips' firmware) or `linux` (the std
    /// builds); default: both.
    #[arg(long, value_enum)]
    kind: Option<Kind>,
    /// Board names (folders under boards/); default: every hardware board, then every Linux
    /// board.
    boards: Vec<String>,
}

/// The two kinds of board this task builds.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A chip that runs the firmware (`kind = "hardware"` in its board.toml).
    Hardware,
    /// A Linux board: a std build of the runtime and the CLI.
    Linux,
}

/// Runs the task: the set-up, the lints and the runner checks, then each board, each a stage
/// of `stages`.
pub fn run(repo: &Repo, args: Args, stages: &mut Stages) -> Result<()> {
    let boards: Vec<Board> = select(&args.boards)?
        .into_iter()
        .filter(|b| args.kind.is_none_or(|kind| kind == Kind::of(b)))
        .collect();
    let fw_target_dir = repo.target_dir.join("boards-build");
    let work = fw_target_dir.join("elf");
    stages.run("set-up", |_| setup(repo, &boards))?;
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    stages.run("fmt and clippy of the board crates", |_| {
        clippy(&boards, &fw_target_dir)
    })?;
    stages.run("runners and chips", |_| check_runners(&boards))?;
    let mut summary = Vec::new();
    for board in &boards {
        let line = stages.run(board.name(), |_| match board {
            Board::Linux(b) => linux(repo, b, &work),
            Board::Firmware(b) => firmware(b, &fw_target_dir, &work, args.update),
        })?;
        summary.push(line);
    }
    println!();
    println!("boards: all boards built and checked (nothing flashed: no board is attached):");
    for line in summary {
        println!("  {line}");
    }
    Ok(())
}

/// The boards named, or every board that is not a QEMU board (a QEMU board with a crate of its
/// own, whose image is also flashed, counts as a hardware board here): the hardware boards, then
/// the Linux ones.
fn select(names: &[String]) -> Result<Vec<Board>> {
    if !names.is_empty() {
        return names
            .iter()
            .map(|name| Board::find(name).with_context(|| format!("board {name}")))
            .collect();
    }
    let mut boards = Vec::new();
    for name in Board::list(Some(Path::new("boards"))) {
        match Board::find(&name).with_context(|| format!("board {name}"))? {
            Board::Firmware(b) if b.kind == "qemu" && !has_own_crate(&b) => {}
            board => boards.push(board),
        }
    }
    boards.sort_by_key(|b| matches!(b, Board::Linux(_)));
    Ok(boards)
}

impl Kind {
    fn of(board: &Board) -> Self {
        match board {
            Board::Linux(_) => Kind::Linux,
            Board::Firmware(_) => Kind::Hardware,
        }
    }
}

/// The firmware boards among `boards`.
fn firmware_boards(boards: &[Board]) -> impl Iterator<Item = &BoardProfile> {
    boards.iter().filter_map(|b| match b {
        Board::Firmware(b) => Some(&**b),
        Board::Linux(_) => None,
    })
}

/// The boards among `boards` whose image is flashed to a chip: the hardware boards, and the QEMU
/// boards with a crate of their own (b-l475e-iot01a: QEMU runs its `defmt-semihosting` build,
/// a user flashes this one).
fn hardware_boards(boards: &[Board]) -> impl Iterator<Item = &BoardProfile> {
    firmware_boards(boards).filter(|b| b.kind == "hardware" || has_own_crate(b))
}

/// Installs what the boards' builds and checks need: Rust targets, the Linux boards' linkers,
/// the hardware boards' tools, and the model files converted at test time.
fn setup(repo: &Repo, boards: &[Board]) -> Result<()> {
    system::ensure_rust_targets(boards.iter().map(Board::target))?;
    for board in boards {
        if let Board::Linux(b) = board {
            ensure_linker(b)?;
        }
    }
    // A board whose model is converted at test time (under target/models/) needs the host CLI.
    let converted = firmware_boards(boards)
        .map(tasks::board_model)
        .find(|m| m.starts_with("target/models"));
    if let Some(model) = converted {
        println!("building the host CLI (to convert {})", model.display());
        let cli = repo.host_cli()?;
        repo.make_board_models(&cli)?;
    }
    Ok(())
}

/// Installs the C linker and C library of a Linux board's target where they are missing (the
/// AArch64 ones, from Debian's packages).
fn ensure_linker(board: &LinuxBoard) -> Result<()> {
    let has_libc = board.target != AARCH64 || Path::new(AARCH64_LIBC).exists();
    if system::on_path(&board.linker) && has_libc {
        return Ok(());
    }
    ensure!(
        board.target == AARCH64,
        "{}: the linker {} of {} is not installed (this task installs {AARCH64}'s alone)",
        board.name,
        board.linker,
        board.target
    );
    println!(
        "installing {} (linker for {AARCH64})",
        AARCH64_PACKAGES.join(" and ")
    );
    system::apt_install(&AARCH64_PACKAGES).with_context(|| format!("{}: installing", board.name))
}

/// Clippy, -D warnings: the firmware library as the HAL board crates build it (feature `link`,
/// defmt over RTT), each HAL board crate (from its folder, whose .cargo/config.toml names the
/// target and the board), and the firmware package with the UART drivers of the hardware boards
/// without one (`cargo xtask qemu` covers the QEMU boards' configurations).
fn clippy(boards: &[Board], fw_target_dir: &Path) -> Result<()> {
    if hardware_boards(boards).next().is_none() {
        return Ok(());
    }
    println!("firmware (library, features link + defmt-rtt): cargo clippy -D warnings");
    let lib_board = BoardProfile::find(LIBRARY_CLIPPY_BOARD)
        .with_context(|| format!("board {LIBRARY_CLIPPY_BOARD}"))?;
    let mut cmd = FirmwareBuild {
        features: &["link", "defmt-rtt"],
        ..FirmwareBuild::new(&lib_board, Path::new(""), fw_target_dir)
    }
    .command("clippy");
    cmd.args(["--lib", "--no-default-features", "--", "-D", "warnings"]);
    tasks::run(&mut cmd).context("clippy of the firmware library (features link, defmt-rtt)")?;
    for board in hardware_boards(boards) {
        let name = &board.name;
        if has_own_crate(board) {
            println!("boards/{name}: cargo fmt --check, cargo clippy -D warnings");
            let dir = Path::new("boards").join(name);
            tasks::run(
                Command::new("cargo")
                    .args(["fmt", "--check"])
                    .current_dir(&dir),
            )
            .with_context(|| format!("{name}: boards/{name} is not formatted"))?;
            tasks::run(
                BoardCrateBuild::new(board, fw_target_dir)
                    .command("clippy")
                    .args(["--", "-D", "warnings"]),
            )
            .with_context(|| format!("{name}: clippy of boards/{name}"))?;
            continue;
        }
        println!(
            "firmware: cargo clippy --target {} -D warnings ({name}, uart {})",
            board.target,
            board.uart.as_deref().unwrap_or("none")
        );
        FirmwareBuild::new(board, &tasks::board_model(board), fw_target_dir).clippy()?;
    }
    Ok(())
}

/// The tool of a runner command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ChipTool {
    ProbeRs,
    Espflash,
}

impl ChipTool {
    fn name(self) -> &'static str {
        match self {
            ChipTool::ProbeRs => "probe-rs",
            ChipTool::Espflash => "espflash",
        }
    }

    /// The tool's command that lists its chips, for a user to look one up.
    fn list_command(self) -> &'static str {
        match self {
            ChipTool::ProbeRs => "probe-rs chip list",
            ChipTool::Espflash => "espflash flash --help",
        }
    }
}

/// The tool and chip of a runner line: `probe-rs run --chip CHIP ...` or `espflash flash --chip
/// CHIP ...`.
fn runner_chip(runner: &str) -> Result<(ChipTool, &str)> {
    let words: Vec<&str> = runner.split_whitespace().collect();
    match words.as_slice() {
        ["probe-rs", "run", "--chip", chip, ..] => Ok((ChipTool::ProbeRs, chip)),
        ["espflash", "flash", "--chip", chip, ..] => Ok((ChipTool::Espflash, chip)),
        _ => bail!(
            "runner '{runner}' is neither `probe-rs run --chip CHIP` nor `espflash flash --chip \
             CHIP`"
        ),
    }
}

/// The `runner` of `target` in the text of a `.cargo/config.toml` (`[target.<triple>]`; a string
/// or an array of words), if it has one.
fn cargo_config_runner(text: &str, target: &str) -> Result<Option<String>> {
    let table: toml::Table = text.parse()?;
    let Some(targets) = table.get("target") else {
        return Ok(None);
    };
    // `[target.thumbv8m.main-none-eabihf]` unquoted nests a table at each dot.
    let by_triple = targets.get(target).or_else(|| {
        target
            .split('.')
            .try_fold(targets, |table, part| table.get(part))
    });
    let Some(runner) = by_triple.and_then(|t| t.get("runner")) else {
        return Ok(None);
    };
    if let Some(line) = runner.as_str() {
        return Ok(Some(line.to_string()));
    }
    let words = runner
        .as_array()
        .and_then(|words| {
            words
                .iter()
                .map(toml::Value::as_str)
                .collect::<Option<Vec<_>>>()
        })
        .context("runner is neither a string nor an array of strings")?;
    Ok(Some(words.join(" ")))
}

/// `cargo run` in a board's folder runs its .cargo/config.toml runner, which must be board.toml's
/// and must name a chip that its tool knows: probe-rs's built-in target list (what `probe-rs
/// chip info` reads), espflash's `--chip` values; board.toml's `probe_rs_chip` too. Both lists
/// come from the tools' crates (`board_tools.rs`).
fn check_runners(boards: &[Board]) -> Result<()> {
    for board in hardware_boards(boards) {
        let name = &board.name;
        let config = Path::new("boards").join(name).join(".cargo/config.toml");
        let text = std::fs::read_to_string(&config)
            .with_context(|| format!("{name}: reading {}", config.display()))?;
        let cargo_runner = cargo_config_runner(&text, &board.target)
            .with_context(|| format!("{name}: reading {}", config.display()))?
            .with_context(|| {
                format!(
                    "{name}: {} has no runner for [target.{}]",
                    config.display(),
                    board.target
                )
            })?;
        // A QEMU board's `runner` is QEMU's; `cargo run` in its crate's folder flashes the chip
        // that board.toml's `probe_rs_chip` names.
        let flash_runner = if board.kind == "qemu" {
            format!("probe-rs run --chip {}", board.probe_rs_chip)
        } else {
            board.runner.clone()
        };
        ensure!(
            cargo_runner == flash_runner,
            "{name}: {} runs '{cargo_runner}', {} says '{flash_runner}'",
            config.display(),
            board.path.display(),
        );
        ensure!(
            !board.probe_rs_chip.is_empty(),
            "{name}: {} names no probe_rs_chip (a hardware board needs one)",
            board.path.display()
        );
        let (tool, chip) = runner_chip(&flash_runner).with_context(|| name.clone())?;
        let mut chips = BTreeSet::new();
        chips.insert((ChipTool::ProbeRs, board.probe_rs_chip.as_str()));
        chips.insert((tool, chip));
        for (tool, chip) in chips {
            let known = match tool {
                ChipTool::ProbeRs => board_tools::probe_rs_knows(chip),
                ChipTool::Espflash => board_tools::espflash_knows(chip),
            };
            ensure!(
                known,
                "{name}: {} does not know chip '{chip}' (`{}` lists the chips it knows)",
                tool.name(),
                tool.list_command()
            );
            println!("{name}: {} knows chip {chip}", tool.name());
        }
    }
    Ok(())
}

/// The std build of a Linux board: the runtime library and the CLI, an ELF of the board's
/// machine. Returns the summary line.
fn linux(repo: &Repo, board: &LinuxBoard, work: &Path) -> Result<String> {
    let (name, target, linker) = (&board.name, &board.target, &board.linker);
    println!();
    println!("==== {name}: std build for {target} (linker {linker}) ====");
    tasks::run(Command::new("cargo").args([
        "build",
        "--release",
        "-q",
        "-p",
        "loglinear-runtime",
        "--target",
        target,
    ]))
    .with_context(|| format!("{name}: building loglinear-runtime"))?;
    let linker_var = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace(['-', '.'], "_")
    );
    tasks::run(
        Command::new("cargo")
            .args(["build", "--release", "-q", "-p", "loglinear-cli"])
            .args(["--bin", "loglinear", "--target", target])
            .env(linker_var, linker),
    )
    .with_context(|| format!("{name}: building the loglinear CLI"))?;
    let release = repo.target_dir.join(target).join("release");
    let elf = work.join(format!("{name}-loglinear"));
    copy(&release.join("loglinear"), &elf)?;
    let info = Elf::read(&elf)?;
    let (machine, machine_name) = machine_of(target)
        .with_context(|| format!("{name}: no ELF machine known for target {target}"))?;
    ensure!(
        info.architecture == machine,
        "{}: machine is {:?}, not {machine_name}",
        elf.display(),
        info.architecture
    );
    let rlib = release.join("libloglinear_runtime.rlib");
    ensure!(
        rlib.is_file(),
        "{name}: no {} after its build",
        rlib.display()
    );
    let bytes = file_len(&elf)?;
    println!("  loglinear-runtime rlib: {}", rlib.display());
    println!(
        "  loglinear CLI: {} ({machine_name}, {bytes} B)",
        elf.display()
    );
    print!("{}", info.berkeley_table(&elf, "  "));
    Ok(format!("{name}: loglinear CLI {bytes} B ({machine_name})"))
}

/// The ELF machine of a Linux target, with its name as readelf prints it.
fn machine_of(target: &str) -> Option<(object::Architecture, &'static str)> {
    let arch = target.split('-').next()?;
    Some(match arch {
        "aarch64" => (object::Architecture::Aarch64, "AArch64"),
        "x86_64" => (
            object::Architecture::X86_64,
            "Advanced Micro Devices X86-64",
        ),
        "riscv64gc" => (object::Architecture::Riscv64, "RISC-V"),
        a if a.starts_with("armv7") || a == "arm" => (object::Architecture::Arm, "ARM"),
        _ => return None,
    })
}

/// A hardware board's firmware: built, its sections listed, checked (arena in RAM, boot,
/// flashable images, no semihosting, size snapshot). Returns the summary line.
fn firmware(
    board: &BoardProfile,
    fw_target_dir: &Path,
    work: &Path,
    update: bool,
) -> Result<String> {
    let name = &board.name;
    let model = tasks::board_model(board);
    ensure!(
        model.is_file(),
        "{}: model {} is missing",
        board.path.display(),
        model.display()
    );
    let (target, state, levels) = (&board.target, board.state, board.levels);
    let chip = &board.probe_rs_chip;
    let elf = work.join(format!("{name}.elf"));
    let own_crate = has_own_crate(board);
    let transport = match (board.transport, &board.uart) {
        (Transport::Uart, Some(uart)) if !own_crate => format!("uart {uart}"),
        (t, _) => t.name().to_string(),
    };
    println!();
    if own_crate {
        println!(
            "==== {name} ({chip}): its HAL crate boards/{name}, {target}, {state} state, {levels} \
             levels, model {}, transport {transport} ====",
            model.display()
        );
        BoardCrateBuild::new(board, fw_target_dir).build(&elf)?;
    } else {
        println!(
            "==== {name} ({chip}): firmware/, {target}, {state} state, {levels} levels, model \
             {}, transport {transport} ====",
            model.display()
        );
        FirmwareBuild::new(board, &model, fw_target_dir).build(&elf)?;
    }
    let info = Elf::read(&elf).with_context(|| name.clone())?;
    print!("{}", info.berkeley_table(&elf, "  "));
    print!("{}", info.section_lines(&LISTED));

    let bss = info.section(".bss").with_context(|| {
        format!(
            "{name}: {} has no .bss section (the session arena)",
            elf.display()
        )
    })?;
    let ram = board.ram;
    ensure!(
        bss.address >= ram.origin
            && bss.address.saturating_add(bss.size) <= ram.origin.saturating_add(ram.length),
        "{name}: .bss (the arena) at {:#010x} + {} B is not inside [memory.ram] ({:#010x} + {} B)",
        bss.address,
        bss.size,
        ram.origin,
        ram.length
    );

    // The image would boot. Arm and RP2040: segments in the board's memory, the vector table,
    // the second stage's CRC. ESP32-C3: the app image that espflash makes from the ELF (and that
    // `cargo run` flashes) reads back with its header, segments, checksum, SHA-256 and app
    // descriptor.
    match runner_chip(&board.runner) {
        Ok((ChipTool::Espflash, esp_chip)) => {
            let bin = work.join(format!("{name}.bin"));
            let app = board_tools::esp_app_image(esp_chip, &read(&elf)?)
                .with_context(|| format!("{name}: the app image of {}", elf.display()))?;
            write(&bin, &app)?;
            println!(
                "  {} ({} B, espflash's app image for {esp_chip}):",
                bin.display(),
                app.len()
            );
            esp_image::check_file(board, &bin).with_context(|| name.clone())?;
        }
        _ => image::check_elf_file(board, &elf).with_context(|| name.clone())?,
    }
    if let Some(boot2) = board.other_regions.get("boot2") {
        let uf2_file = work.join(format!("{name}.uf2"));
        let uf2 = board_tools::rp2040_uf2(&read(&elf)?)
            .with_context(|| format!("{name}: the UF2 file of {}", elf.display()))?;
        write(&uf2_file, &uf2)?;
        println!(
            "  {} ({} B, elf2uf2-rs's UF2 writer):",
            uf2_file.display(),
            uf2.len()
        );
        uf2::check_file(board, &uf2_file).with_context(|| name.clone())?;
        let found = info.section(".boot2").map(|s| (s.size, s.address));
        ensure!(
            found == Some((boot2.length, boot2.origin)),
            "{name}: no {}-byte .boot2 at {:#010x} ([memory.boot2]); got {}",
            boot2.length,
            boot2.origin,
            found.map_or("none".to_string(), |(size, addr)| format!(
                "{size} B at {addr:#010x}"
            ))
        );
    }

    // A UART or USB image uses no semihosting (firmware/build.rs): no `bkpt` / `ebreak` trap in
    // its code, so it runs on a board with no debug probe attached.
    if board.transport != Transport::Semihosting {
        if system::on_path("llvm-objdump") {
            let listing = tasks::output(Command::new("llvm-objdump").arg("-d").arg(&elf))
                .with_context(|| format!("{name}: disassembling"))?;
            let traps: Vec<&str> = listing.lines().filter(|l| is_trap(l)).collect();
            ensure!(
                traps.is_empty(),
                "{name}: {} semihosting traps (bkpt/ebreak) in a {transport} image, such as:\n{}",
                traps.len(),
                traps[..traps.len().min(5)].join("\n")
            );
            println!("  ok: no semihosting traps (bkpt/ebreak) in the code");
        } else {
            println!("  skipped: the semihosting-trap check (llvm-objdump is not installed)");
        }
    }

    if own_crate {
        snapshot::check(
            name,
            &info.sizes(),
            &model,
            update,
            &snapshot::update_command("boards", name),
        )
        .with_context(|| format!("{name}: size snapshot"))?;
    }
    let model_file = model.file_name().map_or_else(
        || model.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    );
    Ok(format!(
        "{name}: flash {} B, RAM {} B (.data + .bss; {state} x {levels} levels, {model_file}), \
         {transport}",
        info.bytes_of(&FLASHED),
        info.bytes_of(&STATICS)
    ))
}

/// Whether a line of `llvm-objdump -d` is a semihosting trap: a `bkpt` or `ebreak` instruction
/// after white space, ending a word.
fn is_trap(line: &str) -> bool {
    ["bkpt", "ebreak"].iter().any(|op| {
        line.match_indices(op).any(|(at, _)| {
            let before = line[..at].chars().next_back();
            let after = line[at + op.len()..].chars().next();
            before.is_some_and(char::is_whitespace)
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

fn file_len(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_lines_name_their_tool_and_chip() {
        assert_eq!(
            runner_chip("probe-rs run --chip STM32H743ZITx").unwrap(),
            (ChipTool::ProbeRs, "STM32H743ZITx")
        );
        assert_eq!(
            runner_chip("espflash flash --chip esp32c3 --monitor").unwrap(),
            (ChipTool::Espflash, "esp32c3")
        );
        assert!(runner_chip("probe-rs run").is_err());
        assert!(runner_chip("qemu-system-arm -machine microbit -kernel").is_err());
        assert!(runner_chip("").is_err());
    }

    #[test]
    fn the_cargo_runner_is_read_from_the_config() {
        let config = r#"
# a comment with runner = "no"
[build]
target = "thumbv6m-none-eabi"

[target.thumbv6m-none-eabi]
runner = "probe-rs run --chip RP2040"

[target.thumbv8m.main-none-eabihf]
runner = ["qemu-system-arm", "-kernel"]

[env]
LOGLINEAR_BOARD = "rp2040"
"#;
        assert_eq!(
            cargo_config_runner(config, "thumbv6m-none-eabi").unwrap(),
            Some("probe-rs run --chip RP2040".into())
        );
        assert_eq!(
            cargo_config_runner(config, "thumbv8m.main-none-eabihf").unwrap(),
            Some("qemu-system-arm -kernel".into())
        );
        assert_eq!(cargo_config_runner(config, "riscv32imc").unwrap(), None);
        assert!(cargo_config_runner("[target\n", "x").is_err());
        assert!(cargo_config_runner("[target.x]\nrunner = 3\n", "x").is_err());
    }

    #[test]
    fn traps_are_whole_instructions() {
        assert!(is_trap("  8000298: 00 be         \tbkpt\t#0x0"));
        assert!(is_trap("42000000: 73 00 10 00   \tebreak"));
        assert!(!is_trap("08000300 <bkpt_handler>:"));
        assert!(!is_trap(
            "  8000298: 00 be         \tbl\t0x8000400 <ebreaker>"
        ));
        assert!(!is_trap("  8000298: 00 be         \tnop"));
    }

    #[test]
    fn linux_targets_map_to_elf_machines() {
        assert_eq!(
            machine_of("aarch64-unknown-linux-gnu"),
            Some((object::Architecture::Aarch64, "AArch64"))
        );
        assert_eq!(machine_of("mips-unknown-linux-gnu"), None);
    }
}
