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

use clap::ValueEnum;
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
    /// GGUF model file or checkpoint folder; repeat for several models.
    #[arg(long = "model", default_value = "models/ll-gdn-mcu-q8_0.gguf")]
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
    /// Timed repetitions of each test (after one untimed warm-up); rows show the median and
    /// ± half the range.
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
    /// Worker threads of the chunkwise CPU prefill (default: every core).
    #[arg(long)]
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
    /// Output format.
    #[arg(long, value_enum, default_value = "md")]
    output: OutputFormat,
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
#[derive(Clone, Copy, Debug, ValueEnum)]
enum OutputFormat {
    /// Markdown tables, as llama-bench prints.
    Md,
    /// One CSV section per table, each with its header line.
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
}

/// Runs `loglinear bench`. Output write errors come back as plain `io::Error`s, so that the
/// caller can tell a closed pipe from a failure.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let report = measure(args)?;
    let mut out = std::io::stdout().lock();
    match args.output {
        OutputFormat::Md => write_markdown(&mut out, &report)?,
        OutputFormat::Csv => write_csv(&mut out, &report)?,
        OutputFormat::Json => writeln!(out, "{:#}", report_json(&report))?,
    }
    out.flush()?;
    Ok(())
}

/// Everything measured.
#[derive(Default)]
struct Report {
    models: Vec<ModelInfo>,
    bench: Vec<BenchRow>,
    curve: Vec<CurveRow>,
    qemu: Vec<QemuRow>,
    /// Lines for under the tables: how things were measured.
    notes: Vec<String>,
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
    if args.qemu && !Path::new(COUNT_INSTRUCTIONS).is_file() {
        return Err(BenchError::QemuScriptMissing {
            script: COUNT_INSTRUCTIONS.into(),
        });
    }
    let configs = cpu_configs(args)?;
    let mut report = Report::default();
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
        for path in &args.models {
            let source = ModelSource::open(path)?;
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
             nothing is sampled; t/s = median ± half the range of {} reps after a warm-up",
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

/// `n` as llama-bench writes parameter counts: 1.4M, 356K, 7B.
fn short_count(n: usize) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.1}B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e3 {
        format!("{:.0}K", n / 1e3)
    } else {
        format!("{n}")
    }
}

/// `t` as a test suffix: 16K for 16384, else the number.
fn context_name(t: usize) -> String {
    if t >= 1024 && t % 1024 == 0 {
        format!("{}K", t / 1024)
    } else {
        t.to_string()
    }
}

/// `n` deterministic pseudo-random tokens below `vocab` (a 32-bit LCG's high bits): the same
/// for every run, backend and kernel path.
fn bench_tokens(n: usize, vocab: usize, seed: u32) -> Vec<u32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (((s >> 8) as u64 * vocab as u64) >> 24) as u32
        })
        .collect()
}

/// A decoder state saved after a context, restored before every timed decode.
struct SavedState<E> {
    t: u64,
    states: Vec<E>,
    conv: Vec<f32>,
    /// How the context was reached, for the notes.
    how: String,
}

/// A session of `ctx.model` with `act`, in its own arena.
struct OwnedSession<E> {
    arena: Vec<u8>,
    cfg: SessionConfig,
    _elem: std::marker::PhantomData<E>,
}

impl<E: StateElem> OwnedSession<E> {
    fn new(model: &Model<'_>, act: Activations) -> Result<Self, BenchError> {
        let cfg = SessionConfig {
            levels: None,
            activations: Some(act),
        };
        Ok(Self {
            arena: vec![0u8; Session::<E>::arena_bytes(model, &cfg)?],
            cfg,
            _elem: std::marker::PhantomData,
        })
    }

    fn session<'s>(&'s mut self, model: &Model<'s>) -> Result<Session<'s, E>, BenchError> {
        Ok(Session::<E>::new(model, &mut self.arena, self.cfg)?)
    }
}

