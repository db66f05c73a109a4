//! Small models and helpers for the snapshot tests (`tests/tests/snapshot.rs`), the snapshot
//! fuzz target (`fuzz/fuzz_targets/snapshot_restore.rs`) and its seed generator
//! (`examples/make_snapshot_seeds.rs`).

use loglinear_converter::export::{ExportOptions, ExportedModel};
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::sampler::{Sampler, SamplerConfig};
use loglinear_runtime::snapshot::{self, model_fingerprint};
use loglinear_runtime::{Arch, DType, Session, SessionConfig, StateElem, LAMBDA_LEVELS};
use std::sync::OnceLock;

/// A tiny byte-level model of `arch` (hidden 16, 2 layers, 2 heads of 4 × 4, vocabulary 256),
/// weights uniform in [-0.5, 0.5) from a fixed sequence started at `seed`, f32 matrices: a
/// different `seed` gives a model of the same shapes but another file.
pub fn tiny_model(arch: Arch, mut seed: u32) -> Vec<u8> {
    let mamba = arch.is_mamba2();
    let config = loglinear_runtime::ModelConfig {
        arch,
        vocab_size: 256,
        hidden_size: 16,
        num_layers: 2,
        intermediate_size: 32,
        norm_eps: 1e-5,
        num_heads: if mamba { 4 } else { 2 },
        head_k_dim: 4,
        head_v_dim: 4,
        num_groups: 1,
        conv_kernel: 4,
        conv_bias: mamba,
        norm_group_size: if mamba { 16 } else { 4 },
        lambda_levels: if arch.is_log_linear() {
            LAMBDA_LEVELS
        } else {
            0
        },
    };
    let store = crate::uniform_store(&config, &mut seed, 1.0);
    let opts = ExportOptions {
        matrix_type: DType::F32,
        ..Default::default()
    };
    ExportedModel::from_source(config, &store, &opts, &mut |_| {})
        .expect("export of a tiny model")
        .to_gguf()
        .expect("GGUF of a tiny model")
}

/// `bytes` copied into 8-byte-aligned memory (the model reader needs aligned tensors).
pub fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()].copy_from_slice(bytes);
    words
}

/// The fuzz target's model: tiny Log-Linear Gated DeltaNet, seed 1, as (aligned words, file
/// length, fingerprint).
pub fn fuzz_model() -> &'static (Vec<u64>, usize, u64) {
    static MODEL: OnceLock<(Vec<u64>, usize, u64)> = OnceLock::new();
    MODEL.get_or_init(|| {
        let bytes = tiny_model(Arch::LogLinearGatedDeltaNet, 1);
        (aligned(&bytes), bytes.len(), model_fingerprint(&bytes))
    })
}

/// Levels of the fuzz target's sessions: few, so that saturated snapshots are short.
pub const FUZZ_LEVELS: usize = 4;

/// The sampler settings of the snapshot tests and seeds.
pub fn sampler_config(seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature: 0.9,
        top_k: 0,
        top_p: 0.95,
        seed,
    }
}

