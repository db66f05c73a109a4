//! Size snapshots (the RTIC way) of a firmware ELF against `boards/<board>/size.txt`, for
//! `cargo xtask boards` (the hardware board crates) and `cargo xtask plan` (the QEMU boards):
//!
//! * the ELF's allocated sections in four classes: text = code (`.vector_table`, `.boot2`,
//!   `.text`, `.text.*`, `.init.rust`, `.eh_frame`, `.gnu.sgstubs`; esp-hal's `.rwtext` and
//!   `.trap`), rodata = `.rodata`, `.model` (the model) and esp-hal's `.flash.appdesc`, data =
//!   `.data`, bss = `.bss`. riscv-rt's `.stack` and `.heap` (the rest of the RAM) and the empty
//!   `.uninit` are not statics, so they count nowhere;
//! * the check: bss must equal the snapshot's (it is the session arena and the statics, which
//!   the planner predicts to the byte), text, rodata and data must lie within max(4096 B, 2 %)
//!   of it (code size drifts with the toolchain and the dependencies). On a mismatch the error
//!   lists each figure out of tolerance, a `diff -u` of the file against the build, and the
//!   command that rewrites it;
//! * `--update` writes the file from the build: three comment lines and `printf '%-6s %9d'`
//!   lines, so that equal sizes give a byte-identical file.
//!
//! The sections are read with the `object` crate, so neither binutils' `size` nor `llvm-size`
//! is needed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use object::{elf, Object, ObjectSection, SectionFlags};

/// Tolerance of text, rodata and data: max(`TOLERANCE_BYTES`, `TOLERANCE_PERCENT` % of the
/// snapshot's figure). bss has none.
pub const TOLERANCE_BYTES: u64 = 4096;
/// See [`TOLERANCE_BYTES`].
pub const TOLERANCE_PERCENT: u64 = 2;

/// The classes of a size snapshot, in the order of size.txt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Code.
    Text,
    /// The model and the constants.
    Rodata,
    /// Initialised statics (copied from flash to RAM at start).
    Data,
    /// Zeroed statics: the session arena and the rest.
    Bss,
}

impl Class {
    /// Every class, in the order of size.txt.
    pub const ALL: [Class; 4] = [Class::Text, Class::Rodata, Class::Data, Class::Bss];

    /// The name of the class in size.txt.
    pub fn key(self) -> &'static str {
        match self {
            Class::Text => "text",
            Class::Rodata => "rodata",
            Class::Data => "data",
            Class::Bss => "bss",
        }
    }

    /// The class of an ELF section by its name; `None` for a section that counts nowhere.
    pub fn of(section: &str) -> Option<Class> {
        match section {
            ".vector_table" | ".boot2" | ".text" | ".init.rust" | ".eh_frame" | ".gnu.sgstubs"
            | ".rwtext" | ".trap" => Some(Class::Text),
            s if s.starts_with(".text.") => Some(Class::Text),
            ".rodata" | ".model" | ".flash.appdesc" => Some(Class::Rodata),
            ".data" => Some(Class::Data),
            ".bss" => Some(Class::Bss),
            _ => None,
        }
    }

    /// How far a build may lie from the snapshot's figure `snapshot`: nothing for bss, else
    /// max(4096 B, 2 %).
    pub fn tolerance(self, snapshot: u64) -> u64 {
        match self {
            Class::Bss => 0,
            _ => (snapshot * TOLERANCE_PERCENT / 100).max(TOLERANCE_BYTES),
        }
    }
}

/// The bytes of each class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    /// Code.
    pub text: u64,
    /// The model and the constants.
    pub rodata: u64,
    /// Initialised statics.
    pub data: u64,
    /// Zeroed statics.
    pub bss: u64,
}

impl Sizes {
    /// The bytes of `class`.
    pub fn get(&self, class: Class) -> u64 {
        match class {
            Class::Text => self.text,
            Class::Rodata => self.rodata,
            Class::Data => self.data,
            Class::Bss => self.bss,
        }
    }

    fn get_mut(&mut self, class: Class) -> &mut u64 {
        match class {
            Class::Text => &mut self.text,
            Class::Rodata => &mut self.rodata,
            Class::Data => &mut self.data,
            Class::Bss => &mut self.bss,
        }
    }

