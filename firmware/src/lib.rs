//! loglinear firmware: a Log-Linear Attention language model running from flash on a
//! microcontroller, with its whole Fenwick state in one static arena and no heap.
//!
//! This library is the part every board shares: the embedded model and its arena (sized by
//! `build.rs`), and [`run`], which serves the line-based serial protocol of
//! `docs/serial-protocol.md` ([`protocol`]) over any `embedded_io::Read` + `Write`: `GEN`
//! streams tokens as they are produced, `STATUS`, `RESET`, `QUIT`, `SNAP` ([`snapshot`]), and on
//! boards with a `[snapshot]` region `SAVE`, `LOAD`, `RESTORE` (the A/B store of [`flash`]);
//! every bad request gets an `ERR` reply and the firmware keeps serving.
//!
//! The programs around it bring a board up and hand [`run`] its byte stream:
//!
//! * `src/main.rs`, the image of the QEMU machines (feature `rt`): semihosting stdin/stdout or
//!   the machine's polled UART model;
//! * `boards/<chip>/` for real chips: the vendor HAL (embassy, esp-hal) sets the clocks and
//!   caches and drives USB CDC-ACM or an interrupt-driven UART, which reach [`run`] through
//!   [`link`] (feature `link`).
//!
//! Board, model, levels, state type and transport are fixed at build time (`build.rs`).
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "defmt-semihosting")]
mod defmt_stderr;
mod flash;
mod fmt;
#[cfg(feature = "link")]
pub mod link;
mod snapshot;
pub mod stack;
mod text;

use core::cell::UnsafeCell;
// `portable-atomic`: the arena's `swap` is native on thumbv7em and rv32imac; on thumbv6m
// (Cortex-M0, no compare-and-swap) it runs inside a critical section (cortex-m's single-core
// implementation, or the HAL's).
use portable_atomic::{AtomicBool, Ordering};

use embedded_io::{Read, Write};
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::quant::{self, Activations, KernelPath};
use loglinear_runtime::Model;
use loglinear_runtime::{Sampler, SamplerConfig, Session, SessionConfig};

#[cfg(feature = "defmt-rtt")]
use defmt_rtt as _;

use crate::fmt::{error, info};
use loglinear_protocol::{self as protocol, request};
use protocol::{reply_err, Command, CommandError, ErrCode, Line, LineReader};
use text::{FeedError, Text};

/// Build-time constants from `build.rs`: BOARD, MODEL_NAME, LEVELS, ARENA_BYTES, VOCAB, ...
pub mod board {
    include!(concat!(env!("OUT_DIR"), "/board_config.rs"));
}

/// The state element type chosen at build time (`state = "f16"` in board.toml or
/// `LOGLINEAR_STATE=f16`).
#[cfg(state_f16)]
type StateElem = half::f16;
#[cfg(not(state_f16))]
type StateElem = f32;
const STATE_NAME: &str = if cfg!(state_f16) { "f16" } else { "f32" };

/// How quantized matvecs treat their input (`firmware.activations` in board.toml, or
/// `LOGLINEAR_ACTIVATIONS`): Q8 runs the integer kernels, the arena holds the activation blocks.
const ACTIVATIONS: Activations = if matches!(board::ACTIVATIONS.as_bytes(), b"q8") {
    Activations::Q8
} else {
    Activations::F32
};

/// Bytes aligned to 32, so the GGUF reader can view tensors in place.
#[repr(C, align(32))]
struct Aligned<B: ?Sized>(B);

/// The model file, linked into flash (read-only data) and read in place. On a board with a
/// `[memory.model]` region (cfg `model_region`: the model in external flash, apart from the code
/// memory) it goes to the `.model` section, which the board's `memory.x` places there.
#[cfg_attr(model_region, link_section = ".model")]
static MODEL_FILE: Aligned<[u8; MODEL_LEN]> =
    Aligned(*include_bytes!(env!("LOGLINEAR_MODEL_PATH")));
const MODEL_LEN: usize = include_bytes!(env!("LOGLINEAR_MODEL_PATH")).len();
static MODEL: &Aligned<[u8]> = &MODEL_FILE;

/// A statically allocated byte buffer that can be borrowed mutably exactly once (the
/// `static_cell` pattern without `static mut`). It lives in `.bss`, zeroed by the runtime crate
/// (`cortex-m-rt` / `riscv-rt`) before `main`.
#[repr(C, align(32))]
struct ArenaCell<const N: usize> {
    buf: UnsafeCell<[u8; N]>,
    taken: AtomicBool,
}

