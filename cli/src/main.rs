//! `loglinear`: the host command line.

mod cmd;
mod plan;
mod plot;
mod serial_client;
mod snapshot_file;

use cmd::{bench, eval as eval_cli};

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use loglinear_converter::export::{expected_tensors, parse_dtype, ExportedModel, TensorReport};
use loglinear_converter::model_source::{AlignedBytes, IndexedGguf, LoadError, ModelSource};
use loglinear_converter::vocab::Vocabulary;
use loglinear_converter::{Checkpoint, ExportOptions, TypeOverride};
use loglinear_runtime::gguf::format::{self, ValueType};
use loglinear_runtime::gguf::{GgufFile, GgufModel, MetaArray, MetaValue};
use loglinear_runtime::quant::Activations;
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::session::{Session, SessionConfig};
use loglinear_runtime::{tokenizer, DType, Model, StateElem};
use loglinear_train::eval::{self, Comparison};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

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

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum StateDtype {
    F32,
    F16,
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

/// Storage types: `--type` and `--tensor-type`.
#[derive(clap::Args)]
struct TypeArgs {
    /// Storage type of the weight matrices (projections, MLP, embedding, LM head):
    /// f32, f16, q8_0 or q4_0. Norms, A_log, dt_bias, D, L and conv weights stay f32.
    #[arg(long = "type", value_parser = parse_dtype, default_value = "f32")]
    matrix_type: DType,
    /// Per-tensor type, PATTERN=TYPE (repeatable, last match wins): PATTERN is searched in the
    /// GGUF tensor name, `*` matching anything, e.g. `output.weight=q8_0`, `blk.0.*=f16`.
    #[arg(long = "tensor-type", value_name = "PATTERN=TYPE")]
    tensor_type: Vec<TypeOverride>,
    /// `general.name` (default: the checkpoint folder's name, or the input file's name).
    #[arg(long)]
    name: Option<String>,
}

/// How `convert` and `quantize` measure what quantization costs.
#[derive(clap::Args)]
struct QualityArgs {
    /// Text to measure the new file on against the reference (default: a built-in excerpt of
    /// Hamlet, which is in the shipped models' validation split).
    #[arg(long)]
    eval_text: Option<PathBuf>,
    /// Bytes of the evaluation text to use.
    #[arg(long, default_value_t = 8192)]
    eval_bytes: usize,
    /// Predictions per evaluation window (each window starts from an empty state).
    #[arg(long, default_value_t = 512)]
    eval_ctx: usize,
    /// Skip the measurement.
    #[arg(long)]
    no_eval: bool,
}

/// Sampling settings shared by `generate` and `serial`.
#[derive(clap::Args, Clone, Copy, Debug)]
struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    /// 0 = no top-k cut.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// 1 = no nucleus cut.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn config(&self) -> SamplerConfig {
        SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Convert a checkpoint folder (config.json + model.safetensors) to a GGUF model file.
    Convert {
        /// Checkpoint folder.
        checkpoint: PathBuf,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        types: TypeArgs,
        #[command(flatten)]
        quality: QualityArgs,
    },
    /// Re-store a GGUF model file with other tensor types (GGUF to GGUF).
    Quantize {
        /// Input model file.
        input: PathBuf,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        types: TypeArgs,
        #[command(flatten)]
        quality: QualityArgs,
    },
    /// Show a GGUF file's metadata, tensors, types, sizes and bits per weight.
    Inspect {
        /// The file.
        file: PathBuf,
    },
    /// Bits per byte of a model (GGUF file or checkpoint folder) on a text file; with
    /// `--per-position`/`--plot`, the loss at each position of the windows (CSV, PNG chart,
    /// optionally against a `--baseline` model).
    Eval(eval_cli::EvalArgs),
    /// Generate text from a prompt, streaming it to stdout (speed on stderr).
    Generate {
        /// GGUF model file or checkpoint folder (config.json + model.safetensors). The default
        /// is the shipped model: ll-gdn-mcu (Shakespeare, 1.4M parameters) in Q8_0.
        #[arg(long, default_value = "models/ll-gdn-mcu-q8_0.gguf")]
        model: PathBuf,
        /// Prompt text; `\n` escapes are honoured.
        #[arg(long, default_value = "ROMEO:\\n")]
        prompt: String,
        /// Tokens to generate.
        #[arg(short = 'n', long, default_value_t = 300)]
        tokens: usize,
        #[command(flatten)]
        sampling: SamplingArgs,
        /// State levels (default: the model's: 15 log-linear, 1 plain).
        #[arg(long)]
        levels: Option<usize>,
        /// State storage type.
        #[arg(long, value_enum, default_value = "f32")]
        state: StateDtype,
        /// Inputs of quantized matvecs: f32, or Q8 through the integer kernels.
        #[arg(long, value_enum, default_value = "f32")]
        activations: ActivationsArg,
        /// How the prompt is fed: `step` (token by token through the decoder, exactly what a
        /// board does), `chunkwise` (the §7 chunk algorithm on all CPU cores, much faster for
        /// long prompts; same state up to f32 rounding) or `gpu` (one chunk-scan pass on a GPU
        /// through wgpu: Vulkan, Metal or DX12; lavapipe without a GPU). Decoding is on the CPU.
        #[arg(long, value_enum, default_value = "step")]
        prefill: PrefillArg,
        /// Same as `--prefill gpu`.
        #[arg(long)]
        gpu: bool,
        /// After generating, save the session (state, t, conv states, last logits, sampler
        /// PRNG, model fingerprint) to FILE, atomically, for `--resume` here or on a board.
        #[arg(long, value_name = "FILE")]
        save_snapshot: Option<PathBuf>,
        /// Resume a saved session (from `--save-snapshot` or a board's `SNAP`) instead of
        /// feeding the prompt: state type and levels come from the snapshot; pass the same
        /// sampling settings to continue the same stream bit-identically.
        #[arg(long, value_name = "FILE")]
        resume: Option<PathBuf>,
    },
    /// Plan a model on a board: flash, RAM (state at a context, conv, scratch, stack), fit.
    Plan(plan::PlanArgs),
    /// Talk to the firmware over its serial protocol (a serial device or a QEMU board): send a
    /// prompt, print the tokens as they stream back.
    Serial(serial_client::SerialArgs),
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

/// Held-out text for the quality measurement: Hamlet is in the shipped models' validation
/// split, not their training split (see models/*/TRAINING.md).
const BUILTIN_EVAL_TEXT: &str = include_str!("eval_text.txt");

/// Errors of the command line, naming the file involved.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
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

/// `println!` that returns the write error instead of panicking, so that `loglinear … | head`
/// ends quietly when the reader goes away.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?
    }};
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
        Command::Convert {
            checkpoint,
            output,
            types,
            quality,
        } => convert(&checkpoint, &output, types, &quality),
        Command::Quantize {
            input,
            output,
            types,
            quality,
        } => quantize(&input, &output, types, &quality),
        Command::Inspect { file } => inspect(&file),
        Command::Serial(args) => serial_client::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Train(args) => loglinear_train::run::train(&args),
        Command::Mqar(args) => loglinear_train::mqar::run(&args),
        Command::Plan(args) => {
            let plan = plan::plan(&args)?;
            outln!("{plan}");
            if let Some(advice) = plan::recommendations(&args, &plan)? {
                outln!("{advice}");
            }
            if !plan.fits() {
                return Err(format!("the model does not fit board {}", plan.board.name).into());
            }
            Ok(())
        }
        Command::Eval(args) => eval_cli::run(&args),
        Command::Generate {
            model,
            prompt,
            tokens,
            sampling,
            levels,
            state,
            activations,
            prefill,
            gpu,
            save_snapshot,
            resume,
        } => {
            let source = ModelSource::open(&model)?;
            source.require_byte_tokenizer(&model)?;
            let prompt = prompt.replace("\\n", "\n");
            let sampler = sampling.config();
            let mut cfg = SessionConfig {
                levels,
                activations: Some(activations.mode()),
            };
            let mut state = state;
            let prefill = if gpu { Prefill::Gpu } else { prefill.into() };
            let mut snap = Snapshots {
                save: save_snapshot,
                resume: None,
                fingerprint: 0,
            };
            if snap.save.is_some() || resume.is_some() {
                snap.fingerprint = snapshot_file::fingerprint(&model, &source)?;
            }
            if let Some(path) = &resume {
                let (bytes, h) = snapshot_file::read(path)?;
                cfg.levels = Some(h.levels);
                state = match h.dtype {
                    loglinear_runtime::snapshot::StateDtype::F32 => StateDtype::F32,
                    loglinear_runtime::snapshot::StateDtype::F16 => StateDtype::F16,
                };
                snap.resume = Some((path.clone(), bytes));
            }
            source.with_model(&model, |m| match state {
                StateDtype::F32 => {
                    generate::<f32>(m, &prompt, tokens, sampler, cfg, prefill, &snap)
                }
                StateDtype::F16 => {
                    generate::<half::f16>(m, &prompt, tokens, sampler, cfg, prefill, &snap)
                }
            })?
        }
    }
}

