//! `loglinear`: the host command line.

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use loglinear_converter::eval::{self, Comparison};
use loglinear_converter::export::{parse_dtype, ExportedModel, TensorReport};
use loglinear_converter::{Checkpoint, ExportOptions, TypeOverride};
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::session::{Session, SessionConfig};
use loglinear_runtime::DType;
use loglinear_runtime::{tokenizer, StateElem};
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
enum StateDtype {
    F32,
    F16,
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
        /// Storage type of the weight matrices (projections, MLP, embedding, LM head):
        /// f32, f16, q8_0 or q4_0. Norms, A_log, dt_bias, D, L and conv weights stay f32.
        #[arg(long = "type", value_parser = parse_dtype, default_value = "f32")]
        matrix_type: DType,
        /// Per-tensor type, PATTERN=TYPE (repeatable, last match wins): PATTERN is searched in
        /// the GGUF tensor name, `*` matching anything, e.g. `output.weight=q8_0`, `blk.0.*=f16`.
        #[arg(long = "tensor-type", value_name = "PATTERN=TYPE")]
        tensor_type: Vec<TypeOverride>,
        /// `general.name` (default: the checkpoint folder's name).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        quality: QualityArgs,
    },
    /// Generate text from a prompt, streaming it to stdout (speed on stderr).
    Generate {
        /// Checkpoint folder (config.json + model.safetensors).
        #[arg(long, default_value = "models/ll-gdn-mcu")]
        model: PathBuf,
        /// Prompt text; `\n` escapes are honoured.
        #[arg(long, default_value = "ROMEO:\\n")]
        prompt: String,
        /// Tokens to generate.
        #[arg(short = 'n', long, default_value_t = 300)]
        tokens: usize,
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
        /// State levels (default: the model's: 15 log-linear, 1 plain).
        #[arg(long)]
        levels: Option<usize>,
        /// State storage type.
        #[arg(long, value_enum, default_value = "f32")]
        state: StateDtype,
    },
}

/// How `convert` measures what quantization costs.
#[derive(clap::Args)]
struct QualityArgs {
    /// Text to measure the quantized model on against the f32 one (default: a built-in
    /// excerpt of Hamlet, which is in the shipped models' validation split).
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
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    match cli.command {
        Command::Convert {
            checkpoint,
            output,
            matrix_type,
            tensor_type,
            name,
            quality,
        } => convert(
            &checkpoint,
            &output,
            matrix_type,
            tensor_type,
            name,
            &quality,
        ),
        Command::Generate {
            model,
            prompt,
            tokens,
            temperature,
            top_k,
            top_p,
            seed,
            levels,
            state,
        } => {
            let ckpt = Checkpoint::load(&model)?;
            let prompt = prompt.replace("\\n", "\n");
            let sampler = SamplerConfig {
                temperature,
                top_k,
                top_p,
                seed,
            };
            let cfg = SessionConfig { levels };
            match state {
                StateDtype::F32 => generate::<f32>(&ckpt, &prompt, tokens, sampler, cfg),
                StateDtype::F16 => generate::<half::f16>(&ckpt, &prompt, tokens, sampler, cfg),
            }
        }
    }
}

