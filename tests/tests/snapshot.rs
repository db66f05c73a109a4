//! Session snapshots (runtime `snapshot`, `slot_store`): bit-identical continuation after a
//! restore, refusal of another model's snapshot, power cuts and corruption at every byte, and
//! the A/B flash slots under a power cut at every byte of a save.
//!
//! `cargo test --release -p loglinear-tests --test snapshot`

use half::f16;
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::sampler::Sampler;
use loglinear_runtime::slot_store::{MemFlash, MemFlashError, NorFlash, SlotStore, StoreError};
use loglinear_runtime::snapshot::{self, model_fingerprint, Crc32, SnapshotError, HEADER_LEN};
use loglinear_runtime::{Arch, Model, Session, SessionConfig, StateElem};
use loglinear_tests::snapshot_fixture::{
    aligned, exercise_snapshot, sampler_config, snapshot_bytes, tiny_model, with_fuzz_session,
};
use loglinear_tests::{models_dir, repo_root};

/// What a run records after the snapshot point: the sampled tokens and the bits of every
/// logit the sampler saw.
#[derive(Debug, PartialEq, Eq)]
struct Continuation {
    tokens: Vec<u32>,
    logit_bits: Vec<u32>,
}

/// Tokens 0..t: three prompt bytes, then sampled ones (so the PRNG has moved).
fn advance<E: StateElem>(s: &mut Session<'_, E>, sampler: &mut Sampler, t: u64) {
    let mut scratch = vec![0u32; s.logits().len()];
    while s.t() < t {
        let tok = if s.t() < 3 {
            u32::from(b"To "[s.t() as usize])
        } else {
            sampler.sample(s.logits(), &mut scratch).unwrap()
        };
        s.step(tok).unwrap();
    }
}

fn continue_for<E: StateElem>(
    s: &mut Session<'_, E>,
    sampler: &mut Sampler,
    k: usize,
) -> Continuation {
    let mut scratch = vec![0u32; s.logits().len()];
    let mut c = Continuation {
        tokens: vec![],
        logit_bits: vec![],
    };
    for _ in 0..k {
        c.logit_bits.extend(s.logits().iter().map(|x| x.to_bits()));
        let tok = sampler.sample(s.logits(), &mut scratch).unwrap();
        c.tokens.push(tok);
        s.step(tok).unwrap();
    }
    c.logit_bits.extend(s.logits().iter().map(|x| x.to_bits()));
    c
}

fn new_session<'m, E: StateElem>(
    model: &Model<'m>,
    arena: &'m mut Vec<u8>,
    levels: Option<usize>,
) -> Session<'m, E> {
    let cfg = SessionConfig {
        levels,
        ..Default::default()
    };
    *arena = vec![0u8; Session::<E>::arena_bytes(model, &cfg).unwrap()];
    Session::<E>::new(model, arena, cfg).unwrap()
}

fn bytes_of<E: StateElem>(xs: &[E]) -> Vec<u8> {
    bytemuck::cast_slice::<E, u8>(xs).to_vec()
}

