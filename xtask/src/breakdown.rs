//! `cargo xtask count --breakdown`: where the instructions of a token go.
//!
//! The counted runs use the `pc_histogram` plugin (`xtask/plugins/pc_histogram.c`), which
//! counts the executions of every instruction address exactly. The difference of the two runs,
//! address by address, is what the tokens cost. Each address is attributed through the
//! firmware's DWARF (the firmware is built with `debug = 2`): of the functions that contain it,
//! innermost first, inlined ones included, the first that a rule of [`RULES`] names gives its
//! part. So a conversion inlined into the state loop counts as conversion, and a bounds check
//! inlined into a matvec counts as matvec. Functions that are called rather than inlined (libm,
//! `memset`, the soft-float helpers) have no caller in the DWARF of their own code, so they are
//! parts of their own.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context};
use object::{Object as _, ObjectSection as _, SectionKind};

/// A part of a token, one row of the table.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Part {
    Matvec,
    Quantize,
    StateConvert,
    StateMerge,
    StateStep,
    Gates,
    WeightLookup,
    Session,
    Sampler,
    Protocol,
    Libm,
    MemFunctions,
    Builtins,
    Other,
}

impl Part {
    /// Every part, in the table's order.
    pub const ALL: [Part; 14] = [
        Part::Matvec,
        Part::Quantize,
        Part::StateConvert,
        Part::StateMerge,
        Part::StateStep,
        Part::Gates,
        Part::WeightLookup,
        Part::Session,
        Part::Sampler,
        Part::Protocol,
        Part::Libm,
        Part::MemFunctions,
        Part::Builtins,
        Part::Other,
    ];

    /// The row's label.
    pub fn label(self) -> &'static str {
        match self {
            Part::Matvec => "matvecs (kernels and their dispatch)",
            Part::Quantize => "activations quantized to q8",
            Part::StateConvert => "state: f16 ↔ f32 conversion",
            Part::StateMerge => "state: merge",
            Part::StateStep => "state: transition, insert, read (fused)",
            Part::Gates => "norms, activations, gates, conv (layers, math)",
            Part::WeightLookup => "weights looked up by name (gguf, model)",
            Part::Session => "session: embedding, residuals, head",
            Part::Sampler => "sampler",
            Part::Protocol => "protocol and log",
            Part::Libm => "libm (called: exp, log, round, max ...)",
            Part::MemFunctions => "memcpy, memmove, memset, memcmp (called)",
            Part::Builtins => "compiler builtins (called: soft-float, division)",
            Part::Other => "other",
        }
    }
}

/// A rule's verdict on a function.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// The function's instructions are this part's.
    Part(Part),
    /// A helper (an f16 conversion, a scalar maths function): its instructions are those of a
    /// matvec or of the activations' quantization when one of those contains it, else this
    /// part's.
    Helper(Part),
}

/// The rules, in the order they are tried against one function name (demangled, with its
/// path): the first whose pattern the name contains gives the verdict. More specific patterns
/// come before the paths that contain them.
pub const RULES: &[(&str, Verdict)] = &[
    ("merge_block", Verdict::Part(Part::StateMerge)),
    (
        "loglinear_runtime::state_kernels::",
        Verdict::Part(Part::StateStep),
    ),
    (
        "loglinear_runtime::half_convert::",
        Verdict::Helper(Part::StateConvert),
    ),
    ("half::binary16", Verdict::Helper(Part::StateConvert)),
    ("loglinear_runtime::math::", Verdict::Helper(Part::Gates)),
    (
        "loglinear_runtime::quant::quantize_activations",
        Verdict::Part(Part::Quantize),
    ),
    ("::quantize", Verdict::Part(Part::Quantize)),
    ("loglinear_runtime::quant::", Verdict::Part(Part::Matvec)),
    ("loglinear_runtime::tensor::", Verdict::Part(Part::Matvec)),
    ("FenwickState<E>>::merge", Verdict::Part(Part::StateMerge)),
    (
        "FenwickState$LT$E$GT$::merge",
        Verdict::Part(Part::StateMerge),
    ),
    (
        "loglinear_runtime::fenwick::",
        Verdict::Part(Part::StateStep),
    ),
    (
        "loglinear_runtime::gguf::",
        Verdict::Part(Part::WeightLookup),
    ),
    (
        "loglinear_runtime::model::",
        Verdict::Part(Part::WeightLookup),
    ),
    ("loglinear_runtime::layers::", Verdict::Part(Part::Gates)),
    ("loglinear_runtime::session::", Verdict::Part(Part::Session)),
    ("loglinear_runtime::sampler::", Verdict::Part(Part::Sampler)),
    ("loglinear_protocol::", Verdict::Part(Part::Protocol)),
    ("loglinear_firmware::", Verdict::Part(Part::Protocol)),
    ("core::fmt::", Verdict::Part(Part::Protocol)),
    ("libm::", Verdict::Part(Part::Libm)),
    ("compiler_builtins::mem", Verdict::Part(Part::MemFunctions)),
    ("__aeabi_mem", Verdict::Part(Part::MemFunctions)),
    ("memcpy", Verdict::Part(Part::MemFunctions)),
    ("memmove", Verdict::Part(Part::MemFunctions)),
    ("memset", Verdict::Part(Part::MemFunctions)),
    ("memcmp", Verdict::Part(Part::MemFunctions)),
    ("bcmp", Verdict::Part(Part::MemFunctions)),
    ("compiler_builtins::", Verdict::Part(Part::Builtins)),
    ("__aeabi_", Verdict::Part(Part::Builtins)),
];

