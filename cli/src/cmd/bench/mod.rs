//! `loglinear bench`: throughput tables in llama-bench's style.
//!
//! One row per (model, backend / kernel path, activations, test), with llama-bench's test
//! names:
//!
//! * `pp512`: prompt processing, tokens/s over a 512-token prompt from a fresh state: on the
//!   CPU by stepping the decoder token by token (per activation mode and kernel path), by the
//!   chunkwise CPU prefill of `loglinear-cpu-prefill` (spec §7, multi-threaded), and with
//!   `--gpu` by the wgpu prefill of `loglinear-host-gpu`;
//! * `tg128`: decoding 128 tokens from a fresh state;
//! * `tg128@16K`: decoding 128 tokens after a 16384-token context.
//!
//! Like llama-bench, the tests feed pseudo-random tokens and never sample: the numbers are the
//! model's cost, not the sampler's or the text's. A context is reached once per model and
//! state type by the fastest prefill at hand (GPU, else chunkwise CPU; `--reach step` steps it
//! with a progress bar), saved, and restored before every timed decode, so the reps and the
//! kernel paths all start from the same state.
//!
//! `--curve` measures decode speed against context instead (the claim to show: per-token cost
//! grows no faster than log T, since a token touches only the live Fenwick levels), and
//! `--qemu` / `--qemu-table` fold in the firmware's instruction counts under QEMU from
//! `cargo xtask count`.

mod measure;
mod output;
mod qemu;

use measure::*;
use output::*;
use qemu::*;

use crate::cmd::generate::PrefillArg;
use crate::Res;
use clap::ValueEnum;
use loglinear_converter::command_paths::{CommandPaths, Reads};
use loglinear_converter::model_source::ModelSource;
use loglinear_cpu_prefill::{PrefillError, PrefillOptions};
use loglinear_runtime::quant::{self, Activations, KernelPath};
use loglinear_runtime::session::{Session, SessionConfig, SessionError, StepError};
use loglinear_runtime::{Arch, DType, Model, StateElem};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `loglinear bench`'s arguments.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// GGUF model file or checkpoint folder; repeat for several models [default: the shipped
    /// models/ll-gdn-mcu-q8_0.gguf of the repository that holds this binary].
    #[arg(short = 'm', long = "model")]
    models: Vec<PathBuf>,
    /// Prompt tokens of the `pp` test (0: no `pp` test).
    #[arg(short = 'p', long, value_parser = parse_count, default_value = "512")]
    n_prompt: usize,
    /// Generated tokens of the `tg` tests (0: no `tg` test).
    #[arg(short = 'n', long, value_parser = parse_count, default_value = "128")]
    n_gen: usize,
    /// Contexts before the `tg` test, comma-separated, `K` = 1024: `tg128@16K` decodes 128
    /// tokens after 16384.
    #[arg(long, value_delimiter = ',', value_parser = parse_count, default_value = "0,16384")]
    depth: Vec<usize>,
    /// Timed repetitions of each test (after one untimed warm-up); rows show the mean and
    /// ± the standard deviation.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// State storage type.
    #[arg(long, value_enum, default_value = "f32")]
    state: StateArg,
    /// Inputs of quantized matvecs: f32, Q8 through the integer kernels, or both.
    #[arg(long, value_enum, default_value = "f32")]
    activations: ActivationsArg,
    /// Integer-kernel path for Q8 activations: `best`, `all` (each path this CPU runs), or a
    /// path name (`portable`, `avx2`, …). f32 activations use no kernel path (shown as `-`).
    #[arg(long, value_parser = parse_kernel, default_value = "best")]
    kernel: KernelChoice,
    /// Also measure `pp` with the GPU prefill (wgpu), and reach contexts with it.
    #[arg(long)]
    gpu: bool,
    /// Prefills the `pp` test measures, comma-separated: `step` (token by token, per kernel
    /// path), `chunkwise`, `gpu` (needs --gpu). Leave out `step` at long prompts, where it
    /// takes minutes [default: step,chunkwise, and gpu with --gpu].
    #[arg(long, value_enum, value_delimiter = ',')]
    prefill: Vec<PrefillArg>,
    /// Worker threads of the chunkwise CPU prefill, 1 to 4096 (default: every core).
    #[arg(long, value_parser = crate::args::parse_threads)]
    threads: Option<usize>,
    /// How contexts (`--depth`, `--curve`) are reached: `auto` = GPU with `--gpu`, else the
    /// chunkwise CPU prefill.
    #[arg(long, value_enum, default_value = "auto")]
    reach: Reach,
    /// Instead of the pp/tg tests: decode speed after each of these contexts (comma-separated,
    /// `K` = 1024), e.g. `512,4096,16384,65536`, with the live levels and µs/token.
    #[arg(long, value_delimiter = ',', value_parser = parse_count)]
    curve: Option<Vec<usize>>,
    /// Tokens decoded per `--curve` point.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    curve_tokens: u32,
    /// Also run `cargo xtask count` (firmware under QEMU; minutes) and print its
    /// instructions per token and per weight-MAC per board. Run from the repository root.
    #[arg(long)]
    qemu: bool,
    /// Fold in a saved `cargo xtask count` output instead of running it.
    #[arg(long, value_name = "FILE")]
    qemu_table: Option<PathBuf>,
    /// Output format: md, csv or json (each row is printed as it is measured, except
    /// json's one object at the end).
    #[arg(short = 'o', long, value_enum, default_value = "md")]
    output: OutputFormat,
    /// The same as `--output json`.
    #[arg(long, conflicts_with = "output")]
    json: bool,
}

