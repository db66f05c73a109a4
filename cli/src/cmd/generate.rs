//! `loglinear generate`: text from a prompt, streamed to stdout, with the prompt fed token by
//! token, chunkwise on the CPU or on a GPU, and sessions saved and resumed as snapshots.

use crate::{snapshot_file, ActivationsArg, CliError, Res, SamplingArgs, StateDtype};
use clap::ValueEnum;
use loglinear_converter::command_paths::{CommandPaths, Reads, Writes};
use loglinear_converter::model_source::ModelSource;
use loglinear_converter::tokenize::HostTokenizer;
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::session::{Session, SessionConfig};
use loglinear_runtime::{Model, StateElem};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// `loglinear generate`'s arguments.
#[derive(clap::Args)]
pub(crate) struct GenerateArgs {
    /// GGUF model file or checkpoint folder (config.json + model.safetensors) [default: the
    /// shipped ll-gdn-mcu (Shakespeare, 1.4M parameters, Q8_0), models/ll-gdn-mcu-q8_0.gguf
    /// of the repository that holds this binary].
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Prompt text, with C-style escapes: \n \t \r \0 \\ \xHH (any byte) \u{H…}; taken
    /// as the bytes given, UTF-8 or not [default: `ROMEO:\n`; with --resume, none: a prompt
    /// given there is fed after the restored session, token by token].
    #[arg(long, value_parser = clap::builder::OsStringValueParser::new())]
    pub prompt: Option<std::ffi::OsString>,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 300)]
    pub tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// State levels (default: the model's: 15 log-linear, 1 plain).
    #[arg(long)]
    pub levels: Option<usize>,
    /// State storage type (default f32).
    #[arg(long, value_enum)]
    pub state: Option<StateDtype>,
    /// Inputs of quantized matvecs: f32, or Q8 through the integer kernels.
    #[arg(long, value_enum, default_value = "f32")]
    pub activations: ActivationsArg,
    /// How the prompt is fed: `step` (token by token through the decoder, exactly what a
    /// board does), `chunkwise` (the §7 chunk algorithm on all CPU cores, much faster for
    /// long prompts; same state up to f32 rounding) or `gpu` (one chunk-scan pass on a GPU
    /// through wgpu: Vulkan, Metal or DX12; lavapipe without a GPU). Decoding is on the CPU.
    #[arg(long, value_enum, default_value = "step")]
    pub prefill: PrefillArg,
    /// Worker threads of `--prefill chunkwise`, 1 to 4096 (default: every core).
    #[arg(long, value_parser = crate::args::parse_threads)]
    pub threads: Option<usize>,
    /// Same as `--prefill gpu`.
    #[arg(long)]
    pub gpu: bool,
    /// After generating, save the session (state, t, conv states, last logits, sampler
    /// PRNG, model fingerprint) to FILE, atomically, for `--resume` here or on a board.
    #[arg(long, value_name = "FILE")]
    pub save_snapshot: Option<PathBuf>,
    /// Resume a saved session (from `--save-snapshot` or a board's `SNAP`): state type and
    /// levels come from the snapshot; a `--prompt` is fed after it, token by token; pass the
    /// same sampling settings to continue the same stream bit-identically.
    #[arg(long, value_name = "FILE")]
    pub resume: Option<PathBuf>,
}

impl GenerateArgs {
    /// What `generate` reads and writes (the shipped model when no `--model` is given).
    pub(crate) fn paths(&self) -> Res<CommandPaths> {
        let model = match &self.model {
            Some(path) => path.clone(),
            None => crate::args::default_model()?,
        };
        Ok(CommandPaths::new()
            .reads("--model", Some(&model), Reads::Model)
            .reads("--resume", self.resume.as_deref(), Reads::File)
            .writes(
                "--save-snapshot",
                self.save_snapshot.as_deref(),
                Writes::File,
            ))
    }
}

