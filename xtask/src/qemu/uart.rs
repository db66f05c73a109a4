//! The UART checks of a board with `uart = ...` and a `uart_runner`: the UART image runs the
//! requests of the semihosting test, hostile input, the sustained-input test where the board
//! has one, and the host client on a QEMU pty.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::{BoardTest, Hostile, CASES, CLIENT_REQUEST};
use crate::process::{self, read_text, suffixed, QemuRun, Timed};
use crate::reply;
use crate::tasks::{runner_command, BoardCrateBuild, Defmt, FirmwareBuild};

/// Bytes of prompt in one `GEN n=0` line of the sustained-input test (the firmware's lines hold
/// 512 bytes).
const SUSTAINED_LINE: usize = 480;

/// How long the pty test waits for the board's READY on the pty.
const READY_WAIT: Duration = Duration::from_secs(60);

impl BoardTest<'_> {
    /// A QEMU run of the UART image under `uart_runner`, the requests sent once READY is out.
    fn uart_qemu<'r>(
        &'r self,
        label: &'r str,
        runner: &'r str,
        elf: &'r Path,
        base: &'r Path,
    ) -> QemuRun<'r> {
        QemuRun {
            wait_ready: true,
            ..self.qemu(label, runner, elf, base)
        }
    }

    /// Builds the UART image (its own target folder) of `model` and copies it to `copy_to`:
    /// firmware/ with the board's UART driver, or a HAL board crate with defmt on semihosting.
    pub(super) fn build_uart(
        &self,
        model: &Path,
        target_dir: &Path,
        copy_to: &Path,
    ) -> anyhow::Result<()> {
        if self.hal {
            BoardCrateBuild {
                model: Some(model),
                defmt: Defmt::Semihosting,
                ..BoardCrateBuild::new(self.board, target_dir)
            }
            .build(copy_to)?;
        } else {
            FirmwareBuild {
                transport: Some("uart"),
                ..FirmwareBuild::new(self.board, model, target_dir)
            }
            .build(copy_to)?;
        }
        Ok(())
    }

    /// The UART transport: the same requests over the board's emulated UART.
    pub(super) fn uart_test(&mut self) -> anyhow::Result<()> {
        let (Some(uart), Some(runner)) = (&self.board.uart, &self.board.uart_runner) else {
            return Ok(());
        };
        println!("  -- UART transport ({uart}): {runner}");
        let uart_elf = self.work_file("-uart.elf");
        self.build_uart(&self.model, &self.setup.fw_uart_target_dir, &uart_elf)?;
        self.uart_cases(runner, &uart_elf)?;
        self.uart_hostile(runner, &uart_elf)?;
        if self.board.sustained_input.is_some() {
            self.sustained_input(runner)?;
        }
        self.pty_client(runner, &uart_elf)
    }

    /// The UART checks of a HAL board crate's image, whose requests of CASES and hostile input
    /// have run over its UART already: a line cut short the UART's way, sustained input, and the
    /// host client on a pty.
    pub(super) fn hal_uart_test(&mut self) -> anyhow::Result<()> {
        let (runner, elf) = (self.runner.clone(), self.elf.clone());
        println!("  -- the HAL's UART driver: {runner}");
        self.uart_hostile(&runner, &elf)?;
        self.sustained_input(&runner)?;
        self.pty_client(&runner, &elf)
    }

    /// Token identity: every request of CASES, against the host outputs of the semihosting
    /// test.
    fn uart_cases(&mut self, runner: &str, elf: &Path) -> anyhow::Result<()> {
        let name = &self.board.name;
        for (i, (request, _)) in CASES.iter().enumerate() {
            let i = i + 1;
            let label = format!("{name} UART case {i}");
            let base = self.work_file(&format!("-uart-{i}"));
            let host = self.work_file(&format!("-{i}"));
            let script = format!("GEN {request}\nSTATUS\nQUIT\n");
            let (out, time) = self
                .uart_qemu(&label, runner, elf, &base)
                .run(script.as_bytes())?;
            if !out.lines().any(reply::is_uart_ready) {
                bail!(
                    "{label}: no 'READY ... transport=uart' line: {}",
                    out.lines().next().unwrap_or("")
                );
            }
            if !out.lines().any(|l| l == "BYE") {
                bail!("{label}: no BYE after QUIT");
            }
            let g = self.check_identity(&label, &out, &base, &host)?;
            println!(
                "  ok: UART case {i}, {g:>2} tokens identical to the host, QEMU {}",
                reply::secs(time)
            );
        }
        Ok(())
    }

    /// Hostile input. A UART has no end of input, so a line cut short is ended by whatever
    /// comes next: here the newline a host sends first to end any partial line
    /// (docs/serial-protocol.md).
    fn uart_hostile(&mut self, runner: &str, elf: &Path) -> anyhow::Result<()> {
        let name = &self.board.name;
        let label = format!("{name} UART hostile input");
        let base = self.work_file("-uart-hostile");
        let one: &[u8] = b"GEN n=1 temperature=0\n";
        let mut script = Vec::new();
        script.extend_from_slice(b"HELLO world\nGEN n=1 temperature=0 prompt=A\n");
        script.extend_from_slice(b"GEN n=3 tempera\n\n");
        script.extend_from_slice(one);
        script.extend_from_slice(b"GEN prompt=");
        script.extend_from_slice(&[b'a'; 1500]);
        script.push(b'\n');
        script.extend_from_slice(one);
        script.extend_from_slice(b"STATUS\nQUIT\n");
        let (out, time) = self.uart_qemu(&label, runner, elf, &base).run(&script)?;
        let host_out = self.work_file("-hostile.host.out");
        self.check_hostile(
            &label,
            &out,
            &base,
            &host_out,
            &Hostile {
                replies: "READY ERR3 TOK DONE ERR4 TOK DONE ERR1 TOK DONE STATUS BYE",
                greedy_tokens: 3,
                status: "STATUS tokens=4 generated=3 ",
            },
        )?;
        println!(
            "  ok: UART hostile input answered with ERR, board kept serving (QEMU {}):",
            reply::secs(time)
        );
        for err in out.lines().filter(|l| l.starts_with("ERR")) {
            let cut: String = err.chars().take(60).collect();
            println!("      {cut}");
        }
        Ok(())
    }

    /// Sustained input (board.toml `uart_sustained_bytes`, with `uart_sustained_model`): a
    /// prompt of that many bytes, sent at full speed as `GEN n=0` lines of 480 bytes, then a
    /// greedy GEN. Every byte must get through the interrupt-driven receive: a `DONE 0` per
    /// line, and the tokens and the token count equal the host's for the whole prompt. The
    /// prompt is printable ASCII from the repository's docs, without `\` and `%`.
    fn sustained_input(&mut self, runner: &str) -> anyhow::Result<()> {
        let Some(sustained) = &self.board.sustained_input else {
            return Ok(());
        };
        let name = &self.board.name;
        let label = format!("{name} sustained input");
        let bytes = usize::try_from(sustained.bytes)
            .with_context(|| format!("{label}: uart_sustained_bytes is too large"))?;
        let model = sustained
            .model
            .clone()
            .unwrap_or_else(|| self.model.clone());
        let base = self.work_file("-uart-sustained");
        let prompt = reply::prompt_from_docs(&docs_text(&self.setup.root)?, bytes);
        let prompt_file = suffixed(&base, ".prompt");
        std::fs::write(&prompt_file, &prompt)
            .with_context(|| format!("writing {}", prompt_file.display()))?;
        if prompt.len() != bytes {
            bail!(
                "{name}: the docs hold fewer than {bytes} bytes for the sustained-input prompt \
                 ({} kept)",
                prompt.len()
            );
        }
        let elf = self.work_file("-uart-sustained.elf");
        // A HAL board crate's build shares the main image's folder: another model rebuilds its
        // last two crates, where a folder of its own would build the HAL and its register
        // tables once more (a minute on two cores) in every clean run. firmware/'s images have
        // no such dependencies and keep a folder each, so that a second run rebuilds nothing.
        let target_dir = if self.hal {
            self.setup.fw_uart_target_dir.clone()
        } else {
            PathBuf::from(format!(
                "{}-sustained",
                self.setup.fw_uart_target_dir.display()
            ))
        };
        self.build_uart(&model, &target_dir, &elf)?;
        let mut script = Vec::new();
        let mut lines = 0;
        for chunk in prompt.chunks(SUSTAINED_LINE) {
            script.extend_from_slice(b"GEN n=0 prompt=");
            script.extend_from_slice(chunk);
            script.push(b'\n');
            lines += 1;
        }
        script.extend_from_slice(b"GEN n=16 temperature=0\nSTATUS\nQUIT\n");
        // 65 536 model steps: minutes under QEMU, not the per-request limit.
        let (out, time) = QemuRun {
            limit: self.setup.limit * 8,
            ..self.uart_qemu(&label, runner, &elf, &base)
        }
        .run(&script)?;
        let host_out = suffixed(&base, ".host.out");
        let prompt_text = String::from_utf8(prompt).context("the docs prompt is ASCII")?;
        self.host_generate(
            &model,
            &["--prompt", &prompt_text, "-n", "16", "--temperature", "0"],
            &host_out,
            None,
        )?;
        let done = out.lines().filter(|l| *l == "DONE 0").count();
        if done != lines {
            let others: Vec<&str> = out
                .lines()
                .filter(|l| !l.starts_with("TOK") && *l != "DONE 0")
                .take(5)
                .collect();
            bail!(
                "{label}: {done} of {lines} prompt lines answered DONE 0: {}",
                others.join(" / ")
            );
        }
        let host =
            std::fs::read(&host_out).with_context(|| format!("reading {}", host_out.display()))?;
        if reply::tok_ids(&out, 1, 16) != reply::host_ids(&host, bytes) {
            bail!("{label}: the tokens after the {bytes}-byte prompt differ from the host's");
        }
        let status = format!("STATUS tokens={} generated=16 ", bytes + 16);
        if !out.lines().any(|l| l.starts_with(&status)) {
            bail!(
                "{label}: bytes lost: {}",
                reply::status_lines(&out).join(" / ")
            );
        }
        self.note_stack(&out);
        let model_name = model.file_name().unwrap_or(model.as_os_str());
        println!(
            "  ok: sustained input: {bytes} B of prompt in {lines} lines at full speed over the \
             interrupt-driven UART, none lost, 16 tokens identical to the host ({}, QEMU {})",
            model_name.to_string_lossy(),
            reply::secs(time)
        );
        Ok(())
    }

    /// The host client on a pty: QEMU's `-serial pty` chardev, `loglinear serial --port`,
    /// after a previous host that died mid-request left a line cut short in the board's line
    /// buffer.
    fn pty_client(&mut self, runner: &str, elf: &Path) -> anyhow::Result<()> {
        let name = &self.board.name;
        let limit = self.setup.limit;
        let base = self.work_file("-uart-client");
        let host_out = self.host_reference(&base)?;
        let pty_runner = runner.replacen("-serial stdio", "-serial pty", 1);
        if pty_runner == runner {
            bail!(
                "{}: uart_runner has no '-serial stdio'",
                self.board.path.display()
            );
        }
        let (qemu_out, qemu_err) = (suffixed(&base, ".qemu.out"), suffixed(&base, ".qemu.err"));
        let mut cmd = runner_command(&pty_runner, elf)?;
        cmd.stdin(Stdio::null())
            .stdout(process::create(&qemu_out)?)
            .stderr(process::create(&qemu_err)?);
        let mut qemu = Timed::spawn(&mut cmd, limit)?;
        let qemu_messages = || -> String {
            let read = |p: &Path| read_text(p).unwrap_or_default();
            read(&qemu_out) + &read(&qemu_err)
        };
        // Looked for often: QEMU drops what the UART sends before the pty is open, and the
        // firmware prints READY within milliseconds of the path.
        let pty = {
            let start = Instant::now();
            loop {
                if let Some(pty) = reply::pty_path(&qemu_messages()) {
                    break Some(PathBuf::from(pty));
                }
                if start.elapsed() >= Duration::from_secs(10) || !qemu.running() {
                    break None;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let Some(pty) = pty else {
            qemu.kill();
            bail!(
                "{name}: QEMU printed no pty path: {}",
                qemu_messages().trim_end()
            );
        };
        // Open until QEMU has exited: QEMU polls a pty's connection, and drops what a closed
        // pty held.
        let mut pty_file = process::open_pty(&pty).with_context(|| format!("{name}: the pty"))?;
        // The firmware's READY: its UART is on (what comes before it may be dropped). Without
        // it the client's sync still ends the cut line.
        if !process::read_ready(&mut pty_file, &mut qemu, READY_WAIT)? {
            println!(
                "  note: no READY on {} within {} s (QEMU drops what the UART sends before the \
                 pty is open); the client's sync ends the cut line",
                pty.display(),
                READY_WAIT.as_secs()
            );
        }
        process::write_all_waiting(&mut pty_file, b"GEN n=2 tempera", limit)
            .with_context(|| format!("{name}: writing a cut line to {}", pty.display()))?;
        let (out, err) = (suffixed(&base, ".out"), suffixed(&base, ".err"));
        let mut client = Command::new(&self.setup.cli);
        client
            .arg("serial")
            .arg("--port")
            .arg(&pty)
            .args(CLIENT_REQUEST)
            .arg("--status");
        let (client_ended, time) = process::run_timed(&mut client, &out, &err, limit)?;
        process::write_all_waiting(&mut pty_file, b"QUIT\n", limit)
            .with_context(|| format!("{name}: writing QUIT to {}", pty.display()))?;
        let qemu_ended = qemu.wait()?;
        drop(pty_file);
        if !client_ended.success() || !qemu_ended.success() {
            bail!(
                "{name}: loglinear serial over the pty or QEMU failed (loglinear serial: \
                 {client_ended}; QEMU: {qemu_ended}): {}\n{}",
                read_text(&err)?.trim_end(),
                read_text(&qemu_err)?.trim_end()
            );
        }
        let host =
            std::fs::read(&host_out).with_context(|| format!("reading {}", host_out.display()))?;
        if std::fs::read(&out).ok() != Some(host) {
            bail!(
                "{name}: loglinear serial --port {} printed other text than loglinear generate \
                 ({} against {})",
                pty.display(),
                out.display(),
                host_out.display()
            );
        }
        let client_log = read_text(&err)?;
        let ended_cut_line = client_log
            .lines()
            .any(|l| l.starts_with("[ERR 4 ") && l.ends_with("tempera]"));
        if !ended_cut_line {
            bail!(
                "{name}: loglinear serial did not end the cut line first (no ERR 4 for it): {}",
                client_log.trim_end()
            );
        }
        let status: String = client_log
            .lines()
            .filter_map(|l| l.strip_prefix("[STATUS "))
            .map(|l| format!("STATUS {}\n", l.strip_suffix(']').unwrap_or(l)))
            .collect();
        let status_file = suffixed(&base, ".status");
        std::fs::write(&status_file, &status)
            .with_context(|| format!("writing {}", status_file.display()))?;
        self.note_stack(&status);
        println!(
            "  ok: loglinear serial --port {} (QEMU -serial pty), after a line cut short by a \
             previous host, prints what loglinear generate prints ({})",
            pty.display(),
            reply::secs(time)
        );
        Ok(())
    }
}

/// `docs/*.md`, then `*.md` of the repository, each folder's files sorted by name (as bash's glob sorts them in
/// the C locale), concatenated.
fn docs_text(root: &Path) -> anyhow::Result<Vec<u8>> {
    let mut text = Vec::new();
    for dir in [root.join("docs"), root.to_path_buf()] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.ends_with(".md") && !n.starts_with('.'))
            })
            .collect();
        files.sort();
        for file in files {
            text.extend(
                std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?,
            );
        }
    }
    Ok(text)
}
