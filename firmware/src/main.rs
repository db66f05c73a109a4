//! loglinear firmware: a Log-Linear Attention language model running from flash on a
//! microcontroller, with its whole Fenwick state in one static arena and no heap.
//!
//! On start it reads one request line from semihosting stdin (see [`request`]; end of input or
//! an empty line means the defaults), feeds the prompt through a [`Session`], generates the
//! requested number of tokens with the runtime's [`Sampler`], and prints on semihosting stdout:
//!
//! ```text
//! <prompt><generated text>
//! tokens: <generated token ids, space separated>
//! status: tokens=<t> prompt=<p> generated=<n> live_levels=<l> levels=<L> state=<f32|f16> state_live_bytes=<b> state_allocated_bytes=<b> arena_bytes=<b>
//! ```
//!
//! then exits through semihosting with 0 (1 for a runtime error, 2 for a malformed request,
//! 101 for a panic). Board, model, levels and state type are fixed at build time (`build.rs`).
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod fmt;
mod request;

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::{tokenizer, Sampler, SamplerConfig, Session, SessionConfig};
use semihosting::io::{Read as _, Write as _};

#[cfg(target_arch = "arm")]
use cortex_m as _;
#[cfg(feature = "defmt")]
use defmt_semihosting as _;

use crate::fmt::{error, info};

/// Build-time constants from `build.rs`: BOARD, MODEL_NAME, LEVELS, ARENA_BYTES, VOCAB.
mod board {
    include!(concat!(env!("OUT_DIR"), "/board_config.rs"));
}

/// The state element type chosen at build time (`state = "f16"` in board.toml or
/// `LOGLINEAR_STATE=f16`).
#[cfg(state_f16)]
type StateElem = half::f16;
#[cfg(not(state_f16))]
type StateElem = f32;
const STATE_NAME: &str = if cfg!(state_f16) { "f16" } else { "f32" };

/// Bytes aligned to 32, so the GGUF reader can view tensors in place.
#[repr(C, align(32))]
struct Aligned<B: ?Sized>(B);

/// The model file, linked into flash (read-only data) and read in place.
static MODEL: &Aligned<[u8]> = &Aligned(*include_bytes!(env!("LOGLINEAR_MODEL_PATH")));

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

/// Exit codes.
const EXIT_RUNTIME: i32 = 1;
const EXIT_REQUEST: i32 = 2;
const EXIT_PANIC: i32 = 101;

#[cfg_attr(target_arch = "arm", cortex_m_rt::entry)]
#[cfg_attr(target_arch = "riscv32", riscv_rt::entry)]
fn main() -> ! {
    let code = match run() {
        Ok(()) => 0,
        Err(code) => code,
    };
    semihosting::process::exit(code)
}

fn run() -> Result<(), i32> {
    let gguf = GgufModel::parse(&MODEL.0).map_err(|e| {
        error!("model file: {}", e);
        EXIT_RUNTIME
    })?;
    let model = gguf.model().map_err(|e| {
        error!("model: {}", e);
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

    let mut line = [0u8; 512];
    let len = read_line(&mut line);
    let req = request::parse(&mut line[..len]).map_err(|e| {
        error!("request: {}", e);
        EXIT_REQUEST
    })?;
    let levels = req.levels.unwrap_or(board::LEVELS);
    if levels > board::LEVELS {
        error!(
            "request: levels={} but this image has room for {}",
            levels,
            board::LEVELS
        );
        return Err(EXIT_REQUEST);
    }

    let arena = ARENA.take().ok_or(EXIT_RUNTIME)?;
    let cfg = SessionConfig {
        levels: Some(levels),
    };
    let mut session = Session::<StateElem>::new(&model, arena, cfg).map_err(|e| {
        error!("session: {}", e);
        EXIT_REQUEST
    })?;
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: req.temperature,
        top_k: req.top_k,
        top_p: req.top_p,
        seed: req.seed,
    });

    let mut out = semihosting::io::stdout().map_err(|_| EXIT_RUNTIME)?;
    let step_err = |e| {
        error!("step: {}", e);
        EXIT_RUNTIME
    };
    let _ = out.write_all(req.prompt);
    for tok in tokenizer::encode(req.prompt) {
        session.step(tok).map_err(step_err)?;
    }
    let mut scratch = [0u32; board::VOCAB];
    let mut ids = [0u32; request::MAX_TOKENS];
    for id in ids.iter_mut().take(req.tokens) {
        let next = sampler
            .sample(session.logits(), &mut scratch)
            .map_err(|_| EXIT_RUNTIME)?;
        if let Some(b) = tokenizer::decode(next) {
            let _ = out.write_all(&[b]);
        }
        *id = next;
        session.step(next).map_err(step_err)?;
    }
    let _ = out.write_all(b"\ntokens:");
    for id in &ids[..req.tokens] {
        let _ = write!(out, " {id}");
    }
    let _ = writeln!(
        out,
        "\nstatus: tokens={} prompt={} generated={} live_levels={} levels={} state={} \
         state_live_bytes={} state_allocated_bytes={} arena_bytes={}",
        session.t(),
        req.prompt.len(),
        req.tokens,
        session.live_levels(),
        levels,
        STATE_NAME,
        session.live_state_bytes(),
        session.allocated_state_bytes(),
        board::ARENA_BYTES
    );
    Ok(())
}

/// Reads one line from semihosting stdin into `buf` (without the newline); stops at a newline,
/// at end of input or when `buf` is full. Returns its length (0: use the defaults).
fn read_line(buf: &mut [u8]) -> usize {
    let Ok(mut stdin) = semihosting::io::stdin() else {
        return 0;
    };
    let mut len = 0;
    while len < buf.len() {
        match stdin.read(&mut buf[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Some(nl) = buf[len..len + n].iter().position(|&b| b == b'\n') {
                    len += nl;
                    break;
                }
                len += n;
            }
        }
    }
    // Tolerate CRLF.
    if len > 0 && buf[len - 1] == b'\r' {
        len -= 1;
    }
    len
}

/// Reports the panic on semihosting stderr and ends the QEMU run with a non-zero code.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    #[cfg(feature = "defmt")]
    defmt::error!("panic");
    semihosting::eprintln!("panic: {}", info);
    semihosting::process::exit(EXIT_PANIC)
}
