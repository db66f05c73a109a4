//! Build script of the firmware: picks the board, embeds the model, sizes the session arena and
//! refuses to build when the firmware cannot fit the board.
//!
//! Inputs (environment variables, all optional):
//!
//! * `LOGLINEAR_BOARD`: a folder name under `boards/` (default by target: `mps2-an386` for
//!   thumbv7em-none-eabihf, `riscv-virt` for riscv32imac-unknown-none-elf). Its `board.toml`
//!   gives the target triple, the flash and RAM regions and the default state settings; its
//!   `memory.x` goes to the linker.
//! * `LOGLINEAR_MODEL`: the GGUF file to link into flash (default `models/ll-gdn-mcu-q8_0.gguf`;
//!   a relative path is taken from the repository root).
//! * `LOGLINEAR_LEVELS`, `LOGLINEAR_STATE` (`f32` | `f16`): override the board's state settings.
//!
//! The arena size is `Session::arena_bytes` of the runtime itself, computed here on the host
//! from the same model file, so the firmware reserves exactly what `Session::new` asks for.

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;

use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::{Session, SessionConfig};

/// Bytes of RAM taken by statics other than the arena (logits scratch lives on the stack; this
/// covers `.data`, the semihosting handles and padding).
const OTHER_RAM: u64 = 4096;

fn main() {
    if let Err(msg) = run() {
        // A clear, single message instead of a backtrace.
        eprintln!("\nerror: {msg}\n");
        std::process::exit(1);
    }
}

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
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo::rustc-check-cfg=cfg(state_f16)");

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
    let text = fs::read_to_string(&board_toml)
        .map_err(|e| format!("board {board}: cannot read {}: {e}", board_toml.display()))?;
    let cfg = parse_toml(&text).map_err(|e| format!("{}: {e}", board_toml.display()))?;
    let get = |k: &str| {
        cfg.get(k)
            .ok_or_else(|| format!("{}: key {k} is missing", board_toml.display()))
    };
    let board_target = get("target")?.str()?;
    if board_target != target {
        return Err(format!(
            "board {board} is a {board_target} board but this build targets {target} \
             (pass --target {board_target}, or build from boards/{board}/)"
        ));
    }
    let flash_len = get("memory.flash.length")?.int()?;
    let ram_len = get("memory.ram.length")?.int()?;
    let stack_reserve = get("firmware.stack_reserve")?.int()?;
    let code_reserve = get("firmware.code_reserve")?.int()?;
    let levels = match env::var("LOGLINEAR_LEVELS") {
        Ok(v) if !v.is_empty() => v
            .parse::<u64>()
            .map_err(|_| format!("LOGLINEAR_LEVELS={v} is not a number"))?,
        _ => get("firmware.levels")?.int()?,
    };
    let state = match env::var("LOGLINEAR_STATE") {
        Ok(v) if !v.is_empty() => v,
        _ => get("firmware.state")?.str()?.to_string(),
    };
    let f16 = match state.as_str() {
        "f32" => false,
        "f16" => true,
        s => return Err(format!("state type {s} is not f32 or f16")),
    };

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
        _ => root.join("models/ll-gdn-mcu-q8_0.gguf"),
    };
    let model_path = model_path
        .canonicalize()
        .map_err(|e| format!("model file {}: {e}", model_path.display()))?;
    println!("cargo:rerun-if-changed={}", model_path.display());
    let bytes = fs::read(&model_path).map_err(|e| format!("{}: {e}", model_path.display()))?;
    // The reader wants an aligned buffer: copy into u64 words.
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    let aligned = &bytemuck::cast_slice::<u64, u8>(&words)[..bytes.len()];
    let gguf = GgufModel::parse(aligned)
        .map_err(|e| format!("model file {}: {e}", model_path.display()))?;
    let model = gguf
        .model()
        .map_err(|e| format!("model file {}: {e}", model_path.display()))?;
    let c = *model.config();
    let scfg = SessionConfig {
        levels: Some(levels as usize),
    };
    let arena = if f16 {
        Session::<half::f16>::arena_bytes(&model, &scfg)
    } else {
        Session::<f32>::arena_bytes(&model, &scfg)
    }
    .map_err(|e| format!("model {}: {e}", model_path.display()))? as u64;

    // --- fit checks (the planner of issue 4 will replace these figures) -------------------
    let ram_need = arena + stack_reserve + OTHER_RAM + 4 * c.vocab_size as u64;
    if ram_need > ram_len {
        let per_level = (c.num_layers * c.num_heads * c.head_k_dim * c.head_v_dim) as u64
            * if f16 { 2 } else { 4 };
        let spare = ram_len.saturating_sub(ram_need - levels * per_level);
        return Err(format!(
            "the firmware does not fit board {board}'s RAM: {ram_len} B available, {ram_need} B \
             needed (session arena {arena} B for {levels} levels of {state} state = {per_level} B \
             per level, stack reserve {stack_reserve} B, other {} B). At most {} levels of {state} \
             fit; set LOGLINEAR_LEVELS / LOGLINEAR_STATE=f16 or [firmware] in {}",
            OTHER_RAM + 4 * c.vocab_size as u64,
            spare / per_level,
            board_toml.display()
        ));
    }
    let flash_need = bytes.len() as u64 + code_reserve;
    if flash_need > flash_len {
        return Err(format!(
            "the firmware does not fit board {board}'s flash: {flash_len} B available, model {} B \
             + code reserve {code_reserve} B needed ({})",
            bytes.len(),
            model_path.display()
        ));
    }

    // --- outputs -------------------------------------------------------------------------
    if f16 {
        println!("cargo:rustc-cfg=state_f16");
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
    writeln!(gen, "/// File name of the embedded model.").ok();
    writeln!(gen, "pub const MODEL_NAME: &str = {model_name:?};").ok();
    writeln!(gen, "/// State levels the arena is sized for.").ok();
    writeln!(gen, "pub const LEVELS: usize = {levels};").ok();
    writeln!(
        gen,
        "/// `Session::arena_bytes` for LEVELS and the state type."
    )
    .ok();
    writeln!(gen, "pub const ARENA_BYTES: usize = {arena};").ok();
    writeln!(gen, "/// Vocabulary size of the embedded model.").ok();
    writeln!(gen, "pub const VOCAB: usize = {};", c.vocab_size).ok();
    fs::write(out.join("board_config.rs"), gen).map_err(|e| e.to_string())?;

    if target.ends_with("-none-elf")
        || target.ends_with("-none-eabihf")
        || target.ends_with("-none-eabi")
    {
        fs::copy(board_dir.join("memory.x"), out.join("memory.x"))
            .map_err(|e| format!("{}: {e}", board_dir.join("memory.x").display()))?;
        println!("cargo:rustc-link-search={}", out.display());
        if target.starts_with("riscv") {
            println!("cargo:rustc-link-arg-bins=-Tmemory.x");
        }
        println!("cargo:rustc-link-arg-bins=-Tlink.x");
        if env::var_os("CARGO_FEATURE_DEFMT").is_some() {
            println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
        }
    }
    Ok(())
}

