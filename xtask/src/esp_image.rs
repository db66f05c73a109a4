//! Would the ESP-IDF second-stage bootloader boot this app image? `cargo xtask esp-image` reads
//! the file that `espflash save-image --chip esp32c3` wrote and checks what the bootloader
//! checks before it jumps (ESP-IDF "App Image Format", esp_app_format.h):
//!
//! * the 24-byte header: magic 0xE9, the chip ID, the segment count;
//! * every segment lies in one window of the board's memory map (board.toml's regions; a
//!   padding segment has load address 0 and is skipped, as the bootloader does);
//! * the entry point is in a loaded code segment;
//! * the checksum (0xEF XOR every data byte) after the segments, padded to 16 bytes;
//! * the SHA-256 of the whole image, appended when the header says so;
//! * the app descriptor (`esp_app_desc_t`, magic 0xABCD5432) at the start of the first
//!   flash-data (DROM) segment, which the bootloader reads for the app's chip revisions.
//!
//! The format is a header and a list of segments, a page of the ESP-IDF manual: a hand-written
//! reader is shorter than the espflash library it would take to parse one (espflash builds
//! images, it does not read them back).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use loglinear_planner::BoardProfile;
use sha2::{Digest, Sha256};

use crate::image::Report;

const MAGIC: u8 = 0xE9;
const HEADER_LEN: usize = 24;
const SEGMENT_HEADER_LEN: usize = 8;
const CHECKSUM_SEED: u8 = 0xEF;
const APP_DESC_MAGIC: u32 = 0xABCD_5432;
/// `esp_app_desc_t`: `magic`, `secure_version`, `reserv1[2]`, `version[32]`,
/// `project_name[32]`, ...
const APP_DESC_PROJECT: std::ops::Range<usize> = 48..80;

