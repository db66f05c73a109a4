//! The byte link between a HAL board's serial driver and the protocol loop ([`crate::run`]).
//!
//! On a real chip the driver (USB CDC-ACM, or a UART whose receive interrupt fills the HAL's
//! ring buffer) runs as async tasks on a high-priority interrupt executor, while [`crate::run`]
//! decodes in thread mode and blocks on `embedded_io::Read` / `Write`. Two `heapless` SPSC queues
//! carry the bytes between them, one per direction, each with one producer and one consumer:
//!
//! * received bytes: the driver task ([`WireRx::deliver`]) → the protocol loop ([`SerialRx`]);
//! * bytes to send: the protocol loop ([`SerialTx`]) → the driver task ([`WireTx::next_chunk`]).
//!
//! Nothing is dropped on the way in: when the receive queue is full the driver task waits, so
//! USB NAKs the host (flow control for free) and a UART's bytes wait in the HAL's ring buffer. A
//! task waits on an [`AtomicWaker`] that the protocol side wakes after it frees space or queues
//! data; the protocol side sleeps with `WFE` and wakes on the driver's interrupts.

use core::convert::Infallible;

use crate::fmt::{error, info};
use core::future::poll_fn;
use core::task::Poll;
use portable_atomic::{AtomicBool, Ordering};

use embassy_sync::waitqueue::AtomicWaker;
use embedded_hal::digital::{OutputPin, PinState};
use embedded_io::{Error as _, ErrorType, Read, Write};
use heapless::spsc::{Consumer, Producer, Queue};
use static_cell::ConstStaticCell;

/// Length of each direction's queue; heapless's `Queue<u8, N>` holds `N - 1` bytes. The receive
/// queue holds several protocol lines (`MAX_LINE` is 512), so a host that sends ahead is not
/// throttled while a line is parsed.
pub const QUEUE_LEN: usize = 2048;

/// One direction's bytes.
pub type ByteQueue = Queue<u8, QUEUE_LEN>;

static RX_QUEUE: ConstStaticCell<ByteQueue> = ConstStaticCell::new(Queue::new());
static TX_QUEUE: ConstStaticCell<ByteQueue> = ConstStaticCell::new(Queue::new());
/// Woken when the protocol loop has taken received bytes (space for the driver to deliver).
static RX_SPACE: AtomicWaker = AtomicWaker::new();
/// Woken when the protocol loop has queued bytes to send.
static TX_DATA: AtomicWaker = AtomicWaker::new();
/// Set by the driver once it has flushed its HAL's buffer with the send queue empty; cleared
/// whenever it takes bytes from the queue. [`SerialTx::flush`] waits for it, so that a `QUIT`
/// reply is on the wire before the chip resets (or QEMU exits).
static TX_SENT: AtomicBool = AtomicBool::new(true);

/// Both ends of both queues. [`take`] hands it out once.
pub struct Link {
    /// What the protocol loop reads.
    pub serial_rx: SerialRx,
    /// What the protocol loop writes.
    pub serial_tx: SerialTx,
    /// The driver's ends.
    pub wire: Wire,
}

/// The driver's ends of the link, which a board's serial task moves bytes through.
pub struct Wire {
    /// Where the driver puts the bytes it receives.
    pub rx: WireRx,
    /// Where the driver takes the bytes it sends.
    pub tx: WireTx,
}

/// The link, the first time; `None` after that (each queue has one producer and one consumer).
pub fn take() -> Option<Link> {
    let (rx_in, rx_out) = RX_QUEUE.try_take()?.split();
    let (tx_in, tx_out) = TX_QUEUE.try_take()?.split();
    Some(Link {
        serial_rx: SerialRx { queue: rx_out },
        serial_tx: SerialTx { queue: tx_in },
        wire: Wire {
            rx: WireRx { queue: rx_in },
            tx: WireTx { queue: tx_out },
        },
    })
}

