//! The memory planner behind `loglinear plan`: will a model run on a board, and with which
//! state settings?
//!
//! It reads the board profile (`boards/<name>/board.toml`: flash and RAM regions, stack and
//! code reserves, default state settings) and the model (a GGUF file, or a checkpoint folder
//! converted in memory), and reports
//!
//! * **flash** = code estimate (the board's `firmware.code_reserve`) + model bytes;
//! * **RAM** = the session arena exactly as [`Session::arena_bytes`] sizes it (the firmware's
//!   `static ARENA` in `.bss`), split into Fenwick state (allocated, and live at context T under
//!   the saturating [`LevelPolicy`]), conv states and scratch, plus an allowance for the other
//!   statics, the sampler scratch on the stack and the board's stack reserve: the same sum that
//!   `firmware/build.rs` checks;
//! * whether it fits, the largest context that fits, and the most levels that fit for each
//!   state type.
//!
//! Every byte figure of the session comes from the runtime itself (a real [`Session`] carved
//! from a host buffer), never from a re-derived formula.

use crate::checkpoint::{Checkpoint, ImportError};
use crate::export::{parse_dtype, ExportError, ExportOptions, ExportedModel};
use crate::model_source::{AlignedBytes, LoadError};
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::level::{LevelPolicy, LAMBDA_LEVELS};
use loglinear_runtime::session::{Session, SessionConfig, SessionError};
use loglinear_runtime::{DType, Model, StateElem};
use std::fmt;
use std::path::{Path, PathBuf};

/// RAM allowance for statics other than the arena (`.data`, the arena's guard flag, padding).
/// The same figure as `OTHER_RAM` in `firmware/build.rs`; `scripts/plan-test.sh` checks that
/// the linked `.bss + .data` stays within it.
pub const OTHER_STATICS: u64 = 4096;

/// State storage type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StateType {
    /// 4 bytes per state element.
    F32,
    /// 2 bytes per state element.
    F16,
}

impl StateType {
    fn parse(s: &str) -> Option<Self> {
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

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// `--board` names no folder with a `board.toml`.
    #[error("unknown board {name}: no {} (known boards: {})", .looked_at.display(), .known.join(", "))]
    UnknownBoard {
        /// What was asked for.
        name: String,
        /// The `board.toml` path tried.
        looked_at: PathBuf,
        /// Board folders found next to it.
        known: Vec<String>,
    },
    /// The profile cannot be read.
    #[error("cannot read {path}: {source}")]
    BoardIo {
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
    /// The model file or folder does not load.
    #[error(transparent)]
    Model(#[from] LoadError),
    /// A checkpoint folder that does not convert.
    #[error("{path}: {source}")]
    Export {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: ExportError,
    },
    /// The level count does not suit the model.
    #[error("{levels} levels: {source} (log-linear models take 2..=15, plain models 1)")]
    Levels {
        /// Levels asked for.
        levels: usize,
        /// The runtime's complaint.
        source: SessionError,
    },
}

/// A memory region of the board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Start address.
    pub origin: u64,
    /// Bytes.
    pub length: u64,
}

/// The parts of `board.toml` the planner reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoardProfile {
    /// `name`.
    pub name: String,
    /// The `board.toml` read.
    pub path: PathBuf,
    /// `target` (Rust target triple).
    pub target: String,
    /// `[memory.flash]`.
    pub flash: Region,
    /// `[memory.ram]`.
    pub ram: Region,
    /// `firmware.stack_reserve`: RAM kept free for the stack.
    pub stack_reserve: u64,
    /// `firmware.code_reserve`: flash kept for code next to the model (the code estimate).
    pub code_reserve: u64,
    /// `firmware.levels`: the image's default level count.
    pub levels: usize,
    /// `firmware.state`: the image's default state type.
    pub state: StateType,
}

/// Repository root as seen from this crate's sources (for `boards/`), used when the current
/// folder has no `boards/`.
fn default_boards_dir() -> PathBuf {
    let cwd = PathBuf::from("boards");
    if cwd.is_dir() {
        cwd
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../boards")
    }
}

impl BoardProfile {
    /// Finds a board by folder (`boards/mps2-an386`, any folder holding a `board.toml`) or by
    /// name (a folder under `boards/` of the current folder or of this repository).
    pub fn find(board: &str) -> Result<Self, PlanError> {
        let as_path = Path::new(board);
        let dir = if as_path.join("board.toml").is_file() {
            as_path.to_path_buf()
        } else {
            default_boards_dir().join(board)
        };
        let toml = dir.join("board.toml");
        if !toml.is_file() {
            let parent = dir.parent().unwrap_or(Path::new("."));
            let mut known: Vec<String> = std::fs::read_dir(parent)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.path().join("board.toml").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            known.sort();
            return Err(PlanError::UnknownBoard {
                name: board.to_string(),
                looked_at: toml,
                known,
            });
        }
        let text = std::fs::read_to_string(&toml).map_err(|source| PlanError::BoardIo {
            path: toml.clone(),
            source,
        })?;
        Self::parse(&text, &toml)
    }