/// The chip IDs of esp_app_format.h, by board target.
fn chip_id(board: &BoardProfile) -> Option<(u16, &'static str)> {
    match board.name.as_str() {
        "esp32c3" => Some((5, "ESP32-C3")),
        _ => None,
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// `cargo xtask esp-image`: checks the app image file `image` against `board`, prints the
/// report and fails if the bootloader would not boot it.
pub fn check_file(board: &BoardProfile, image: &Path) -> Result<()> {
    let bytes = std::fs::read(image).with_context(|| format!("reading {}", image.display()))?;
    let report = check(board, &bytes)
        .with_context(|| format!("{} is not a readable app image", image.display()))?;
    print!("{report}");
    if !report.problems.is_empty() {
        bail!(
            "{}: the bootloader would not boot it on {} ({} problems above)",
            image.display(),
            board.name,
            report.problems.len()
        );
    }
    Ok(())
}

/// Checks the app image `bytes` against `board`; see the module documentation.
pub fn check(board: &BoardProfile, bytes: &[u8]) -> Result<Report> {
    let Some((want_chip, chip_name)) = chip_id(board) else {
        bail!("board {} is not an ESP chip this check knows", board.name);
    };
    let mut report = Report::default();
    let Some(header) = bytes.get(..HEADER_LEN) else {
        bail!(
            "{} B: shorter than the {HEADER_LEN}-byte image header",
            bytes.len()
        );
    };
    if header[0] != MAGIC {
        bail!(
            "magic byte {:#04x}, not {MAGIC:#04x}: not an ESP app image",
            header[0]
        );
    }
    let segments = usize::from(header[1]);
    let entry = u32_at(header, 4).unwrap_or_default();
    let chip = u16::from_le_bytes([header[12], header[13]]);
    let hash_appended = header[23] == 1;
    if chip == want_chip {
        report.ok.push(format!(
            "header: chip ID {chip} ({chip_name}), {segments} segments"
        ));
    } else {
        report
            .problems
            .push(format!("chip ID {chip}, not {want_chip} ({chip_name})"));
    }

    let mut at = HEADER_LEN;
    let mut checksum = CHECKSUM_SEED;
    let mut entry_in_code = false;
    let mut first_drom: Option<&[u8]> = None;
    for i in 0..segments {
        let (Some(addr), Some(len)) = (u32_at(bytes, at), u32_at(bytes, at + 4)) else {
            bail!("segment {i}: its header at byte {at} is past the end of the file");
        };
        let start = at + SEGMENT_HEADER_LEN;
        let Some(data) = bytes.get(start..start + len as usize) else {
            bail!("segment {i}: {len} B at byte {start} run past the end of the file");
        };
        checksum = data.iter().fold(checksum, |c, b| c ^ b);
        at = start + data.len();
        if addr == 0 {
            report
                .ok
                .push(format!("segment {i}: {len} B of padding (not loaded)"));
            continue;
        }
        let (addr, len64) = (u64::from(addr), u64::from(len));
        let region = board
            .regions()
            .find(|(_, r)| addr >= r.origin && addr + len64 <= r.origin + r.length);
        match region {
            Some((name, _)) => {
                report.ok.push(format!(
                    "segment {i}: {len} B at {addr:#010x} in memory.{name}"
                ));
                if name == "flash" && first_drom.is_none() {
                    first_drom = Some(data);
                }
                let code = matches!(name, "irom" | "iram");
                if code && (addr..addr + len64).contains(&u64::from(entry)) {
                    entry_in_code = true;
                }
            }
            None => report.problems.push(format!(
                "segment {i}: {len} B at {addr:#010x} lie in no region of board {}",
                board.name
            )),
        }
    }
    if entry_in_code {
        report.ok.push(format!(
            "entry point {entry:#010x} in a loaded code segment"
        ));
    } else {
        report.problems.push(format!(
            "entry point {entry:#010x} is in no loaded code segment"
        ));
    }

    // The checksum byte ends a 16-byte block: padding, then the byte.
    let checksum_at = (at + 1).next_multiple_of(16) - 1;
    match bytes.get(checksum_at) {
        Some(&c) if c == checksum => report.ok.push(format!("checksum {c:#04x} valid")),
        Some(&c) => report.problems.push(format!(
            "checksum byte {c:#04x}, the segments give {checksum:#04x}"
        )),
        None => report.problems.push("the checksum byte is missing".into()),
    }
    let end = checksum_at + 1;
    if hash_appended {
        match bytes.get(end..end + 32) {
            Some(stored) if stored == Sha256::digest(&bytes[..end]).as_slice() => {
                report.ok.push("SHA-256 of the image valid".into())
            }
            Some(_) => report
                .problems
                .push("the appended SHA-256 does not match".into()),
            None => report
                .problems
                .push("the appended SHA-256 is missing".into()),
        }
    }

    match first_drom {
        Some(d) if u32_at(d, 0) == Some(APP_DESC_MAGIC) => {
            let name = d.get(APP_DESC_PROJECT).unwrap_or_default();
            let name = String::from_utf8_lossy(name);
            let mut line = format!("app descriptor (magic {APP_DESC_MAGIC:#010x})");
            let _ = write!(line, ", project {:?}", name.trim_end_matches('\0'));
            report.ok.push(line);
        }
        Some(d) => report.problems.push(format!(
            "the first flash-data segment starts with {:#010x}, not the app descriptor's \
             magic {APP_DESC_MAGIC:#010x}",
            u32_at(d, 0).unwrap_or_default()
        )),
        None => report
            .problems
            .push("no flash-data (DROM) segment: the app descriptor is missing".into()),
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const BOARD: &str = r#"
name = "esp32c3"
kind = "hardware"
core = "rv32imc"
clock_hz = 160_000_000
target = "riscv32imc-unknown-none-elf"
[memory.flash]
origin = 0x3C00_0020
length = 0x003F_FFE0
[memory.ram]
origin = 0x3FC8_0000
length = 0x0005_0000
[memory.irom]
origin = 0x4200_0020
length = 0x007F_FFE0
[firmware]
state = "f16"
levels = 3
stack_reserve = 0
code_reserve = 0
"#;

    /// A two-segment image (app descriptor in DROM, code in IROM) as espflash lays it out.
    fn image(app_magic: u32) -> Vec<u8> {
        let mut drom = app_magic.to_le_bytes().to_vec();
        drom.resize(256, 0);
        drom[APP_DESC_PROJECT.start..APP_DESC_PROJECT.start + 4].copy_from_slice(b"test");
        let irom = vec![0x13u8; 64];
        let mut b = vec![MAGIC, 2, 2, 0x1f];
        b.extend_from_slice(&0x4200_0030u32.to_le_bytes());
        b.extend_from_slice(&[0xee, 0, 0, 0]);
        b.extend_from_slice(&5u16.to_le_bytes());
        b.extend_from_slice(&[0; 9]);
        b.push(1);
        let mut checksum = CHECKSUM_SEED;
        for (addr, data) in [(0x3C00_0020u32, &drom), (0x4200_0020, &irom)] {
            b.extend_from_slice(&addr.to_le_bytes());
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(data);
            checksum = data.iter().fold(checksum, |c, x| c ^ x);
        }
        while b.len() % 16 != 15 {
            b.push(0);
        }
        b.push(checksum);
        let hash = Sha256::digest(&b);
        b.extend_from_slice(&hash);
        b
    }

    fn board() -> BoardProfile {
        BoardProfile::parse(BOARD, Path::new("board.toml")).unwrap()
    }

    #[test]
    fn a_well_formed_image_passes() {
        let r = check(&board(), &image(APP_DESC_MAGIC)).unwrap();
        assert!(r.problems.is_empty(), "{r}");
        assert!(r.to_string().contains("project \"test\""), "{r}");
    }

    #[test]
    fn each_fault_is_named() {
        let mut bad_sum = image(APP_DESC_MAGIC);
        let at = bad_sum.len() - 33;
        bad_sum[at] ^= 1;
        let r = check(&board(), &bad_sum).unwrap();
        assert!(r.to_string().contains("checksum byte"), "{r}");
        assert!(r.to_string().contains("SHA-256 does not match"), "{r}");

        let r = check(&board(), &image(0x1234_5678)).unwrap();
        assert!(r.to_string().contains("not the app descriptor"), "{r}");

        let mut outside = image(APP_DESC_MAGIC);
        outside[24..28].copy_from_slice(&0x6000_0000u32.to_le_bytes());
        let r = check(&board(), &outside).unwrap();
        assert!(r.to_string().contains("lie in no region"), "{r}");

        let mut not_esp = image(APP_DESC_MAGIC);
        not_esp[0] = 0x7f;
        assert!(check(&board(), &not_esp).is_err());
        assert!(check(&board(), &not_esp[..10]).is_err());
    }
}
