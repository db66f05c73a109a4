//! The UART transport of the serial protocol: blocking polled drivers with no DMA, that
//! implement [`embedded_io::Read`] and [`Write`](embedded_io::Write), one per board, picked at
//! build time by the board's `uart = "<driver>"` key (cfg `uart`, set by `build.rs` when the
//! board's `transport` is `uart`). All of them run at 115200 baud, 8 data bits, no parity, one
//! stop bit, no flow control.
//!
//! | `uart` | board | peripheral, pins | tested |
//! | --- | --- | --- | --- |
//! | `cmsdk-apb` | `mps2-an386`, `mps2-an500` | CMSDK APB UART0 @0x4000_4000 | QEMU |
//! | `ns16550` | `riscv-virt` | NS16550A @0x1000_0000 | QEMU |
//! | `nrf51` | `microbit` | UART0 @0x4000_2000, TX P0.24, RX P0.25 | QEMU |
//!
//! The real chips (stm32h743, nrf52840, rp2040, esp32c3, b-l475e-iot01a) have crates of their own
//! in `boards/`, on their vendors' HALs, with interrupt-driven UARTs and USB (`src/link.rs`).
//!
//! This is the only module besides the arena and the stack painter that uses `unsafe`: the
//! volatile accesses of [`Block`], each argued once there. A driver only names a block's base
//! address (cited from the chip's manual) and register offsets inside it.
//!
//! Polled means a byte that arrives while the firmware is busy (a `GEN` running) waits in the
//! peripheral's receive buffer (1 byte on CMSDK, nRF 6, 16550 1 without its FIFO) and later
//! bytes may be lost on real hardware; a host sends one request and waits for its final reply
//! line (`loglinear serial` does). QEMU holds input back instead.

use core::ptr;

use embedded_io::{ErrorKind, ErrorType, Read, Write};

/// Baud rate of every driver.
#[allow(dead_code)] // the nRF51 driver writes its BAUDRATE table value for this rate instead
pub const BAUD: u32 = 115_200;

/// A peripheral's register block: `SPAN` bytes of device memory at `base`. Offsets are masked
/// into the block and aligned to the access width, so no access can leave it.
#[derive(Clone, Copy)]
struct Block<const SPAN: usize> {
    base: usize,
}

impl<const SPAN: usize> Block<SPAN> {
    /// # Safety
    ///
    /// `base .. base + SPAN` must be one peripheral's register block on this chip (`SPAN` a power
    /// of two): device memory that is always mapped, holds no Rust object, and where 8- and
    /// 32-bit reads and writes of any aligned address only change the peripheral's state (what
    /// the driver then does with the peripheral is the driver's business, not memory safety).
    const unsafe fn new(base: usize) -> Self {
        Self { base }
    }

    /// The address of the `W`-byte register at `offset`, inside the block and aligned.
    fn addr<const W: usize>(self, offset: usize) -> usize {
        self.base + (offset & (SPAN - 1) & !(W - 1))
    }

    fn read(self, offset: usize) -> u32 {
        // SAFETY: `new`'s contract makes every address of the block a readable device register;
        // `addr` keeps the access inside the block and 4-aligned. No reference is made and no
        // Rust object lives there.
        unsafe { ptr::read_volatile(self.addr::<4>(offset) as *const u32) }
    }

    fn write(self, offset: usize, value: u32) {
        // SAFETY: as in `read`: an aligned address inside the block, device memory that no Rust
        // object occupies, writable by `new`'s contract.
        unsafe { ptr::write_volatile(self.addr::<4>(offset) as *mut u32, value) }
    }

    #[allow(dead_code)] // only the 16550's registers are bytes
    fn read8(self, offset: usize) -> u8 {
        // SAFETY: as in `read`, for a byte access (always aligned).
        unsafe { ptr::read_volatile(self.addr::<1>(offset) as *const u8) }
    }

    #[allow(dead_code)]
    fn write8(self, offset: usize, value: u8) {
        // SAFETY: as in `write`, for a byte access.
        unsafe { ptr::write_volatile(self.addr::<1>(offset) as *mut u8, value) }
    }

    #[allow(dead_code)]
    fn modify(self, offset: usize, f: impl FnOnce(u32) -> u32) {
        self.write(offset, f(self.read(offset)));
    }
}

/// Receive half of the UART: `read` blocks until at least one byte is there.
pub struct UartRx(());

/// Transmit half of the UART: `write` blocks until every byte is in the transmitter.
pub struct UartTx(());

/// Sets the UART up (clocks, pins, baud rate, receiver and transmitter on). Idempotent: the
/// panic handler calls it again to report.
pub fn open() -> Result<(UartRx, UartTx), ErrorKind> {
    driver::init();
    Ok((UartRx(()), UartTx(())))
}

