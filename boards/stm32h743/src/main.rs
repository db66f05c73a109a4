//! loglinear on the STM32H743 (NUCLEO-H743ZI2), brought up with embassy-stm32.
//!
//! * Clocks: HSI 64 MHz / 4 × 50 = 800 MHz VCO, PLL1 P / 2 = **400 MHz** SYSCLK at voltage scale
//!   1 (VOS1, the highest every silicon revision supports), AHB 200 MHz, APB1-4 100 MHz. The HAL
//!   sets the flash wait states for 200 MHz AXI at VOS1 (RM0433 table 17: 2 wait states). USB
//!   runs from HSI48, trimmed by the host's SOF (CRS).
//! * Caches: the Cortex-M7 I-cache and D-cache are on. No DMA touches cacheable memory: the USB
//!   OTG-FS core moves data through its FIFOs, the UART by interrupt.
//! * Serial (board.toml's `transport`): USB CDC-ACM on the user USB port (OTG-FS, PA11/PA12), or
//!   USART3 (PD8 TX / PD9 RX, the ST-LINK virtual COM port) at 115200 8N1, interrupt-driven into
//!   the HAL's ring buffer. Either reaches the protocol loop through `loglinear_firmware::link`.
//! * LED: LD1 (green, PB0) is lit while the firmware works on a request.
//! * Logs: defmt over RTT (`probe-rs run` prints them).
//!
//! The serial tasks run on an interrupt executor (UART4's vector, which no peripheral here uses)
//! above the decode loop, which runs in thread mode and never blocks the USB stack.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use defmt::{error, info};
use embassy_stm32::gpio::{Level, Output, Speed};
use embassy_stm32::interrupt;
use embassy_stm32::interrupt::{InterruptExt, Priority};
use embassy_stm32::peripherals::{PA11, PA12, PD8, PD9, USART3, USB_OTG_FS};
use embassy_stm32::usart::{self, BufferedUart};
use embassy_stm32::{bind_interrupts, usb, Peri};
use embassy_usb::class::cdc_acm::State;
use loglinear_firmware::board;
use loglinear_firmware::link::{self, ActivityLed, Wire};
use panic_probe as _;

bind_interrupts!(struct Irqs {
    OTG_FS => usb::InterruptHandler<USB_OTG_FS>;
    USART3 => usart::BufferedInterruptHandler<USART3>;
});

loglinear_firmware::serial_executor!(embassy_stm32, UART4);

#[cortex_m_rt::entry]
fn main() -> ! {
    // Before any interrupt is enabled: the painting must not meet an interrupt's frame.
    loglinear_firmware::stack::paint();
    let p = embassy_stm32::init(clock_config());
    let mut core = cortex_m::Peripherals::take().expect("core peripherals taken once, here");
    core.SCB.enable_icache();
    core.SCB.enable_dcache(&mut core.CPUID);
    report_clocks(&p.RCC);

    interrupt::UART4.set_priority(Priority::P6);
    let spawner = SERIAL_EXECUTOR.start(interrupt::UART4);
    // LD1 (green, PB0): lit while the firmware works on a request.
    let led = Output::new(p.PB0, Level::Low, Speed::Low);
    link::run_board(
        |wire| {
            if board::TRANSPORT == "usb" {
                let task = usb_serial(p.USB_OTG_FS, p.PA12, p.PA11, wire);
                spawner.spawn(task.expect("one usb task"));
            } else {
                let task = uart_serial(p.USART3, p.PD9, p.PD8, wire);
                spawner.spawn(task.expect("one uart task"));
            }
        },
        ActivityLed::active_high(led),
        link::reset_cortex_m,
    )
}

