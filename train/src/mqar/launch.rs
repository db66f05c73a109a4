//! `loglinear mqar --gpus SPEC`: the sweep as one process per GPU. Its runs are independent,
//! so the list of runs (in the sweep's order) is dealt round-robin: process k of P takes runs
//! k, k + P, k + 2P, … ([`Share`]). Each process is this executable's `mqar` with the same
//! flags, plus `--gpu INDEX --share k/P` and its own results file `<stem>.share<k>of<P>.<ext>`
//! beside `--output`, so it skips its recorded runs and continues its checkpoint folder as a
//! one-process sweep does. Their output comes through on stderr, each line after
//! `[gpu INDEX share k/P]`. When all have finished, their runs go into `--output` (and `--md`),
//! after the runs already there.

use super::sweep::{sweep_runs, RunId};
use super::{load_results, markdown, save_results, MqarArgs, MqarError, RunRecord};
use loglinear_host_gpu::{adapters, GpuError};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

/// The adapters of `--gpus`: one process per entry, on the adapter of that index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuList(Vec<usize>);

impl GpuList {
    /// Parses `--gpus`: a count N (adapters 0 to N-1) or a comma list of adapter indices.
    pub fn parse(spec: &str) -> Result<Self, MqarError> {
        let bad = |why: String| {
            MqarError::Flag(format!(
                "--gpus {spec}: {why}; give a count (4: adapters 0 to 3) or a comma list of \
                 adapter indices (2,3; 0,0 for two processes on adapter 0)"
            ))
        };
        if !spec.contains(',') {
            let n: usize = spec
                .trim()
                .parse()
                .map_err(|_| bad(format!("`{spec}` is not a count")))?;
            if n == 0 {
                return Err(bad("the count must be at least 1".into()));
            }
            return Ok(Self((0..n).collect()));
        }
        spec.split(',')
            .map(|s| match s.trim() {
                "" => Err(bad("an entry is empty".into())),
                s => s
                    .parse()
                    .map_err(|_| bad(format!("`{s}` is not an adapter index"))),
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// The adapter of each process.
    pub fn indices(&self) -> &[usize] {
        &self.0
    }
}

/// One process's part of a sweep: runs `index`, `index + count`, … of the sweep's list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share {
    index: usize,
    count: usize,
}

impl Share {
    /// Parses `--share k/P` (k < P).
    pub fn parse(s: &str) -> Result<Self, MqarError> {
        let parsed = s
            .split_once('/')
            .and_then(|(k, p)| Some((k.trim().parse().ok()?, p.trim().parse().ok()?)));
        match parsed {
            Some((index, count)) if index < count => Ok(Self { index, count }),
            _ => Err(MqarError::Flag(format!(
                "--share {s}: want k/P with k < P, e.g. 0/2"
            ))),
        }
    }

    /// The shares of `count` processes (`count` ≥ 1).
    fn all(count: usize) -> impl Iterator<Item = Self> {
        (0..count).map(move |index| Self { index, count })
    }

    /// Whether the run at `position` of the sweep's list is in this share.
    fn holds(self, position: usize) -> bool {
        position % self.count == self.index
    }

    /// This share of `runs`, in their order.
    pub fn of<T: Clone>(self, runs: &[T]) -> Vec<T> {
        runs.iter()
            .enumerate()
            .filter(|&(i, _)| self.holds(i))
            .map(|(_, r)| r.clone())
            .collect()
    }
}

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A process of `--gpus` that failed: its share, its adapter and what happened to it.
#[derive(Debug)]
pub struct ProcessFailure {
    pub share: Share,
    pub adapter: usize,
    /// Its exit status, or why it could not be started or waited for.
    pub why: String,
}

impl std::fmt::Display for ProcessFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "share {} on gpu {} ({})",
            self.share, self.adapter, self.why
        )
    }
}

/// One process of `--gpus`.
#[derive(Clone, Debug, PartialEq)]
struct Process {
    share: Share,
    adapter: usize,
    /// Its results file.
    out: PathBuf,
}

impl Process {
    /// `args` as this process has them: its results file, no table (the launcher writes it).
    fn args(&self, args: &MqarArgs) -> MqarArgs {
        MqarArgs {
            out: self.out.clone(),
            md: None,
            gpu: Some(self.adapter),
            gpus: None,
            share: Some(self.share),
            ..args.clone()
        }
    }

