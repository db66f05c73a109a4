//! Build script of the runtime: names the per-architecture integer kernels a target can run.
//!
//! Stable Rust does not expose Arm's `dsp` target feature to `cfg`, so the target triple
//! decides: `thumbv7em-*-eabihf` (Cortex-M4F, Cortex-M7: DSP extension and an FPU with
//! half-precision conversion) gets `cfg(loglinear_arm_dsp)`, which compiles
//! `src/quant/arm_dsp.rs`; `thumbv6m-*` (Cortex-M0/M0+) gets `cfg(loglinear_arm_m0)`, which
//! dispatches to `src/quant/arm_m0.rs`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loglinear_arm_dsp)");
    println!("cargo::rustc-check-cfg=cfg(loglinear_arm_m0)");
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.starts_with("thumbv7em-") && target.ends_with("eabihf") {
        println!("cargo:rustc-cfg=loglinear_arm_dsp");
    }
    if target.starts_with("thumbv6m-") {
        println!("cargo:rustc-cfg=loglinear_arm_m0");
    }
}
