//! `cargo xtask session-snapshots [BOARD]`: session snapshots across a board and the host,
//! under QEMU (default board: `mps2-an386`; `QEMU_TIMEOUT` seconds per run, default 300).
//!
//! The firmware (its board's transport, semihosting) runs `GEN` (greedy), then `SNAP`, which
//! sends its session as a runtime snapshot in `HEX` lines (docs/serial-protocol.md,
//! *Snapshots*), then a second `GEN`. The host turns the hex back into a file and resumes it with
//! `loglinear generate --resume`: its tokens must be the board's second GEN, token for token.
//! The host's own snapshot of the same run (`--save-snapshot`) is compared with the board's:
//! identical bytes mean the board's state is bit for bit the host's.
//!
//! Then the board's A/B snapshot store (boards with a `[snapshot]` region), in one QEMU run:
//! (a) SAVE, RESET, LOAD, then GEN equals the uninterrupted run; (c) a RESTORE upload cut short
//! by another request and a corrupt one (a flipped byte: CRC) get ERR, and LOAD still gives the
//! previous snapshot; (d) two SAVEs, LOAD gives the newer; (b) the host's `--save-snapshot`
//! uploaded with RESTORE continues exactly as the host's `--resume`. Last, the same upload and a
//! SNAP download through `loglinear serial --restore FILE --snap FILE`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context};
use loglinear_planner::BoardProfile;

use crate::process::QemuRun;
use crate::reply;
use crate::tasks::{self, FirmwareBuild, Repo};

/// Arguments of the task.
#[derive(clap::Args)]
pub struct Args {
    /// The board (a folder under boards/ with a `[snapshot]` region).
    #[arg(default_value = "mps2-an386")]
    board: String,
    /// Seconds one QEMU run may take before it counts as hung.
    #[arg(long, env = "QEMU_TIMEOUT", default_value_t = 300)]
    qemu_timeout: u64,
}

/// Tokens of the first GEN, of the GENs that continue a session, and of the GEN between the
/// two SAVEs of the store test.
const N1: usize = 20;
const N2: usize = 16;
const N3: usize = 5;
/// Tokens of the prompt `ROMEO:\n` (byte-level vocabulary: one a byte).
const PROMPT_TOKENS: usize = 7;

/// Runs the task.
pub fn run(repo: &Repo, args: Args) -> anyhow::Result<()> {
    let board = BoardProfile::find(&args.board)?;
    let timeout = Duration::from_secs(args.qemu_timeout);
    let work = repo.target_dir.join("snapshot-test");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    tasks::qemu_setup(false)?;
    let model = tasks::board_model(&board);
    println!(
        "building the host CLI and the {} firmware ({} state, {} levels, {})",
        board.name,
        board.state,
        board.levels,
        model.display()
    );
    let cli = Host {
        exe: repo.host_cli()?,
        model: model.clone(),
    };
    let elf = FirmwareBuild::new(&board, &model, &repo.target_dir.join("firmware"))
        .build(&work.join(format!("{}.elf", board.name)))?;
    let qemu = Qemu {
        board: &board,
        elf: &elf,
        timeout,
    };

    let host_snap = snap_roundtrip(&qemu, &cli, &work)?;
    store(&qemu, &cli, &work, &host_snap)?;
    serial_client(&qemu, &cli, &work, &host_snap)
}

/// The host CLI and the model both sides run.
struct Host {
    exe: PathBuf,
    model: PathBuf,
}

impl Host {
    /// `loglinear generate --model M <args>`, its output; an error carries its stderr.
    fn generate(&self, args: &[&str]) -> anyhow::Result<Vec<u8>> {
        let out = Command::new(&self.exe)
            .arg("generate")
            .arg("--model")
            .arg(&self.model)
            .args(args)
            .stderr(Stdio::piped())
            .output()
            .context("starting loglinear generate")?;
        ensure!(
            out.status.success(),
            "loglinear generate {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
        Ok(out.stdout)
    }
}

impl Host {
    /// `--resume` of a snapshot file for N2 greedy tokens, saving the session after them to
    /// `save` if given.
    fn resume(&self, snap: &Path, save: Option<&Path>) -> anyhow::Result<Vec<u8>> {
        let n2 = N2.to_string();
        let mut args = vec!["--resume", path_str(snap)?, "-n", &n2, "--temperature", "0"];
        if let Some(save) = save {
            args.extend(["--save-snapshot", path_str(save)?]);
        }
        self.generate(&args)
    }
}

/// The board's image under its runner.
struct Qemu<'a> {
    board: &'a BoardProfile,
    elf: &'a Path,
    timeout: Duration,
}