    /// What its output lines start with.
    fn prefix(&self) -> String {
        format!("[gpu {} share {}]", self.adapter, self.share)
    }
}

/// The results file of `share` beside `out`: `runs.json` → `runs.share0of2.json`.
fn share_out(out: &Path, share: Share) -> PathBuf {
    let mut name = out.file_stem().unwrap_or_default().to_owned();
    name.push(format!(".share{}of{}", share.index, share.count));
    if let Some(ext) = out.extension() {
        name.push(".");
        name.push(ext);
    }
    out.with_file_name(name)
}

/// The processes of `gpus` for results file `out`.
fn processes(gpus: &GpuList, out: &Path) -> Vec<Process> {
    Share::all(gpus.0.len())
        .zip(&gpus.0)
        .map(|(share, &adapter)| Process {
            share,
            adapter,
            out: share_out(out, share),
        })
        .collect()
}

/// The command line of `p` after the executable: `mqar` and every flag of `args` that is
/// set, with `p`'s adapter, share and results file in place of `--gpus`, `--output` and
/// `--md`.
fn process_command_line(args: &MqarArgs, p: &Process) -> Vec<OsString> {
    // Every field by name, so that a new flag must be passed on (or left out) here.
    let MqarArgs {
        archs,
        dims,
        lrs,
        seeds,
        kv,
        train_examples,
        test_examples,
        batch,
        micro_batch,
        epochs,
        steps,
        eval_every,
        early_stop,
        max_seconds_per_run,
        checkpoint_every,
        max_seconds,
        pause_after_steps,
        warmup,
        out: _,
        md: _,
        head,
        init,
        merge: _,
        gdn_expand_v,
        vocab,
        seq_len,
        gpu: _,
        gpus: _,
        share: _,
    } = args;
    fn list<T: ToString>(v: &[T]) -> String {
        v.iter().map(T::to_string).collect::<Vec<_>>().join(",")
    }
    let mut line: Vec<OsString> = vec!["mqar".into()];
    let mut flag = |name: &str, value: OsString| {
        line.push(name.into());
        line.push(value);
    };
    let names: Vec<&str> = archs.iter().map(|a| a.name()).collect();
    flag("--archs", names.join(",").into());
    flag("--dims", list(dims).into());
    flag("--lrs", list(lrs).into());
    flag("--seeds", list(seeds).into());
    flag("--kv", list(kv).into());
    if let Some(t) = train_examples {
        flag("--train-examples", list(t).into());
    }
    flag("--test-examples", test_examples.to_string().into());
    flag("--batch", batch.to_string().into());
    if let Some(m) = micro_batch {
        flag("--micro-batch", m.to_string().into());
    }
    flag("--epochs", epochs.to_string().into());
    if let Some(s) = steps {
        flag("--steps", s.to_string().into());
    }
    if let Some(e) = eval_every {
        flag("--eval-every", e.to_string().into());
    }
    flag("--early-stop", early_stop.to_string().into());
    if let Some(m) = max_seconds_per_run {
        flag("--max-seconds-per-run", m.to_string().into());
    }
    if let Some(c) = checkpoint_every {
        flag("--checkpoint-every", c.to_string().into());
    }
    if let Some(m) = max_seconds {
        flag("--max-seconds", m.to_string().into());
    }
    if let Some(n) = pause_after_steps {
        flag("--pause-after-steps", n.to_string().into());
    }
    flag("--warmup", warmup.to_string().into());
    flag("--head", head.name().into());
    flag("--init", init.name().into());
    flag("--gdn-expand-v", gdn_expand_v.to_string().into());
    flag("--vocab", vocab.to_string().into());
    flag("--context", seq_len.to_string().into());
    flag("--gpu", p.adapter.to_string().into());
    flag("--share", p.share.to_string().into());
    flag("--output", p.out.clone().into());
    line
}