/// `generate`'s snapshot options.
struct Snapshots {
    /// Save the session here at the end.
    save: Option<PathBuf>,
    /// Restore this snapshot (path, bytes) instead of feeding the prompt.
    resume: Option<(PathBuf, Vec<u8>)>,
    /// The model file's fingerprint.
    fingerprint: u64,
}

/// `--prefill`.
#[derive(Clone, Copy, ValueEnum)]
enum PrefillArg {
    Step,
    Chunkwise,
    Gpu,
}

impl From<PrefillArg> for Prefill {
    fn from(p: PrefillArg) -> Self {
        match p {
            PrefillArg::Step => Prefill::Cpu,
            PrefillArg::Chunkwise => Prefill::Chunkwise,
            PrefillArg::Gpu => Prefill::Gpu,
        }
    }
}

/// Where `generate` runs the prompt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prefill {
    /// Token by token through the CPU decoder.
    Cpu,
    /// The chunk algorithm on the CPU's cores (`loglinear-cpu-prefill`).
    Chunkwise,
    /// One chunk-scan pass on the GPU, handing the state to the CPU decoder.
    Gpu,
}

/// Feeds the prompt into `session` on the GPU; returns a note for the summary line.
fn gpu_prefill<E: StateElem>(
    model: &Model<'_>,
    prompt: &[u32],
    session: &mut Session<'_, E>,
) -> Res<String> {
    use loglinear_host_gpu::{Gpu, GpuModel};
    let start = Instant::now();
    let gpu = Gpu::new()?;
    let gpu_model = GpuModel::new(&gpu, model)?;
    let setup = start.elapsed();
    let start = Instant::now();
    gpu_model.prefill_into(prompt, session)?;
    let run = start.elapsed();
    Ok(format!(
        "GPU prefill on {}: setup {:.0} ms, {} tokens in {:.1} ms = {:.0} tokens/s",
        gpu.describe(),
        setup.as_secs_f64() * 1e3,
        prompt.len(),
        run.as_secs_f64() * 1e3,
        prompt.len() as f64 / run.as_secs_f64()
    ))
}