/// 400 MHz from the HSI through PLL1 at VOS1; USB from HSI48 (see the crate docs).
fn clock_config() -> embassy_stm32::Config {
    use embassy_stm32::rcc::*;
    let mut config = embassy_stm32::Config::default();
    config.rcc.hsi = Some(HSIPrescaler::DIV1);
    config.rcc.csi = true;
    config.rcc.hsi48 = Some(Hsi48Config {
        sync_from_usb: true,
    });
    config.rcc.pll1 = Some(Pll {
        source: PllSource::HSI,
        prediv: PllPreDiv::DIV4,
        mul: PllMul::MUL50,
        fracn: None,
        divp: Some(PllDiv::DIV2),
        divq: None,
        divr: None,
    });
    config.rcc.sys = Sysclk::PLL1_P;
    config.rcc.ahb_pre = AHBPrescaler::DIV2;
    config.rcc.apb1_pre = APBPrescaler::DIV2;
    config.rcc.apb2_pre = APBPrescaler::DIV2;
    config.rcc.apb3_pre = APBPrescaler::DIV2;
    config.rcc.apb4_pre = APBPrescaler::DIV2;
    config.rcc.voltage_scale = VoltageScale::Scale1;
    config.rcc.mux.usbsel = mux::Usbsel::HSI48;
    config
}

/// Logs the clocks as the HAL set them, the flash wait states and the caches, beside what the
/// board profile states; a SYSCLK other than board.toml's `clock_hz` is an error.
fn report_clocks(rcc: &Peri<'_, embassy_stm32::peripherals::RCC>) {
    let clocks = embassy_stm32::rcc::clocks(rcc);
    let hz = |c: embassy_stm32::time::MaybeHertz| c.to_hertz().map_or(0, |h| h.0);
    let sys = hz(clocks.sys);
    let latency = embassy_stm32::pac::FLASH.acr().read().latency();
    info!(
        "clocks: sys {} Hz, ahb {} Hz, apb1 {} Hz, hsi48 {} Hz, flash latency {} wait states, \
         icache {}, dcache {}",
        sys,
        hz(clocks.hclk1),
        hz(clocks.pclk1),
        hz(clocks.hsi48),
        latency,
        cortex_m::peripheral::SCB::icache_enabled(),
        cortex_m::peripheral::SCB::dcache_enabled()
    );
    link::check_clock("SYSCLK", sys);
}

/// USB CDC-ACM on OTG-FS: the device, and the link's pump over its one serial port.
#[embassy_executor::task]
async fn usb_serial(
    otg: Peri<'static, USB_OTG_FS>,
    dp: Peri<'static, PA12>,
    dm: Peri<'static, PA11>,
    wire: Wire,
) {
    let mut ep_out_buffer = [0u8; 256];
    let mut usb_config = usb::Config::default();
    // The Nucleo does not wire VBUS sensing to PA9 for the user port; it is bus-powered there.
    usb_config.vbus_detection = false;
    let driver = usb::Driver::new_fs(otg, Irqs, dp, dm, &mut ep_out_buffer, usb_config);
    let mut descriptors = link::UsbDescriptors::new();
    let mut state = State::new();
    let (mut device, class) = link::cdc_acm_device(descriptors.builder(driver), &mut state);
    let pump = link::pump_cdc_acm(class, wire);
    embassy_futures::join::join(device.run(), pump).await;
}

/// USART3 at 115200 8N1, interrupt-driven into the HAL's ring buffers.
#[embassy_executor::task]
async fn uart_serial(
    usart: Peri<'static, USART3>,
    rx_pin: Peri<'static, PD9>,
    tx_pin: Peri<'static, PD8>,
    wire: Wire,
) {
    let tx_buf = &mut [0u8; link::UART_TX_BUFFER];
    let rx_buf = &mut [0u8; link::UART_RX_BUFFER];
    let mut config = usart::Config::default();
    config.baudrate = link::UART_BAUD;
    let Ok(uart) = BufferedUart::new(usart, rx_pin, tx_pin, tx_buf, rx_buf, Irqs, config) else {
        error!("USART3: the configuration was refused");
        return;
    };
    let (tx, rx) = uart.split();
    link::pump_uart(rx, tx, wire, |_| {}).await;
}
