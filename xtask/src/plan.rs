//! `cargo xtask plan`: the memory planner against the linked firmware, and the firmware size
//! snapshots.
//!
//!   cargo xtask plan [BOARD...]            check (default: every QEMU board)
//!   cargo xtask plan --update [BOARD...]   rewrite `boards/<board>/size.txt`
//!
//! For each board it builds firmware/ exactly as `cargo xtask qemu` does (the same flags and
//! target folder, target/firmware, so after that task this build is a no-op), reads the ELF's
//! sections (`snapshot.rs`) and checks:
//!
//! 0. the image would boot (`image.rs`): every loaded segment in the board's memory regions, a
//!    valid vector table at the code memory's origin (Cortex-M) or entry point (RISC-V).
//! 1. planner vs ELF: `loglinear plan --board B --model M` reports the session arena that the
//!    firmware links as `static ARENA`; the ELF's .bss + .data must lie within
//!    [arena, arena + other statics] (the planner's "other statics" allowance, `other_statics` in
//!    planner/src/lib.rs, read from the report). And the code the ELF holds besides the model
//!    (text + rodata + data − model bytes) must fit the planner's code estimate (the board's
//!    firmware.code_reserve).
//! 2. size snapshot (the RTIC way): text (code: .vector_table, .text, .init.rust, .eh_frame...),
//!    rodata (model + constants), data and bss must match `boards/<board>/size.txt`: bss exactly
//!    (it is the arena), the others within max(4096 B, 2 %). On a mismatch it prints a diff;
//!    after an intended change run `cargo xtask plan --update` and commit the size.txt files
//!    (and the "Firmware sizes" table in BENCHMARKS.md).
//! 3. a model that does not fit fails the firmware build with the planner's report: building
//!    microbit (16 KiB RAM, 256 KiB flash) with the shipped model must fail, and the build's
//!    stderr must hold every line of `loglinear plan --board microbit --model <shipped model>`
//!    up to its verdict (the first line, which names the board.toml path as each found it, by
//!    its start; the levels recommendation after the verdict is the CLI's alone).
//!
//! 4. the footprint goals: `b-l475e-iot01a` built with the flash-first profile
//!    (`release-small`) holds at most 48 KiB of runtime code and constants (checked), and its
//!    code and constants besides the model, summed by crate (`size.rs`), are reported against
//!    the goal of 64 KiB: its image is its HAL crate's, whose vendor HAL, executor and link
//!    count there too.
//!
//! Checks 0 to 2 of every board and check 4 run even after one fails; the task fails at the
//! end, listing what failed.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use loglinear_planner::{Board, BoardProfile};

use crate::size::{self, Footprint};
use crate::snapshot::{self, Elf};
use crate::tasks::{
    self, BoardCrateBuild, FirmwareBuild, Repo, DEFAULT_MODEL, RELEASE, RELEASE_SMALL,
};
use crate::{image, system};

/// The board that the shipped model does not fit (check 3).
const NO_FIT_BOARD: &str = "microbit";
/// The board whose flash-first image is held to the footprint goals (check 4).
const GOAL_BOARD: &str = "b-l475e-iot01a";

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {
    /// Rewrite `boards/<board>/size.txt` from the builds instead of checking them.
    #[arg(long)]
    update: bool,
    /// Board names (folders under boards/); default: every QEMU board (`kind = "qemu"`).
    boards: Vec<String>,
}

