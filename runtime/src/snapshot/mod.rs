//! Session snapshots: save a decoding stream to bytes and resume it later, on the same device or
//! another one (a board and a host read the same format), bit-identically.
//!
//! # Format (version 1, all integers little-endian)
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 8 | magic `LOGLSNAP` |
//! | 8 | 2 | format version (1) |
//! | 10 | 1 | state dtype: 0 = f32, 1 = f16 |
//! | 11 | 1 | state levels of the session (1 plain, 2..=15 log-linear) |
//! | 12 | 4 | layers |
//! | 16 | 8 | t, tokens consumed |
//! | 24 | 8 | model fingerprint ([`model_fingerprint`] of the model file) |
//! | 32 | 8 | sampler PRNG state ([`Sampler::rng_state`]) |
//! | 40 | 8 | live-level mask: bit ℓ set iff level ℓ is stored (must equal what t and the levels say) |
//! | 48 | 4 | elements of one level of one layer (heads × dk × dv) |
//! | 52 | 4 | conv-state elements of one layer |
//! | 56 | 4 | logits (vocabulary size) |
//! | 60 | 4 | total length in bytes, CRC included |
//! | 64 | … | for each layer: its live levels, ascending, in the stored dtype |
//! | … | … | the conv states of every layer (f32) |
//! | … | … | the logits of the last step (f32): the next token is sampled from them |
//! | end − 4 | 4 | CRC-32 (IEEE, as zlib's `crc32`) of every byte before it |
//!
//! Only the live levels are stored: a dead level is always zero in a session (a merge zeroes
//! the levels it empties), so restore writes zeros there. At t = 0 no level is stored.
//!
//! # Validation
//! [`restore`] checks everything before it touches the session: magic, version, length, CRC,
//! the header's own consistency (the live mask must be the one the capacity policy gives for
//! t), then the model fingerprint ([`SnapshotError::ModelMismatch`]), the state dtype, the
//! levels and every size against the session. A failed restore leaves the session unchanged.
//!
//! # Why the fingerprint is enough
//! The fingerprint is FNV-1a-64 over every byte of the model file (header, metadata and
//! weights). Its job is to catch an honest mistake, resuming with another model file (another
//! quantization, another training run, another architecture): for two different files the
//! chance of equal 64-bit hashes is about 2⁻⁶⁴. It is not a defence against a forged file,
//! and needs not be: whoever can forge the model or the snapshot can already put any state in
//! it, and a wrong state only gives wrong text, never memory unsafety. Shapes are checked on
//! their own, so even a collision can never make a restore read or write out of bounds.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use crate::fenwick::StateElem;
use crate::level::LevelPolicy;
use crate::sampler::Sampler;
use crate::session::Session;

mod checksum;
pub use checksum::{model_fingerprint, Crc32, Fingerprint};

/// The first 8 bytes of every snapshot.
pub const MAGIC: [u8; 8] = *b"LOGLSNAP";
/// The format version this code writes and reads.
pub const VERSION: u16 = 1;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 64;
/// Bytes of the CRC trailer.
pub const CRC_LEN: usize = 4;
/// Bytes of the smallest possible snapshot (header and CRC, nothing else).
pub const MIN_LEN: usize = HEADER_LEN + CRC_LEN;

/// How a snapshot stores the Fenwick state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum StateDtype {
    /// 32-bit floats.
    F32,
    /// 16-bit floats (`half::f16`).
    F16,
}

impl StateDtype {
    /// The dtype of a session storing `E`, `None` for a type the format does not know.
    pub fn of<E: StateElem>() -> Option<Self> {
        match (E::NAME, core::mem::size_of::<E>()) {
            ("f32", 4) => Some(Self::F32),
            ("f16", 2) => Some(Self::F16),
            _ => None,
        }
    }

    /// Bytes of one element.
    pub const fn bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 => 2,
        }
    }

    /// Name ("f32", "f16").
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
        }
    }

    const fn code(self) -> u8 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
        }
    }

    const fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(Self::F32),
            1 => Some(Self::F16),
            _ => None,
        }
    }
}

