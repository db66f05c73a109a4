//! Build script of the runtime: names the per-architecture integer kernels a target can run.
//!
//! Stable Rust does not expose Arm's `dsp` target feature to `cfg`, so the target triple
//! decides: `thumbv7em-*-eabihf` (Cortex-M4F, Cortex-M7: DSP extension and an FPU with
//! half-precision conversion) gets `cfg(loglinear_arm_dsp)`, which compiles
//! `src/quant/arm_dsp.rs`; `thumbv6m-*` (Cortex-M0/M0+) gets `cfg(loglinear_arm_m0)`, which
//! dispatches to `src/quant/arm_m0.rs`.
//!
//! On `thumbv8m.main-*-eabihf` (Cortex-M33, M35P, M55, M85) the DSP extension is an option of
//! the core, so the target triple cannot tell; there the rustflags do. `-C target-cpu=` one of
//! those cores (for which LLVM enables the extension) or `-C target-feature=+dsp` enables the
//! same kernels, and a Cortex-M55 or M85 (or `+mve`) also gets `cfg(loglinear_arm_mve)`, the
//! Helium kernels of `src/quant/arm_mve.rs`.
//!
//! Every `eabihf` target of those two families (`thumbv7em-*-eabihf`,
//! `thumbv8m.main-*-eabihf`) has an FPU that converts f16 ↔ f32 in one instruction (FPv4-SP,
//! FPv5, the Armv8-M floating-point extension): `cfg(loglinear_arm_f16cvt)`, which
//! `src/half_convert.rs` uses for the f16 state.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(loglinear_arm_dsp)");
    println!("cargo::rustc-check-cfg=cfg(loglinear_arm_m0)");
    println!("cargo::rustc-check-cfg=cfg(loglinear_arm_mve)");
    println!("cargo::rustc-check-cfg=cfg(loglinear_arm_f16cvt)");
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let rustflags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let v8m_dsp = target.starts_with("thumbv8m.main-")
        && target.ends_with("eabihf")
        && rustflags
            .split('\x1f')
            .any(|f| enables(f, DSP_CORES, "+dsp"));
    let v8m_mve = target.starts_with("thumbv8m.main-")
        && target.ends_with("eabihf")
        && rustflags
            .split('\x1f')
            .any(|f| enables(f, MVE_CORES, "+mve"));
    if (target.starts_with("thumbv7em-") && target.ends_with("eabihf")) || v8m_dsp {
        println!("cargo:rustc-cfg=loglinear_arm_dsp");
    }
    if (target.starts_with("thumbv7em-") || target.starts_with("thumbv8m.main-"))
        && target.ends_with("eabihf")
    {
        println!("cargo:rustc-cfg=loglinear_arm_f16cvt");
    }
    if target.starts_with("thumbv6m-") {
        println!("cargo:rustc-cfg=loglinear_arm_m0");
    }
    if v8m_mve {
        println!("cargo:rustc-cfg=loglinear_arm_mve");
    }
}

/// Armv8-M cores for which LLVM enables the DSP extension by name. In M33 and M35P silicon the
/// extension is optional: a part built without it must not name its core here.
const DSP_CORES: &[&str] = &["cortex-m33", "cortex-m35p", "cortex-m55", "cortex-m85"];
/// Armv8.1-M cores with Helium (MVE), integer and float.
const MVE_CORES: &[&str] = &["cortex-m55", "cortex-m85"];

/// Whether one rustflags argument (`-Ctarget-cpu=...`, or the value after a separate `-C`) names
/// one of `cores` or turns `feature` (`+dsp`) on.
fn enables(flag: &str, cores: &[&str], feature: &str) -> bool {
    let flag = flag.strip_prefix("-C").unwrap_or(flag);
    if let Some(cpu) = flag.strip_prefix("target-cpu=") {
        return cores.contains(&cpu);
    }
    flag.strip_prefix("target-feature=")
        .is_some_and(|features| features.split(',').any(|f| f == feature))
}
