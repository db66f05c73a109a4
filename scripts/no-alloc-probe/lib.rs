//! No-alloc probe: a final artifact (staticlib) for a bare-metal target with no global
//! allocator. If `alloc` were anywhere in the crate graph of `loglinear-runtime` (the crate
//! itself or any dependency declaring `extern crate alloc`), rustc would stop with
//! "no global memory allocator found but one is required".
#![no_std]

// Named explicitly: with edition 2018+ an unreferenced `--extern` crate is not even loaded.
extern crate loglinear_runtime;

use loglinear_runtime::level::{level_of, LevelPolicy, LAMBDA_LEVELS};
use loglinear_runtime::sampler::argmax;

/// Fenwick level of key `s` for query `t`.
#[no_mangle]
pub extern "C" fn probe_level_of(t: u64, s: u64) -> u32 {
    level_of(t, s)
}

/// Live levels at token `t` with the default number of levels.
#[no_mangle]
pub extern "C" fn probe_live_count(t: u64) -> usize {
    match LevelPolicy::new(LAMBDA_LEVELS) {
        Some(p) => p.live_count(t),
        None => 0,
    }
}

/// Greedy pick over a fixed logit vector.
#[no_mangle]
pub extern "C" fn probe_argmax(a: f32, b: f32, c: f32) -> u32 {
    argmax(&[a, b, c])
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