/// What a HAL board's `main` does once its HAL is up and its serial executor started: takes the
/// link, hands the driver's ends to `start_serial` (which spawns the board's serial task for
/// board.toml's `transport` on that executor), and serves the protocol in thread mode
/// ([`serve`]).
pub fn run_board<P: OutputPin>(
    start_serial: impl FnOnce(Wire),
    led: ActivityLed<P>,
    reset: fn() -> Infallible,
) -> ! {
    let link = take().expect("the serial link is taken once, here");
    start_serial(link.wire);
    serve(link.serial_rx, link.serial_tx, led, reset)
}

/// Defines `SERIAL_EXECUTOR`, the interrupt executor that runs a Cortex-M HAL board's serial
/// tasks above the protocol loop, and the handler of `$vector` that runs it: a vector that no
/// driver of the board enables (a spare UART's, or a software interrupt). `$hal` is the board's
/// embassy HAL crate, whose `interrupt` attribute binds the handler. Start it with
/// `SERIAL_EXECUTOR.start(interrupt::$vector)` after setting the vector's priority.
#[macro_export]
macro_rules! serial_executor {
    ($hal:ident, $vector:ident) => {
        /// Runs the serial tasks, at a priority above thread mode.
        static SERIAL_EXECUTOR: embassy_executor::InterruptExecutor =
            embassy_executor::InterruptExecutor::new();

        #[$hal::interrupt]
        unsafe fn $vector() {
            // SAFETY: the vector is this executor's alone: no driver of the board enables it,
            // and `SERIAL_EXECUTOR.start` is given it.
            unsafe { SERIAL_EXECUTOR.on_interrupt() }
        }
    };
}

/// The sizes of the HAL UART drivers' own ring buffers (the HAL's receive interrupt fills
/// `UART_RX_BUFFER`; `UART_TX_BUFFER` holds what it still has to send).
pub const UART_RX_BUFFER: usize = 1024;
/// See [`UART_RX_BUFFER`].
pub const UART_TX_BUFFER: usize = 256;

/// Sleeps until an interrupt has run: the driver's, which moves bytes through the queues. An
/// interrupt between the caller's check and the `WFE` sets the event register, so `WFE` returns
/// at once and no wake-up is lost.
fn wait_for_interrupt() {
    #[cfg(target_arch = "arm")]
    cortex_m::asm::wfe();
    #[cfg(not(target_arch = "arm"))]
    core::hint::spin_loop();
}

/// The protocol loop's input: blocks until the driver has delivered at least one byte. A serial
/// link has no end of input, so a read never returns `Ok(0)` for a non-empty buffer.
pub struct SerialRx {
    queue: Consumer<'static, u8>,
}

/// The protocol loop's output: blocks while the send queue is full.
pub struct SerialTx {
    queue: Producer<'static, u8>,
}

impl ErrorType for SerialRx {
    type Error = Infallible;
}

impl ErrorType for SerialTx {
    type Error = Infallible;
}

impl Read for SerialRx {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let mut n = 0;
            for slot in buf.iter_mut() {
                let Some(byte) = self.queue.dequeue() else {
                    break;
                };
                *slot = byte;
                n += 1;
            }
            if n > 0 {
                RX_SPACE.wake();
                return Ok(n);
            }
            wait_for_interrupt();
        }
    }
}

impl Write for SerialTx {
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let mut n = 0;
            for &byte in buf {
                if self.queue.enqueue(byte).is_err() {
                    break;
                }
                n += 1;
            }
            if n > 0 {
                TX_DATA.wake();
                return Ok(n);
            }
            wait_for_interrupt();
        }
    }

    /// Waits until the driver has sent every queued byte: taken from the queue and flushed
    /// out of the HAL's own buffer ([`TX_SENT`]).
    fn flush(&mut self) -> Result<(), Infallible> {
        while !(self.queue.is_empty() && TX_SENT.load(Ordering::Acquire)) {
            TX_DATA.wake();
            wait_for_interrupt();
        }
        Ok(())
    }
}

/// The driver's side of the receive queue.
pub struct WireRx {
    queue: Producer<'static, u8>,
}