impl Qemu<'_> {
    /// Runs the image with `input` on stdin; stdout and stderr go to `<base>.out` / `.err`.
    /// Returns stdout.
    fn run(&self, input: &[u8], base: &Path) -> anyhow::Result<String> {
        let (out, _) = QemuRun {
            label: &self.board.name,
            runner: &self.board.runner,
            elf: self.elf,
            base,
            limit: self.timeout,
            wait_ready: false,
        }
        .run(input)?;
        Ok(out)
    }
}

/// SNAP on the board, resumed on the host; the host's own snapshot of the same run compared with
/// the board's. Returns the host's snapshot file.
fn snap_roundtrip(qemu: &Qemu, host: &Host, work: &Path) -> anyhow::Result<PathBuf> {
    let name = &qemu.board.name;
    let script = format!(
        "GEN n={N1} temperature=0 prompt=ROMEO:\\n\nSNAP\nGEN n={N2} temperature=0\nQUIT\n"
    );
    let out = qemu.run(script.as_bytes(), &work.join("board"))?;
    let out_file = work.join("board.out");
    ensure!(
        out.lines().any(|l| l == "OK SNAP"),
        "{name}: no OK SNAP (output in {})",
        out_file.display()
    );
    let snap = hex_decode(&hex_payload(&out)).with_context(|| format!("{name}: HEX lines"))?;
    let want_len: usize = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("SNAP bytes=")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .with_context(|| format!("{name}: no 'SNAP bytes=N' line ({})", out_file.display()))?;
    ensure!(
        snap.len() == want_len,
        "{name}: SNAP said {want_len} bytes, {} arrived",
        snap.len()
    );
    let board_snap = work.join("board.snap");
    std::fs::write(&board_snap, &snap)
        .with_context(|| format!("writing {}", board_snap.display()))?;
    let board_ids = reply::tok_ids(&out, N1 + 1, usize::MAX);

    let host_ids = reply::host_ids(&host.resume(&board_snap, None)?, 0);
    ensure!(
        host_ids == board_ids,
        "{name}: host resumed from the board's snapshot gives [{host_ids}], the board [{board_ids}]"
    );
    println!(
        "  ok: board SNAP ({want_len} bytes at t = {}) resumed on the host: {N2} greedy tokens equal the board's",
        PROMPT_TOKENS + N1
    );

    let host_snap = work.join("host.snap");
    let (state, levels, n1) = (
        qemu.board.state.to_string(),
        qemu.board.levels.to_string(),
        N1.to_string(),
    );
    host.generate(&[
        "--prompt",
        "ROMEO:\\n",
        "-n",
        &n1,
        "--temperature",
        "0",
        "--state",
        &state,
        "--levels",
        &levels,
        "--save-snapshot",
        path_str(&host_snap)?,
    ])?;
    report_equal(
        &host_snap,
        &board_snap,
        "the board's snapshot equals the host's byte for byte (state, conv, logits)",
        "the board's snapshot differs from the host's",
    )?;
    Ok(host_snap)
}

