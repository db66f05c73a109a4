//! The memory planner of loglinear: will a model run on a board, and with which state settings?
//!
//! One planner serves both `loglinear plan` (the converter's CLI) and `firmware/build.rs`, which
//! fails the build with this crate's report when the model does not fit the board.
//!
//! It reads the board profile (`boards/<name>/board.toml`: flash and RAM regions, stack and
//! code reserves, default state settings, see [`BoardProfile`]) and a model (GGUF bytes), and
//! reports
//!
//! * **flash** = code estimate (the board's `firmware.code_reserve`) + model bytes;
//! * **RAM** = the session arena exactly as [`Session::arena_bytes`] sizes it (the firmware's
//!   `static ARENA` in `.bss`), split into Fenwick state (allocated, and live at context T under
//!   the saturating [`LevelPolicy`]), conv states and scratch, plus the other statics
//!   ([`other_statics`]) and the stack estimate: the sampler scratch (`[u32; vocab]`, on the
//!   stack) plus the board's stack reserve;
//! * whether it fits (and by how much it does not), the largest context that fits, and the
//!   most levels that fit for each state type;
//! * with the model's measured quality table (bits per byte against kept levels and state
//!   type, [`QualityTable`]), which levels and state type to run at a context ([`recommend`]).
//!
//! Every byte figure of the session comes from the runtime itself (a real [`Session`] carved
//! from a host buffer), never from a re-derived formula.

mod board;
mod clock;
mod quality;

pub use board::{
    Board, BoardProfile, LinuxBoard, Region, SnapshotRegion, SustainedInput, Transport,
};
pub use clock::{stm32l4_pll, Stm32l4Pll, Stm32l4PllSource};
pub use quality::{recommend, QualityRow, QualityTable, Recommendation};

use loglinear_runtime::gguf::{GgufModel, ModelFileError};
use loglinear_runtime::level::{LevelPolicy, LAMBDA_LEVELS};
pub use loglinear_runtime::quant::Activations;
use loglinear_runtime::session::{Session, SessionConfig, SessionError};
use loglinear_runtime::{Model, ModelError, StateElem};
use std::fmt;
use std::path::{Path, PathBuf};

/// RAM for statics other than the session arena. Measured on the linked firmware of the QEMU
/// boards (`cargo xtask plan`), `.bss + .data` exceeds the arena by 3-9 B: the arena's
/// guard flag and the rounding of `ArenaCell` up to its 32-byte alignment (at most 32 B). 64 B
/// also covers up to 31 B of padding before the 32-byte-aligned arena and a few bytes of other
/// statics; `cargo xtask plan` fails if the ELF ever needs more.
pub const OTHER_STATICS: u64 = 64;

/// The other statics of an image built by a HAL board crate (`boards/<board>/Cargo.toml`), on top
/// of [`OTHER_STATICS`]: the serial link's two byte queues (2 × 2048 B), the HAL UART driver's
/// ring buffers (1,280 B) or the USB device's descriptor and packet buffers, the interrupt
/// executor's task and the HAL's driver state: `.bss` + `.data` less the planner's arena, 6,306 B
/// on `b-l475e-iot01a` (`cargo xtask plan`) and 6,489 B on `stm32h743` (its size.txt against
/// `loglinear plan`'s arena);
/// 8 KiB leaves room for a driver's growth, and `cargo xtask plan` fails if the ELF needs more.
pub const HAL_BOARD_STATICS: u64 = 8192;

/// The allowance for statics besides the arena on `board`: [`OTHER_STATICS`], plus
/// [`HAL_BOARD_STATICS`] where a crate of the board's own builds its image.
pub fn other_statics(board: &BoardProfile) -> u64 {
    let hal_crate = board.path.with_file_name("Cargo.toml").is_file();
    OTHER_STATICS + if hal_crate { HAL_BOARD_STATICS } else { 0 }
}