/// Runs to `t`, snapshots, continues `k` tokens; restores the snapshot into a fresh session
/// and continues `k` tokens there: both must agree bit for bit, and the restored state must
/// equal the saved one byte for byte (dead levels included: they are zero in both).
fn round_trip<E: StateElem>(model_bytes: &[u8], levels: Option<usize>, t: u64, k: usize) {
    let words = aligned(model_bytes);
    let bytes = &bytemuck::cast_slice::<u64, u8>(&words)[..model_bytes.len()];
    let fp = model_fingerprint(model_bytes);
    let gguf = GgufModel::parse(bytes).unwrap();
    let model = gguf.model().unwrap();
    let what = format!(
        "{} {} levels {levels:?} t {t}",
        model.config().arch.name(),
        E::NAME
    );

    let mut arena_a = vec![];
    let mut a = new_session::<E>(&model, &mut arena_a, levels);
    let mut sa = Sampler::new(sampler_config(t ^ 0x5eed));
    advance(&mut a, &mut sa, t);
    let mut snap = vec![];
    let n = snapshot::write(&a, &sa, fp, &mut |b: &[u8]| {
        snap.extend_from_slice(b);
        Ok(())
    })
    .unwrap();
    assert_eq!(n, snap.len(), "{what}");
    assert_eq!(snapshot::encoded_len(&a).unwrap(), snap.len(), "{what}");
    let saved = (
        bytes_of(a.states()),
        a.conv_states().to_vec(),
        a.logits().to_vec(),
    );
    let want = continue_for(&mut a, &mut sa, k);

    let mut arena_b = vec![];
    let mut b = new_session::<E>(&model, &mut arena_b, levels);
    // A session that already ran elsewhere: the restore must overwrite everything.
    let mut sb = Sampler::new(sampler_config(99));
    advance(&mut b, &mut sb, 11);
    let h = snapshot::restore(&snap, &mut b, &mut sb, fp).unwrap();
    assert_eq!(h.t, t, "{what}");
    assert_eq!(b.t(), t, "{what}");
    assert_eq!(h.stored_levels(), b.live_levels(), "{what}");
    assert_eq!(bytes_of(b.states()), saved.0, "{what}: state");
    assert_eq!(
        bytes_of(b.conv_states()),
        bytes_of(&saved.1),
        "{what}: conv"
    );
    assert_eq!(bytes_of(b.logits()), bytes_of(&saved.2), "{what}: logits");
    let got = continue_for(&mut b, &mut sb, k);
    assert_eq!(got, want, "{what}: continuation");
    // Live levels only: the snapshot is no larger than the live state plus logits and header.
    assert_eq!(
        snap.len(),
        HEADER_LEN + 4 + b.model().config().vocab_size * 4 + live_bytes(&a, t),
        "{what}: size"
    );
}

/// Live state bytes after `t` tokens (what the snapshot stores), from the policy.
fn live_bytes<E: StateElem>(s: &Session<'_, E>, t: u64) -> usize {
    let c = s.model().config();
    let live = snapshot::live_mask(s.policy(), t).count_ones() as usize;
    c.num_layers
        * (live * c.num_heads * c.head_k_dim * c.head_v_dim * std::mem::size_of::<E>()
            + c.conv_channels() * c.conv_kernel * 4)
}

#[test]
fn round_trip_continues_bit_identically() {
    // 3 levels saturate after 4 tokens; the default 15 (log-linear) or 1 (plain) do not.
    let ts = [0u64, 1, 2, 7, 64, 300];
    for arch in [
        Arch::LogLinearGatedDeltaNet,
        Arch::LogLinearMamba2,
        Arch::GatedDeltaNet,
        Arch::Mamba2,
    ] {
        let m = tiny_model(arch, 11);
        let level_choices: &[Option<usize>] = if arch.is_log_linear() {
            &[None, Some(3)]
        } else {
            &[None]
        };
        for &levels in level_choices {
            for &t in &ts {
                round_trip::<f32>(&m, levels, t, 40);
                round_trip::<f16>(&m, levels, t, 40);
            }
        }
    }
}

#[test]
fn round_trip_on_the_shipped_model() {
    let path = models_dir().join("ll-gdn-mcu-q8_0.gguf");
    let m = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    round_trip::<f32>(&m, None, 150, 30);
    round_trip::<f16>(&m, Some(4), 150, 30);
}