    /// The sums over `sections` by [`Class::of`] of their names.
    pub fn of_sections(sections: &[Section]) -> Self {
        let mut sizes = Self::default();
        for s in sections {
            if let Some(class) = Class::of(&s.name) {
                *sizes.get_mut(class) += s.size;
            }
        }
        sizes
    }

    /// The figures as size.txt holds them: `text      138384`, one line each.
    pub fn lines(&self) -> String {
        let mut out = String::new();
        for class in Class::ALL {
            // Writing to a String cannot fail.
            let _ = writeln!(out, "{:<6} {:>9}", class.key(), self.get(class));
        }
        out
    }
}

/// A section of an ELF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// Its name.
    pub name: String,
    /// Bytes in memory.
    pub size: u64,
    /// Its (run-time) address.
    pub address: u64,
    /// `SHF_ALLOC`: it takes memory at run time.
    pub alloc: bool,
    /// `SHF_EXECINSTR`: code.
    pub exec: bool,
    /// `SHF_WRITE`: writable.
    pub write: bool,
    /// `SHT_NOBITS`: no bytes in the file (zero-filled, `.bss`).
    pub nobits: bool,
}

/// What the tasks read from an ELF file: its sections and its machine.
#[derive(Clone, Debug)]
pub struct Elf {
    /// The sections in the order of the section headers.
    pub sections: Vec<Section>,
    /// The ELF header's machine.
    pub architecture: object::Architecture,
}

impl Elf {
    /// Reads an ELF file (32 or 64 bits).
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&bytes)
            .with_context(|| format!("{} is not a readable ELF file", path.display()))
    }

    /// Parses the bytes of an ELF file.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let file = object::File::parse(bytes)?;
        if file.format() != object::BinaryFormat::Elf {
            bail!("a {:?} file, not ELF", file.format());
        }
        let mut sections = Vec::new();
        for s in file.sections() {
            let (sh_type, flags) = match s.flags() {
                SectionFlags::Elf { sh_type, sh_flags } => (sh_type, sh_flags.0),
                _ => (elf::SectionType(0), 0),
            };
            sections.push(Section {
                name: s.name().context("a section name is not UTF-8")?.to_string(),
                size: s.size(),
                address: s.address(),
                alloc: flags & elf::SHF_ALLOC.0 != 0,
                exec: flags & elf::SHF_EXECINSTR.0 != 0,
                write: flags & elf::SHF_WRITE.0 != 0,
                nobits: sh_type == elf::SHT_NOBITS,
            });
        }
        Ok(Self {
            sections,
            architecture: file.architecture(),
        })
    }

    /// The first section called `name`.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// The snapshot's figures.
    pub fn sizes(&self) -> Sizes {
        Sizes::of_sections(&self.sections)
    }

    /// Sum of the sizes of the sections named in `names`.
    pub fn bytes_of(&self, names: &[&str]) -> u64 {
        self.sections
            .iter()
            .filter(|s| names.contains(&s.name.as_str()))
            .map(|s| s.size)
            .sum()
    }

    /// Text, data and bss as binutils' `size` (Berkeley format) sums them over the allocated
    /// sections: code and read-only sections are text, writable ones with file bytes data, the
    /// zero-filled rest bss.
    pub fn berkeley(&self) -> (u64, u64, u64) {
        let (mut text, mut data, mut bss) = (0, 0, 0);
        for s in self.sections.iter().filter(|s| s.alloc) {
            if s.exec || !s.write {
                text += s.size;
            } else if !s.nobits {
                data += s.size;
            } else {
                bss += s.size;
            }
        }
        (text, data, bss)
    }

    /// The table that `size FILE` prints, each line after `indent`.
    pub fn berkeley_table(&self, file: &Path, indent: &str) -> String {
        let (text, data, bss) = self.berkeley();
        let total = text + data + bss;
        format!(
            "{indent}   text\t   data\t    bss\t    dec\t    hex\tfilename\n\
             {indent}{text:>7}\t{data:>7}\t{bss:>7}\t{total:>7}\t{total:>7x}\t{}\n",
            file.display()
        )
    }

    /// `  .text             137784 B at 0x08000298` for each section named in `names`, in the
    /// order of the section headers.
    pub fn section_lines(&self, names: &[&str]) -> String {
        let mut out = String::new();
        for s in self
            .sections
            .iter()
            .filter(|s| names.contains(&s.name.as_str()))
        {
            let _ = writeln!(
                out,
                "  {:<14} {:>9} B at {:#010x}",
                s.name, s.size, s.address
            );
        }
        out
    }
}