fn generate<E: StateElem>(
    ckpt: &Checkpoint,
    prompt: &str,
    tokens: usize,
    sampler: SamplerConfig,
    cfg: SessionConfig,
) -> Result<(), Box<dyn std::error::Error>> {
    let model = ckpt.model()?;
    let mut arena = vec![0u8; Session::<E>::arena_bytes(&model, &cfg)?];
    let mut session = Session::<E>::new(&model, &mut arena, cfg)?;
    let mut sampler = Sampler::new(sampler);
    let mut scratch = vec![0u32; model.config().vocab_size];
    if prompt.is_empty() {
        return Err("the prompt must not be empty".into());
    }
    let out = std::io::stdout();
    let mut out = out.lock();
    out.write_all(prompt.as_bytes())?;
    let start = Instant::now();
    for tok in tokenizer::encode(prompt.as_bytes()) {
        session.step(tok)?;
    }
    let prefill = start.elapsed();
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
    eprintln!(
        "[{} · {} state · prompt {} tokens in {:.1} ms · {} tokens at {:.1} tokens/s · state {} B live / {} B allocated]",
        model.config().arch.name(),
        E::NAME,
        prompt.len(),
        prefill.as_secs_f64() * 1e3,
        tokens,
        tokens as f64 / decode.as_secs_f64(),
        session.live_state_bytes(),
        session.allocated_state_bytes()
    );
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

/// Prints the per-tensor table and the totals; returns (tensor bytes, elements).
fn print_tensor_table(reports: &[TensorReport]) -> (usize, usize) {
    let w = reports
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    println!(
        "{:<w$}  {:>11}  {:<5}  {:>10}  note",
        "tensor", "shape", "type", "bytes"
    );
    let (mut bytes, mut elems) = (0, 0);
    let mut by_type: Vec<(DType, usize, usize)> = Vec::new();
    for r in reports {
        let shape = match r.shape.as_slice() {
            [n] => format!("{n}"),
            [a, b] => format!("{a}x{b}"),
            s => format!("{s:?}"),
        };
        println!(
            "{:<w$}  {:>11}  {:<5}  {:>10}  {}",
            r.name,
            shape,
            r.dtype.name(),
            r.bytes,
            r.note.as_deref().unwrap_or("")
        );
        bytes += r.bytes;
        elems += r.elements;
        match by_type.iter_mut().find(|(t, ..)| *t == r.dtype) {
            Some((_, n, b)) => {
                *n += r.elements;
                *b += r.bytes;
            }
            None => by_type.push((r.dtype, r.elements, r.bytes)),
        }
    }
    for (t, n, b) in by_type {
        println!(
            "  {:<5} {:>10} weights  {:>10}  ({:.2} bits/weight)",
            t.name(),
            n,
            human_bytes(b),
            b as f64 * 8.0 / n.max(1) as f64
        );
    }
    println!(
        "{} tensors, {} weights, {} of tensor data, {:.3} bits per weight",
        reports.len(),
        elems,
        human_bytes(bytes),
        bytes as f64 * 8.0 / elems.max(1) as f64
    );
    (bytes, elems)
}

fn read_file(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|source| CliError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The evaluation text of `convert`: (description, bytes).
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

fn print_comparison(c: &Comparison, label: &str) {
    println!(
        "quality vs f32 ({} windows x {} predictions): bits/byte f32 {:.4}, {label} {:.4} ({:+.4}); \
         relative logit error {:.3e} (max |diff| {:.3e}); top-1 agreement {:.2}%",
        c.reference.windows,
        c.reference.predictions / c.reference.windows.max(1),
        c.reference.bpb(),
        c.candidate.bpb(),
        c.candidate.bpb() - c.reference.bpb(),
        c.rel_logit_error,
        c.max_abs_logit_error,
        100.0 * c.top1_agreement
    );
}

fn convert(
    checkpoint: &Path,
    output: &Path,
    matrix_type: DType,
    overrides: Vec<TypeOverride>,
    name: Option<String>,
    quality: &QualityArgs,
) -> Result<(), Box<dyn std::error::Error>> {
    let ckpt = Checkpoint::load(checkpoint)?;
    let name = name.or_else(|| {
        std::fs::canonicalize(checkpoint)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    });
    let opts = ExportOptions {
        name,
        matrix_type,
        overrides,
    };
    let n = loglinear_converter::export::expected_tensors(&ckpt.config).len();
    let pb = progress_bar(n, "converting");
    let exported = ExportedModel::from_checkpoint_with_progress(&ckpt, &opts, &mut |r| {
        pb.set_message(r.name.clone());
        pb.inc(1);
    })?;
    pb.finish_and_clear();
    let bytes = exported.to_gguf()?;
    std::fs::write(output, &bytes).map_err(|source| CliError::Write {
        path: output.to_path_buf(),
        source,
    })?;
    print_tensor_table(exported.report());
    println!(
        "wrote {} ({}, {} bytes; f32 checkpoint weights {})",
        output.display(),
        human_bytes(bytes.len()),
        bytes.len(),
        human_bytes(exported.report().iter().map(|r| r.elements * 4).sum())
    );
    if quality.no_eval {
        return Ok(());
    }
    if exported.report().iter().all(|r| r.dtype == DType::F32) {
        println!("quality: every tensor is f32, the file holds the checkpoint's weights exactly");
        return Ok(());
    }
    let (what, text) = quality_text(quality)?;
    let windows = eval::window_count(text.len(), quality.eval_ctx);
    println!("measuring quality on {what}");
    let pb = progress_bar(windows, "evaluating");
    let reference = ckpt.model()?;
    let candidate = exported.model()?;
    let c = eval::compare(&reference, &candidate, &text, quality.eval_ctx, &mut |w| {
        pb.set_position(w as u64)
    })?;
    pb.finish_and_clear();
    print_comparison(&c, matrix_type.name());
    Ok(())
}
