//! `loglinear eval`: bits per byte of a model on a text, and optionally the loss at each
//! position of the windows (CSV) and its chart against a baseline model (PNG).

use crate::args::parse_threads;
use crate::plot::{self, Curve, PlotOptions};
use crate::{progress_bar, read_file, ActivationsArg, ModelArg, Res};
use clap::ValueEnum;
use loglinear_converter::command_paths::{CommandPaths, Reads, Writes};
use loglinear_converter::model_source::ModelSource;
use loglinear_converter::output_file;
use loglinear_converter::tokenize::HostTokenizer;
use loglinear_runtime::quant::Activations;
use loglinear_train::eval;
use loglinear_train::per_position::{per_position_loss, PerPosition, StepState, WindowRunner};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `loglinear eval`.
#[derive(clap::Args)]
pub struct EvalArgs {
    #[command(flatten)]
    model: ModelArg,
    /// The text file to measure on, e.g. data/valid.txt (raw bytes; one token per byte).
    #[arg(long, value_name = "FILE")]
    text: PathBuf,
    /// Predictions per window; windows do not overlap and each starts from an empty state,
    /// feeding TOKENS + 1 bytes and predicting TOKENS.
    #[arg(long, value_name = "TOKENS", alias = "ctx", default_value_t = 512)]
    context: usize,
    /// Use only the first this many bytes of the text.
    #[arg(long, value_parser = crate::args::parse_at_most)]
    bytes: Option<usize>,
    /// Inputs of quantized matvecs: f32, or Q8 through the integer kernels.
    #[arg(long, value_enum, default_value = "f32")]
    activations: ActivationsArg,
    /// How each window is run: `step` (token by token through the decoder, as a board does),
    /// `chunkwise` (the §7 chunk algorithm on all CPU cores with logits at every position,
    /// much faster; f32 activations only), or `auto`: chunkwise with f32 activations and the
    /// model's full f32 state, step otherwise.
    #[arg(long, value_enum, default_value = "auto")]
    prefill: RunnerArg,
    /// Worker threads of the chunkwise prefill, 1 to 4096 (default: every core).
    #[arg(long, value_parser = parse_threads)]
    threads: Option<usize>,
    /// State levels of the decoder, as a board with little RAM keeps them (default: the
    /// model's, 15 log-linear, 1 plain): the top level saturates at 2^(levels − 1) tokens.
    /// Runs the windows step by step.
    #[arg(long)]
    levels: Option<usize>,
    /// Element type of the decoder state: f32, or f16 as the boards keep it (half the RAM).
    /// f16 runs the windows step by step.
    #[arg(long, value_enum, default_value = "f32")]
    state: crate::StateDtype,
    /// Write the mean loss at each position 0..ctx-1 over all windows to this CSV file
    /// (columns position,val_loss_nats,val_loss_bits, as the models' per_position_loss.csv).
    #[arg(long, value_name = "FILE.csv")]
    per_position: Option<PathBuf>,
    /// Draw bits per byte against position (log-scale position axis, power-of-two bucket
    /// means over the per-position curve) to this PNG file.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
    /// A second model evaluated on the same windows and drawn as a second curve (e.g. plain
    /// GDN against log-linear GDN); its bits per byte are printed too.
    #[arg(long, value_name = "MODEL")]
    baseline: Option<PathBuf>,
    /// Size of the plot in pixels, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", default_value = "960x600", value_parser = plot::parse_size)]
    plot_size: (u32, u32),
    /// Print the result as one JSON object on stdout (bits and nats per byte, windows,
    /// predictions, seconds, tokens/s; the baseline's under "baseline").
    #[arg(long)]
    json: bool,
}

/// `--prefill` of `eval`.
#[derive(Clone, Copy, ValueEnum)]
enum RunnerArg {
    Auto,
    Step,
    Chunkwise,
}

impl EvalArgs {
    /// What `eval` reads and writes.
    pub(crate) fn paths(&self) -> CommandPaths {
        let m = &self.model;
        CommandPaths::new()
            .reads(m.flag(), Some(m.path()), Reads::Model)
            .reads("--text", Some(&self.text), Reads::File)
            .reads("--baseline", self.baseline.as_deref(), Reads::Model)
            .writes("--per-position", self.per_position.as_deref(), Writes::File)
            .writes("--plot", self.plot.as_deref(), Writes::File)
    }
}