/// A value of the small TOML subset that `board.toml` uses.
#[derive(Debug)]
enum Value {
    Str(String),
    Int(u64),
    #[allow(dead_code)] // accepted in board.toml (dsp = true), not read by the build yet
    Bool(bool),
}

impl Value {
    fn str(&self) -> Result<&str, String> {
        match self {
            Value::Str(s) => Ok(s),
            v => Err(format!("expected a string, found {v:?}")),
        }
    }
    fn int(&self) -> Result<u64, String> {
        match self {
            Value::Int(i) => Ok(*i),
            v => Err(format!("expected an integer, found {v:?}")),
        }
    }
}

/// Parses `[table.sub]` headers and `key = value` lines (basic strings, decimal or hex
/// integers with `_`, booleans, `#` comments) into dotted keys. Anything else is an error, so
/// a board file never silently means something else.
fn parse_toml(text: &str) -> Result<BTreeMap<String, Value>, String> {
    let mut map = BTreeMap::new();
    let mut table = String::new();
    for (n, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        let err = |m: &str| format!("line {}: {m}: {raw}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(h) = line.strip_prefix('[') {
            table = h
                .strip_suffix(']')
                .ok_or_else(|| err("unclosed table header"))?
                .trim()
                .to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .ok_or_else(|| err("expected key = value"))?;
        let (k, v) = (k.trim(), v.trim());
        let value = if let Some(s) = v.strip_prefix('"') {
            Value::Str(
                s.strip_suffix('"')
                    .ok_or_else(|| err("unclosed string"))?
                    .to_string(),
            )
        } else if v == "true" || v == "false" {
            Value::Bool(v == "true")
        } else {
            let digits = v.replace('_', "");
            let parsed = match digits.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => digits.parse(),
            };
            Value::Int(parsed.map_err(|_| err("unsupported value"))?)
        };
        let key = if table.is_empty() {
            k.to_string()
        } else {
            format!("{table}.{k}")
        };
        map.insert(key, value);
    }
    Ok(map)
}

/// The line without a `#` comment (a `#` inside a string is kept).
fn strip_comment(line: &str) -> &str {
    let mut in_str = false;
    for (i, ch) in line.char_indices() {
        match ch {
            '"' => in_str = !in_str,
            '#' if !in_str => return &line[..i],
            _ => {}
        }
    }
    line
}
