//! Power-safe snapshot storage on NOR flash: two slots (A/B), each with a commit record
//! (sequence number, length, CRC of the body). Any flash driver with the `embedded-storage`
//! [`NorFlash`] traits plugs in; [`MemFlash`] is an in-memory one (tests, and a RAM region
//! standing in for flash on QEMU boards).
//!
//! # Layout of one slot
//! `[commit record, 32 bytes padded to WRITE_SIZE][body: the snapshot bytes]`. The commit
//! record is `magic "LLSLOT01" | seq u64 | len u32 | body CRC-32 u32 | 0 u32 | CRC-32 of the
//! previous 28 bytes u32`, little-endian.
//!
//! # Why a power cut cannot lose the previous snapshot
//! [`SlotStore::save_with`] never touches the slot holding the newest valid snapshot. In the
//! other slot it erases the commit record's erase block first, then the rest, writes the body,
//! and writes the commit record last. A cut before the record is complete leaves that slot
//! without a valid record (its own CRC, or the body CRC, fails), so [`SlotStore::latest`]
//! still picks the previous snapshot; once the record is complete the new one wins by its
//! higher sequence number. A record cut after its last differing byte is the whole record (the
//! unwritten bytes already read as their erased value), so it is valid exactly when the body
//! is complete.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use crate::fenwick::StateElem;
use crate::sampler::Sampler;
use crate::session::Session;
use crate::snapshot::{self, Crc32, SnapshotError};
pub use embedded_storage::nor_flash::{
    ErrorType, NorFlash, NorFlashError, NorFlashErrorKind, ReadNorFlash,
};

/// First bytes of a commit record.
pub const SLOT_MAGIC: [u8; 8] = *b"LLSLOT01";
/// Bytes of a commit record before padding.
pub const COMMIT_LEN: usize = 32;
/// Staging buffer for writes and reads: `WRITE_SIZE` and `READ_SIZE` must divide it.
const STAGE: usize = 256;

/// One of the two slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Slot {
    /// The first slot (at the region's start).
    A,
    /// The second slot.
    B,
}

impl Slot {
    fn index(self) -> u32 {
        match self {
            Slot::A => 0,
            Slot::B => 1,
        }
    }

    fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }
}

/// A valid, committed slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SlotInfo {
    /// Which slot.
    pub slot: Slot,
    /// Sequence number (higher is newer; the first save is 1).
    pub seq: u64,
    /// Bytes of the body.
    pub len: usize,
}

/// Why a slot operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StoreError<E> {
    /// The flash driver failed (or, with [`MemFlash`], the simulated power went).
    Flash(E),
    /// The region does not suit the flash: the reason.
    Geometry(&'static str),
    /// The body does not fit a slot.
    TooLarge {
        /// Bytes of the body.
        len: usize,
        /// Bytes a slot can hold.
        capacity: usize,
    },
    /// No slot holds a valid snapshot.
    NoSnapshot,
    /// The caller's buffer is shorter than the body.
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// Writing or restoring the snapshot failed.
    Snapshot(SnapshotError),
}

impl<E: core::fmt::Debug> core::fmt::Display for StoreError<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Flash(e) => write!(f, "flash: {e:?}"),
            Self::Geometry(why) => write!(f, "snapshot region: {why}"),
            Self::TooLarge { len, capacity } => {
                write!(
                    f,
                    "snapshot of {len} bytes does not fit a {capacity}-byte slot"
                )
            }
            Self::NoSnapshot => write!(f, "no valid snapshot stored"),
            Self::BufferTooSmall { needed, got } => {
                write!(f, "buffer of {got} bytes, the snapshot has {needed}")
            }
            Self::Snapshot(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(feature = "std")]
impl<E: core::fmt::Debug> std::error::Error for StoreError<E> {}

/// Two snapshot slots of `slot_size` bytes each at `base` in a flash.
pub struct SlotStore<F> {
    flash: F,
    base: u32,
    slot_size: u32,
    /// Offset of the body in a slot: the commit record rounded up to `WRITE_SIZE`.
    body_off: u32,
}

