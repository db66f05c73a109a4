//! Fuzzes the model-file reader: any input must give a model or a typed error, never a panic,
//! an out-of-bounds read or a hang. See `loglinear_tests::exercise_model_file`, which the
//! corpus replay test (`tests/tests/fuzz_replay.rs`) runs on stable in every test run.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| loglinear_tests::exercise_model_file(data));