/// Runs the sweep of `args` as the processes of `gpus`, then merges their results.
pub(super) fn run(args: &MqarArgs, gpus: &GpuList) -> Result<(), MqarError> {
    super::check_args(args)?;
    let found = adapters();
    if let Some(&index) = gpus.0.iter().find(|&&i| i >= found.len()) {
        return Err(GpuError::NoSuchAdapter {
            index,
            adapters: found,
        }
        .into());
    }
    let sweep = sweep_runs(args);
    let processes = processes(gpus, &args.out);
    give_out_recorded_runs(args, &processes, &sweep)?;
    let exe = std::env::current_exe().map_err(MqarError::CurrentExe)?;
    eprintln!(
        "mqar: {} runs in {} processes: {}",
        sweep.len(),
        processes.len(),
        processes
            .iter()
            .map(|p| format!("{} {}", p.prefix(), p.out.display()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let started: Vec<_> = processes.iter().map(|p| start(&exe, args, p)).collect();
    let mut failed = Vec::new();
    for (p, started) in processes.iter().zip(started) {
        let why = match started {
            Ok(running) => running.finish().err(),
            Err(e) => Some(format!("cannot start {}: {e}", exe.display())),
        };
        if let Some(why) = why {
            failed.push(ProcessFailure {
                share: p.share,
                adapter: p.adapter,
                why,
            });
        }
    }
    if !failed.is_empty() {
        return Err(MqarError::Processes {
            failed,
            count: processes.len(),
        });
    }
    let runs = merged_runs(args, &processes, &sweep)?;
    save_results(args, &runs)?;
    print!("{}", markdown(args, &runs));
    Ok(())
}

/// A started process and the threads that forward its output.
struct Running {
    child: Child,
    forwards: Vec<JoinHandle<()>>,
}

impl Running {
    /// Waits for the process and the end of its output; why it failed, if it did.
    fn finish(mut self) -> Result<(), String> {
        let status = self.child.wait();
        for f in self.forwards {
            // A forwarding thread only writes to stderr; it has nothing to hand back.
            let _ = f.join();
        }
        match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(s.to_string()),
            Err(e) => Err(format!("cannot wait for it: {e}")),
        }
    }
}

/// Starts `p` as `exe`'s `mqar`. Its stdout and stderr both come through on this process's
/// stderr, after its prefix, so that this process's stdout is the merged table alone.
fn start(exe: &Path, args: &MqarArgs, p: &Process) -> std::io::Result<Running> {
    let mut child = Command::new(exe)
        .args(process_command_line(args, p))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut forwards = Vec::new();
    if let Some(out) = child.stdout.take() {
        let prefix = p.prefix();
        forwards.push(std::thread::spawn(move || forward(out, &prefix)));
    }
    if let Some(err) = child.stderr.take() {
        let prefix = p.prefix();
        forwards.push(std::thread::spawn(move || forward(err, &prefix)));
    }
    Ok(Running { child, forwards })
}

/// Copies the runs of `--output` into the results files of the processes whose shares hold
/// them, so that no process trains a run that is already recorded.
fn give_out_recorded_runs(
    args: &MqarArgs,
    processes: &[Process],
    sweep: &[RunId],
) -> Result<(), MqarError> {
    let recorded = load_results(args)?;
    for p in processes {
        let p_args = p.args(args);
        let mut runs = load_results(&p_args)?;
        let before = runs.len();
        for r in &recorded {
            let in_share = sweep
                .iter()
                .position(|id| id.recorded_by(r))
                .is_some_and(|i| p.share.holds(i));
            if in_share && !runs.iter().any(|x| x.same_run(r.arch, r.dim, r.lr, r.seed)) {
                runs.push(r.clone());
            }
        }
        if runs.len() > before {
            save_results(&p_args, &runs)?;
        }
    }
    Ok(())
}

/// The runs of `--output`, then those of the processes' results files that it lacks, in the
/// sweep's order (runs outside the sweep last).
fn merged_runs(
    args: &MqarArgs,
    processes: &[Process],
    sweep: &[RunId],
) -> Result<Vec<RunRecord>, MqarError> {
    let mut runs = load_results(args)?;
    let mut new: Vec<RunRecord> = Vec::new();
    for p in processes {
        for r in load_results(&p.args(args))? {
            let seen = |x: &RunRecord| x.same_run(r.arch, r.dim, r.lr, r.seed);
            if !runs.iter().chain(&new).any(seen) {
                new.push(r);
            }
        }
    }
    new.sort_by_key(|r| {
        sweep
            .iter()
            .position(|id| id.recorded_by(r))
            .unwrap_or(sweep.len())
    });
    runs.extend(new);
    Ok(runs)
}

/// Copies `from` to stderr a line at a time, each after `prefix`, until it ends.
fn forward(mut from: impl Read, prefix: &str) {
    let mut pending = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        for line in take_lines(&mut pending) {
            write_line(prefix, &line);
        }
    }
    let rest = String::from_utf8_lossy(&pending);
    if !rest.is_empty() {
        write_line(prefix, &rest);
    }
}

fn write_line(prefix: &str, line: &str) {
    // One write per line, so the processes' lines do not interleave; a closed stderr is
    // ignored, so the pipe keeps draining and the process never blocks on it.
    let _ = writeln!(std::io::stderr().lock(), "{prefix} {line}");
}

/// Removes the complete lines from the front of `pending` and returns them. A carriage return
/// ends a line as a newline does: a redrawn progress line becomes a line of its own. Empty
/// lines (as between `\r` and `\n`) are dropped.
fn take_lines(pending: &mut Vec<u8>) -> Vec<String> {
    let mut lines = Vec::new();
    while let Some(end) = pending.iter().position(|&b| b == b'\n' || b == b'\r') {
        let line: Vec<u8> = pending.drain(..=end).collect();
        let text = String::from_utf8_lossy(&line[..end]);
        if !text.is_empty() {
            lines.push(text.into_owned());
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::super::settings_json;
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: MqarArgs,
    }

    fn parse(line: &[&str]) -> MqarArgs {
        let argv = std::iter::once("mqar").chain(line.iter().copied());
        Cli::try_parse_from(argv).expect("flags parse").args
    }

    fn flag_error(e: MqarError) -> String {
        match e {
            MqarError::Flag(m) => m,
            other => panic!("not a flag error: {other}"),
        }
    }

    #[test]
    fn shares_deal_the_runs_round_robin() {
        let runs: Vec<usize> = (0..10).collect();
        let shares: Vec<Vec<usize>> = Share::all(3).map(|s| s.of(&runs)).collect();
        assert_eq!(shares, [vec![0, 3, 6, 9], vec![1, 4, 7], vec![2, 5, 8]]);
        // Every run exactly once.
        let mut all: Vec<usize> = shares.concat();
        all.sort_unstable();
        assert_eq!(all, runs);
        // More processes than runs: the last ones get none.
        let shares: Vec<Vec<usize>> = Share::all(5).map(|s| s.of(&runs[..2])).collect();
        assert_eq!(shares, [vec![0], vec![1], vec![], vec![], vec![]]);
        // One process: the whole sweep.
        assert_eq!(
            Share::all(1).next().map(|s| s.of(&runs)),
            Some(runs.clone())
        );
    }

    #[test]
    fn gpu_lists_parse_and_bad_ones_are_named() {
        let ok = |s: &str| GpuList::parse(s).expect(s).indices().to_vec();
        assert_eq!(ok("4"), [0, 1, 2, 3]);
        assert_eq!(ok("1"), [0]);
        assert_eq!(ok("0,0"), [0, 0]);
        assert_eq!(ok("2,3"), [2, 3]);
        assert_eq!(ok(" 2, 3 "), [2, 3]);
        for (spec, why) in [
            ("0,,1", "an entry is empty"),
            ("0,", "an entry is empty"),
            ("-1", "`-1` is not a count"),
            ("0,-1", "`-1` is not an adapter index"),
            ("0", "the count must be at least 1"),
            ("", "`` is not a count"),
            ("two", "`two` is not a count"),
        ] {
            let m = flag_error(GpuList::parse(spec).expect_err(spec));
            assert!(m.starts_with(&format!("--gpus {spec}: ")), "{m}");
            assert!(m.contains(why), "{spec}: {m}");
        }
    }

    #[test]
    fn shares_parse() {
        let s = Share::parse("1/3").unwrap();
        assert_eq!((s.index, s.count), (1, 3));
        assert_eq!(s.to_string(), "1/3");
        for bad in ["3/3", "0/0", "1", "a/2", "1/", "-1/2"] {
            let m = flag_error(Share::parse(bad).expect_err(bad));
            assert!(m.contains(&format!("--share {bad}")), "{m}");
        }
    }

    #[test]
    fn process_files_sit_beside_the_output() {
        let s = Share::parse("1/2").unwrap();
        let out = share_out(Path::new("runs/mqar.json"), s);
        assert_eq!(out, Path::new("runs/mqar.share1of2.json"));
        assert_eq!(share_out(Path::new("mqar"), s), Path::new("mqar.share1of2"));
        let gpus = GpuList::parse("2,3").unwrap();
        let p = processes(&gpus, Path::new("m.json"));
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].adapter, p[0].share.to_string()), (2, "0/2".into()));
        assert_eq!((p[1].adapter, p[1].share.to_string()), (3, "1/2".into()));
        assert_eq!(p[1].out, Path::new("m.share1of2.json"));
        assert_eq!(p[1].prefix(), "[gpu 3 share 1/2]");
    }

    #[test]
    fn a_process_gets_every_flag_with_its_own_gpu_share_and_file() {
        let parent = parse(&[
            "--archs",
            "gdn,ll-mamba2",
            "--dims",
            "16,64",
            "--lrs",
            "1e-3,3.2e-2",
            "--seeds",
            "1,2,3",
            "--kv",
            "4,8",
            "--train-examples",
            "100,50",
            "--test-examples",
            "7",
            "--batch",
            "64",
            "--micro-batch",
            "16",
            "--epochs",
            "3",
            "--steps",
            "40",
            "--eval-every",
            "5",
            "--early-stop",
            "0.875",
            "--max-seconds-per-run",
            "12.5",
            "--checkpoint-every",
            "4",
            "--max-seconds",
            "540",
            "--pause-after-steps",
            "9",
            "--warmup",
            "2",
            "--output",
            "dir/r.json",
            "--md",
            "dir/r.md",
            "--head",
            "untied",
            "--init",
            "official",
            "--gdn-expand-v",
            "1",
            "--vocab",
            "20",
            "--context",
            "16",
            "--gpus",
            "2,3",
        ]);
        let Some(gpus) = &parent.gpus else {
            panic!("--gpus parsed to nothing");
        };
        for p in processes(gpus, &parent.out) {
            let line = process_command_line(&parent, &p);
            assert_eq!(line[0], "mqar");
            let text: Vec<&str> = line[1..]
                .iter()
                .map(|a| a.to_str().expect("UTF-8"))
                .collect();
            let child = parse(&text);
            assert_eq!(child, p.args(&parent));
            assert_eq!(child.gpu, Some(p.adapter));
            assert_eq!(child.share, Some(p.share));
            assert_eq!(child.out, p.out);
            assert_eq!((child.md.as_ref(), child.gpus.as_ref()), (None, None));
            assert_eq!(settings_json(&child), settings_json(&parent));
        }
        // The defaults pass through as well.
        let parent = parse(&["--gpus", "1"]);
        let p = &processes(&GpuList::parse("1").unwrap(), &parent.out)[0];
        let line = process_command_line(&parent, p);
        let text: Vec<&str> = line[1..]
            .iter()
            .map(|a| a.to_str().expect("UTF-8"))
            .collect();
        assert_eq!(parse(&text), p.args(&parent));
    }

    #[test]
    fn gpus_goes_with_neither_gpu_nor_merge() {
        for line in [
            ["--gpus", "2", "--gpu", "0"],
            ["--gpus", "2", "--merge", "a.json"],
        ] {
            let argv = std::iter::once("mqar").chain(line);
            let e = Cli::try_parse_from(argv).err().expect("refused");
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{e}");
        }
    }

    #[test]
    fn output_is_split_into_lines_at_newlines_and_carriage_returns() {
        let mut pending = b"one\ntwo\r\nbar 1\rbar 2\rthr".to_vec();
        assert_eq!(take_lines(&mut pending), ["one", "two", "bar 1", "bar 2"]);
        assert_eq!(pending, b"thr");
        pending.extend_from_slice(b"ee\n");
        assert_eq!(take_lines(&mut pending), ["three"]);
        assert!(pending.is_empty());
        assert!(take_lines(&mut pending).is_empty());
    }
}
