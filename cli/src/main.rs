//! `loglinear`: the host command line.

/// `println!` that returns the write error instead of panicking, so that `loglinear … | head`
/// ends quietly when the reader goes away.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
}

mod cmd;
mod plot;
mod prompt;
mod snapshot_file;

use cmd::{bench, eval as eval_cli};

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use loglinear_runtime::quant::Activations;
use loglinear_runtime::sampler::SamplerConfig;
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

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StateDtype {
    F32,
    F16,
}

impl StateDtype {
    /// The name `--state` takes.
    fn name(self) -> &'static str {
        match self {
            StateDtype::F32 => "f32",
            StateDtype::F16 => "f16",
        }
    }
}

/// `--activations`: how matvecs with quantized weights treat their input.
#[derive(Clone, Copy, ValueEnum)]
enum ActivationsArg {
    /// f32 maths (the reference).
    F32,
    /// Quantize inputs to Q8 blocks and use the integer kernels (faster).
    Q8,
}

impl ActivationsArg {
    fn mode(self) -> Activations {
        match self {
            ActivationsArg::F32 => Activations::F32,
            ActivationsArg::Q8 => Activations::Q8,
        }
    }
}

/// Sampling settings shared by `generate` and `serial`.
#[derive(clap::Args, Clone, Copy, Debug)]
struct SamplingArgs {
    /// Softmax temperature, a number ≥ 0; 0 picks the most likely token (greedy).
    #[arg(long, default_value_t = 0.8, value_parser = parse_temperature)]
    temperature: f32,
    /// Sample only among the K most likely tokens, K ≥ 1 (default: no cut).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    top_k: Option<u32>,
    /// Sample only among the most likely tokens whose probabilities add up to P, in (0, 1];
    /// 1 keeps every token.
    #[arg(long, value_name = "P", default_value_t = 1.0, value_parser = parse_top_p)]
    top_p: f32,
    /// Seed of the sampler's random numbers.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            // The sampler's and the serial protocol's "no cut".
            top_k: self.top_k.map_or(0, |k| k as usize),
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

/// `--temperature`: a finite number ≥ 0.
fn parse_temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(format!(
            "{s} is not a temperature: give a number ≥ 0 (0 = greedy)"
        )),
    }
}

/// `--top-p`: a number in (0, 1].
fn parse_top_p(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        _ => Err(format!(
            "{s} is not a top-p: give a number above 0 and at most 1"
        )),
    }
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
    #[error("the prompt must not be empty")]
    EmptyPrompt,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Whether an error is stdout's reader having gone away (`loglinear generate | head`).
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

fn run(cli: Cli) -> Res {
    match cli.command {
        Command::Convert(args) => cmd::convert::convert(args),
        Command::Quantize(args) => cmd::convert::quantize(args),
        Command::Inspect(args) => cmd::inspect::run(&args),
        Command::Serial(args) => cmd::serial::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Train(args) => loglinear_train::run::train(&args),
        Command::Mqar(args) => loglinear_train::mqar::run(&args),
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
