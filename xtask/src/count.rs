//! `cargo xtask count`, a benchmark (not part of the tests): instructions per generated token
//! of the firmware, counted exactly under QEMU with a TCG plugin, and the firmware's stack
//! high-water mark.
//!
//! ```text
//! cargo xtask count [BOARD...]                 (default: mps2-an386 mps2-an500 riscv-virt)
//! cargo xtask count --tokens 32                (tokens of the long run, env TOKENS; default 16)
//! cargo xtask count --activations q8 --kernel portable mps2-an500
//!     (env ACTIVATIONS / KERNEL: LOGLINEAR_ACTIVATIONS / LOGLINEAR_KERNEL of the firmware
//!     build, f32 or q8 activations and a pinned integer kernel path; default: the board's
//!     activations, the fastest path)
//! cargo xtask count --model target/ll-gdn-mcu-q4_0.gguf   (env MODEL: another model file)
//! cargo xtask count --profile release-small    (env PROFILE: the firmware's cargo profile)
//! cargo xtask count --at 16368 mps2-an386      (env AT: the tokens decoded from position 16368
//!     on, where every level of a 15-level state is live; boards with a `[snapshot]` store)
//! cargo xtask count --breakdown mps2-an386     (env BREAKDOWN=1: also where each token's
//!     instructions go, part by part; `breakdown.rs`)
//! cargo xtask count --check [BOARD...]         (the test command: each board against its
//!     `boards/<board>/insns.txt`, `count_snapshot.rs`; default: every QEMU board built from
//!     firmware/)
//! cargo xtask count --update [BOARD...]        (rewrite those snapshots)
//! cargo xtask count --plugin-only              (only build the plugin)
//! ```
//!
//! With `--at P` the host CLI first reads P bytes of text with the board's model, state type,
//! levels and activations (`loglinear generate -n 0 --save-snapshot`), and both counted runs
//! start by uploading that session (`RESTORE`, docs/serial-protocol.md), so that QEMU need not
//! step P tokens; the upload is the same in both runs and cancels out of the difference.
//!
//! `--qemu-timeout` (env `QEMU_TIMEOUT`, default 300 s) limits each QEMU run.
//!
//! 1. Builds QEMU's `insn` sample plugin in `target/qemu-plugin/` once (`insn.rs`).
//! 2. For each board it builds firmware/ as the QEMU test does (into `target/firmware`) and
//!    runs it twice under `-icount shift=0 -plugin libinsn.so,inline=on -d plugin` with
//!    `GEN n=0` and `GEN n=TOKENS` (greedy, prompt "X"). Boot, model parsing, stack painting
//!    and the prompt are the same in both, so instructions per token =
//!    (total(n=TOKENS) - total(n=0)) / TOKENS: one sample, one TOK line and one model step per
//!    token, averaged over positions t = 1..TOKENS. Instructions per weight-MAC = that / the
//!    model's weight MACs per token (every 2-D tensor of the GGUF file but token_embd.weight,
//!    a lookup).
//! 3. A third run without the plugin (`GEN n=TOKENS`, then `STATUS`) reads stack_peak_bytes,
//!    the firmware's painted-stack high-water mark, next to the board's
//!    `firmware.stack_reserve`.
//!
//! Prints a markdown table. Images and QEMU output go to `target/count-instructions`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use loglinear_planner::BoardProfile;
use loglinear_runtime::gguf::GgufFile;

