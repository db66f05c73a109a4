//! `cargo xtask boards`: builds every board that cannot run here (the hardware boards and the
//! Linux board) and checks what would be flashed or copied onto it:
//!
//!   cargo xtask boards [BOARD...]            (default: every board whose kind is not `qemu`)
//!   cargo xtask boards --update [BOARD...]   rewrite the boards' size.txt
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
//!   that the tool itself lists: `probe-rs chip info`, `espflash flash --chip` values; so does
//!   board.toml's `probe_rs_chip`.
//! * rp2040 (a board with [memory.boot2]): elf2uf2-rs writes the UF2 file, and `uf2.rs` checks
//!   what it would write to flash (vector table, second stage's CRC). esp32c3 (an espflash
//!   runner): `espflash save-image` writes the app image, and `esp_image.rs` reads it back
//!   (header, segments, checksum, SHA-256, app descriptor).
//!
//! Installs what it needs on Debian 12: the Rust targets; gcc-aarch64-linux-gnu,
//! libc6-dev-arm64-cross and libudev-dev with apt (as root, or through sudo); espflash,
//! elf2uf2-rs and probe-rs-tools with `cargo install --locked` at fixed versions. Nothing is
//! flashed: no board is attached here. The firmware builds into target/boards-build, apart from
//! target/firmware of the QEMU boards, because the firmware's ELF path is the same for every
//! board of one target.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, ensure, Context, Result};
use loglinear_planner::{Board, BoardProfile, LinuxBoard, Transport};

use crate::snapshot::{self, Elf};
use crate::tasks::{self, FirmwareBuild, Repo};
use crate::{esp_image, image, system, uf2};

/// The tools of the hardware boards, at fixed versions (`cargo install`, a few minutes each on a
/// fresh machine): espflash turns the ESP32-C3 ELF into the app image its bootloader boots,
/// elf2uf2-rs the RP2040 ELF into the UF2 file of its BOOTSEL drive, and probe-rs (the other
/// boards' runner) lists the chips it knows. Each flashes boards too; no board is attached here.
const TOOLS: [Tool; 3] = [
    Tool {
        bin: "espflash",
        version: "4.7.0",
        krate: "espflash",
    },
    Tool {
        bin: "elf2uf2-rs",
        version: "2.2.0",
        krate: "elf2uf2-rs",
    },
    Tool {
        bin: "probe-rs",
        version: "0.32.0",
        krate: "probe-rs-tools",
    },
];

/// A tool installed with `cargo install --locked <krate>@<version>`, which provides `bin`.
struct Tool {
    bin: &'static str,
    version: &'static str,
    krate: &'static str,
}

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
    /// Board names (folders under boards/); default: every hardware board, then every Linux
    /// board.
    boards: Vec<String>,
}

/// Runs the task.
pub fn run(repo: &Repo, args: Args) -> Result<()> {
    let boards = select(&args.boards)?;
    let fw_target_dir = repo.target_dir.join("boards-build");
    let work = fw_target_dir.join("elf");
    setup(repo, &boards)?;
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    clippy(&boards, &fw_target_dir)?;
    check_runners(&boards)?;
    let mut summary = Vec::new();
    for board in &boards {
        summary.push(match board {
            Board::Linux(b) => linux(repo, b, &work)?,
            Board::Firmware(b) => firmware(b, &fw_target_dir, &work, args.update)?,
        });
    }
    println!();
    println!("boards: all boards built and checked (nothing flashed: no board is attached):");
    for line in summary {
        println!("  {line}");
    }
    Ok(())
}

/// The boards named, or every board that is not a QEMU board: the hardware boards, then the
/// Linux ones.
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
            Board::Firmware(b) if b.kind == "qemu" => {}
            board => boards.push(board),
        }
    }
    boards.sort_by_key(|b| matches!(b, Board::Linux(_)));
    Ok(boards)
}

/// The firmware boards among `boards`.
fn firmware_boards(boards: &[Board]) -> impl Iterator<Item = &BoardProfile> {
    boards.iter().filter_map(|b| match b {
        Board::Firmware(b) => Some(&**b),
        Board::Linux(_) => None,
    })
}

/// The hardware boards among `boards`.
fn hardware_boards(boards: &[Board]) -> impl Iterator<Item = &BoardProfile> {
    firmware_boards(boards).filter(|b| b.kind == "hardware")
}

