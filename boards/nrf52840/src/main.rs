//! loglinear on the nRF52840 (nRF52840-DK), brought up with embassy-nrf.
//!
//! * Clocks: HFCLK from the 32 MHz crystal oscillator (HFXO), which USB needs and which makes
//!   the CPU's 64 MHz exact; it is started here and its source checked and logged.
//! * Serial (board.toml's `transport`): USB CDC-ACM on the nRF USB port (USBD, with VBUS
//!   detection from the POWER block), or UARTE0 (P0.06 TX, P0.08 RX, the J-Link virtual COM port)
//!   at 115200 8N1, received by EasyDMA into the HAL's ring buffer (TIMER1 counts the bytes
//!   through PPI). Either reaches the protocol loop through `loglinear_firmware::link`.
//! * LED: LED1 (P0.13) is lit while the firmware works on a request.
//! * Logs: defmt over RTT (`probe-rs run` prints them).
//!
//! The serial tasks run on an interrupt executor (the EGU0/SWI0 software interrupt) above the
//! decode loop, which runs in thread mode and never blocks the USB stack.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use defmt::{error, info};
use embassy_nrf::buffered_uarte::{self, BufferedUarte};
use embassy_nrf::gpio::{Level, Output, OutputDrive};
use embassy_nrf::interrupt;
use embassy_nrf::interrupt::{InterruptExt, Priority};
use embassy_nrf::peripherals::{
    self, P0_06, P0_08, PPI_CH0, PPI_CH1, PPI_GROUP0, TIMER1, UARTE0, USBD,
};
use embassy_nrf::usb::vbus_detect::HardwareVbusDetect;
use embassy_nrf::{bind_interrupts, uarte, usb, Peri};
use embassy_usb::class::cdc_acm::State;
use loglinear_firmware::board;
use loglinear_firmware::link::{self, ActivityLed, Wire};
use panic_probe as _;

bind_interrupts!(struct Irqs {
    USBD => usb::InterruptHandler<peripherals::USBD>;
    CLOCK_POWER => usb::vbus_detect::InterruptHandler;
    UARTE0 => buffered_uarte::InterruptHandler<peripherals::UARTE0>;
});

loglinear_firmware::serial_executor!(embassy_nrf, EGU0_SWI0);

#[cortex_m_rt::entry]
fn main() -> ! {
    // Before any interrupt is enabled: the painting must not meet an interrupt's frame.
    loglinear_firmware::stack::paint();
    let mut config = embassy_nrf::config::Config::default();
    config.hfclk_source = embassy_nrf::config::HfclkSource::ExternalXtal;
    let p = embassy_nrf::init(config);
    report_clocks();

    interrupt::EGU0_SWI0.set_priority(Priority::P6);
    let spawner = SERIAL_EXECUTOR.start(interrupt::EGU0_SWI0);
    // LED1 (P0.13, lit by a low level): lit while the firmware works on a request.
    let led = Output::new(p.P0_13, Level::High, OutputDrive::Standard);
    link::run_board(
        |wire| {
            if board::TRANSPORT == "usb" {
                spawner.spawn(usb_serial(p.USBD, wire).expect("one usb task"));
            } else {
                let uart = UartParts {
                    uarte: p.UARTE0,
                    timer: p.TIMER1,
                    ppi_ch1: p.PPI_CH0,
                    ppi_ch2: p.PPI_CH1,
                    ppi_group: p.PPI_GROUP0,
                    rx_pin: p.P0_08,
                    tx_pin: p.P0_06,
                };
                spawner.spawn(uart_serial(uart, wire).expect("one uart task"));
            }
        },
        ActivityLed::active_low(led),
        link::reset_cortex_m,
    )
}

/// Logs the HFCLK source as the HAL left it, beside what the board profile states; anything but
/// the crystal is an error (USB would not enumerate, and the UART's baud rate would drift).
fn report_clocks() {
    let stat = embassy_nrf::pac::CLOCK.hfclkstat().read();
    let xtal = stat.src() == embassy_nrf::pac::clock::vals::HfclkstatSrc::Xtal && stat.state();
    info!(
        "clocks: HFCLK from {}, CPU {} Hz",
        if xtal { "HFXO (crystal)" } else { "HFINT (RC)" },
        board::CLOCK_HZ
    );
    info!(
        "board.toml: clock_hz {}, {}",
        board::CLOCK_HZ,
        board::CLOCKS
    );
    if !xtal {
        error!("HFCLK is not running from the crystal");
    }
}

/// USB CDC-ACM on USBD: the device, and the link's pump over its one serial port.
#[embassy_executor::task]
async fn usb_serial(usbd: Peri<'static, USBD>, wire: Wire) {
    let driver = usb::Driver::new(usbd, Irqs, HardwareVbusDetect::new(Irqs));
    let mut descriptors = link::UsbDescriptors::new();
    let mut state = State::new();
    let (mut device, class) = link::cdc_acm_device(descriptors.builder(driver), &mut state);
    let pump = link::pump_cdc_acm(class, wire);
    embassy_futures::join::join(device.run(), pump).await;
}

/// The peripherals the buffered UARTE takes.
struct UartParts {
    uarte: Peri<'static, UARTE0>,
    timer: Peri<'static, TIMER1>,
    ppi_ch1: Peri<'static, PPI_CH0>,
    ppi_ch2: Peri<'static, PPI_CH1>,
    ppi_group: Peri<'static, PPI_GROUP0>,
    rx_pin: Peri<'static, P0_08>,
    tx_pin: Peri<'static, P0_06>,
}

/// UARTE0 at 115200 8N1 into the HAL's ring buffers.
#[embassy_executor::task]
async fn uart_serial(parts: UartParts, wire: Wire) {
    let mut tx_buf = [0u8; link::UART_TX_BUFFER];
    let mut rx_buf = [0u8; link::UART_RX_BUFFER];
    let mut config = uarte::Config::default();
    config.parity = uarte::Parity::Excluded;
    config.baudrate = uarte::Baudrate::Baud115200;
    let uart = BufferedUarte::new(
        parts.uarte,
        parts.timer,
        parts.ppi_ch1,
        parts.ppi_ch2,
        parts.ppi_group,
        parts.rx_pin,
        parts.tx_pin,
        Irqs,
        config,
        &mut rx_buf,
        &mut tx_buf,
    );
    let (rx, tx) = uart.split();
    link::pump_uart(rx, tx, wire, |_| {}).await;
}