/// The verdict on one function name, if a rule names it.
pub fn verdict_of_name(name: &str) -> Option<Verdict> {
    RULES
        .iter()
        .find(|(pattern, _)| name.contains(pattern))
        .map(|&(_, v)| v)
}

/// The part of an address whose containing functions, innermost first, are `names`: the
/// innermost function a rule names decides, else [`Part::Other`]; a helper takes the part of
/// the nearest function around it that is no helper when that is a matvec or the
/// quantization (see [`Verdict::Helper`]).
pub fn part_of_frames<'a>(names: impl IntoIterator<Item = &'a str>) -> Part {
    let mut verdicts = names.into_iter().filter_map(verdict_of_name);
    match verdicts.next() {
        Some(Verdict::Part(p)) => p,
        Some(Verdict::Helper(own)) => match verdicts.find_map(|v| match v {
            Verdict::Part(p) => Some(p),
            Verdict::Helper(_) => None,
        }) {
            Some(p @ (Part::Matvec | Part::Quantize)) => p,
            _ => own,
        },
        None => Part::Other,
    }
}

/// The firmware's code: the lowest and one past the highest address of its executable
/// sections, for the plugin's `lo=` and `hi=`.
pub fn code_range(elf: &Path) -> anyhow::Result<(u64, u64)> {
    let data = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not a readable ELF file", elf.display()))?;
    let mut range: Option<(u64, u64)> = None;
    for s in file.sections() {
        if s.kind() != SectionKind::Text || s.size() == 0 {
            continue;
        }
        let (lo, hi) = (s.address(), s.address() + s.size());
        range = Some(match range {
            Some((a, b)) => (a.min(lo), b.max(hi)),
            None => (lo, hi),
        });
    }
    range.with_context(|| format!("{} has no executable section", elf.display()))
}

/// The plugin's arguments after its path: `,lo=HEX,hi=HEX,out=PATH`.
pub fn plugin_args(range: (u64, u64), out: &Path) -> String {
    format!(",lo={:x},hi={:x},out={}", range.0, range.1, out.display())
}

/// A histogram the plugin wrote: executions per address, and those outside the code.
#[derive(Debug, Default, PartialEq)]
pub struct Histogram {
    /// Executions of each address that ran.
    pub counts: BTreeMap<u64, u64>,
    /// Executions outside the firmware's code (a boot ROM, say).
    pub outside: u64,
}

impl Histogram {
    /// Parses the plugin's file (`HEXADDR COUNT` lines, then `outside COUNT`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut h = Histogram::default();
        for (i, line) in text.lines().enumerate() {
            let bad = || format!("line {}: `{line}` is not `ADDRESS COUNT`", i + 1);
            let (addr, count) = line.split_once(' ').ok_or_else(bad)?;
            let count: u64 = count.parse().map_err(|_| bad())?;
            if addr == "outside" {
                h.outside += count;
            } else {
                let addr = u64::from_str_radix(addr, 16).map_err(|_| bad())?;
                *h.counts.entry(addr).or_default() += count;
            }
        }
        Ok(h)
    }

    /// Reads and parses the plugin's file.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

/// Executions per address of `long` minus those of `short` (the run that decoded no token);
/// addresses where they are equal are left out.
pub fn difference(long: &Histogram, short: &Histogram) -> BTreeMap<u64, i64> {
    let mut d: BTreeMap<u64, i64> = BTreeMap::new();
    for (&a, &c) in &long.counts {
        *d.entry(a).or_default() += c as i64;
    }
    for (&a, &c) in &short.counts {
        *d.entry(a).or_default() -= c as i64;
    }
    d.retain(|_, c| *c != 0);
    d
}

