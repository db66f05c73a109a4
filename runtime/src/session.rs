//! One decoding stream: the Fenwick states, conv states and scratch of a model, carved once
//! from a caller-provided byte arena. After [`Session::new`] succeeds, [`Session::step`] never
//! allocates and never fails for capacity (see [`crate::level::LevelPolicy`]).

use crate::arena::Arena;
use crate::fenwick::{state_len, FenwickState, StateElem};
use crate::layers::{mixer_scratch_len, mixer_step, mlp_scratch_len, mlp_step, LayerState};
use crate::level::{LevelPolicy, LAMBDA_LEVELS};
use crate::math::rmsnorm;
use crate::model::{Model, ModelError};
use crate::quant::{ActBlock, Activations};
use crate::tensor::MatvecInput;

/// Points inside a step where [`Session::step_observed`] shows intermediate values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The mixer's output (before the residual add).
    MixerOut,
    /// The residual stream after the whole block.
    BlockOut,
}

/// Options fixed at session creation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionConfig {
    /// Number of state levels; `None` takes the model's default (15 log-linear, 1 plain).
    /// Fewer levels save RAM: the top level then saturates earlier (at 2^(levels−1) tokens).
    pub levels: Option<usize>,
    /// How matvecs with quantized weights treat their input: f32 (the reference maths) or Q8
    /// blocks through the integer kernels (faster; see [`Activations`]). `None` keeps the
    /// model's ([`Model::activations`], f32 unless set with [`Model::with_activations`]).
    pub activations: Option<Activations>,
}

/// Why a session cannot be created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SessionError {
    /// The arena is too small: `needed` bytes are required, `available` were given.
    ArenaTooSmall {
        /// Bytes needed (worst-case alignment included).
        needed: usize,
        /// Bytes given.
        available: usize,
    },
    /// `levels` must be 1 for plain models and 2..=15 for log-linear ones.
    InvalidLevels(usize),
    /// A state handed to [`Session::load_state`] has the wrong number of elements.
    StateShape {
        /// Which part: `"fenwick"`, `"conv"` or `"logits"`.
        part: &'static str,
        /// Elements the session holds.
        expected: usize,
        /// Elements given.
        got: usize,
    },
}

