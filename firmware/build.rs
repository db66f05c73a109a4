//! Build script of the firmware: picks the board, embeds the model, sizes the session arena and
//! refuses to build when the firmware cannot fit the board.
//!
//! Inputs (environment variables, all optional):
//!
//! * `LOGLINEAR_BOARD`: a folder name under `boards/` (default by target: `mps2-an386` for
//!   thumbv7em-none-eabihf, `riscv-virt` for riscv32imac-unknown-none-elf). Its `board.toml`
//!   gives the target triple, the flash and RAM regions and the default state settings; its
//!   `memory.x` goes to the linker.
//! * `LOGLINEAR_MODEL`: the GGUF file to link into flash (default: the board's `model`, else
//!   `models/ll-gdn-mcu16k-q8_0.gguf`; a relative path is taken from the repository root).
//! * `LOGLINEAR_LEVELS`, `LOGLINEAR_STATE` (`f32` | `f16`): override the board's state settings.
//! * `LOGLINEAR_TRANSPORT` (`uart` | `usb` | `semihosting`): overrides the board's `transport`.
//! * `LOGLINEAR_ACTIVATIONS` (`f32` | `q8`): overrides the board's `firmware.activations`, how
//!   matvecs with quantized weights treat their input (q8: the integer kernels; the planner
//!   then adds the activation blocks to the arena).
//! * `LOGLINEAR_KERNEL` (a `KernelPath` name: `portable`, `arm-dsp`): pins the integer kernel
//!   path (default: the fastest the target runs); for benchmarks.
//!
//! Transport (the byte stream the serial protocol runs over), from `board.toml`. On a QEMU
//! machine or a board without a HAL crate, `transport = "uart"` builds the board's polled UART
//! driver (`uart = "<driver>"`, `src/uart.rs`; cfgs `transport_uart` and `uart = "<driver>"`),
//! `"semihosting"` serves semihosting stdin/stdout (`src/serial.rs`). A board folder with its own
//! `Cargo.toml` is a HAL board crate (cfg `hal_board`): its HAL drives `uart` or `usb` (USB
//! CDC-ACM) and this package's image refuses to build for it. Semihosting (logs on stderr, the
//! exit code) is compiled in on QEMU boards (`kind = "qemu"`) and wherever it is the transport
//! (cfg `semihosting`); a hardware board uses none, so it runs without a debug probe. A HAL
//! board crate has it only with feature `defmt-semihosting` (its QEMU build).
//!
//! Sizing and the fit check are the memory planner's (`loglinear-planner`, the crate behind
//! `loglinear plan`): the arena is its `Session::arena_bytes` figure, computed here on the host
//! by the runtime itself from the same model file, so the firmware reserves exactly what
//! `Session::new` asks for; and when the model does not fit the board, the build fails with the
//! planner's report, the one `loglinear plan --board B --model M` prints.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use loglinear_planner::{plan_file_bytes, Activations, BoardProfile, StateType, Transport};
use loglinear_runtime::gguf::format::tokenizer;
use loglinear_runtime::gguf::GgufFile;

fn main() {
    if let Err(msg) = run() {
        // A clear message instead of a backtrace.
        eprintln!("\nerror: {msg}\n");
        std::process::exit(1);
    }
}

/// The UART drivers of `src/uart.rs`, the values of a board's `uart` key.
const UART_DRIVERS: &[&str] = &["cmsdk-apb", "ns16550", "nrf51"];

