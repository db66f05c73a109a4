//! Stack high-water mark by painting: at boot [`paint`] fills the unused part of the stack (below
//! the current stack pointer, less a margin) with [`PATTERN`]; [`peak_bytes`] later scans up from
//! the stack's lowest address for the first word that no longer holds it. The stack is the region
//! between the runtime crate's linker symbols: `_stack_end` (low end, after `.bss`/`.uninit`) and
//! `_stack_start` (top, the initial SP) for `cortex-m-rt`; `__estack` and `_stack_start` for
//! `riscv-rt`. The stack grows down from the top.
//!
//! With feature `hal-stack-guard` (esp-hal, whose start-up keeps a canary at the stack's low
//! end and may watch it with a hardware watchpoint) nothing is painted and [`peak_bytes`] is 0:
//! painting would overwrite the canary.

#[cfg(not(feature = "hal-stack-guard"))]
use core::ptr;

/// The paint: a word that no frame is likely to store by chance.
#[cfg(not(feature = "hal-stack-guard"))]
const PATTERN: u32 = 0xC0FF_EE5A;

/// Bytes below the current frame left unpainted, for the painting loop itself. It calls nothing,
/// so it needs no stack below its own frame; the margin only guards against compiler spills.
#[cfg(not(feature = "hal-stack-guard"))]
const MARGIN: usize = 256;

#[cfg(all(target_arch = "arm", not(feature = "hal-stack-guard")))]
extern "C" {
    static _stack_start: u32;
    static _stack_end: u32;
}
#[cfg(all(target_arch = "arm", not(feature = "hal-stack-guard")))]
use _stack_end as STACK_LOW;

#[cfg(all(target_arch = "riscv32", not(feature = "hal-stack-guard")))]
extern "C" {
    static _stack_start: u32;
    static __estack: u32;
}
#[cfg(all(target_arch = "riscv32", not(feature = "hal-stack-guard")))]
use __estack as STACK_LOW;

/// `(low, top)`: word-aligned addresses of the stack region.
#[cfg(not(feature = "hal-stack-guard"))]
fn region() -> (usize, usize) {
    let low = ptr::addr_of!(STACK_LOW) as usize;
    let top = ptr::addr_of!(_stack_start) as usize;
    ((low + 3) & !3, top & !3)
}

/// Paints the stack below the caller's frame. Call once, first thing in `main`, before any
/// interrupt is enabled (an interrupt's frame below the caller's would be painted over).
#[cfg(feature = "hal-stack-guard")]
pub fn paint() {}

/// The stack's peak use: unknown without painting.
#[cfg(feature = "hal-stack-guard")]
pub fn peak_bytes() -> usize {
    0
}

/// Paints the stack below the caller's frame. Call once, first thing in `main`, before any
/// interrupt is enabled (an interrupt's frame below the caller's would be painted over).
#[cfg(not(feature = "hal-stack-guard"))]
#[inline(never)]
pub fn paint() {
    let here = 0u32;
    // An address inside this frame: everything below it (less the margin) is unused.
    let sp = ptr::addr_of!(here) as usize;
    let (low, top) = region();
    let end = sp.saturating_sub(MARGIN) & !3;
    if !(low < end && end <= top) {
        return;
    }
    let mut p = low as *mut u32;
    while (p as usize) < end {
        // SAFETY: `p` is word-aligned and lies in [low, end), inside the stack region given by
        // the linker and below the current frame by at least MARGIN bytes: memory no live frame,
        // static or other context uses (no interrupts are enabled), so writing it changes nothing
        // that Rust code can observe. Volatile, so the loop is neither elided nor made a call.
        unsafe { ptr::write_volatile(p, PATTERN) };
        p = p.wrapping_add(1);
    }
}

/// The deepest the stack has reached since [`paint`], in bytes from its top: the region's size
/// minus the painted words still untouched at its low end.
#[cfg(not(feature = "hal-stack-guard"))]
pub fn peak_bytes() -> usize {
    let (low, top) = region();
    let mut p = low as *const u32;
    while (p as usize) < top {
        // SAFETY: `p` is word-aligned, in [low, top), inside the stack region given by the
        // linker, which is always mapped RAM; a volatile read of it does not race with anything
        // (single core, no interrupts) and makes no Rust reference to it.
        if unsafe { ptr::read_volatile(p) } != PATTERN {
            break;
        }
        p = p.wrapping_add(1);
    }
    top - p as usize
}
