//! `cargo xtask qemu [BOARD...]`: the firmware under QEMU, token for token against the host
//! runtime.
//!
//! ```text
//! cargo xtask qemu [BOARD...]                   (default: every QEMU board, kind = "qemu")
//! QEMU_TEST_MODEL=FILE cargo xtask qemu BOARD   (another model file, e.g. a fine-tune)
//! QEMU_TIMEOUT=SECONDS cargo xtask qemu         (one QEMU run's limit; default 120)
//! ```
//!
//! For each QEMU board in boards/ it builds firmware/ for the board's target (the board's levels
//! and state type from its board.toml), runs it under QEMU with semihosting, and speaks the
//! serial protocol of docs/serial-protocol.md to it on semihosting stdin/stdout:
//!
//! * token identity: `GEN` streams exactly the token ids that the host `loglinear generate`
//!   prints for the same model file, prompt, sampler settings, seed, levels and state type, and
//!   `STATUS` reports the same state bytes (every board);
//! * hostile input: an oversized line, invalid UTF-8, an unknown command, bad parameter values
//!   and a line cut short by end of input each get `ERR <code>`, and the board keeps serving:
//!   greedy `GEN n=1` between them continue the host's greedy text token for token (every
//!   board);
//! * microbit (Cortex-M0, 16 KiB RAM) cannot hold the shipped model: it runs the test-sized
//!   model named by `model = ...` in its board.toml, on the firmware and on the host alike;
//! * a session (mps2-an386): GEN, STATUS, GEN continuing the context (together equal to one
//!   host run), RESET, GEN again equal to the first; and `loglinear serial --qemu-board`, the
//!   host client, prints byte for byte what `loglinear generate` prints;
//! * the UART transport (every board with `uart = ...` in its board.toml; `uart.rs`): the
//!   firmware built with LOGLINEAR_TRANSPORT=uart (its own target dir, target/firmware-uart)
//!   runs under the board's `uart_runner` (`-serial stdio`: the emulated UART on QEMU's
//!   stdin/stdout; semihosting only for the logs and the exit code) and must give the same
//!   tokens and state bytes as the host for every request above; hostile input over the UART
//!   (an unknown command, a line cut short and ended by the next host's resync newline, an
//!   oversized line) gets ERR and the board keeps serving; and `loglinear serial --port
//!   /dev/pts/N`, the host client, talks to the UART through a QEMU pty chardev (`-serial
//!   pty`), ends a line cut short that a previous host left (its sync: a blank line and
//!   STATUS) and prints what `loglinear generate` prints. Requests go out once the board has
//!   printed READY (a UART drops what comes before its receiver is on);
//! * a board with a crate of its own (b-l475e-iot01a, on embassy-stm32): that crate's image,
//!   built with `--no-default-features --features defmt-semihosting` (target/firmware-uart),
//!   the image a user flashes but for the defmt transport, runs every check above over its UART
//!   under `uart_runner` (the hostile input ending with QUIT instead of a line cut by the end of
//!   input), its defmt log (QEMU's stderr) is decoded with the image's table and must report
//!   the clock of board.toml's `clock_hz`, and it runs the UART checks below but the semihosting
//!   cases;
//! * sustained input (b-l475e-iot01a: `uart_sustained_bytes` in its board.toml): a 64 KiB
//!   prompt sent at full speed over the STM32L475's USART (the HAL's interrupt-driven
//!   receive), in `GEN n=0` lines, then a greedy GEN: every line answered, the token count and
//!   the tokens equal the host's;
//! * activations: a board with `activations = "q8"` under `[firmware]` runs its quantized
//!   matvecs on Q8 activations (the integer kernels), and the host reference then runs
//!   `loglinear generate --activations q8`;
//! * stack: the deepest `stack_peak_bytes` any STATUS reports (the stack painted at boot) stays
//!   within the memory planner's stack estimate for the board (`loglinear plan`: sampler
//!   scratch + the board's firmware.stack_reserve), so the planner's RAM sum covers the stack.
//!
//! The integer kernels on the boards' own cores are `cargo xtask kernel-check`, a task of its
//! own. This one installs QEMU and the targets first if missing (scripts/qemu-setup.sh), and
//! checks the firmware crate's formatting and clippy (it is outside the main workspace). It
//! prints the QEMU wall time of every run and `size -A` of every ELF. The outputs of every run
//! stay in `target/qemu-test/<board>-*.out` and `.err` for a look after a failure.