impl<F: NorFlash> SlotStore<F> {
    /// Two slots at `base` (`2 × slot_size` bytes). Both must be multiples of the flash's
    /// erase size and lie inside it.
    pub fn new(flash: F, base: u32, slot_size: u32) -> Result<Self, StoreError<F::Error>> {
        let (w, r, e) = (F::WRITE_SIZE, F::READ_SIZE, F::ERASE_SIZE);
        if w == 0 || r == 0 || e == 0 || STAGE % w != 0 || STAGE % r != 0 {
            return Err(StoreError::Geometry(
                "write and read sizes must divide 256 bytes",
            ));
        }
        if base as usize % e != 0 || slot_size as usize % e != 0 || slot_size == 0 {
            return Err(StoreError::Geometry(
                "base and slot size must be multiples of the erase size",
            ));
        }
        let end = u64::from(base) + 2 * u64::from(slot_size);
        if end > flash.capacity() as u64 || end > u64::from(u32::MAX) {
            return Err(StoreError::Geometry("the two slots do not fit the flash"));
        }
        let body_off = COMMIT_LEN.div_ceil(w) * w;
        let body_off = u32::try_from(body_off.div_ceil(r) * r).unwrap_or(u32::MAX);
        if body_off >= slot_size {
            return Err(StoreError::Geometry("slot smaller than its commit record"));
        }
        Ok(Self {
            flash,
            base,
            slot_size,
            body_off,
        })
    }

    /// Bytes of body a slot holds.
    pub fn capacity(&self) -> usize {
        (self.slot_size - self.body_off) as usize
    }

    /// The flash, back.
    pub fn into_inner(self) -> F {
        self.flash
    }

    /// The flash.
    pub fn flash_mut(&mut self) -> &mut F {
        &mut self.flash
    }

    fn slot_addr(&self, slot: Slot) -> u32 {
        self.base + slot.index() * self.slot_size
    }

    /// Reads `buf.len()` bytes at `addr`, whatever the flash's read alignment.
    fn read_at(&mut self, addr: u32, buf: &mut [u8]) -> Result<(), F::Error> {
        let r = F::READ_SIZE;
        if r == 1 {
            return self.flash.read(addr, buf);
        }
        let mut stage = [0u8; STAGE];
        let mut done = 0usize;
        while done < buf.len() {
            let at = addr as usize + done;
            let aligned = at / r * r;
            let skip = at - aligned;
            // Never read past the end of the flash: round the length up only inside it.
            let room = self.flash.capacity().saturating_sub(aligned).min(STAGE);
            let want = (skip + buf.len() - done).min(STAGE).div_ceil(r) * r;
            let n = want.min(room / r * r);
            let Some(chunk) = stage.get_mut(..n) else {
                break;
            };
            self.flash.read(aligned as u32, chunk)?;
            let take = (n.saturating_sub(skip)).min(buf.len() - done);
            if take == 0 {
                break;
            }
            if let (Some(dst), Some(src)) =
                (buf.get_mut(done..done + take), stage.get(skip..skip + take))
            {
                dst.copy_from_slice(src);
            }
            done += take;
        }
        Ok(())
    }

    /// The slot's commit, if its record and body are valid.
    fn check_slot(&mut self, slot: Slot) -> Result<Option<SlotInfo>, F::Error> {
        let addr = self.slot_addr(slot);
        let mut rec = [0u8; COMMIT_LEN];
        self.read_at(addr, &mut rec)?;
        let Some(c) = Commit::decode(&rec) else {
            return Ok(None);
        };
        if c.len > self.capacity() {
            return Ok(None);
        }
        let mut crc = Crc32::new();
        let mut chunk = [0u8; STAGE];
        let mut off = 0usize;
        while off < c.len {
            let n = (c.len - off).min(STAGE);
            let Some(part) = chunk.get_mut(..n) else {
                return Ok(None);
            };
            self.read_at(addr + self.body_off + off as u32, part)?;
            crc.update(part);
            off += n;
        }
        Ok((crc.finish() == c.body_crc).then_some(SlotInfo {
            slot,
            seq: c.seq,
            len: c.len,
        }))
    }

    /// The newest valid snapshot, if any (each slot's record and body CRC are checked).
    pub fn latest(&mut self) -> Result<Option<SlotInfo>, StoreError<F::Error>> {
        let a = self.check_slot(Slot::A).map_err(StoreError::Flash)?;
        let b = self.check_slot(Slot::B).map_err(StoreError::Flash)?;
        Ok(match (a, b) {
            (Some(a), Some(b)) => Some(if b.seq > a.seq { b } else { a }),
            (a, b) => a.or(b),
        })
    }