/// The path of a board's snapshot.
pub fn path(board: &str) -> PathBuf {
    Path::new("boards").join(board).join("size.txt")
}

/// The command that rewrites a board's size.txt: `cargo xtask <task> --update <board>`.
pub fn update_command(task: &str, board: &str) -> String {
    format!("cargo xtask {task} --update {board}")
}

/// The text of size.txt for `sizes` of an image with `model`.
pub fn file_text(model: &Path, update_command: &str, sizes: &Sizes) -> String {
    format!(
        "# Firmware ELF sizes in bytes ({}, the board's [firmware] settings).\n\
         # Checked in the tests; update with: {update_command}\n\
         # text = code sections; rodata = model + constants; bss = session arena + statics\n\
         {}",
        model.display(),
        sizes.lines()
    )
}

/// The figure of `key` in a snapshot's text: the second field of the first line whose first
/// field is `key`; `None` when no line has it, `Some(Err(field))` when it is not a number.
fn figure<'a>(text: &'a str, key: &str) -> Option<Result<u64, &'a str>> {
    text.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        if fields.next() != Some(key) {
            return None;
        }
        let field = fields.next().unwrap_or("");
        Some(field.parse().map_err(|_| field))
    })
}

/// What is wrong with `current` against the snapshot `text` (read from `path`): one line per
/// figure missing from the file or out of tolerance; empty when they match.
pub fn compare(text: &str, path: &Path, current: &Sizes) -> Vec<String> {
    let mut bad = Vec::new();
    for class in Class::ALL {
        let key = class.key();
        let want = match figure(text, key) {
            None => {
                bad.push(format!("{key} missing from {}", path.display()));
                continue;
            }
            Some(Err(field)) => {
                bad.push(format!(
                    "{key}: {field:?} in {} is not a number of bytes",
                    path.display()
                ));
                continue;
            }
            Some(Ok(want)) => want,
        };
        let got = current.get(class);
        let (apart, tolerance) = (got.abs_diff(want), class.tolerance(want));
        if apart > tolerance {
            let way = if got > want { "more" } else { "less" };
            bad.push(format!(
                "{key}: snapshot {want} B, build {got} B ({apart} B {way}, tolerance {tolerance} B)"
            ));
        }
    }
    bad
}

/// The lines of `text` that are not comments (`grep -v '^#'`).
fn figures_only(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `diff -u` of two short texts as one hunk that holds every line (size.txt has four figures,
/// so `diff`'s three lines of context take them all).
pub fn unified_diff(old_label: &str, old: &str, new_label: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let range = |n: usize| match n {
        0 => "0,0".to_string(),
        1 => "1".to_string(),
        n => format!("1,{n}"),
    };
    let mut out = format!(
        "--- {old_label}\n+++ {new_label}\n@@ -{} +{} @@\n",
        range(a.len()),
        range(b.len())
    );
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            let _ = writeln!(out, " {}", a[i]);
            i += 1;
            j += 1;
        } else if j == b.len() || (i < a.len() && lcs[i + 1][j] >= lcs[i][j + 1]) {
            let _ = writeln!(out, "-{}", a[i]);
            i += 1;
        } else {
            let _ = writeln!(out, "+{}", b[j]);
            j += 1;
        }
    }
    out
}

fn indented(text: &str, indent: &str) -> String {
    text.lines().map(|l| format!("{indent}{l}\n")).collect()
}

