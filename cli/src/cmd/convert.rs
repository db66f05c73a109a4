//! `loglinear convert` (checkpoint folder to GGUF) and `loglinear quantize` (GGUF to GGUF
//! with other tensor types), each measuring what the new file loses against its source.

use super::table::{human_bytes, print_tensor_table, report_rows};
use crate::{progress_bar, read_file, write_file, CliError, ModelArg, Res};
use loglinear_converter::command_paths::{CommandPaths, Reads, Writes};
use loglinear_converter::export::{expected_tensors, parse_dtype, ExportedModel, TensorReport};
use loglinear_converter::model_source::{AlignedBytes, IndexedGguf, LoadError};
use loglinear_converter::tokenize::HostTokenizer;
use loglinear_converter::vocab::Vocabulary;
use loglinear_converter::{Checkpoint, ExportOptions, TypeOverride};
use loglinear_runtime::gguf::format::{self};
use loglinear_runtime::gguf::GgufFile;
use loglinear_runtime::{DType, Model};
use loglinear_train::eval::{self, Comparison};
use std::path::{Path, PathBuf};

/// `loglinear convert`'s arguments.
#[derive(clap::Args)]
#[command(mut_arg("flag", |a| a.help(
    "Checkpoint folder (config.json + model.safetensors, optionally tokenizer.json), \
     e.g. models/ll-gdn-mcu",
)))]
pub(crate) struct ConvertArgs {
    #[command(flatten)]
    pub checkpoint: ModelArg,
    /// GGUF file to write, e.g. model-q8_0.gguf (written to a temporary file, then renamed).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub types: TypeArgs,
    #[command(flatten)]
    pub quality: QualityArgs,
}

/// `loglinear quantize`'s arguments.
#[derive(clap::Args)]
#[command(mut_arg("flag", |a| a.help("GGUF model file to re-store, e.g. models/ll-gdn-mcu-f32.gguf")))]
pub(crate) struct QuantizeArgs {
    #[command(flatten)]
    pub input: ModelArg,
    /// GGUF file to write, e.g. model-q4_0.gguf (written to a temporary file, then renamed).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub types: TypeArgs,
    #[command(flatten)]
    pub quality: QualityArgs,
}

/// Held-out text for the quality measurement: Hamlet is in the shipped models' validation
/// split, not their training split (see models/*/TRAINING.md).
const BUILTIN_EVAL_TEXT: &str = include_str!("eval_text.txt");

/// Storage types: `--type` and `--tensor-type`.
#[derive(clap::Args)]
pub(crate) struct TypeArgs {
    /// Storage type of the weight matrices (projections, MLP, embedding, LM head):
    /// f32, f16, q8_0 or q4_0. Norms, A_log, dt_bias, D, L and conv weights stay f32.
    /// `convert` defaults to f32; `quantize` needs it.
    #[arg(long = "type", value_name = "TYPE", value_parser = parse_dtype)]
    matrix_type: Option<DType>,
    /// Per-tensor type, PATTERN=TYPE (repeatable, last match wins): PATTERN is a glob searched
    /// in the GGUF tensor name (`*` any characters, `?` one character, `[0-3]` one of a set,
    /// `{up,down}` one of the alternatives), e.g. `output.weight=q8_0`, `blk.0.*=f16`,
    /// `blk.[0-3].ffn_{up,down}=q8_0`.
    #[arg(long = "tensor-type", value_name = "PATTERN=TYPE")]
    tensor_type: Vec<TypeOverride>,
    /// `general.name` (default: the checkpoint folder's name, or the input file's name).
    #[arg(long)]
    name: Option<String>,
}

/// How `convert` and `quantize` measure what quantization costs.
#[derive(clap::Args)]
pub(crate) struct QualityArgs {
    /// Text to measure the new file on against the reference (default: a built-in excerpt of
    /// Hamlet, which is in the shipped models' validation split).
    #[arg(long)]
    eval_text: Option<PathBuf>,
    /// Bytes of the evaluation text to use (at most).
    #[arg(long, default_value_t = 8192, value_parser = crate::args::parse_at_most)]
    eval_bytes: usize,
    /// Predictions per evaluation window (each window starts from an empty state).
    #[arg(long, value_name = "TOKENS", alias = "eval-ctx", default_value_t = 512)]
    eval_context: usize,
    /// Skip the measurement.
    #[arg(long)]
    no_eval: bool,
}

impl ConvertArgs {
    /// What `convert` reads and writes.
    pub(crate) fn paths(&self) -> CommandPaths {
        export_paths(&self.checkpoint, Reads::Folder, &self.quality, &self.output)
    }
}

impl QuantizeArgs {
    /// What `quantize` reads and writes.
    pub(crate) fn paths(&self) -> CommandPaths {
        export_paths(&self.input, Reads::File, &self.quality, &self.output)
    }
}

/// The paths of `convert` and `quantize`: the source (a checkpoint folder or a GGUF file), the
/// evaluation text, the new file.
fn export_paths(
    source: &ModelArg,
    kind: Reads,
    quality: &QualityArgs,
    output: &Path,
) -> CommandPaths {
    CommandPaths::new()
        .reads(source.flag(), Some(source.path()), kind)
        .reads("--eval-text", quality.eval_text.as_deref(), Reads::File)
        .writes("--output", Some(output), Writes::File)
}