/// The board's A/B snapshot store: SAVE, LOAD, RESTORE (docs/serial-protocol.md), in one QEMU
/// run (the store lives as long as the machine).
fn store(qemu: &Qemu, host: &Host, work: &Path, host_snap: &Path) -> anyhow::Result<()> {
    let name = &qemu.board.name;
    let snap =
        std::fs::read(host_snap).with_context(|| format!("reading {}", host_snap.display()))?;
    ensure!(!snap.is_empty(), "{} is empty", host_snap.display());
    let mut bad = snap.clone();
    bad[snap.len() / 2] ^= 0x5a;
    let (good_hex, bad_hex) = (hex_lines(&snap), hex_lines(&bad));
    let half: String =
        good_hex
            .lines()
            .take(good_hex.lines().count() / 2)
            .fold(String::new(), |mut s, l| {
                let _ = writeln!(s, "{l}");
                s
            });
    let len = snap.len();
    let script = [
        format!("GEN n={N1} temperature=0 prompt=ROMEO:\\n\n"), // block 1
        "SAVE\n".into(),                                        // seq 1 at t = 7 + N1
        format!("GEN n={N2} temperature=0\n"),                  // block 2: uninterrupted
        "RESET\nLOAD\n".into(),
        format!("GEN n={N2} temperature=0\n"), // block 3: = block 2 (a)
        format!("RESTORE bytes={len}\n"),      // cut short (c)
        half,
        "STATUS\n".into(),
        format!("RESTORE bytes={len}\n"), // corrupt (c)
        bad_hex,
        "END\nRESET\nLOAD\n".into(),           // still seq 1 (c)
        format!("GEN n={N2} temperature=0\n"), // block 4: = block 2
        format!("SAVE\nGEN n={N3} temperature=0\nSAVE\n"), // block 5; seq 2, seq 3 (d)
        format!("GEN n={N2} temperature=0\n"), // block 6: after seq 3
        "RESET\nLOAD\n".into(),                // seq 3 (d)
        format!("GEN n={N2} temperature=0\n"), // block 7: = block 6
        format!("RESTORE bytes={len}\n"),      // host → board (b)
        good_hex,
        "END\n".into(),
        format!("GEN n={N2} temperature=0\n"), // block 8: = host --resume
        "STATUS\nQUIT\n".into(),
    ]
    .concat();
    let input = work.join("store.in");
    std::fs::write(&input, &script).with_context(|| format!("writing {}", input.display()))?;
    let out = qemu.run(script.as_bytes(), &work.join("store"))?;
    let out_file = work.join("store.out");

    let blocks = gen_blocks(&out);
    ensure!(
        blocks.len() == 8,
        "{name}: {} GEN replies, want 8 ({})",
        blocks.len(),
        out_file.display()
    );
    let replies = Replies::of(&out);
    let expect = |k: usize, prefix: &str, check: &dyn Fn(&str) -> bool, want: &str| {
        let got = replies.nth(prefix, k);
        ensure!(
            got.is_some_and(check),
            "{name}: reply {k} of {prefix} is [{}], want {want} ({})",
            got.unwrap_or(""),
            out_file.display()
        );
        Ok(())
    };
    let (t1, t3) = (PROMPT_TOKENS + N1, PROMPT_TOKENS + N1 + N2 + N3);
    // The k-th `<kind> seq=<seq> slot=<slot> bytes=N t=<t>` reply.
    let expect_slot = |k: usize, kind: &str, seq: u32, slot: &str, t: usize| {
        expect(
            k,
            kind,
            &|l| slot_reply(l, kind, seq, slot).is_some_and(|(_, at)| at == t),
            &format!("{kind} seq={seq} slot={slot} bytes=N t={t}"),
        )
    };
    expect_slot(1, "SAVED", 1, "A", t1)?;
    expect_slot(1, "LOADED", 1, "A", t1)?;
    ensure!(
        blocks[2] == blocks[1],
        "{name}: after SAVE, RESET, LOAD the board gives [{}], uninterrupted [{}]",
        blocks[2],
        blocks[1]
    );
    println!("  ok (a): board SAVE (t = {t1}), RESET, LOAD: {N2} greedy tokens equal the uninterrupted run");
    expect(
        1,
        "ERR",
        &|l| l.starts_with("ERR 5 RESTORE: upload cut short after "),
        "ERR 5 RESTORE: upload cut short after N bytes",
    )?;
    let status = format!("STATUS tokens={} ", t1 + N2);
    expect(1, "STATUS", &|l| l.starts_with(&status), &status)?;
    expect(
        2,
        "ERR",
        &|l| l.starts_with("ERR 7 RESTORE: corrupt: CRC mismatch"),
        "ERR 7 RESTORE: corrupt: CRC mismatch",
    )?;
    expect_slot(2, "LOADED", 1, "A", t1)?;
    ensure!(
        blocks[3] == blocks[1],
        "{name}: LOAD after the bad uploads gives [{}]",
        blocks[3]
    );
    println!("  ok (c): a RESTORE cut short (then STATUS runs) and a corrupt one (CRC): ERR, LOAD still gives seq 1");
    expect(
        2,
        "SAVED",
        &|l| slot_reply(l, "SAVED", 2, "B").is_some(),
        "SAVED seq=2 slot=B ...",
    )?;
    expect_slot(3, "SAVED", 3, "A", t3)?;
    expect_slot(3, "LOADED", 3, "A", t3)?;
    ensure!(
        blocks[6] == blocks[5],
        "{name}: LOAD of seq 3 gives [{}], want [{}]",
        blocks[6],
        blocks[5]
    );
    println!("  ok (d): SAVE twice, LOAD gives the newer (seq 3, t = {t3}) and continues it");
    expect(
        1,
        "RESTORED",
        &|l| slot_reply(l, "RESTORED", 4, "B") == Some((len, t1)),
        &format!("RESTORED seq=4 slot=B bytes={len} t={t1}"),
    )?;
    let host_ids = reply::host_ids(&host.resume(host_snap, None)?, 0);
    ensure!(
        blocks[7] == host_ids,
        "{name}: after RESTORE of the host's snapshot the board gives [{}], the host's --resume [{host_ids}]",
        blocks[7]
    );
    println!("  ok (b): host --save-snapshot ({len} bytes) uploaded with RESTORE: the board's {N2} greedy tokens equal the host's --resume");
    if let Some(peak) = out
        .lines()
        .rev()
        .find_map(|l| l.split(' ').find(|w| w.starts_with("stack_peak_bytes=")))
    {
        println!("  stack: {peak} after SAVE/LOAD/RESTORE");
    }
    Ok(())
}