/// Whether `board` is built from its own crate, `boards/<board>/Cargo.toml` (a HAL board crate),
/// rather than from firmware/.
fn has_own_crate(board: &BoardProfile) -> bool {
    Path::new("boards")
        .join(&board.name)
        .join("Cargo.toml")
        .is_file()
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
    if hardware_boards(boards).next().is_some() {
        ensure_tools()?;
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

/// Installs the tools (`TOOLS`) that are missing or installed at another version.
fn ensure_tools() -> Result<()> {
    let installed = tasks::output(Command::new("cargo").args(["install", "--list"]))?;
    for tool in &TOOLS {
        if system::on_path(tool.bin) && cargo_installed(&installed, tool.krate, tool.version) {
            continue;
        }
        let has_libudev = Command::new("pkg-config")
            .args(["--exists", "libudev"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_libudev {
            println!("installing libudev-dev (the tools' serial and USB access)");
            system::apt_install(&["libudev-dev", "pkg-config"])?;
        }
        println!("installing {} {} (cargo install)", tool.krate, tool.version);
        tasks::run(Command::new("cargo").args([
            "install",
            "--locked",
            "--quiet",
            &format!("{}@{}", tool.krate, tool.version),
        ]))?;
    }
    Ok(())
}

/// Whether `cargo install --list` (its output `list`) holds `krate` at `version`.
fn cargo_installed(list: &str, krate: &str, version: &str) -> bool {
    let line = format!("{krate} v{version}:");
    list.lines().any(|l| l == line)
}

/// Clippy, -D warnings: the firmware library as the HAL board crates build it (feature `link`,
/// defmt over RTT), each HAL board crate (from its folder, whose .cargo/config.toml names the
/// target and the board), and the firmware package with the UART drivers of the hardware boards
/// without one (`cargo xtask qemu` covers the QEMU boards' configurations).
fn clippy(boards: &[Board], fw_target_dir: &Path) -> Result<()> {
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
                Command::new("cargo")
                    .args(["clippy", "--release", "-q", "--target-dir"])
                    .arg(fw_target_dir)
                    .args(["--", "-D", "warnings"])
                    .env("LOGLINEAR_TRANSPORT", "")
                    .current_dir(&dir),
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

/// Whether `espflash flash --help` (its output `help`) lists `chip` among the `--chip` values
/// (`      - esp32c3: ...` lines).
fn espflash_lists_chip(help: &str, chip: &str) -> bool {
    let item = format!("- {chip}: ");
    help.lines()
        .any(|l| l.starts_with(' ') && l.trim_start().starts_with(&item))
}

/// `cargo run` in a board's folder runs its .cargo/config.toml runner, which must be board.toml's
/// and must name a chip that its tool knows: probe-rs's own target list (`probe-rs chip info`),
/// espflash's (the values of `espflash flash --chip`). board.toml's `probe_rs_chip` too.
fn check_runners(boards: &[Board]) -> Result<()> {
    let mut espflash_help: Option<String> = None;
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
        ensure!(
            cargo_runner == board.runner,
            "{name}: {} runs '{cargo_runner}', {} says '{}'",
            config.display(),
            board.path.display(),
            board.runner
        );
        ensure!(
            !board.probe_rs_chip.is_empty(),
            "{name}: {} names no probe_rs_chip (a hardware board needs one)",
            board.path.display()
        );
        let (tool, chip) = runner_chip(&board.runner).with_context(|| name.clone())?;
        let mut chips = BTreeSet::new();
        chips.insert((ChipTool::ProbeRs, board.probe_rs_chip.as_str()));
        chips.insert((tool, chip));
        for (tool, chip) in chips {
            match tool {
                ChipTool::ProbeRs => {
                    let known = Command::new("probe-rs")
                        .args(["chip", "info", chip])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .context("running probe-rs chip info")?
                        .success();
                    ensure!(
                        known,
                        "{name}: probe-rs does not know chip '{chip}' (probe-rs chip list)"
                    );
                }
                ChipTool::Espflash => {
                    if espflash_help.is_none() {
                        espflash_help = Some(tasks::output(
                            Command::new("espflash").args(["flash", "--help"]),
                        )?);
                    }
                    let help = espflash_help.as_deref().unwrap_or_default();
                    ensure!(
                        espflash_lists_chip(help, chip),
                        "{name}: espflash does not know chip '{chip}' (espflash flash --help)"
                    );
                }
            }
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
        tasks::run(
            Command::new("cargo")
                .args(["build", "--release", "-q", "--target-dir"])
                .arg(fw_target_dir)
                .env("LOGLINEAR_TRANSPORT", "")
                .current_dir(Path::new("boards").join(name)),
        )
        .with_context(|| format!("{name}: building boards/{name}"))?;
        let built = fw_target_dir
            .join(target)
            .join("release")
            .join(format!("loglinear-{name}"));
        copy(&built, &elf)?;
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
            let mut cmd = Command::new("espflash");
            cmd.args(["save-image", "--chip", esp_chip])
                .arg(&elf)
                .arg(&bin);
            let out = cmd
                .output()
                .with_context(|| format!("starting {}", tasks::describe(&cmd)))?;
            for line in String::from_utf8_lossy(&out.stdout)
                .lines()
                .chain(String::from_utf8_lossy(&out.stderr).lines())
            {
                println!("  espflash: {line}");
            }
            ensure!(
                out.status.success(),
                "{name}: {} failed ({})",
                tasks::describe(&cmd),
                out.status
            );
            esp_image::check_file(board, &bin).with_context(|| name.clone())?;
        }
        _ => image::check_elf_file(board, &elf).with_context(|| name.clone())?,
    }
    if let Some(boot2) = board.other_regions.get("boot2") {
        let uf2_file = work.join(format!("{name}.uf2"));
        tasks::run(
            Command::new("elf2uf2-rs")
                .arg(&elf)
                .arg(&uf2_file)
                .stdout(Stdio::null()),
        )
        .with_context(|| format!("{name}: writing the UF2 file"))?;
        println!(
            "  {} ({} B, elf2uf2-rs):",
            uf2_file.display(),
            file_len(&uf2_file)?
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
    fn espflash_chips_are_read_from_its_help() {
        let help = "      --chip <CHIP>\n          Target device\n\n          Possible values:\n          - esp32:   ESP32\n          - esp32c3: ESP32-C3, ESP8685\n";
        assert!(espflash_lists_chip(help, "esp32c3"));
        assert!(espflash_lists_chip(help, "esp32"));
        assert!(!espflash_lists_chip(help, "esp32c6"));
        assert!(!espflash_lists_chip(
            "- esp32c3: at the margin\n",
            "esp32c3"
        ));
    }

    #[test]
    fn cargo_install_list_is_matched_by_crate_and_version() {
        let list = "elf2uf2-rs v2.2.0:\n    elf2uf2-rs\nprobe-rs-tools v0.32.0:\n    probe-rs\n";
        assert!(cargo_installed(list, "probe-rs-tools", "0.32.0"));
        assert!(!cargo_installed(list, "probe-rs-tools", "0.31.0"));
        assert!(!cargo_installed(list, "probe-rs", "0.32.0"));
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