/// Feeds `tokens`; returns the seconds it took.
fn time_steps<E: StateElem>(
    session: &mut Session<'_, E>,
    tokens: &[u32],
) -> Result<f64, BenchError> {
    let start = Instant::now();
    for &token in tokens {
        session.step(token)?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// Runs `one` once untimed, then `reps` times; returns tokens/s of each timed run.
fn timed_reps(
    reps: u32,
    tokens: usize,
    mut one: impl FnMut() -> Result<f64, BenchError>,
) -> Result<Vec<f64>, BenchError> {
    one()?;
    (0..reps)
        .map(|_| one().map(|secs| tokens as f64 / secs.max(1e-12)))
        .collect()
}

fn bench_model<E: StateElem>(ctx: &Ctx<'_, '_>, report: &mut Report) -> Result<(), BenchError> {
    let gpu_model = match ctx.device {
        Some(d) => Some(d.model(ctx.model)?),
        None => None,
    };
    let gpu_model = gpu_model.as_ref();
    match &ctx.args.curve {
        Some(contexts) => curve::<E>(ctx, gpu_model, contexts, report),
        None => standard_tests::<E>(ctx, gpu_model, report),
    }
}

/// pp and tg rows for one model.
fn standard_tests<E: StateElem>(
    ctx: &Ctx<'_, '_>,
    gpu_model: Option<&gpu_backend::DeviceModel<'_>>,
    report: &mut Report,
) -> Result<(), BenchError> {
    let args = ctx.args;
    let model = ctx.model;
    let vocab = model.config().vocab_size;
    let prompt = bench_tokens(args.n_prompt, vocab, 1);
    let gen = bench_tokens(args.n_gen, vocab, 2);
    let row = |backend: &str, kernel: String, act: Activations, test: String, samples| BenchRow {
        model: ctx.model_index,
        backend: backend.into(),
        kernel,
        act: act.name(),
        state: E::NAME,
        test,
        samples,
    };
    // Contexts for the tg tests, reached once and restored for every config and rep.
    let mut saved: Vec<(usize, SavedState<E>)> = Vec::new();
    if args.n_gen > 0 {
        for &depth in &args.depth {
            if !saved.iter().any(|(d, _)| *d == depth) {
                saved.push((depth, reach_context::<E>(ctx, gpu_model, depth)?));
            }
        }
    }
    for config in ctx.configs {
        quant::set_forced_path(config.kernel);
        let mut owned = OwnedSession::<E>::new(model, config.act)?;
        let mut session = owned.session(model)?;
        if args.n_prompt > 0 {
            let samples = timed_reps(args.reps, prompt.len(), || {
                session.reset();
                time_steps(&mut session, &prompt)
            })?;
            report.bench.push(row(
                "CPU",
                config.kernel_name(),
                config.act,
                format!("pp{}", args.n_prompt),
                samples,
            ));
        }
        for &depth in &args.depth {
            let Some((_, state)) = saved.iter().find(|(d, _)| *d == depth) else {
                continue;
            };
            let samples = timed_reps(args.reps, gen.len(), || {
                session.load_state(state.t, &state.states, &state.conv)?;
                time_steps(&mut session, &gen)
            })?;
            let test = match depth {
                0 => format!("tg{}", args.n_gen),
                d => format!("tg{}@{}", args.n_gen, context_name(d)),
            };
            report
                .bench
                .push(row("CPU", config.kernel_name(), config.act, test, samples));
        }
    }
    quant::set_forced_path(None);
    if args.n_prompt > 0 {
        // The prefills compute in f32 and ignore the activation mode and kernel path.
        let mut owned = OwnedSession::<E>::new(model, Activations::F32)?;
        let mut session = owned.session(model)?;
        let opts = prefill_options(args);
        let samples = timed_reps(args.reps, prompt.len(), || {
            let start = Instant::now();
            loglinear_cpu_prefill::prefill_into(model, &prompt, &mut session, &opts)?;
            Ok(start.elapsed().as_secs_f64())
        })?;
        report.bench.push(row(
            "CPU chunkwise",
            "-".into(),
            Activations::F32,
            format!("pp{}", args.n_prompt),
            samples,
        ));
        if let Some(g) = gpu_model {
            let samples = timed_reps(args.reps, prompt.len(), || {
                let start = Instant::now();
                g.prefill_into(&prompt, &mut session)?;
                Ok(start.elapsed().as_secs_f64())
            })?;
            report.bench.push(row(
                "GPU",
                "-".into(),
                Activations::F32,
                format!("pp{}", args.n_prompt),
                samples,
            ));
        }
    }
    for (depth, state) in &saved {
        if *depth > 0 {
            report.notes.push(format!(
                "{}: context {depth} reached by {}",
                report.models[ctx.model_index].label, state.how
            ));
        }
    }
    Ok(())
}

/// Decode speed after each context for one model.
fn curve<E: StateElem>(
    ctx: &Ctx<'_, '_>,
    gpu_model: Option<&gpu_backend::DeviceModel<'_>>,
    contexts: &[usize],
    report: &mut Report,
) -> Result<(), BenchError> {
    let model = ctx.model;
    let tokens = ctx.args.curve_tokens as usize;
    let gen = bench_tokens(tokens, model.config().vocab_size, 2);
    for &context in contexts {
        let state = reach_context::<E>(ctx, gpu_model, context)?;
        for config in ctx.configs {
            quant::set_forced_path(config.kernel);
            let mut owned = OwnedSession::<E>::new(model, config.act)?;
            let mut session = owned.session(model)?;
            session.load_state(state.t, &state.states, &state.conv)?;
            let (live_levels, live_state_bytes) =
                (session.live_levels(), session.live_state_bytes());
            let samples = timed_reps(ctx.args.reps, tokens, || {
                session.load_state(state.t, &state.states, &state.conv)?;
                time_steps(&mut session, &gen)
            })?;
            report.curve.push(CurveRow {
                model: ctx.model_index,
                kernel: config.kernel_name(),
                act: config.act.name(),
                state: E::NAME,
                context,
                live_levels,
                live_state_bytes,
                tokens,
                samples,
            });
        }
        quant::set_forced_path(None);
        if context > 0 {
            report.notes.push(format!(
                "{}: context {context} reached by {}",
                report.models[ctx.model_index].label, state.how
            ));
        }
    }
    Ok(())
}

/// The decoder state after `depth` pseudo-random tokens, by the fastest prefill `--reach`
/// allows.
fn reach_context<E: StateElem>(
    ctx: &Ctx<'_, '_>,
    gpu_model: Option<&gpu_backend::DeviceModel<'_>>,
    depth: usize,
) -> Result<SavedState<E>, BenchError> {
    let model = ctx.model;
    let mut owned = OwnedSession::<E>::new(model, Activations::F32)?;
    let mut session = owned.session(model)?;
    let tokens = bench_tokens(depth, model.config().vocab_size, 3);
    let start = Instant::now();
    let how = match (ctx.args.reach, gpu_model) {
        _ if depth == 0 => "nothing (fresh state)",
        (Reach::Step, _) => {
            let pb = crate::progress_bar(depth, "reaching the context by stepping");
            for (i, &token) in tokens.iter().enumerate() {
                session.step(token)?;
                if i % 256 == 0 {
                    pb.set_position(i as u64);
                }
            }
            pb.finish_and_clear();
            "stepping"
        }
        (Reach::Auto | Reach::Gpu, Some(g)) => {
            eprintln!("reaching context {depth} with the GPU prefill…");
            g.prefill_into(&tokens, &mut session)?;
            "the GPU prefill"
        }
        (Reach::Gpu, None) => return Err(BenchError::ReachGpuWithoutGpu),
        (Reach::Auto | Reach::Chunkwise, _) => {
            eprintln!("reaching context {depth} with the chunkwise CPU prefill…");
            let opts = prefill_options(ctx.args);
            loglinear_cpu_prefill::prefill_into(model, &tokens, &mut session, &opts)?;
            "the chunkwise CPU prefill"
        }
    };
    let how = if depth == 0 {
        how.to_string()
    } else {
        format!("{how} in {:.1} s", start.elapsed().as_secs_f64())
    };
    Ok(SavedState {
        t: session.t(),
        states: session.states().to_vec(),
        conv: session.conv_states().to_vec(),
        how,
    })
}

/// The GPU behind `--gpu`: wgpu through `loglinear-host-gpu`, its errors as this command's.
mod gpu_backend {
    use super::BenchError;
    use loglinear_host_gpu::{Gpu, GpuModel};
    use loglinear_runtime::{Model, Session, StateElem};

    /// An open GPU.
    pub struct Device {
        gpu: Gpu,
    }

    /// A model's weights on the GPU.
    pub struct DeviceModel<'g> {
        model: GpuModel<'g>,
    }

    impl Device {
        pub fn open() -> Result<Self, BenchError> {
            Gpu::new()
                .map(|gpu| Self { gpu })
                .map_err(|e| BenchError::Gpu(e.to_string()))
        }

        pub fn describe(&self) -> String {
            self.gpu.describe()
        }

        pub fn model(&self, model: &Model<'_>) -> Result<DeviceModel<'_>, BenchError> {
            GpuModel::new(&self.gpu, model)
                .map(|model| DeviceModel { model })
                .map_err(|e| BenchError::Gpu(e.to_string()))
        }
    }

    impl DeviceModel<'_> {
        /// Prefills `tokens` into `session` (state handed over to the CPU decoder).
        pub fn prefill_into<E: StateElem>(
            &self,
            tokens: &[u32],
            session: &mut Session<'_, E>,
        ) -> Result<(), BenchError> {
            self.model
                .prefill_into(tokens, session)
                .map(|_| ())
                .map_err(|e| BenchError::Gpu(e.to_string()))
        }
    }
}

/// The task `--qemu` runs (`cargo xtask count`), found by its crate relative to the
/// repository root.
const COUNT_INSTRUCTIONS: &str = "xtask/Cargo.toml";

/// Runs `cargo xtask count` (its progress goes to our stderr) and parses its table.
fn run_count_instructions() -> Result<Vec<QemuRow>, BenchError> {
    let script = PathBuf::from(COUNT_INSTRUCTIONS);
    if !script.is_file() {
        return Err(BenchError::QemuScriptMissing { script });
    }
    eprintln!("running cargo xtask count (builds firmware, runs QEMU; minutes)…");
    let out = std::process::Command::new("cargo")
        .args(["xtask", "count"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|source| BenchError::QemuSpawn {
            script: script.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(BenchError::QemuFailed {
            script,
            status: out.status,
        });
    }
    parse_qemu_table(&String::from_utf8_lossy(&out.stdout), "cargo xtask count")
}

/// The cells of a markdown table line, trimmed; `None` for other lines.
fn table_cells(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(
        inner
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect(),
    )
}

/// An integer cell, thousands separators allowed.
fn parse_int(cell: &str) -> Option<u64> {
    cell.replace([',', '_', ' '], "").parse().ok()
}

/// Reads `cargo xtask count`'s markdown output (or a table with the same column names, as
/// in BENCHMARKS.md): columns are found by header name, so extra, missing or reordered ones
/// are fine. The model is the row's `model` cell, else the `Model FILE: …` line of older
/// outputs, else the script's default model.
fn parse_qemu_table(text: &str, what: &str) -> Result<Vec<QemuRow>, BenchError> {
    // "Model models/x.gguf: N weight MACs per token. …"
    let default_model = text
        .lines()
        .find_map(|l| l.strip_prefix("Model ")?.split(':').next())
        .unwrap_or("models/ll-gdn-mcu-q8_0.gguf")
        .to_string();
    let mut rows = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(header) = table_cells(line) else {
            continue;
        };
        let col = |pred: &dyn Fn(&str) -> bool| header.iter().position(|h| pred(h));
        let (Some(board), Some(per_token), Some(per_mac)) = (
            col(&|h| h == "board"),
            col(&|h| h == "insns / token"),
            col(&|h| h == "insns / weight-MAC"),
        ) else {
            continue;
        };
        let core = col(&|h| h == "core");
        let model = col(&|h| h == "model");
        let act = col(&|h| h == "activations");
        let kernel = col(&|h| h == "integer kernels");
        let state = col(&|h| h.starts_with("state"));
        let levels = col(&|h| h == "levels");
        // "insns, n=16": the long run's token count names the test.
        let test = header
            .iter()
            .filter_map(|h| h.strip_prefix("insns, n="))
            .find(|n| *n != "0")
            .map_or("tg".to_string(), |n| format!("tg{n}"));
        for line in lines.by_ref() {
            let Some(cells) = table_cells(line) else {
                break;
            };
            let is_separator = cells
                .iter()
                .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')));
            if is_separator {
                continue;
            }
            let cell = |i: Option<usize>| i.and_then(|i| cells.get(i)).cloned().unwrap_or_default();
            let or_dash = |c: String| if c.is_empty() { "-".to_string() } else { c };
            let (Some(insn_per_token), Some(insn_per_mac)) = (
                parse_int(&cell(Some(per_token))),
                cell(Some(per_mac)).replace(',', "").parse::<f64>().ok(),
            ) else {
                continue;
            };
            let mut state = cell(state);
            if levels.is_some() {
                state = format!("{state} × {}", cell(levels));
            }
            rows.push(QemuRow {
                model: model.map_or(default_model.clone(), |_| cell(model)),
                board: cell(Some(board)),
                core: cell(core),
                act: or_dash(cell(act)),
                kernel: or_dash(cell(kernel)),
                state,
                test: test.clone(),
                insn_per_token,
                insn_per_mac,
            });
        }
    }
    if rows.is_empty() {
        return Err(BenchError::NoQemuTable { what: what.into() });
    }
    Ok(rows)
}

/// Median and half the range.
fn median_spread(samples: &[f64]) -> (f64, f64) {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let median = match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    };
    let spread = match (s.first(), s.last()) {
        (Some(lo), Some(hi)) => 0.5 * (hi - lo),
        _ => 0.0,
    };
    (median, spread)
}

fn human_size(bytes: usize) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.2} KiB", b / 1024.0)
    }
}