use crate::breakdown::{self, Breakdown, Histogram};
use crate::count_snapshot;
use crate::insn::{self, Counted};
use crate::process::Stderr;
use crate::session_snapshots;
use crate::tasks::{self, runner_command, FirmwareBuild, Repo};

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {
    /// Only build QEMU's insn plugin (target/qemu-plugin/libinsn.so).
    #[arg(long)]
    plugin_only: bool,
    /// Tokens of the long run.
    #[arg(long, env = "TOKENS", default_value_t = 16,
          value_parser = clap::value_parser!(u64).range(1..))]
    tokens: u64,
    /// The firmware's activations (`LOGLINEAR_ACTIVATIONS`: f32 or q8); default: the board's.
    #[arg(long, env = "ACTIVATIONS")]
    activations: Option<String>,
    /// A pinned integer kernel path (`LOGLINEAR_KERNEL`); default: the fastest.
    #[arg(long, env = "KERNEL")]
    kernel: Option<String>,
    /// The model file; default: the board's own, else the project's default model.
    #[arg(long, env = "MODEL")]
    model: Option<PathBuf>,
    /// The firmware's cargo profile: `release` (speed) or `release-small` (flash).
    #[arg(long, env = "PROFILE", default_value = tasks::RELEASE)]
    profile: String,
    /// Time limit of one QEMU run, in seconds.
    #[arg(long, env = "QEMU_TIMEOUT", default_value_t = 300)]
    qemu_timeout: u64,
    /// Check each board's instructions per token against `boards/<board>/insns.txt` (within
    /// 5 %), with the snapshot's settings: the board's own, 4 tokens.
    #[arg(long, conflicts_with_all = ["update", "at", "model", "activations", "kernel", "tokens", "profile"])]
    check: bool,
    /// Rewrite `boards/<board>/insns.txt` from a count with the snapshot's settings.
    #[arg(long, conflicts_with_all = ["at", "model", "activations", "kernel", "tokens", "profile"])]
    update: bool,
    /// Also split each token's instructions by part (matvecs, state, gates, ...), counted per
    /// address with the `pc_histogram` plugin and attributed through the firmware's DWARF.
    #[arg(long, env = "BREAKDOWN")]
    breakdown: bool,
    /// Count the tokens decoded from this position on (from a restored session; see the module
    /// doc); default: from the start, after a one-byte prompt.
    #[arg(long, env = "AT")]
    at: Option<u64>,
    /// Board names (folders under boards/); default: mps2-an386 mps2-an500 riscv-virt.
    boards: Vec<String>,
}

/// The boards counted when none is named.
const DEFAULT_BOARDS: [&str; 3] = ["mps2-an386", "mps2-an500", "riscv-virt"];

/// The prompt of the runs.
const PROMPT: &str = "X";

