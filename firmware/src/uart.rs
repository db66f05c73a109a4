//! The UART transport of the serial protocol: blocking, polled drivers (no interrupts, no DMA)
//! that implement [`embedded_io::Read`] and [`Write`](embedded_io::Write), one per board, picked
//! at build time by the board's `uart = "<driver>"` key (cfg `uart`, set by `build.rs` when the
//! board's `transport` is `uart`). All of them run at 115200 baud, 8 data bits, no parity, one
//! stop bit, no flow control.
//!
//! | `uart` | board | peripheral, pins | tested |
//! | --- | --- | --- | --- |
//! | `cmsdk-apb` | `mps2-an386`, `mps2-an500` | CMSDK APB UART0 @0x4000_4000 | QEMU |
//! | `ns16550` | `riscv-virt` | NS16550A @0x1000_0000 | QEMU |
//! | `nrf51` | `microbit` | UART0 @0x4000_2000, TX P0.24, RX P0.25 | QEMU |
//! | `nrf52840` | `nrf52840` | UART0 @0x4000_2000, TX P0.06, RX P0.08 (DK VCOM) | built only |
//! | `stm32h7-usart3` | `stm32h743` | USART3 @0x4000_4800, TX PD8, RX PD9 (Nucleo VCP) | built only |
//! | `rp2040` | `rp2040` | UART0 @0x4003_4000, TX GPIO0, RX GPIO1 (Pico) | built only |
//! | `esp32c3` | `esp32c3` | UART0 @0x6000_0000, as the ROM left it | built only |
//!
//! This is the only module besides the arena and the stack painter that uses `unsafe`: the
//! volatile accesses of [`Block`], each argued once there. A driver only names a block's base
//! address (cited from the chip's manual) and register offsets inside it.
//!
//! Polled means a byte that arrives while the firmware is busy (a `GEN` running) waits in the
//! peripheral's receive buffer (1 byte on CMSDK, nRF 6, STM32 1, PL011 32, 16550 1 without its
//! FIFO, ESP32-C3 128) and later bytes may be lost on real hardware; a host sends one request
//! and waits for its final reply line (`loglinear serial` does). QEMU holds input back instead.

use core::ptr;

use embedded_io::{ErrorKind, ErrorType, Read, Write};

/// Baud rate of every driver.
#[allow(dead_code)] // esp32c3 keeps the ROM's setting, which is this rate
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
        // `addr` keeps the access inside the block and 4-aligned. No reference is made, and the
        // firmware is single-threaded with no interrupts, so nothing races with the access.
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
/// chapter 29; nRF52840 Product Specification v1.7, section 6.33 (the same registers; the
/// nRF52840's PSEL.TXD/RXD take the pin number in bits 0-4, port 0, connected). GPIO P0 at
/// 0x5000_0000 (nRF51 RM chapter 14, nRF52840 PS 6.9). The UART runs from HFCLK, which it
/// requests itself.
#[cfg(any(uart = "nrf51", uart = "nrf52840"))]
mod driver {
    use super::Block;

    // SAFETY: 0x4000_2000..0x4000_3000 is UART0's peripheral slot (ID 2) on nRF51 and nRF52840.
    const UART0: Block<0x1000> = unsafe { Block::new(0x4000_2000) };
    // SAFETY: 0x5000_0000..0x5000_1000 is GPIO port P0's block on nRF51 and nRF52840.
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
    #[cfg(uart = "nrf51")]
    const PINS: (u32, u32) = (24, 25);
    /// nRF52840-DK: the J-Link VCOM is on P0.06 (TX) and P0.08 (RX).
    #[cfg(uart = "nrf52840")]
    const PINS: (u32, u32) = (6, 8);

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

/// STM32H743 USART3 on PD8 (TX) / PD9 (RX), alternate function 7: the Nucleo-H743ZI's ST-LINK
/// virtual COM port (Nucleo-144 user manual UM2407). RM0433 (STM32H742/743/750/753 reference
/// manual): memory map: RCC 0x5802_4400, GPIOD 0x5802_0C00, USART3 0x4000_4800; RCC chapter:
/// RCC_AHB4ENR 0x0E0 (GPIODEN bit 3), RCC_APB1LENR 0x0E8 (USART3EN bit 18); GPIO chapter:
/// MODER 0x00, AFRH 0x24; USART chapter: CR1 0x00, BRR 0x0C, ISR 0x1C, ICR 0x20, RDR 0x24,
/// TDR 0x28. AF7 of PD8/PD9 is USART3 (STM32H743 datasheet DS12110, alternate functions). The firmware leaves the clocks as they are after reset: SYSCLK is
/// the 64 MHz HSI and every prescaler 1, so USART3's kernel clock (rcc_pclk1, the reset choice)
/// is 64 MHz.
#[cfg(uart = "stm32h7-usart3")]
mod driver {
    use super::{Block, BAUD};

