//! Fuzzes the snapshot decoder: any input must restore or give a typed error, never a panic,
//! an out-of-bounds access or a hang, and a failed restore must leave the session unchanged.
//! See `loglinear_tests::snapshot_fixture::exercise_snapshot`, which the corpus replay test
//! (`tests/tests/snapshot.rs`, `committed_corpus_replays`) runs on stable in every test run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| loglinear_tests::snapshot_fixture::exercise_snapshot(data));