/// Instructions of each part, from per-address counts and a function that names an address's
/// containing functions. Also returns, for [`Part::Other`], the innermost function names that
/// took the most (for refining [`RULES`]).
pub fn attribute(
    counts: &BTreeMap<u64, i64>,
    mut frames: impl FnMut(u64) -> Vec<String>,
) -> (BTreeMap<Part, i64>, Vec<(String, i64)>) {
    let mut parts: BTreeMap<Part, i64> = BTreeMap::new();
    let mut other: BTreeMap<String, i64> = BTreeMap::new();
    for (&addr, &c) in counts {
        let names = frames(addr);
        let part = part_of_frames(names.iter().map(String::as_str));
        *parts.entry(part).or_default() += c;
        if part == Part::Other {
            let name = names
                .first()
                .cloned()
                .unwrap_or_else(|| format!("{addr:#x}"));
            *other.entry(name).or_default() += c;
        }
    }
    let mut other: Vec<(String, i64)> = other.into_iter().collect();
    other.sort_by_key(|o| std::cmp::Reverse(o.1));
    (parts, other)
}

/// The containing functions of code addresses in one ELF file, from its DWARF.
pub struct Symbolizer {
    loader: addr2line::Loader,
}

impl Symbolizer {
    /// Loads `elf`'s debug information.
    pub fn new(elf: &Path) -> anyhow::Result<Self> {
        let loader = addr2line::Loader::new(elf)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("reading the DWARF of {}", elf.display()))?;
        Ok(Self { loader })
    }

    /// The functions containing `addr`, innermost first (inlined ones included); the symbol
    /// table's name when the DWARF has none.
    pub fn frames(&self, addr: u64) -> Vec<String> {
        let mut names = Vec::new();
        if let Ok(mut it) = self.loader.find_frames(addr) {
            while let Ok(Some(frame)) = it.next() {
                if let Some(name) = frame.function.as_ref().and_then(|f| f.demangle().ok()) {
                    names.push(name.into_owned());
                }
            }
        }
        if let Some(sym) = self.loader.find_symbol(addr) {
            names.push(rustc_demangle::demangle(sym).to_string());
        }
        names
    }
}

/// The breakdown of one board: instructions per token of each part.
pub struct Breakdown {
    /// Instructions per token of each part, in [`Part::ALL`]'s order (parts of no
    /// instruction left out).
    pub rows: Vec<(Part, f64)>,
    /// Instructions per token in all.
    pub total: f64,
    /// The innermost functions of [`Part::Other`] that took the most, per token.
    pub other: Vec<(String, f64)>,
}

impl Breakdown {
    /// The breakdown of `tokens` tokens: the runs' histograms and the firmware.
    pub fn of(
        elf: &Path,
        short: &Histogram,
        long: &Histogram,
        tokens: u64,
    ) -> anyhow::Result<Self> {
        if tokens == 0 {
            bail!("a breakdown needs at least one token");
        }
        let sym = Symbolizer::new(elf)?;
        let mut diff = difference(long, short);
        let outside = long.outside as i64 - short.outside as i64;
        let (mut parts, other) = attribute(&diff, |a| sym.frames(a));
        if outside != 0 {
            *parts.entry(Part::Other).or_default() += outside;
            diff.insert(u64::MAX, outside);
        }
        let per = |c: i64| c as f64 / tokens as f64;
        let total = per(diff.values().sum());
        let rows = Part::ALL
            .iter()
            .filter_map(|p| parts.get(p).filter(|&&c| c != 0).map(|&c| (*p, per(c))))
            .collect();
        let other = other
            .into_iter()
            .take(5)
            .map(|(n, c)| (n, per(c)))
            .collect();
        Ok(Self { rows, total, other })
    }

