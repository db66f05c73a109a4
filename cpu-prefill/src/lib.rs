//! `loglinear-cpu-prefill`: prompt prefill on the CPU with the chunkwise algorithm of spec §7,
//! multi-threaded, for hosts and SoCs that have cores but no usable GPU.
//!
//! T tokens go through every layer at once: RMSNorm → mixer (batched projections, short conv,
//! pre-scan ops, the chunk scan of `scan.rs`, post-scan ops, output projection) → residual →
//! RMSNorm → SwiGLU MLP → residual, then the final norm and LM head for the last token (or all
//! of them). The result is the runtime decoder's state after those T tokens, exactly as
//! [`Session::states`] and [`Session::conv_states`] lay it out (Fenwick levels under the same
//! saturating `LevelPolicy`, conv states, t, last logits), so a [`Session`] continues decoding
//! from it ([`prefill_into`], [`Prefill::load_into`]). Weights of any storage type (F32, F16,
//! Q8_0, Q4_0) are dequantized once per prefill.
//!
//! Work is spread over `threads` workers in jobs whose boundaries never depend on the thread
//! count (blocks of 256 tokens for the per-token work and projections, (head, chunk) and
//! (head, 64 value columns) for the scan), so every thread count gives bit-identical results.
//!
//! Why it is faster than stepping: stepping does a matrix–vector product per weight per token,
//! which streams every weight once per token; here each weight serves a block of tokens in a
//! packed SIMD matrix product, and the recurrence becomes dense 64×64 chunk tiles plus one
//! state update per chunk and level instead of per token and level.
//!
//! Numerics, against stepping the same tokens: fp32 throughout, different summation orders
//! (measured relative errors about 2e-6 on states and logits, tolerance 1e-4); SiLU uses a
//! vectorized exponential within 2 ulp of the decoder's; and in the scan decay factors below
//! 2^-100 count as zero and values that would fall below the smallest normal f32 are flushed
//! to zero (both far under fp32 resolution; subnormal arithmetic made strongly decaying heads
//! several times slower, see `scan.rs`), where the decoder keeps tiny and subnormal values. The prefill always computes with f32 activations: a model set to Q8
//! activations (`Model::with_activations`) steps with integer kernels and differs from it by
//! that quantization.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod act;
mod layers;
mod linalg;
mod par;
mod scan;

use loglinear_runtime::math::rmsnorm;
use loglinear_runtime::{
    LevelPolicy, Model, ModelError, Session, SessionError, StateElem, LAMBDA_LEVELS,
};
use std::time::Instant;

/// What a prefill computes besides the state and the last logits, and how.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefillOptions {
    /// State levels (as `SessionConfig::levels`: 2..=15 for log-linear models, 1 for plain);
    /// `None` takes the model's default (15 log-linear, 1 plain). [`prefill_into`] uses the
    /// session's own number instead.
    pub levels: Option<usize>,
    /// Worker threads; `None` (or 0) takes `std::thread::available_parallelism`.
    pub threads: Option<usize>,
    /// Logits at every position, not only the last.
    pub all_logits: bool,
}

/// Where a prefill's time went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timing {
    /// Worker threads used.
    pub threads: usize,
    /// Wall time of the whole prefill, seconds.
    pub seconds: f64,
    /// Seconds per phase, summed over layers, in [`PHASES`] order.
    pub phases: Vec<(&'static str, f64)>,
}

/// The result of a prefill: the decoder state after the last token and the logits.
#[derive(Clone, Debug)]
pub struct Prefill {
    /// Tokens consumed.
    pub t: usize,
    /// State levels per layer.
    pub levels: usize,
    /// Every layer's Fenwick state, `[layer][levels][heads][dk][dv]` ([`Session::states`]).
    pub states: Vec<f32>,
    /// Every layer's conv state, `[layer][channels][W]` ([`Session::conv_states`]).
    pub conv: Vec<f32>,
    /// Next-token logits after the last token.
    pub last_logits: Vec<f32>,
    /// Logits at every position `[T][vocab]`, when asked for.
    pub all_logits: Option<Vec<f32>>,
    /// Where the time went.
    pub timing: Timing,
}