/// Runs `loglinear generate`.
pub(crate) fn run(args: GenerateArgs) -> Res {
    let GenerateArgs {
        model,
        prompt,
        tokens,
        sampling,
        levels,
        state,
        activations,
        prefill,
        threads,
        gpu,
        save_snapshot,
        resume,
    } = args;
    let prefill = match (gpu, prefill) {
        (true, _) | (false, PrefillArg::Gpu) => Prefill::Gpu,
        (false, PrefillArg::Step) => Prefill::Cpu,
        (false, PrefillArg::Chunkwise) => Prefill::Chunkwise { threads },
    };
    if threads.is_some() && !matches!(prefill, Prefill::Chunkwise { .. }) {
        return Err(
            "--threads sets the workers of --prefill chunkwise: add it, or drop --threads".into(),
        );
    }
    let model = match model {
        Some(path) => path,
        None => crate::args::default_model()?,
    };
    let source = ModelSource::open(&model)?;
    let tokenizer = source.host_tokenizer(&model)?;
    let prompt = match (&prompt, &resume) {
        (Some(p), _) => crate::prompt::unescape_arg(p)?,
        (None, Some(_)) => Vec::new(),
        (None, None) => DEFAULT_PROMPT.to_vec(),
    };
    // A restored session goes on from its state; the chunk prefills start from an empty one.
    if resume.is_some() && !prompt.is_empty() && prefill != Prefill::Cpu {
        return Err(
            "--prefill chunkwise and --prefill gpu start from an empty state: a prompt after \
             --resume is fed token by token (drop --prefill, or --prompt)"
                .into(),
        );
    }
    let prompt_tokens = tokenizer
        .encode_bytes(&prompt)
        .map_err(|e| format!("--prompt: {e}"))?;
    let sampler = sampling.config();
    let mut cfg = SessionConfig {
        levels,
        activations: Some(activations.mode()),
    };
    let mut state = state;
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
        let saved_state = match h.dtype {
            loglinear_runtime::snapshot::StateDtype::F32 => StateDtype::F32,
            loglinear_runtime::snapshot::StateDtype::F16 => StateDtype::F16,
        };
        // The snapshot fixes both; a flag that says otherwise is a mistake, not a request.
        if levels.is_some_and(|l| l != h.levels) || state.is_some_and(|s| s != saved_state) {
            return Err(format!(
                "{} holds a session with {} levels and {} state; --levels and --state must \
                 match it or be left out",
                path.display(),
                h.levels,
                saved_state.name()
            )
            .into());
        }
        cfg.levels = Some(h.levels);
        state = Some(saved_state);
        snap.resume = Some((path.clone(), bytes));
    }
    if snap.resume.is_none() && prompt.is_empty() {
        return Err(CliError::EmptyPrompt.into());
    }
    let job = Job {
        prompt: &prompt,
        prompt_tokens: &prompt_tokens,
        tokens,
        sampler,
        cfg,
        prefill,
        snap: &snap,
        tokenizer: &tokenizer,
    };
    source.with_model(&model, |m| match state.unwrap_or(StateDtype::F32) {
        StateDtype::F32 => generate::<f32>(m, &job),
        StateDtype::F16 => generate::<half::f16>(m, &job),
    })?
}

/// The prompt of a run that gives none and resumes nothing.
const DEFAULT_PROMPT: &[u8] = b"ROMEO:\n";

/// What one `generate` run does, besides the model.
struct Job<'a> {
    /// The prompt's bytes, echoed to stdout (fed after the restored session when resuming).
    prompt: &'a [u8],
    /// Its tokens.
    prompt_tokens: &'a [u32],
    /// Tokens to generate.
    tokens: usize,
    sampler: SamplerConfig,
    cfg: SessionConfig,
    prefill: Prefill,
    snap: &'a Snapshots,
    /// Turns generated tokens into bytes.
    tokenizer: &'a HostTokenizer,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PrefillArg {
    Step,
    Chunkwise,
    Gpu,
}

/// Where `generate` runs the prompt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prefill {
    /// Token by token through the CPU decoder.
    Cpu,
    /// The chunk algorithm on CPU threads (`loglinear-cpu-prefill`).
    Chunkwise {
        /// Worker threads (`None`: every core).
        threads: Option<usize>,
    },
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

fn generate<E: StateElem>(model: &Model<'_>, job: &Job<'_>) -> Res {
    let Job {
        prompt,
        prompt_tokens,
        tokens,
        sampler,
        cfg,
        prefill: prefill_on,
        snap,
        tokenizer,
    } = *job;
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
    }
    let start = Instant::now();
    let gpu_note = match prefill_on {
        Prefill::Gpu if !prompt_tokens.is_empty() => {
            Some(gpu_prefill(model, prompt_tokens, &mut session)?)
        }
        Prefill::Chunkwise { threads } if !prompt_tokens.is_empty() => {
            let p = loglinear_cpu_prefill::prefill_into(
                model,
                prompt_tokens,
                &mut session,
                &loglinear_cpu_prefill::PrefillOptions {
                    threads,
                    ..Default::default()
                },
            )?;
            Some(format!(
                "chunkwise CPU prefill on {} threads: {:.1} ms",
                p.timing.threads,
                p.timing.seconds * 1e3
            ))
        }
        Prefill::Gpu | Prefill::Cpu | Prefill::Chunkwise { .. } => {
            for &tok in prompt_tokens {
                session.step(tok)?;
            }
            None
        }
    };
    let prefill = start.elapsed();
    let out = std::io::stdout();
    let mut out = out.lock();
    out.write_all(prompt)?;
    let start = Instant::now();
    // Padding ids of a BPE vocabulary are not tokens: they get no probability.
    let unused = tokenizer.unused_ids();
    let mut logits = Vec::new();
    for _ in 0..tokens {
        let next = if unused.is_empty() {
            sampler.sample(session.logits(), &mut scratch)?
        } else {
            logits.clear();
            logits.extend_from_slice(session.logits());
            for &id in unused {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
            sampler.sample(&logits, &mut scratch)?
        };
        let bytes = tokenizer.decode(&[next])?;
        if !bytes.is_empty() {
            out.write_all(&bytes)?;
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
        crate::write_file(path, &bytes)?;
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