/// A table: header, right-aligned columns, rows of cells.
struct Table {
    header: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn bench(report: &Report) -> Self {
        let rows = report
            .bench
            .iter()
            .map(|r| {
                let m = &report.models[r.model];
                let (median, spread) = median_spread(&r.samples);
                vec![
                    m.label.clone(),
                    human_size(m.size_bytes),
                    short_count(m.params),
                    r.backend.clone(),
                    r.kernel.clone(),
                    r.act.into(),
                    r.state.into(),
                    r.test.clone(),
                    format!("{median:.2} ± {spread:.2}"),
                ]
            })
            .collect();
        Self {
            header: vec![
                "model", "size", "params", "backend", "kernel", "act", "state", "test", "t/s",
            ],
            right: vec![false, true, true, false, false, false, false, true, true],
            rows,
        }
    }

    fn curve(report: &Report) -> Self {
        let rows = report
            .curve
            .iter()
            .map(|r| {
                let (median, spread) = median_spread(&r.samples);
                vec![
                    report.models[r.model].label.clone(),
                    r.kernel.clone(),
                    r.act.into(),
                    r.state.into(),
                    r.context.to_string(),
                    r.live_levels.to_string(),
                    human_size(r.live_state_bytes),
                    format!("{:.1}", 1e6 / median.max(1e-12)),
                    format!("{median:.2} ± {spread:.2}"),
                ]
            })
            .collect();
        Self {
            header: vec![
                "model",
                "kernel",
                "act",
                "state",
                "context",
                "live levels",
                "live state",
                "µs/token",
                "t/s",
            ],
            right: vec![false, false, false, false, true, true, true, true, true],
            rows,
        }
    }

