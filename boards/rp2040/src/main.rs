//! loglinear on the RP2040 (Raspberry Pi Pico), brought up with embassy-rp.
//!
//! * Clocks: the 12 MHz crystal, PLL_SYS to **125 MHz** clk_sys and clk_peri, PLL_USB to 48 MHz
//!   (embassy-rp's `ClockConfig::crystal(12_000_000)`, the Pico SDK's settings). Code and the
//!   model run from the external flash through the XIP cache, which is on (its reset state; it
//!   is checked and logged here).
//! * Boot: the boot ROM checks the CRC of the 256-byte second stage (embassy-rp's
//!   `boot2-w25q080`) and runs it; `cargo xtask image-check` checks the same CRC.
//! * Serial (board.toml's `transport`): USB CDC-ACM on the Pico's USB port, or UART0 (GPIO0 TX,
//!   GPIO1 RX) at 115200 8N1, interrupt-driven into the HAL's ring buffer. Either reaches the
//!   protocol loop through `loglinear_firmware::link`.
//! * LED: the Pico's LED (GPIO25) is lit while the firmware works on a request.
//! * Logs: defmt over RTT (`probe-rs run` prints them).
//!
//! The serial tasks run on an interrupt executor (the SWI_IRQ_1 software interrupt) above the
//! decode loop, which runs in thread mode and never blocks the USB stack.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use defmt::{error, info};
use embassy_rp::gpio::{Level, Output};
use embassy_rp::interrupt;
use embassy_rp::interrupt::{InterruptExt, Priority};
use embassy_rp::peripherals::{PIN_0, PIN_1, UART0, USB};
use embassy_rp::uart::{self, BufferedUart};
use embassy_rp::{bind_interrupts, usb, Peri};
use embassy_usb::class::cdc_acm::State;
use loglinear_firmware::board;
use loglinear_firmware::link::{self, ActivityLed, Wire};
use panic_probe as _;

bind_interrupts!(struct Irqs {
    USBCTRL_IRQ => usb::InterruptHandler<USB>;
    UART0_IRQ => uart::BufferedInterruptHandler<UART0>;
});

loglinear_firmware::serial_executor!(embassy_rp, SWI_IRQ_1);

#[cortex_m_rt::entry]
fn main() -> ! {
    // Before any interrupt is enabled: the painting must not meet an interrupt's frame.
    loglinear_firmware::stack::paint();
    let p = embassy_rp::init(embassy_rp::config::Config::default());
    report_clocks();

    interrupt::SWI_IRQ_1.set_priority(Priority::P2);
    let spawner = SERIAL_EXECUTOR.start(interrupt::SWI_IRQ_1);
    // The Pico's LED (GPIO25): lit while the firmware works on a request.
    let led = Output::new(p.PIN_25, Level::Low);
    link::run_board(
        |wire| {
            if board::TRANSPORT == "usb" {
                spawner.spawn(usb_serial(p.USB, wire).expect("one usb task"));
            } else {
                let task = uart_serial(p.UART0, p.PIN_0, p.PIN_1, wire);
                spawner.spawn(task.expect("one uart task"));
            }
        },
        ActivityLed::active_high(led),
        link::reset_cortex_m,
    )
}

/// Logs clk_sys and clk_peri as the HAL set them and the XIP cache state, beside what the board
/// profile states; a clk_sys other than board.toml's `clock_hz` is an error.
fn report_clocks() {
    let sys = embassy_rp::clocks::clk_sys_freq();
    let xip_cache = embassy_rp::pac::XIP_CTRL.ctrl().read().en();
    info!(
        "clocks: clk_sys {} Hz, clk_peri {} Hz, clk_usb {} Hz, XIP cache {}",
        sys,
        embassy_rp::clocks::clk_peri_freq(),
        embassy_rp::clocks::clk_usb_freq(),
        xip_cache
    );
    link::check_clock("clk_sys", sys);
    if !xip_cache {
        error!("the XIP cache is off: code and model run uncached from flash");
    }
}

/// USB CDC-ACM on the RP2040's USB controller: the device, and the link's pump over its one
/// serial port.
#[embassy_executor::task]
async fn usb_serial(usb: Peri<'static, USB>, wire: Wire) {
    let driver = usb::Driver::new(usb, Irqs);
    let mut descriptors = link::UsbDescriptors::new();
    let mut state = State::new();
    let (mut device, class) = link::cdc_acm_device(descriptors.builder(driver), &mut state);
    let pump = link::pump_cdc_acm(class, wire);
    embassy_futures::join::join(device.run(), pump).await;
}

/// UART0 at 115200 8N1, interrupt-driven into the HAL's ring buffers.
#[embassy_executor::task]
async fn uart_serial(
    uart: Peri<'static, UART0>,
    tx_pin: Peri<'static, PIN_0>,
    rx_pin: Peri<'static, PIN_1>,
    wire: Wire,
) {
    let mut tx_buf = [0u8; link::UART_TX_BUFFER];
    let mut rx_buf = [0u8; link::UART_RX_BUFFER];
    let mut config = uart::Config::default();
    config.baudrate = link::UART_BAUD;
    let uart = BufferedUart::new(uart, tx_pin, rx_pin, Irqs, &mut tx_buf, &mut rx_buf, config);
    let (tx, rx) = uart.split();
    link::pump_uart(rx, tx, wire, |_| {}).await;
}