    /// Parses the text of a `board.toml` (`path` is for messages).
    pub fn parse(text: &str, path: &Path) -> Result<Self, PlanError> {
        let bad = |reason: String| PlanError::MalformedProfile {
            path: path.to_path_buf(),
            reason,
        };
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| bad(e.to_string().trim_end().replace('\n', " ")))?;
        let get = |key: &str| -> Result<&toml::Value, PlanError> {
            let mut v: Option<&toml::Value> = None;
            for (i, part) in key.split('.').enumerate() {
                v = if i == 0 {
                    table.get(part)
                } else {
                    v.and_then(|t| t.get(part))
                };
            }
            v.ok_or_else(|| bad(format!("key {key} is missing")))
        };
        let int = |key: &str| -> Result<u64, PlanError> {
            get(key)?
                .as_integer()
                .and_then(|i| u64::try_from(i).ok())
                .ok_or_else(|| bad(format!("{key} must be a non-negative integer")))
        };
        let string = |key: &str| -> Result<String, PlanError> {
            get(key)?
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| bad(format!("{key} must be a string")))
        };
        let state = string("firmware.state")?;
        Ok(Self {
            name: string("name")?,
            path: path.to_path_buf(),
            target: string("target")?,
            flash: Region {
                origin: int("memory.flash.origin")?,
                length: int("memory.flash.length")?,
            },
            ram: Region {
                origin: int("memory.ram.origin")?,
                length: int("memory.ram.length")?,
            },
            stack_reserve: int("firmware.stack_reserve")?,
            code_reserve: int("firmware.code_reserve")?,
            levels: int("firmware.levels")? as usize,
            state: StateType::parse(&state)
                .ok_or_else(|| bad(format!("firmware.state = {state:?} is not f32 or f16")))?,
        })
    }
}

/// Options of `loglinear plan`.
#[derive(Clone, Debug, clap::Args)]
pub struct PlanArgs {
    /// Board name (a folder under boards/) or board folder.
    #[arg(long)]
    pub board: String,
    /// GGUF model file or checkpoint folder.
    #[arg(long)]
    pub model: PathBuf,
    /// Context length T in tokens for the live-state figure (default: the levels' exact
    /// capacity, 2^(levels−1)).
    #[arg(long)]
    pub context: Option<u64>,
    /// State storage type (default: the board's firmware.state).
    #[arg(long, value_enum)]
    pub state: Option<StateType>,
    /// State levels (default: the board's firmware.levels).
    #[arg(long)]
    pub levels: Option<usize>,
    /// For a checkpoint folder: the matrix storage type of the GGUF file it would become.
    #[arg(long = "type", value_parser = parse_dtype, default_value = "f32")]
    pub matrix_type: DType,
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
) -> Result<SessionBytes, SessionError> {
    let cfg = SessionConfig {
        levels: Some(levels),
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

/// RAM figures for a state type.
pub fn session_bytes(
    model: &Model<'_>,
    state: StateType,
    levels: usize,
    context: u64,
) -> Result<SessionBytes, SessionError> {
    match state {
        StateType::F32 => session_bytes_for::<f32>(model, levels, context),
        StateType::F16 => session_bytes_for::<half::f16>(model, levels, context),
    }
}

/// Everything `loglinear plan` reports.
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
    /// Flash needed: code estimate + model.
    pub fn flash_total(&self) -> u64 {
        self.code_bytes + self.model_bytes
    }

    /// RAM needed: arena + other statics + sampler scratch + stack reserve (the sum
    /// `firmware/build.rs` checks).
    pub fn ram_total(&self) -> u64 {
        ram_total(&self.board, self.session.arena, self.sampler_stack)
    }

    /// Statics the linked ELF should hold in `.bss` + `.data`, at most: arena + allowance.
    pub fn statics(&self) -> u64 {
        self.session.arena + OTHER_STATICS
    }

    /// Whether flash and RAM both fit.
    pub fn fits(&self) -> bool {
        self.flash_total() <= self.board.flash.length && self.ram_total() <= self.board.ram.length
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
    arena + OTHER_STATICS + sampler_stack + board.stack_reserve
}

/// Plans `model` (its file is `model_bytes` long) on `board`.
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
    let session = session_bytes(model, state, levels, context)
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
            session_bytes(model, s, l, 0)
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
        sampler_stack,
        model_levels,
        max_levels: [
            (StateType::F32, most(StateType::F32)),
            (StateType::F16, most(StateType::F16)),
        ],
    })
}