impl QualityArgs {
    /// Refuses, before any work, a measurement that cannot run.
    fn check(&self) -> Res {
        if !self.no_eval && self.eval_context == 0 {
            return Err(format!(
                "--eval-context {}: the measurement's windows need at least 1 token \
                 (or give --no-eval)",
                self.eval_context
            )
            .into());
        }
        Ok(())
    }
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

/// The measurement against the reference; `unit` is what a prediction predicts (a byte, or a
/// BPE token).
fn print_comparison(c: &Comparison, reference: &str, unit: &str) -> Res {
    outln!(
        "quality vs {reference} ({} windows x {} predictions): bits/{unit} {reference} {:.4}, \
         new file {:.4} ({:+.4}); relative logit error {:.3e} (max |diff| {:.3e}); \
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

/// Reads the export back with the runtime's reader and measures it against `reference`
/// (unless every tensor is stored exactly as in the reference), then writes it: a failed
/// measurement leaves the previous output as it was.
fn finish_export(
    exported: &ExportedModel,
    output: &Path,
    reference: &Model<'_>,
    reference_name: &str,
    lossless: bool,
    quality: &QualityArgs,
) -> Res {
    let bytes = exported.to_gguf()?;
    print_tensor_table(&report_rows(exported.report()), "shape")?;
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
    let measured = match (quality.no_eval, lossless) {
        (true, _) => None,
        (false, true) => Some(Measured::Lossless),
        (false, false) => Some(measure(&aligned, reference, &candidate, quality)?),
    };
    write_file(output, &bytes)?;
    outln!(
        "wrote {} ({}, {} bytes)",
        output.display(),
        human_bytes(bytes.len()),
        bytes.len()
    );
    match measured {
        None => {}
        Some(Measured::Lossless) => {
            outln!("quality: every tensor is stored exactly as in the {reference_name}")
        }
        Some(Measured::Compared(c, unit)) => print_comparison(&c, reference_name, unit)?,
    }
    Ok(())
}

/// What the quality measurement found.
enum Measured {
    /// Every tensor is stored as in the reference: nothing to measure.
    Lossless,
    /// The comparison, and what a prediction predicts ("byte" or "token").
    Compared(Comparison, &'static str),
}

/// Measures `candidate` (the file `aligned` holds) against `reference` on the quality text.
fn measure(
    aligned: &AlignedBytes,
    reference: &Model<'_>,
    candidate: &Model<'_>,
    quality: &QualityArgs,
) -> Res<Measured> {
    let (what, text) = quality_text(quality)?;
    // The text as the model reads it: bytes, or the BPE vocabulary's tokens.
    let vocabulary = GgufFile::parse(aligned.as_bytes())
        .ok()
        .as_ref()
        .and_then(Vocabulary::from_gguf);
    let (tokens, unit) = match &vocabulary {
        Some(v @ Vocabulary::Bpe { .. }) => (
            HostTokenizer::new(v)?
                .encode_bytes(&text)
                .map_err(|e| format!("the evaluation text: {e}"))?,
            "token",
        ),
        _ => (text.iter().map(|&b| u32::from(b)).collect(), "byte"),
    };
    eval::check(&tokens, quality.eval_context)
        .map_err(|e| format!("--eval-context {}: {what}: {e}", quality.eval_context))?;
    let windows = eval::window_count(tokens.len(), quality.eval_context);
    outln!("measuring quality on {what}");
    let pb = progress_bar(windows, "evaluating");
    let c = eval::compare(
        reference,
        candidate,
        &tokens,
        quality.eval_context,
        &mut |w| pb.set_position(w as u64),
    )?;
    pb.finish_and_clear();
    Ok(Measured::Compared(c, unit))
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

/// Runs `loglinear convert`.
pub(crate) fn convert(args: ConvertArgs) -> Res {
    let ConvertArgs {
        checkpoint,
        output,
        types,
        quality,
    } = args;
    let (checkpoint, output, quality) = (checkpoint.path(), &output, &quality);
    quality.check()?;
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
        matrix_type: types.matrix_type.unwrap_or(DType::F32),
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

/// Runs `loglinear quantize`.
pub(crate) fn quantize(args: QuantizeArgs) -> Res {
    let QuantizeArgs {
        input,
        output,
        types,
        quality,
    } = args;
    let (input, output, quality) = (input.path(), &output, &quality);
    quality.check()?;
    let matrix_type = types.matrix_type.ok_or(
        "quantize needs --type: the storage type of the weight matrices (f32, f16, q8_0 or q4_0)",
    )?;
    let bytes = AlignedBytes::read(input)?;
    let src = IndexedGguf::parse(bytes.as_bytes())
        .map_err(|error| LoadError::model_file(input, bytes.as_bytes(), error))?;
    src.refuse_non_finite(input)?;
    let name = types.name.or_else(|| {
        src.gguf()
            .file()
            .get(format::general::NAME)
            .and_then(|v| v.as_str().map(str::to_string))
    });
    let opts = ExportOptions {
        name,
        matrix_type,
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