/// The same round trip with the host CLI: `loglinear serial --restore` uploads the host's
/// snapshot, the board continues it, and `--snap` fetches the board's session back.
fn serial_client(qemu: &Qemu, host: &Host, work: &Path, host_snap: &Path) -> anyhow::Result<()> {
    let name = &qemu.board.name;
    let (cli_snap, cli_out) = (work.join("cli.snap"), work.join("cli.out"));
    let n2 = N2.to_string();
    let out = tasks::output(
        Command::new(&host.exe)
            .args(["serial", "--qemu-board", name, "--elf"])
            .arg(qemu.elf)
            .arg("--restore")
            .arg(host_snap)
            .args(["-n", &n2, "--temperature", "0", "--snap"])
            .arg(&cli_snap),
    )
    .context("loglinear serial --restore/--snap")?;
    std::fs::write(&cli_out, &out).with_context(|| format!("writing {}", cli_out.display()))?;
    let cli_ids = reply::host_ids(out.as_bytes(), 0);
    let host_after = work.join("host-after.snap");
    let host_ids = reply::host_ids(&host.resume(host_snap, Some(&host_after))?, 0);
    ensure!(
        cli_ids == host_ids,
        "{name}: loglinear serial --restore gives [{cli_ids}], the host's --resume [{host_ids}]"
    );
    println!("  ok: loglinear serial --restore FILE --snap FILE: the board continues the host's snapshot ({N2} tokens equal)");
    report_equal(
        &cli_snap,
        &host_after,
        &format!(
            "the board's snapshot fetched with --snap equals the host's after the same {N2} tokens"
        ),
        "the snapshot fetched with --snap differs from the host's",
    )
}

/// Prints whether two snapshot files are equal. Float rounding may differ across targets, so a
/// difference is a note (the tokens, checked apart, must agree).
fn report_equal(a: &Path, b: &Path, same: &str, differ: &str) -> anyhow::Result<()> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let (a, b) = (read(a)?, read(b)?);
    if a == b {
        println!("  ok: {same}");
    } else {
        let bytes = a.iter().zip(&b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
        println!("  note: {differ} in {bytes} bytes (float rounding differs across targets); tokens agree");
    }
    Ok(())
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// The token ids of each GEN of a transcript, separated by spaces: the TOK lines up to each
/// `DONE`.
fn gen_blocks(out: &str) -> Vec<String> {
    let (mut blocks, mut ids) = (Vec::new(), Vec::<&str>::new());
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("TOK ") {
            ids.push(rest.split(' ').next().unwrap_or(""));
        } else if line.starts_with("DONE ") {
            blocks.push(ids.join(" "));
            ids.clear();
        }
    }
    blocks
}

