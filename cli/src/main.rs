//! `loglinear`: the host command line.

/// `println!` that returns the write error instead of panicking, so that `loglinear … | head`
/// ends quietly when the reader goes away.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod args;
mod cmd;
mod plot;
mod prompt;
mod snapshot_file;

pub(crate) use args::{ActivationsArg, ModelArg, SamplingArgs, StateDtype};
use cmd::{bench, eval as eval_cli};

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use loglinear_converter::command_paths::CommandPaths;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "loglinear",
    version,
    about = "Log-Linear Attention models on the host and on boards"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a checkpoint folder (config.json + model.safetensors) to a GGUF model file.
    Convert(cmd::convert::ConvertArgs),
    /// Re-store a GGUF model file with other tensor types (GGUF to GGUF).
    Quantize(cmd::convert::QuantizeArgs),
    /// Show a GGUF file's metadata, tensors, types, sizes and bits per weight.
    Inspect(cmd::inspect::InspectArgs),
    /// Bits per byte of a model (GGUF file or checkpoint folder) on a text file; with
    /// `--per-position`/`--plot`, the loss at each position of the windows (CSV, PNG chart,
    /// optionally against a `--baseline` model).
    Eval(eval_cli::EvalArgs),
    /// Generate text from a prompt, streaming it to stdout (speed on stderr).
    Generate(cmd::generate::GenerateArgs),
    /// Plan a model on a board: flash, RAM (state at a context, conv, scratch, stack), fit.
    Plan(cmd::plan::PlanArgs),
    /// Talk to the firmware over its serial protocol (a serial device or a QEMU board): send a
    /// prompt, print the tokens as they stream back.
    Serial(cmd::serial::SerialArgs),
    /// Throughput in llama-bench's style: pp512, tg128, tg128@16K tokens/s per backend,
    /// kernel path and activation mode; `--curve` for decode speed against context, `--qemu`
    /// for the firmware's instruction counts.
    Bench(bench::BenchArgs),
    /// Train or fine-tune a Gated DeltaNet or Mamba-2 model on a GPU (wgpu; lavapipe without
    /// one), with checkpoints in the official layout (config.json + model.safetensors) and exact
    /// resume.
    Train(Box<loglinear_train::TrainArgs>),
    /// Draw the loss curves of `train` runs (their train_log.csv) in one PNG chart, with a
    /// table of how far each run is from the first.
    LossPlot(cmd::loss_plot::LossPlotArgs),
    /// The paper's MQAR table: train 2-layer models on Zoology's MQAR over archs × dims ×
    /// learning rates × seeds, report test accuracy per kv setting beside the paper's.
    Mqar(Box<loglinear_train::mqar::MqarArgs>),
}

/// Errors of the command line, naming the file involved.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Write(#[from] loglinear_converter::output_file::OutputFileError),
    #[error("{path}: {error}")]
    Gguf {
        path: PathBuf,
        error: loglinear_runtime::gguf::GgufError,
    },
    #[error("the file just written does not read back: {0}")]
    ReadBack(loglinear_runtime::gguf::ModelFileError),
    #[error("--prompt: the prompt is empty: give at least one byte")]
    EmptyPrompt,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // clap says only that some argument is not UTF-8; say which flag's.
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
            eprintln!("error: {}", not_utf8(std::env::args_os()));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Names the flag whose value is not UTF-8 among `args` (the command line), for a flag that
/// takes text: paths and `--prompt` take any bytes.
fn not_utf8(args: impl Iterator<Item = std::ffi::OsString>) -> String {
    let args: Vec<_> = args.collect();
    let Some(at) = args.iter().position(|a| a.to_str().is_none()) else {
        return "an argument is not valid UTF-8".to_string();
    };
    let bytes = args[at].as_encoded_bytes();
    let (flag, value) = match bytes.iter().position(|&b| b == b'=') {
        Some(eq) if bytes.starts_with(b"--") => (
            String::from_utf8_lossy(&bytes[..eq]).into_owned(),
            String::from_utf8_lossy(&bytes[eq + 1..]),
        ),
        _ => {
            let flag = match at.checked_sub(1).and_then(|p| args[p].to_str()) {
                Some(prev) if prev.starts_with('-') && at > 1 => prev.to_string(),
                _ => "an argument".to_string(),
            };
            (flag, String::from_utf8_lossy(bytes))
        }
    };
    format!(
        "{flag}: `{value}` is not valid UTF-8 (shown with U+FFFD for the bad bytes); this flag \
         takes text (paths and --prompt take any bytes)"
    )
}

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Whether an error, or one of its causes, is stdout's reader having gone away
/// (`loglinear generate | head`).
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source()).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Every path `command` reads and writes, whatever the flag: checked by
/// [`CommandPaths::check`] before any work.
fn declared_paths(command: &Command) -> Res<CommandPaths> {
    Ok(match command {
        Command::Convert(args) => args.paths(),
        Command::Quantize(args) => args.paths(),
        Command::Inspect(args) => args.paths(),
        Command::Eval(args) => args.paths(),
        Command::Generate(args) => args.paths()?,
        Command::Plan(args) => args.paths(),
        Command::Serial(args) => args.paths(),
        Command::Bench(args) => args.paths()?,
        Command::Train(args) => args.paths(),
        Command::LossPlot(args) => args.paths(),
        Command::Mqar(args) => args.paths(),
    })
}