/// Why a snapshot could not be written or restored. Every malformed input ends here: the
/// decoder never panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SnapshotError {
    /// Fewer bytes than the snapshot needs (a cut write).
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes given.
        got: usize,
    },
    /// More bytes than the header says.
    TrailingBytes {
        /// Bytes the header says.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// Not a snapshot (wrong magic).
    BadMagic,
    /// A format version this code does not read.
    UnsupportedVersion(u16),
    /// The CRC does not match: the bytes are damaged.
    CrcMismatch {
        /// CRC in the trailer.
        stored: u32,
        /// CRC of the bytes.
        computed: u32,
    },
    /// The header contradicts itself (CRC valid, so written by a different or broken writer).
    InvalidHeader(&'static str),
    /// The snapshot was made with another model file.
    ModelMismatch {
        /// Fingerprint in the snapshot.
        snapshot: u64,
        /// Fingerprint of the session's model file.
        session: u64,
    },
    /// The snapshot's state dtype is not the session's.
    DtypeMismatch {
        /// The snapshot's.
        snapshot: StateDtype,
        /// The session's ("f32", "f16", …).
        session: &'static str,
    },
    /// The snapshot's number of state levels is not the session's.
    LevelsMismatch {
        /// The snapshot's.
        snapshot: usize,
        /// The session's.
        session: usize,
    },
    /// A size in the snapshot differs from the session's model.
    ShapeMismatch {
        /// Which: `"layers"`, `"level"`, `"conv"` or `"logits"`.
        part: &'static str,
        /// The snapshot's.
        snapshot: usize,
        /// The session's.
        session: usize,
    },
    /// The session stores its state in a type the format does not know.
    UnsupportedStateType(&'static str),
    /// The snapshot would exceed 4 GiB.
    TooLarge,
    /// The byte sink refused a write.
    Sink,
    /// The byte source failed a read. If that happens after validation (a flash read error
    /// between the two passes), the session is reset to t = 0 rather than left half-written.
    Source,
}

impl core::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Truncated { needed, got } => {
                write!(f, "snapshot truncated: {got} bytes, {needed} needed")
            }
            Self::TrailingBytes { expected, got } => {
                write!(f, "snapshot has {got} bytes, its header says {expected}")
            }
            Self::BadMagic => write!(f, "not a snapshot (bad magic)"),
            Self::UnsupportedVersion(v) => {
                write!(f, "snapshot format version {v}, this build reads {VERSION}")
            }
            Self::CrcMismatch { stored, computed } => write!(
                f,
                "snapshot damaged: CRC {computed:#010x}, stored {stored:#010x}"
            ),
            Self::InvalidHeader(why) => write!(f, "invalid snapshot header: {why}"),
            Self::ModelMismatch { snapshot, session } => write!(
                f,
                "snapshot made with another model file (fingerprint {snapshot:#018x}, this model {session:#018x})"
            ),
            Self::DtypeMismatch { snapshot, session } => write!(
                f,
                "snapshot state is {}, the session stores {session}",
                snapshot.name()
            ),
            Self::LevelsMismatch { snapshot, session } => write!(
                f,
                "snapshot has {snapshot} state levels, the session {session}"
            ),
            Self::ShapeMismatch {
                part,
                snapshot,
                session,
            } => write!(
                f,
                "snapshot {part} size {snapshot}, the session's model has {session}"
            ),
            Self::UnsupportedStateType(n) => write!(f, "state type {n} cannot be snapshotted"),
            Self::TooLarge => write!(f, "snapshot larger than 4 GiB"),
            Self::Sink => write!(f, "snapshot sink refused a write"),
            Self::Source => write!(f, "snapshot source failed a read"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SnapshotError {}

/// The decoded header of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Header {
    /// Tokens consumed.
    pub t: u64,
    /// State dtype.
    pub dtype: StateDtype,
    /// State levels of the session.
    pub levels: usize,
    /// Layers.
    pub num_layers: usize,
    /// Elements of one level of one layer.
    pub level_elems: usize,
    /// Conv-state elements of one layer.
    pub conv_elems: usize,
    /// Logits stored (vocabulary size).
    pub vocab_size: usize,
    /// Model fingerprint.
    pub fingerprint: u64,
    /// Sampler PRNG state.
    pub rng_state: u64,
    /// Bit ℓ set iff level ℓ is stored.
    pub live_mask: u64,
    /// Total bytes, CRC included.
    pub total_len: usize,
}

impl Header {
    /// The header a snapshot of `session` would have.
    pub fn of<E: StateElem>(
        session: &Session<'_, E>,
        sampler: &Sampler,
        fingerprint: u64,
    ) -> Result<Self, SnapshotError> {
        let dtype = StateDtype::of::<E>().ok_or(SnapshotError::UnsupportedStateType(E::NAME))?;
        let c = session.model().config();
        let levels = session.policy().levels();
        let mut h = Header {
            t: session.t(),
            dtype,
            levels,
            num_layers: c.num_layers,
            level_elems: c.num_heads * c.head_k_dim * c.head_v_dim,
            conv_elems: c.conv_channels() * c.conv_kernel,
            vocab_size: c.vocab_size,
            fingerprint,
            rng_state: sampler.rng_state(),
            live_mask: live_mask(session.policy(), session.t()),
            total_len: 0,
        };
        h.total_len = h.expected_len().ok_or(SnapshotError::TooLarge)?;
        Ok(h)
    }

    /// Number of levels stored per layer.
    pub fn stored_levels(&self) -> usize {
        self.live_mask.count_ones() as usize
    }

    /// Total length the fields imply, `None` past 4 GiB.
    fn expected_len(&self) -> Option<usize> {
        let live = self.live_mask.count_ones() as u64;
        let level_bytes = (self.level_elems as u64).checked_mul(self.dtype.bytes() as u64)?;
        let per_layer = live
            .checked_mul(level_bytes)?
            .checked_add((self.conv_elems as u64).checked_mul(4)?)?;
        let total = per_layer
            .checked_mul(self.num_layers as u64)?
            .checked_add((self.vocab_size as u64).checked_mul(4)?)?
            .checked_add(MIN_LEN as u64)?;
        if total > u64::from(u32::MAX) {
            return None;
        }
        usize::try_from(total).ok()
    }

    fn encode(&self) -> Result<[u8; HEADER_LEN], SnapshotError> {
        let u32_of = |x: usize| u32::try_from(x).map_err(|_| SnapshotError::TooLarge);
        let levels = u8::try_from(self.levels).map_err(|_| SnapshotError::TooLarge)?;
        let mut b = [0u8; HEADER_LEN];
        let mut w = Cursor { buf: &mut b, at: 0 };
        w.put(&MAGIC);
        w.put(&VERSION.to_le_bytes());
        w.put(&[self.dtype.code(), levels]);
        w.put(&u32_of(self.num_layers)?.to_le_bytes());
        w.put(&self.t.to_le_bytes());
        w.put(&self.fingerprint.to_le_bytes());
        w.put(&self.rng_state.to_le_bytes());
        w.put(&self.live_mask.to_le_bytes());
        w.put(&u32_of(self.level_elems)?.to_le_bytes());
        w.put(&u32_of(self.conv_elems)?.to_le_bytes());
        w.put(&u32_of(self.vocab_size)?.to_le_bytes());
        w.put(&u32_of(self.total_len)?.to_le_bytes());
        Ok(b)
    }

    /// Decodes and checks the header's own consistency (not the CRC).
    fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, SnapshotError> {
        let r = Reader(b);
        if r.bytes::<8>(0) != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let version = u16::from_le_bytes(r.bytes(8));
        if version != VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let [dtype, levels] = r.bytes(10);
        let dtype = StateDtype::from_code(dtype)
            .ok_or(SnapshotError::InvalidHeader("unknown state dtype"))?;
        let policy = LevelPolicy::new(usize::from(levels))
            .ok_or(SnapshotError::InvalidHeader("state levels outside 1..=64"))?;
        let usize_at =
            |off| usize::try_from(u32::from_le_bytes(r.bytes(off))).unwrap_or(usize::MAX);
        let h = Header {
            t: u64::from_le_bytes(r.bytes(16)),
            dtype,
            levels: policy.levels(),
            num_layers: usize_at(12),
            level_elems: usize_at(48),
            conv_elems: usize_at(52),
            vocab_size: usize_at(56),
            fingerprint: u64::from_le_bytes(r.bytes(24)),
            rng_state: u64::from_le_bytes(r.bytes(32)),
            live_mask: u64::from_le_bytes(r.bytes(40)),
            total_len: usize_at(60),
        };
        if h.live_mask != live_mask(policy, h.t) {
            return Err(SnapshotError::InvalidHeader(
                "live-level mask is not the one the levels and t give",
            ));
        }
        if h.expected_len() != Some(h.total_len) {
            return Err(SnapshotError::InvalidHeader(
                "total length does not match the sizes",
            ));
        }
        Ok(h)
    }

    /// Checks that the snapshot fits `session` (model, dtype, levels, sizes).
    fn check_fits<E: StateElem>(
        &self,
        session: &Session<'_, E>,
        fingerprint: u64,
    ) -> Result<(), SnapshotError> {
        if self.fingerprint != fingerprint {
            return Err(SnapshotError::ModelMismatch {
                snapshot: self.fingerprint,
                session: fingerprint,
            });
        }
        if StateDtype::of::<E>() != Some(self.dtype) {
            return Err(SnapshotError::DtypeMismatch {
                snapshot: self.dtype,
                session: E::NAME,
            });
        }
        let levels = session.policy().levels();
        if self.levels != levels {
            return Err(SnapshotError::LevelsMismatch {
                snapshot: self.levels,
                session: levels,
            });
        }
        let c = session.model().config();
        for (part, snapshot, session) in [
            ("layers", self.num_layers, c.num_layers),
            (
                "level",
                self.level_elems,
                c.num_heads * c.head_k_dim * c.head_v_dim,
            ),
            ("conv", self.conv_elems, c.conv_channels() * c.conv_kernel),
            ("logits", self.vocab_size, c.vocab_size),
        ] {
            if snapshot != session {
                return Err(SnapshotError::ShapeMismatch {
                    part,
                    snapshot,
                    session,
                });
            }
        }
        // The session's buffers are carved from the same sizes; check anyway, so that the
        // copy below can never go out of bounds.
        let (states, conv, logits) = (
            session.states().len(),
            session.conv_states().len(),
            session.logits().len(),
        );
        if Some(states) != self.level_elems.checked_mul(levels * self.num_layers)
            || Some(conv) != self.conv_elems.checked_mul(self.num_layers)
            || logits != self.vocab_size
        {
            return Err(SnapshotError::ShapeMismatch {
                part: "session buffers",
                snapshot: states,
                session: conv,
            });
        }
        Ok(())
    }
}

/// Bit ℓ set iff level ℓ holds tokens after `t` tokens (level 0 and the policy's live upper
/// levels of the last step); 0 at t = 0.
pub fn live_mask(policy: LevelPolicy, t: u64) -> u64 {
    if t == 0 {
        return 0;
    }
    policy
        .live_upper_levels(t - 1)
        .fold(1u64, |m, l| m | 1u64.checked_shl(l).unwrap_or(0))
}

/// Bytes [`write`](fn@write) produces for `session` now.
pub fn encoded_len<E: StateElem>(session: &Session<'_, E>) -> Result<usize, SnapshotError> {
    Ok(Header::of(session, &Sampler::new(Default::default()), 0)?.total_len)
}

/// Writes a snapshot of `session` and `sampler`'s PRNG to `sink`, in pieces; returns the
/// bytes written ([`encoded_len`]). `fingerprint` is the model file's ([`model_fingerprint`]).
pub fn write<E: StateElem, S: FnMut(&[u8]) -> Result<(), SnapshotError> + ?Sized>(
    session: &Session<'_, E>,
    sampler: &Sampler,
    fingerprint: u64,
    sink: &mut S,
) -> Result<usize, SnapshotError> {
    let h = Header::of(session, sampler, fingerprint)?;
    let mut out = CrcSink {
        sink,
        crc: Crc32::new(),
        written: 0,
    };
    out.put(&h.encode()?)?;
    let per_layer = h.levels * h.level_elems;
    if per_layer > 0 {
        for layer in session.states().chunks_exact(per_layer) {
            for (l, level) in layer.chunks_exact(h.level_elems.max(1)).enumerate() {
                if h.live_mask >> l & 1 == 1 {
                    out.put_elems(level)?;
                }
            }
        }
    }
    out.put_elems(session.conv_states())?;
    out.put_elems(session.logits())?;
    let crc = out.crc.finish();
    (out.sink)(&crc.to_le_bytes())?;
    let written = out.written + CRC_LEN;
    if written != h.total_len {
        // Only if the session's buffers disagreed with its model config (internal error).
        return Err(SnapshotError::InvalidHeader(
            "written length differs from the header",
        ));
    }
    Ok(written)
}

/// Checks a snapshot without a session: magic, version, length, CRC and the header's own
/// consistency. Returns the header (to pick the session's dtype and levels before restoring).
pub fn peek(bytes: &[u8]) -> Result<Header, SnapshotError> {
    validate(bytes.len(), &mut slice_reader(bytes))
}

/// Restores `session` and `sampler`'s PRNG from `bytes`. Everything is checked first (see the
/// module docs); on any error the session and the sampler are unchanged.
pub fn restore<E: StateElem>(
    bytes: &[u8],
    session: &mut Session<'_, E>,
    sampler: &mut Sampler,
    fingerprint: u64,
) -> Result<Header, SnapshotError> {
    restore_from(
        bytes.len(),
        &mut slice_reader(bytes),
        session,
        sampler,
        fingerprint,
    )
}

/// [`restore`] from a snapshot of `len` bytes that `read(offset, buf)` reads in pieces (a
/// flash region too large for RAM). It reads everything twice: once to validate, once to copy.
pub fn restore_from<E: StateElem>(
    len: usize,
    read: &mut impl FnMut(usize, &mut [u8]) -> Result<(), SnapshotError>,
    session: &mut Session<'_, E>,
    sampler: &mut Sampler,
    fingerprint: u64,
) -> Result<Header, SnapshotError> {
    let h = validate(len, read)?;
    h.check_fits(session, fingerprint)?;
    if let Err(e) = copy_in(&h, read, session) {
        session.reset();
        return Err(e);
    }
    sampler.set_rng_state(h.rng_state);
    Ok(h)
}

fn slice_reader(bytes: &[u8]) -> impl FnMut(usize, &mut [u8]) -> Result<(), SnapshotError> + '_ {
    move |off, buf| {
        let end = off.checked_add(buf.len()).ok_or(SnapshotError::Source)?;
        let src = bytes.get(off..end).ok_or(SnapshotError::Source)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// Pass 1: header, length and CRC.
fn validate(
    len: usize,
    read: &mut impl FnMut(usize, &mut [u8]) -> Result<(), SnapshotError>,
) -> Result<Header, SnapshotError> {
    let mut hb = [0u8; HEADER_LEN];
    let head = hb
        .get_mut(..len.min(HEADER_LEN))
        .ok_or(SnapshotError::Source)?;
    read(0, head)?;
    if head.iter().zip(MAGIC.iter()).any(|(a, b)| a != b) {
        return Err(SnapshotError::BadMagic);
    }
    if len < MIN_LEN {
        return Err(SnapshotError::Truncated {
            needed: MIN_LEN,
            got: len,
        });
    }
    let version = u16::from_le_bytes(Reader(&hb).bytes(8));
    if version != VERSION {
        return Err(SnapshotError::UnsupportedVersion(version));
    }
    let total = usize::try_from(u32::from_le_bytes(Reader(&hb).bytes(60))).unwrap_or(usize::MAX);
    if len < total {
        return Err(SnapshotError::Truncated {
            needed: total,
            got: len,
        });
    }
    if len > total {
        return Err(SnapshotError::TrailingBytes {
            expected: total,
            got: len,
        });
    }
    // total ≥ MIN_LEN here, as len ≥ MIN_LEN.
    let body = total - CRC_LEN;
    let mut crc = Crc32::new();
    let mut chunk = [0u8; 256];
    let mut off = 0;
    while off < body {
        let n = (body - off).min(chunk.len());
        let part = chunk.get_mut(..n).ok_or(SnapshotError::Source)?;
        read(off, part)?;
        crc.update(part);
        off += n;
    }
    let mut stored = [0u8; CRC_LEN];
    read(body, &mut stored)?;
    let (stored, computed) = (u32::from_le_bytes(stored), crc.finish());
    if stored != computed {
        return Err(SnapshotError::CrcMismatch { stored, computed });
    }
    Header::decode(&hb)
}

/// Pass 2: the payload into the session (only after [`validate`] and [`Header::check_fits`]).
fn copy_in<E: StateElem>(
    h: &Header,
    read: &mut impl FnMut(usize, &mut [u8]) -> Result<(), SnapshotError>,
    session: &mut Session<'_, E>,
) -> Result<(), SnapshotError> {
    let (t, states, conv, logits) = session.restore_parts();
    let mut off = HEADER_LEN;
    let per_layer = h.levels * h.level_elems;
    if per_layer > 0 && h.level_elems > 0 {
        for layer in states.chunks_exact_mut(per_layer) {
            for (l, level) in layer.chunks_exact_mut(h.level_elems).enumerate() {
                if h.live_mask >> l & 1 == 1 {
                    read_elems(read, level, &mut off)?;
                    from_le(level);
                } else {
                    level.fill(E::default());
                }
            }
        }
    }
    read_elems(read, conv, &mut off)?;
    from_le(conv);
    read_elems(read, logits, &mut off)?;
    from_le(logits);
    *t = h.t;
    Ok(())
}

/// Reads `xs.len()` elements at `*off` and advances it.
fn read_elems<T: bytemuck::Pod>(
    read: &mut impl FnMut(usize, &mut [u8]) -> Result<(), SnapshotError>,
    xs: &mut [T],
    off: &mut usize,
) -> Result<(), SnapshotError> {
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(xs);
    read(*off, bytes)?;
    *off += bytes.len();
    Ok(())
}

/// Elements were read as little-endian bytes; on a big-endian target swap them in place.
fn from_le<T: bytemuck::Pod>(xs: &mut [T]) {
    if cfg!(target_endian = "big") {
        for x in xs {
            bytemuck::bytes_of_mut(x).reverse();
        }
    }
}

/// A sink that counts and checksums what passes through.
struct CrcSink<'s, F: FnMut(&[u8]) -> Result<(), SnapshotError> + ?Sized> {
    sink: &'s mut F,
    crc: Crc32,
    written: usize,
}

impl<F: FnMut(&[u8]) -> Result<(), SnapshotError> + ?Sized> CrcSink<'_, F> {
    fn put(&mut self, b: &[u8]) -> Result<(), SnapshotError> {
        if b.is_empty() {
            return Ok(());
        }
        self.crc.update(b);
        (self.sink)(b)?;
        self.written += b.len();
        Ok(())
    }

    /// Elements as little-endian bytes.
    fn put_elems<T: bytemuck::Pod>(&mut self, xs: &[T]) -> Result<(), SnapshotError> {
        if cfg!(target_endian = "little") {
            self.put(bytemuck::cast_slice(xs))
        } else {
            for x in xs {
                let mut b = [0u8; 8];
                let src = bytemuck::bytes_of(x);
                let dst = b.get_mut(..src.len()).ok_or(SnapshotError::TooLarge)?;
                dst.copy_from_slice(src);
                dst.reverse();
                self.put(dst)?;
            }
            Ok(())
        }
    }
}

/// Writes into a fixed header buffer; the layout above fits it exactly.
struct Cursor<'b> {
    buf: &'b mut [u8; HEADER_LEN],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, b: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + b.len()) {
            dst.copy_from_slice(b);
        }
        self.at += b.len();
    }
}