    /// The markdown table: part, instructions per token, share, per weight-MAC.
    pub fn table(&self, macs: u64) -> String {
        let mut s = String::new();
        s.push_str("| part | insns / token | share | insns / weight-MAC |\n");
        s.push_str("| --- | ---: | ---: | ---: |\n");
        for &(part, n) in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {:.0} | {:.1} % | {:.2} |",
                part.label(),
                n,
                100.0 * n / self.total,
                n / macs as f64
            );
        }
        let _ = writeln!(
            s,
            "| **all** | **{:.0}** | 100 % | **{:.2}** |",
            self.total,
            self.total / macs as f64
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_innermost_named_function_decides() {
        let frames = [
            "core::num::<impl u32>::checked_add",
            "loglinear_runtime::half_convert::widen_slice",
            "loglinear_runtime::fenwick::level_pass",
            "loglinear_runtime::layers::gdn::step",
        ];
        assert_eq!(part_of_frames(frames), Part::StateConvert);
        assert_eq!(part_of_frames(frames[2..].iter().copied()), Part::StateStep);
        assert_eq!(part_of_frames(frames[3..].iter().copied()), Part::Gates);
        assert_eq!(part_of_frames(["core::ptr::write"]), Part::Other);
        let scale = [
            "loglinear_runtime::half_convert::widen",
            "half::binary16::f16::to_f32",
            "loglinear_runtime::quant::q8_0_f32",
            "loglinear_runtime::tensor::TensorView::matvec_input",
        ];
        assert_eq!(part_of_frames(scale), Part::Matvec);
        assert_eq!(
            part_of_frames(scale[..2].iter().copied()),
            Part::StateConvert
        );
        let round = [
            "loglinear_runtime::math::round_to_i8",
            "loglinear_runtime::quant::ActBlock::quantize",
        ];
        assert_eq!(part_of_frames(round), Part::Quantize);
        let silu = [
            "loglinear_runtime::math::silu",
            "loglinear_runtime::layers::mlp_step",
        ];
        assert_eq!(part_of_frames(silu), Part::Gates);
        assert_eq!(part_of_frames([]), Part::Other);
    }

    /// The part a name alone gives, helpers as if nothing contained them.
    fn part_of_name(name: &str) -> Option<Part> {
        verdict_of_name(name).map(|v| match v {
            Verdict::Part(p) | Verdict::Helper(p) => p,
        })
    }

    #[test]
    fn specific_patterns_win_over_their_paths() {
        let q = "loglinear_runtime::quant::quantize_activations";
        assert_eq!(part_of_name(q), Some(Part::Quantize));
        assert_eq!(
            part_of_name("loglinear_runtime::quant::arm_dsp::run_q8"),
            Some(Part::Matvec)
        );
        assert_eq!(
            part_of_name("loglinear_runtime::fenwick::merge_block"),
            Some(Part::StateMerge)
        );
        assert_eq!(
            part_of_name("loglinear_runtime::state_kernels::arm::merge_block"),
            Some(Part::StateMerge)
        );
        assert_eq!(
            part_of_name("loglinear_runtime::state_kernels::arm::level_pass"),
            Some(Part::StateStep)
        );
        assert_eq!(
            part_of_name("loglinear_runtime::fenwick::FenwickState<E>>::merge"),
            Some(Part::StateMerge)
        );
        assert_eq!(
            part_of_name("compiler_builtins::mem::memcpy"),
            Some(Part::MemFunctions)
        );
        assert_eq!(
            part_of_name("compiler_builtins::float::add::__addsf3"),
            Some(Part::Builtins)
        );
        assert_eq!(part_of_name("libm::math::expf::expf"), Some(Part::Libm));
    }

    #[test]
    fn every_part_has_a_rule_or_is_the_rest() {
        for part in Part::ALL {
            assert!(
                part == Part::Other
                    || RULES
                        .iter()
                        .any(|&(_, v)| v == Verdict::Part(part) || v == Verdict::Helper(part)),
                "{part:?} has no rule"
            );
        }
    }

    #[test]
    fn histograms_parse_and_subtract() {
        let long = Histogram::parse("400 10\n402 7\n500 3\noutside 4\n").unwrap();
        let short = Histogram::parse("400 6\n402 7\noutside 1\n").unwrap();
        assert_eq!(long.counts.values().sum::<u64>(), 20);
        assert_eq!(short.outside, 1);
        let d = difference(&long, &short);
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            vec![(0x400, 4), (0x500, 3)]
        );
        let e = Histogram::parse("400 10\nnope\n").unwrap_err();
        assert!(e.contains("line 2") && e.contains("nope"), "{e}");
        assert!(Histogram::parse("zz 1\n").is_err());
        assert!(Histogram::parse("400 -1\n").is_err());
    }

    #[test]
    fn attribution_sums_per_part_and_names_the_rest() {
        let counts: BTreeMap<u64, i64> = [(0x10, 5), (0x12, 7), (0x20, 2), (0x30, 1)].into();
        let (parts, other) = attribute(&counts, |a| match a {
            0x10 | 0x12 => vec!["loglinear_runtime::quant::arm_dsp::run_q8".into()],
            0x20 => vec!["mystery".into()],
            _ => vec![],
        });
        assert_eq!(parts[&Part::Matvec], 12);
        assert_eq!(parts[&Part::Other], 3);
        assert_eq!(other[0], ("mystery".to_string(), 2));
        assert_eq!(other[1], ("0x30".to_string(), 1));
    }

    #[test]
    fn the_table_gives_shares_and_per_mac_figures() {
        let b = Breakdown {
            rows: vec![(Part::Matvec, 300.0), (Part::Sampler, 100.0)],
            total: 400.0,
            other: vec![],
        };
        let t = b.table(200);
        assert!(
            t.contains("| matvecs (kernels and their dispatch) | 300 | 75.0 % | 1.50 |"),
            "{t}"
        );
        assert!(
            t.contains("| **all** | **400** | 100 % | **2.00** |"),
            "{t}"
        );
    }
}