/// Runs the task.
pub fn run(repo: &Repo, args: Args) -> Result<()> {
    let boards = select(&args.boards)?;
    let no_fit =
        BoardProfile::find(NO_FIT_BOARD).with_context(|| format!("board {NO_FIT_BOARD}"))?;
    system::ensure_rust_targets(
        boards
            .iter()
            .map(|b| b.target.as_str())
            .chain([no_fit.target.as_str()]),
    )?;
    println!("building the host CLI");
    let cli = repo.host_cli()?;
    repo.make_board_models(&cli)?;
    let fw_target_dir = repo.target_dir.join("firmware");
    let dirs = TargetDirs {
        firmware: fw_target_dir.clone(),
        board_crates: repo.target_dir.join("boards-build"),
    };

    let mut failed: Vec<String> = Vec::new();
    for board in &boards {
        check_board(board, &cli, &dirs, args.update, &mut failed)?;
    }
    if let Some(board) = boards.iter().find(|b| b.name == GOAL_BOARD) {
        println!();
        println!("==== {GOAL_BOARD}, profile {RELEASE_SMALL}: the footprint goals ====");
        if let Err(e) = check_footprint(board, &dirs) {
            eprintln!("FAIL: {e:#}");
            failed.push(format!("{GOAL_BOARD}: footprint goals"));
        }
    }
    println!();
    println!(
        "==== {NO_FIT_BOARD} with the shipped model: the build must fail with the planner's \
         report ===="
    );
    let nofit_dir = repo.target_dir.join("plan-nofit");
    if let Err(e) = check_no_fit(&no_fit, &cli, &fw_target_dir, &nofit_dir) {
        eprintln!("FAIL: {e:#}");
        failed.push(format!("{NO_FIT_BOARD}: the build with {DEFAULT_MODEL}"));
    }
    if !failed.is_empty() {
        let checks = if failed.len() == 1 { "check" } else { "checks" };
        bail!(
            "plan: {} {checks} failed (see above): {}",
            failed.len(),
            failed.join("; ")
        );
    }
    let names: Vec<&str> = boards.iter().map(|b| b.name.as_str()).collect();
    println!();
    println!(
        "plan: all boards passed ({}), and a model that does not fit fails the build with the \
         planner's report",
        names.join(" ")
    );
    Ok(())
}

/// The boards named, or every QEMU board.
fn select(names: &[String]) -> Result<Vec<BoardProfile>> {
    if names.is_empty() {
        return tasks::qemu_boards();
    }
    names
        .iter()
        .map(
            |name| match Board::find(name).with_context(|| format!("board {name}"))? {
                Board::Firmware(b) => Ok(*b),
                Board::Linux(b) => bail!(
                    "{name}: a Linux board ({}) has no firmware to plan",
                    b.path.display()
                ),
            },
        )
        .collect()
}

/// Check 4: the board's image built for flash (profile `release-small`) meets the footprint
/// goals of issue 19, summed by crate: the runtime at most 48 KiB, the image without its model
/// at most 64 KiB.
fn check_footprint(board: &BoardProfile, dirs: &TargetDirs) -> Result<()> {
    let name = &board.name;
    let footprint = footprint_of(&build_with(board, dirs, RELEASE_SMALL)?)?;
    if footprint.runtime > size::RUNTIME_GOAL {
        bail!(
            "{name} ({RELEASE_SMALL}): the runtime takes {} B, more than the goal of {} B",
            footprint.runtime,
            size::RUNTIME_GOAL
        );
    }
    println!(
        "  ok: runtime {} B ≤ {} B",
        footprint.runtime,
        size::RUNTIME_GOAL
    );
    // The whole image's goal is reported, not enforced: the board's image is its HAL crate's,
    // whose vendor HAL, executor and serial link count against it too (BENCHMARKS.md, "Smaller
    // code"). Its size snapshot (boards/<board>/size.txt, `cargo xtask boards`) catches growth.
    let (verdict, by) = match footprint.without_model.checked_sub(size::FIRMWARE_GOAL) {
        None | Some(0) => ("meets", size::FIRMWARE_GOAL - footprint.without_model),
        Some(over) => ("misses", over),
    };
    println!(
        "  image without the model {} B: {verdict} the goal of {} B by {by} B",
        footprint.without_model,
        size::FIRMWARE_GOAL
    );
    Ok(())
}