impl ErrorType for UartRx {
    type Error = ErrorKind;
}

impl ErrorType for UartTx {
    type Error = ErrorKind;
}

impl Read for UartRx {
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, ErrorKind> {
        let mut n = 0;
        for slot in buf.iter_mut() {
            // Wait for the first byte only; then take what is already there.
            let byte = loop {
                match driver::read_byte() {
                    Some(b) => break Some(b),
                    None if n == 0 => core::hint::spin_loop(),
                    None => break None,
                }
            };
            let Some(b) = byte else { break };
            *slot = b;
            n += 1;
        }
        Ok(n)
    }
}

impl Write for UartTx {
    fn write(&mut self, buf: &[u8]) -> Result<usize, ErrorKind> {
        for &b in buf {
            driver::write_byte(b);
        }
        Ok(buf.len())
    }

    /// Waits until the last byte has left the transmitter (before a reset, say).
    fn flush(&mut self) -> Result<(), ErrorKind> {
        driver::flush();
        Ok(())
    }
}

/// ARM CMSDK APB UART (Cortex-M System Design Kit TRM, ARM DDI 0479, "APB UART"): UART0 of the
/// MPS2 FPGA images AN386 and AN500 at 0x4000_4000 (AN386/AN500 application notes, memory
/// map; QEMU hw/arm/mps2.c). Clocked by the 25 MHz APB clock.
#[cfg(uart = "cmsdk-apb")]
mod driver {
    use super::{Block, BAUD};

    // SAFETY: 0x4000_4000..0x4000_5000 is UART0's 4 KiB APB slot on MPS2 AN386/AN500.
    const UART0: Block<0x1000> = unsafe { Block::new(0x4000_4000) };
    const DATA: usize = 0x000;
    const STATE: usize = 0x004;
    const CTRL: usize = 0x008;
    const BAUDDIV: usize = 0x010;
    const STATE_TX_FULL: u32 = 1 << 0;
    const STATE_RX_FULL: u32 = 1 << 1;
    const STATE_RX_OVERRUN: u32 = 1 << 3;
    const CTRL_TX_EN: u32 = 1 << 0;
    const CTRL_RX_EN: u32 = 1 << 1;
    /// APB clock of the MPS2 images.
    const PCLK_HZ: u32 = 25_000_000;

    pub fn init() {
        // BAUDDIV must be at least 16; 25 MHz / 115200 = 217.
        UART0.write(BAUDDIV, PCLK_HZ / BAUD);
        UART0.write(CTRL, CTRL_TX_EN | CTRL_RX_EN);
    }

    pub fn read_byte() -> Option<u8> {
        let state = UART0.read(STATE);
        if state & STATE_RX_OVERRUN != 0 {
            UART0.write(STATE, STATE_RX_OVERRUN); // write 1 to clear
        }
        (state & STATE_RX_FULL != 0).then(|| UART0.read(DATA) as u8)
    }

    pub fn write_byte(b: u8) {
        while UART0.read(STATE) & STATE_TX_FULL != 0 {
            core::hint::spin_loop();
        }
        UART0.write(DATA, u32::from(b));
    }

    pub fn flush() {
        // No "transmitter empty" bit: the buffer drained is as far as software can see.
        while UART0.read(STATE) & STATE_TX_FULL != 0 {
            core::hint::spin_loop();
        }
    }
}

/// NS16550A: QEMU `virt`'s UART0 at 0x1000_0000, byte registers one apart, clocked at
/// 3.6864 MHz (QEMU hw/riscv/virt.c and its device tree: `clock-frequency = 0x384000`).
#[cfg(uart = "ns16550")]
mod driver {
    use super::{Block, BAUD};

    // SAFETY: 0x1000_0000..0x1000_0100 is the virt machine's NS16550A register window.
    const UART0: Block<0x100> = unsafe { Block::new(0x1000_0000) };
    const RBR_THR_DLL: usize = 0;
    const IER_DLM: usize = 1;
    const LCR: usize = 3;
    const LSR: usize = 5;
    const LCR_DLAB: u8 = 0x80;
    const LCR_8N1: u8 = 0x03;
    const LSR_DATA_READY: u8 = 1 << 0;
    const LSR_THR_EMPTY: u8 = 1 << 5;
    const LSR_TX_EMPTY: u8 = 1 << 6;
    const CLOCK_HZ: u32 = 3_686_400;

    pub fn init() {
        let div = CLOCK_HZ / (16 * BAUD); // 2
        UART0.write8(LCR, LCR_DLAB);
        UART0.write8(RBR_THR_DLL, div as u8);
        UART0.write8(IER_DLM, (div >> 8) as u8);
        UART0.write8(LCR, LCR_8N1);
        // No interrupts. The FIFO control register is left alone: switching the FIFOs on clears
        // them, and bytes that arrived before this point would be lost. Without them the
        // receiver holds one byte (QEMU keeps the rest back until it is read).
        UART0.write8(IER_DLM, 0);
    }