impl Prefill {
    /// Hands the state and the last logits to a session of the same model (narrowed to f16 if
    /// the session stores f16): the session is then where stepping all `t` tokens from a fresh
    /// start would have left it. The session must have the same number of levels.
    pub fn load_into<E: StateElem>(
        &self,
        session: &mut Session<'_, E>,
    ) -> Result<(), PrefillError> {
        if session.policy().levels() != self.levels {
            return Err(PrefillError::LevelsMismatch {
                prefill: self.levels,
                session: session.policy().levels(),
            });
        }
        let states: Vec<E> = self.states.iter().map(|&x| E::store(x)).collect();
        session.load_state(self.t as u64, &states, &self.conv)?;
        session.load_logits(&self.last_logits)?;
        Ok(())
    }
}

/// Why a prefill could not run. Bad input is always one of these, never a panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillError {
    /// No tokens.
    EmptyPrompt,
    /// A token id is not below the vocabulary size.
    TokenOutOfRange {
        /// Position in the prompt.
        index: usize,
        /// The token given.
        token: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// `levels` must be 1 for plain models and 2..=15 for log-linear ones.
    InvalidLevels(usize),
    /// [`prefill_into`]: the session belongs to a model of another config.
    ModelMismatch,
    /// [`Prefill::load_into`]: the session keeps another number of levels.
    LevelsMismatch {
        /// Levels of the prefill.
        prefill: usize,
        /// Levels of the session.
        session: usize,
    },
    /// The weight source stopped returning a tensor it returned at validation.
    Weights(ModelError),
    /// The session refused the state.
    Session(SessionError),
}

impl core::fmt::Display for PrefillError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PrefillError::EmptyPrompt => write!(f, "prefill needs at least one token"),
            PrefillError::TokenOutOfRange {
                index,
                token,
                vocab_size,
            } => write!(
                f,
                "token {token} at position {index} out of range (vocabulary {vocab_size})"
            ),
            PrefillError::InvalidLevels(n) => write!(
                f,
                "invalid number of state levels {n}: plain models take 1, log-linear 2..={LAMBDA_LEVELS}"
            ),
            PrefillError::ModelMismatch => {
                write!(f, "the session belongs to a model of another config")
            }
            PrefillError::LevelsMismatch { prefill, session } => write!(
                f,
                "the prefill has {prefill} state levels, the session {session}"
            ),
            PrefillError::Weights(e) => write!(f, "weights: {e}"),
            PrefillError::Session(e) => write!(f, "session: {e}"),
        }
    }
}

impl std::error::Error for PrefillError {}

impl From<ModelError> for PrefillError {
    fn from(e: ModelError) -> Self {
        PrefillError::Weights(e)
    }
}

impl From<SessionError> for PrefillError {
    fn from(e: SessionError) -> Self {
        PrefillError::Session(e)
    }
}

/// Names of the phases of [`Timing::phases`], in order.
pub const PHASES: [&str; 4] = [
    "projections, conv and pre-scan ops",
    "chunk scan",
    "post-scan ops, out proj and MLP",
    "embedding, final norm and LM head",
];

/// Accumulates wall time per phase.
pub(crate) struct Timer {
    last: Instant,
    phases: [f64; 4],
}

impl Timer {
    const PRE: usize = 0;
    const SCAN: usize = 1;
    const POST: usize = 2;
    const HEAD: usize = 3;

    fn new() -> Self {
        Self {
            last: Instant::now(),
            phases: [0.0; 4],
        }
    }

    /// Charges the time since the last lap to `phase`.
    fn lap(&mut self, phase: usize) {
        let now = Instant::now();
        self.phases[phase] += (now - self.last).as_secs_f64();
        self.last = now;
    }
}

/// The capacity policy of `levels` state levels, if `levels` suits the model (as
/// `SessionConfig::levels`).
fn policy_for(model: &Model<'_>, levels: usize) -> Result<LevelPolicy, PrefillError> {
    let ok = if model.config().arch.is_log_linear() {
        (2..=LAMBDA_LEVELS).contains(&levels)
    } else {
        levels == 1
    };
    match LevelPolicy::new(levels) {
        Some(p) if ok => Ok(p),
        _ => Err(PrefillError::InvalidLevels(levels)),
    }
}

fn check_tokens(model: &Model<'_>, tokens: &[u32]) -> Result<(), PrefillError> {
    if tokens.is_empty() {
        return Err(PrefillError::EmptyPrompt);
    }
    let vocab_size = model.config().vocab_size;
    match tokens
        .iter()
        .enumerate()
        .find(|(_, &id)| id as usize >= vocab_size)
    {
        Some((index, &token)) => Err(PrefillError::TokenOutOfRange {
            index,
            token,
            vocab_size,
        }),
        None => Ok(()),
    }
}

