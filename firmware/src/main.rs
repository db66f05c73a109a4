//! The firmware image of the QEMU machines and the register-level boards (feature `rt`): it
//! opens the board's byte stream and hands it to [`loglinear_firmware::run`]. The transport is
//! chosen per board at build time (`transport` in its board.toml): the machine's UART model
//! (`uart`, polled drivers in `uart.rs`) or semihosting stdin/stdout (`semihosting`,
//! `serial.rs`). Under QEMU, end of input (or `QUIT`) exits through semihosting with 0 (1 for a
//! runtime error at start, 101 for a panic); on a hardware board `QUIT` resets the chip.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(hal_board)]
compile_error!("this board has its own crate (boards/<board>/Cargo.toml): build it from there");

#[cfg(not(transport_uart))]
mod serial;
#[cfg(transport_uart)]
mod uart;

/// The protocol's byte stream: the board's UART or semihosting stdin/stdout.
#[cfg(not(transport_uart))]
use serial as transport;
#[cfg(transport_uart)]
use uart as transport;

#[cfg(target_arch = "arm")]
use cortex_m as _;
#[cfg(transport_uart)]
use embedded_io::Write as _;

use loglinear_firmware::{stack, EXIT_PANIC, EXIT_RUNTIME};
#[cfg(transport_uart)]
use loglinear_protocol::{reply_err, ErrCode};

#[cfg_attr(target_arch = "arm", cortex_m_rt::entry)]
#[cfg_attr(target_arch = "riscv32", riscv_rt::entry)]
fn main() -> ! {
    stack::paint();
    let code = match transport::open() {
        Ok((mut rx, mut tx)) => match loglinear_firmware::run(&mut rx, &mut tx) {
            Ok(()) => 0,
            Err(code) => code,
        },
        Err(_) => EXIT_RUNTIME,
    };
    exit(code)
}

/// Ends the program. With semihosting (QEMU, or a probe attached) it is the semihosting exit,
/// `code` becoming QEMU's exit status. A Cortex-M board without it resets after a clean end
/// (`QUIT`: it boots to `READY` again) and halts after an error or a panic, which a reset would
/// only repeat.
fn exit(code: i32) -> ! {
    #[cfg(semihosting)]
    semihosting::process::exit(code);
    #[cfg(not(semihosting))]
    {
        #[cfg(target_arch = "arm")]
        if code == 0 {
            cortex_m::peripheral::SCB::sys_reset();
        }
        // ESP32-C3: its reset is in the RTC block, not driven here; it halts after QUIT too.
        #[cfg(not(target_arch = "arm"))]
        let _ = code;
        loop {
            core::hint::spin_loop();
        }
    }
}

/// Reports the panic (semihosting stderr where there is semihosting; an `ERR 6` line on the
/// UART where that is the transport) and exits with a non-zero code (QEMU) or halts (a board).
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    #[cfg(feature = "defmt")]
    defmt::error!("panic");
    #[cfg(semihosting)]
    semihosting::eprintln!("panic: {}", info);
    #[cfg(transport_uart)]
    if let Ok((_, mut tx)) = uart::open() {
        reply_err(&mut tx, ErrCode::Runtime, format_args!("panic: {info}"));
        let _ = tx.flush();
    }
    exit(EXIT_PANIC)
}