fn generate<E: StateElem>(
    model: &Model<'_>,
    prompt: &str,
    tokens: usize,
    sampler: SamplerConfig,
    cfg: SessionConfig,
    prefill_on: Prefill,
    snap: &Snapshots,
) -> Res {
    let mut arena = vec![0u8; Session::<E>::arena_bytes(model, &cfg)?];
    let mut session = Session::<E>::new(model, &mut arena, cfg)?;
    let mut sampler = Sampler::new(sampler);
    let mut scratch = vec![0u32; model.config().vocab_size];
    if let Some((path, bytes)) = &snap.resume {
        loglinear_runtime::snapshot::restore(bytes, &mut session, &mut sampler, snap.fingerprint)
            .map_err(|error| snapshot_file::SnapshotFileError::Invalid {
            path: path.clone(),
            error,
        })?;
    } else if prompt.is_empty() {
        return Err(CliError::EmptyPrompt.into());
    }
    // Resuming: the snapshot holds the prompt already.
    let prompt = if snap.resume.is_some() { "" } else { prompt };
    let prompt_tokens: Vec<u32> = tokenizer::encode(prompt.as_bytes()).collect();
    let start = Instant::now();
    let gpu_note = match prefill_on {
        Prefill::Gpu if !prompt_tokens.is_empty() => {
            Some(gpu_prefill(model, &prompt_tokens, &mut session)?)
        }
        Prefill::Chunkwise if !prompt_tokens.is_empty() => {
            let p = loglinear_cpu_prefill::prefill_into(
                model,
                &prompt_tokens,
                &mut session,
                &loglinear_cpu_prefill::PrefillOptions::default(),
            )?;
            Some(format!(
                "chunkwise CPU prefill on {} threads: {:.1} ms",
                p.timing.threads,
                p.timing.seconds * 1e3
            ))
        }
        Prefill::Gpu | Prefill::Cpu | Prefill::Chunkwise => {
            for &tok in &prompt_tokens {
                session.step(tok)?;
            }
            None
        }
    };
    let prefill = start.elapsed();
    let out = std::io::stdout();
    let mut out = out.lock();
    out.write_all(prompt.as_bytes())?;
    let start = Instant::now();
    for _ in 0..tokens {
        let next = sampler
            .sample(session.logits(), &mut scratch)
            .map_err(|e| format!("{e:?}"))?;
        if let Some(b) = tokenizer::decode(next) {
            out.write_all(&[b])?;
            out.flush()?;
        }
        session.step(next)?;
    }
    let decode = start.elapsed();
    writeln!(out)?;
    if let Some(path) = &snap.save {
        let mut bytes = Vec::with_capacity(loglinear_runtime::snapshot::encoded_len(&session)?);
        loglinear_runtime::snapshot::write(&session, &sampler, snap.fingerprint, &mut |b| {
            bytes.extend_from_slice(b);
            Ok(())
        })?;
        snapshot_file::write_atomic(path, &bytes)?;
        eprintln!(
            "[snapshot at t = {}: {} bytes to {}]",
            session.t(),
            bytes.len(),
            path.display()
        );
    }
    eprintln!(
        "[{} · {} state · prompt {} tokens in {:.1} ms ({:.0} tokens/s) · {} tokens at {:.1} tokens/s · state {} B live / {} B allocated]",
        model.config().arch.name(),
        E::NAME,
        prompt_tokens.len(),
        prefill.as_secs_f64() * 1e3,
        prompt_tokens.len() as f64 / prefill.as_secs_f64(),
        tokens,
        tokens as f64 / decode.as_secs_f64(),
        session.live_state_bytes(),
        session.allocated_state_bytes()
    );
    if let Some(note) = gpu_note {
        eprintln!("[{note}]");
    }
    Ok(())
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

fn human_bytes(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

fn bpw(bytes: usize, elems: usize) -> f64 {
    bytes as f64 * 8.0 / elems.max(1) as f64
}

/// One row of a tensor table.
struct Row {
    name: String,
    shape: String,
    dtype: DType,
    elements: usize,
    bytes: usize,
    note: String,
}

/// Prints a tensor table and the totals per type and overall.
fn print_tensor_table(rows: &[Row], shape_title: &str) -> Res {
    let w = rows.iter().map(|r| r.name.len()).max().unwrap_or(6).max(6);
    let sw = rows
        .iter()
        .map(|r| r.shape.len())
        .max()
        .unwrap_or(5)
        .max(shape_title.len());
    outln!(
        "{:<w$}  {shape_title:>sw$}  {:<5}  {:>10}  note",
        "tensor",
        "type",
        "bytes"
    );
    let (mut bytes, mut elems) = (0, 0);
    let mut by_type: Vec<(DType, usize, usize, usize)> = Vec::new();
    for r in rows {
        outln!(
            "{:<w$}  {:>sw$}  {:<5}  {:>10}  {}",
            r.name,
            r.shape,
            r.dtype.name(),
            r.bytes,
            r.note
        );
        bytes += r.bytes;
        elems += r.elements;
        match by_type.iter_mut().find(|(t, ..)| *t == r.dtype) {
            Some((_, c, n, b)) => {
                *c += 1;
                *n += r.elements;
                *b += r.bytes;
            }
            None => by_type.push((r.dtype, 1, r.elements, r.bytes)),
        }
    }
    for (t, c, n, b) in by_type {
        outln!(
            "  {:<5} {c:>4} tensors {n:>10} weights {:>11}  {:.2} bits/weight",
            t.name(),
            human_bytes(b),
            bpw(b, n)
        );
    }
    outln!(
        "{} tensors, {elems} weights, {} of tensor data, {:.3} bits per weight",
        rows.len(),
        human_bytes(bytes),
        bpw(bytes, elems)
    );
    Ok(())
}

fn report_rows(reports: &[TensorReport]) -> Vec<Row> {
    reports
        .iter()
        .map(|r| Row {
            name: r.name.clone(),
            shape: match r.shape.as_slice() {
                [n] => format!("{n}"),
                [a, b] => format!("{a}x{b}"),
                s => format!("{s:?}"),
            },
            dtype: r.dtype,
            elements: r.elements,
            bytes: r.bytes,
            note: r.note.clone().unwrap_or_default(),
        })
        .collect()
}

fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, bytes).map_err(|source| CliError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The evaluation text of `convert`/`quantize`: (description, bytes).
fn quality_text(q: &QualityArgs) -> Result<(String, Vec<u8>), CliError> {
    let (what, mut text) = match &q.eval_text {
        Some(p) => (p.display().to_string(), read_file(p)?),
        None => (
            "the built-in Hamlet excerpt".to_string(),
            BUILTIN_EVAL_TEXT.as_bytes().to_vec(),
        ),
    };
    text.truncate(q.eval_bytes);
    Ok((format!("{what} ({} bytes)", text.len()), text))
}

fn print_comparison(c: &Comparison, reference: &str) -> Res {
    outln!(
        "quality vs {reference} ({} windows x {} predictions): bits/byte {reference} {:.4}, \
         new file {:.4} ({:+.4})?; relative logit error {:.3e} (max |diff| {:.3e}); \
         top-1 agreement {:.2}%",
        c.reference.windows,
        c.reference.predictions / c.reference.windows.max(1),
        c.reference.bpb(),
        c.candidate.bpb(),
        c.candidate.bpb() - c.reference.bpb(),
        c.rel_logit_error,
        c.max_abs_logit_error,
        100.0 * c.top1_agreement
    );
    Ok(())
}

/// Writes the export, reads the file back with the runtime's reader, and measures it against
/// `reference` unless every tensor is stored exactly as in the reference.
fn finish_export(
    exported: &ExportedModel,
    output: &Path,
    reference: &Model<'_>,
    reference_name: &str,
    lossless: bool,
    quality: &QualityArgs,
) -> Res {
    let bytes = exported.to_gguf()?;
    write_file(output, &bytes)?;
    print_tensor_table(&report_rows(exported.report()), "shape")?;
    outln!(
        "wrote {} ({}, {} bytes)",
        output.display(),
        human_bytes(bytes.len()),
        bytes.len()
    );
    let aligned = AlignedBytes::from_slice(&bytes);
    let file = IndexedGguf::parse(aligned.as_bytes());
    let candidate = match &file {
        Ok(f) => {
            outln!("read back with the runtime's GGUF reader: ok");
            f.model()?
        }
        Err(e) => {
            // The file follows docs/model-file.md (gguf-py reads it); say so loudly but keep
            // the conversion usable, measuring the very same weights from memory.
            eprintln!(
                "warning: {}; measuring the exported weights in memory instead",
                CliError::ReadBack(*e)
            );
            exported.model()?
        }
    };
    if quality.no_eval {
        return Ok(());
    }
    if lossless {
        outln!("quality: every tensor is stored exactly as in the {reference_name}");
        return Ok(());
    }
    let (what, text) = quality_text(quality)?;
    let windows = eval::window_count(text.len(), quality.eval_ctx);
    outln!("measuring quality on {what}");
    let pb = progress_bar(windows, "evaluating");
    let c = eval::compare(reference, &candidate, &text, quality.eval_ctx, &mut |w| {
        pb.set_position(w as u64)
    })?;
    pb.finish_and_clear();
    print_comparison(&c, reference_name)?;
    Ok(())
}

fn export_with_bar(
    n: usize,
    f: impl FnOnce(&mut dyn FnMut(&TensorReport)) -> Res<ExportedModel>,
) -> Res<ExportedModel> {
    let pb = progress_bar(n, "converting");
    let out = f(&mut |r| {
        pb.set_message(r.name.clone());
        pb.inc(1);
    });
    pb.finish_and_clear();
    out
}

fn convert(checkpoint: &Path, output: &Path, types: TypeArgs, quality: &QualityArgs) -> Res {
    let ckpt = Checkpoint::load(checkpoint).map_err(|source| LoadError::Checkpoint {
        path: checkpoint.to_path_buf(),
        source,
    })?;
    let name = types.name.or_else(|| {
        std::fs::canonicalize(checkpoint)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    });
    let opts = ExportOptions {
        name,
        matrix_type: types.matrix_type,
        overrides: types.tensor_type,
    };
    let n = expected_tensors(&ckpt.config).len();
    let exported = export_with_bar(n, |progress| {
        Ok(ExportedModel::from_checkpoint_with_progress(
            &ckpt, &opts, progress,
        )?)
    })?;
    let lossless = exported.report().iter().all(|r| r.dtype == DType::F32);
    let reference = ckpt.model()?;
    finish_export(
        &exported,
        output,
        &reference,
        "f32 checkpoint",
        lossless,
        quality,
    )
}

fn quantize(input: &Path, output: &Path, types: TypeArgs, quality: &QualityArgs) -> Res {
    let bytes = AlignedBytes::read(input)?;
    let src = IndexedGguf::parse(bytes.as_bytes()).map_err(|error| LoadError::ModelFile {
        path: input.to_path_buf(),
        error,
    })?;
    let name = types.name.or_else(|| {
        src.gguf()
            .file()
            .get(format::general::NAME)
            .and_then(|v| v.as_str().map(str::to_string))
    });
    let opts = ExportOptions {
        name,
        matrix_type: types.matrix_type,
        overrides: types.tensor_type,
    };
    let config = *src.config();
    let exported = export_with_bar(expected_tensors(&config).len(), |progress| {
        Ok(ExportedModel::from_source(config, &src, &opts, progress)?
            .with_vocabulary(Vocabulary::from_gguf(src.gguf().file())))
    })?;
    // Lossless when every tensor kept its input type (the bytes are then copied).
    let lossless = exported.report().iter().all(|r| {
        src.gguf()
            .file()
            .tensor(&r.name)
            .is_some_and(|t| t.dtype == r.dtype)
    });
    let reference = src.model()?;
    finish_export(&exported, output, &reference, "input", lossless, quality)
}

fn meta_type(v: &MetaValue<'_>) -> String {
    match v {
        MetaValue::Array(a) => format!(
            "[{}; {}]",
            ValueType::from_id(a.elem_type).map_or("?", ValueType::name),
            a.len
        ),
        v => v.value_type().name().into(),
    }
}

fn meta_text(v: &MetaValue<'_>) -> String {
    match v {
        MetaValue::U8(x) => x.to_string(),
        MetaValue::I8(x) => x.to_string(),
        MetaValue::U16(x) => x.to_string(),
        MetaValue::I16(x) => x.to_string(),
        MetaValue::U32(x) => x.to_string(),
        MetaValue::I32(x) => x.to_string(),
        MetaValue::F32(x) => format!("{x:e}"),
        MetaValue::Bool(x) => x.to_string(),
        MetaValue::Str(s) => format!("{s:?}"),
        MetaValue::Array(a) => array_text(a),
        MetaValue::U64(x) => x.to_string(),
        MetaValue::I64(x) => x.to_string(),
        MetaValue::F64(x) => format!("{x:e}"),
    }
}

fn array_text(a: &MetaArray<'_>) -> String {
    const SHOW: usize = 6;
    let items: Vec<String> = a.iter().take(SHOW).map(|v| meta_text(&v)).collect();
    let more = if a.len as usize > SHOW { ", …" } else { "" };
    format!("[{}{more}]", items.join(", "))
}

fn inspect(path: &Path) -> Res {
    let bytes = AlignedBytes::read(path)?;
    let file = GgufFile::parse(bytes.as_bytes()).map_err(|error| CliError::Gguf {
        path: path.to_path_buf(),
        error,
    })?;
    outln!(
        "{}: GGUF v3, {} bytes ({}), alignment {}, {} metadata keys, {} tensors",
        path.display(),
        bytes.as_bytes().len(),
        human_bytes(bytes.as_bytes().len()),
        file.alignment(),
        file.metadata_len(),
        file.tensor_count()
    );
    outln!("\nmetadata:");
    let kw = file.metadata().map(|(k, _)| k.len()).max().unwrap_or(3);
    for (k, v) in file.metadata() {
        outln!("  {k:<kw$}  {:<14}  {}", meta_type(&v), meta_text(&v));
    }
    outln!("\ntensors:");
    let rows: Vec<Row> = file
        .tensors()
        .map(|t| {
            let dims = &t.dims[..t.n_dims as usize];
            Row {
                name: t.name.to_string(),
                shape: format!(
                    "[{}]",
                    dims.iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                dtype: t.dtype,
                elements: t.len(),
                bytes: t.data.len(),
                note: format!("@{}", t.offset),
            }
        })
        .collect();
    print_tensor_table(&rows, "ggml dims")?;
    match GgufModel::parse(bytes.as_bytes()) {
        Ok(m) => {
            let c = m.config();
            outln!(
                "\nmodel: ok: {} ({}), {} blocks, width {}, {} heads ({}x{}), vocab {}",
                c.arch.name(),
                file.get(format::general::NAME)
                    .and_then(|v| v.as_str())
                    .unwrap_or("unnamed"),
                c.num_layers,
                c.hidden_size,
                c.num_heads,
                c.head_k_dim,
                c.head_v_dim,
                c.vocab_size
            );
        }
        Err(e) => outln!("\nmodel: the runtime would refuse this file: {e}"),
    }
    Ok(())
}