    /// Stores a body that `produce` writes through the sink it is given (in pieces; a sink
    /// error becomes [`SnapshotError::Sink`] inside `produce` and the flash error here). The
    /// slot written is the one not holding the newest valid snapshot; see the module docs.
    pub fn save_with(
        &mut self,
        produce: impl FnOnce(
            &mut dyn FnMut(&[u8]) -> Result<(), SnapshotError>,
        ) -> Result<(), SnapshotError>,
    ) -> Result<SlotInfo, StoreError<F::Error>> {
        let newest = self.latest()?;
        let slot = newest.map_or(Slot::A, |n| n.slot.other());
        let seq = newest.map_or(1, |n| n.seq.saturating_add(1));
        let addr = self.slot_addr(slot);
        // Commit record's erase block first: from then on the slot is invalid until its record
        // is rewritten, whatever order the flash erases the rest in.
        let first = (F::ERASE_SIZE as u32).min(self.slot_size);
        self.flash
            .erase(addr, addr + first)
            .map_err(StoreError::Flash)?;
        if first < self.slot_size {
            self.flash
                .erase(addr + first, addr + self.slot_size)
                .map_err(StoreError::Flash)?;
        }
        let body_addr = addr + self.body_off;
        let mut w = BodyWriter {
            store: self,
            addr: body_addr,
            stage: [0xFF; STAGE],
            staged: 0,
            len: 0,
            crc: Crc32::new(),
            error: None,
        };
        let produced = produce(&mut |bytes| w.push(bytes));
        if let Some(e) = w.error {
            return Err(e);
        }
        produced.map_err(StoreError::Snapshot)?;
        w.flush()?;
        let (len, body_crc) = (w.len, w.crc.finish());
        // The commit record, last.
        let mut rec = [0xFFu8; STAGE];
        let n = self.body_off as usize;
        let Some(head) = rec.get_mut(..COMMIT_LEN) else {
            return Err(StoreError::Geometry("commit record"));
        };
        head.copy_from_slice(&Commit { seq, len, body_crc }.encode());
        let Some(padded) = rec.get(..n) else {
            return Err(StoreError::Geometry("write size above 256 bytes"));
        };
        self.flash.write(addr, padded).map_err(StoreError::Flash)?;
        Ok(SlotInfo { slot, seq, len })
    }

    /// Stores `bytes` (any blob, usually a snapshot).
    pub fn save_bytes(&mut self, bytes: &[u8]) -> Result<SlotInfo, StoreError<F::Error>> {
        self.save_with(|sink| sink(bytes))
    }

    /// Stores a snapshot of `session` (see [`snapshot::write`]).
    pub fn save_snapshot<E: StateElem>(
        &mut self,
        session: &Session<'_, E>,
        sampler: &Sampler,
        fingerprint: u64,
    ) -> Result<SlotInfo, StoreError<F::Error>> {
        let len = snapshot::encoded_len(session).map_err(StoreError::Snapshot)?;
        if len > self.capacity() {
            return Err(StoreError::TooLarge {
                len,
                capacity: self.capacity(),
            });
        }
        self.save_with(|sink| snapshot::write(session, sampler, fingerprint, sink).map(|_| ()))
    }

    /// Copies the newest valid body into `buf`; returns its slot and the bytes.
    pub fn read_latest<'b>(
        &mut self,
        buf: &'b mut [u8],
    ) -> Result<(SlotInfo, &'b [u8]), StoreError<F::Error>> {
        let info = self.latest()?.ok_or(StoreError::NoSnapshot)?;
        let got = buf.len();
        let dst = buf.get_mut(..info.len).ok_or(StoreError::BufferTooSmall {
            needed: info.len,
            got,
        })?;
        let addr = self.slot_addr(info.slot) + self.body_off;
        self.read_at(addr, dst).map_err(StoreError::Flash)?;
        Ok((info, dst))
    }

    /// Restores `session` from the newest valid snapshot, reading it from flash in pieces
    /// (no RAM copy of the snapshot). A snapshot that does not fit the session (another
    /// model, …) is an error, not a reason to fall back to the older slot.
    pub fn restore_latest<E: StateElem>(
        &mut self,
        session: &mut Session<'_, E>,
        sampler: &mut Sampler,
        fingerprint: u64,
    ) -> Result<SlotInfo, StoreError<F::Error>> {
        let info = self.latest()?.ok_or(StoreError::NoSnapshot)?;
        let addr = self.slot_addr(info.slot) + self.body_off;
        let mut flash_error = None;
        let r = snapshot::restore_from(
            info.len,
            &mut |off, buf| {
                let at = u32::try_from(off).map_err(|_| SnapshotError::Source)?;
                self.read_at(addr + at, buf).map_err(|e| {
                    flash_error = Some(e);
                    SnapshotError::Source
                })
            },
            session,
            sampler,
            fingerprint,
        );
        match (r, flash_error) {
            (_, Some(e)) => Err(StoreError::Flash(e)),
            (Err(e), None) => Err(StoreError::Snapshot(e)),
            (Ok(_), None) => Ok(info),
        }
    }
}