    pub fn read_byte() -> Option<u8> {
        (UART0.read8(LSR) & LSR_DATA_READY != 0).then(|| UART0.read8(RBR_THR_DLL))
    }

    pub fn write_byte(b: u8) {
        while UART0.read8(LSR) & LSR_THR_EMPTY == 0 {
            core::hint::spin_loop();
        }
        UART0.write8(RBR_THR_DLL, b);
    }

    pub fn flush() {
        while UART0.read8(LSR) & LSR_TX_EMPTY == 0 {
            core::hint::spin_loop();
        }
    }
}

/// Nordic UART0 (legacy UART, no EasyDMA) at 0x4000_2000: nRF51 Series Reference Manual v3.0,
/// chapter 29. GPIO P0 at 0x5000_0000 (nRF51 RM chapter 14). The UART runs from HFCLK, which it
/// requests itself.
#[cfg(uart = "nrf51")]
mod driver {
    use super::Block;

    // SAFETY: 0x4000_2000..0x4000_3000 is UART0's peripheral slot (ID 2) on the nRF51.
    const UART0: Block<0x1000> = unsafe { Block::new(0x4000_2000) };
    // SAFETY: 0x5000_0000..0x5000_1000 is GPIO port P0's block on the nRF51.
    const P0: Block<0x1000> = unsafe { Block::new(0x5000_0000) };
    const TASKS_STARTRX: usize = 0x000;
    const TASKS_STARTTX: usize = 0x008;
    const EVENTS_RXDRDY: usize = 0x108;
    const EVENTS_TXDRDY: usize = 0x11C;
    const EVENTS_ERROR: usize = 0x124;
    const ERRORSRC: usize = 0x480;
    const ENABLE: usize = 0x500;
    const PSELTXD: usize = 0x50C;
    const PSELRXD: usize = 0x514;
    const RXD: usize = 0x518;
    const TXD: usize = 0x51C;
    const BAUDRATE: usize = 0x524;
    const CONFIG: usize = 0x56C;
    const ENABLE_UART: u32 = 4;
    /// BAUDRATE value for 115200 baud (both manuals' table).
    const BAUD_115200: u32 = 0x01D7_E000;
    const GPIO_OUTSET: usize = 0x508;
    const GPIO_PIN_CNF: usize = 0x700;
    /// PIN_CNF: output, input buffer disconnected.
    const PIN_OUTPUT: u32 = 0b11;
    /// PIN_CNF: input, buffer connected, no pull.
    const PIN_INPUT: u32 = 0b00;

    /// micro:bit v1: the interface MCU's USB serial is on P0.24 (TX) and P0.25 (RX).
    const PINS: (u32, u32) = (24, 25);

    pub fn init() {
        let (tx, rx) = PINS;
        // TXD idles high; the pins keep their level if the UART is ever disabled.
        P0.write(GPIO_OUTSET, 1 << tx);
        P0.write(GPIO_PIN_CNF + 4 * tx as usize, PIN_OUTPUT);
        P0.write(GPIO_PIN_CNF + 4 * rx as usize, PIN_INPUT);
        UART0.write(PSELTXD, tx);
        UART0.write(PSELRXD, rx);
        UART0.write(BAUDRATE, BAUD_115200);
        UART0.write(CONFIG, 0); // no parity, no flow control
        UART0.write(ENABLE, ENABLE_UART);
        UART0.write(EVENTS_RXDRDY, 0);
        UART0.write(EVENTS_TXDRDY, 0);
        UART0.write(TASKS_STARTTX, 1);
        UART0.write(TASKS_STARTRX, 1);
    }

    pub fn read_byte() -> Option<u8> {
        if UART0.read(EVENTS_ERROR) != 0 {
            // Overrun, framing or break: clear and go on (the protocol resyncs on newlines).
            UART0.write(EVENTS_ERROR, 0);
            UART0.write(ERRORSRC, 0xF); // write 1 to clear
        }
        if UART0.read(EVENTS_RXDRDY) == 0 {
            return None;
        }
        // Clear the event before reading RXD, so a byte that follows sets it again.
        UART0.write(EVENTS_RXDRDY, 0);
        Some(UART0.read(RXD) as u8)
    }

    pub fn write_byte(b: u8) {
        UART0.write(TXD, u32::from(b));
        while UART0.read(EVENTS_TXDRDY) == 0 {
            core::hint::spin_loop();
        }
        UART0.write(EVENTS_TXDRDY, 0);
    }

    pub fn flush() {
        // `write_byte` returns only once TXDRDY says the byte has been sent.
    }
}