/// The thread count `opts` asks for: its `threads`, or the machine's available parallelism.
pub fn threads_for(opts: &PrefillOptions) -> usize {
    match opts.threads {
        Some(n) if n > 0 => n,
        _ => std::thread::available_parallelism().map_or(1, |n| n.get()),
    }
}

/// Runs `tokens` through `model` chunkwise and returns the decoder state after the last one,
/// its logits, and (if asked) the logits of every position.
pub fn prefill(
    model: &Model<'_>,
    tokens: &[u32],
    opts: &PrefillOptions,
) -> Result<Prefill, PrefillError> {
    let c = *model.config();
    let levels = opts.levels.unwrap_or(c.default_state_levels());
    let policy = policy_for(model, levels)?;
    check_tokens(model, tokens)?;
    let threads = threads_for(opts);
    let start = Instant::now();
    let mut timer = Timer::new();
    let (t_len, d) = (tokens.len(), c.hidden_size);
    let g = model.globals()?;

    let mut x = vec![0.0f32; t_len * d];
    for (row, &id) in x.chunks_exact_mut(d).zip(tokens) {
        g.embedding.row_into(id as usize, row);
    }
    let mut h = vec![0.0f32; t_len * d];
    let mut out = vec![0.0f32; t_len * d];
    let mut work = layers::Work::default();
    let mut states = Vec::new();
    let mut conv = Vec::new();
    timer.lap(Timer::HEAD);
    let setup = layers::MixerSetup {
        config: &c,
        threads,
        policy,
    };
    for layer in 0..c.num_layers {
        let norms = model.norms(layer)?;
        layers::rmsnorm_rows(threads, &x, norms.mixer, c.norm_eps, &mut h);
        let st = if c.arch.is_mamba2() {
            let w = model.mamba2(layer)?;
            layers::mamba2(&setup, &w, &h, &mut out, &mut work, &mut timer)
        } else {
            let w = model.gdn(layer)?;
            layers::gdn(&setup, &w, &h, &mut out, &mut work, &mut timer)
        };
        states.extend_from_slice(&st.fenwick);
        conv.extend_from_slice(&st.conv);
        layers::add_rows(threads, &mut x, &out, d);
        layers::rmsnorm_rows(threads, &x, norms.mlp, c.norm_eps, &mut h);
        layers::mlp(&model.mlp(layer)?, threads, &h, &mut out, &mut work);
        layers::add_rows(threads, &mut x, &out, d);
        timer.lap(Timer::POST);
    }

    // The last token's logits with the decoder's own matvec (same rounding); every position's
    // through one batched product when asked for.
    let v = c.vocab_size;
    let mut last_logits = vec![0.0f32; v];
    let last = &x[(t_len - 1) * d..];
    rmsnorm(last, g.final_norm, c.norm_eps, &mut h[..d]);
    g.lm_head.matvec(&h[..d], &mut last_logits);
    let all_logits = if opts.all_logits {
        layers::rmsnorm_rows(threads, &x, g.final_norm, c.norm_eps, &mut h);
        let mut all = vec![0.0f32; t_len * v];
        linalg::project(threads, &h, d, &linalg::dense(&g.lm_head), v, &mut all);
        Some(all)
    } else {
        None
    };
    timer.lap(Timer::HEAD);

    Ok(Prefill {
        t: t_len,
        levels,
        states,
        conv,
        last_logits,
        all_logits,
        timing: Timing {
            threads,
            seconds: start.elapsed().as_secs_f64(),
            phases: PHASES.iter().copied().zip(timer.phases).collect(),
        },
    })
}

/// Prefills `tokens` with `session`'s number of levels and hands the state to it: the session
/// then continues decoding after the last token, and its `logits()` are the prompt's last
/// logits. Whatever the session held before is replaced. `session` must be a session of
/// `model` (checked by config); `opts.levels` is ignored.
pub fn prefill_into<E: StateElem>(
    model: &Model<'_>,
    tokens: &[u32],
    session: &mut Session<'_, E>,
    opts: &PrefillOptions,
) -> Result<Prefill, PrefillError> {
    if session.model().config() != model.config() {
        return Err(PrefillError::ModelMismatch);
    }
    let opts = PrefillOptions {
        levels: Some(session.policy().levels()),
        ..*opts
    };
    let p = prefill(model, tokens, &opts)?;
    p.load_into(session)?;
    Ok(p)
}