mod session;
mod uart;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use loglinear_planner::BoardProfile;

use crate::process::{self, read_text, suffixed, QemuRun};
use crate::stages::Stages;
use crate::tasks::{self, BoardCrateBuild, Defmt, FirmwareBuild, Repo};
use crate::{defmt_log, reply};

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {
    /// Board names (folders under boards/); default: every QEMU board (`kind = "qemu"`).
    boards: Vec<String>,
    /// The model of every board whose board.toml names none (a fine-tune, say).
    #[arg(long, env = "QEMU_TEST_MODEL", default_value = tasks::DEFAULT_MODEL)]
    model: PathBuf,
    /// Seconds one QEMU run may take before it counts as hung.
    #[arg(long, env = "QEMU_TIMEOUT", default_value_t = 120)]
    qemu_timeout: u64,
}

/// Requests: the `GEN` parameters and the host CLI's arguments (split at spaces). Their `\n`
/// is two characters, the protocol's escape, which the CLI's `--prompt` reads the same way.
/// Short ones: every token costs ~0.4 s on riscv-virt (soft float under TCG).
const CASES: [(&str, &str); 2] = [
    (
        r"n=16 temperature=0 prompt=JULIET:\n",
        r"--prompt JULIET:\n -n 16 --temperature 0",
    ),
    (
        r"n=24 temperature=0.8 seed=7 top_k=40 top_p=0.95 prompt=ROMEO:\n",
        r"--prompt ROMEO:\n -n 24 --temperature 0.8 --seed 7 --top-k 40 --top-p 0.95",
    ),
];

/// The host CLI's arguments of the request that the session and client tests compare with the
/// host (`loglinear generate`, `loglinear serial`): 16 greedy tokens after `JULIET:\n`.
const CLIENT_REQUEST: [&str; 6] = ["--prompt", r"JULIET:\n", "-n", "16", "--temperature", "0"];

/// The clippy runs of the firmware crate: target and board. thumbv7em and riscv32imac build
/// for their default board (firmware/build.rs: mps2-an386, riscv-virt); thumbv6m has none (the
/// shipped model fits none of its boards): microbit's; thumbv8m.main has none either:
/// mps3-an547's (the model in its own flash region).
const CLIPPY: [(&str, Option<&str>); 4] = [
    ("thumbv7em-none-eabihf", None),
    ("riscv32imac-unknown-none-elf", None),
    ("thumbv6m-none-eabi", Some("microbit")),
    ("thumbv8m.main-none-eabihf", Some("mps3-an547")),
];

/// What every board's test shares.
struct Setup {
    /// The repository (its docs make the sustained-input prompt).
    root: PathBuf,
    /// The host CLI, `loglinear`.
    cli: PathBuf,
    /// The tests' example that trains the BPE model fixture (`tests/examples/bpe_model.rs`).
    bpe_model: PathBuf,
    /// Where the images and the outputs go (`target/qemu-test`).
    work: PathBuf,
    /// The firmware target folder of the semihosting images (`target/firmware`).
    fw_target_dir: PathBuf,
    /// The UART images' own target folder (`target/firmware-uart`), so that switching
    /// transports rebuilds nothing.
    fw_uart_target_dir: PathBuf,
    /// The model of every board that names none (`QEMU_TEST_MODEL`, else the shipped one).
    default_model: PathBuf,
    /// How long one QEMU run may take before it counts as hung (`QEMU_TIMEOUT`; the slowest,
    /// riscv-virt, needs ~20 s).
    limit: Duration,
}