/// Loads the model at `path` (GGUF file, or checkpoint converted in memory with
/// `matrix_type`) and plans it.
pub fn plan(args: &PlanArgs) -> Result<Plan, PlanError> {
    let board = BoardProfile::find(&args.board)?;
    let path = &args.model;
    let bytes = if path.is_dir() {
        let ckpt = Checkpoint::load(path).map_err(|source: ImportError| {
            PlanError::Model(LoadError::Checkpoint {
                path: path.clone(),
                source,
            })
        })?;
        let opts = ExportOptions {
            matrix_type: args.matrix_type,
            ..ExportOptions::default()
        };
        let gguf = ExportedModel::from_checkpoint(&ckpt, &opts)
            .and_then(|m| m.to_gguf())
            .map_err(|source| PlanError::Export {
                path: path.clone(),
                source,
            })?;
        AlignedBytes::from_slice(&gguf)
    } else {
        AlignedBytes::read(path)?
    };
    let model_err = |error| LoadError::ModelFile {
        path: path.clone(),
        error,
    };
    let gguf = GgufModel::parse(bytes.as_bytes()).map_err(model_err)?;
    let model = gguf.model().map_err(|error| LoadError::Model {
        path: path.clone(),
        error,
    })?;
    plan_model(
        &board,
        &model,
        bytes.as_bytes().len() as u64,
        args.state,
        args.levels,
        args.context,
    )
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.board;
        let s = &self.session;
        let ok = |yes: bool| if yes { "fits" } else { "DOES NOT FIT" };
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
        writeln!(f, "  model                {:>10} B", self.model_bytes)?;
        let (ft, fl) = (self.flash_total(), b.flash.length);
        writeln!(
            f,
            "  flash total          {ft:>10} B  of {fl} B ({:.1} %): {}",
            pct(ft, fl),
            ok(ft <= fl)
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
            OTHER_STATICS,
            self.statics()
        )?;
        writeln!(
            f,
            "  sampler scratch      {:>10} B  (stack)",
            self.sampler_stack
        )?;
        writeln!(
            f,
            "  stack reserve        {:>10} B  (board firmware.stack_reserve)",
            b.stack_reserve
        )?;
        let (rt, rl) = (self.ram_total(), b.ram.length);
        writeln!(
            f,
            "  RAM total            {rt:>10} B  of {rl} B ({:.1} %): {}",
            pct(rt, rl),
            ok(rt <= rl)
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
        write!(
            f,
            "verdict: {}",
            if self.fits() { "fits" } else { "does NOT fit" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "test-board"
target = "thumbv7em-none-eabihf"
[memory.flash]
origin = 0x0
length = 0x0040_0000
[memory.ram]
origin = 0x2000_0000
length = 0x0040_0000
[firmware]
state = "f16"
levels = 15
stack_reserve = 65536
code_reserve = 262144
"#;

    fn model_bytes() -> AlignedBytes {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/ll-gdn-mcu-q8_0.gguf");
        AlignedBytes::read(&p).unwrap()
    }

    fn with_board(ram: u64, f: impl FnOnce(&BoardProfile, &Model<'_>, u64)) {
        let mut b = BoardProfile::parse(GOOD, Path::new("t.toml")).unwrap();
        b.ram.length = ram;
        let bytes = model_bytes();
        let g = GgufModel::parse(bytes.as_bytes()).unwrap();
        let m = g.model().unwrap();
        f(&b, &m, bytes.as_bytes().len() as u64);
    }

    #[test]
    fn parses_a_profile() {
        let b = BoardProfile::parse(GOOD, Path::new("t.toml")).unwrap();
        assert_eq!(b.ram.origin, 0x2000_0000);
        assert_eq!(b.flash.length, 4 << 20);
        assert_eq!(b.state, StateType::F16);
        assert_eq!(b.levels, 15);
    }

    #[test]
    fn malformed_profiles_are_typed_errors() {
        for (text, want) in [
            ("name = ", "malformed"),
            (
                &GOOD.replace("levels = 15", "") as &str,
                "firmware.levels is missing",
            ),
            (
                &GOOD.replace("levels = 15", "levels = \"x\""),
                "non-negative integer",
            ),
            (&GOOD.replace("\"f16\"", "\"bf16\""), "not f32 or f16"),
        ] {
            let e = BoardProfile::parse(text, Path::new("t.toml")).unwrap_err();
            assert!(matches!(e, PlanError::MalformedProfile { .. }), "{e}");
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn unknown_board_lists_the_known_ones() {
        let e = BoardProfile::find("no-such-board").unwrap_err();
        assert!(matches!(e, PlanError::UnknownBoard { .. }), "{e}");
        assert!(e.to_string().contains("mps2-an386"), "{e}");
    }

    #[test]
    fn finds_boards_by_name_and_folder() {
        let by_name = BoardProfile::find("mps2-an500").unwrap();
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../boards/mps2-an500");
        let by_dir = BoardProfile::find(dir.to_str().unwrap()).unwrap();
        assert_eq!(by_name.name, "mps2-an500");
        assert_eq!(by_dir.levels, by_name.levels);
    }

    #[test]
    fn model_that_does_not_parse_is_a_typed_error() {
        let dir = std::env::temp_dir().join(format!("plan-bad-{}", std::process::id()));
        std::fs::write(&dir, b"GGUF not really a model").unwrap();
        let e = plan(&PlanArgs {
            board: "mps2-an386".into(),
            model: dir.clone(),
            context: None,
            state: None,
            levels: None,
            matrix_type: DType::F32,
        })
        .unwrap_err();
        std::fs::remove_file(&dir).ok();
        assert!(matches!(e, PlanError::Model(_)), "{e}");
    }

    #[test]
    fn figures_come_from_the_runtime() {
        with_board(4 << 20, |b, m, n| {
            for (st, lv) in [
                (StateType::F16, 15),
                (StateType::F32, 12),
                (StateType::F32, 2),
            ] {
                let p = plan_model(b, m, n, Some(st), Some(lv), Some(1000)).unwrap();
                let cfg = SessionConfig { levels: Some(lv) };
                let want = match st {
                    StateType::F32 => Session::<f32>::arena_bytes(m, &cfg),
                    StateType::F16 => Session::<half::f16>::arena_bytes(m, &cfg),
                }
                .unwrap() as u64;
                assert_eq!(p.session.arena, want);
                let s = p.session;
                assert_eq!(s.state_allocated + s.conv + s.scratch, s.arena);
                // t = 999 = 0b1111100111: level 0 plus live levels among 1..lv.
                let live = LevelPolicy::new(lv).unwrap().live_count(999);
                assert_eq!(s.live_levels, live);
                assert_eq!(s.state_live * lv as u64, s.state_allocated * live as u64);
                assert_eq!(p.flash_total(), n + b.code_reserve);
            }
        });
    }

    #[test]
    fn documented_arena_sizes() {
        // The figures in boards/*/board.toml and firmware/README.md.
        with_board(4 << 20, |b, m, n| {
            let p = plan_model(b, m, n, Some(StateType::F16), Some(15), None).unwrap();
            assert_eq!(p.session.arena, 2_009_243);
            assert_eq!(p.context, 16384);
            let p = plan_model(b, m, n, Some(StateType::F32), Some(12), None).unwrap();
            assert_eq!(p.session.arena, 3_188_893);
        });
    }

    #[test]
    fn limits_shrink_with_ram() {
        // 4 MiB: everything fits, unbounded.
        with_board(4 << 20, |b, m, n| {
            let p = plan_model(b, m, n, None, None, None).unwrap();
            assert!(p.fits());
            assert_eq!(p.context_limit(), ContextLimit::Unbounded);
            assert_eq!(
                p.max_levels,
                [(StateType::F32, Some(15)), (StateType::F16, Some(15))]
            );
        });
        // 1 MiB: f16 15 levels does not fit; the largest level count that does is exact.
        with_board(1 << 20, |b, m, n| {
            let p = plan_model(b, m, n, Some(StateType::F16), Some(15), None).unwrap();
            assert!(!p.fits());
            let ContextLimit::Exact { levels, tokens } = p.context_limit() else {
                panic!("{:?}", p.context_limit())
            };
            assert_eq!(Some(levels), p.max_levels[1].1);
            assert_eq!(tokens, 1 << (levels - 1));
            let fit = plan_model(b, m, n, Some(StateType::F16), Some(levels), None).unwrap();
            assert!(fit.fits());
            let over = plan_model(b, m, n, Some(StateType::F16), Some(levels + 1), None).unwrap();
            assert!(!over.fits());
            assert!(p.max_levels[0].1 < p.max_levels[1].1);
        });
        // Too small for anything.
        with_board(64 << 10, |b, m, n| {
            let p = plan_model(b, m, n, None, Some(2), None).unwrap();
            assert_eq!(p.context_limit(), ContextLimit::None);
        });
    }

    #[test]
    fn bad_levels_are_a_typed_error() {
        with_board(4 << 20, |b, m, n| {
            for lv in [0, 1, 16] {
                let e = plan_model(b, m, n, None, Some(lv), None).unwrap_err();
                assert!(matches!(e, PlanError::Levels { .. }), "{e}");
            }
        });
    }
}
