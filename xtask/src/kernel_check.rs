//! `cargo xtask kernel-check`: the integer matvec kernels on the boards themselves, under QEMU.
//! Every kernel path a board's core runs (portable; arm-dsp on the Cortex-M4F/M7/M33/M55,
//! helium on the M55, arm-m0 on the Cortex-M0) against `portable`, bit for bit, for Q8_0 and
//! Q4_0 weights on random shapes, and the f16 ↔ f32 conversions of the state against `half`
//! (exhaustive widening, every rounding boundary of narrowing; in hardware on the cores with an
//! FPU, which the check requires), and there the state's pass kernels (`state_kernels`, f16
//! and f32) against the plain steps, also required (firmware/src/bin/kernel_check.rs); a few
//! seconds a board.
//!
//! ```text
//! cargo xtask kernel-check [BOARD...]          (default: every Arm QEMU board)
//! cargo xtask kernel-check --cases 2000        (random cases per board, env CASES; default 400)
//! cargo xtask kernel-check --seed 1234 BOARD   (replay the seed that a run printed)
//! cargo xtask kernel-check --bench [BOARD...]  instructions per MAC of the kernels alone
//! ```
//!
//! `--qemu-timeout` (env `QEMU_TIMEOUT`, default 300 s) limits each QEMU run.
//!
//! `--bench` counts instructions with QEMU's insn plugin (`insn.rs`, built on first use) for
//! `bench KIND PATH ROWS BLOCKS REPS` and REPS = 0, and prints
//! (difference) / (REPS · ROWS · 32 · BLOCKS) per kernel path and weight type as a markdown
//! table: the matvec itself, activation widening and row loop included, the quantization of
//! the input excluded.
//!
//! Firmware builds go to `target/firmware-kernel-check`, images and QEMU output to
//! `target/kernel-check`.

use std::hash::{BuildHasher as _, Hasher as _};
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use loglinear_planner::BoardProfile;

use crate::insn::{self, Counted};
use crate::process::Stderr;
use crate::stages::Stages;
use crate::tasks::{self, runner_command, FirmwareBuild, Repo};

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {
    /// Count the kernels' instructions per MAC under QEMU's insn plugin instead of checking
    /// them.
    #[arg(long)]
    bench: bool,
    /// Random cases per board.
    #[arg(long, env = "CASES", default_value_t = 400)]
    cases: u32,
    /// Seed of the random cases (a run prints the one it drew); default: a fresh one.
    #[arg(long)]
    seed: Option<u32>,
    /// Time limit of one QEMU run, in seconds.
    #[arg(long, env = "QEMU_TIMEOUT", default_value_t = 300)]
    qemu_timeout: u64,
    /// Board names (folders under boards/); default: every QEMU board with an Arm core.
    boards: Vec<String>,
}

/// Matvecs per `bench` run.
const REPS: u64 = 10;