/// What a hostile-input run must answer.
struct Hostile<'a> {
    /// The replies, one word each (`reply::reply_summary`).
    replies: &'a str,
    /// The greedy tokens generated between the bad lines.
    greedy_tokens: usize,
    /// The start of the closing STATUS line: the session's counts.
    status: &'static str,
}

/// Runs the task: the set-up and the firmware's lints, then each board, each a stage of
/// `stages`.
pub fn run(repo: &Repo, args: Args, stages: &mut Stages) -> anyhow::Result<()> {
    let default_model = args.model;
    let limit = Duration::from_secs(args.qemu_timeout);
    let boards = if args.boards.is_empty() {
        tasks::qemu_boards()?
    } else {
        args.boards
            .iter()
            .map(|name| tasks::firmware_board(name))
            .collect::<anyhow::Result<_>>()?
    };

    let setup = stages.run("set-up, firmware fmt and clippy", |_| {
        tasks::qemu_setup(false)?;
        let work = repo.target_dir.join("qemu-test");
        std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
        println!("building the host CLI");
        let cli = repo.host_cli()?;
        repo.make_board_models(&cli)?;
        let setup = Setup {
            root: repo.root.clone(),
            cli,
            bpe_model: repo.workspace_example("bpe_model")?,
            work,
            fw_target_dir: repo.target_dir.join("firmware"),
            fw_uart_target_dir: repo.target_dir.join("firmware-uart"),
            default_model,
            limit,
        };
        firmware_lints(&setup)?;
        Ok(setup)
    })?;

    for board in &boards {
        stages.run(board.name.clone(), |_| BoardTest::new(&setup, board).run())?;
    }
    let names: Vec<&str> = boards.iter().map(|b| b.name.as_str()).collect();
    println!("\nqemu-test: all boards passed ({})", names.join(" "));
    Ok(())
}

/// firmware/ is not a workspace member, so the workspace's fmt and clippy steps do not see it:
/// `cargo fmt --check` and clippy with `-D warnings` for every target, and once more with the
/// QEMU board's UART driver (src/uart.rs) where the target's board has one; and clippy of each
/// QEMU board's own crate as QEMU runs it (feature `defmt-semihosting`; `cargo xtask boards`
/// checks its default build and its formatting).
fn firmware_lints(setup: &Setup) -> anyhow::Result<()> {
    println!("firmware: cargo fmt --check");
    tasks::run(Command::new("cargo").args([
        "fmt",
        "--manifest-path",
        "firmware/Cargo.toml",
        "--",
        "--check",
    ]))
    .context("the firmware crate is not formatted (run cargo fmt in firmware/)")?;
    for (target, named) in CLIPPY {
        let uart_board = match (named, target) {
            (Some(b), _) => b,
            (None, "riscv32imac-unknown-none-elf") => "riscv-virt",
            (None, _) => "mps2-an386",
        };
        let board = tasks::firmware_board(uart_board)?;
        if board.target != target {
            bail!(
                "{}: target {} where the firmware clippy runs expect {target}",
                board.path.display(),
                board.target
            );
        }
        let model = match named {
            Some(_) => board_model(setup, &board),
            None => setup.default_model.clone(),
        };
        println!("firmware: cargo clippy --target {target} -D warnings");
        let build = FirmwareBuild {
            features: &["kernel-check"],
            ..FirmwareBuild::new(&board, &model, &setup.fw_target_dir)
        };
        let mut cmd = build.command("clippy");
        cmd.args(["--", "-D", "warnings"]);
        if named.is_none() {
            // The target's default board, as firmware/build.rs picks it.
            cmd.env("LOGLINEAR_BOARD", "")
                .env("CARGO_ENCODED_RUSTFLAGS", tasks::firmware_rustflags(""));
        }
        tasks::run(&mut cmd).with_context(|| format!("clippy of the firmware for {target}"))?;
        if board.uart.is_none() {
            continue;
        }
        println!(
            "firmware: cargo clippy --target {target} -D warnings, UART transport ({uart_board})"
        );
        FirmwareBuild {
            transport: Some("uart"),
            features: &[],
            target_dir: &setup.fw_uart_target_dir,
            ..build
        }
        .clippy()?;
    }
    for board in tasks::qemu_boards()? {
        if !tasks::has_own_crate(&board) {
            continue;
        }
        let name = &board.name;
        println!("boards/{name}: cargo clippy -D warnings, feature defmt-semihosting");
        let lint = BoardCrateBuild {
            defmt: Defmt::Semihosting,
            ..BoardCrateBuild::new(&board, &setup.fw_uart_target_dir)
        };
        tasks::run(lint.command("clippy").args(["--", "-D", "warnings"]))
            .with_context(|| format!("{name}: clippy of boards/{name} (defmt-semihosting)"))?;
    }
    Ok(())
}