/// The footprint of the image at `elf`, summed by crate.
fn footprint_of(elf: &Path) -> Result<Footprint> {
    let bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    Ok(Footprint::of(&size::by_crate(&bytes)?))
}

/// Where the images are built: firmware/'s as `cargo xtask qemu` builds them, a HAL board
/// crate's as `cargo xtask boards` does (the image a user flashes), so that each build is that
/// task's.
struct TargetDirs {
    firmware: PathBuf,
    board_crates: PathBuf,
}

/// Builds `board`'s image with `profile`: firmware/'s, or its own crate's default (RTT) build.
/// Returns where cargo wrote it.
fn build_with(board: &BoardProfile, dirs: &TargetDirs, profile: &str) -> Result<PathBuf> {
    let name = &board.name;
    if tasks::has_own_crate(board) {
        let elf = dirs
            .board_crates
            .join("elf")
            .join(format!("{name}-{profile}.elf"));
        return BoardCrateBuild {
            profile,
            ..BoardCrateBuild::new(board, &dirs.board_crates)
        }
        .build(&elf);
    }
    let model = tasks::board_model(board);
    let build = FirmwareBuild {
        profile,
        ..FirmwareBuild::new(board, &model, &dirs.firmware)
    };
    tasks::run(&mut build.command("build"))
        .with_context(|| format!("building the firmware for {name} ({profile})"))?;
    Ok(build.elf())
}

/// Checks 0 to 2 of one board. A failed check is printed and added to `failed`; an error is
/// something that stops the task (a build that fails, a planner report without its figures).
/// A board with a crate of its own has its size snapshot checked by `cargo xtask boards`.
fn check_board(
    board: &BoardProfile,
    cli: &Path,
    dirs: &TargetDirs,
    update: bool,
    failed: &mut Vec<String>,
) -> Result<()> {
    let name = &board.name;
    let model = tasks::board_model(board);
    let model_bytes = std::fs::metadata(&model)
        .with_context(|| format!("{name}: model {}", model.display()))?
        .len();
    println!();
    println!("==== {name} ({}) ====", board.target);
    let elf = build_with(board, dirs, RELEASE)?;

    // 0. the image would boot: segments in the board's memory, vector table or entry point
    if let Err(e) = image::check_elf_file(board, &elf) {
        eprintln!("FAIL: {name}: {e:#}");
        failed.push(format!("{name}: boot"));
    }

    let sizes = Elf::read(&elf).with_context(|| name.clone())?.sizes();

    // 1. planner vs ELF
    let report = plan_report(cli, name, &model)?;
    let figure = |label: &str| {
        plan_figure(&report, label)
            .with_context(|| format!("{name}: no {label} figure in the plan:\n{report}"))
    };
    let (arena, code, other) = (
        figure("session arena")?,
        figure("code estimate")?,
        figure("other statics")?,
    );
    let statics = sizes.bss + sizes.data;
    if statics < arena || statics > arena + other {
        eprintln!(
            "FAIL: {name}: ELF .bss + .data = {statics} B, planner arena = {arena} B (allowed: \
             arena .. arena + other statics {other} B)"
        );
        failed.push(format!("{name}: planner RAM"));
    } else {
        println!(
            "  ok: planner RAM matches the ELF: .bss + .data = {statics} B = arena {arena} B + {} \
             B (other statics allowance {other} B)",
            statics - arena
        );
    }
    let code_used = i128::from(sizes.text) + i128::from(sizes.rodata) + i128::from(sizes.data)
        - i128::from(model_bytes);
    if code_used > i128::from(code) {
        eprintln!(
            "FAIL: {name}: code and constants take {code_used} B of flash besides the model, \
             more than the planner's code estimate {code} B (firmware.code_reserve in {})",
            board.path.display()
        );
        failed.push(format!("{name}: planner code estimate"));
    } else {
        println!("  ok: flash besides the model {code_used} B ≤ planner code estimate {code} B");
    }

    // 2. size snapshot
    if tasks::has_own_crate(board) {
        println!("  size snapshot: checked by cargo xtask boards {name} (boards/{name}/size.txt)");
        return Ok(());
    }
    if let Err(e) = snapshot::check(
        name,
        &sizes,
        &model,
        update,
        &snapshot::update_command("plan", name),
    ) {
        eprintln!("FAIL: {name}: {e:#}");
        failed.push(format!("{name}: size snapshot"));
    }
    Ok(())
}

