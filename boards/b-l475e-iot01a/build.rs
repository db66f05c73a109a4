//! Link scripts of the image (cortex-m-rt's `link.x`, which includes the board's `memory.x`,
//! found through loglinear-firmware's build script, and defmt's `defmt.x`), and the clock tree:
//! the PLL settings that make board.toml's `clock_hz` from its `pll_source`, in
//! `$OUT_DIR/clock_tree.rs`. A clock the STM32L4 cannot make fails the build here, naming the
//! board and the key, rather than the HAL's assertion at boot.
use std::path::PathBuf;

fn main() {
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
    if let Err(msg) = clock_tree() {
        eprintln!("\nerror: {msg}\n");
        std::process::exit(1);
    }
}

fn clock_tree() -> Result<(), String> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").map_err(|e| e.to_string())?);
    let toml = manifest.join("board.toml");
    println!("cargo:rerun-if-changed={}", toml.display());
    let board = loglinear_planner::BoardProfile::read(&toml).map_err(|e| e.to_string())?;
    let pll = loglinear_planner::stm32l4_pll(&board)?;
    let source = match pll.source {
        loglinear_planner::Stm32l4PllSource::Hsi16 => "HSI",
        loglinear_planner::Stm32l4PllSource::Msi4 => "MSI",
    };
    let code = format!(
        "// From board.toml (clock_hz = {}, pll_source = {:?}) by build.rs.\n\
         pub const PLL: Pll = Pll {{\n    source: PllSource::{source},\n    \
         prediv: PllPreDiv::DIV{},\n    mul: PllMul::MUL{},\n    divp: None,\n    divq: None,\n    \
         divr: Some(PllRDiv::DIV{}),\n}};\n",
        board.clock_hz,
        board.pll_source.as_deref().unwrap_or_default(),
        pll.prediv,
        pll.mul,
        pll.divr
    );
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?);
    std::fs::write(out.join("clock_tree.rs"), code).map_err(|e| e.to_string())
}