/// The board's model file: its own (`model = ...`), else the test's default.
fn board_model(setup: &Setup, board: &BoardProfile) -> PathBuf {
    board
        .model
        .clone()
        .unwrap_or_else(|| setup.default_model.clone())
}

/// The test of one board.
struct BoardTest<'a> {
    setup: &'a Setup,
    board: &'a BoardProfile,
    /// The board's model, on the firmware and on the host.
    model: PathBuf,
    /// The image: the semihosting image of firmware/, or a HAL board crate's `defmt-semihosting`
    /// build.
    elf: PathBuf,
    /// The QEMU command line of the image: board.toml's `runner`, or a HAL board crate's
    /// `uart_runner` (its protocol is on the UART).
    runner: String,
    /// The image is a HAL board crate's ([`tasks::has_own_crate`]).
    hal: bool,
    /// The deepest `stack_peak_bytes` any STATUS has reported.
    stack_peak: u64,
}

impl<'a> BoardTest<'a> {
    fn new(setup: &'a Setup, board: &'a BoardProfile) -> Self {
        let hal = tasks::has_own_crate(board);
        let runner = if hal {
            board.uart_runner.clone().unwrap_or_default()
        } else {
            board.runner.clone()
        };
        Self {
            setup,
            board,
            model: board_model(setup, board),
            elf: setup.work.join(format!("{}.elf", board.name)),
            runner,
            hal,
            stack_peak: 0,
        }
    }