/// Checks `sizes`, an image of `board` with `model`, against `boards/<board>/size.txt`, or with
/// `update` writes that file. The error of a mismatch says what differs and how to rewrite the
/// file (`update_command`) after an intended change.
pub fn check(
    board: &str,
    sizes: &Sizes,
    model: &Path,
    update: bool,
    update_command: &str,
) -> Result<()> {
    let snap = path(board);
    let current = sizes.lines();
    if update {
        std::fs::write(&snap, file_text(model, update_command, sizes))
            .with_context(|| format!("writing {}", snap.display()))?;
        println!("  updated {}", snap.display());
        print!("{}", indented(&current, "    "));
        return Ok(());
    }
    let text = match std::fs::read_to_string(&snap) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no {} (create it with: {update_command})", snap.display())
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", snap.display())),
    };
    let bad = compare(&text, &snap, sizes);
    if !bad.is_empty() {
        let mut msg = format!("firmware sizes differ from {}:\n", snap.display());
        for line in bad {
            let _ = writeln!(msg, "  {line}");
        }
        msg += &unified_diff(
            &format!("{} (snapshot)", snap.display()),
            &figures_only(&text),
            &format!("{board} build"),
            &current,
        );
        let _ = write!(
            msg,
            "  If the change is intended: {update_command}, and commit {}",
            snap.display()
        );
        bail!(msg);
    }
    println!(
        "  ok: sizes match {} (bss exact, others within max({TOLERANCE_BYTES} B, \
         {TOLERANCE_PERCENT} %))",
        snap.display()
    );
    print!("{}", indented(&current, "    "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(name: &str, size: u64) -> Section {
        Section {
            name: name.into(),
            size,
            address: 0,
            alloc: true,
            exec: false,
            write: false,
            nobits: false,
        }
    }

    const SNAPSHOT: &str = "\
# Firmware ELF sizes in bytes (models/m.gguf, the board's [firmware] settings).
# Checked in the tests; update with: cargo xtask boards --update b
# text = code sections; rodata = model + constants; bss = session arena + statics
text      138384
rodata   1279304
data         348
bss       277256
";

    const SIZES: Sizes = Sizes {
        text: 138384,
        rodata: 1279304,
        data: 348,
        bss: 277256,
    };

    #[test]
    fn sections_are_classified_by_name() {
        for name in [
            ".vector_table",
            ".boot2",
            ".text",
            ".text.",
            ".text.unlikely",
            ".init.rust",
            ".eh_frame",
            ".gnu.sgstubs",
            ".rwtext",
            ".trap",
        ] {
            assert_eq!(Class::of(name), Some(Class::Text), "{name}");
        }
        for name in [".rodata", ".model", ".flash.appdesc"] {
            assert_eq!(Class::of(name), Some(Class::Rodata), "{name}");
        }
        assert_eq!(Class::of(".data"), Some(Class::Data));
        assert_eq!(Class::of(".bss"), Some(Class::Bss));
        for name in [
            ".stack",
            ".heap",
            ".uninit",
            ".rodata.x",
            ".bss.x",
            ".texts",
            ".debug_info",
            "text",
        ] {
            assert_eq!(Class::of(name), None, "{name}");
        }
        let sizes = Sizes::of_sections(&[
            section(".vector_table", 1),
            section(".text", 10),
            section(".text.x", 100),
            section(".rodata", 2),
            section(".model", 20),
            section(".data", 3),
            section(".bss", 4),
            section(".stack", 1000),
        ]);
        assert_eq!(
            sizes,
            Sizes {
                text: 111,
                rodata: 22,
                data: 3,
                bss: 4
            }
        );
    }

    #[test]
    fn berkeley_sums_follow_binutils() {
        let mut code = section(".text", 10);
        code.exec = true;
        let ro = section(".rodata", 20);
        let mut data = section(".data", 3);
        data.write = true;
        let mut bss = section(".bss", 4);
        (bss.write, bss.nobits) = (true, true);
        let mut debug = section(".debug_info", 1000);
        debug.alloc = false;
        let elf = Elf {
            sections: vec![code, ro, data, bss, debug],
            architecture: object::Architecture::Arm,
        };
        assert_eq!(elf.berkeley(), (30, 3, 4));
        assert_eq!(
            elf.berkeley_table(Path::new("fw.elf"), "  "),
            concat!(
                "     text\t   data\t    bss\t    dec\t    hex\tfilename\n",
                "       30\t      3\t      4\t     37\t     25\tfw.elf\n"
            )
        );
        assert_eq!(
            elf.section_lines(&[".text", ".bss"]),
            "  .text                 10 B at 0x00000000\n  .bss                   4 B at 0x00000000\n"
        );
        assert_eq!(elf.bytes_of(&[".text", ".data"]), 13);
    }

    #[test]
    fn size_txt_is_written_as_the_tests_check_it() {
        let text = file_text(
            Path::new("models/m.gguf"),
            "cargo xtask boards --update b",
            &SIZES,
        );
        assert_eq!(text, SNAPSHOT);
        assert_eq!(figure(SNAPSHOT, "rodata"), Some(Ok(1279304)));
        assert_eq!(figure(SNAPSHOT, "stack"), None);
        assert_eq!(figure("text 12k\n", "text"), Some(Err("12k")));
        assert_eq!(figure("text\n", "text"), Some(Err("")));
    }

    #[test]
    fn tolerance_is_exact_for_bss_and_loose_for_the_rest() {
        assert_eq!(Class::Bss.tolerance(1_000_000), 0);
        assert_eq!(Class::Text.tolerance(1000), 4096);
        assert_eq!(Class::Text.tolerance(204_800), 4096);
        assert_eq!(Class::Rodata.tolerance(1_279_304), 25586);
        let p = Path::new("size.txt");
        assert!(compare(SNAPSHOT, p, &SIZES).is_empty());
        let within = Sizes {
            text: SIZES.text + 4096,
            rodata: SIZES.rodata - 25586,
            data: 0,
            ..SIZES
        };
        assert!(compare(SNAPSHOT, p, &within).is_empty());
        let beyond = Sizes {
            text: SIZES.text + 4097,
            bss: SIZES.bss - 1,
            ..SIZES
        };
        assert_eq!(
            compare(SNAPSHOT, p, &beyond),
            [
                "text: snapshot 138384 B, build 142481 B (4097 B more, tolerance 4096 B)",
                "bss: snapshot 277256 B, build 277255 B (1 B less, tolerance 0 B)",
            ]
        );
        let partial = "text 1\nrodata x\n";
        assert_eq!(
            compare(partial, p, &SIZES)
                .iter()
                .filter(|l| l.contains("missing") || l.contains("not a number"))
                .count(),
            3
        );
    }

    /// Every committed size.txt is what `--update` writes for its own figures, so rewriting
    /// one changes the lines whose figures changed alone.
    #[test]
    fn committed_snapshots_are_in_the_written_format() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../boards");
        let mut seen = 0;
        for name in loglinear_planner::Board::list(Some(&dir)) {
            let path = dir.join(&name).join("size.txt");
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let at = |key| match figure(&text, key) {
                Some(Ok(bytes)) => bytes,
                other => panic!("{}: {key}: {other:?}", path.display()),
            };
            let sizes = Sizes {
                text: at("text"),
                rodata: at("rodata"),
                data: at("data"),
                bss: at("bss"),
            };
            let model = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# Firmware ELF sizes in bytes ("))
                .and_then(|l| l.split(", the board's").next())
                .unwrap_or_else(|| panic!("{}: no model on the first line", path.display()));
            let board = loglinear_planner::BoardProfile::find(&dir.join(&name).to_string_lossy())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // A board with a crate of its own is `cargo xtask boards`'s, a QEMU board too.
            let own_crate = dir.join(&name).join("Cargo.toml").is_file();
            let task = if board.kind == "qemu" && !own_crate {
                "plan"
            } else {
                "boards"
            };
            let written = file_text(Path::new(model), &update_command(task, &name), &sizes);
            assert_eq!(text, written, "{}", path.display());
            seen += 1;
        }
        assert!(
            seen >= 4,
            "only {seen} size.txt files under {}",
            dir.display()
        );
    }

    #[test]
    fn the_diff_marks_the_changed_lines() {
        let current = Sizes { rodata: 1, ..SIZES }.lines();
        assert_eq!(
            unified_diff("a", &figures_only(SNAPSHOT), "b", &current),
            "--- a\n+++ b\n@@ -1,4 +1,4 @@\n text      138384\n-rodata   1279304\n\
             +rodata         1\n data         348\n bss       277256\n"
        );
        assert_eq!(
            unified_diff("a", "x\n", "b", ""),
            "--- a\n+++ b\n@@ -1 +0,0 @@\n-x\n"
        );
    }
}