// SAFETY: `buf` is only reachable through `take`, which hands out at most one reference for
// the whole program (guarded by the atomic swap), so no two contexts can alias it.
unsafe impl<const N: usize> Sync for ArenaCell<N> {}

impl<const N: usize> ArenaCell<N> {
    const fn new() -> Self {
        Self {
            buf: UnsafeCell::new([0; N]),
            taken: AtomicBool::new(false),
        }
    }

    /// The buffer, the first time only; `None` afterwards.
    // A `&mut` from `&self` is sound here: the atomic flag makes it the only one ever made.
    #[allow(clippy::mut_from_ref)]
    fn take(&'static self) -> Option<&'static mut [u8]> {
        if self.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: the swap above returned `false` exactly once, so this is the only reference
        // to `buf` ever created; it is `'static` because the cell is.
        Some(unsafe { &mut *self.buf.get() })
    }
}

/// The session arena: Fenwick states, conv states and scratch, sized by `build.rs` as
/// `Session::arena_bytes` for the board's levels and state type.
static ARENA: ArenaCell<{ board::ARENA_BYTES }> = ArenaCell::new();

/// Exit code of a runtime error: the model or the session could not be set up, or the
/// byte stream failed.
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code of a panic.
pub const EXIT_PANIC: i32 = 101;

/// Parses the embedded model, takes the arena and serves the protocol on `rx` / `tx` until end
/// of input (`Ok`) or `QUIT` (`Ok`); `Err` holds the exit code of a failure ([`EXIT_RUNTIME`]).
/// Call it once: a second call finds the arena taken.
pub fn run<R: Read, W: Write>(rx: &mut R, tx: &mut W) -> Result<(), i32> {
    let gguf = GgufModel::parse(&MODEL.0).map_err(|e| {
        error!("model file: {}", e);
        EXIT_RUNTIME
    })?;
    let model = gguf.model().map_err(|e| {
        error!("model: {}", e);
        EXIT_RUNTIME
    })?;
    let text = Text::new(gguf.file()).map_err(|e| {
        error!("tokenizer: {}", e);
        EXIT_RUNTIME
    })?;
    info!(
        "loglinear-firmware on {}: model {} ({} B in flash), {} state, arena {} B for {} levels",
        board::BOARD,
        board::MODEL_NAME,
        MODEL.0.len(),
        STATE_NAME,
        board::ARENA_BYTES,
        board::LEVELS
    );
    if !board::KERNEL.is_empty() {
        let path = KernelPath::ALL
            .iter()
            .copied()
            .find(|p| p.name() == board::KERNEL);
        if !path.is_some_and(|p| quant::set_forced_path(Some(p))) {
            error!(
                "LOGLINEAR_KERNEL={}: not a kernel path this target runs",
                board::KERNEL
            );
            return Err(EXIT_RUNTIME);
        }
    }
    info!(
        "activations {}, integer kernels {}",
        ACTIVATIONS.name(),
        KernelPath::best().name()
    );
    let arena = ARENA.take().ok_or(EXIT_RUNTIME)?;
    // What snapshots carry to say which model file they belong to (`SNAP`).
    let fingerprint = loglinear_runtime::snapshot::model_fingerprint(&MODEL.0);
    // The A/B snapshot store (`SAVE`, `LOAD`, `RESTORE`), on boards with a `[snapshot]` region.
    let mut store = flash::open_store();
    serve(&model, &text, arena, fingerprint, store.as_mut(), rx, tx)
}

/// Serves protocol commands from `rx`, replies on `tx`, until end of input or `QUIT`. Only a
/// failure to build the session or to read `rx` ends it with an error; bad requests get `ERR`.
fn serve<R: Read, W: Write>(
    model: &Model<'_>,
    text: &Text<'_>,
    arena: &mut [u8],
    fingerprint: u64,
    mut store: Option<&mut flash::Store>,
    rx: &mut R,
    tx: &mut W,
) -> Result<(), i32> {
    let _ = writeln!(
        tx,
        "READY loglinear board={} model={} state={} levels={} max_line={} max_tokens={} \
         transport={}",
        board::BOARD,
        board::MODEL_NAME,
        STATE_NAME,
        board::LEVELS,
        protocol::MAX_LINE,
        request::MAX_TOKENS,
        board::TRANSPORT
    );
    let mut lines = LineReader::new();
    // A line that cut a `RESTORE` upload short: the next command.
    let mut pending = snapshot::Pending::new();
    let mut levels = board::LEVELS;
    // One pass per session: `RESET` ends the inner loop and builds a fresh one.
    loop {
        let cfg = SessionConfig {
            levels: Some(levels),
            activations: Some(ACTIVATIONS),
        };
        let mut session = Session::<StateElem>::new(model, &mut *arena, cfg).map_err(|e| {
            error!("session: {}", e);
            EXIT_RUNTIME
        })?;
        session.reset();
        let mut generated = 0usize;
        // The PRNG state of the last GEN's sampler, for SNAP.
        let mut rng_state = 0u64;
        loop {
            let next = match pending.take() {
                Some(line) => Line::Complete(line),
                None => lines.next_line(rx),
            };
            let line = match next {
                Line::Complete(line) => line,
                Line::TooLong => {
                    let max = protocol::MAX_LINE;
                    reply_err(tx, ErrCode::TooLong, format_args!("line over {max} bytes"));
                    continue;
                }
                Line::CutShort => {
                    let msg = format_args!("end of input inside a line; not run");
                    reply_err(tx, ErrCode::CutShort, msg);
                    continue;
                }
                Line::Eof => return Ok(()),
                Line::Io => {
                    error!("serial: read failed");
                    return Err(EXIT_RUNTIME);
                }
            };
            match protocol::parse_command(line) {
                Ok(Command::Blank) => {}
                Ok(Command::Quit) => {
                    let _ = writeln!(tx, "BYE");
                    // The whole line out before the exit (a reset on a board).
                    let _ = tx.flush();
                    return Ok(());
                }
                Ok(Command::Status) => status(tx, &session, levels, generated),
                Ok(Command::Snap) => {
                    if let Err(e) = snapshot::reply_snap(tx, &session, rng_state, fingerprint) {
                        reply_err(tx, ErrCode::Runtime, format_args!("snapshot: {e}"));
                    }
                }
                Ok(Command::Save) => {
                    let Some(store) = store.as_deref_mut() else {
                        no_store(tx);
                        continue;
                    };
                    let mut sampler = Sampler::new(SamplerConfig::default());
                    sampler.set_rng_state(rng_state);
                    match store.save_snapshot(&session, &sampler, fingerprint) {
                        Ok(info) => {
                            let _ = writeln!(
                                tx,
                                "SAVED seq={} slot={:?} bytes={} t={}",
                                info.seq,
                                info.slot,
                                info.len,
                                session.t()
                            );
                        }
                        Err(e) => reply_err(tx, ErrCode::Runtime, format_args!("SAVE: {e}")),
                    }
                }
                Ok(Command::Load) => {
                    let Some(store) = store.as_deref_mut() else {
                        no_store(tx);
                        continue;
                    };
                    load(
                        store,
                        &mut session,
                        &mut rng_state,
                        fingerprint,
                        tx,
                        "LOADED",
                    );
                }
                Ok(Command::Restore(args)) => {
                    let total = match snapshot::parse_restore(args) {
                        Ok(n) => n,
                        Err(e) => {
                            reply_err(tx, ErrCode::BadParam, format_args!("{e}"));
                            continue;
                        }
                    };
                    let Some(store) = store.as_deref_mut() else {
                        no_store(tx);
                        continue;
                    };
                    let got = snapshot::receive_restore(
                        store,
                        total,
                        fingerprint,
                        &mut lines,
                        rx,
                        &mut pending,
                    );
                    match got {
                        Ok(_) => load(
                            store,
                            &mut session,
                            &mut rng_state,
                            fingerprint,
                            tx,
                            "RESTORED",
                        ),
                        Err(e) => {
                            let code = match e {
                                snapshot::UploadError::BadRequest
                                | snapshot::UploadError::BadSize { .. } => ErrCode::BadParam,
                                snapshot::UploadError::CutShort { .. } => ErrCode::CutShort,
                                _ => ErrCode::Snapshot,
                            };
                            reply_err(tx, code, format_args!("RESTORE: {e}"))
                        }
                    }
                }
                Ok(Command::Reset(args)) => match request::parse_reset(args, board::LEVELS) {
                    Ok(new_levels) => {
                        levels = new_levels.unwrap_or(levels);
                        let _ = writeln!(tx, "OK RESET levels={levels}");
                        break;
                    }
                    Err(e) => reply_err(tx, ErrCode::BadParam, format_args!("{e}")),
                },
                Ok(Command::Gen(args)) => match request::parse_gen(args) {
                    Ok(params) => match generate(&mut session, text, &params, tx) {
                        Ok((n, rng)) => {
                            generated += n;
                            rng_state = rng;
                            let _ = writeln!(tx, "DONE {n}");
                        }
                        Err(msg) => reply_err(tx, ErrCode::Runtime, format_args!("{msg}")),
                    },
                    Err(e) => reply_err(tx, ErrCode::BadParam, format_args!("{e}")),
                },
                Err(CommandError::NotUtf8) => {
                    let msg = format_args!("the line is not UTF-8 (escape bytes as \\xHH)");
                    reply_err(tx, ErrCode::NotUtf8, msg)
                }
                Err(CommandError::Unknown(w)) => reply_err(
                    tx,
                    ErrCode::UnknownCommand,
                    format_args!("unknown command {w}"),
                ),
                Err(CommandError::UnexpectedArgs(c)) => reply_err(
                    tx,
                    ErrCode::BadParam,
                    format_args!("{c} takes no parameters"),
                ),
            }
        }
    }
}

/// `ERR` for `SAVE`, `LOAD`, `RESTORE` on a board without a snapshot region.
fn no_store<W: Write>(tx: &mut W) {
    let msg = format_args!("no snapshot region on this board ([snapshot] in board.toml)");
    reply_err(tx, ErrCode::Snapshot, msg)
}

/// Restores the session from the store's newest valid slot and replies
/// `<word> seq=<n> slot=<A|B> bytes=<n> t=<t>`, or `ERR 7` with the reason: none stored, model
/// mismatch, corrupt.
fn load<W: Write>(
    store: &mut flash::Store,
    session: &mut Session<'_, StateElem>,
    rng_state: &mut u64,
    fingerprint: u64,
    tx: &mut W,
    word: &str,
) {
    use loglinear_runtime::slot_store::StoreError;
    use loglinear_runtime::snapshot::SnapshotError;
    let mut sampler = Sampler::new(SamplerConfig::default());
    match store.restore_latest(session, &mut sampler, fingerprint) {
        Ok(info) => {
            *rng_state = sampler.rng_state();
            let _ = writeln!(
                tx,
                "{word} seq={} slot={:?} bytes={} t={}",
                info.seq,
                info.slot,
                info.len,
                session.t()
            );
        }
        Err(StoreError::NoSnapshot) => {
            reply_err(tx, ErrCode::Snapshot, format_args!("none stored"))
        }
        Err(StoreError::Snapshot(SnapshotError::ModelMismatch { .. })) => reply_err(
            tx,
            ErrCode::Snapshot,
            format_args!("model mismatch: the stored snapshot is of another model file"),
        ),
        Err(e) => reply_err(tx, ErrCode::Snapshot, format_args!("corrupt: {e}")),
    }
}

/// `GEN`: feeds the prompt (the default prompt on a fresh session without one), then samples
/// and streams `params.tokens` tokens, each as a `TOK` line as soon as it is sampled. Returns
/// the number generated and the sampler's final PRNG state.
fn generate<W: Write>(
    session: &mut Session<'_, StateElem>,
    text: &Text<'_>,
    params: &request::GenParams<'_>,
    tx: &mut W,
) -> Result<(usize, u64), &'static str> {
    let prompt = match params.prompt {
        Some(p) => p,
        None if session.t() == 0 => request::DEFAULT_PROMPT,
        None => &[],
    };
    let step_err = |e| {
        error!("step: {}", e);
        "model step failed"
    };
    text.feed(prompt, |tok| session.step(tok).map(|_| ()))
        .map_err(|e| match e {
            #[cfg(tokenizer_bpe)]
            FeedError::Encode(e) => {
                error!("prompt: {}", e);
                "the prompt does not encode"
            }
            FeedError::Step(e) => step_err(e),
        })?;
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: params.temperature,
        top_k: params.top_k,
        top_p: params.top_p,
        seed: params.seed,
    });
    let mut scratch = [0u32; board::VOCAB];
    for _ in 0..params.tokens {
        let next = sampler
            .sample(session.logits(), &mut scratch)
            .map_err(|_| "sampling failed")?;
        text.reply(tx, next);
        session.step(next).map_err(step_err)?;
    }
    Ok((params.tokens, sampler.rng_state()))
}

/// `STATUS`: one line of `key=value` words.
fn status<W: Write>(tx: &mut W, session: &Session<'_, StateElem>, levels: usize, generated: usize) {
    let _ = writeln!(
        tx,
        "STATUS tokens={} generated={} live_levels={} levels={} state={} \
         state_live_bytes={} state_allocated_bytes={} arena_bytes={} stack_peak_bytes={}",
        session.t(),
        generated,
        session.live_levels(),
        levels,
        STATE_NAME,
        session.live_state_bytes(),
        session.allocated_state_bytes(),
        board::ARENA_BYTES,
        stack::peak_bytes()
    );
}