/// Runs the task.
pub fn run(repo: &Repo, mut args: Args) -> anyhow::Result<()> {
    let snapshots = args.check || args.update;
    // The snapshots' settings; clap refuses the flags that would change them.
    if snapshots {
        args.tokens = count_snapshot::TOKENS;
    }
    let names: Vec<String> = match (args.boards.is_empty(), snapshots) {
        (false, _) => args.boards.clone(),
        (true, false) => DEFAULT_BOARDS.iter().map(|b| b.to_string()).collect(),
        (true, true) => tasks::qemu_boards()?
            .into_iter()
            .filter(|b| !tasks::has_own_crate(b))
            .map(|b| b.name)
            .collect(),
    };
    let boards = names
        .iter()
        .map(|name| tasks::qemu_board(name))
        .collect::<anyhow::Result<Vec<_>>>()?;
    tasks::qemu_setup(true)?;
    let plugin_dir = insn::plugin_dir(&repo.target_dir);
    let plugin = if args.breakdown {
        insn::ensure_histogram_plugin(&plugin_dir)?
    } else {
        insn::ensure_plugin(&plugin_dir)?
    };
    if args.plugin_only {
        return Ok(());
    }
    let fw_target_dir = repo.target_dir.join("firmware");
    let work = repo.target_dir.join("count-instructions");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let timeout = Duration::from_secs(args.qemu_timeout);
    // An empty value (`ACTIVATIONS=` in the environment) leaves the choice to the board.
    let activations = args.activations.as_deref().filter(|a| !a.is_empty());
    let kernel = args.kernel.as_deref().filter(|k| !k.is_empty());

    let mut rows = Vec::new();
    let mut breakdowns = Vec::new();
    let mut off_snapshot = Vec::new();
    for board in &boards {
        let name = &board.name;
        let model = match &args.model {
            Some(m) if !m.as_os_str().is_empty() => m.clone(),
            _ => tasks::board_model(board),
        };
        tasks::ensure_model(repo, &model).with_context(|| format!("{name}: the model file"))?;
        let macs = weight_macs(&model)?;
        if macs == 0 {
            bail!("no matrix tensors in {}", model.display());
        }
        let acts = activations.unwrap_or(board.activations.name());
        eprintln!("{name}: building and counting");
        let elf = FirmwareBuild {
            activations,
            kernel,
            profile: &args.profile,
            ..FirmwareBuild::new(board, &model, &fw_target_dir)
        }
        .build(&work.join(format!("{name}.elf")))?;

        let start = match args.at {
            Some(at) => Start::Restore(restored_session(repo, board, &model, acts, at, &work)?),
            None => Start::Prompt,
        };
        let code = if args.breakdown {
            Some(breakdown::code_range(&elf)?)
        } else {
            None
        };
        let histogram = |n: u64| work.join(format!("{name}-n{n}.hist"));
        let count = |n: u64| -> anyhow::Result<u64> {
            let out = work.join(format!("{name}-n{n}.out"));
            let err = work.join(format!("{name}-n{n}.err"));
            let plugin_args = match code {
                Some(range) => breakdown::plugin_args(range, &histogram(n)),
                None => insn::INLINE.to_string(),
            };
            let counted = Counted {
                board: name,
                runner: &board.runner,
                elf: &elf,
                plugin: &plugin,
                plugin_args: &plugin_args,
                stdout: &out,
                stderr: &err,
                timeout,
            };
            let done = format!("DONE {n}");
            counted.count(
                &format!("{}QUIT\n", start.request(n)),
                |l| l == done,
                &format!("'{done}' line"),
            )
        };
        let i0 = count(0)?;
        let i1 = count(args.tokens)?;
        let per_tok = per_token(i0, i1, args.tokens);
        let snap = count_snapshot::path(&board.path);
        if args.update {
            let tmp = snap.with_extension("txt.tmp");
            std::fs::write(&tmp, count_snapshot::render(per_tok))
                .with_context(|| format!("writing {}", tmp.display()))?;
            std::fs::rename(&tmp, &snap).with_context(|| format!("writing {}", snap.display()))?;
            eprintln!("{name}: wrote {} ({per_tok} per token)", snap.display());
        } else if args.check {
            let text = std::fs::read_to_string(&snap).with_context(|| {
                format!(
                    "{name}: reading {} (`cargo xtask count --update {name}` writes it)",
                    snap.display()
                )
            })?;
            let want = count_snapshot::parse(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", snap.display()))?;
            match count_snapshot::check(want, per_tok) {
                Ok(()) => eprintln!("{name}: {per_tok} per token, snapshot {want}: ok"),
                Err(e) => off_snapshot.push((name.clone(), format!("{}: {e}", snap.display()))),
            }
        }
        if args.breakdown {
            let b = Breakdown::of(
                &elf,
                &Histogram::read(&histogram(0))?,
                &Histogram::read(&histogram(args.tokens))?,
                args.tokens,
            )
            .with_context(|| format!("{name}: the breakdown"))?;
            breakdowns.push((name.clone(), acts.to_string(), macs, b));
        }

        let status_out = work.join(format!("{name}-status.out"));
        let mut cmd = runner_command(&board.runner, &elf)
            .with_context(|| format!("{name}: the board's runner"))?;
        let request = format!("{}STATUS\nQUIT\n", start.request(args.tokens));
        let status = insn::run_logged(
            name,
            &mut cmd,
            &request,
            &status_out,
            Stderr::Discard,
            timeout,
        )?;
        let text = std::fs::read_to_string(&status_out)
            .with_context(|| format!("{name}: reading {}", status_out.display()))?;
        if !status.success() {
            bail!(
                "{name}: the STATUS run failed ({status}): {} (see {})",
                insn::last_lines(&text, 10),
                status_out.display()
            );
        }
        let peak = stack_peak(&text);
        let n0_err = work.join(format!("{name}-n0.err"));
        let kpath = std::fs::read_to_string(&n0_err)
            .with_context(|| format!("{name}: reading {}", n0_err.display()))?;
        let kpath = kernel_path(&kpath);

        rows.push(
            Row {
                board,
                model: model.file_name().map_or_else(
                    || model.display().to_string(),
                    |f| f.to_string_lossy().into_owned(),
                ),
                macs,
                activations: acts.to_string(),
                kernel_path: kpath,
                i0,
                i1,
                per_token: per_tok,
                stack_peak: peak,
            }
            .to_string(),
        );
    }

    println!();
    match args.at {
        None => println!(
            "Runs: `GEN n=0` and `GEN n={}`, temperature 0, prompt \"{PROMPT}\".",
            args.tokens
        ),
        Some(at) => println!(
            "Runs: `RESTORE` of a session at position {at}, then `GEN n=0` and `GEN n={}`, \
             temperature 0: positions {at} to {}.",
            args.tokens,
            at + args.tokens - 1
        ),
    }
    println!();
    println!(
        "| board | core | model | weight MACs / token | activations | integer kernels | state | \
         levels | insns, n=0 | insns, n={} | insns / token | insns / weight-MAC | stack peak B | \
         stack reserve B |",
        args.tokens
    );
    println!(
        "| --- | --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | \
         ---: |"
    );
    for row in rows {
        println!("{row}");
    }
    if !off_snapshot.is_empty() {
        let (boards, why): (Vec<String>, Vec<String>) = off_snapshot.into_iter().unzip();
        bail!(
            "instructions per token off their snapshots:\n  {}\nIf the change is meant, \
             `cargo xtask count --update {}` records it.",
            why.join("\n  "),
            boards.join(" ")
        );
    }
    for (name, acts, macs, b) in breakdowns {
        println!();
        println!("{name} ({acts} activations), per token:");
        println!();
        print!("{}", b.table(macs));
        if !b.other.is_empty() {
            let names: Vec<String> = b
                .other
                .iter()
                .map(|(n, c)| format!("{n} ({c:.0})"))
                .collect();
            println!();
            println!("Most of \"other\": {}", names.join("; "));
        }
    }
    Ok(())
}

/// How the counted runs begin.
enum Start {
    /// `GEN` with the one-byte [`PROMPT`].
    Prompt,
    /// `RESTORE` of these snapshot bytes (a session at some position), then `GEN`.
    Restore(Vec<u8>),
}

impl Start {
    /// The requests of a run that decodes `n` tokens.
    fn request(&self, n: u64) -> String {
        match self {
            Self::Prompt => format!("GEN n={n} temperature=0 prompt={PROMPT}\n"),
            Self::Restore(snap) => format!(
                "RESTORE bytes={}\n{}END\nGEN n={n} temperature=0\n",
                snap.len(),
                session_snapshots::hex_lines(snap)
            ),
        }
    }
}

/// The host's session after reading `at` bytes of text with the board's model, state and
/// activations: the snapshot file's bytes.
fn restored_session(
    repo: &Repo,
    board: &BoardProfile,
    model: &Path,
    activations: &str,
    at: u64,
    work: &Path,
) -> anyhow::Result<Vec<u8>> {
    let name = &board.name;
    if board.snapshot.is_none() {
        bail!(
            "{name}: --at restores a session with RESTORE, which needs a [snapshot] store in \
             boards/{name}/board.toml, and this board has none"
        );
    }
    if at == 0 {
        bail!("--at 0 is the start of a sequence: leave --at out to count from there");
    }
    let cli = repo.host_cli()?;
    let snap = work.join(format!("{name}-at{at}.snap"));
    eprintln!("{name}: the host reads {at} bytes of text to make the session at position {at}");
    let out = std::process::Command::new(&cli)
        .arg("generate")
        .arg("--model")
        .arg(model)
        .arg("--prompt")
        .arg(prompt_text(&repo.root, at as usize)?)
        .args(["-n", "0", "--temperature", "0", "--state"])
        .arg(board.state.to_string())
        .arg("--levels")
        .arg(board.levels.to_string())
        .args(["--activations", activations, "--save-snapshot"])
        .arg(&snap)
        .stderr(std::process::Stdio::piped())
        .output()
        .with_context(|| format!("starting {}", cli.display()))?;
    if !out.status.success() {
        bail!(
            "{name}: loglinear generate for the session at {at} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    std::fs::read(&snap).with_context(|| format!("reading {}", snap.display()))
}

/// `len` bytes of English text: the repository's README, repeated, with its backslashes left
/// out (`--prompt` reads them as escapes).
fn prompt_text(root: &Path, len: usize) -> anyhow::Result<String> {
    let readme = root.join("README.md");
    let text = std::fs::read_to_string(&readme)
        .with_context(|| format!("reading {}", readme.display()))?;
    let text: String = text
        .chars()
        .filter(|c| c.is_ascii() && *c != '\\')
        .collect();
    if text.is_empty() {
        bail!("{} has no ASCII text for the prompt", readme.display());
    }
    Ok(text.chars().cycle().take(len).collect())
}

/// Weight MACs per token of a model file: rows × columns of every 2-D tensor but
/// `token_embd.weight` (a lookup, not a matvec).
fn weight_macs(model: &Path) -> anyhow::Result<u64> {
    let bytes = std::fs::read(model).with_context(|| format!("reading {}", model.display()))?;
    // The reader wants the tensor data aligned in memory as in the file: copy the bytes to an
    // 8-aligned place of a slightly larger buffer.
    let mut buf = vec![0u8; bytes.len() + 8];
    let at = buf.as_ptr().align_offset(8).min(8);
    let aligned = &mut buf[at..at + bytes.len()];
    aligned.copy_from_slice(&bytes);
    let file = GgufFile::parse(aligned)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("{} is not a readable GGUF file", model.display()))?;
    Ok(macs_of(
        file.tensors()
            .map(|t| (t.name, t.n_dims, t.dims[0], t.dims[1])),
    ))
}

/// The sum of rows × columns over the 2-D tensors (name, dimensions, ne0, ne1) but the token
/// embedding.
fn macs_of<'a>(tensors: impl Iterator<Item = (&'a str, u32, u64, u64)>) -> u64 {
    tensors
        .filter(|&(name, n_dims, _, _)| n_dims == 2 && name != "token_embd.weight")
        .map(|(_, _, cols, rows)| cols * rows)
        .sum()
}