    /// A QEMU run of the board's image under [`BoardTest::runner`]; a HAL image's requests go
    /// out once it has printed READY on its UART.
    fn image_run<'r>(&'r self, label: &'r str, base: &'r Path) -> QemuRun<'r> {
        QemuRun {
            wait_ready: self.hal,
            ..self.qemu(label, &self.runner, &self.elf, base)
        }
    }

    /// `target/qemu-test/<board><suffix>`.
    fn work_file(&self, suffix: &str) -> PathBuf {
        self.setup.work.join(format!("{}{suffix}", self.board.name))
    }

    /// A QEMU run of this board's `runner` with `elf`, outputs in `<base>.out` and `.err`.
    fn qemu<'r>(
        &'r self,
        label: &'r str,
        runner: &'r str,
        elf: &'r Path,
        base: &'r Path,
    ) -> QemuRun<'r> {
        QemuRun {
            label,
            runner,
            elf,
            base,
            limit: self.setup.limit,
            wait_ready: false,
        }
    }

    /// `loglinear generate --model <model> <args> --levels --state --activations` of the
    /// board, stdout in `out`, stderr in `err` (or dropped).
    fn host_generate(
        &self,
        model: &Path,
        args: &[&str],
        out: &Path,
        err: Option<&Path>,
    ) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.setup.cli);
        cmd.arg("generate")
            .arg("--model")
            .arg(model)
            .args(args)
            .args(["--levels", &self.board.levels.to_string()])
            .args(["--state", &self.board.state.to_string()])
            .args(["--activations", self.board.activations.name()])
            .stdout(process::create(out)?);
        match err {
            Some(err) => cmd.stderr(process::create(err)?),
            None => cmd.stderr(Stdio::null()),
        };
        tasks::run(&mut cmd).with_context(|| format!("{}: the host reference run", self.board.name))
    }

    /// The host's reply to [`CLIENT_REQUEST`], in `<base>.host.out`.
    fn host_reference(&self, base: &Path) -> anyhow::Result<PathBuf> {
        let host_out = suffixed(base, ".host.out");
        self.host_generate(&self.model, &CLIENT_REQUEST, &host_out, None)?;
        Ok(host_out)
    }

    /// Raises the stack peak to the largest `stack_peak_bytes` of a reply's STATUS lines.
    fn note_stack(&mut self, reply: &str) {
        self.stack_peak = self.stack_peak.max(reply::stack_peak(reply));
    }

    fn run(mut self) -> anyhow::Result<()> {
        let board = self.board;
        let name = &board.name;
        if self.runner.is_empty() {
            let key = if self.hal { "uart_runner" } else { "runner" };
            bail!("{}: no {key}: not a QEMU board", board.path.display());
        }
        println!(
            "\n==== {name}: {}, {} state, {} levels, {} activations, {}{} ====",
            board.target,
            board.state,
            board.levels,
            board.activations.name(),
            self.model.display(),
            if self.hal {
                format!(", its HAL crate boards/{name} with defmt on semihosting")
            } else {
                String::new()
            }
        );
        if self.hal {
            self.build_uart(&self.model, &self.setup.fw_uart_target_dir, &self.elf)?;
        } else {
            FirmwareBuild::new(board, &self.model, &self.setup.fw_target_dir).build(&self.elf)?;
        }
        let plan = tasks::output(
            Command::new(&self.setup.cli)
                .args(["plan", "--board", name, "--model"])
                .arg(&self.model),
        )?;
        let stack_estimate = reply::stack_estimate(&plan)
            .with_context(|| format!("{name}: no stack estimate in loglinear plan's report"))?;
        self.print_sizes()?;

        self.token_identity()?;
        if self.hal {
            self.boot_log()?;
        }
        self.hostile_input()?;
        if name == "mps2-an386" {
            self.session()?;
            self.bpe()?;
        }
        if self.hal {
            self.hal_uart_test()?;
        } else if board.uart.is_some() && board.uart_runner.is_some() {
            self.uart_test()?;
        }

        let peak = self.stack_peak;
        if peak == 0 {
            bail!("{name}: no STATUS line reported stack_peak_bytes");
        }
        if peak > stack_estimate {
            bail!(
                "{name}: stack peak {peak} B exceeds the planner's stack estimate \
                 {stack_estimate} B (raise firmware.stack_reserve in {})",
                board.path.display()
            );
        }
        println!(
            "  ok: stack peak {peak} B ≤ planner stack estimate {stack_estimate} B ({} %)",
            peak * 100 / stack_estimate
        );
        Ok(())
    }

    /// `size -A` of the image, where `size` is installed: the vector table, code, read-only
    /// data, data and `.bss` (the session arena plus small statics).
    fn print_sizes(&self) -> anyhow::Result<()> {
        let mut cmd = Command::new("size");
        cmd.arg("-A").arg(&self.elf);
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).with_context(|| format!("starting {}", tasks::describe(&cmd))),
            Ok(out) if !out.status.success() => bail!(
                "{} failed ({}): {}",
                tasks::describe(&cmd),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim_end()
            ),
            Ok(out) => {
                for (section, bytes) in reply::size_rows(&String::from_utf8_lossy(&out.stdout)) {
                    println!("  {section:<14} {bytes:>9} B");
                }
                Ok(())
            }
        }
    }

    /// Every request of [`CASES`] against the host's run of it: the same token ids, `DONE`
    /// with their count, the same state bytes.
    fn token_identity(&mut self) -> anyhow::Result<()> {
        let name = &self.board.name;
        for (i, (request, host_args)) in CASES.iter().enumerate() {
            let i = i + 1;
            let base = self.work_file(&format!("-{i}"));
            let host_args: Vec<&str> = host_args.split(' ').collect();
            self.host_generate(
                &self.model,
                &host_args,
                &suffixed(&base, ".host.out"),
                Some(&suffixed(&base, ".host.err")),
            )
            .with_context(|| format!("{name} case {i}"))?;
            let label = format!("{name} case {i}");
            let script = format!("GEN {request}\nSTATUS\nQUIT\n");
            let (out, time) = self.image_run(&label, &base).run(script.as_bytes())?;
            let g = self.check_identity(&label, &out, &base, &base)?;
            println!(
                "  ok: case {i}, {g:>2} tokens identical to the host, QEMU {}  [GEN {request}]",
                reply::secs(time)
            );
            for status in reply::status_lines(&out) {
                println!("      {status}");
            }
        }
        Ok(())
    }

    /// A HAL image's defmt log of its first run (QEMU's stderr, decoded with the image's
    /// table): the clocks the HAL reports are board.toml's `clock_hz`, the QEMU fix-ups are on,
    /// and nothing was logged as an error.
    fn boot_log(&self) -> anyhow::Result<()> {
        let name = &self.board.name;
        let err = self.work_file("-1.err");
        let stream = std::fs::read(&err).with_context(|| format!("reading {}", err.display()))?;
        let log = defmt_log::decode(&self.elf, &stream)?;
        println!("  defmt log of case 1 ({}):", err.display());
        for line in &log {
            println!("      {line}");
        }
        let clock = format!("clocks: sys {} Hz,", self.board.clock_hz);
        let want = [
            clock.as_str(),
            "QEMU: PWR, FLASH and USART1's ICR served",
            "serving the protocol on uart",
        ];
        for text in want {
            if !log
                .iter()
                .any(|l| l.level == "INFO" && l.text.starts_with(text))
            {
                bail!(
                    "{name}: no INFO line '{text}...' in the defmt log ({})",
                    err.display()
                );
            }
        }
        if let Some(bad) = log.iter().find(|l| l.level == "ERROR" || l.level == "WARN") {
            bail!("{name}: the defmt log has {bad} ({})", err.display());
        }
        println!(
            "  ok: the HAL brought the clocks up at {} Hz as board.toml says, logged over \
             defmt",
            self.board.clock_hz
        );
        Ok(())
    }

    /// Each bad line gets `ERR <code>`, the session is untouched, and the greedy `GEN n=1`
    /// between them continue the host's greedy text for prompt "A".
    fn hostile_input(&mut self) -> anyhow::Result<()> {
        let name = &self.board.name;
        let base = self.work_file("-hostile");
        let host_out = suffixed(&base, ".host.out");
        self.host_generate(
            &self.model,
            &["--prompt", "A", "-n", "4", "--temperature", "0"],
            &host_out,
            None,
        )?;
        let one: &[u8] = b"GEN n=1 temperature=0\n";
        let mut script = Vec::new();
        script.extend_from_slice(b"GEN prompt=");
        script.extend_from_slice(&[b'a'; 1500]);
        script.extend_from_slice(b"\nGEN n=1 temperature=0 prompt=A\n");
        script.extend_from_slice(b"GEN prompt=\xff\xfe\n");
        script.extend_from_slice(one);
        script.extend_from_slice(b"HELLO world\n");
        script.extend_from_slice(one);
        script.extend_from_slice(
            b"GEN n=5000\nGEN temperature=-1\nGEN top_p=0\nGEN colour=blue\nGEN prompt=\n",
        );
        // `a\q`: a backslash that starts no escape.
        script.extend_from_slice(b"GEN prompt=a\\q\nRESET levels=99\nSTATUS now\n");
        script.extend_from_slice(one);
        // The last line is cut short by the end of input. A UART has no end of input: there the
        // image ends with QUIT (`uart_hostile` cuts a line short the UART's way).
        let last = if self.hal {
            ("STATUS\nQUIT\n", "STATUS BYE")
        } else {
            ("STATUS\nGEN n=3 prompt=abc", "STATUS ERR5")
        };
        script.extend_from_slice(last.0.as_bytes());
        let label = format!("{name} hostile input");
        let (out, time) = self.image_run(&label, &base).run(&script)?;
        let replies = format!(
            "READY ERR1 TOK DONE ERR2 TOK DONE ERR3 TOK DONE \
             ERR4 ERR4 ERR4 ERR4 ERR4 ERR4 ERR4 ERR4 TOK DONE {}",
            last.1
        );
        self.check_hostile(
            &label,
            &out,
            &base,
            &host_out,
            &Hostile {
                replies: &replies,
                greedy_tokens: 4,
                status: "STATUS tokens=5 generated=4 ",
            },
        )?;
        println!(
            "  ok: hostile input answered with ERR, board kept serving (QEMU {}):",
            reply::secs(time)
        );
        for err in out.lines().filter(|l| l.starts_with("ERR")) {
            println!("      {err}");
        }
        Ok(())
    }

    /// Token identity of one request's reply `out` (in `<base>.out`) with the host's run of it
    /// (`<host_base>.host.out` and `.host.err`): the generated token ids, `DONE`, and the state
    /// bytes of STATUS. Returns the generated token count.
    fn check_identity(
        &mut self,
        label: &str,
        out: &str,
        base: &Path,
        host_base: &Path,
    ) -> anyhow::Result<u64> {
        let (t, g) =
            reply::status_counts(out).with_context(|| format!("{label}: no STATUS line: {out}"))?;
        let host_out = std::fs::read(suffixed(host_base, ".host.out"))
            .with_context(|| format!("{label}: reading the host output"))?;
        let (want, got) = (
            reply::host_ids(&host_out, t.saturating_sub(g) as usize),
            reply::tok_ids(out, 1, g as usize),
        );
        if want != got {
            bail!("{label}: token ids differ\n  host:     {want}\n  firmware: {got}");
        }
        if !out.lines().any(|l| l == format!("DONE {g}")) {
            bail!(
                "{label}: no 'DONE {g}' (output in {})",
                suffixed(base, ".out").display()
            );
        }
        self.note_stack(out);
        let host_state = reply::host_state(&read_text(&suffixed(host_base, ".host.err"))?);
        let fw_state = reply::firmware_state(out);
        if host_state.is_empty() || host_state != fw_state {
            bail!("{label}: state bytes differ (host '{host_state}', firmware '{fw_state}')");
        }
        Ok(g)
    }

    /// The checks of a hostile-input run: the replies in order (one word each, `ERR<code>` for
    /// an error), the greedy `GEN n=1` between the bad lines continue the host's greedy text of
    /// `host_out` (prompt "A"), and the bad lines left the session as it was.
    fn check_hostile(
        &mut self,
        label: &str,
        out: &str,
        base: &Path,
        host_out: &Path,
        expect: &Hostile<'_>,
    ) -> anyhow::Result<()> {
        let got = reply::reply_summary(out);
        if got != expect.replies {
            eprint!("{out}");
            bail!(
                "{label}: replies (output in {})\n  got:      {got}\n  expected: {}",
                suffixed(base, ".out").display(),
                expect.replies
            );
        }
        let host =
            std::fs::read(host_out).with_context(|| format!("reading {}", host_out.display()))?;
        let n = expect.greedy_tokens;
        if reply::tok_ids(out, 1, n) != reply::first_ids(&reply::host_ids(&host, 1), n) {
            bail!("{label}: the GENs between bad lines differ from the host's greedy text");
        }
        if !out.lines().any(|l| l.starts_with(expect.status)) {
            bail!(
                "{label}: the bad lines changed the session: {}",
                reply::status_lines(out).join(" / ")
            );
        }
        self.note_stack(out);
        Ok(())
    }
}