/// Streams a body into a slot in whole `WRITE_SIZE` blocks.
struct BodyWriter<'s, F: NorFlash> {
    store: &'s mut SlotStore<F>,
    addr: u32,
    stage: [u8; STAGE],
    staged: usize,
    len: usize,
    crc: Crc32,
    error: Option<StoreError<F::Error>>,
}

impl<F: NorFlash> BodyWriter<'_, F> {
    fn push(&mut self, mut bytes: &[u8]) -> Result<(), SnapshotError> {
        if self.error.is_some() {
            return Err(SnapshotError::Sink);
        }
        let capacity = self.store.capacity();
        if self.len + bytes.len() > capacity {
            self.error = Some(StoreError::TooLarge {
                len: self.len + bytes.len(),
                capacity,
            });
            return Err(SnapshotError::Sink);
        }
        self.crc.update(bytes);
        self.len += bytes.len();
        while !bytes.is_empty() {
            let n = (STAGE - self.staged).min(bytes.len());
            let (now, rest) = bytes.split_at(n);
            if let Some(dst) = self.stage.get_mut(self.staged..self.staged + n) {
                dst.copy_from_slice(now);
            }
            self.staged += n;
            bytes = rest;
            if self.staged == STAGE {
                if let Err(e) = self.flush() {
                    self.error = Some(e);
                    return Err(SnapshotError::Sink);
                }
            }
        }
        Ok(())
    }

    /// Writes what is staged, padded with the erased value to whole write blocks.
    fn flush(&mut self) -> Result<(), StoreError<F::Error>> {
        if self.staged == 0 {
            return Ok(());
        }
        let n = self.staged.div_ceil(F::WRITE_SIZE) * F::WRITE_SIZE;
        if let Some(pad) = self.stage.get_mut(self.staged..n) {
            pad.fill(0xFF);
        }
        let block = self.stage.get(..n).ok_or(StoreError::Geometry("stage"))?;
        self.store
            .flash
            .write(self.addr, block)
            .map_err(StoreError::Flash)?;
        self.addr += n as u32;
        self.staged = 0;
        Ok(())
    }
}

/// A slot's commit record.
struct Commit {
    seq: u64,
    len: usize,
    body_crc: u32,
}

impl Commit {
    fn encode(&self) -> [u8; COMMIT_LEN] {
        let mut b = [0u8; COMMIT_LEN];
        let fields: [&[u8]; 5] = [
            &SLOT_MAGIC,
            &self.seq.to_le_bytes(),
            &(self.len as u32).to_le_bytes(),
            &self.body_crc.to_le_bytes(),
            &0u32.to_le_bytes(),
        ];
        let mut at = 0;
        for f in fields {
            if let Some(dst) = b.get_mut(at..at + f.len()) {
                dst.copy_from_slice(f);
            }
            at += f.len();
        }
        let crc = Crc32::of(b.get(..COMMIT_LEN - 4).unwrap_or(&[]));
        if let Some(dst) = b.get_mut(COMMIT_LEN - 4..) {
            dst.copy_from_slice(&crc.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8; COMMIT_LEN]) -> Option<Self> {
        let field = |at: usize, n: usize| b.get(at..at + n);
        if field(0, 8)? != SLOT_MAGIC {
            return None;
        }
        let crc = u32::from_le_bytes(field(28, 4)?.try_into().ok()?);
        if Crc32::of(field(0, 28)?) != crc {
            return None;
        }
        Some(Self {
            seq: u64::from_le_bytes(field(8, 8)?.try_into().ok()?),
            len: u32::from_le_bytes(field(16, 4)?.try_into().ok()?) as usize,
            body_crc: u32::from_le_bytes(field(20, 4)?.try_into().ok()?),
        })
    }
}

/// Why a [`MemFlash`] operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MemFlashError {
    /// Offset or length not a multiple of the write or erase size.
    NotAligned,
    /// Outside the memory.
    OutOfBounds,
    /// A write to bytes that were not erased (NOR flash needs an erase first).
    NotErased,
    /// The simulated power cut: the budget of bytes ran out during this operation.
    PowerCut,
}