/// State storage type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum StateType {
    /// 4 bytes per state element.
    F32,
    /// 2 bytes per state element.
    F16,
}

impl StateType {
    /// `"f32"` or `"f16"` (as in `board.toml` and `LOGLINEAR_STATE`).
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "f32" => Some(Self::F32),
            "f16" => Some(Self::F16),
            _ => None,
        }
    }
}

impl fmt::Display for StateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        })
    }
}

/// The text of a board profile or quality table.
fn read_text(path: &Path) -> Result<String, PlanError> {
    std::fs::read_to_string(path).map_err(|source| PlanError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The board names no folder with a `board.toml`.
    #[error("unknown board {name}: no {} (known boards: {})", .looked_at.display(), .known.join(", "))]
    UnknownBoard {
        /// What was asked for.
        name: String,
        /// The `board.toml` path tried.
        looked_at: PathBuf,
        /// Board folders found next to it.
        known: Vec<String>,
    },
    /// A board profile or quality table cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The profile is not TOML, or lacks a key, or a value has the wrong type.
    #[error("malformed board profile {path}: {reason}")]
    MalformedProfile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The profile describes a Linux board, which has no firmware to plan.
    #[error("{path} is a Linux board (kind = \"linux\"): it runs the std `loglinear` CLI, whose session is a heap allocation with no flash or RAM budget; `loglinear plan` sizes firmware boards")]
    LinuxBoard {
        /// The `board.toml`.
        path: PathBuf,
    },
    /// A quality table (`<model>.levels.csv`) that is not the expected CSV.
    #[error("malformed quality table {path}: {reason}")]
    MalformedQuality {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The model bytes are not a valid loglinear GGUF file.
    #[error("model file: {0}")]
    ModelFile(#[from] ModelFileError),
    /// The GGUF file does not describe a model the runtime runs.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// The level count does not suit the model.
    #[error("{levels} levels: {source} (log-linear models take 2..=15, plain models 1)")]
    Levels {
        /// Levels asked for.
        levels: usize,
        /// The runtime's complaint.
        source: SessionError,
    },
}

/// RAM figures of one session configuration, all from the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionBytes {
    /// `Session::arena_bytes`: the firmware's static arena.
    pub arena: u64,
    /// Fenwick state of all layers, every level allocated.
    pub state_allocated: u64,
    /// Fenwick state holding information at context T (live levels only).
    pub state_live: u64,
    /// Conv states of all layers.
    pub conv: u64,
    /// The rest of the arena: activations, mixer and MLP scratch, logits, alignment.
    pub scratch: u64,
    /// Live levels per layer and head at context T (level 0 included).
    pub live_levels: usize,
}

fn session_bytes_for<E: StateElem>(
    model: &Model<'_>,
    levels: usize,
    context: u64,
    activations: Activations,
) -> Result<SessionBytes, SessionError> {
    let cfg = SessionConfig {
        levels: Some(levels),
        activations: Some(activations),
    };
    let arena = Session::<E>::arena_bytes(model, &cfg)?;
    let mut buf = vec![0u8; arena];
    let session = Session::<E>::new(model, &mut buf, cfg)?;
    // A fresh session's live bytes are its conv states alone (no level holds a token yet).
    let conv = session.live_state_bytes() as u64;
    let allocated = session.allocated_state_bytes() as u64;
    let state_allocated = allocated - conv;
    let policy = session.policy();
    // Live levels while the last of T tokens is processed (t = T − 1), as Session reports.
    let live_levels = if context == 0 {
        0
    } else {
        policy.live_count(context - 1)
    };
    Ok(SessionBytes {
        arena: arena as u64,
        state_allocated,
        state_live: state_allocated / policy.levels() as u64 * live_levels as u64,
        conv,
        scratch: arena as u64 - allocated,
        live_levels,
    })
}

/// RAM figures for a state type (f32 activations).
pub fn session_bytes(
    model: &Model<'_>,
    state: StateType,
    levels: usize,
    context: u64,
) -> Result<SessionBytes, SessionError> {
    session_bytes_with(model, state, levels, context, Activations::F32)
}

/// RAM figures for a state type and activations mode ([`Activations::Q8`] adds the
/// activation blocks to the arena).
pub fn session_bytes_with(
    model: &Model<'_>,
    state: StateType,
    levels: usize,
    context: u64,
    activations: Activations,
) -> Result<SessionBytes, SessionError> {
    match state {
        StateType::F32 => session_bytes_for::<f32>(model, levels, context, activations),
        StateType::F16 => session_bytes_for::<half::f16>(model, levels, context, activations),
    }
}

/// Everything the planner reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The board.
    pub board: BoardProfile,
    /// Model bytes in flash.
    pub model_bytes: u64,
    /// Code estimate (the board's code reserve).
    pub code_bytes: u64,
    /// State type planned.
    pub state: StateType,
    /// Levels planned.
    pub levels: usize,
    /// Context T of the live figures.
    pub context: u64,
    /// Tokens the levels hold exactly before the top level saturates.
    pub exact_capacity: u64,
    /// The session's RAM.
    pub session: SessionBytes,
    /// The model's vocabulary size.
    pub vocab_size: usize,
    /// Sampler scratch (`[u32; vocab]`), on the stack.
    pub sampler_stack: u64,
    /// The model's full level count (15 log-linear, 1 plain).
    pub model_levels: usize,
    /// The most levels that fit, per state type (`None`: not even the fewest).
    pub max_levels: [(StateType, Option<usize>); 2],
}

/// The largest context that fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextLimit {
    /// All of the model's levels fit: memory is fixed whatever the context.
    Unbounded,
    /// Only this many levels fit: exact up to `tokens`, after which the top level saturates.
    Exact {
        /// Levels that fit.
        levels: usize,
        /// 2^(levels − 1).
        tokens: u64,
    },
    /// Nothing fits.
    None,
}