/// Runs `loglinear eval`.
pub fn run(args: &EvalArgs) -> Res {
    if let Some(png) = &args.plot {
        plot::check_png_path(png)?;
    }
    let activations = args.activations.mode();
    let state = StepState {
        levels: args.levels,
        f16: matches!(args.state, crate::StateDtype::F16),
    };
    // The chunk algorithm computes the model's full f32 state with f32 activations; anything
    // else is what the step decoder (a board's) computes.
    let exact_chunkwise = activations == Activations::F32 && state == StepState::default();
    let runner = match (args.prefill, exact_chunkwise) {
        (RunnerArg::Step, _) | (RunnerArg::Auto, false) => WindowRunner::Step(state),
        (RunnerArg::Chunkwise | RunnerArg::Auto, true) => WindowRunner::Chunkwise {
            threads: args.threads,
        },
        (RunnerArg::Chunkwise, false) => {
            return Err(
                "--prefill chunkwise computes with f32 activations and the model's full \
                        f32 state: use --prefill step with --activations q8, --levels or \
                        --state f16"
                    .into(),
            )
        }
    };
    let mut bytes = read_file(&args.text)?;
    if let Some(n) = args.bytes {
        bytes.truncate(n);
    }
    // Both models are opened and the text tokenized and checked for each before either is
    // evaluated, so a bad baseline or a short text fails at once, with nothing printed.
    let model_path = args.model.path();
    let text = Text {
        path: &args.text,
        bytes: &bytes,
    };
    let (source, tokens) = open_model(model_path, &text, args.context)?;
    let baseline_source = match &args.baseline {
        Some(path) => Some((path, open_model(path, &text, args.context)?)),
        None => None,
    };

    let run = Run {
        args,
        runner,
        activations,
    };
    let model = evaluate(model_path, &source, &tokens, &run)?;
    if !args.json {
        print_result("", &model)?;
    }
    let baseline = match &baseline_source {
        Some((path, (src, tokens))) => {
            let b = evaluate(path, src, tokens, &run)?;
            if !args.json {
                print_result("baseline ", &b)?;
            }
            Some(b)
        }
        None => None,
    };
    // Every output is made before any replaces its file, so that a failure leaves them all as
    // they were.
    let mut staged = Vec::new();
    if let Some(csv) = &args.per_position {
        staged.push(output_file::stage(csv, model.loss.to_csv().as_bytes())?);
    }
    if let Some(png) = &args.plot {
        staged.push(draw_plot(png, args, &model, baseline.as_ref())?);
    }
    for file in staged {
        let path = file.path().to_path_buf();
        file.commit()?;
        match &args.per_position {
            Some(csv) if *csv == path => {
                eprintln!("wrote {} ({} positions)", csv.display(), model.loss.ctx())
            }
            _ => eprintln!("wrote {}", path.display()),
        }
    }
    if args.json {
        let baseline = match (&args.baseline, &baseline) {
            (Some(path), Some(b)) => result_json(path, b),
            _ => serde_json::Value::Null,
        };
        let mut v = result_json(model_path, &model);
        v["text"] = json!(args.text.display().to_string());
        v["baseline"] = baseline;
        outln!("{v:#}");
    }
    Ok(())
}

/// Draws the loss-by-position chart of `model` (and `baseline`) into a staged `png`.
fn draw_plot(
    png: &Path,
    args: &EvalArgs,
    model: &Outcome,
    baseline: Option<&Outcome>,
) -> Res<output_file::StagedFile> {
    let mut curves = vec![Curve {
        label: model_name(args.model.path()),
        mean_bits: model.loss.mean_bits(),
    }];
    if let (Some(path), Some(b)) = (&args.baseline, baseline) {
        curves.push(Curve {
            label: model_name(path),
            mean_bits: b.loss.mean_bits(),
        });
    }
    let opts = PlotOptions {
        width: args.plot_size.0,
        height: args.plot_size.1,
        title: format!(
            "Loss by position: {} windows of {} tokens of {}",
            model.loss.windows,
            args.context,
            model_name(&args.text)
        ),
    };
    Ok(plot::draw_png(png, &curves, &opts)?)
}

/// The last component of a path, for legends and titles.
fn model_name(path: &Path) -> String {
    path.file_name()
        .unwrap_or(path.as_os_str())
        .to_string_lossy()
        .into_owned()
}

/// The evaluation text as one model reads it.
struct Tokens {
    /// Its token ids (its bytes, for a byte-level model).
    ids: Vec<u32>,
    /// Bytes each token stands for; `None` for a byte-level model (one each).
    bytes_per_token: Option<Vec<usize>>,
}

