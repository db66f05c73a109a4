//! The two hashes of a snapshot: the CRC-32 that guards its bytes and the FNV-1a-64
//! fingerprint that ties it to one model file (see the module docs of [`super`]).

use core::hash::Hasher;

/// The snapshot's checksum: CRC-32 with the ISO-HDLC parameters (IEEE 802.3; zlib's `crc32`,
/// PNG's), one 256-entry table (1 KiB, built at compile time), which keeps board images small.
static CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// A running `CRC32`, fed in pieces.
#[derive(Clone)]
pub struct Crc32(crc::Digest<'static, u32>);

impl Crc32 {
    /// A fresh checksum.
    pub const fn new() -> Self {
        Self(CRC32.digest())
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// The checksum of everything added.
    pub fn finish(&self) -> u32 {
        self.0.clone().finalize()
    }

    /// CRC-32 of `bytes`.
    pub fn of(bytes: &[u8]) -> u32 {
        CRC32.checksum(bytes)
    }
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for Crc32 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Crc32").field(&self.finish()).finish()
    }
}

/// FNV-1a-64 of a model file, fed in pieces (a model in flash read block by block).
#[derive(Default)]
pub struct Fingerprint(fnv::FnvHasher);

impl Fingerprint {
    /// A fresh hash.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    /// The fingerprint.
    pub fn finish(&self) -> u64 {
        self.0.finish()
    }
}

impl core::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Fingerprint").field(&self.finish()).finish()
    }
}

/// The fingerprint of a model file: FNV-1a-64 over all its bytes (see the module docs).
pub fn model_fingerprint(file: &[u8]) -> u64 {
    let mut f = Fingerprint::new();
    f.update(file);
    f.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_check_value() {
        assert_eq!(Crc32::of(b"123456789"), 0xCBF4_3926);
        assert_eq!(Crc32::of(b""), 0);
    }

    #[test]
    fn fnv1a_64_reference_values() {
        assert_eq!(model_fingerprint(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(model_fingerprint(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(model_fingerprint(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