/// Instructions per token: the difference of the two runs over the tokens, truncated.
fn per_token(i0: u64, i1: u64, tokens: u64) -> i64 {
    (i1 as i64 - i0 as i64) / tokens as i64
}

/// `stack_peak_bytes=N` of the last `STATUS ...` line.
fn stack_peak(stdout: &str) -> Option<u64> {
    stdout
        .lines()
        .filter(|l| l.starts_with("STATUS "))
        .filter_map(|l| {
            let (_, rest) = l.rsplit_once(" stack_peak_bytes=")?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .next_back()
}

/// The integer kernel path the firmware reports at boot (`... integer kernels arm-dsp`).
fn kernel_path(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|l| {
        let (_, rest) = l.rsplit_once("integer kernels ")?;
        let path: String = rest
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
            .collect();
        Some(path).filter(|p| !p.is_empty())
    })
}

/// One board's line of the table.
struct Row<'a> {
    board: &'a BoardProfile,
    model: String,
    macs: u64,
    activations: String,
    kernel_path: Option<String>,
    i0: u64,
    i1: u64,
    per_token: i64,
    stack_peak: Option<u64>,
}

impl std::fmt::Display for Row<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.board;
        write!(
            f,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} | {} |",
            b.name,
            b.core,
            self.model,
            self.macs,
            self.activations,
            self.kernel_path.as_deref().unwrap_or("?"),
            b.state,
            b.levels,
            self.i0,
            self.i1,
            self.per_token,
            self.per_token as f64 / self.macs as f64,
            self.stack_peak
                .map_or_else(|| "?".to_string(), |p| p.to_string()),
            b.stack_reserve
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_model_has_the_known_weight_macs() {
        // `loglinear inspect` summed over its 2-D tensors but token_embd.weight.
        for (model, macs) in [
            ("ll-gdn-mcu16k-q8_0.gguf", 1_120_496),
            ("ll-gdn-mcu-q8_0.gguf", 1_369_208),
            ("tiny-ll-gdn-microbit-q8_0.gguf", 27_102),
        ] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../models")
                .join(model);
            assert_eq!(weight_macs(&path).unwrap(), macs, "{model}");
        }
    }

    #[test]
    fn the_token_embedding_and_vectors_carry_no_macs() {
        let tensors = [
            ("token_embd.weight", 2, 128, 256),
            ("output.weight", 2, 128, 256),
            ("output_norm.weight", 1, 128, 1),
            ("blk.0.ssm_conv1d_q.weight", 2, 4, 64),
        ];
        assert_eq!(macs_of(tensors.into_iter()), 128 * 256 + 4 * 64);
    }

    #[test]
    fn rows_match_the_table_of_a_run() {
        let board = BoardProfile::find("mps2-an386").unwrap();
        // Numbers of a run of the shell version of this task.
        let (i0, i1) = (24_608_063, 235_450_550);
        let row = Row {
            board: &board,
            model: "ll-gdn-mcu16k-q8_0.gguf".into(),
            macs: 1_120_496,
            activations: "f32".into(),
            kernel_path: kernel_path("[INFO ] activations f32, integer kernels arm-dsp\n"),
            i0,
            i1,
            per_token: per_token(i0, i1, 16),
            stack_peak: stack_peak(
                "READY x\nDONE 16\nSTATUS pos=17 stack_peak_bytes=6636 x=1\nBYE\n",
            ),
        };
        assert_eq!(
            row.to_string(),
            "| mps2-an386 | cortex-m4f | ll-gdn-mcu16k-q8_0.gguf | 1120496 | f32 | arm-dsp | f16 | \
             15 | 24608063 | 235450550 | 13177655 | 11.8 | 6636 | 12288 |"
        );
        let row = Row {
            kernel_path: None,
            stack_peak: None,
            ..row
        };
        assert!(row.to_string().contains("| f32 | ? |"));
        assert!(row.to_string().ends_with("| 11.8 | ? | 12288 |"));
    }

    #[test]
    fn per_token_truncates_as_shell_arithmetic() {
        assert_eq!(per_token(10, 27, 16), 1);
        assert_eq!(per_token(27, 10, 16), -1);
        assert_eq!(per_token(0, 16, 16), 1);
    }

    #[test]
    fn status_and_kernel_lines_parse() {
        assert_eq!(stack_peak("STATUS a=1 stack_peak_bytes=42\n"), Some(42));
        assert_eq!(stack_peak("STATUS a=1\nstack_peak_bytes=42\n"), None);
        assert_eq!(kernel_path("no kernels here\n"), None);
        assert_eq!(
            kernel_path("x\n[INFO ] activations q8, integer kernels helium\n").as_deref(),
            Some("helium")
        );
    }
}