impl Tokens {
    /// `text` through the model's tokenizer.
    fn of(tokenizer: &HostTokenizer, text: &[u8]) -> Res<Self> {
        let ids = tokenizer.encode_bytes(text)?;
        if tokenizer.bpe().is_none() {
            return Ok(Self {
                ids,
                bytes_per_token: None,
            });
        }
        let bytes_per_token = ids
            .iter()
            .map(|&id| tokenizer.decode(&[id]).map(|b| b.len()))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            ids,
            bytes_per_token: Some(bytes_per_token),
        })
    }

    /// Bytes the predicted tokens of `windows` windows of `ctx` stand for.
    fn predicted_bytes(&self, windows: usize, ctx: usize) -> usize {
        match &self.bytes_per_token {
            None => windows * ctx,
            Some(lens) => (0..windows)
                .map(|w| lens[w * ctx + 1..=w * ctx + ctx].iter().sum::<usize>())
                .sum(),
        }
    }
}

/// How every model is evaluated.
struct Run<'a> {
    args: &'a EvalArgs,
    runner: WindowRunner,
    activations: Activations,
}

/// One model's result.
struct Outcome {
    loss: PerPosition,
    took: Duration,
    /// Bytes of text the predictions stand for.
    predicted_bytes: usize,
}

/// The evaluation text: its file, and the bytes used.
struct Text<'a> {
    path: &'a Path,
    bytes: &'a [u8],
}

/// A model, and the text as its tokens, checked against the context.
fn open_model(path: &Path, text: &Text<'_>, ctx: usize) -> Res<(ModelSource, Tokens)> {
    let source = ModelSource::open(path)?;
    let tokens = Tokens::of(&source.host_tokenizer(path)?, text.bytes)
        .map_err(|e| format!("--text {}: {e}", text.path.display()))?;
    // Too short for any context is the text's fault; for this one, the context's.
    eval::check(&tokens.ids, ctx).map_err(|e| match tokens.ids.len() {
        0 | 1 => format!("--text {}: {e}", text.path.display()),
        _ => format!("--context {ctx}: --text {}: {e}", text.path.display()),
    })?;
    Ok((source, tokens))
}

/// Evaluates one model on the windows of its tokens.
fn evaluate(path: &Path, source: &ModelSource, tokens: &Tokens, run: &Run<'_>) -> Res<Outcome> {
    let Run {
        args,
        runner,
        activations,
    } = *run;
    let ctx = args.context;
    let windows = eval::window_count(tokens.ids.len(), ctx);
    let r = source.with_model(path, |m| {
        let m = &m.with_activations(activations);
        eprintln!(
            "{}: {} {}, {} activations, {} windows of {ctx} predictions over {} tokens of {}, {}",
            path.display(),
            source.kind(),
            m.config().arch.name(),
            activations.name(),
            windows,
            tokens.ids.len(),
            args.text.display(),
            runner.name()
        );
        let pb = progress_bar(windows, "evaluating");
        let start = Instant::now();
        let r = per_position_loss(m, &tokens.ids, ctx, runner, &mut |w| {
            pb.set_position(w as u64)
        });
        pb.finish_and_clear();
        r.map(|loss| Outcome {
            loss,
            took: start.elapsed(),
            predicted_bytes: tokens.predicted_bytes(windows, ctx),
        })
    })??;
    Ok(r)
}

/// Prints one model's bits per byte (after `what`).
fn print_result(what: &str, r: &Outcome) -> Res {
    let total = r.loss.total();
    let per_token = match r.predicted_bytes == total.predictions {
        true => String::new(),
        false => format!("{:.5} bits/token; ", total.bpb()),
    };
    outln!(
        "{what}bits per byte: {:.5} ({per_token}{:.5} nats/byte; {} windows x {} = {} predictions; {:.1} s, {:.0} tokens/s)",
        total.bits / r.predicted_bytes.max(1) as f64,
        total.bits / r.predicted_bytes.max(1) as f64 * std::f64::consts::LN_2,
        total.windows,
        r.loss.ctx(),
        total.predictions,
        r.took.as_secs_f64(),
        total.predictions as f64 / r.took.as_secs_f64()
    );
    Ok(())
}

/// One model's result for `--json`.
fn result_json(path: &Path, r: &Outcome) -> serde_json::Value {
    let total = r.loss.total();
    let bpb = total.bits / r.predicted_bytes.max(1) as f64;
    json!({
        "model": path.display().to_string(),
        "bits_per_byte": bpb,
        "nats_per_byte": bpb * std::f64::consts::LN_2,
        "bits_per_token": total.bpb(),
        "windows": total.windows,
        "context": r.loss.ctx(),
        "predictions": total.predictions,
        "predicted_bytes": r.predicted_bytes,
        "seconds": r.took.as_secs_f64(),
        "tokens_per_s": total.predictions as f64 / r.took.as_secs_f64(),
    })
}