impl BenchArgs {
    /// What `bench` reads (the shipped model when no `--model` is given; it writes only to
    /// stdout).
    pub(crate) fn paths(&self) -> Res<CommandPaths> {
        let mut paths = CommandPaths::new();
        if self.models.is_empty() {
            let model = crate::args::default_model()?;
            paths = paths.reads("--model", Some(&model), Reads::Model);
        }
        for model in &self.models {
            paths = paths.reads("--model", Some(model), Reads::Model);
        }
        Ok(paths.reads("--qemu-table", self.qemu_table.as_deref(), Reads::File))
    }

    /// Whether the `pp` test measures `prefill` (`--prefill`, or its default).
    fn measures(&self, prefill: PrefillArg) -> bool {
        match (self.prefill.is_empty(), prefill) {
            (true, PrefillArg::Gpu) => self.gpu,
            (true, _) => true,
            (false, _) => self.prefill.contains(&prefill),
        }
    }
}

/// `--state`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum StateArg {
    F32,
    F16,
}

/// `--activations`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ActivationsArg {
    F32,
    Q8,
    Both,
}

/// `--reach`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Reach {
    /// GPU with `--gpu`, else chunkwise CPU.
    Auto,
    /// Step the decoder token by token (slow: the reference).
    Step,
    /// The chunkwise CPU prefill.
    Chunkwise,
    /// The GPU prefill (needs `--gpu`).
    Gpu,
}

/// `--output`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    /// Markdown tables, as llama-bench prints.
    #[default]
    Md,
    /// One CSV section per table, each with its header line; numbers as plain numbers
    /// (`avg_ts` and `stddev_ts` apart).
    Csv,
    /// One JSON object: `{"bench": [...], "curve": [...], "qemu": [...]}`.
    Json,
}

/// `--kernel`.
#[derive(Clone, Copy, Debug)]
enum KernelChoice {
    Best,
    All,
    One(KernelPath),
}

/// `--kernel`'s parser: `best`, `all` or a path name.
fn parse_kernel(s: &str) -> Result<KernelChoice, String> {
    match s {
        "best" => Ok(KernelChoice::Best),
        "all" => Ok(KernelChoice::All),
        _ => KernelPath::ALL
            .iter()
            .find(|p| p.name() == s)
            .map(|&p| KernelChoice::One(p))
            .ok_or_else(|| {
                let names: Vec<&str> = KernelPath::ALL.iter().map(|p| p.name()).collect();
                format!("expected best, all or one of {}", names.join(", "))
            }),
    }
}

/// The largest token count a test takes: the token lists and the chunkwise prefill's
/// activations are held in memory (a few hundred bytes a token), so a typo such as `-p 1e12`
/// must be refused rather than run the machine out of memory.
const MAX_TOKENS: usize = 1 << 20;