/// Runs the task, each board a stage of `stages`.
pub fn run(repo: &Repo, args: Args, stages: &mut Stages) -> anyhow::Result<()> {
    let boards = if args.boards.is_empty() {
        tasks::qemu_boards()?
            .into_iter()
            .filter(|b| b.target.starts_with("thumb"))
            .collect()
    } else {
        args.boards
            .iter()
            .map(|name| tasks::qemu_board(name))
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    let fw_target_dir = repo.target_dir.join("firmware-kernel-check");
    let work = repo.target_dir.join("kernel-check");
    let timeout = Duration::from_secs(args.qemu_timeout);

    tasks::qemu_setup(true)?;
    let plugin = if args.bench {
        Some(insn::ensure_plugin(&insn::plugin_dir(&repo.target_dir))?)
    } else {
        None
    };
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let seed = args.seed.unwrap_or_else(fresh_seed);
    if plugin.is_none() {
        println!(
            "kernel-check: {} cases per board, seed {seed} (replay: cargo xtask kernel-check \
             --cases {} --seed {seed} BOARD)",
            args.cases, args.cases
        );
    }

    let mut rows = Vec::new();
    for board in &boards {
        stages.run(board.name.clone(), |_| {
            let model = tasks::board_model(board);
            tasks::ensure_model(repo, &model)
                .with_context(|| format!("{}: the model file", board.name))?;
            let elf = FirmwareBuild {
                transport: Some("semihosting"),
                features: &["kernel-check"],
                bin: Some("kernel-check"),
                ..FirmwareBuild::new(board, &model, &fw_target_dir)
            }
            .build(&work.join(format!("{}.elf", board.name)))?;
            match &plugin {
                None => check(board, &elf, &work, args.cases, seed, timeout),
                Some(plugin) => {
                    let counted = Counted {
                        board: &board.name,
                        runner: &board.runner,
                        elf: &elf,
                        plugin,
                        plugin_args: insn::INLINE,
                        stdout: &work.join("bench.out"),
                        stderr: &work.join("bench.err"),
                        timeout,
                    };
                    rows.extend(bench(board, &counted)?);
                    Ok(())
                }
            }
        })?;
    }

    if plugin.is_some() {
        println!();
        println!(
            "| board | core | kernel path | weights | matrix | reps | instructions | \
             instructions / MAC |"
        );
        println!("| --- | --- | --- | --- | --- | ---: | ---: | ---: |");
        for row in rows {
            println!("{row}");
        }
    } else {
        let names: Vec<&str> = boards.iter().map(|b| b.name.as_str()).collect();
        println!(
            "kernel-check: all paths bit-identical to portable on {}",
            names.join(" ")
        );
    }
    Ok(())
}

/// `check CASES SEED` on the board: every path bit-identical to portable, or an error.
fn check(
    board: &BoardProfile,
    elf: &Path,
    work: &Path,
    cases: u32,
    seed: u32,
    timeout: Duration,
) -> anyhow::Result<()> {
    let out = work.join(format!("{}.out", board.name));
    let mut cmd = runner_command(&board.runner, elf)
        .with_context(|| format!("{}: the board's runner", board.name))?;
    let request = format!("check {cases} {seed}\n");
    let status = insn::run_logged(
        &board.name,
        &mut cmd,
        &request,
        &out,
        Stderr::Merged,
        timeout,
    )?;
    let text = std::fs::read_to_string(&out)
        .with_context(|| format!("{}: reading {}", board.name, out.display()))?;
    let replay = format!(
        "replay: cargo xtask kernel-check --cases {cases} --seed {seed} {}",
        board.name
    );
    if !status.success() {
        eprint!("{text}");
        bail!(
            "{}: kernel check failed ({status}; output above and in {}; {replay})",
            board.name,
            out.display()
        );
    }
    if !text.lines().any(|l| l == "PASS") {
        bail!(
            "{}: no PASS in {} ({replay}): {}",
            board.name,
            out.display(),
            insn::last_lines(&text, 20)
        );
    }
    // The FPU cores must convert the state's halves in hardware and run its passes with
    // `state_kernels`: a build that fell back to software would pass the comparisons and lose
    // the speed.
    let required: &[&str] = if board.target.ends_with("eabihf") {
        &[
            "ok f16 hardware ",
            "ok state kernels f16 ",
            "ok state kernels f32 ",
        ]
    } else {
        &["ok f16 software "]
    };
    for want in required {
        if !text.lines().any(|l| l.starts_with(want)) {
            bail!(
                "{}: no `{}` line in {} ({replay}): {}",
                board.name,
                want.trim_end(),
                out.display(),
                insn::last_lines(&text, 20)
            );
        }
    }
    for line in text.lines().filter(|l| *l != "PASS") {
        println!("  {}: {line}", board.name);
    }
    Ok(())
}

/// The `bench` runs of one board: its table rows.
fn bench(board: &BoardProfile, counted: &Counted<'_>) -> anyhow::Result<Vec<String>> {
    let (shapes, paths) = bench_plan(&board.target, &board.core);
    let mut rows = Vec::new();
    for &(r, b) in shapes {
        for path in &paths {
            for kind in ["q8_0", "q4_0"] {
                let done = |l: &str| l.starts_with("DONE");
                let i0 = counted.count(
                    &format!("bench {kind} {path} {r} {b} 0\n"),
                    done,
                    "DONE line",
                )?;
                let i1 = counted.count(
                    &format!("bench {kind} {path} {r} {b} {REPS}\n"),
                    done,
                    "DONE line",
                )?;
                rows.push(bench_row(board, path, kind, r, b, i0, i1));
            }
        }
    }
    Ok(rows)
}

/// The bench shapes (ROWS, BLOCKS of 32 columns) and kernel paths of a board. Two shapes of the
/// shipped model (ffn_down: 128 rows × 512 columns; attn_v / attn_gate: 256 × 128) on the
/// hard-float Arm targets; 8 × 256 elsewhere, where the kernel-check binary keeps its bench
/// matrix small (the micro:bit's 16 KiB). Helium on the cores that have it (the binary refuses
/// an unavailable path); portable alone off Arm.
fn bench_plan(target: &str, core: &str) -> (&'static [(u64, u64)], Vec<&'static str>) {
    let shapes: &[(u64, u64)] = if target.ends_with("eabihf") {
        &[(128, 16), (256, 4)]
    } else {
        &[(8, 8)]
    };
    let paths = if target == "thumbv6m-none-eabi" {
        vec!["portable", "arm-m0"]
    } else if target.starts_with("thumb") {
        let mut paths = vec!["portable", "arm-dsp"];
        if matches!(core, "cortex-m55" | "cortex-m85") {
            paths.push("helium");
        }
        paths
    } else {
        vec!["portable"]
    };
    (shapes, paths)
}

/// A table row: instructions of REPS matvecs (`i1` - `i0`) and per MAC, 3 decimals.
fn bench_row(
    board: &BoardProfile,
    path: &str,
    kind: &str,
    rows: u64,
    blocks: u64,
    i0: u64,
    i1: u64,
) -> String {
    let diff = i1 as i64 - i0 as i64;
    let macs = REPS * rows * blocks * 32;
    format!(
        "| {} | {} | {path} | {kind} | {rows} × {} | {REPS} | {diff} | {:.3} |",
        board.name,
        board.core,
        blocks * 32,
        diff as f64 / macs as f64
    )
}

/// A seed for the random cases, different from run to run: the process's random hash keys
/// mixed with the clock. Never 0, which would stall the firmware's xorshift generator.
fn fresh_seed() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.write_u32(std::process::id());
    let x = h.finish();
    ((x ^ (x >> 32)) as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_core_benches_its_own_paths() {
        let (shapes, paths) = bench_plan("thumbv6m-none-eabi", "cortex-m0");
        assert_eq!((shapes, paths), (&[(8, 8)][..], vec!["portable", "arm-m0"]));
        let (shapes, paths) = bench_plan("thumbv7em-none-eabihf", "cortex-m4f");
        assert_eq!(shapes, &[(128, 16), (256, 4)]);
        assert_eq!(paths, ["portable", "arm-dsp"]);
        assert_eq!(
            bench_plan("thumbv8m.main-none-eabihf", "cortex-m33").1,
            ["portable", "arm-dsp"]
        );
        assert_eq!(
            bench_plan("thumbv8m.main-none-eabihf", "cortex-m55").1,
            ["portable", "arm-dsp", "helium"]
        );
        let (shapes, paths) = bench_plan("riscv32imac-unknown-none-elf", "rv32imac");
        assert_eq!((shapes, paths), (&[(8, 8)][..], vec!["portable"]));
    }

    #[test]
    fn rows_show_instructions_per_mac_to_three_decimals() {
        let board = BoardProfile::find("b-l475e-iot01a").unwrap();
        // Numbers of a run of the shell version of this task.
        let row = bench_row(&board, "arm-dsp", "q8_0", 128, 16, 1_000_000, 2_035_342);
        assert_eq!(
            row,
            "| b-l475e-iot01a | cortex-m4f | arm-dsp | q8_0 | 128 × 512 | 10 | 1035342 | 1.580 |"
        );
        let row = bench_row(&board, "portable", "q4_0", 256, 4, 7, 1_496_648);
        assert!(
            row.ends_with("| 256 × 128 | 10 | 1496641 | 4.567 |"),
            "{row}"
        );
        // An exact tie rounds to even, as C's printf does.
        assert!(bench_row(&board, "p", "k", 1, 1, 0, 340).ends_with("| 1.062 |"));
    }

    #[test]
    fn seeds_are_never_zero() {
        assert!((0..100).all(|_| fresh_seed() != 0));
    }
}
