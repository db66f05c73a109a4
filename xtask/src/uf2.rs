//! Reads a UF2 file (Microsoft's flashing format, github.com/microsoft/uf2: 512-byte blocks, each
//! a header, up to 476 bytes of payload for one flash address, and a closing magic) back into the
//! flash contents it writes, so that `image::check` can check what a user drags onto the RP2040's
//! BOOTSEL drive: the vector table and the second stage's CRC, from the UF2 file itself.
//!
//! The file is written by elf2uf2-rs, the tool the RP2040 Rust projects use; this reader is the
//! independent check of its output, a page of the specification, so it is written here rather
//! than taken from the writer.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use loglinear_planner::BoardProfile;

use crate::image::{self, Image, Segment};

const BLOCK: usize = 512;
const MAGIC_START0: u32 = 0x0A32_4655;
const MAGIC_START1: u32 = 0x9E5D_5157;
const MAGIC_END: u32 = 0x0AB1_6F30;
/// `flags`: the block is not for the main flash (a comment, say): skipped.
const FLAG_NOT_MAIN_FLASH: u32 = 0x0000_0001;
/// `flags`: the `file_size` word holds a family ID.
const FLAG_FAMILY_ID: u32 = 0x0000_2000;
/// Family ID of the RP2040 (the UF2 specification's families list).
pub const RP2040_FAMILY: u32 = 0xE48B_FF56;
const MAX_PAYLOAD: usize = 476;

fn word(block: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
}

/// `cargo xtask uf2-check`: checks the flash contents that the RP2040 UF2 file `uf2` writes
/// against `board` (`image::check`), prints the report and fails if they would not boot.
pub fn check_file(board: &BoardProfile, uf2: &Path) -> Result<()> {
    let bytes = std::fs::read(uf2).with_context(|| format!("reading {}", uf2.display()))?;
    let origins: Vec<u64> = board.regions().map(|(_, r)| r.origin).collect();
    let img = read(&bytes, RP2040_FAMILY, &origins)
        .with_context(|| format!("{} is not a valid RP2040 UF2 file", uf2.display()))?;
    let report = image::check(board, &img);
    print!("{report}");
    if !report.problems.is_empty() {
        bail!(
            "{}: the UF2 file would not boot on {} ({} problems above)",
            uf2.display(),
            board.name,
            report.problems.len()
        );
    }
    Ok(())
}

/// The flash contents of a UF2 file for family `family`: one segment per run of contiguous
/// payloads, cut at each address of `boundaries` (the board's region origins, so that no segment
/// spans two regions). Fails on a malformed block, a missing or foreign family ID, or blocks out
/// of order.
pub fn read(bytes: &[u8], family: u32, boundaries: &[u64]) -> Result<Image> {
    ensure!(
        !bytes.is_empty() && bytes.len() % BLOCK == 0,
        "{} B is not a whole number of {BLOCK}-byte UF2 blocks",
        bytes.len()
    );
    let total = bytes.len() / BLOCK;
    let mut segments: Vec<Segment> = Vec::new();
    for (i, block) in bytes.chunks_exact(BLOCK).enumerate() {
        let (m0, m1, end) = (word(block, 0), word(block, 4), word(block, BLOCK - 4));
        if (m0, m1, end) != (MAGIC_START0, MAGIC_START1, MAGIC_END) {
            bail!("block {i}: magic words {m0:#010x} {m1:#010x} … {end:#010x} are not UF2's");
        }
        let flags = word(block, 8);
        let addr = u64::from(word(block, 12));
        let len = word(block, 16) as usize;
        let (block_no, blocks, family_id) = (word(block, 20), word(block, 24), word(block, 28));
        ensure!(
            block_no as usize == i && blocks as usize == total,
            "block {i}: numbered {block_no} of {blocks}, the file has {total} blocks in order"
        );
        if flags & FLAG_NOT_MAIN_FLASH != 0 {
            continue;
        }
        ensure!(
            flags & FLAG_FAMILY_ID != 0 && family_id == family,
            "block {i}: family ID {family_id:#010x} (flags {flags:#x}), not {family:#010x}: \
             the boot ROM would ignore it"
        );
        ensure!(
            len <= MAX_PAYLOAD,
            "block {i}: {len} B of payload, at most {MAX_PAYLOAD}"
        );
        let payload = &block[32..32 + len];
        match segments.last_mut() {
            Some(s) if s.paddr + s.data.len() as u64 == addr && !boundaries.contains(&addr) => {
                s.data.extend_from_slice(payload);
                s.memsz = s.data.len() as u64;
            }
            _ => segments.push(Segment {
                paddr: addr,
                vaddr: addr,
                memsz: len as u64,
                data: payload.to_vec(),
            }),
        }
    }
    // A UF2 file has no entry point: a Cortex-M part starts from its vector table.
    Ok(Image { segments, entry: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uf2(pages: &[(u32, [u8; 256])], family: u32) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, (addr, data)) in pages.iter().enumerate() {
            let mut b = vec![0u8; BLOCK];
            let words = [
                MAGIC_START0,
                MAGIC_START1,
                FLAG_FAMILY_ID,
                *addr,
                256,
                i as u32,
                pages.len() as u32,
                family,
            ];
            for (k, w) in words.iter().enumerate() {
                b[4 * k..4 * k + 4].copy_from_slice(&w.to_le_bytes());
            }
            b[32..288].copy_from_slice(data);
            b[BLOCK - 4..].copy_from_slice(&MAGIC_END.to_le_bytes());
            out.extend(b);
        }
        out
    }

    #[test]
    fn contiguous_pages_become_one_segment() {
        let f = uf2(
            &[
                (0x1000_0000, [1; 256]),
                (0x1000_0100, [2; 256]),
                (0x1000_1000, [3; 256]),
            ],
            RP2040_FAMILY,
        );
        let img = read(&f, RP2040_FAMILY, &[]).unwrap();
        let spans: Vec<_> = img
            .segments
            .iter()
            .map(|s| (s.paddr, s.data.len()))
            .collect();
        assert_eq!(spans, [(0x1000_0000, 512), (0x1000_1000, 256)]);
        assert_eq!(img.segments[0].data[256], 2);
        let img = read(&f, RP2040_FAMILY, &[0x1000_0100]).unwrap();
        let starts: Vec<_> = img.segments.iter().map(|s| s.paddr).collect();
        assert_eq!(starts, [0x1000_0000, 0x1000_0100, 0x1000_1000]);
    }

    #[test]
    fn foreign_family_bad_magic_and_truncation_are_refused() {
        let f = uf2(&[(0x1000_0000, [0; 256])], 0x1234_5678);
        assert!(read(&f, RP2040_FAMILY, &[])
            .unwrap_err()
            .to_string()
            .contains("family ID"));
        let mut f = uf2(&[(0x1000_0000, [0; 256])], RP2040_FAMILY);
        f[BLOCK - 1] ^= 1;
        assert!(read(&f, RP2040_FAMILY, &[])
            .unwrap_err()
            .to_string()
            .contains("magic"));
        assert!(read(&f[..100], RP2040_FAMILY, &[]).is_err());
    }
}
