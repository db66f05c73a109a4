//! Fuzzes the converter's checkpoint importer (`Checkpoint::from_bytes`) on arbitrary
//! `config.json` and safetensors header bytes: any input must give a checkpoint or a typed
//! error, never a panic, an out-of-bounds read or a hang. The input format and the code run
//! are in `fuzz/exercise/checkpoint_import.rs`, which the replay test
//! (`tests/tests/fuzz_replay_checkpoint_serial.rs`) runs on stable in every test run.
#![no_main]

use libfuzzer_sys::fuzz_target;

// `join_input` is for the replay test and seed making only.
#[allow(dead_code)]
#[path = "../exercise/checkpoint_import.rs"]
mod exercise;

fuzz_target!(|data: &[u8]| exercise::exercise_checkpoint_import(data));