#[test]
fn another_model_file_is_refused_and_nothing_changes() {
    let m1 = tiny_model(Arch::LogLinearGatedDeltaNet, 1);
    let m2 = tiny_model(Arch::LogLinearGatedDeltaNet, 2);
    assert_eq!(m1.len(), m2.len(), "same shapes, other weights");
    let (w1, w2) = (aligned(&m1), aligned(&m2));
    let g1 = GgufModel::parse(&bytemuck::cast_slice::<u64, u8>(&w1)[..m1.len()]).unwrap();
    let g2 = GgufModel::parse(&bytemuck::cast_slice::<u64, u8>(&w2)[..m2.len()]).unwrap();
    let (model1, model2) = (g1.model().unwrap(), g2.model().unwrap());
    let (fp1, fp2) = (model_fingerprint(&m1), model_fingerprint(&m2));
    assert_ne!(fp1, fp2);

    let mut arena = vec![];
    let mut a = new_session::<f32>(&model1, &mut arena, None);
    let mut sa = Sampler::new(sampler_config(1));
    advance(&mut a, &mut sa, 20);
    let snap = snapshot_bytes(&a, &sa, fp1);

    let mut arena = vec![];
    let mut b = new_session::<f32>(&model2, &mut arena, None);
    let mut sb = Sampler::new(sampler_config(2));
    advance(&mut b, &mut sb, 5);
    let before = (
        b.t(),
        bytes_of(b.states()),
        bytes_of(b.logits()),
        sb.rng_state(),
    );
    let err = snapshot::restore(&snap, &mut b, &mut sb, fp2).unwrap_err();
    assert_eq!(
        err,
        SnapshotError::ModelMismatch {
            snapshot: fp1,
            session: fp2
        }
    );
    assert!(err.to_string().contains("another model file"), "{err}");
    let after = (
        b.t(),
        bytes_of(b.states()),
        bytes_of(b.logits()),
        sb.rng_state(),
    );
    assert_eq!(before, after);

    // Same model, other session settings: typed errors too.
    let mut arena = vec![];
    let mut c = new_session::<f16>(&model1, &mut arena, None);
    assert!(matches!(
        snapshot::restore(&snap, &mut c, &mut sb, fp1),
        Err(SnapshotError::DtypeMismatch { .. })
    ));
    let mut arena = vec![];
    let mut d = new_session::<f32>(&model1, &mut arena, Some(5));
    assert_eq!(
        snapshot::restore(&snap, &mut d, &mut sb, fp1),
        Err(SnapshotError::LevelsMismatch {
            snapshot: 15,
            session: 5
        })
    );
    // A plain model with the same fingerprint by mistake: shapes still refuse it.
    let m3 = tiny_model(Arch::GatedDeltaNet, 1);
    let w3 = aligned(&m3);
    let g3 = GgufModel::parse(&bytemuck::cast_slice::<u64, u8>(&w3)[..m3.len()]).unwrap();
    let model3 = g3.model().unwrap();
    let mut arena = vec![];
    let mut e = new_session::<f32>(&model3, &mut arena, None);
    assert!(matches!(
        snapshot::restore(&snap, &mut e, &mut sb, fp1),
        Err(SnapshotError::LevelsMismatch { .. })
    ));
}

/// A snapshot of the fuzz model's session after `t` tokens.
fn fuzz_snapshot<E: StateElem>(t: u64) -> Vec<u8> {
    with_fuzz_session::<E, _>(|s, sampler, fp| {
        advance(s, sampler, t);
        snapshot_bytes(s, sampler, fp)
    })
}

/// Restores input `i` of `n` into a session that has run 9 tokens and calls `check` with
/// the result; a failure must leave that session (t, state, conv, logits, PRNG) exactly as it
/// was, so one session serves every failing input.
fn restore_many<E: StateElem>(
    n: usize,
    input: impl Fn(usize) -> Vec<u8>,
    mut check: impl FnMut(usize, Result<u64, SnapshotError>),
) {
    with_fuzz_session::<E, _>(|s, sampler, fp| {
        let seed = sampler.clone();
        let prepare = |s: &mut Session<'_, E>, sampler: &mut Sampler| {
            s.reset();
            *sampler = seed.clone();
            advance(s, sampler, 9);
            (
                s.t(),
                bytes_of(s.states()),
                bytes_of(s.conv_states()),
                bytes_of(s.logits()),
                sampler.rng_state(),
            )
        };
        let mut before = prepare(s, sampler);
        for i in 0..n {
            let r = snapshot::restore(&input(i), s, sampler, fp);
            if r.is_err() {
                let after = (
                    s.t(),
                    bytes_of(s.states()),
                    bytes_of(s.conv_states()),
                    bytes_of(s.logits()),
                    sampler.rng_state(),
                );
                assert!(
                    before == after,
                    "input {i}: failed restore changed the session"
                );
            } else {
                before = prepare(s, sampler);
            }
            check(i, r.map(|h| h.t));
        }
    })
}

