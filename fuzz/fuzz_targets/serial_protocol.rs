//! Fuzzes the firmware's serial protocol: line framing (`LineReader`), command and parameter
//! parsing (`parse_command`, `parse_gen`, `parse_reset`) and the replies, on arbitrary bytes
//! read in arbitrary chunks: the `loglinear-protocol` crate, which the firmware runs. The code
//! run is in `fuzz/exercise/serial_protocol.rs`, which the replay
//! test (`tests/tests/fuzz_replay_checkpoint_serial.rs`) runs on stable in every test run.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../exercise/serial_protocol.rs"]
mod exercise;

fuzz_target!(|data: &[u8]| exercise::exercise_serial_protocol(data));