impl Plan {
    /// Flash needed in the code memory: code estimate + model, or the code estimate alone on a
    /// board whose model has a region of its own (`[memory.model]`).
    pub fn flash_total(&self) -> u64 {
        match self.board.model_region {
            None => self.code_bytes + self.model_bytes,
            Some(_) => self.code_bytes,
        }
    }

    /// RAM needed: arena + other statics + stack estimate.
    pub fn ram_total(&self) -> u64 {
        ram_total(&self.board, self.session.arena, self.sampler_stack)
    }

    /// Statics the linked ELF should hold in `.bss` + `.data`, at most: arena + allowance.
    pub fn statics(&self) -> u64 {
        self.session.arena + other_statics(&self.board)
    }

    /// Stack the firmware may use: sampler scratch + the board's stack reserve. The firmware's
    /// measured high-water mark (`STATUS stack_peak_bytes`) must stay below it.
    pub fn stack_estimate(&self) -> u64 {
        self.sampler_stack + self.board.stack_reserve
    }

    /// Bytes of flash missing (0 when it fits): in the code memory, plus in the model region
    /// where the board has one.
    pub fn flash_over(&self) -> u64 {
        let model_over = self
            .board
            .model_region
            .map_or(0, |r| self.model_bytes.saturating_sub(r.length));
        self.flash_total().saturating_sub(self.board.flash.length) + model_over
    }

    /// Bytes of RAM missing (0 when it fits).
    pub fn ram_over(&self) -> u64 {
        self.ram_total().saturating_sub(self.board.ram.length)
    }

    /// Whether flash and RAM both fit.
    pub fn fits(&self) -> bool {
        self.flash_over() == 0 && self.ram_over() == 0
    }