/// [`restore_many`] for one input.
fn restore_or_unchanged<E: StateElem>(bytes: &[u8]) -> Result<u64, SnapshotError> {
    let mut out = Err(SnapshotError::Source);
    restore_many::<E>(1, |_| bytes.to_vec(), |_, r| out = r);
    out
}

#[test]
fn truncation_at_every_byte_is_a_typed_error() {
    for t in [0u64, 13] {
        let snap = fuzz_snapshot::<f32>(t);
        assert_eq!(restore_or_unchanged::<f32>(&snap), Ok(t));
        restore_many::<f32>(
            snap.len(),
            |len| snap[..len].to_vec(),
            |len, r| {
                let e = r.unwrap_err();
                assert!(
                    matches!(e, SnapshotError::Truncated { got, .. } if got == len),
                    "len {len}: {e:?}"
                );
            },
        );
        // A longer write (a stale tail) is refused too.
        let mut long = snap.clone();
        long.push(0);
        assert!(matches!(
            restore_or_unchanged::<f32>(&long),
            Err(SnapshotError::TrailingBytes { .. })
        ));
    }
}

#[test]
fn every_bit_flip_and_byte_corruption_is_a_typed_error() {
    for t in [1u64, 13] {
        let snap = fuzz_snapshot::<f16>(t);
        assert_eq!(restore_or_unchanged::<f16>(&snap), Ok(t));
        let flip = |k: usize| {
            let mut bad = snap.clone();
            bad[k / 8] ^= 1 << (k % 8);
            bad
        };
        restore_many::<f16>(snap.len() * 8, flip, |k, r| {
            let (i, bit) = (k / 8, k % 8);
            let e = r.unwrap_err();
            let ok = match i {
                0..8 => e == SnapshotError::BadMagic,
                8..10 => matches!(e, SnapshotError::UnsupportedVersion(_)),
                60..64 => matches!(
                    e,
                    SnapshotError::Truncated { .. } | SnapshotError::TrailingBytes { .. }
                ),
                _ => matches!(e, SnapshotError::CrcMismatch { .. }),
            };
            assert!(ok, "byte {i} bit {bit}: {e:?}");
        });
        // Whole bytes set to the erased and the zero value.
        let set = |k: usize| {
            let mut bad = snap.clone();
            bad[k / 2] = if k & 1 == 0 { 0x00 } else { 0xFF };
            bad
        };
        restore_many::<f16>(snap.len() * 2, set, |k, r| {
            let unchanged = snap[k / 2] == if k & 1 == 0 { 0x00 } else { 0xFF };
            assert_eq!(r.is_ok(), unchanged, "byte {} set: {r:?}", k / 2);
        });
    }
}