fn run() -> Result<(), String> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let root = manifest
        .parent()
        .ok_or("firmware/ has no parent folder")?
        .to_path_buf();
    let out = PathBuf::from(env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let target = env::var("TARGET").map_err(|e| e.to_string())?;
    for v in [
        "LOGLINEAR_BOARD",
        "LOGLINEAR_MODEL",
        "LOGLINEAR_LEVELS",
        "LOGLINEAR_STATE",
        "LOGLINEAR_TRANSPORT",
        "LOGLINEAR_ACTIVATIONS",
        "LOGLINEAR_KERNEL",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(state_f16)");
    println!("cargo::rustc-check-cfg=cfg(transport_uart)");
    println!("cargo::rustc-check-cfg=cfg(semihosting)");
    println!("cargo::rustc-check-cfg=cfg(model_region)");
    println!("cargo::rustc-check-cfg=cfg(hal_board)");
    println!("cargo::rustc-check-cfg=cfg(tokenizer_bpe)");
    println!(
        "cargo::rustc-check-cfg=cfg(uart, values({}))",
        UART_DRIVERS
            .iter()
            .map(|d| format!("{d:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // --- board ---------------------------------------------------------------------------
    let board = match env::var("LOGLINEAR_BOARD") {
        Ok(b) if !b.is_empty() => b,
        _ => match target.as_str() {
            "thumbv7em-none-eabihf" => "mps2-an386".into(),
            "riscv32imac-unknown-none-elf" => "riscv-virt".into(),
            t => {
                return Err(format!(
                "no default board for target {t}: set LOGLINEAR_BOARD to a folder under boards/"
            ))
            }
        },
    };
    let board_dir = root.join("boards").join(&board);
    let board_toml = board_dir.join("board.toml");
    println!("cargo:rerun-if-changed={}", board_toml.display());
    println!(
        "cargo:rerun-if-changed={}",
        board_dir.join("memory.x").display()
    );
    let mut profile = BoardProfile::read(&board_toml).map_err(|e| format!("board {board}: {e}"))?;
    if profile.target != target {
        return Err(format!(
            "board {board} is a {} board but this build targets {target} \
             (pass --target {}, or build from boards/{board}/)",
            profile.target, profile.target
        ));
    }
    let levels = match env::var("LOGLINEAR_LEVELS") {
        Ok(v) if !v.is_empty() => Some(
            v.parse::<usize>()
                .map_err(|_| format!("LOGLINEAR_LEVELS={v} is not a number"))?,
        ),
        _ => None,
    };
    let state = match env::var("LOGLINEAR_STATE") {
        Ok(v) if !v.is_empty() => Some(
            StateType::from_name(&v)
                .ok_or_else(|| format!("LOGLINEAR_STATE={v} is not f32 or f16"))?,
        ),
        _ => None,
    };
    match env::var("LOGLINEAR_ACTIVATIONS").as_deref() {
        Ok("f32") => profile.activations = Activations::F32,
        Ok("q8") => profile.activations = Activations::Q8,
        Ok("") | Err(_) => {}
        Ok(v) => return Err(format!("LOGLINEAR_ACTIVATIONS={v} is not f32 or q8")),
    }
    let kernel = env::var("LOGLINEAR_KERNEL").unwrap_or_default();

    // --- transport ---------------------------------------------------------------------------
    // A board folder with its own Cargo.toml is a HAL board crate: its HAL drives the transport
    // (USB CDC-ACM or an interrupt-driven UART) and this package's image does not build for it.
    let hal_board = board_dir.join("Cargo.toml").is_file();
    let transport = match env::var("LOGLINEAR_TRANSPORT").as_deref() {
        Ok("") | Err(_) => profile.transport,
        Ok("uart") => Transport::Uart,
        Ok("usb") => Transport::Usb,
        Ok("semihosting") => Transport::Semihosting,
        Ok(t) => {
            return Err(format!(
                "LOGLINEAR_TRANSPORT={t} is not uart, usb or semihosting"
            ))
        }
    };
    // The kernel-check binary talks over semihosting on every board, a HAL board's too.
    let kernel_check = env::var_os("CARGO_FEATURE_KERNEL_CHECK").is_some();
    if hal_board {
        println!("cargo:rustc-cfg=hal_board");
        if transport == Transport::Semihosting && !kernel_check {
            return Err(format!(
                "board {board} is a HAL board crate: its transport is uart or usb, not semihosting"
            ));
        }
    } else if transport == Transport::Usb {
        return Err(format!(
            "board {board}: transport usb needs a HAL board crate (boards/<chip>/Cargo.toml)"
        ));
    } else if transport == Transport::Uart {
        let driver = profile.uart.as_deref().ok_or_else(|| {
            format!(
                "board {board} has no UART driver (`uart = ...` in {}); \
                 build it with LOGLINEAR_TRANSPORT=semihosting",
                board_toml.display()
            )
        })?;
        if !UART_DRIVERS.contains(&driver) {
            return Err(format!(
                "{}: uart = {driver:?} is not one of the firmware's drivers {UART_DRIVERS:?}",
                board_toml.display()
            ));
        }
        println!("cargo:rustc-cfg=transport_uart");
        println!("cargo:rustc-cfg=uart={driver:?}");
    }
    let (snap_origin, snap_slot) = profile
        .snapshot
        .map_or((0, 0), |s| (s.origin, s.slot_bytes));
    // A HAL board crate has semihosting only in its `defmt-semihosting` build (the image QEMU
    // runs): the image a user flashes must run without a probe.
    let semihosting = if hal_board {
        env::var_os("CARGO_FEATURE_DEFMT_SEMIHOSTING").is_some() || kernel_check
    } else {
        profile.kind == "qemu" || transport == Transport::Semihosting
    };
    if semihosting {
        println!("cargo:rustc-cfg=semihosting");
    }
    let transport = transport.name();

    // --- model ---------------------------------------------------------------------------
    let model_path = match env::var("LOGLINEAR_MODEL") {
        Ok(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            if p.is_absolute() {
                p
            } else {
                root.join(p)
            }
        }
        _ => root.join(
            profile
                .model
                .as_deref()
                .unwrap_or(Path::new("models/ll-gdn-mcu16k-q8_0.gguf")),
        ),
    };
    let model_path = model_path
        .canonicalize()
        .map_err(|e| format!("model file {}: {e}", model_path.display()))?;
    println!("cargo:rerun-if-changed={}", model_path.display());
    let bytes = fs::read(&model_path).map_err(|e| format!("{}: {e}", model_path.display()))?;

    // --- the planner: arena size and fit check --------------------------------------------
    let plan = plan_file_bytes(&profile, &bytes, state, levels, None)
        .map_err(|e| format!("{}: {e}", model_path.display()))?;
    if !plan.fits() {
        let mut flags = String::new();
        if let Some(s) = state {
            write!(flags, " --state {s}").ok();
        }
        if let Some(l) = levels {
            write!(flags, " --levels {l}").ok();
        }
        return Err(format!(
            "the firmware does not fit board {board}. The memory planner \
             (loglinear plan --board {board} --model {}{flags}) says:\n\n{plan}\n\n\
             Pick a smaller model (LOGLINEAR_MODEL), fewer levels (LOGLINEAR_LEVELS), f16 state \
             (LOGLINEAR_STATE=f16) or another board (LOGLINEAR_BOARD), or change [firmware] in {}",
            model_path.display(),
            board_toml.display()
        ));
    }

    // --- outputs -------------------------------------------------------------------------
    if profile.model_region.is_some() {
        println!("cargo:rustc-cfg=model_region");
    }
    if plan.state == StateType::F16 {
        println!("cargo:rustc-cfg=state_f16");
    }
    // A BPE vocabulary links the runtime's BPE encoder; a byte-level image carries none.
    if tokenizer_kind(&bytes).as_deref() == Some(tokenizer::MODEL_GPT2) {
        println!("cargo:rustc-cfg=tokenizer_bpe");
    }
    println!(
        "cargo:rustc-env=LOGLINEAR_MODEL_PATH={}",
        model_path.display()
    );
    let mut gen = String::new();
    let model_name = model_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    writeln!(gen, "/// Board folder this image was built for.").ok();
    writeln!(gen, "pub const BOARD: &str = {board:?};").ok();
    writeln!(
        gen,
        "/// Transport of the serial protocol: `uart`, `usb` or `semihosting`."
    )
    .ok();
    writeln!(gen, "pub const TRANSPORT: &str = {transport:?};").ok();
    writeln!(
        gen,
        "/// Core clock the board runs at (`clock_hz`), and how it is made (`clocks`)."
    )
    .ok();
    writeln!(gen, "pub const CLOCK_HZ: u32 = {};", profile.clock_hz).ok();
    writeln!(gen, "pub const CLOCKS: &str = {:?};", profile.clocks).ok();
    writeln!(gen, "/// File name of the embedded model.").ok();
    writeln!(gen, "pub const MODEL_NAME: &str = {model_name:?};").ok();
    writeln!(gen, "/// State levels the arena is sized for.").ok();
    writeln!(gen, "pub const LEVELS: usize = {};", plan.levels).ok();
    writeln!(
        gen,
        "/// `Session::arena_bytes` for LEVELS and the state type."
    )
    .ok();
    writeln!(
        gen,
        "pub const ARENA_BYTES: usize = {};",
        plan.session.arena
    )
    .ok();
    writeln!(
        gen,
        "/// Snapshot region (`[snapshot]` of board.toml): start address, bytes of one of its two"
    )
    .ok();
    writeln!(gen, "/// slots; 0 and 0 on a board without one.").ok();
    writeln!(gen, "pub const SNAPSHOT_ORIGIN: usize = {snap_origin:#x};").ok();
    writeln!(
        gen,
        "pub const SNAPSHOT_SLOT_BYTES: usize = {snap_slot:#x};"
    )
    .ok();
    writeln!(
        gen,
        "/// How quantized matvecs treat their input: `f32` or `q8` (board.toml `firmware.activations`)."
    )
    .ok();
    writeln!(
        gen,
        "pub const ACTIVATIONS: &str = {:?};",
        profile.activations.name()
    )
    .ok();
    writeln!(
        gen,
        "/// Integer kernel path pinned at build time (`LOGLINEAR_KERNEL`), empty for the fastest."
    )
    .ok();
    writeln!(gen, "pub const KERNEL: &str = {kernel:?};").ok();
    writeln!(gen, "/// Vocabulary size of the embedded model.").ok();
    writeln!(gen, "pub const VOCAB: usize = {};", plan.vocab_size).ok();
    fs::write(out.join("board_config.rs"), gen).map_err(|e| e.to_string())?;

    if target.ends_with("-none-elf")
        || target.ends_with("-none-eabihf")
        || target.ends_with("-none-eabi")
    {
        // A board without a memory.x (esp32c3) takes its memory map from its HAL's scripts.
        let memory_x = board_dir.join("memory.x");
        if memory_x.is_file() {
            fs::copy(&memory_x, out.join("memory.x"))
                .map_err(|e| format!("{}: {e}", memory_x.display()))?;
            println!("cargo:rustc-link-search={}", out.display());
        }
        if target.starts_with("riscv") {
            println!("cargo:rustc-link-arg-bins=-Tmemory.x");
        }
        // The link-search path reaches every image that links this crate (a HAL board crate's
        // too, which so links the board's memory.x); `-arg-bins` only this package's images: a
        // HAL board crate passes its own scripts (its build.rs).
        println!("cargo:rustc-link-arg-bins=-Tlink.x");
        if env::var_os("CARGO_FEATURE_DEFMT").is_some() {
            println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
        }
    }
    Ok(())
}

/// The model file's `tokenizer.ggml.model`, if it has one.
fn tokenizer_kind(bytes: &[u8]) -> Option<String> {
    // The reader views tensors in place and wants them aligned: copy into u64 words.
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    let aligned = &bytemuck::cast_slice::<u64, u8>(&words)[..bytes.len()];
    let file = GgufFile::parse(aligned).ok()?;
    file.get(tokenizer::MODEL)
        .and_then(|v| v.as_str())
        .map(str::to_string)
}