/// Runs `f` with a fresh session (and sampler) over the fuzz model, state stored as `E`.
pub fn with_fuzz_session<E: StateElem, R>(
    f: impl FnOnce(&mut Session<'_, E>, &mut Sampler, u64) -> R,
) -> R {
    let (words, len, fp) = fuzz_model();
    let bytes = &bytemuck::cast_slice::<u64, u8>(words)[..*len];
    let gguf = GgufModel::parse(bytes).expect("fuzz model parses");
    let model = gguf.model().expect("fuzz model is valid");
    let cfg = SessionConfig {
        levels: Some(FUZZ_LEVELS),
        ..Default::default()
    };
    let mut arena = vec![0u8; Session::<E>::arena_bytes(&model, &cfg).expect("levels")];
    let mut session = Session::<E>::new(&model, &mut arena, cfg).expect("arena");
    let mut sampler = Sampler::new(sampler_config(7));
    f(&mut session, &mut sampler, *fp)
}

/// The snapshot of `s` with `sampler`'s PRNG, for the model whose fingerprint is `fp`.
pub fn snapshot_bytes<E: StateElem>(s: &Session<'_, E>, sampler: &Sampler, fp: u64) -> Vec<u8> {
    let mut out = vec![];
    snapshot::write(s, sampler, fp, &mut |b: &[u8]| {
        out.extend_from_slice(b);
        Ok(())
    })
    .expect("a snapshot of a live session");
    out
}

/// Everything an untrusted snapshot goes through: peek, then restore into f32 and f16
/// sessions of the fuzz model; a restore that succeeds must give exactly the header's t and
/// then step. Shared by the fuzz target and the corpus replay test. Never panics on any input.
pub fn exercise_snapshot(data: &[u8]) {
    let _ = snapshot::peek(data);
    fn one<E: StateElem>(data: &[u8]) {
        with_fuzz_session::<E, _>(|session, sampler, fp| {
            session.step(3).expect("step");
            let before = (session.t(), session.states().to_vec());
            match snapshot::restore(data, session, sampler, fp) {
                Ok(h) => {
                    assert_eq!(session.t(), h.t);
                    session.step(1).expect("step after restore");
                }
                Err(_) => {
                    // A failed restore leaves the session as it was.
                    assert_eq!(session.t(), before.0);
                    assert!(
                        bytemuck::cast_slice::<E, u8>(session.states())
                            == bytemuck::cast_slice::<E, u8>(&before.1)
                    );
                }
            }
        })
    }
    one::<f32>(data);
    one::<half::f16>(data);
    // Again with the CRC made valid, so that mutations reach the header and size checks
    // behind it (a fuzzer cannot forge a CRC on its own).
    if data.len() >= snapshot::MIN_LEN {
        let mut fixed = data.to_vec();
        let n = fixed.len() - snapshot::CRC_LEN;
        let crc = snapshot::Crc32::of(&fixed[..n]);
        fixed[n..].copy_from_slice(&crc.to_le_bytes());
        one::<f32>(&fixed);
        one::<half::f16>(&fixed);
    }
}

/// NOR-flash semantics over a file, for hosts that want the A/B slots on disk: erase writes
/// 0xFF, a write needs erased bytes; 1-byte writes, 4 KiB erase blocks.
pub struct FileFlash {
    file: std::fs::File,
    capacity: usize,
}

/// A [`FileFlash`] error: what the flash traits call it, and the I/O error if any.
#[derive(Debug)]
pub struct FileFlashError {
    /// The kind.
    pub kind: loglinear_runtime::slot_store::NorFlashErrorKind,
    /// The I/O error behind an `Other`.
    pub io: Option<std::io::Error>,
}

impl loglinear_runtime::slot_store::NorFlashError for FileFlashError {
    fn kind(&self) -> loglinear_runtime::slot_store::NorFlashErrorKind {
        self.kind
    }
}

impl FileFlash {
    /// Opens (or creates, erased) a flash file of `capacity` bytes.
    pub fn open(path: &std::path::Path, capacity: usize) -> std::io::Result<Self> {
        let fresh = !path.exists();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if fresh {
            use std::io::Write;
            file.write_all(&vec![0xFF; capacity])?;
        }
        file.set_len(capacity as u64)?;
        Ok(Self { file, capacity })
    }

    fn check(&self, offset: u32, len: usize, align: usize) -> Result<(), FileFlashError> {
        use loglinear_runtime::slot_store::NorFlashErrorKind as K;
        let kind = if offset as usize + len > self.capacity {
            K::OutOfBounds
        } else if !(offset as usize).is_multiple_of(align) || !len.is_multiple_of(align) {
            K::NotAligned
        } else {
            return Ok(());
        };
        Err(FileFlashError { kind, io: None })
    }

    fn io(e: std::io::Error) -> FileFlashError {
        FileFlashError {
            kind: loglinear_runtime::slot_store::NorFlashErrorKind::Other,
            io: Some(e),
        }
    }

    fn read_exact_at(&mut self, offset: u32, buf: &mut [u8]) -> std::io::Result<()> {
        use std::io::{Read, Seek, SeekFrom};
        self.file.seek(SeekFrom::Start(u64::from(offset)))?;
        self.file.read_exact(buf)
    }

    fn write_all_at(&mut self, offset: u32, buf: &[u8]) -> std::io::Result<()> {
        use std::io::{Seek, SeekFrom, Write};
        self.file.seek(SeekFrom::Start(u64::from(offset)))?;
        self.file.write_all(buf)?;
        self.file.sync_data()
    }
}

impl loglinear_runtime::slot_store::ErrorType for FileFlash {
    type Error = FileFlashError;
}

impl loglinear_runtime::slot_store::ReadNorFlash for FileFlash {
    const READ_SIZE: usize = 1;

    fn read(&mut self, offset: u32, bytes: &mut [u8]) -> Result<(), FileFlashError> {
        self.check(offset, bytes.len(), 1)?;
        self.read_exact_at(offset, bytes).map_err(Self::io)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }
}

impl loglinear_runtime::slot_store::NorFlash for FileFlash {
    const WRITE_SIZE: usize = 1;
    const ERASE_SIZE: usize = 4096;

    fn erase(&mut self, from: u32, to: u32) -> Result<(), FileFlashError> {
        let len = (to as usize).saturating_sub(from as usize);
        self.check(from, len, Self::ERASE_SIZE)?;
        self.write_all_at(from, &vec![0xFF; len]).map_err(Self::io)
    }

    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), FileFlashError> {
        self.check(offset, bytes.len(), 1)?;
        let mut old = vec![0u8; bytes.len()];
        self.read_exact_at(offset, &mut old).map_err(Self::io)?;
        if old.iter().any(|&b| b != 0xFF) {
            return Err(FileFlashError {
                kind: loglinear_runtime::slot_store::NorFlashErrorKind::Other,
                io: None,
            });
        }
        self.write_all_at(offset, bytes).map_err(Self::io)
    }
}