    // SAFETY: 0x5802_4400..0x5802_4800 is the RCC block (RM0433 memory map).
    const RCC: Block<0x400> = unsafe { Block::new(0x5802_4400) };
    // SAFETY: 0x5802_0C00..0x5802_1000 is the GPIOD block.
    const GPIOD: Block<0x400> = unsafe { Block::new(0x5802_0C00) };
    // SAFETY: 0x4000_4800..0x4000_4C00 is the USART3 block.
    const USART3: Block<0x400> = unsafe { Block::new(0x4000_4800) };
    const RCC_AHB4ENR: usize = 0x0E0;
    const RCC_APB1LENR: usize = 0x0E8;
    const GPIODEN: u32 = 1 << 3;
    const USART3EN: u32 = 1 << 18;
    const GPIO_MODER: usize = 0x00;
    const GPIO_AFRH: usize = 0x24;
    const CR1: usize = 0x00;
    const BRR: usize = 0x0C;
    const ISR: usize = 0x1C;
    const ICR: usize = 0x20;
    const RDR: usize = 0x24;
    const TDR: usize = 0x28;
    const CR1_UE: u32 = 1 << 0;
    const CR1_RE: u32 = 1 << 2;
    const CR1_TE: u32 = 1 << 3;
    /// ISR: parity, framing, noise, overrun errors (bits 0-3; ICR clears them at the same bits).
    const ISR_ERRORS: u32 = 0xF;
    const ISR_RXNE: u32 = 1 << 5;
    const ISR_TC: u32 = 1 << 6;
    const ISR_TXE: u32 = 1 << 7;
    /// rcc_pclk1 after reset.
    const KERNEL_HZ: u32 = 64_000_000;

    pub fn init() {
        RCC.modify(RCC_AHB4ENR, |v| v | GPIODEN);
        RCC.modify(RCC_APB1LENR, |v| v | USART3EN);
        // Read back, so the clock is on before the first access to the peripheral.
        let _ = RCC.read(RCC_APB1LENR);
        // PD8, PD9: alternate function (MODER 0b10), AF7.
        GPIOD.modify(GPIO_MODER, |v| (v & !(0xF << 16)) | (0b1010 << 16));
        GPIOD.modify(GPIO_AFRH, |v| (v & !0xFF) | 0x77);
        USART3.write(CR1, 0);
        // Oversampling by 16: BRR = kernel clock / baud, rounded (556: 115 108 baud, -0.08 %).
        USART3.write(BRR, (KERNEL_HZ + BAUD / 2) / BAUD);
        USART3.write(CR1, CR1_UE | CR1_RE | CR1_TE);
    }

    pub fn read_byte() -> Option<u8> {
        let isr = USART3.read(ISR);
        if isr & ISR_ERRORS != 0 {
            // An overrun stops reception until ORE is cleared.
            USART3.write(ICR, isr & ISR_ERRORS);
        }
        (isr & ISR_RXNE != 0).then(|| USART3.read(RDR) as u8)
    }

    pub fn write_byte(b: u8) {
        while USART3.read(ISR) & ISR_TXE == 0 {
            core::hint::spin_loop();
        }
        USART3.write(TDR, u32::from(b));
    }

