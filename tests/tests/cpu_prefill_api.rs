//! The public API's contract: bad input gives typed errors (never a panic), and the result
//! does not depend on the number of threads (bit for bit).

mod cpu_prefill_common;

use cpu_prefill_common::*;
use loglinear_converter::Checkpoint;
use loglinear_cpu_prefill::{prefill, prefill_into, PrefillError, PrefillOptions, PHASES};
use loglinear_runtime::Model;
use loglinear_tests::*;

fn golden_checkpoint(kind: &str) -> Checkpoint {
    let m = manifest();
    let (_, entry) = cases(&m, "model")
        .into_iter()
        .find(|(_, e)| e["kind"] == kind && e["style"] == "stress")
        .unwrap();
    Checkpoint::load(golden_dir().join(entry["dir"].as_str().unwrap())).unwrap()
}

fn opts(levels: Option<usize>, threads: usize) -> PrefillOptions {
    PrefillOptions {
        levels,
        threads: Some(threads),
        all_logits: false,
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let ckpt = golden_checkpoint("ll_gdn");
    let model = ckpt.model().unwrap();
    let o = PrefillOptions::default();
    assert_eq!(
        prefill(&model, &[], &o).unwrap_err(),
        PrefillError::EmptyPrompt
    );
    let vocab = model.config().vocab_size;
    assert_eq!(
        prefill(&model, &[1, 2, vocab as u32, 3], &o).unwrap_err(),
        PrefillError::TokenOutOfRange {
            index: 2,
            token: vocab as u32,
            vocab_size: vocab
        }
    );
    for bad in [0, 1, 16, 100] {
        assert_eq!(
            prefill(&model, &[1, 2], &opts(Some(bad), 1)).unwrap_err(),
            PrefillError::InvalidLevels(bad)
        );
    }
    // A plain model takes exactly one level.
    let plain = golden_checkpoint("gdn");
    let plain = plain.model().unwrap();
    assert_eq!(
        prefill(&plain, &[1], &opts(Some(2), 1)).unwrap_err(),
        PrefillError::InvalidLevels(2)
    );

    // A session of another model, and a prefill of another level count, are refused.
    let mut a = arena(&plain, 1);
    let mut s = session(&plain, &mut a, 1);
    assert_eq!(
        prefill_into(&model, &[1, 2], &mut s, &o).unwrap_err(),
        PrefillError::ModelMismatch
    );
    let p = prefill(&model, &[1, 2, 3], &opts(Some(5), 1)).unwrap();
    let mut a = arena(&model, 15);
    let mut s = session(&model, &mut a, 15);
    assert_eq!(
        p.load_into(&mut s).unwrap_err(),
        PrefillError::LevelsMismatch {
            prefill: 5,
            session: 15
        }
    );
    assert_eq!(s.t(), 0, "a refused hand-off leaves the session alone");
    // Errors print.
    assert!(PrefillError::EmptyPrompt.to_string().contains("token"));
}

/// Runs one prefill per thread count and requires bit-identical outputs.
fn same_for_every_thread_count(what: &str, model: &Model<'_>, ids: &[u32], levels: usize) {
    let all = |threads| {
        prefill(
            model,
            ids,
            &PrefillOptions {
                levels: Some(levels),
                threads: Some(threads),
                all_logits: true,
            },
        )
        .unwrap()
    };
    let one = all(1);
    assert_eq!(one.timing.threads, 1);
    assert_eq!(one.timing.phases.len(), PHASES.len());
    for threads in [2, 3, 8] {
        let p = all(threads);
        assert_eq!(p.timing.threads, threads);
        let same = |a: &[f32], b: &[f32]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        };
        assert!(
            same(&p.states, &one.states),
            "{what}: states differ with {threads} threads"
        );
        assert!(
            same(&p.conv, &one.conv),
            "{what}: conv differs with {threads} threads"
        );
        assert!(
            same(&p.last_logits, &one.last_logits),
            "{what}: logits differ with {threads} threads"
        );
        assert!(
            same(
                p.all_logits.as_deref().unwrap(),
                one.all_logits.as_deref().unwrap()
            ),
            "{what}: all-position logits differ with {threads} threads"
        );
    }
}

#[test]
fn thread_count_does_not_change_results() {
    for kind in ["ll_gdn", "ll_mamba2"] {
        let ckpt = golden_checkpoint(kind);
        let model = ckpt.model().unwrap();
        let ids = lcg_ids(777, model.config().vocab_size, 99);
        same_for_every_thread_count(kind, &model, &ids, 15);
        same_for_every_thread_count(kind, &model, &ids[..300], 4);
    }
}

/// All-position logits: every row matches the stepped logits of its position, and the last
/// row is the last logits.
#[test]
fn all_logits_match_stepping() {
    let ckpt = golden_checkpoint("ll_mamba2");
    let model = ckpt.model().unwrap();
    let ids = lcg_ids(200, model.config().vocab_size, 5);
    let p = prefill(
        &model,
        &ids,
        &PrefillOptions {
            all_logits: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut a = arena(&model, 15);
    let mut s = session(&model, &mut a, 15);
    let mut stepped = Vec::new();
    for &id in &ids {
        stepped.extend_from_slice(s.step(id).unwrap());
    }
    let all = p.all_logits.unwrap();
    check_rel_max("all-position logits", &all, &wide(&stepped), TOL);
    let v = model.config().vocab_size;
    check_rel_max(
        "last row vs last logits",
        &all[(ids.len() - 1) * v..],
        &wide(&p.last_logits),
        TOL,
    );
}

/// An f16 session takes the state narrowed once, and a session that already decoded is reset
/// by the hand-off.
#[test]
fn f16_sessions_and_reused_sessions() {
    let ckpt = golden_checkpoint("ll_gdn");
    let model = ckpt.model().unwrap();
    let ids = lcg_ids(150, model.config().vocab_size, 7);
    let cfg = loglinear_runtime::SessionConfig::default();
    let mut a16 =
        vec![0u8; loglinear_runtime::Session::<half::f16>::arena_bytes(&model, &cfg).unwrap()];
    let mut s16 = loglinear_runtime::Session::<half::f16>::new(&model, &mut a16, cfg).unwrap();
    let p = prefill_into(&model, &ids, &mut s16, &PrefillOptions::default()).unwrap();
    assert!(s16
        .states()
        .iter()
        .zip(&p.states)
        .all(|(h, &f)| *h == half::f16::from_f32(f)));

    let mut a = arena(&model, 15);
    let mut s = session(&model, &mut a, 15);
    for &id in &ids[..10] {
        s.step(id).unwrap();
    }
    prefill_into(&model, &ids, &mut s, &PrefillOptions::default()).unwrap();
    assert_eq!(s.t(), ids.len() as u64);
    assert_eq!(s.states(), &p.states[..]);
}
