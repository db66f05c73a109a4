//! loglinear on the ESP32-C3 (ESP32-C3-DevKitM-1), brought up with esp-hal.
//!
//! * Boot: the ROM loads the ESP-IDF second-stage bootloader, which checks this app image (the
//!   app descriptor below, `esp_app_desc!`) and maps its flash segments; esp-hal's start-up
//!   (`linkall.x`) then runs `main`. `espflash save-image --chip esp32c3` makes the image that
//!   the tests read back (`cargo xtask boards`).
//! * Clocks: the 40 MHz crystal and the PLL, CPU at **160 MHz** (`CpuClock::_160MHz`); the HAL
//!   turns the watchdogs off. Code and the model run from flash through the 16 KiB cache.
//! * Serial (board.toml's `transport`): the chip's USB-Serial-JTAG (a CDC-ACM port on the
//!   DevKit's USB connector, interrupt-driven, with flow control by USB itself), or UART0
//!   (GPIO21 TX, GPIO20 RX, the DevKit's USB-UART bridge) at 115200 8N1, interrupt-driven from
//!   its 128-byte FIFO. Either reaches the protocol loop through `loglinear_firmware::link`.
//! * Logs: defmt over RTT through the built-in USB-JTAG (`probe-rs run` prints them).
//! * LED: none. The DevKit's LED is a WS2812 on GPIO8, which needs a pulse train, not a level.
//!
//! The serial tasks run on an interrupt executor (the FROM_CPU_INTR1 software interrupt) above
//! the decode loop in `main`.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use core::convert::Infallible;

use defmt::{error, info};
use esp_backtrace as _;
use esp_hal::clock::CpuClock;
use esp_hal::interrupt::Priority;
use esp_hal::peripherals::{GPIO20, GPIO21, UART0, USB_DEVICE};
use esp_hal::timer::timg::TimerGroup;
use esp_hal::uart::{self, Uart};
use esp_hal::usb::usb_serial_jtag::UsbSerialJtag;
use esp_rtos::embassy::InterruptExecutor;
use loglinear_firmware::board;
use loglinear_firmware::link::{self, ActivityLed, NoLed, Wire};
use static_cell::StaticCell;

esp_bootloader_esp_idf::esp_app_desc!();

#[esp_hal::main]
fn main() -> ! {
    let p = esp_hal::init(esp_hal::Config::default().with_cpu_clock(CpuClock::_160MHz));
    report_clocks();
    let timg0 = TimerGroup::new(p.TIMG0);
    esp_rtos::start(timg0.timer0, p.FROM_CPU_INTR0);

    static EXECUTOR: StaticCell<InterruptExecutor<1>> = StaticCell::new();
    let executor = EXECUTOR.init(InterruptExecutor::new(p.FROM_CPU_INTR1));
    let spawner = executor.start(Priority::Priority2);
    link::run_board(
        |wire| {
            if board::TRANSPORT == "usb" {
                spawner.spawn(jtag_serial(p.USB_DEVICE, wire).expect("one usb task"));
            } else {
                let task = uart_serial(p.UART0, p.GPIO20, p.GPIO21, wire);
                spawner.spawn(task.expect("one uart task"));
            }
        },
        ActivityLed::active_high(NoLed),
        reset,
    )
}

fn reset() -> Infallible {
    esp_hal::system::software_reset()
}

/// Logs the CPU clock as the HAL set it, beside what the board profile states; another speed
/// than board.toml's `clock_hz` is an error.
fn report_clocks() {
    let cpu = esp_hal::clock::cpu_clock().as_hz();
    info!(
        "clocks: CPU {} Hz, XTAL {} Hz",
        cpu,
        esp_hal::clock::xtal_clock().as_hz()
    );
    link::check_clock("the CPU clock", cpu);
}

/// The USB-Serial-JTAG's CDC-ACM port, interrupt-driven.
#[embassy_executor::task]
async fn jtag_serial(usb: USB_DEVICE<'static>, wire: Wire) {
    let (rx, tx) = UsbSerialJtag::new(usb).into_async().split();
    link::pump_uart(rx, tx, wire, |_| {}).await;
}

/// UART0 at 115200 8N1, interrupt-driven from its FIFO.
#[embassy_executor::task]
async fn uart_serial(
    uart0: UART0<'static>,
    rx_pin: GPIO20<'static>,
    tx_pin: GPIO21<'static>,
    wire: Wire,
) {
    let config = uart::Config::default().with_baudrate(link::UART_BAUD);
    let uart = match Uart::new(uart0, config) {
        Ok(uart) => uart.with_rx(rx_pin).with_tx(tx_pin).into_async(),
        Err(_) => {
            error!("UART0: the configuration was refused");
            return;
        }
    };
    let (rx, tx) = uart.split();
    link::pump_uart(rx, tx, wire, |_| {}).await;
}