/// The hex digits of a transcript's `HEX` lines, in order.
fn hex_payload(out: &str) -> String {
    out.lines().filter_map(|l| l.strip_prefix("HEX ")).collect()
}

fn hex_decode(hex: &str) -> anyhow::Result<Vec<u8>> {
    ensure!(
        hex.len() % 2 == 0,
        "an odd number of hex digits ({})",
        hex.len()
    );
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16)
                .with_context(|| format!("bad hex {:?} at digit {i}", &hex[i..i + 2]))
        })
        .collect()
}

/// `HEX` lines of 64 bytes each (the upload format of docs/serial-protocol.md).
pub(crate) fn hex_lines(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2 + bytes.len() / 64 * 5 + 5);
    for chunk in bytes.chunks(64) {
        s.push_str("HEX ");
        for b in chunk {
            let _ = write!(s, "{b:02x}");
        }
        s.push('\n');
    }
    s
}

/// `<kind> seq=<seq> slot=<slot> bytes=<n> t=<t>`: `(n, t)` when the line is that reply.
fn slot_reply(line: &str, kind: &str, seq: u32, slot: &str) -> Option<(usize, usize)> {
    let rest = line
        .strip_prefix(kind)?
        .strip_prefix(&format!(" seq={seq} slot={slot} bytes="))?;
    let (bytes, t) = rest.split_once(" t=")?;
    Some((bytes.parse().ok()?, t.parse().ok()?))
}

/// The replies of a transcript other than tokens, `DONE`, `READY` and bracketed log lines.
struct Replies<'a>(Vec<&'a str>);

impl<'a> Replies<'a> {
    fn of(out: &'a str) -> Self {
        Replies(
            out.lines()
                .filter(|l| {
                    !(l.starts_with("TOK ")
                        || l.starts_with("DONE ")
                        || l.starts_with("READY ")
                        || l.starts_with('['))
                })
                .collect(),
        )
    }

    /// The `k`-th (from 1) reply that starts with `prefix`.
    fn nth(&self, prefix: &str, k: usize) -> Option<&'a str> {
        self.0
            .iter()
            .filter(|l| l.starts_with(prefix))
            .nth(k.checked_sub(1)?)
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_lines_round_trip_in_64_byte_lines() {
        let bytes: Vec<u8> = (0..=200u8).collect();
        let lines = hex_lines(&bytes);
        assert_eq!(lines.lines().count(), 4);
        assert!(lines.starts_with("HEX 000102"));
        assert_eq!(lines.lines().next().unwrap().len(), 4 + 128);
        assert_eq!(hex_decode(&hex_payload(&lines)).unwrap(), bytes);
        assert!(hex_decode("abc").is_err());
        assert!(hex_decode("zz").is_err());
    }

    #[test]
    fn transcripts_split_into_gens_and_replies() {
        let out = "READY x\nTOK 65 A\nTOK 66 B\nDONE 2\nSAVED seq=1 slot=A bytes=900 t=27\n[log]\nTOK 67 C\nDONE 1\nERR 5 x\n";
        assert_eq!(gen_blocks(out), ["65 66", "67"]);
        let r = Replies::of(out);
        assert_eq!(r.nth("SAVED", 1), Some("SAVED seq=1 slot=A bytes=900 t=27"));
        assert_eq!(r.nth("ERR", 1), Some("ERR 5 x"));
        assert_eq!(r.nth("ERR", 2), None);
        assert_eq!(r.nth("ERR", 0), None);
        assert_eq!(
            slot_reply("SAVED seq=1 slot=A bytes=900 t=27", "SAVED", 1, "A"),
            Some((900, 27))
        );
        assert_eq!(
            slot_reply("SAVED seq=1 slot=B bytes=900 t=27", "SAVED", 1, "A"),
            None
        );
    }
}