impl core::fmt::Display for SessionError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SessionError::ArenaTooSmall { needed, available } => write!(
                f,
                "session arena too small: {needed} bytes needed, {available} given"
            ),
            SessionError::InvalidLevels(n) => write!(
                f,
                "invalid number of state levels {n}: plain models take 1, log-linear 2..={LAMBDA_LEVELS}"
            ),
            SessionError::StateShape {
                part,
                expected,
                got,
            } => write!(
                f,
                "{part} state has {got} elements, the session holds {expected}"
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SessionError {}

/// Why a step failed. Never capacity: the state saturates instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StepError {
    /// The token id is not below the vocabulary size.
    TokenOutOfRange {
        /// The token given.
        token: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The weight source stopped returning a tensor it returned at validation.
    Weights(ModelError),
    /// The session's state slices do not fit the model's layout. They are carved from the same
    /// layout, so this is an internal error; it is reported rather than risking wrong output.
    StateLayout,
}

impl core::fmt::Display for StepError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StepError::TokenOutOfRange { token, vocab_size } => {
                write!(f, "token {token} out of range (vocabulary {vocab_size})")
            }
            StepError::Weights(e) => write!(f, "weights: {e}"),
            StepError::StateLayout => write!(f, "internal error: session state layout mismatch"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for StepError {}

impl From<ModelError> for StepError {
    fn from(e: ModelError) -> Self {
        StepError::Weights(e)
    }
}

/// A decoding stream over one model. `E` is the state storage type (f32, or `half::f16`
/// to halve the state RAM).
pub struct Session<'m, E: StateElem = f32> {
    model: Model<'m>,
    policy: LevelPolicy,
    t: u64,
    states: &'m mut [E],
    conv: &'m mut [f32],
    x: &'m mut [f32],
    h: &'m mut [f32],
    mixer_scratch: &'m mut [f32],
    mlp_scratch: &'m mut [f32],
    act: &'m mut [ActBlock],
    logits: &'m mut [f32],
}

/// Sizes of the pieces of a session, in elements.
struct Layout {
    state_per_layer: usize,
    conv_per_layer: usize,
}

impl<'m, E: StateElem> Session<'m, E> {
    fn policy_for(model: &Model<'_>, cfg: &SessionConfig) -> Result<LevelPolicy, SessionError> {
        let c = model.config();
        let levels = cfg.levels.unwrap_or(c.default_state_levels());
        let ok = if c.arch.is_log_linear() {
            (2..=LAMBDA_LEVELS).contains(&levels)
        } else {
            levels == 1
        };
        match LevelPolicy::new(levels) {
            Some(p) if ok => Ok(p),
            _ => Err(SessionError::InvalidLevels(levels)),
        }
    }

    fn layout(model: &Model<'_>, policy: LevelPolicy) -> Layout {
        let c = model.config();
        Layout {
            state_per_layer: state_len(policy.levels(), c.num_heads, c.head_k_dim, c.head_v_dim),
            conv_per_layer: c.conv_channels() * c.conv_kernel,
        }
    }

    /// Carves every buffer from `arena`; with an empty arena this only counts.
    #[allow(clippy::type_complexity)]
    fn carve<'a>(
        model: &Model<'_>,
        cfg: &SessionConfig,
        policy: LevelPolicy,
        arena: &mut Arena<'a>,
    ) -> Option<(
        &'a mut [E],
        &'a mut [f32],
        &'a mut [f32],
        &'a mut [f32],
        &'a mut [f32],
        &'a mut [f32],
        &'a mut [ActBlock],
        &'a mut [f32],
    )> {
        let c = model.config();
        let l = Self::layout(model, policy);
        // Take everything before checking, so that `needed` counts the whole layout.
        let states = arena.take::<E>(l.state_per_layer * c.num_layers);
        let conv = arena.take::<f32>(l.conv_per_layer * c.num_layers);
        let x = arena.take::<f32>(c.hidden_size);
        let h = arena.take::<f32>(c.hidden_size);
        let mix = arena.take::<f32>(mixer_scratch_len(c).max(c.hidden_size));
        let mlp = arena.take::<f32>(mlp_scratch_len(c) + c.hidden_size);
        // Q8 activation blocks exist only in Q8 mode: f32 sessions pay no RAM for them.
        let act_blocks = match cfg.activations.unwrap_or(model.activations()) {
            Activations::F32 => 0,
            Activations::Q8 => model.act_blocks(),
        };
        let act = arena.take::<ActBlock>(act_blocks);
        let logits = arena.take::<f32>(c.vocab_size);
        Some((states?, conv?, x?, h?, mix?, mlp?, act?, logits?))
    }

    /// Bytes of arena a session of `model` with `cfg` needs.
    pub fn arena_bytes(model: &Model<'_>, cfg: &SessionConfig) -> Result<usize, SessionError> {
        let policy = Self::policy_for(model, cfg)?;
        let mut dry = Arena::new(&mut []);
        let _ = Self::carve(model, cfg, policy, &mut dry);
        Ok(dry.needed())
    }

    /// A fresh session (t = 0, zero state). Fails if `arena` is too small, saying how much is
    /// needed, or if `cfg.levels` does not suit the model.
    pub fn new(
        model: &Model<'m>,
        arena: &'m mut [u8],
        cfg: SessionConfig,
    ) -> Result<Self, SessionError> {
        let policy = Self::policy_for(model, &cfg)?;
        let needed = Self::arena_bytes(model, &cfg)?;
        let available = arena.len();
        // Refuse anything below the advertised size, even when a lucky alignment would fit:
        // the figure a memory planner reads must be the one that decides.
        if available < needed {
            return Err(SessionError::ArenaTooSmall { needed, available });
        }
        let mut a = Arena::new(arena);
        let (states, conv, x, h, mixer_scratch, mlp_scratch, act, logits) =
            Self::carve(model, &cfg, policy, &mut a)
                .ok_or(SessionError::ArenaTooSmall { needed, available })?;
        Ok(Self {
            model: model.with_activations(cfg.activations.unwrap_or(model.activations())),
            policy,
            t: 0,
            states,
            conv,
            x,
            h,
            mixer_scratch,
            mlp_scratch,
            act,
            logits,
        })
    }

    /// The model.
    pub fn model(&self) -> &Model<'m> {
        &self.model
    }

    /// Tokens consumed so far.
    pub fn t(&self) -> u64 {
        self.t
    }

    /// The capacity policy in force.
    pub fn policy(&self) -> LevelPolicy {
        self.policy
    }

    /// Live levels per layer and head right now (after the last step), level 0 included;
    /// 0 before the first token.
    pub fn live_levels(&self) -> usize {
        if self.t == 0 {
            0
        } else {
            self.policy.live_count(self.t - 1)
        }
    }

    /// Bytes of one level of one layer (all heads).
    fn level_bytes(&self) -> usize {
        let c = self.model.config();
        c.num_heads * c.head_k_dim * c.head_v_dim * core::mem::size_of::<E>()
    }

    /// Bytes of recurrent state that hold information now: live levels and conv states.
    pub fn live_state_bytes(&self) -> usize {
        let c = self.model.config();
        c.num_layers * (self.live_levels() * self.level_bytes() + self.conv_bytes_per_layer())
    }

    /// Bytes of recurrent state allocated (all levels and conv states), fixed for the session.
    pub fn allocated_state_bytes(&self) -> usize {
        let c = self.model.config();
        c.num_layers * (self.policy.levels() * self.level_bytes() + self.conv_bytes_per_layer())
    }

    fn conv_bytes_per_layer(&self) -> usize {
        let c = self.model.config();
        c.conv_channels() * c.conv_kernel * 4
    }

    /// Back to t = 0 with a zero state.
    pub fn reset(&mut self) {
        self.t = 0;
        self.states.fill(E::default());
        self.conv.fill(0.0);
    }

    /// The stored Fenwick state of `layer`, `[level][head][dk][dv]`.
    pub fn layer_state(&self, layer: usize) -> &[E] {
        let n = self.states.len() / self.model.config().num_layers;
        &self.states[layer * n..(layer + 1) * n]
    }

    /// The conv state of `layer`, `[channel][W]` (GDN: q, then k, then v channels).
    pub fn conv_state(&self, layer: usize) -> &[f32] {
        let n = self.conv.len() / self.model.config().num_layers;
        &self.conv[layer * n..(layer + 1) * n]
    }

    /// The whole stored Fenwick state, every layer in [`Session::layer_state`] layout one after
    /// another.
    pub fn states(&self) -> &[E] {
        self.states
    }

    /// The whole conv state, every layer in [`Session::conv_state`] layout one after another.
    pub fn conv_states(&self) -> &[f32] {
        self.conv
    }

    /// Replaces the recurrent state with one computed elsewhere (a GPU prefill, a snapshot):
    /// `t` tokens consumed, `states` and `conv` laid out as [`Session::states`] and
    /// [`Session::conv_states`]. The caller vouches that the state is the one this session's
    /// policy would hold after `t` tokens; on a shape mismatch nothing changes.
    pub fn load_state(&mut self, t: u64, states: &[E], conv: &[f32]) -> Result<(), SessionError> {
        if states.len() != self.states.len() {
            return Err(SessionError::StateShape {
                part: "fenwick",
                expected: self.states.len(),
                got: states.len(),
            });
        }
        if conv.len() != self.conv.len() {
            return Err(SessionError::StateShape {
                part: "conv",
                expected: self.conv.len(),
                got: conv.len(),
            });
        }
        self.states.copy_from_slice(states);
        self.conv.copy_from_slice(conv);
        self.t = t;
        Ok(())
    }

    /// Sets the logits that [`Session::logits`] returns, as the last step would have: used
    /// with [`Session::load_state`] when the state and the last logits were computed elsewhere.
    pub fn load_logits(&mut self, logits: &[f32]) -> Result<(), SessionError> {
        if logits.len() != self.logits.len() {
            return Err(SessionError::StateShape {
                part: "logits",
                expected: self.logits.len(),
                got: logits.len(),
            });
        }
        self.logits.copy_from_slice(logits);
        Ok(())
    }

    /// Everything a snapshot restores, mutable: t, the Fenwick state, the conv state and the
    /// logits. Crate-internal: [`crate::snapshot`] validates a snapshot fully before using it.
    pub(crate) fn restore_parts(&mut self) -> (&mut u64, &mut [E], &mut [f32], &mut [f32]) {
        (&mut self.t, self.states, self.conv, self.logits)
    }

    /// The logits of the last step.
    pub fn logits(&self) -> &[f32] {
        self.logits
    }

    /// Feeds one token; returns the next-token logits.
    pub fn step(&mut self, token: u32) -> Result<&[f32], StepError> {
        self.step_observed(token, &mut |_, _, _| {})
    }

    /// [`Session::step`], calling `observe(layer, probe, values)` at each [`Probe`] point.
    pub fn step_observed(
        &mut self,
        token: u32,
        observe: &mut dyn FnMut(usize, Probe, &[f32]),
    ) -> Result<&[f32], StepError> {
        let c = *self.model.config();
        if token as usize >= c.vocab_size {
            return Err(StepError::TokenOutOfRange {
                token,
                vocab_size: c.vocab_size,
            });
        }
        let g = self.model.globals()?;
        let c_mode = self.model.activations();
        g.embedding.row_into(token as usize, self.x);
        let t = self.t;
        let state_n = self.states.len() / c.num_layers;
        let conv_n = self.conv.len() / c.num_layers;
        for layer in 0..c.num_layers {
            let norms = self.model.norms(layer)?;
            let states = &mut self.states[layer * state_n..(layer + 1) * state_n];
            let conv = &mut self.conv[layer * conv_n..(layer + 1) * conv_n];
            let Some(fenwick) =
                FenwickState::new(states, self.policy, c.num_heads, c.head_k_dim, c.head_v_dim)
            else {
                return Err(StepError::StateLayout);
            };
            let mut state = LayerState { fenwick, conv, t };
            // Mixer: x += mixer(RMSNorm(x)).
            rmsnorm(self.x, norms.mixer, c.norm_eps, self.h);
            let out = &mut self.mlp_scratch[..c.hidden_size];
            mixer_step(
                &self.model,
                layer,
                &mut state,
                self.h,
                out,
                self.mixer_scratch,
                self.act,
            )?;
            observe(layer, Probe::MixerOut, out);
            for (x, o) in self.x.iter_mut().zip(out.iter()) {
                *x += o;
            }
            // MLP: x += MLP(RMSNorm(x)).
            rmsnorm(self.x, norms.mlp, c.norm_eps, self.h);
            let w = self.model.mlp(layer)?;
            let (out, scratch) = self.mlp_scratch.split_at_mut(c.hidden_size);
            mlp_step(&w, c_mode, self.h, out, scratch, self.act);
            for (x, o) in self.x.iter_mut().zip(out.iter()) {
                *x += o;
            }
            observe(layer, Probe::BlockOut, self.x);
        }
        rmsnorm(self.x, g.final_norm, c.norm_eps, self.h);
        let h = MatvecInput::new(self.h, c_mode, self.act);
        g.lm_head.matvec_input(&h, self.logits);
        self.t += 1;
        Ok(self.logits)
    }
}