impl WireRx {
    /// Queues `bytes` for the protocol loop, waiting for space as often as needed: every byte
    /// gets through. While it waits, `hold` holds the driver's receive back (see
    /// [`pump_uart`]): it is called with `true` before the wait and `false` after.
    pub async fn deliver(&mut self, mut bytes: &[u8], hold: &mut impl FnMut(bool)) {
        while !bytes.is_empty() {
            if !self.queue.ready() {
                hold(true);
                poll_fn(|cx| {
                    RX_SPACE.register(cx.waker());
                    if self.queue.ready() {
                        Poll::Ready(())
                    } else {
                        Poll::Pending
                    }
                })
                .await;
                hold(false);
            }
            while let Some((&byte, rest)) = bytes.split_first() {
                if self.queue.enqueue(byte).is_err() {
                    break;
                }
                bytes = rest;
            }
        }
    }
}

/// The driver's side of the send queue.
pub struct WireTx {
    queue: Consumer<'static, u8>,
}

impl WireTx {
    /// Waits for queued output and moves up to `buf.len()` bytes of it into `buf`; returns how
    /// many (at least one, for a non-empty `buf`).
    pub async fn next_chunk(&mut self, buf: &mut [u8]) -> usize {
        if buf.is_empty() {
            return 0;
        }
        poll_fn(|cx| {
            TX_DATA.register(cx.waker());
            if self.queue.ready() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        TX_SENT.store(false, Ordering::Release);
        let mut n = 0;
        for slot in buf.iter_mut() {
            let Some(byte) = self.queue.dequeue() else {
                break;
            };
            *slot = byte;
            n += 1;
        }
        n
    }

    /// Records that every byte taken so far is sent, if the queue is empty: call it after the
    /// HAL's buffer is flushed.
    fn mark_sent(&self) {
        if !self.queue.ready() {
            TX_SENT.store(true, Ordering::Release);
        }
    }
}

/// The USB device that `builder` (from [`UsbDescriptors::builder`]) builds with one CDC-ACM
/// serial port, and that port, whose class keeps its state in `state`: run the device beside
/// [`pump_cdc_acm`] over the port. A plain function, not an async one: the device and the class
/// live in the board's task, whose future then holds no builder (352 B less RAM on the STM32H743).
pub fn cdc_acm_device<'d, D: embassy_usb::driver::Driver<'d>>(
    mut builder: embassy_usb::Builder<'d, D>,
    state: &'d mut embassy_usb::class::cdc_acm::State<'d>,
) -> (
    embassy_usb::UsbDevice<'d, D>,
    embassy_usb::class::cdc_acm::CdcAcmClass<'d, D>,
) {
    let class = embassy_usb::class::cdc_acm::CdcAcmClass::new(&mut builder, state, 64);
    (builder.build(), class)
}

/// Carries the link over USB CDC-ACM, forever: bytes from the host's OUT packets to the protocol
/// loop, queued output in IN packets. While no host has the port configured, output is dropped
/// (nobody would read it) so the protocol loop never blocks on a missing host.
pub async fn pump_cdc_acm<'d, D: embassy_usb::driver::Driver<'d>>(
    class: embassy_usb::class::cdc_acm::CdcAcmClass<'d, D>,
    wire: Wire,
) {
    let Wire {
        rx: mut wire_rx,
        tx: mut wire_tx,
    } = wire;
    let (mut sender, mut receiver) = class.split();
    let inbound = async {
        let mut packet = [0u8; 64];
        loop {
            receiver.wait_connection().await;
            info!("usb: connected");
            while let Ok(n) = receiver.read_packet(&mut packet).await {
                // USB holds the host back by itself: it NAKs while this waits.
                let data = packet.get(..n).unwrap_or_default();
                wire_rx.deliver(data, &mut |_| {}).await;
            }
            info!("usb: disconnected");
        }
    };
    let outbound = async {
        let mut packet = [0u8; 64];
        let max = usize::from(sender.max_packet_size()).clamp(1, packet.len());
        loop {
            let chunk = packet.get_mut(..max).unwrap_or_default();
            let n = wire_tx.next_chunk(chunk).await;
            // An error means no host has the port configured: dropped, see above.
            let _ = sender
                .write_packet(chunk.get(..n).unwrap_or_default())
                .await;
            wire_tx.mark_sent();
        }
    };
    embassy_futures::join::join(inbound, outbound).await;
}

/// Carries the link over an interrupt-driven UART (the HAL's buffered driver, whose receive
/// interrupt fills its own ring buffer), forever. A receive error (overrun, framing, noise) is
/// logged and the stream goes on: the protocol's line reader rejects a damaged line.
///
/// `hold_rx(true)` is called when the receive queue is full and bytes wait for it, and
/// `hold_rx(false)` once it has room again. A board whose HAL empties the data register into
/// its ring even when the ring is full, dropping what does not fit (embassy-stm32's buffered
/// USART), masks its receive interrupt there, so that bytes wait in the data register instead:
/// a UART model then holds input back (QEMU's does), and the chip overruns, as any UART
/// without flow control does when the host sends faster than the firmware reads. Elsewhere it
/// does nothing.
pub async fn pump_uart<R, W>(mut rx: R, mut tx: W, wire: Wire, mut hold_rx: impl FnMut(bool))
where
    R: embedded_io_async::Read,
    W: embedded_io_async::Write,
{
    let Wire {
        rx: mut wire_rx,
        tx: mut wire_tx,
    } = wire;
    let inbound = async {
        let mut buf = [0u8; 64];
        loop {
            match rx.read(&mut buf).await {
                Ok(n) => {
                    let data = buf.get(..n).unwrap_or_default();
                    wire_rx.deliver(data, &mut hold_rx).await;
                }
                Err(e) => error!("uart: receive error {}", kind_name(e.kind())),
            }
        }
    };
    let outbound = async {
        let mut buf = [0u8; 64];
        loop {
            let n = wire_tx.next_chunk(&mut buf).await;
            if let Err(e) = tx.write_all(buf.get(..n).unwrap_or_default()).await {
                error!("uart: send error {}", kind_name(e.kind()));
            }
            if !wire_tx.queue.ready() {
                if let Err(e) = tx.flush().await {
                    error!("uart: send error {}", kind_name(e.kind()));
                }
                wire_tx.mark_sent();
            }
        }
    };
    embassy_futures::join::join(inbound, outbound).await;
}

/// A short name of an I/O error kind, for the log.
fn kind_name(kind: embedded_io::ErrorKind) -> &'static str {
    use embedded_io::ErrorKind as K;
    match kind {
        K::InvalidData => "invalid data (framing or parity)",
        K::OutOfMemory => "overrun",
        K::Interrupted => "interrupted",
        _ => "other",
    }
}

/// A board's activity LED (any embedded-hal 1.0 output pin): lit while the firmware works on
/// a request, dark while it waits for the host.
pub struct ActivityLed<P: OutputPin> {
    pin: P,
    /// The LED is lit by a low level (a pin that sinks its current).
    active_low: bool,
}

impl<P: OutputPin> ActivityLed<P> {
    /// An LED lit by a high level on `pin`.
    pub fn active_high(pin: P) -> Self {
        Self {
            pin,
            active_low: false,
        }
    }

