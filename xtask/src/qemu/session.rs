//! The session checks of one board (`mps2-an386`): GEN, STATUS, GEN continuing, RESET and the
//! host client `loglinear serial --qemu-board`; and a model with a BPE vocabulary.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use super::{BoardTest, CLIENT_REQUEST};
use crate::process::{self, read_text, suffixed};
use crate::reply;
use crate::tasks::{self, FirmwareBuild};

impl BoardTest<'_> {
    /// A model with a GPT-2 BPE vocabulary (the tests' trained fixture): the board encodes
    /// the prompt text with the runtime's BPE and `loglinear serial` prints byte for byte what
    /// `loglinear generate` prints (the host encodes with the `tokenizers` crate); a prompt
    /// piece longer than the board's encoder takes is refused with an error.
    pub(super) fn bpe(&mut self) -> anyhow::Result<()> {
        let name = &self.board.name;
        let folder = self.setup.work.join("bpe-model");
        tasks::run(
            Command::new(&self.setup.bpe_model)
                .arg(&folder)
                .stdout(Stdio::null()),
        )?;
        let model = self.setup.work.join("bpe-model-q8_0.gguf");
        tasks::run(
            Command::new(&self.setup.cli)
                .arg("convert")
                .arg(&folder)
                .arg("-o")
                .arg(&model)
                .args(["--type", "q8_0", "--no-eval"])
                .stdout(Stdio::null()),
        )?;
        let elf = self.work_file("-bpe.elf");
        FirmwareBuild::new(self.board, &model, &self.setup.fw_target_dir).build(&elf)?;
        let base = self.work_file("-bpe");
        let prompt = r"The quick brown fox didn't jump: caf\u{e9}, \u{6771}\u{4eac} 42";
        let host_out = suffixed(&base, ".host.out");
        self.host_generate(
            &model,
            &["--prompt", prompt, "-n", "24", "--temperature", "0"],
            &host_out,
            None,
        )?;
        let serial =
            |prompt: &str, suffix: &str| -> anyhow::Result<(process::Ended, PathBuf, PathBuf)> {
                let (out, err) = (
                    suffixed(&base, &format!("{suffix}.out")),
                    suffixed(&base, &format!("{suffix}.err")),
                );
                let mut cmd = Command::new(&self.setup.cli);
                cmd.args(["serial", "--qemu-board", name, "--elf"])
                    .arg(&elf)
                    .args(["--prompt", prompt, "-n", "24", "--temperature", "0"]);
                let (ended, _) = process::run_timed(&mut cmd, &out, &err, self.setup.limit)?;
                Ok((ended, out, err))
            };
        let (ended, out, err) = serial(prompt, ".client")?;
        if !ended.success() {
            bail!(
                "{name} BPE: loglinear serial {ended}: {}",
                read_text(&err)?.trim_end()
            );
        }
        if std::fs::read(&out).ok() != std::fs::read(&host_out).ok() {
            bail!(
                "{name} BPE: loglinear serial printed other text than loglinear generate \
                 ({} against {})",
                out.display(),
                host_out.display()
            );
        }
        // One letter run over the encoder's 128-byte piece limit.
        let long = "a".repeat(200);
        let (ended, _, err) = serial(&long, ".long")?;
        let err_text = read_text(&err)?;
        if ended.success() || !err_text.contains("does not encode") {
            bail!(
                "{name} BPE: a 200-byte piece was not refused: {}",
                err_text.trim_end()
            );
        }
        println!(
            "  ok: BPE model ({}): the board's encoding and text = the host's; an over-long \
             piece is refused",
            model.display()
        );
        Ok(())
    }

    /// A session (one board: riscv-virt costs ~0.4 s a token): GEN, STATUS, GEN continuing,
    /// RESET, GEN again; and the host client, `loglinear serial --qemu-board`.
    pub(super) fn session(&mut self) -> anyhow::Result<()> {
        let name = &self.board.name;
        let base = self.work_file("-session");
        let host_out = self.host_reference(&base)?;
        let gen1 = r"GEN n=8 temperature=0 prompt=JULIET:\n";
        let script =
            format!("{gen1}\nSTATUS\nGEN n=8 temperature=0\nSTATUS\nRESET\nSTATUS\n{gen1}\nQUIT\n");
        let label = format!("{name} session");
        let (out, time) = self
            .qemu(&label, &self.board.runner, &self.elf, &base)
            .run(script.as_bytes())?;
        let got = reply::reply_kinds(&out);
        let want = "READY TOK DONE STATUS TOK DONE STATUS OK STATUS TOK DONE BYE";
        if got != want {
            bail!("{label}: replies '{got}', expected '{want}'");
        }
        let host =
            std::fs::read(&host_out).with_context(|| format!("reading {}", host_out.display()))?;
        if reply::tok_ids(&out, 1, 16) != reply::host_ids(&host, 8) {
            bail!("{label}: GEN + continuing GEN differ from one host run of 16 tokens");
        }
        if reply::tok_ids(&out, 17, 8) != reply::tok_ids(&out, 1, 8) {
            bail!("{label}: GEN after RESET differs from the first GEN");
        }
        let counts = reply::status_count_list(&out);
        if counts != "tokens=16 generated=8 tokens=24 generated=16 tokens=0 generated=0" {
            bail!(
                "{label}: STATUS counts: {}",
                reply::status_lines(&out).join(" / ")
            );
        }
        self.note_stack(&out);
        println!(
            "  ok: session GEN, STATUS, GEN continuing (= host), RESET, GEN (= first), QEMU {}",
            reply::secs(time)
        );

        let (client_out, client_err) = (
            suffixed(&base, ".client.out"),
            suffixed(&base, ".client.err"),
        );
        let mut cmd = Command::new(&self.setup.cli);
        cmd.args(["serial", "--qemu-board", name, "--elf"])
            .arg(&self.elf)
            .args(CLIENT_REQUEST)
            .arg("--status");
        let (ended, time) =
            process::run_timed(&mut cmd, &client_out, &client_err, self.setup.limit)?;
        if !ended.success() {
            bail!(
                "{name}: loglinear serial {ended}: {}",
                read_text(&client_err)?.trim_end()
            );
        }
        if std::fs::read(&client_out).ok() != Some(host) {
            bail!(
                "{name}: loglinear serial printed other text than loglinear generate \
                 ({} against {})",
                client_out.display(),
                host_out.display()
            );
        }
        println!(
            "  ok: loglinear serial --qemu-board prints what loglinear generate prints ({})",
            reply::secs(time)
        );
        Ok(())
    }
}