/// `loglinear plan --board <board> --model <model>`'s report; an error holds what it printed.
fn plan_report(cli: &Path, board: &str, model: &Path) -> Result<String> {
    let mut cmd = Command::new(cli);
    cmd.args(["plan", "--board", board, "--model"]).arg(model);
    let out = cmd
        .output()
        .with_context(|| format!("starting {}", tasks::describe(&cmd)))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{board}: loglinear plan failed ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout)
}

/// The bytes on the report line `  <label>   <bytes> B ...` of a `loglinear plan` report.
fn plan_figure(report: &str, label: &str) -> Option<u64> {
    report.lines().find_map(|line| {
        let rest = line.strip_prefix("  ")?.strip_prefix(label)?;
        let rest = rest.trim_start_matches(' ');
        let digits = &rest[..rest.find(|c: char| !c.is_ascii_digit())?];
        if digits.is_empty() || !rest[digits.len()..].starts_with(" B") {
            return None;
        }
        digits.parse().ok()
    })
}

/// The lines of a `loglinear plan` report that a failed build's stderr (`build_err`) lacks:
/// the first line by its start (up to ` (`, where each names the board.toml path as it found
/// it), then every non-empty line up to the verdict exactly. Cargo indents a build script's
/// stderr by two spaces.
fn missing_report_lines<'a>(report: &'a str, build_err: &str) -> Vec<&'a str> {
    let plain: Vec<&str> = build_err
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect();
    let mut lines = report.lines();
    let mut missing = Vec::new();
    if let Some(first) = lines.next() {
        let start = format!("{} (", first.split(" (").next().unwrap_or(first));
        if !plain.iter().any(|l| l.contains(&start)) {
            missing.push(first);
        }
    }
    for line in lines {
        if !line.is_empty() && !plain.contains(&line) {
            missing.push(line);
        }
        if line.starts_with("verdict:") {
            break;
        }
    }
    missing
}