    /// An LED lit by a low level on `pin`.
    pub fn active_low(pin: P) -> Self {
        Self {
            pin,
            active_low: true,
        }
    }

    fn set(&mut self, lit: bool) {
        // A GPIO output cannot fail on these chips; an error would only leave the LED as it is.
        let _ = self.pin.set_state(PinState::from(lit != self.active_low));
    }
}

/// Resets a Cortex-M chip (SYSRESETREQ): the `reset` of [`serve`] on the Arm boards.
#[cfg(target_arch = "arm")]
pub fn reset_cortex_m() -> Infallible {
    cortex_m::peripheral::SCB::sys_reset()
}

/// The LED of a board that has none to drive: every level is accepted and nothing happens.
pub struct NoLed;

impl embedded_hal::digital::ErrorType for NoLed {
    type Error = Infallible;
}

impl OutputPin for NoLed {
    fn set_low(&mut self) -> Result<(), Infallible> {
        Ok(())
    }

    fn set_high(&mut self) -> Result<(), Infallible> {
        Ok(())
    }
}

/// The protocol loop's input, with the activity LED: dark while a read waits for the host, lit
/// once bytes have come.
struct WithLed<'a, P: OutputPin> {
    rx: &'a mut SerialRx,
    led: &'a mut ActivityLed<P>,
}