    fn qemu(report: &Report) -> Self {
        let rows = report
            .qemu
            .iter()
            .map(|r| {
                vec![
                    r.model.clone(),
                    r.board.clone(),
                    r.core.clone(),
                    r.act.clone(),
                    r.kernel.clone(),
                    r.state.clone(),
                    r.test.clone(),
                    r.insn_per_token.to_string(),
                    format!("{:.1}", r.insn_per_mac),
                ]
            })
            .collect();
        Self {
            header: vec![
                "model",
                "board",
                "core",
                "act",
                "kernel",
                "state",
                "test",
                "instructions/token",
                "instructions/MAC",
            ],
            right: vec![false, false, false, false, false, false, true, true, true],
            rows,
        }
    }

    fn write_markdown(&self, out: &mut impl Write) -> std::io::Result<()> {
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r[i].chars().count())
                .chain([self.header[i].chars().count(), 3])
                .max()
                .unwrap_or(3)
        };
        let widths: Vec<usize> = (0..self.header.len()).map(width).collect();
        let line = |out: &mut dyn Write, cells: &[String]| -> std::io::Result<()> {
            let mut s = String::from("|");
            for (i, c) in cells.iter().enumerate() {
                let pad = " ".repeat(widths[i].saturating_sub(c.chars().count()));
                if self.right[i] {
                    s += &format!(" {pad}{c} |");
                } else {
                    s += &format!(" {c}{pad} |");
                }
            }
            writeln!(out, "{s}")
        };
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        line(out, &header)?;
        let rule: Vec<String> = widths
            .iter()
            .zip(&self.right)
            .map(|(&w, &r)| {
                if r {
                    format!("{}:", "-".repeat(w - 1))
                } else {
                    "-".repeat(w)
                }
            })
            .collect();
        line(out, &rule)?;
        for r in &self.rows {
            line(out, r)?;
        }
        Ok(())
    }

    fn write_csv(&self, out: &mut impl Write) -> std::io::Result<()> {
        let quote = |c: &str| {
            if c.contains([',', '"', '\n']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.to_string()
            }
        };
        let header: Vec<String> = self.header.iter().map(|h| quote(h)).collect();
        writeln!(out, "{}", header.join(","))?;
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|c| quote(c)).collect();
            writeln!(out, "{}", cells.join(","))?;
        }
        Ok(())
    }
}

