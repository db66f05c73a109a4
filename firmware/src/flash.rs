//! The snapshot region (`[snapshot]` in board.toml) as NOR flash, for the runtime's A/B
//! [`SlotStore`]. On QEMU boards it is RAM (mps2-an386: the 16 MiB PSRAM at 0x2100_0000, which
//! no linker region uses) behaving like NOR flash: an erase sets whole 4 KiB blocks to 0xFF and
//! a write needs erased bytes (it is refused otherwise, as a NOR write could only clear bits).
//! The contents live as long as the machine: they survive `RESET`, not a QEMU restart. On a
//! hardware board the same `embedded-storage` traits would be implemented by the chip's flash
//! driver and [`SlotStore`] used unchanged.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use loglinear_runtime::slot_store::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash, SlotStore,
};
use portable_atomic::{AtomicBool, Ordering};

use crate::board;

/// Erase block of the emulated flash.
const ERASE: usize = 4096;
/// Write granule of the emulated flash.
const WRITE: usize = 4;

/// The store the firmware serves `SAVE`, `LOAD` and `RESTORE` from.
pub type Store = SlotStore<RamFlash>;

/// Why an operation on the region failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RamFlashError {
    /// Offset or length not a multiple of the write or erase size.
    NotAligned,
    /// Outside the region.
    OutOfBounds,
    /// A write to bytes that were not erased.
    NotErased,
}

impl NorFlashError for RamFlashError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            Self::NotAligned => NorFlashErrorKind::NotAligned,
            Self::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            Self::NotErased => NorFlashErrorKind::Other,
        }
    }
}

/// The snapshot region as NOR flash.
pub struct RamFlash {
    data: &'static mut [u8],
}

/// Set once the region has been handed out.
static TAKEN: AtomicBool = AtomicBool::new(false);

impl RamFlash {
    /// The region, the first time only; `None` afterwards and on a board without one.
    fn take() -> Option<Self> {
        let len = 2 * board::SNAPSHOT_SLOT_BYTES;
        if len == 0 || TAKEN.swap(true, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: build.rs only emits a non-zero region from the board's `[snapshot]` table
        // after checking that it is 4 KiB aligned and overlaps neither the flash nor the RAM
        // region of memory.x, so no Rust object, stack or `.bss` lies in it; the board profile
        // says it is RAM (mps2-an386: the PSRAM, mapped by QEMU), readable and writable, and
        // every byte pattern is a valid `u8`. The swap above makes this the only reference
        // ever created to it, for the rest of the program ('static).
        let data =
            unsafe { core::slice::from_raw_parts_mut(board::SNAPSHOT_ORIGIN as *mut u8, len) };
        Some(Self { data })
    }

    fn range(
        &self,
        offset: u32,
        len: usize,
        align: usize,
    ) -> Result<core::ops::Range<usize>, RamFlashError> {
        let start = offset as usize;
        let end = start.checked_add(len).ok_or(RamFlashError::OutOfBounds)?;
        if end > self.data.len() {
            return Err(RamFlashError::OutOfBounds);
        }
        if start % align != 0 || len % align != 0 {
            return Err(RamFlashError::NotAligned);
        }
        Ok(start..end)
    }
}

/// The A/B store over the board's snapshot region; `None` on a board without one.
pub fn open_store() -> Option<Store> {
    let flash = RamFlash::take()?;
    let slot = u32::try_from(board::SNAPSHOT_SLOT_BYTES).ok()?;
    SlotStore::new(flash, 0, slot).ok()
}

impl ErrorType for RamFlash {
    type Error = RamFlashError;
}

impl ReadNorFlash for RamFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let r = self.range(offset, bytes.len(), 1)?;
        let src = self.data.get(r).ok_or(RamFlashError::OutOfBounds)?;
        bytes.copy_from_slice(src);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.data.len()
    }
}

impl NorFlash for RamFlash {
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = ERASE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        let len = (to as usize)
            .checked_sub(from as usize)
            .ok_or(RamFlashError::OutOfBounds)?;
        let r = self.range(from, len, ERASE)?;
        self.data
            .get_mut(r)
            .ok_or(RamFlashError::OutOfBounds)?
            .fill(0xFF);
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        let r = self.range(offset, bytes.len(), WRITE)?;
        let dst = self.data.get_mut(r).ok_or(RamFlashError::OutOfBounds)?;
        if dst.iter().any(|&b| b != 0xFF) {
            return Err(RamFlashError::NotErased);
        }
        dst.copy_from_slice(bytes);
        Ok(())
    }
}