impl<P: OutputPin> ErrorType for WithLed<'_, P> {
    type Error = Infallible;
}

impl<P: OutputPin> Read for WithLed<'_, P> {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, Infallible> {
        if !self.rx.queue.ready() {
            self.led.set(false);
        }
        let n = self.rx.read(buf)?;
        self.led.set(true);
        Ok(n)
    }
}

/// Serves the protocol on the link's serial ends in thread mode: [`crate::run`], then after
/// `QUIT` the reply sent and `reset` called (the chip reboots to `READY`; it never returns,
/// which its `Infallible` says on stable Rust). A start-up failure (the model or the arena) is
/// logged and the chip halts with the LED lit: a reset would only repeat it. Built with
/// semihosting (cfg `semihosting`: a HAL board crate's `defmt-semihosting` build, the one QEMU
/// runs), both end through the semihosting exit instead, with the code as QEMU's exit status.
pub fn serve<P: OutputPin>(
    mut rx: SerialRx,
    mut tx: SerialTx,
    mut led: ActivityLed<P>,
    reset: fn() -> Infallible,
) -> ! {
    info!("serving the protocol on {}", crate::board::TRANSPORT);
    led.set(true);
    let mut input = WithLed {
        rx: &mut rx,
        led: &mut led,
    };
    let code = match crate::run(&mut input, &mut tx) {
        Ok(()) => 0,
        Err(code) => {
            error!("firmware stopped with exit code {}", code);
            code
        }
    };
    let _ = tx.flush();
    #[cfg(semihosting)]
    {
        let _ = reset;
        semihosting::process::exit(code)
    }
    #[cfg(not(semihosting))]
    {
        if code == 0 {
            match reset() {}
        }
        loop {
            wait_for_interrupt();
        }
    }
}

/// Logs board.toml's clock beside `measured_hz`, the clock the HAL set (`what` names it in the
/// log); another speed than board.toml's `clock_hz` is an error.
pub fn check_clock(what: &str, measured_hz: u32) {
    info!(
        "board.toml: clock_hz {}, {}",
        crate::board::CLOCK_HZ,
        crate::board::CLOCKS
    );
    if measured_hz != crate::board::CLOCK_HZ {
        error!(
            "{} is {} Hz, board.toml says {} Hz",
            what,
            measured_hz,
            crate::board::CLOCK_HZ
        );
    }
}

/// Baud rate of the HAL boards' UARTs (8N1, no flow control), as the QEMU boards' drivers.
pub const UART_BAUD: u32 = 115_200;

/// USB vendor and product ID: pid.codes' test ID (1209:0001), which the host's CDC-ACM driver
/// binds by class, not by ID. A product that ships needs an ID of its own.
pub const USB_VID_PID: (u16, u16) = (0x1209, 0x0001);

/// The buffers a USB device's descriptors are built in, and its identity: manufacturer
/// "loglinear", product "loglinear serial", serial number the board's name.
pub struct UsbDescriptors {
    config: [u8; 256],
    bos: [u8; 256],
    control: [u8; 64],
}

impl Default for UsbDescriptors {
    fn default() -> Self {
        Self::new()
    }
}

impl UsbDescriptors {
    /// Empty buffers.
    pub const fn new() -> Self {
        Self {
            config: [0; 256],
            bos: [0; 256],
            control: [0; 64],
        }
    }

    /// An embassy-usb device builder on `driver`, with the identity above (bus-powered,
    /// 100 mA); add the CDC-ACM class to it and build.
    pub fn builder<'d, D: embassy_usb::driver::Driver<'d>>(
        &'d mut self,
        driver: D,
    ) -> embassy_usb::Builder<'d, D> {
        let mut config = embassy_usb::Config::new(USB_VID_PID.0, USB_VID_PID.1);
        config.manufacturer = Some("loglinear");
        config.product = Some("loglinear serial");
        config.serial_number = Some(crate::board::BOARD);
        config.max_power = 100;
        config.max_packet_size_0 = 64;
        embassy_usb::Builder::new(
            driver,
            config,
            &mut self.config,
            &mut self.bos,
            &mut [],
            &mut self.control,
        )
    }
}
