//! Writes the snapshot fuzz seeds: valid snapshots of the fuzz model's sessions
//! (`loglinear_tests::snapshot_fixture`), f32 and f16 state, at t = 0, 1, 13 and 40 (saturated:
//! the sessions have 4 levels), into `fuzz/corpus/snapshot_restore/seed-*`.
//!
//! `cargo run -p loglinear-tests --example make_snapshot_seeds`

use loglinear_runtime::StateElem;
use loglinear_tests::repo_root;
use loglinear_tests::snapshot_fixture::{snapshot_bytes, with_fuzz_session};

fn seed<E: StateElem>(t: u64) -> Vec<u8> {
    with_fuzz_session::<E, _>(|s, sampler, fp| {
        let mut scratch = vec![0u32; s.logits().len()];
        while s.t() < t {
            let tok = sampler.sample(s.logits(), &mut scratch).unwrap();
            s.step(tok).unwrap();
        }
        snapshot_bytes(s, sampler, fp)
    })
}

fn main() {
    let dir = repo_root().join("fuzz/corpus/snapshot_restore");
    std::fs::create_dir_all(&dir).unwrap();
    for t in [0u64, 1, 13, 40] {
        for (name, bytes) in [("f32", seed::<f32>(t)), ("f16", seed::<half::f16>(t))] {
            let path = dir.join(format!("seed-{name}-t{t}"));
            println!("{} ({} bytes)", path.display(), bytes.len());
            std::fs::write(path, bytes).unwrap();
        }
    }
}