    /// The largest context the board allows for the planned state type.
    pub fn context_limit(&self) -> ContextLimit {
        let most = self
            .max_levels
            .iter()
            .find(|(s, _)| *s == self.state)
            .and_then(|(_, l)| *l);
        match most {
            None => ContextLimit::None,
            Some(l) if l >= self.model_levels => ContextLimit::Unbounded,
            Some(l) => ContextLimit::Exact {
                levels: l,
                tokens: LevelPolicy::new(l).map_or(0, |p| p.exact_capacity()),
            },
        }
    }
}

fn ram_total(board: &BoardProfile, arena: u64, sampler_stack: u64) -> u64 {
    arena + other_statics(board) + sampler_stack + board.stack_reserve
}

/// Plans `model` (its file is `model_bytes` long) on `board`, with the board's state type and
/// levels unless given; `context` defaults to the levels' exact capacity.
pub fn plan_model(
    board: &BoardProfile,
    model: &Model<'_>,
    model_bytes: u64,
    state: Option<StateType>,
    levels: Option<usize>,
    context: Option<u64>,
) -> Result<Plan, PlanError> {
    let c = model.config();
    let state = state.unwrap_or(board.state);
    let levels = levels.unwrap_or(board.levels);
    let policy = LevelPolicy::new(levels).ok_or(PlanError::Levels {
        levels,
        source: SessionError::InvalidLevels(levels),
    })?;
    let context = context.unwrap_or(policy.exact_capacity());
    let session = session_bytes_with(model, state, levels, context, board.activations)
        .map_err(|source| PlanError::Levels { levels, source })?;
    let sampler_stack = 4 * c.vocab_size as u64;
    let model_levels = c.default_state_levels();
    let range = if c.arch.is_log_linear() {
        2..=LAMBDA_LEVELS
    } else {
        1..=1
    };
    let most = |s: StateType| {
        range.clone().rev().find(|&l| {
            session_bytes_with(model, s, l, 0, board.activations)
                .is_ok_and(|b| ram_total(board, b.arena, sampler_stack) <= board.ram.length)
        })
    };
    Ok(Plan {
        board: board.clone(),
        model_bytes,
        code_bytes: board.code_reserve,
        state,
        levels,
        context,
        exact_capacity: policy.exact_capacity(),
        session,
        vocab_size: c.vocab_size,
        sampler_stack,
        model_levels,
        max_levels: [
            (StateType::F32, most(StateType::F32)),
            (StateType::F16, most(StateType::F16)),
        ],
    })
}