/// Reads fixed-size fields from the header buffer (zeros outside it, which cannot happen for
/// the fixed offsets used).
struct Reader<'b>(&'b [u8; HEADER_LEN]);

impl Reader<'_> {
    fn bytes<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.0.get(off..off + N) {
            out.copy_from_slice(src);
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn live_mask_follows_the_policy() {
        let p = LevelPolicy::new(4).unwrap();
        assert_eq!(live_mask(p, 0), 0);
        assert_eq!(live_mask(p, 1), 0b1); // after token 0: level 0
        assert_eq!(live_mask(p, 2), 0b11); // after token 1: t-1 = 1 → level 1
        assert_eq!(live_mask(p, 5), 0b1001); // t-1 = 4: level 3 (top, saturated)
        assert_eq!(live_mask(LevelPolicy::new(1).unwrap(), 99), 1);
    }

    #[test]
    fn short_and_foreign_inputs_are_typed_errors() {
        assert_eq!(
            peek(b""),
            Err(SnapshotError::Truncated {
                needed: MIN_LEN,
                got: 0
            })
        );
        assert_eq!(
            peek(b"LOGL"),
            Err(SnapshotError::Truncated {
                needed: MIN_LEN,
                got: 4
            })
        );
        assert_eq!(peek(b"GGUF\x03\0\0\0"), Err(SnapshotError::BadMagic));
        assert_eq!(peek(&[0u8; 100]), Err(SnapshotError::BadMagic));
    }
}
