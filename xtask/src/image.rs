//! Would the firmware image that a user flashes boot? Checked from the ELF and the board's
//! profile alone, with no hardware:
//!
//! * every loadable segment's file bytes lie in one non-volatile region of the board (any
//!   `[memory.*]` region but `ram`), and its whole memory image in one region;
//! * on Cortex-M (a `thumb*` target) the vector table at the code memory's origin holds an
//!   initial stack pointer inside (or at the end of) the RAM region, 8-byte aligned, and a reset
//!   vector with the Thumb bit set that points into the code memory; on RISC-V the ELF's entry
//!   point lies in the code memory;
//! * where the board has a `[memory.boot2]` region (RP2040), its 256 bytes are a second-stage
//!   bootloader that the boot ROM accepts: the CRC-32 (MPEG-2 parameters) of the first 252 bytes
//!   equals the little-endian word in the last 4 (RP2040 datasheet, 2.8.1.3.1).

use std::fmt;
use std::path::Path;

use anyhow::{bail, Context};
use loglinear_planner::{BoardProfile, Region};
use object::elf::{FileHeader32, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;

/// Bytes of the RP2040's second-stage bootloader, its CRC included.
const BOOT2_BYTES: u64 = 256;

/// A loadable segment of the ELF: where its file bytes go (`paddr`), where it lives at run time
/// (`vaddr`), and its bytes.
#[derive(Clone, Debug)]
pub struct Segment {
    /// Load (physical) address of the file bytes.
    pub paddr: u64,
    /// Run-time (virtual) address.
    pub vaddr: u64,
    /// Bytes in memory (file bytes plus zero fill).
    pub memsz: u64,
    /// The file bytes.
    pub data: Vec<u8>,
}

/// What the check looks at: the loadable segments, the entry point and the target's family.
#[derive(Clone, Debug)]
pub struct Image {
    /// Loadable segments (PT_LOAD) with a size.
    pub segments: Vec<Segment>,
    /// The ELF's entry point.
    pub entry: u64,
}

impl Image {
    /// Reads the loadable segments (PT_LOAD) of a 32-bit ELF file, the firmware's format. The
    /// program headers are read directly because `.data` is loaded in flash and copied to RAM at
    /// start: its load (physical) address, what is flashed, differs from its run-time address.
    pub fn from_elf32(bytes: &[u8]) -> anyhow::Result<Self> {
        let header = FileHeader32::<Endianness>::parse(bytes)?;
        let endian = header.endian()?;
        let mut segments = Vec::new();
        for ph in header.program_headers(endian, bytes)? {
            if ph.p_type(endian) != PT_LOAD || ph.p_memsz(endian) == 0 {
                continue;
            }
            let data = ph
                .data(endian, bytes)
                .map_err(|()| anyhow::anyhow!("a segment's file bytes lie outside the file"))?;
            segments.push(Segment {
                paddr: u64::from(ph.p_paddr(endian)),
                vaddr: u64::from(ph.p_vaddr(endian)),
                memsz: u64::from(ph.p_memsz(endian)),
                data: data.to_vec(),
            });
        }
        Ok(Self {
            segments,
            entry: u64::from(header.e_entry(endian)),
        })
    }

    /// `len` file bytes at load address `addr`, if one segment holds them all.
    fn read(&self, addr: u64, len: u64) -> Option<&[u8]> {
        self.segments.iter().find_map(|s| {
            let start = addr.checked_sub(s.paddr)?;
            let end = start.checked_add(len)?;
            s.data
                .get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        })
    }

    fn word(&self, addr: u64) -> Option<u32> {
        let b = self.read(addr, 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// The outcome: what was checked, and what is wrong.
#[derive(Debug, Default)]
pub struct Report {
    /// One line per check that passed.
    pub ok: Vec<String>,
    /// One line per problem; empty when the image would boot.
    pub problems: Vec<String>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.ok {
            writeln!(f, "  ok: {line}")?;
        }
        for line in &self.problems {
            writeln!(f, "  PROBLEM: {line}")?;
        }
        Ok(())
    }
}

fn contains(r: &Region, start: u64, len: u64) -> bool {
    start >= r.origin && start.saturating_add(len) <= r.origin.saturating_add(r.length)
}

/// The name of a region of `board` that holds `len` bytes at `start`; with `non_volatile`, not
/// the RAM (what is flashed must survive a reset).
fn region_of(board: &BoardProfile, start: u64, len: u64, non_volatile: bool) -> Option<&str> {
    board
        .regions()
        .filter(|&(name, _)| !non_volatile || name != "ram")
        .find(|(_, r)| contains(r, start, len))
        .map(|(name, _)| name)
}

/// `cargo xtask image-check`: checks the ELF file `elf` against `board`, prints the report and
/// fails if the image would not boot.
pub fn check_elf_file(board: &BoardProfile, elf: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let img = Image::from_elf32(&bytes)
        .with_context(|| format!("{} is not a 32-bit ELF file", elf.display()))?;
    let report = check(board, &img);
    print!("{report}");
    if !report.problems.is_empty() {
        bail!(
            "{}: the image would not boot on {} ({} problems above)",
            elf.display(),
            board.name,
            report.problems.len()
        );
    }
    Ok(())
}

/// Checks `image` against `board`; see the module documentation.
pub fn check(board: &BoardProfile, image: &Image) -> Report {
    let mut report = Report::default();
    if image.segments.is_empty() {
        report
            .problems
            .push("the ELF has no loadable segment".into());
        return report;
    }
    for s in &image.segments {
        let file = s.data.len() as u64;
        if file > 0 {
            match region_of(board, s.paddr, file, true) {
                Some(name) => report.ok.push(format!(
                    "{file} B loaded at {:#010x} lie in memory.{name}",
                    s.paddr
                )),
                None => report.problems.push(format!(
                    "{file} B loaded at {:#010x} lie in no flash region of the board",
                    s.paddr
                )),
            }
        }
        if region_of(board, s.vaddr, s.memsz, false).is_none() {
            report.problems.push(format!(
                "a segment of {} B at run-time address {:#010x} lies in no region of the board",
                s.memsz, s.vaddr
            ));
        }
    }
    if board.target.starts_with("thumb") {
        check_vector_table(board, image, &mut report);
    } else if contains(&board.flash, image.entry, 1) {
        report
            .ok
            .push(format!("entry point {:#010x} in memory.flash", image.entry));
    } else {
        report.problems.push(format!(
            "entry point {:#010x} is not in memory.flash",
            image.entry
        ));
    }
    if let Some(boot2) = board.other_regions.get("boot2") {
        check_boot2(boot2, image, &mut report);
    }
    report
}

fn check_vector_table(board: &BoardProfile, image: &Image, report: &mut Report) {
    let at = board.flash.origin;
    let (Some(sp), Some(reset)) = (image.word(at), image.word(at + 4)) else {
        report.problems.push(format!(
            "no vector table at the code memory's origin {at:#010x}: nothing is loaded there"
        ));
        return;
    };
    let (sp, reset) = (u64::from(sp), u64::from(reset));
    let ram = board.ram;
    if sp < ram.origin || sp > ram.origin + ram.length || sp % 8 != 0 {
        report.problems.push(format!(
            "initial stack pointer {sp:#010x} (vector table at {at:#010x}) is not an 8-byte \
             aligned address in memory.ram {:#010x}..={:#010x}",
            ram.origin,
            ram.origin + ram.length
        ));
    } else {
        report
            .ok
            .push(format!("initial stack pointer {sp:#010x} in memory.ram"));
    }
    if reset & 1 == 0 || !contains(&board.flash, reset & !1, 2) {
        report.problems.push(format!(
            "reset vector {reset:#010x} is not a Thumb address (odd) in memory.flash"
        ));
    } else {
        report.ok.push(format!(
            "reset vector {reset:#010x} (Thumb) in memory.flash"
        ));
    }
}

/// The CRC the RP2040 boot ROM checks over the second stage: CRC-32 with the MPEG-2
/// parameters (polynomial 0x04C11DB7, initial 0xFFFFFFFF, not reflected, no final XOR).
pub const BOOT2_CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_MPEG_2);

fn check_boot2(boot2: &Region, image: &Image, report: &mut Report) {
    if boot2.length != BOOT2_BYTES {
        report.problems.push(format!(
            "memory.boot2 is {} B, the RP2040's second stage is {BOOT2_BYTES} B",
            boot2.length
        ));
        return;
    }
    let Some(bytes) = image.read(boot2.origin, BOOT2_BYTES) else {
        report.problems.push(format!(
            "no second-stage bootloader loaded at {:#010x}",
            boot2.origin
        ));
        return;
    };
    let want = u32::from_le_bytes([bytes[252], bytes[253], bytes[254], bytes[255]]);
    let got = BOOT2_CRC.checksum(&bytes[..252]);
    if got == want {
        report.ok.push(format!(
            "second-stage bootloader at {:#010x}: CRC {got:#010x} valid",
            boot2.origin
        ));
    } else {
        report.problems.push(format!(
            "second-stage bootloader at {:#010x}: CRC of its first 252 bytes is {got:#010x}, \
             its last word says {want:#010x}: the boot ROM would not run it",
            boot2.origin
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const BOARD: &str = r#"
name = "t"
kind = "hardware"
core = "cortex-m4f"
clock_hz = 64_000_000
target = "thumbv7em-none-eabihf"
[memory.flash]
origin = 0x0800_0000
length = 0x1000
[memory.ram]
origin = 0x2000_0000
length = 0x1000
[firmware]
state = "f16"
levels = 3
stack_reserve = 0
code_reserve = 0
"#;

    fn board(extra: &str) -> BoardProfile {
        BoardProfile::parse(&format!("{BOARD}{extra}"), Path::new("t.toml")).unwrap()
    }

    fn image(sp: u32, reset: u32) -> Image {
        let mut data = Vec::new();
        data.extend_from_slice(&sp.to_le_bytes());
        data.extend_from_slice(&reset.to_le_bytes());
        data.resize(64, 0);
        Image {
            segments: vec![Segment {
                paddr: 0x0800_0000,
                vaddr: 0x0800_0000,
                memsz: 64,
                data,
            }],
            entry: 0x0800_0041,
        }
    }

    #[test]
    fn a_good_image_passes() {
        let r = check(&board(""), &image(0x2000_1000, 0x0800_0041));
        assert!(r.problems.is_empty(), "{r}");
        assert_eq!(r.ok.len(), 3, "{r}");
    }

    #[test]
    fn bad_vectors_and_placement_are_found() {
        let b = board("");
        for (sp, reset, want) in [
            (0x2000_1008, 0x0800_0041, "initial stack pointer"),
            (0x2000_0ffc, 0x0800_0041, "initial stack pointer"),
            (0x2000_1000, 0x0800_0040, "reset vector"),
            (0x2000_1000, 0x0900_0041, "reset vector"),
        ] {
            let r = check(&b, &image(sp, reset));
            assert!(r.problems.iter().any(|p| p.contains(want)), "{want}: {r}");
        }
        let mut img = image(0x2000_1000, 0x0800_0041);
        img.segments[0].paddr = 0x2000_0000; // loaded into RAM: nothing would be there at reset
        let r = check(&b, &img);
        assert!(
            r.problems.iter().any(|p| p.contains("no flash region")),
            "{r}"
        );
        assert!(
            r.problems.iter().any(|p| p.contains("no vector table")),
            "{r}"
        );
    }

    #[test]
    fn boot2_crc_is_checked() {
        let b = board("[memory.boot2]\norigin = 0x0700_0000\nlength = 256\n");
        let mut boot2 = vec![0x5au8; 256];
        let crc = BOOT2_CRC.checksum(&boot2[..252]);
        boot2[252..].copy_from_slice(&crc.to_le_bytes());
        let mut img = image(0x2000_1000, 0x0800_0041);
        img.segments.push(Segment {
            paddr: 0x0700_0000,
            vaddr: 0x0700_0000,
            memsz: 256,
            data: boot2.clone(),
        });
        let r = check(&b, &img);
        assert!(r.problems.is_empty(), "{r}");
        img.segments[1].data[7] ^= 1;
        let r = check(&b, &img);
        assert!(
            r.problems.iter().any(|p| p.contains("would not run it")),
            "{r}"
        );
    }

    #[test]
    fn the_mpeg2_crc_matches_its_check_value() {
        // The catalogue's check value: CRC of the ASCII digits "123456789".
        assert_eq!(BOOT2_CRC.checksum(b"123456789"), 0x0376_E6E7);
    }
}