/// Plans the model file `bytes` (a GGUF file, aligned or not) on `board`; see [`plan_model`].
pub fn plan_file_bytes(
    board: &BoardProfile,
    bytes: &[u8],
    state: Option<StateType>,
    levels: Option<usize>,
    context: Option<u64>,
) -> Result<Plan, PlanError> {
    // The reader views tensors in place and wants them aligned: copy into u64 words.
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    let aligned = &bytemuck::cast_slice::<u64, u8>(&words)[..bytes.len()];
    let gguf = GgufModel::parse(aligned)?;
    let model = gguf.model()?;
    plan_model(board, &model, bytes.len() as u64, state, levels, context)
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

/// "fits" or "DOES NOT FIT, N B over".
fn fit_text(total: u64, available: u64) -> String {
    if total <= available {
        "fits".to_string()
    } else {
        format!("DOES NOT FIT, {} B over", total - available)
    }
}

/// The report of `loglinear plan`, and of a firmware build that does not fit.
impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.board;
        let s = &self.session;
        writeln!(
            f,
            "board {} ({}): {}, flash {} B at {:#010x}, RAM {} B at {:#010x}",
            b.name,
            b.path.display(),
            b.target,
            b.flash.length,
            b.flash.origin,
            b.ram.length,
            b.ram.origin
        )?;
        let saturated = if self.context > self.exact_capacity {
            ", past the exact capacity: the top level holds everything older"
        } else {
            ""
        };
        writeln!(
            f,
            "state {} × {} levels (exact up to {} tokens); context T = {} tokens: {} of {} levels live{}",
            self.state,
            self.levels,
            self.exact_capacity,
            self.context,
            s.live_levels,
            self.levels,
            saturated
        )?;
        writeln!(f)?;
        writeln!(f, "flash")?;
        writeln!(
            f,
            "  code estimate        {:>10} B  (board firmware.code_reserve)",
            self.code_bytes
        )?;
        match b.model_region {
            None => writeln!(f, "  model                {:>10} B", self.model_bytes)?,
            Some(r) => {
                let (m, ml) = (self.model_bytes, r.length);
                writeln!(
                    f,
                    "  model                {m:>10} B  of {ml} B in its own region at {:#010x} ({:.1} %): {}",
                    r.origin,
                    pct(m, ml),
                    fit_text(m, ml)
                )?
            }
        }
        let (ft, fl) = (self.flash_total(), b.flash.length);
        writeln!(
            f,
            "  flash total          {ft:>10} B  of {fl} B ({:.1} %): {}",
            pct(ft, fl),
            fit_text(ft, fl)
        )?;
        writeln!(f, "RAM")?;
        writeln!(
            f,
            "  Fenwick state at T   {:>10} B  ({} live levels)",
            s.state_live, s.live_levels
        )?;
        writeln!(
            f,
            "  Fenwick state, max   {:>10} B  ({} levels allocated)",
            s.state_allocated, self.levels
        )?;
        writeln!(f, "  conv states          {:>10} B", s.conv)?;
        writeln!(
            f,
            "  scratch              {:>10} B  (activations, logits, alignment)",
            s.scratch
        )?;
        writeln!(
            f,
            "  session arena        {:>10} B  (Session::arena_bytes = max state + conv + scratch: the firmware's .bss)",
            s.arena
        )?;
        writeln!(
            f,
            "  other statics        {:>10} B  (allowance; linked .bss + .data ≤ {} B)",
            other_statics(b),
            self.statics()
        )?;
        writeln!(
            f,
            "  sampler scratch      {:>10} B  (stack)",
            self.sampler_stack
        )?;
        writeln!(
            f,
            "  stack reserve        {:>10} B  (board firmware.stack_reserve; stack estimate with the sampler scratch {} B)",
            b.stack_reserve,
            self.stack_estimate()
        )?;
        let (rt, rl) = (self.ram_total(), b.ram.length);
        writeln!(
            f,
            "  RAM total            {rt:>10} B  of {rl} B ({:.1} %): {}",
            pct(rt, rl),
            fit_text(rt, rl)
        )?;
        writeln!(f)?;
        match self.context_limit() {
            ContextLimit::Unbounded => writeln!(
                f,
                "largest context: unbounded ({} state: all {} levels fit; memory stays fixed, the top level saturates past {} tokens)",
                self.state,
                self.model_levels,
                LevelPolicy::new(self.model_levels).map_or(0, |p| p.exact_capacity())
            )?,
            ContextLimit::Exact { levels, tokens } => writeln!(
                f,
                "largest context: {tokens} tokens exact ({} state, {levels} levels; memory stays fixed after, the top level saturates)",
                self.state
            )?,
            ContextLimit::None => writeln!(
                f,
                "largest context: none ({} state: not even the fewest levels fit)",
                self.state
            )?,
        }
        write!(f, "most levels that fit:")?;
        for (st, l) in self.max_levels {
            match l {
                Some(l) => write!(f, " {st} {l}")?,
                None => write!(f, " {st} none")?,
            }
        }
        writeln!(f)?;
        if self.fits() {
            write!(f, "verdict: fits")
        } else {
            let mut over = Vec::new();
            if self.flash_over() > 0 {
                over.push(format!("flash {} B over", self.flash_over()));
            }
            if self.ram_over() > 0 {
                over.push(format!("RAM {} B over", self.ram_over()));
            }
            write!(f, "verdict: does NOT fit ({})", over.join(", "))
        }
    }
}

#[cfg(test)]
mod tests;