/// Check 3: the no-fit board built with the shipped model fails with the planner's report. Same
/// flags and target folder as that board's build in check 0 (its next build reruns the build
/// script and recompiles the firmware crate alone: seconds). The build's output and the report
/// are kept in `dir`.
fn check_no_fit(board: &BoardProfile, cli: &Path, fw_target_dir: &Path, dir: &Path) -> Result<()> {
    let name = &board.name;
    let model = PathBuf::from(DEFAULT_MODEL);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = FirmwareBuild::new(board, &model, fw_target_dir).command("build");
    let build = cmd
        .output()
        .with_context(|| format!("starting {}", tasks::describe(&cmd)))?;
    let build_err = String::from_utf8_lossy(&build.stderr).into_owned();
    let mut plan = Command::new(cli);
    plan.args(["plan", "--board", name, "--model", DEFAULT_MODEL]);
    let plan = plan
        .output()
        .with_context(|| format!("starting {}", tasks::describe(&plan)))?;
    let report = String::from_utf8_lossy(&plan.stdout).into_owned();
    for (file, bytes) in [
        ("build.out", &build.stdout[..]),
        ("build.err", &build.stderr[..]),
        ("plan.out", &plan.stdout[..]),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    if build.status.success() {
        bail!("the {name} firmware built with {DEFAULT_MODEL}, which does not fit it");
    }
    if plan.status.success()
        || !report
            .lines()
            .any(|l| l.starts_with("verdict: does NOT fit"))
    {
        bail!("loglinear plan says {DEFAULT_MODEL} fits {name}:\n{report}");
    }
    let missing = missing_report_lines(&report, &build_err);
    if !missing.is_empty() {
        bail!(
            "the failed {name} build does not print the planner's report; missing lines:\n  \
             {}\nbuild stderr ({}):\n{build_err}",
            missing.join("\n  "),
            dir.join("build.err").display()
        );
    }
    let exit = build
        .status
        .code()
        .map_or_else(|| build.status.to_string(), |code| format!("exit {code}"));
    println!(
        "  ok: the build fails ({exit}) with the planner's report, {} lines, ending:",
        report.lines().count()
    );
    for line in report.lines().filter(|l| is_report_ending(l)) {
        println!("    {}", line.trim_start_matches(' '));
    }
    Ok(())
}

/// The report lines quoted after check 3 passes: the totals and the verdict.
fn is_report_ending(line: &str) -> bool {
    [
        "  flash total",
        "  RAM total",
        "largest context",
        "most levels",
        "verdict",
    ]
    .iter()
    .any(|start| line.starts_with(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "\
board microbit (boards/microbit/board.toml): thumbv6m-none-eabi, flash 262144 B at 0x00000000, RAM 16384 B at 0x20000000
state f16 × 3 levels (exact up to 4 tokens); context T = 4 tokens: 3 of 3 levels live

flash
  code estimate            163840 B  (board firmware.code_reserve)
  flash total             1417824 B  of 262144 B (540.9 %): DOES NOT FIT, 1155680 B over
RAM
  session arena             74790 B  (Session::arena_bytes = max state + conv + scratch: the firmware's .bss)
  other statics                64 B  (allowance; linked .bss + .data ≤ 74854 B)
  RAM total                 83046 B  of 16384 B (506.9 %): DOES NOT FIT, 66662 B over

largest context: none (f16 state: not even the fewest levels fit)
verdict: does NOT fit (flash 1155680 B over, RAM 66662 B over)
recommended for microbit (measured bits per byte: models/ll-gdn-mcu16k-q8_0.levels.csv)
  1024-token context: no measured setting fits the board
";

    #[test]
    fn plan_figures_are_read_from_the_report() {
        assert_eq!(plan_figure(REPORT, "session arena"), Some(74790));
        assert_eq!(plan_figure(REPORT, "code estimate"), Some(163840));
        assert_eq!(plan_figure(REPORT, "other statics"), Some(64));
        assert_eq!(plan_figure(REPORT, "sampler scratch"), None);
        assert_eq!(
            plan_figure("  session arena  many B\n", "session arena"),
            None
        );
        assert_eq!(plan_figure("session arena 5 B\n", "session arena"), None);
    }

    #[test]
    fn the_build_must_print_the_report_up_to_the_verdict() {
        let indented: String = REPORT
            .lines()
            .take_while(|l| !l.starts_with("recommended"))
            .map(|l| {
                let l = l.replace(
                    "(boards/microbit/board.toml)",
                    "(../boards/microbit/board.toml)",
                );
                format!("  {l}\n")
            })
            .collect();
        let build_err = format!("   Compiling loglinear-firmware\nerror: failed to run custom build command\n{indented}");
        assert!(missing_report_lines(REPORT, &build_err).is_empty());
        let without_verdict: String = build_err
            .lines()
            .filter(|l| !l.contains("verdict"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(
            missing_report_lines(REPORT, &without_verdict),
            ["verdict: does NOT fit (flash 1155680 B over, RAM 66662 B over)"]
        );
        let missing = missing_report_lines(REPORT, "error: out of memory\n");
        assert_eq!(missing.len(), 11);
        assert!(missing[0].starts_with("board microbit"));
        assert!(is_report_ending(missing[4]), "{}", missing[4]);
    }
}
