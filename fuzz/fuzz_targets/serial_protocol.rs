//! Fuzzes the firmware's serial protocol: line framing (`LineReader`), command and parameter
//! parsing (`parse_command`, `parse_gen`, `parse_reset`) and the replies, on arbitrary bytes
//! read in arbitrary chunks. The firmware crate only builds for bare-metal targets, so its
//! protocol modules are included here by path (they are `no_std`, heap-free and only need
//! `embedded-io`). The code run is in `fuzz/exercise/serial_protocol.rs`, which the replay
//! test (`tests/tests/fuzz_replay_checkpoint_serial.rs`) runs on stable in every test run.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../exercise/serial_protocol.rs"]
mod exercise;
#[allow(dead_code)]
#[path = "../../firmware/src/protocol.rs"]
mod protocol;
#[allow(dead_code)]
#[path = "../../firmware/src/request.rs"]
mod request;

fuzz_target!(|data: &[u8]| exercise::exercise_serial_protocol(data));