/// A token count: digits, optionally followed by `K`/`k` (× 1024), at most [`MAX_TOKENS`].
fn parse_count(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, scale) = match s.strip_suffix(['K', 'k']) {
        Some(d) => (d, 1024),
        None => (s, 1),
    };
    let n = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("`{s}` is not a token count (digits, optionally followed by K)"))?;
    if n > MAX_TOKENS {
        return Err(format!(
            "{n} tokens is more than this benchmark takes ({MAX_TOKENS})"
        ));
    }
    Ok(n)
}

/// Why the benchmark could not run. Bad input ends here, never in a panic.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Load(#[from] loglinear_converter::model_source::LoadError),
    #[error("kernel path {path} does not run on this CPU (it runs: {available})")]
    KernelUnavailable {
        path: &'static str,
        available: String,
    },
    #[error("nothing to measure: -p and -n are both 0 and neither --curve, --qemu nor --qemu-table was given")]
    NothingToDo,
    #[error("--reach gpu needs --gpu")]
    ReachGpuWithoutGpu,
    #[error("--prefill gpu needs --gpu")]
    PrefillGpuWithoutGpu,
    #[error("GPU: {0}")]
    Gpu(String),
    #[error("session: {0}")]
    Session(#[from] SessionError),
    #[error("step: {0}")]
    Step(#[from] StepError),
    #[error("chunkwise CPU prefill: {0}")]
    Prefill(#[from] PrefillError),
    #[error("--qemu: {script} not found; run loglinear bench from the repository root")]
    QemuScriptMissing { script: PathBuf },
    #[error("--qemu: cannot run {script}: {source}")]
    QemuSpawn {
        script: PathBuf,
        source: std::io::Error,
    },
    #[error("--qemu: {script} failed ({status}); its messages are above")]
    QemuFailed {
        script: PathBuf,
        status: std::process::ExitStatus,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: no count-instructions table (a `| board | … | insns / token | insns / weight-MAC |` header and rows)")]
    NoQemuTable { what: String },
    #[error("{0}")]
    NoDefaultModel(String),
    #[error("writing the results: {0}")]
    Output(#[source] std::io::Error),
}

/// Runs `loglinear bench`. Output write errors come back as plain `io::Error`s, so that the
/// caller can tell a closed pipe from a failure.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut report = measure(args)?;
    let mut printer = std::mem::take(&mut report.printer);
    for r in &report.qemu {
        printer.qemu(r)?;
    }
    printer.finish(&report)?;
    Ok(())
}

/// Everything measured.
#[derive(Default)]
struct Report {
    /// Prints each row as it is added.
    printer: Printer,
    models: Vec<ModelInfo>,
    bench: Vec<BenchRow>,
    curve: Vec<CurveRow>,
    qemu: Vec<QemuRow>,
    /// Lines for under the tables: how things were measured.
    notes: Vec<String>,
}

impl Report {
    /// Adds a pp/tg row and prints it.
    fn add_bench(&mut self, row: BenchRow) -> Result<(), BenchError> {
        let model = &self.models[row.model];
        self.printer
            .bench(model, &row)
            .map_err(BenchError::Output)?;
        self.bench.push(row);
        Ok(())
    }

    /// Adds a curve point and prints it.
    fn add_curve(&mut self, row: CurveRow) -> Result<(), BenchError> {
        let model = &self.models[row.model];
        self.printer
            .curve(model, &row)
            .map_err(BenchError::Output)?;
        self.curve.push(row);
        Ok(())
    }
}

/// A model's identity for the tables.
struct ModelInfo {
    path: PathBuf,
    /// llama-bench's model column: architecture, parameters, main weight type.
    label: String,
    /// Bytes of tensor data.
    size_bytes: usize,
    /// Weights (every tensor's elements).
    params: usize,
}

/// One pp/tg measurement.
struct BenchRow {
    model: usize,
    backend: String,
    kernel: String,
    act: &'static str,
    state: &'static str,
    test: String,
    /// Tokens/s of each timed rep.
    samples: Vec<f64>,
}

/// One point of the decode-vs-context curve.
struct CurveRow {
    model: usize,
    kernel: String,
    act: &'static str,
    state: &'static str,
    context: usize,
    live_levels: usize,
    live_state_bytes: usize,
    tokens: usize,
    samples: Vec<f64>,
}

/// One board of a `cargo xtask count` table.
struct QemuRow {
    model: String,
    board: String,
    core: String,
    /// Activations of the firmware build (`-` where the table does not say).
    act: String,
    /// Integer-kernel path the firmware ran (`-` where the table does not say).
    kernel: String,
    state: String,
    test: String,
    insn_per_token: u64,
    insn_per_mac: f64,
}

/// One CPU decoding configuration.
#[derive(Clone, Copy)]
struct CpuConfig {
    act: Activations,
    /// The forced integer-kernel path; `None` for f32 activations, which use none.
    kernel: Option<KernelPath>,
}

impl CpuConfig {
    fn kernel_name(&self) -> String {
        self.kernel.map_or("-".into(), |p| p.name().into())
    }
}

/// The CPU configurations `args` asks for, f32 first.
fn cpu_configs(args: &BenchArgs) -> Result<Vec<CpuConfig>, BenchError> {
    let paths: Vec<KernelPath> = match args.kernel {
        // Not `KernelPath::best()`, which would follow a path forced earlier.
        KernelChoice::Best => vec![KernelPath::available()
            .last()
            .unwrap_or(KernelPath::Portable)],
        KernelChoice::All => KernelPath::available().collect(),
        KernelChoice::One(p) if p.is_available() => vec![p],
        KernelChoice::One(p) => {
            let available: Vec<&str> = KernelPath::available().map(|p| p.name()).collect();
            return Err(BenchError::KernelUnavailable {
                path: p.name(),
                available: available.join(", "),
            });
        }
    };
    let mut configs = Vec::new();
    if matches!(args.activations, ActivationsArg::F32 | ActivationsArg::Both) {
        configs.push(CpuConfig {
            act: Activations::F32,
            kernel: None,
        });
    }
    if matches!(args.activations, ActivationsArg::Q8 | ActivationsArg::Both) {
        configs.extend(paths.into_iter().map(|p| CpuConfig {
            act: Activations::Q8,
            kernel: Some(p),
        }));
    }
    Ok(configs)
}

/// Runs what `args` asks for. Everything that can be checked cheaply (arguments, kernel
/// paths, the QEMU table or script) is checked before the first long measurement.
fn measure(args: &BenchArgs) -> Result<Report, BenchError> {
    let standard = args.curve.is_none() && (args.n_prompt > 0 || args.n_gen > 0);
    let any_model_work = standard || args.curve.is_some();
    if !any_model_work && !args.qemu && args.qemu_table.is_none() {
        return Err(BenchError::NothingToDo);
    }
    if args.reach == Reach::Gpu && !args.gpu {
        return Err(BenchError::ReachGpuWithoutGpu);
    }
    if args.prefill.contains(&PrefillArg::Gpu) && !args.gpu {
        return Err(BenchError::PrefillGpuWithoutGpu);
    }
    if args.qemu && !Path::new(COUNT_INSTRUCTIONS).is_file() {
        return Err(BenchError::QemuScriptMissing {
            script: COUNT_INSTRUCTIONS.into(),
        });
    }
    let configs = cpu_configs(args)?;
    let mut report = Report {
        printer: Printer::new(if args.json {
            OutputFormat::Json
        } else {
            args.output
        }),
        ..Report::default()
    };
    if let Some(path) = &args.qemu_table {
        let text = std::fs::read_to_string(path).map_err(|source| BenchError::Read {
            path: path.clone(),
            source,
        })?;
        report.qemu = parse_qemu_table(&text, &path.display().to_string())?;
    }
    if any_model_work {
        let device = if args.gpu {
            let d = gpu_backend::Device::open()?;
            report.notes.push(format!("GPU: {}", d.describe()));
            Some(d)
        } else {
            None
        };
        // Every model is opened before the first measurement, so a bad path fails at once.
        let models = match args.models.is_empty() {
            true => vec![crate::args::default_model().map_err(BenchError::NoDefaultModel)?],
            false => args.models.clone(),
        };
        let sources = models
            .iter()
            .map(|path| ModelSource::open(path).map(|s| (path, s)))
            .collect::<Result<Vec<_>, _>>()?;
        for (path, source) in &sources {
            let index = report.models.len();
            let outcome = source.with_model(path, |m| -> Result<(), BenchError> {
                report.models.push(model_info(path, m));
                let ctx = Ctx {
                    args,
                    model: m,
                    model_index: index,
                    configs: &configs,
                    device: device.as_ref(),
                };
                match args.state {
                    StateArg::F32 => bench_model::<f32>(&ctx, &mut report),
                    StateArg::F16 => bench_model::<half::f16>(&ctx, &mut report),
                }
            });
            quant::set_forced_path(None);
            outcome??;
        }
        report.notes.push(format!(
            "CPU: decoding and `CPU` pp rows step one token at a time on one thread; \
             `CPU chunkwise` is the spec §7 prefill on {} threads; tokens are pseudo-random, \
             nothing is sampled; t/s = mean ± standard deviation of {} reps after a warm-up",
            loglinear_cpu_prefill::threads_for(&prefill_options(args)),
            args.reps
        ));
    }
    if args.qemu {
        report.qemu.extend(run_count_instructions()?);
    }
    if !report.qemu.is_empty() {
        report.notes.push(
            "QEMU: instructions counted exactly with a TCG plugin (`cargo xtask count`): \
             instructions, not cycles; per weight-MAC = per token / the model's matrix MACs"
                .into(),
        );
    }
    Ok(report)
}

/// What a model's benchmark needs.
struct Ctx<'a, 'm> {
    args: &'a BenchArgs,
    model: &'a Model<'m>,
    model_index: usize,
    configs: &'a [CpuConfig],
    device: Option<&'a gpu_backend::Device>,
}

fn prefill_options(args: &BenchArgs) -> PrefillOptions {
    PrefillOptions {
        levels: None,
        threads: args.threads,
        all_logits: false,
    }
}

/// Size, parameters and llama-bench's model label ("arch 1.4M Q8_0").
fn model_info(path: &Path, m: &Model<'_>) -> ModelInfo {
    let (mut size_bytes, mut params) = (0, 0);
    // Elements per type, to name the type that holds most weights.
    let mut by_type: Vec<(DType, usize)> = Vec::new();
    for name in m.config().tensor_names() {
        if let Some(view) = m.source().tensor(name) {
            let n = view.len();
            let dtype = view.dtype();
            size_bytes += dtype.bytes_for(n).unwrap_or(0);
            params += n;
            match by_type.iter_mut().find(|(t, _)| *t == dtype) {
                Some((_, count)) => *count += n,
                None => by_type.push((dtype, n)),
            }
        }
    }
    let main_type = by_type
        .iter()
        .max_by_key(|(_, n)| *n)
        .map_or("?".to_string(), |(t, _)| t.name().to_uppercase());
    // Short architecture names, as the shipped models' file names spell them.
    let arch = match m.config().arch {
        Arch::LogLinearGatedDeltaNet => "ll-gdn",
        Arch::GatedDeltaNet => "gdn",
        Arch::LogLinearMamba2 => "ll-mamba2",
        Arch::Mamba2 => "mamba2",
    };
    ModelInfo {
        path: path.to_path_buf(),
        label: format!("{arch} {} {main_type}", short_count(params)),
        size_bytes,
        params,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_with_k_suffix_and_refuse_junk() {
        assert_eq!(parse_count("16K"), Ok(16384));
        assert_eq!(parse_count("512"), Ok(512));
        assert!(parse_count("x").is_err());
        assert!(parse_count("-1").is_err());
        assert_eq!(context_name(16384), "16K");
        assert_eq!(context_name(1000), "1000");
    }

    #[test]
    fn mean_and_sample_stddev() {
        assert_eq!(mean_stddev(&[3.0, 1.0, 2.0]), (2.0, 1.0));
        assert_eq!(mean_stddev(&[1.0, 3.0]), (2.0, 2f64.sqrt()));
        assert_eq!(mean_stddev(&[5.0]), (5.0, 0.0));
    }

    #[test]
    fn tokens_stay_below_the_vocabulary() {
        let t = bench_tokens(1000, 7, 1);
        assert!(t.iter().all(|&x| x < 7));
        assert_eq!(t, bench_tokens(1000, 7, 1));
    }
}