    pub fn flush() {
        while USART3.read(ISR) & ISR_TC == 0 {
            core::hint::spin_loop();
        }
    }
}

/// RP2040 UART0 (an Arm PL011) on GPIO0 (TX) / GPIO1 (RX), the Pico's default. RP2040
/// datasheet: address map (2.2.2); RESETS 0x4000_C000, RESET 0x0 / RESET_DONE 0x8, bits
/// IO_BANK0 5, PADS_BANK0 8, UART0 22 (2.14); XOSC 0x4002_4000, CTRL 0x00, STATUS 0x04,
/// STARTUP 0x0C (2.16); CLOCKS 0x4000_8000, CLK_REF_CTRL 0x30 (SRC bits 1:0, 2 = xosc_clksrc),
/// CLK_REF_SELECTED 0x38 (one-hot), CLK_SYS_CTRL 0x3C (SRC bit 0, 0 = clk_ref),
/// CLK_SYS_SELECTED 0x44, CLK_PERI_CTRL 0x48 (ENABLE bit 11, AUXSRC bits 7:5,
/// 4 = xosc_clksrc) (2.15); IO_BANK0 0x4001_4000, GPIOn_CTRL 0x04 + 8n, FUNCSEL 2 = UART (2.19);
/// UART0 0x4003_4000, UARTDR 0x000, UARTFR 0x018, UARTIBRD 0x024, UARTFBRD 0x028, UARTLCR_H
/// 0x02C, UARTCR 0x030 (4.2). After boot clk_ref and clk_sys run from the ring oscillator
/// (~6 MHz, not precise enough for a UART) and clk_peri is off. The driver starts the Pico's
/// 12 MHz crystal oscillator and runs clk_ref, clk_sys (through clk_ref) and clk_peri from it:
/// the PL011 wants its UARTCLK no faster than 5/3 of its bus clock. No PLL: the core then runs
/// at 12 MHz, not the 125 MHz of board.toml's `clock_hz`.
#[cfg(uart = "rp2040")]
mod driver {
    use super::{Block, BAUD};

    // SAFETY: each is one peripheral's 4 KiB register block in the RP2040 address map (the
    // atomic set/clear aliases above it are not used).
    const RESETS: Block<0x1000> = unsafe { Block::new(0x4000_C000) };
    // SAFETY: as above.
    const CLOCKS: Block<0x1000> = unsafe { Block::new(0x4000_8000) };
    // SAFETY: as above.
    const XOSC: Block<0x1000> = unsafe { Block::new(0x4002_4000) };
    // SAFETY: as above.
    const IO_BANK0: Block<0x1000> = unsafe { Block::new(0x4001_4000) };
    // SAFETY: as above.
    const UART0: Block<0x1000> = unsafe { Block::new(0x4003_4000) };
    const RESET: usize = 0x0;
    const RESET_DONE: usize = 0x8;
    const RESET_BITS: u32 = (1 << 5) | (1 << 8) | (1 << 22);
    const XOSC_CTRL: usize = 0x00;
    const XOSC_STATUS: usize = 0x04;
    const XOSC_STARTUP: usize = 0x0C;
    /// CTRL: ENABLE = 0xFAB (bits 23:12), FREQ_RANGE = 1_15MHZ (0xAA0).
    const XOSC_ENABLE_1_15MHZ: u32 = (0xFAB << 12) | 0xAA0;
    const XOSC_STABLE: u32 = 1 << 31;
    const XOSC_HZ: u32 = 12_000_000;
    const CLK_REF_CTRL: usize = 0x30;
    const CLK_REF_SELECTED: usize = 0x38;
    const CLK_REF_XOSC: u32 = 2;
    const CLK_SYS_CTRL: usize = 0x3C;
    const CLK_SYS_SELECTED: usize = 0x44;
    const CLK_PERI_CTRL: usize = 0x48;
    const CLK_PERI_ENABLE: u32 = 1 << 11;
    const CLK_PERI_XOSC: u32 = 4 << 5;
    const GPIO0_CTRL: usize = 0x04;
    const GPIO1_CTRL: usize = 0x0C;
    const FUNCSEL_UART: u32 = 2;
    const DR: usize = 0x000;
    const FR: usize = 0x018;
    const IBRD: usize = 0x024;
    const FBRD: usize = 0x028;
    const LCR_H: usize = 0x02C;
    const CR: usize = 0x030;
    const FR_BUSY: u32 = 1 << 3;
    const FR_RXFE: u32 = 1 << 4;
    const FR_TXFF: u32 = 1 << 5;
    /// LCR_H: 8 data bits (WLEN 0b11), FIFOs on.
    const LCR_H_8N1_FIFO: u32 = (0b11 << 5) | (1 << 4);
    /// CR: UARTEN, TXE, RXE.
    const CR_ENABLE: u32 = (1 << 0) | (1 << 8) | (1 << 9);