fn run(cli: Cli) -> Res {
    declared_paths(&cli.command)?.check()?;
    match cli.command {
        Command::Convert(args) => cmd::convert::convert(args),
        Command::Quantize(args) => cmd::convert::quantize(args),
        Command::Inspect(args) => cmd::inspect::run(&args),
        Command::Serial(args) => cmd::serial::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Train(args) => Ok(loglinear_train::run::train(&args)?),
        Command::LossPlot(args) => cmd::loss_plot::run(&args),
        Command::Mqar(args) => Ok(loglinear_train::mqar::run(&args)?),
        Command::Plan(args) => cmd::plan::run(&args),
        Command::Eval(args) => eval_cli::run(&args),
        Command::Generate(args) => cmd::generate::run(args),
    }
}

fn progress_bar(len: usize, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len as u64);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{bar:40}}] {{pos}}/{{len}} {{msg}} ({{elapsed}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    pb
}

fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    Ok(loglinear_converter::output_file::write_atomic(path, bytes)?)
}

#[cfg(test)]
mod declared_paths_tests;

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;
    use clap::Parser;

    /// Every subcommand's visible arguments, by long name (positionals by id).
    fn subcommands() -> Vec<(String, Vec<clap::Arg>)> {
        Cli::command()
            .get_subcommands()
            .map(|c| {
                let args = c
                    .get_arguments()
                    .filter(|a| !a.is_hide_set())
                    .cloned()
                    .collect();
                (c.get_name().to_string(), args)
            })
            .collect()
    }

    #[test]
    fn every_flag_has_a_help_line() {
        let mut missing = Vec::new();
        for (cmd, args) in subcommands() {
            for a in args {
                let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("loglinear {cmd} {}", a.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "no help: {missing:?}");
    }

    #[test]
    fn one_spelling_per_idea_across_subcommands() {
        // Old spellings stay as hidden aliases; no subcommand shows them.
        let retired = [
            "ctx",
            "eval-ctx",
            "seq-len",
            "out",
            "file",
            "input",
            "checkpoint",
        ];
        for (cmd, args) in subcommands() {
            for a in &args {
                let long = a.get_long().unwrap_or_default();
                assert!(
                    !retired.contains(&long),
                    "loglinear {cmd} shows --{long}: use the common spelling"
                );
                // The shared flags carry the shared short form wherever they appear.
                let want_short = match long {
                    "model" => Some('m'),
                    "output" => Some('o'),
                    _ => None,
                };
                if want_short.is_some() {
                    assert_eq!(a.get_short(), want_short, "loglinear {cmd} --{long}");
                }
            }
        }
        let has = |cmd: &str, long: &str| {
            subcommands()
                .iter()
                .any(|(c, args)| c == cmd && args.iter().any(|a| a.get_long() == Some(long)))
        };
        for cmd in [
            "convert", "quantize", "inspect", "eval", "generate", "plan", "bench", "train",
        ] {
            assert!(has(cmd, "model"), "loglinear {cmd} takes --model");
        }
        for cmd in ["inspect", "plan", "eval", "bench"] {
            assert!(has(cmd, "json"), "loglinear {cmd} takes --json");
        }
        for cmd in ["eval", "generate", "bench"] {
            assert!(has(cmd, "threads"), "loglinear {cmd} takes --threads");
        }
        for cmd in ["eval", "plan", "train"] {
            assert!(has(cmd, "context"), "loglinear {cmd} takes --context");
        }
    }

    #[test]
    fn old_spellings_still_parse() {
        for line in [
            "loglinear eval m.gguf --text t --ctx 64",
            "loglinear train --init m --data d --out o --seq-len 64",
            "loglinear convert ckpt --eval-ctx 64 -o x.gguf",
            "loglinear mqar --out r.json --seq-len 64",
        ] {
            let argv: Vec<&str> = line.split(' ').collect();
            assert!(Cli::try_parse_from(&argv).is_ok(), "{line}");
        }
    }
}
