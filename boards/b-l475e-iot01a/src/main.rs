//! loglinear on ST's B-L475E-IOT01A Discovery kit (STM32L475VG), brought up with embassy-stm32.
//!
//! * Clocks: the PLL from the 16 MHz HSI to **80 MHz** SYSCLK (board.toml's `clock_hz` and
//!   `pll_source`; build.rs derives M, N and R), voltage range 1, AHB and APB1/APB2 80 MHz. The
//!   HAL sets the flash wait states for it (RM0351 table 12: 4 at 80 MHz in range 1); the flash
//!   interface's instruction cache, data cache and prefetch are switched on here.
//! * Serial: USART1 (PB6 TX, PB7 RX), the ST-LINK V2-1's virtual COM port, at 115200 8N1,
//!   interrupt-driven into the HAL's ring buffer, and from there into the protocol loop through
//!   `loglinear_firmware::link`. The HAL wakes its reader on every byte (`eager_reads`), not on
//!   an idle line: QEMU's USART never reports one.
//! * LED: LED2 (green, PB14) is lit while the firmware works on a request.
//! * Logs: defmt, over RTT on the kit (feature `defmt-rtt`, the default) or semihosting under
//!   QEMU (`defmt-semihosting`), the images' one difference.
//!
//! Under QEMU (`qemu-system-arm -machine b-l475e-iot01a`) the same code runs on QEMU's models of
//! the RCC, GPIO and USART; what the machine lacks, `qemu_fixups` makes up for without touching
//! the HAL. QEMU has no timers for this chip, so the image uses no time driver.
//!
//! The serial task runs on an interrupt executor (UART4's vector, which no driver here enables)
//! above the decode loop, which runs in thread mode.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(all(feature = "defmt-rtt", feature = "defmt-semihosting"))]
compile_error!("pick one defmt transport: feature defmt-rtt or defmt-semihosting, not both");
#[cfg(not(any(feature = "defmt-rtt", feature = "defmt-semihosting")))]
compile_error!("pick a defmt transport: feature defmt-rtt (the kit) or defmt-semihosting (QEMU)");

mod qemu_fixups;

use defmt::{error, info};
use embassy_stm32::gpio::{Level, Output, Speed};
use embassy_stm32::interrupt::{self, InterruptExt, Priority};
use embassy_stm32::peripherals::{PB6, PB7, USART1};
use embassy_stm32::usart::{self, BufferedUart};
use embassy_stm32::{bind_interrupts, Peri};
use loglinear_firmware::link::{self, ActivityLed, Wire};
use panic_probe as _;

bind_interrupts!(struct Irqs {
    USART1 => usart::BufferedInterruptHandler<USART1>;
});

loglinear_firmware::serial_executor!(embassy_stm32, UART4);

/// The PLL settings of board.toml's `clock_hz` (`PLL`), from build.rs.
mod clock_tree {
    use embassy_stm32::rcc::{Pll, PllMul, PllPreDiv, PllRDiv, PllSource};
    include!(concat!(env!("OUT_DIR"), "/clock_tree.rs"));
}

#[cortex_m_rt::entry]
fn main() -> ! {
    // Before any interrupt is enabled: the painting must not meet an interrupt's frame.
    loglinear_firmware::stack::paint();
    let emulated = qemu_fixups::install();
    let p = embassy_stm32::init(clock_config());
    enable_flash_caches();
    if emulated {
        info!("QEMU: PWR, FLASH and USART1's ICR served by the fault handler (qemu_fixups)");
    }
    report_clocks(&p.RCC);

    interrupt::UART4.set_priority(Priority::P6);
    let spawner = SERIAL_EXECUTOR.start(interrupt::UART4);
    // LED2 (green, PB14): lit while the firmware works on a request.
    let led = Output::new(p.PB14, Level::Low, Speed::Low);
    link::run_board(
        |wire| spawner.spawn(uart_serial(p.USART1, p.PB7, p.PB6, wire).expect("one uart task")),
        ActivityLed::active_high(led),
        link::reset_cortex_m,
    )
}

/// SYSCLK from the PLL (build.rs's settings), AHB and both APBs undivided, voltage range 1.
fn clock_config() -> embassy_stm32::Config {
    use embassy_stm32::rcc::*;
    let mut config = embassy_stm32::Config::default();
    config.rcc.hsi = true;
    config.rcc.msi = Some(MSIRange::RANGE4M);
    config.rcc.pll = Some(clock_tree::PLL);
    config.rcc.sys = Sysclk::PLL1_R;
    config.rcc.ahb_pre = AHBPrescaler::DIV1;
    config.rcc.apb1_pre = APBPrescaler::DIV1;
    config.rcc.apb2_pre = APBPrescaler::DIV1;
    config
}

/// The flash interface's instruction cache, data cache and prefetch buffer (FLASH_ACR ICEN,
/// DCEN, PRFTEN; RM0351 3.3.3), which the HAL leaves as it finds them.
fn enable_flash_caches() {
    embassy_stm32::pac::FLASH.acr().modify(|w| {
        w.set_icen(true);
        w.set_dcen(true);
        w.set_prften(true);
    });
}

/// Logs the clocks as the HAL set them, the flash wait states and caches, beside what the
/// board profile states; a SYSCLK other than board.toml's `clock_hz` is an error.
fn report_clocks(rcc: &Peri<'_, embassy_stm32::peripherals::RCC>) {
    let clocks = embassy_stm32::rcc::clocks(rcc);
    let hz = |c: embassy_stm32::time::MaybeHertz| c.to_hertz().map_or(0, |h| h.0);
    let sys = hz(clocks.sys);
    let acr = embassy_stm32::pac::FLASH.acr().read();
    info!(
        "clocks: sys {} Hz, ahb {} Hz, apb1 {} Hz, apb2 {} Hz, flash latency {} wait states, \
         icache {}, dcache {}, prefetch {}",
        sys,
        hz(clocks.hclk1),
        hz(clocks.pclk1),
        hz(clocks.pclk2),
        acr.latency(),
        acr.icen(),
        acr.dcen(),
        acr.prften()
    );
    link::check_clock("SYSCLK", sys);
}

/// USART1 at 115200 8N1, interrupt-driven into the HAL's ring buffers.
#[embassy_executor::task]
async fn uart_serial(
    usart: Peri<'static, USART1>,
    rx_pin: Peri<'static, PB7>,
    tx_pin: Peri<'static, PB6>,
    wire: Wire,
) {
    let tx_buf = &mut [0u8; link::UART_TX_BUFFER];
    let rx_buf = &mut [0u8; link::UART_RX_BUFFER];
    let mut config = usart::Config::default();
    config.baudrate = link::UART_BAUD;
    config.eager_reads = Some(1);
    let Ok(uart) = BufferedUart::new(usart, rx_pin, tx_pin, tx_buf, rx_buf, Irqs, config) else {
        error!("USART1: the configuration was refused");
        return;
    };
    let (tx, rx) = uart.split();
    link::pump_uart(rx, tx, wire, hold_receive).await;
}

/// Masks USART1's receive interrupt while the link's receive queue is full (`true`), and
/// unmasks it (`false`). The HAL's handler empties RDR into its ring even when the ring is full,
/// dropping the byte; masked, the byte waits in RDR. The HAL's handler read-modify-writes CR1
/// too (TXEIE, TCIE): a critical section keeps the two from interleaving.
fn hold_receive(hold: bool) {
    cortex_m::interrupt::free(|_| {
        embassy_stm32::pac::USART1
            .cr1()
            .modify(|w| w.set_rxneie(!hold));
    });
}
