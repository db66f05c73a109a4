//! `loglinear`: the host command line.

use clap::{Parser, Subcommand, ValueEnum};
use loglinear_converter::Checkpoint;
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::session::{Session, SessionConfig};
use loglinear_runtime::{tokenizer, StateElem};
use std::io::Write;
use std::path::PathBuf;
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