/// The report's non-empty tables, in output order (bench, curve, QEMU).
fn tables(report: &Report) -> Vec<Table> {
    let mut tables = Vec::new();
    if !report.bench.is_empty() {
        tables.push(Table::bench(report));
    }
    if !report.curve.is_empty() {
        tables.push(Table::curve(report));
    }
    if !report.qemu.is_empty() {
        tables.push(Table::qemu(report));
    }
    tables
}

fn write_markdown(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    for (i, table) in tables(report).iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        table.write_markdown(out)?;
    }
    if !report.models.is_empty() || !report.notes.is_empty() {
        writeln!(out)?;
    }
    for m in &report.models {
        writeln!(
            out,
            "model {}: {} ({} bytes of tensors, {} weights)",
            m.label,
            m.path.display(),
            m.size_bytes,
            m.params
        )?;
    }
    for n in &report.notes {
        writeln!(out, "{n}")?;
    }
    Ok(())
}

/// CSV: the t/s cells keep "median ± spread" so that every format shows the same table; the
/// JSON output has the numbers apart.
fn write_csv(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    for (i, table) in tables(report).iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        table.write_csv(out)?;
    }
    for n in &report.notes {
        eprintln!("{n}");
    }
    Ok(())
}

fn report_json(report: &Report) -> serde_json::Value {
    let model = |i: usize| {
        let m = &report.models[i];
        json!({
            "model": m.label,
            "path": m.path.display().to_string(),
            "size_bytes": m.size_bytes,
            "params": m.params,
        })
    };
    let bench: Vec<_> = report
        .bench
        .iter()
        .map(|r| {
            let (median, spread) = median_spread(&r.samples);
            let mut v = model(r.model);
            v["backend"] = json!(r.backend);
            v["kernel"] = json!(r.kernel);
            v["act"] = json!(r.act);
            v["state"] = json!(r.state);
            v["test"] = json!(r.test);
            v["tokens_per_s"] = json!(median);
            v["spread"] = json!(spread);
            v["samples"] = json!(r.samples);
            v
        })
        .collect();
    let curve: Vec<_> = report
        .curve
        .iter()
        .map(|r| {
            let (median, spread) = median_spread(&r.samples);
            let mut v = model(r.model);
            v["kernel"] = json!(r.kernel);
            v["act"] = json!(r.act);
            v["state"] = json!(r.state);
            v["context"] = json!(r.context);
            v["live_levels"] = json!(r.live_levels);
            v["live_state_bytes"] = json!(r.live_state_bytes);
            v["tokens"] = json!(r.tokens);
            v["us_per_token"] = json!(1e6 / median.max(1e-12));
            v["tokens_per_s"] = json!(median);
            v["spread"] = json!(spread);
            v["samples"] = json!(r.samples);
            v
        })
        .collect();
    let qemu: Vec<_> = report
        .qemu
        .iter()
        .map(|r| {
            json!({
                "model": r.model,
                "board": r.board,
                "core": r.core,
                "act": r.act,
                "kernel": r.kernel,
                "state": r.state,
                "test": r.test,
                "instructions_per_token": r.insn_per_token,
                "instructions_per_mac": r.insn_per_mac,
            })
        })
        .collect();
    json!({ "bench": bench, "curve": curve, "qemu": qemu, "notes": report.notes })
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
    fn median_and_spread() {
        assert_eq!(median_spread(&[3.0, 1.0, 2.0]), (2.0, 1.0));
        assert_eq!(median_spread(&[1.0, 3.0]), (2.0, 1.0));
    }

    #[test]
    fn tokens_stay_below_the_vocabulary() {
        let t = bench_tokens(1000, 7, 1);
        assert!(t.iter().all(|&x| x < 7));
        assert_eq!(t, bench_tokens(1000, 7, 1));
    }
}