/// Rewrites the CRC after editing: a snapshot from a broken writer, which only the header
/// checks can refuse.
fn with_fixed_crc(mut b: Vec<u8>) -> Vec<u8> {
    let n = b.len() - 4;
    let crc = Crc32::of(&b[..n]);
    b[n..].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn header_fields_are_checked_behind_a_valid_crc() {
    let snap = fuzz_snapshot::<f32>(13);
    let edit = |off: usize, val: &[u8]| {
        let mut b = snap.clone();
        b[off..off + val.len()].copy_from_slice(val);
        restore_or_unchanged::<f32>(&with_fixed_crc(b))
    };
    // t = 12 has another live-level mask than t = 13.
    assert!(matches!(
        edit(16, &12u64.to_le_bytes()),
        Err(SnapshotError::InvalidHeader(_))
    ));
    // t = 14 has the same mask size? (13-1 = 0b1100, 14-1 = 0b1101: one more level) → length.
    assert!(matches!(
        edit(16, &14u64.to_le_bytes()),
        Err(SnapshotError::InvalidHeader(_))
    ));
    assert!(matches!(
        edit(10, &[7]),
        Err(SnapshotError::InvalidHeader(_))
    ));
    assert!(matches!(
        edit(11, &[0]),
        Err(SnapshotError::InvalidHeader(_))
    ));
    assert!(matches!(
        edit(40, &0u64.to_le_bytes()),
        Err(SnapshotError::InvalidHeader(_))
    ));
    assert!(matches!(
        edit(12, &3u32.to_le_bytes()),
        Err(SnapshotError::InvalidHeader(_))
    ));
    assert!(matches!(
        edit(24, &1u64.to_le_bytes()),
        Err(SnapshotError::ModelMismatch { .. })
    ));
    // Huge sizes must not overflow anything.
    assert!(matches!(
        edit(48, &u32::MAX.to_le_bytes()),
        Err(SnapshotError::InvalidHeader(_))
    ));
    assert!(matches!(
        edit(56, &u32::MAX.to_le_bytes()),
        Err(SnapshotError::InvalidHeader(_))
    ));
    // The PRNG state is free data: a changed one restores, with that state.
    assert_eq!(edit(32, &5u64.to_le_bytes()), Ok(13));
}

#[test]
fn committed_corpus_replays() {
    let mut n = 0;
    for dir in [
        "fuzz/corpus/snapshot_restore",
        "fuzz/regressions/snapshot_restore",
    ] {
        let Ok(entries) = std::fs::read_dir(repo_root().join(dir)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            exercise_snapshot(&bytes);
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with("seed-") {
                let h = snapshot::peek(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(
                    restore_or_unchanged::<f32>(&bytes) == Ok(h.t)
                        || restore_or_unchanged::<f16>(&bytes) == Ok(h.t),
                    "{name} does not restore"
                );
            }
            n += 1;
        }
    }
    assert!(n > 0, "no snapshot corpus found");
}

// ---------------------------------------------------------------- A/B slots

/// Saves `snaps` in order into a fresh region of `slot` bytes per slot.
fn region_with<const W: usize, const E: usize>(slot: u32, snaps: &[&[u8]]) -> Vec<u8> {
    let mut mem = vec![0u8; 2 * slot as usize]; // not erased: the store must not care
    let mut store = SlotStore::new(MemFlash::<W, E>::new(&mut mem), 0, slot).unwrap();
    for s in snaps {
        store.save_bytes(s).unwrap();
    }
    mem
}

/// What `load` finds in `mem`: the newest valid body.
fn load<const W: usize, const E: usize>(mem: &mut [u8], slot: u32) -> Option<Vec<u8>> {
    let mut store = SlotStore::new(MemFlash::<W, E>::new(mem), 0, slot).unwrap();
    let mut buf = vec![0u8; slot as usize];
    match store.read_latest(&mut buf) {
        Ok((_, b)) => Some(b.to_vec()),
        Err(StoreError::NoSnapshot) => None,
        Err(e) => panic!("load: {e:?}"),
    }
}

/// A power cut after every byte count of a save of `new` on top of `committed`: the region
/// must then load the last committed snapshot, or `new` once its commit completed; never a
/// mix, never nothing when something was committed. The restored session must have the
/// snapshot's t.
fn power_cut_everywhere<const W: usize, const E: usize>(
    slot: u32,
    committed: &[&[u8]],
    new_t: u64,
) {
    let base = region_with::<W, E>(slot, committed);
    let previous = committed.last().map(|s| s.to_vec());
    let new = fuzz_snapshot::<f32>(new_t);
    let mut completed_at = None;
    let mut saw_previous = 0;
    with_fuzz_session::<f32, _>(|s, sampler, fp| {
        advance(s, sampler, new_t);
        for budget in 0.. {
            let mut mem = base.clone();
            let mut store = SlotStore::new(MemFlash::<W, E>::new(&mut mem), 0, slot).unwrap();
            store.flash_mut().cut_power_after(Some(budget));
            let r = store.save_snapshot(s, sampler, fp);
            let found = load::<W, E>(&mut mem, slot);
            match &r {
                Ok(_) => assert_eq!(found.as_deref(), Some(&new[..]), "budget {budget}"),
                Err(StoreError::Flash(MemFlashError::PowerCut)) => {
                    assert!(
                        found == previous || found.as_deref() == Some(&new[..]),
                        "budget {budget}: loaded {:?} bytes, neither old nor new",
                        found.map(|f| f.len())
                    );
                    if found == previous {
                        saw_previous += 1;
                    }
                }
                Err(e) => panic!("budget {budget}: {e:?}"),
            }
            // Whatever was found restores into a session (checked on a sample of the cuts:
            // the bytes are one of two known snapshots, so this is about the restore path).
            if let Some(f) = found.as_ref().filter(|_| budget % 97 == 0 || r.is_ok()) {
                let h = snapshot::peek(f).unwrap();
                assert_eq!(restore_or_unchanged::<f32>(f), Ok(h.t));
            }
            if r.is_ok() {
                completed_at = Some(budget);
                break;
            }
        }
    });
    let done = completed_at.unwrap();
    // The cut hit every byte of the erase and every byte written.
    assert!(done >= slot as usize, "budget {done}");
    assert!(saw_previous > 0);
}

#[test]
fn ab_slots_survive_a_power_cut_at_every_byte() {
    let s1 = fuzz_snapshot::<f32>(5);
    let s2 = fuzz_snapshot::<f32>(9);
    // First save ever (nothing to fall back to), second (slot B), third (overwrites A).
    power_cut_everywhere::<4, 256>(4096, &[], 13);
    power_cut_everywhere::<4, 256>(4096, &[&s1], 13);
    power_cut_everywhere::<4, 256>(4096, &[&s1, &s2], 13);
    // Other geometries: byte writes, 8-byte writes in 1 KiB erase blocks.
    power_cut_everywhere::<1, 512>(4096, &[&s1, &s2], 13);
    power_cut_everywhere::<8, 1024>(4096, &[&s1], 13);
}

#[test]
fn ab_slots_alternate_and_restore_without_a_ram_copy() {
    let mut mem = vec![0xFFu8; 2 * 4096];
    let mut store = SlotStore::new(MemFlash::<4, 256>::new(&mut mem), 0, 4096).unwrap();
    assert_eq!(store.latest().unwrap(), None);
    let mut slots = vec![];
    for t in [3u64, 8, 21, 40] {
        with_fuzz_session::<f16, _>(|s, sampler, fp| {
            advance(s, sampler, t);
            let info = store.save_snapshot(s, sampler, fp).unwrap();
            slots.push((info.slot, info.seq));
            let want = continue_for(s, &mut sampler.clone(), 20);
            // Restore into another session straight from flash.
            with_fuzz_session::<f16, _>(|s2, sampler2, fp2| {
                advance(s2, sampler2, 2);
                let got = store.restore_latest(s2, sampler2, fp2).unwrap();
                assert_eq!(got, info);
                assert_eq!(continue_for(s2, sampler2, 20), want, "t {t}");
            });
        });
    }
    use loglinear_runtime::slot_store::Slot::{A, B};
    assert_eq!(slots, vec![(A, 1), (B, 2), (A, 3), (B, 4)]);
    // Too large for a slot: refused before anything is erased.
    let mut small = vec![0xFFu8; 2 * 256];
    let mut store = SlotStore::new(MemFlash::<4, 256>::new(&mut small), 0, 256).unwrap();
    let r = with_fuzz_session::<f32, _>(|s, sampler, fp| {
        advance(s, sampler, 3);
        store.save_snapshot(s, sampler, fp)
    });
    assert!(matches!(r, Err(StoreError::TooLarge { .. })), "{r:?}");
    // Bad geometry is a typed error.
    let mut m = vec![0u8; 1000];
    assert!(matches!(
        SlotStore::new(MemFlash::<4, 256>::new(&mut m), 0, 512),
        Err(StoreError::Geometry(_))
    ));
    assert!(matches!(
        SlotStore::new(MemFlash::<4, 256>::new(&mut m), 100, 256),
        Err(StoreError::Geometry(_))
    ));
    let _ = <MemFlash<4, 256> as NorFlash>::WRITE_SIZE;
}

/// A save streamed in pieces (the firmware's `RESTORE` upload) whose producer gives up midway
/// (upload cut short, bad CRC found at the end) commits nothing: the previous snapshot stays
/// the newest, and the next save goes into the same slot.
#[test]
fn ab_slots_streamed_save_that_fails_commits_nothing() {
    let (old, new) = (vec![0x11u8; 700], vec![0x22u8; 900]);
    let mut mem = region_with::<4, 256>(1024, &[&old]);
    {
        let mut store = SlotStore::new(MemFlash::<4, 256>::new(&mut mem), 0, 1024).unwrap();
        for give_up_after in [0usize, 1, 300, 899, 900] {
            let r = store.save_with(|sink| {
                for piece in new.chunks(100).take(give_up_after.div_ceil(100)) {
                    sink(piece)?;
                }
                Err(SnapshotError::Source)
            });
            assert_eq!(r, Err(StoreError::Snapshot(SnapshotError::Source)));
            let latest = store.latest().unwrap().unwrap();
            assert_eq!((latest.seq, latest.len), (1, old.len()));
        }
        // Pieces beyond the slot are refused by the sink, also without a commit.
        let r = store.save_with(|sink| {
            for _ in 0..20 {
                sink(&[0x33; 100])?;
            }
            Ok(())
        });
        assert!(matches!(r, Err(StoreError::TooLarge { .. })), "{r:?}");
        let info = store
            .save_with(|sink| new.chunks(64).try_for_each(sink))
            .unwrap();
        assert_eq!((info.seq, info.len), (2, new.len()));
    }
    assert_eq!(load::<4, 256>(&mut mem, 1024), Some(new));
}

#[test]
fn ab_slots_in_a_file_survive_reopening() {
    use loglinear_tests::snapshot_fixture::FileFlash;
    let path = std::env::temp_dir().join(format!("loglinear-slots-{}.bin", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let want = with_fuzz_session::<f32, _>(|s, sampler, fp| {
        let flash = FileFlash::open(&path, 4 * 4096).unwrap();
        let mut store = SlotStore::new(flash, 0, 2 * 4096).unwrap();
        advance(s, sampler, 6);
        store.save_snapshot(s, sampler, fp).unwrap();
        advance(s, sampler, 17);
        store.save_snapshot(s, sampler, fp).unwrap();
        continue_for(s, sampler, 25)
    });
    // "Power back on": a new process would open the same file.
    with_fuzz_session::<f32, _>(|s, sampler, fp| {
        let flash = FileFlash::open(&path, 4 * 4096).unwrap();
        let mut store = SlotStore::new(flash, 0, 2 * 4096).unwrap();
        let info = store.restore_latest(s, sampler, fp).unwrap();
        assert_eq!(info.seq, 2);
        assert_eq!(s.t(), 17);
        assert_eq!(continue_for(s, sampler, 25), want);
    });
    std::fs::remove_file(&path).unwrap();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any sequence of saves of random blobs, each cut by a power failure at a random byte or
    /// not: after each, the store loads the last committed blob, or the one being saved.
    #[test]
    fn ab_slots_random_saves_and_cuts(
        ops in proptest::collection::vec((1usize..3000, proptest::option::of(0usize..9000)), 1..12)
    ) {
        let mut mem = vec![0u8; 2 * 4096];
        let mut committed: Option<Vec<u8>> = None;
        for (k, (len, cut)) in ops.into_iter().enumerate() {
            let blob: Vec<u8> = (0..len).map(|i| (i * 31 + k * 7) as u8).collect();
            let r = {
                let mut store = SlotStore::new(MemFlash::<4, 256>::new(&mut mem), 0, 4096).unwrap();
                store.flash_mut().cut_power_after(cut);
                store.save_bytes(&blob)
            };
            let found = load::<4, 256>(&mut mem, 4096);
            if r.is_ok() {
                proptest::prop_assert_eq!(found.as_deref(), Some(&blob[..]));
            } else {
                proptest::prop_assert!(found == committed || found.as_deref() == Some(&blob[..]));
            }
            committed = found;
        }
    }
}