    pub fn init() {
        // Crystal oscillator on (start-up delay of ~1 ms, in units of 256 cycles), then stable.
        XOSC.write(XOSC_STARTUP, (XOSC_HZ / 1000).div_ceil(256));
        XOSC.write(XOSC_CTRL, XOSC_ENABLE_1_15MHZ);
        while XOSC.read(XOSC_STATUS) & XOSC_STABLE == 0 {
            core::hint::spin_loop();
        }
        // clk_ref (glitchless mux) from the crystal, and clk_sys from clk_ref (SRC 0).
        CLOCKS.write(CLK_REF_CTRL, CLK_REF_XOSC);
        while CLOCKS.read(CLK_REF_SELECTED) != 1 << CLK_REF_XOSC {
            core::hint::spin_loop();
        }
        CLOCKS.write(CLK_SYS_CTRL, 0);
        while CLOCKS.read(CLK_SYS_SELECTED) != 1 {
            core::hint::spin_loop();
        }
        // clk_peri from the crystal: stop it before changing its (glitchy) source, then start.
        CLOCKS.write(CLK_PERI_CTRL, 0);
        for _ in 0..16 {
            core::hint::spin_loop();
        }
        CLOCKS.write(CLK_PERI_CTRL, CLK_PERI_XOSC);
        CLOCKS.write(CLK_PERI_CTRL, CLK_PERI_XOSC | CLK_PERI_ENABLE);
        // IO_BANK0, PADS_BANK0 and UART0 out of reset.
        RESETS.modify(RESET, |v| v & !RESET_BITS);
        while RESETS.read(RESET_DONE) & RESET_BITS != RESET_BITS {
            core::hint::spin_loop();
        }
        // Divisor in 1/64ths: 12 MHz / (16 × 115200) = 6.51 → IBRD 6, FBRD 33.
        let div64 = (8 * XOSC_HZ / BAUD).div_ceil(2); // 4 × clk / baud, rounded
        UART0.write(CR, 0);
        UART0.write(IBRD, div64 >> 6);
        UART0.write(FBRD, div64 & 0x3F);
        UART0.write(LCR_H, LCR_H_8N1_FIFO); // also latches IBRD/FBRD
        UART0.write(CR, CR_ENABLE);
        IO_BANK0.write(GPIO0_CTRL, FUNCSEL_UART);
        IO_BANK0.write(GPIO1_CTRL, FUNCSEL_UART);
    }

    pub fn read_byte() -> Option<u8> {
        // DR bits 8-11 are error flags of the byte; the byte is kept either way.
        (UART0.read(FR) & FR_RXFE == 0).then(|| UART0.read(DR) as u8)
    }

    pub fn write_byte(b: u8) {
        while UART0.read(FR) & FR_TXFF != 0 {
            core::hint::spin_loop();
        }
        UART0.write(DR, u32::from(b));
    }

    pub fn flush() {
        while UART0.read(FR) & FR_BUSY != 0 {
            core::hint::spin_loop();
        }
    }
}

/// ESP32-C3 UART0 at 0x6000_0000 (ESP32-C3 Technical Reference Manual, chapter 26 "UART
/// Controller", register summary: UART_FIFO_REG 0x00, UART_STATUS_REG 0x1C with RXFIFO_CNT in
/// bits 9:0 and TXFIFO_CNT in bits 25:16; 128-byte FIFOs). The ROM bootloader has already set
/// it up at 115200 baud on GPIO21 (TX) / GPIO20 (RX), the DevKit's USB-UART bridge, so the
/// driver only moves bytes.
#[cfg(uart = "esp32c3")]
mod driver {
    use super::Block;

    // SAFETY: 0x6000_0000..0x6000_1000 is UART0's register block (TRM, "System and Memory").
    const UART0: Block<0x1000> = unsafe { Block::new(0x6000_0000) };
    const FIFO: usize = 0x00;
    const STATUS: usize = 0x1C;
    const FIFO_LEN: u32 = 128;

    fn rx_count() -> u32 {
        UART0.read(STATUS) & 0x3FF
    }

    fn tx_count() -> u32 {
        (UART0.read(STATUS) >> 16) & 0x3FF
    }

    pub fn init() {}

    pub fn read_byte() -> Option<u8> {
        (rx_count() > 0).then(|| UART0.read(FIFO) as u8)
    }

    pub fn write_byte(b: u8) {
        while tx_count() >= FIFO_LEN {
            core::hint::spin_loop();
        }
        UART0.write(FIFO, u32::from(b));
    }

    pub fn flush() {
        while tx_count() > 0 {
            core::hint::spin_loop();
        }
    }
}
