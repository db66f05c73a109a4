//! Code and read-only data of a firmware ELF, summed by the crate that defines each symbol:
//! what `cargo bloat` reports, for a bare-metal ELF. The symbol table gives every function and
//! constant its size; the demangled path's first segment names the crate (`<T as Trait>::f` is
//! counted to the crate of `T`). With LTO, code inlined into a caller counts to the caller's
//! crate, so the figures are where the linked code lives, not where it was written.
//! Bytes of the sections that no symbol covers (padding, literal pools, the vector table's
//! unused slots) are reported as such, so the columns add up to the sections' sizes.

use std::collections::BTreeMap;

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

/// The row of the firmware's embedded model file.
pub const MODEL_ROW: &str = "[model file]";

/// Issue 19's goal for the runtime's own code and constants in a firmware image.
pub const RUNTIME_GOAL: u64 = 48 * 1024;
/// Issue 19's goal for a whole firmware image without its model file.
pub const FIRMWARE_GOAL: u64 = 64 * 1024;
/// The crate row of the runtime.
pub const RUNTIME_ROW: &str = "loglinear_runtime";

/// What an image spends on code and constants, against the goals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// The runtime's code and read-only data.
    pub runtime: u64,
    /// Code and read-only data of the whole image but the model file.
    pub without_model: u64,
}

impl Footprint {
    /// The footprint of an image summed by [`by_crate`].
    pub fn of(sums: &BTreeMap<String, CrateBytes>) -> Self {
        let bytes = |b: &CrateBytes| b.code + b.rodata;
        Self {
            runtime: sums.get(RUNTIME_ROW).map_or(0, bytes),
            without_model: sums
                .iter()
                .filter(|(name, _)| name.as_str() != MODEL_ROW)
                .map(|(_, b)| bytes(b))
                .sum(),
        }
    }
}

/// Bytes of code and read-only data of one crate (or a pseudo-crate in brackets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrateBytes {
    /// Functions (`.text` and other code sections).
    pub code: u64,
    /// Constants (`.rodata` and other read-only data sections, the model's `.model` included).
    pub rodata: u64,
}

/// The crate a demangled symbol belongs to: its path's first segment, the type's crate for
/// `<T as Trait>::f` and `<T>::f`, `[C]` for symbols that are not Rust paths (compiler
/// builtins, `memcpy`, the linker script's symbols).
pub fn crate_of(demangled: &str) -> String {
    let path = demangled
        .trim_start_matches('<')
        .trim_start_matches('&')
        .trim_start_matches("mut ")
        .trim_start_matches("dyn ");
    match path.split_once("::") {
        Some((krate, _))
            if !krate.is_empty()
                && krate.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            krate.to_string()
        }
        _ => "[C]".to_string(),
    }
}

/// Sums an ELF's code and read-only data by crate. `[unattributed]` holds what no symbol covers.
pub fn by_crate(elf: &[u8]) -> anyhow::Result<BTreeMap<String, CrateBytes>> {
    let file = object::File::parse(elf)?;
    let mut sums: BTreeMap<String, CrateBytes> = BTreeMap::new();
    let mut section_bytes = CrateBytes::default();
    for section in file.sections() {
        match section.kind() {
            SectionKind::Text => section_bytes.code += section.size(),
            SectionKind::ReadOnlyData | SectionKind::ReadOnlyString => {
                section_bytes.rodata += section.size()
            }
            _ => {}
        }
    }
    let mut covered = CrateBytes::default();
    for symbol in file.symbols() {
        if symbol.size() == 0 || !matches!(symbol.kind(), SymbolKind::Text | SymbolKind::Data) {
            continue;
        }
        let Some(index) = symbol.section_index() else {
            continue;
        };
        let kind = file.section_by_index(index)?.kind();
        // `{:#}`: the path without its hash suffix.
        let name = format!(
            "{:#}",
            rustc_demangle::demangle(symbol.name().unwrap_or(""))
        );
        // The firmware's embedded model file (firmware/src/main.rs) is data, not the
        // firmware's code: its own row.
        let krate = if name.ends_with("::MODEL_FILE") {
            MODEL_ROW.to_string()
        } else {
            crate_of(&name)
        };
        let entry = sums.entry(krate).or_default();
        match kind {
            SectionKind::Text => {
                entry.code += symbol.size();
                covered.code += symbol.size();
            }
            SectionKind::ReadOnlyData | SectionKind::ReadOnlyString => {
                entry.rodata += symbol.size();
                covered.rodata += symbol.size();
            }
            _ => {}
        }
    }
    sums.insert(
        "[unattributed]".into(),
        CrateBytes {
            code: section_bytes.code.saturating_sub(covered.code),
            rodata: section_bytes.rodata.saturating_sub(covered.rodata),
        },
    );
    sums.retain(|_, b| b.code + b.rodata > 0);
    Ok(sums)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprint_leaves_the_model_out_and_names_each_missed_goal() {
        let row = |code, rodata| CrateBytes { code, rodata };
        let sums: BTreeMap<String, CrateBytes> = [
            (RUNTIME_ROW.to_string(), row(40_000, 100)),
            (MODEL_ROW.to_string(), row(0, 1_000_000)),
            ("core".to_string(), row(20_000, 5_000)),
        ]
        .into_iter()
        .collect();
        let fp = Footprint::of(&sums);
        assert_eq!(
            fp,
            Footprint {
                runtime: 40_100,
                without_model: 65_100
            }
        );
    }

    #[test]
    fn crates_of_demangled_paths() {
        for (name, want) in [
            ("loglinear_runtime::quant::matvec_q8_0", "loglinear_runtime"),
            (
                "<loglinear_protocol::ErrCode as core::fmt::Debug>::fmt",
                "loglinear_protocol",
            ),
            ("<&mut T as core::fmt::Write>::write_str", "[C]"),
            ("<&mut half::f16 as core::fmt::Display>::fmt", "half"),
            ("core::fmt::write", "core"),
            ("__aeabi_memcpy", "[C]"),
            ("memcpy", "[C]"),
        ] {
            assert_eq!(crate_of(name), want, "{name}");
        }
    }
}
