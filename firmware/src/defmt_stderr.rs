//! The defmt global logger of feature `defmt-semihosting`: each frame goes to semihosting
//! **stderr**. The defmt-semihosting crate writes to stdout, which a QEMU `-serial stdio` run
//! shares with the board's UART: its frames would land in the protocol's byte stream. Frames
//! are rzCOBS-encoded and 0-delimited (defmt's encoder), so a decoder (`cargo xtask qemu`'s)
//! finds them among QEMU's own messages on the same stream.

use core::cell::UnsafeCell;

use portable_atomic::{AtomicBool, Ordering};
use semihosting::io::{Stderr, Write as _};

#[defmt::global_logger]
struct Logger;

/// The encoder and the stream, used only between `acquire` and `release`, inside one critical
/// section.
struct Encoder {
    taken: AtomicBool,
    restore: UnsafeCell<critical_section::RestoreState>,
    encoder: UnsafeCell<defmt::Encoder>,
    stderr: UnsafeCell<Option<Stderr>>,
}

// SAFETY: every access to the cells happens inside the critical section that `acquire` enters
// and `release` leaves, so on these single-core targets only one context touches them at a
// time; `taken` refuses a nested `acquire`.
unsafe impl Sync for Encoder {}

static ENCODER: Encoder = Encoder {
    taken: AtomicBool::new(false),
    restore: UnsafeCell::new(critical_section::RestoreState::invalid()),
    encoder: UnsafeCell::new(defmt::Encoder::new()),
    stderr: UnsafeCell::new(None),
};

impl Encoder {
    /// Runs `f` with the encoder and a sink that writes to stderr (opened on first use; a
    /// failed open or write drops the bytes: a log must never stop the firmware).
    ///
    /// # Safety
    /// Only between `acquire` and `release`.
    unsafe fn with(&self, f: impl FnOnce(&mut defmt::Encoder, &mut dyn FnMut(&[u8]))) {
        // SAFETY: the caller holds the critical section (see `Sync` above).
        let (encoder, stderr) = unsafe { (&mut *self.encoder.get(), &mut *self.stderr.get()) };
        if stderr.is_none() {
            *stderr = semihosting::io::stderr().ok();
        }
        f(encoder, &mut |bytes| {
            if let Some(s) = stderr.as_mut() {
                let _ = s.write_all(bytes);
            }
        });
    }
}

// SAFETY: `acquire` enters a critical section and marks the encoder taken before any write;
// `write` and `release` run only after it (defmt's contract), and `release` leaves the section
// it entered.
unsafe impl defmt::Logger for Logger {
    fn acquire() {
        // SAFETY: paired with the `critical_section::release` in `release`.
        let restore = unsafe { critical_section::acquire() };
        if ENCODER.taken.swap(true, Ordering::Relaxed) {
            panic!("defmt logger taken reentrantly");
        }
        // SAFETY: inside the critical section just entered.
        unsafe {
            ENCODER.restore.get().write(restore);
            ENCODER.with(|e, sink| e.start_frame(sink));
        }
    }

    unsafe fn flush() {
        // Semihosting writes block until the host has the bytes: nothing is buffered here.
    }

    unsafe fn release() {
        // SAFETY: defmt calls `release` once after `acquire`, inside its critical section.
        unsafe {
            ENCODER.with(|e, sink| e.end_frame(sink));
            let restore = ENCODER.restore.get().read();
            ENCODER.taken.store(false, Ordering::Relaxed);
            critical_section::release(restore);
        }
    }

    unsafe fn write(bytes: &[u8]) {
        // SAFETY: defmt calls `write` only between `acquire` and `release`.
        unsafe { ENCODER.with(|e, sink| e.write(bytes, sink)) }
    }
}