impl NorFlashError for MemFlashError {
    fn kind(&self) -> NorFlashErrorKind {
        match self {
            MemFlashError::NotAligned => NorFlashErrorKind::NotAligned,
            MemFlashError::OutOfBounds => NorFlashErrorKind::OutOfBounds,
            _ => NorFlashErrorKind::Other,
        }
    }
}

/// NOR flash in a byte slice: erase sets bytes to 0xFF, a write needs erased bytes. With
/// [`MemFlash::cut_power_after`] it simulates a power cut: erases and writes go byte by byte,
/// front to back, and stop (with [`MemFlashError::PowerCut`]) once the budget is spent.
pub struct MemFlash<'a, const WRITE: usize = 4, const ERASE: usize = 256> {
    data: &'a mut [u8],
    budget: Option<usize>,
}

impl<'a, const WRITE: usize, const ERASE: usize> MemFlash<'a, WRITE, ERASE> {
    /// A flash over `data` (its current contents are kept).
    pub fn new(data: &'a mut [u8]) -> Self {
        Self { data, budget: None }
    }

    /// From now on, only `bytes` more bytes are erased or written; `None` lifts the limit.
    pub fn cut_power_after(&mut self, bytes: Option<usize>) {
        self.budget = bytes;
    }

    /// The memory.
    pub fn data(&self) -> &[u8] {
        self.data
    }

    fn range(
        &self,
        offset: u32,
        len: usize,
        align: usize,
    ) -> Result<core::ops::Range<usize>, MemFlashError> {
        let start = offset as usize;
        let end = start.checked_add(len).ok_or(MemFlashError::OutOfBounds)?;
        if end > self.data.len() {
            return Err(MemFlashError::OutOfBounds);
        }
        if start % align != 0 || len % align != 0 {
            return Err(MemFlashError::NotAligned);
        }
        Ok(start..end)
    }

    /// Spends one byte of the budget; false once the power is gone.
    fn spend(&mut self) -> bool {
        match &mut self.budget {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }
}

impl<const WRITE: usize, const ERASE: usize> ErrorType for MemFlash<'_, WRITE, ERASE> {
    type Error = MemFlashError;
}

impl<const WRITE: usize, const ERASE: usize> ReadNorFlash for MemFlash<'_, WRITE, ERASE> {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), Self::Error> {
        let r = self.range(offset, bytes.len(), 1)?;
        let src = self.data.get(r).ok_or(MemFlashError::OutOfBounds)?;
        bytes.copy_from_slice(src);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.data.len()
    }
}

impl<const WRITE: usize, const ERASE: usize> NorFlash for MemFlash<'_, WRITE, ERASE> {
    const WRITE_SIZE: usize = WRITE;
    const ERASE_SIZE: usize = ERASE;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), Self::Error> {
        let len = (to as usize)
            .checked_sub(from as usize)
            .ok_or(MemFlashError::OutOfBounds)?;
        let r = self.range(from, len, ERASE)?;
        for i in r {
            if !self.spend() {
                return Err(MemFlashError::PowerCut);
            }
            if let Some(b) = self.data.get_mut(i) {
                *b = 0xFF;
            }
        }
        Ok(())
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), Self::Error> {
        let r = self.range(offset, bytes.len(), WRITE)?;
        let dst = self.data.get(r.clone()).ok_or(MemFlashError::OutOfBounds)?;
        if dst.iter().any(|&b| b != 0xFF) {
            return Err(MemFlashError::NotErased);
        }
        for (i, &b) in r.zip(bytes) {
            if !self.spend() {
                return Err(MemFlashError::PowerCut);
            }
            if let Some(d) = self.data.get_mut(i) {
                *d = b;
            }
        }
        Ok(())
    }
}
