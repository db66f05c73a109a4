//! What QEMU's `b-l475e-iot01a` machine lacks for embassy-stm32, made up for in a fault handler,
//! so that the HAL's own code runs unchanged under QEMU.
//!
//! QEMU (10.0) models this chip's RCC, GPIO, EXTI, SYSCFG and USARTs, but:
//!
//! 1. **PWR** (0x4000_7000) is an unimplemented device: it reads 0 and drops writes. The HAL's
//!    clock set-up unlocks the backup domain and waits for `PWR_CR1.DBP` to read back 1
//!    (embassy-stm32 0.6, `rcc/bd.rs`, `unlock`), which never happens there.
//! 2. **FLASH** (0x4002_2000) is one too. The HAL sets `FLASH_ACR.LATENCY` to 4 wait states for
//!    80 MHz and waits for it to read back (`rcc/l.rs`), which never happens there either.
//! 3. **USART1's ICR** (0x4001_3820) clears every `ISR` bit written to it, where the chip only
//!    clears the flags that ICR defines. The HAL's interrupt handler writes the whole `ISR` value
//!    back to ICR (`usart/mod.rs`, `clear_interrupt_flags`), which under QEMU also clears `TXE`,
//!    and then nothing is ever sent.
//!
//! [`install`] maps these three ranges as no-access regions of the MPU. Every access to them
//! then raises a fault, escalated to HardFault, and [`HardFault`] performs it in the handler,
//! where the MPU is off (`HFNMIENA` = 0): PWR and FLASH as plain registers in RAM that read back
//! what was written (which is all the HAL asks of them), USART1's ICR as the chip does, with the
//! bits it does not define masked off, and its RDR and TDR, which share the 32-byte region, as
//! they are. It then steps the faulting instruction. The instructions are the word, halfword and
//! byte loads and stores that compiled register accesses are; any other faulting access, and any
//! other fault, halts with a message (QEMU exits with 101).
//!
//! It runs only where `DBGMCU_IDCODE` reads 0: QEMU leaves DBGMCU unmodelled, the chip reports
//! its device ID (0x415 for the STM32L475). On the kit [`install`] does nothing and the same
//! image runs as flashed.

use core::arch::global_asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// DBGMCU_IDCODE: reads 0 under QEMU only.
const DBGMCU_IDCODE: *const u32 = 0xE004_2000 as *const u32;

// The MPU (ARMv7-M ARM, B3.5) and the fault status registers (B3.2).
const MPU_CTRL: *mut u32 = 0xE000_ED94 as *mut u32;
const MPU_RNR: *mut u32 = 0xE000_ED98 as *mut u32;
const MPU_RBAR: *mut u32 = 0xE000_ED9C as *mut u32;
const MPU_RASR: *mut u32 = 0xE000_EDA0 as *mut u32;
const CFSR: *mut u32 = 0xE000_ED28 as *mut u32;
const HFSR: *mut u32 = 0xE000_ED2C as *mut u32;
const MMFAR: *const u32 = 0xE000_ED34 as *const u32;
/// CFSR: a data access violation, with its address in MMFAR.
const DACCVIOL: u32 = 1 << 1;
const MMARVALID: u32 = 1 << 7;
/// HFSR: a fault escalated to HardFault (write 1 to clear).
const FORCED: u32 = 1 << 30;
/// MPU_CTRL: the MPU on, with the default memory map for privileged accesses elsewhere.
const MPU_ENABLE_PRIVDEFENA: u32 = 0b101;

const PWR_BASE: u32 = 0x4000_7000;
const FLASH_BASE: u32 = 0x4002_2000;
/// USART1's ICR, RDR and TDR: the smallest MPU region (32 B) that holds ICR.
const USART1_ICR: u32 = 0x4001_3820;
/// The bits of USART_ICR (RM0351 40.8.9): PECF, FECF, NCF, ORECF, IDLECF, TCCF, LBDCF, CTSCF,
/// RTOCF, EOBCF, CMCF, WUCF.
const USART_ICR_BITS: u32 = 0x0012_1B5F;

/// The regions: base, MPU size field (2^(SIZE+1) bytes).
const REGIONS: [(u32, u32); 3] = [(PWR_BASE, 9), (FLASH_BASE, 9), (USART1_ICR, 4)];

/// Registers kept in RAM for a device QEMU does not model: its first `N` words.
struct RegisterFile<const N: usize> {
    base: u32,
    words: UnsafeCell<[u32; N]>,
}

// SAFETY: only the HardFault handler touches the words, and it does not nest.
unsafe impl<const N: usize> Sync for RegisterFile<N> {}

/// PWR_CR1 .. PWR_PDCRH (0x00..0x98), at their reset values (RM0351 5.4: CR1 0x200, CR3
/// 0x8000).
static PWR: RegisterFile<39> = RegisterFile {
    base: PWR_BASE,
    words: UnsafeCell::new({
        let mut w = [0; 39];
        w[0] = 0x0000_0200;
        w[2] = 0x0000_8000;
        w
    }),
};

/// FLASH_ACR .. FLASH_WRP2BR (0x00..0x50); ACR at its reset value (3.7.1: I- and D-cache on).
static FLASH: RegisterFile<21> = RegisterFile {
    base: FLASH_BASE,
    words: UnsafeCell::new({
        let mut w = [0; 21];
        w[0] = 0x0000_0600;
        w
    }),
};

/// Set by [`install`]: faults on the regions are this module's to serve.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether the chip is QEMU's model (DBGMCU unmodelled).
pub fn under_qemu() -> bool {
    // SAFETY: DBGMCU_IDCODE is a read-only register that every STM32L4 has; QEMU reads it as 0.
    unsafe { DBGMCU_IDCODE.read_volatile() == 0 }
}

/// Under QEMU, maps the three ranges as no-access MPU regions and serves their accesses from
/// then on; on the chip, does nothing. Call it before `embassy_stm32::init`.
pub fn install() -> bool {
    if !under_qemu() {
        return false;
    }
    ACTIVE.store(true, Ordering::SeqCst);
    for (index, (base, size)) in (0u32..).zip(REGIONS) {
        // SAFETY: the MPU registers are written before the MPU is enabled; each region is
        // execute-never, no access (AP = 000), device memory (S, B), enabled.
        unsafe {
            MPU_RNR.write_volatile(index);
            MPU_RBAR.write_volatile(base);
            MPU_RASR.write_volatile((1 << 28) | (1 << 18) | (1 << 16) | (size << 1) | 1);
        }
    }
    // SAFETY: with PRIVDEFENA every other address keeps its default attributes, so enabling the
    // MPU changes nothing but the three regions.
    unsafe { MPU_CTRL.write_volatile(MPU_ENABLE_PRIVDEFENA) };
    cortex_m::asm::dsb();
    cortex_m::asm::isb();
    true
}

// The HardFault vector (cortex-m-rt takes a `HardFault` symbol of the program's in place of its
// default). It passes the exception frame (r0-r3, r12, lr, pc, xpsr on the stack in use when the
// fault came) and r4-r11, pushed here, to `serve_fault`, and pops r4-r11 back, as `serve_fault`
// may have written a loaded value into one of them. Ten registers keep the stack 8-byte aligned.
global_asm!(
    ".section .text.HardFault,\"ax\",%progbits",
    ".global HardFault",
    ".type HardFault,%function",
    ".thumb_func",
    "HardFault:",
    "tst lr, #4",
    "ite eq",
    "mrseq r0, msp",
    "mrsne r0, psp",
    "push {{r4-r11, ip, lr}}",
    "mov r1, sp",
    "bl {serve}",
    "pop {{r4-r11, ip, lr}}",
    "bx lr",
    serve = sym serve_fault,
);

/// A decoded load or store.
struct Access {
    load: bool,
    /// The transfer register.
    rt: u32,
    address: u32,
    /// Bytes transferred: 1, 2 or 4.
    bytes: u32,
    /// Instruction length: 2 or 4.
    length: u32,
    /// Base register writeback: (register, value).
    writeback: Option<(u32, u32)>,
}

/// The general registers of the faulting context: the exception frame and r4-r11.
struct Registers {
    frame: *mut u32,
    high: *mut u32,
}

impl Registers {
    /// The slot of register `n`; SP and PC are not transfer or base registers of a register
    /// access.
    fn slot(&self, n: u32) -> Option<*mut u32> {
        // The frame's words 0-5 are r0-r3, r12, lr; `high` holds r4-r11.
        match n {
            0..=3 => Some(self.frame.wrapping_add(n as usize)),
            4..=11 => Some(self.high.wrapping_add(n as usize - 4)),
            12 => Some(self.frame.wrapping_add(4)),
            14 => Some(self.frame.wrapping_add(5)),
            _ => None,
        }
    }

    fn get(&self, n: u32) -> Option<u32> {
        // SAFETY: `slot` points into the exception frame or the handler's push.
        self.slot(n).map(|p| unsafe { p.read() })
    }

    fn set(&self, n: u32, value: u32) -> Option<()> {
        // SAFETY: as in `get`.
        self.slot(n).map(|p| unsafe { p.write(value) })
    }

    fn pc(&self) -> u32 {
        // SAFETY: word 6 of the frame is the return address.
        unsafe { self.frame.add(6).read() }
    }

    /// Steps past the faulting instruction, and the IT block state with it (xPSR IT[7:0], in
    /// bits 15:10 and 26:25; ARMv7-M ARM A7.3.3 ITAdvance).
    fn step(&self, length: u32) {
        // SAFETY: words 6 and 7 of the frame are the return address and xPSR.
        unsafe {
            self.frame.add(6).write(self.pc() + length);
            let xpsr = self.frame.add(7).read();
            let it = ((xpsr >> 8) & 0xFC) | ((xpsr >> 25) & 0x3);
            let next = if it & 0x7 == 0 {
                0
            } else {
                (it & 0xE0) | ((it << 1) & 0x1F)
            };
            let xpsr = (xpsr & !((0x3F << 10) | (0x3 << 25)))
                | ((next & 0xFC) << 8)
                | ((next & 0x3) << 25);
            self.frame.add(7).write(xpsr);
        }
    }
}

/// Decodes the Thumb load or store at `pc`: LDR/STR{,H,B} with an immediate offset (T1, T2),
/// a register offset (T1, T2) or an 8-bit offset with index and writeback (T4).
fn decode(regs: &Registers, pc: u32) -> Option<Access> {
    // SAFETY: `pc` is the address of the instruction that faulted, in flash.
    let (hw1, hw2) = unsafe {
        (
            u32::from((pc as *const u16).read_volatile()),
            u32::from(((pc + 2) as *const u16).read_volatile()),
        )
    };
    if hw1 >> 11 >= 0b11101 {
        // 32-bit: 1111 1000 S S L 1? (F8xx), size = bits 6:5, load = bit 4, imm12 = bit 7.
        let size = (hw1 >> 5) & 3;
        if hw1 & 0xFF00 != 0xF800 || size == 3 {
            return None;
        }
        let (load, rn, rt) = (hw1 & 0x10 != 0, hw1 & 15, hw2 >> 12);
        let base = regs.get(rn)?;
        let (address, writeback) = if hw1 & 0x80 != 0 {
            (base.wrapping_add(hw2 & 0xFFF), None)
        } else if hw2 & 0x800 != 0 {
            let (index, add, wback) = (hw2 & 0x400 != 0, hw2 & 0x200 != 0, hw2 & 0x100 != 0);
            let offset = if add {
                base.wrapping_add(hw2 & 0xFF)
            } else {
                base.wrapping_sub(hw2 & 0xFF)
            };
            (
                if index { offset } else { base },
                wback.then_some((rn, offset)),
            )
        } else if hw2 & 0xFC0 == 0 {
            let offset = regs.get(hw2 & 15)? << ((hw2 >> 4) & 3);
            (base.wrapping_add(offset), None)
        } else {
            return None;
        };
        return Some(Access {
            load,
            rt,
            address,
            bytes: 1 << size,
            length: 4,
            writeback,
        });
    }
    let (rn, rt, imm5) = ((hw1 >> 3) & 7, hw1 & 7, (hw1 >> 6) & 31);
    // The immediate-offset forms: bit 11 is L (load).
    let immediate_load = hw1 & 0x800 != 0;
    let (load, address, bytes) = match hw1 >> 11 {
        0b01100 | 0b01101 => (immediate_load, regs.get(rn)?.wrapping_add(imm5 * 4), 4),
        0b01110 | 0b01111 => (immediate_load, regs.get(rn)?.wrapping_add(imm5), 1),
        0b10000 | 0b10001 => (immediate_load, regs.get(rn)?.wrapping_add(imm5 * 2), 2),
        0b01010 | 0b01011 => {
            let address = regs.get(rn)?.wrapping_add(regs.get((hw1 >> 6) & 7)?);
            // opB (bits 11:9): STR, STRH, STRB, LDRSB, LDR, LDRH, LDRB, LDRSH.
            match (hw1 >> 9) & 7 {
                0 => (false, address, 4),
                1 => (false, address, 2),
                2 => (false, address, 1),
                4 => (true, address, 4),
                5 => (true, address, 2),
                6 => (true, address, 1),
                _ => return None,
            }
        }
        _ => return None,
    };
    Some(Access {
        load,
        rt,
        address,
        bytes,
        length: 2,
        writeback: None,
    })
}

/// Performs `access` on its device; `None` if it is not one this module serves.
fn perform(regs: &Registers, access: &Access) -> Option<()> {
    let Access { address, bytes, .. } = *access;
    let mask = match bytes {
        1 => 0xFF,
        2 => 0xFFFF,
        _ => u32::MAX,
    };
    if address & !0x1F == USART1_ICR {
        // The real registers, which the MPU does not guard in this handler; QEMU's USART takes
        // word accesses only.
        let register = (address & !3) as *mut u32;
        if access.load {
            // SAFETY: a USART1 register, read as the faulting code meant to.
            regs.set(access.rt, unsafe { register.read_volatile() } & mask)?;
        } else {
            let mut value = regs.get(access.rt)? & mask;
            if address & !3 == USART1_ICR {
                value &= USART_ICR_BITS;
            }
            // SAFETY: a USART1 register, written as the faulting code meant to (ICR masked as
            // the chip masks it).
            unsafe { register.write_volatile(value) };
        }
        return Some(());
    }
    if bytes != 4 || address % 4 != 0 {
        return None;
    }
    let word = |file_base: u32, len: usize| -> Option<usize> {
        let index = usize::try_from(address.checked_sub(file_base)? / 4).ok()?;
        (index < len).then_some(index)
    };
    let (words, index) = if let Some(i) = word(PWR.base, 39) {
        (PWR.words.get().cast::<u32>(), i)
    } else {
        (FLASH.words.get().cast::<u32>(), word(FLASH.base, 21)?)
    };
    // SAFETY: `index` is within the file; only this handler touches it.
    unsafe {
        if access.load {
            regs.set(access.rt, words.add(index).read())?;
        } else {
            words.add(index).write(regs.get(access.rt)?);
        }
    }
    Some(())
}

/// The HardFault handler's body: serves an access to the three ranges, or halts.
///
/// # Safety
/// Called by the `HardFault` vector alone, with the exception frame and the pushed r4-r11.
unsafe extern "C" fn serve_fault(frame: *mut u32, high: *mut u32) {
    // SAFETY: the fault status registers are always readable.
    let cfsr = unsafe { CFSR.read_volatile() };
    let regs = Registers { frame, high };
    if !ACTIVE.load(Ordering::Relaxed) || cfsr & (DACCVIOL | MMARVALID) != DACCVIOL | MMARVALID {
        halt("a fault", cfsr, regs.pc());
    }
    // SAFETY: MMARVALID says MMFAR holds the faulting address.
    let address = unsafe { MMFAR.read_volatile() };
    let pc = regs.pc();
    let Some(access) = decode(&regs, pc) else {
        halt(
            "an access by an instruction it does not decode",
            address,
            pc,
        );
    };
    if access.address != address || perform(&regs, &access).is_none() {
        halt("an access it does not serve", address, pc);
    }
    if let Some((rn, value)) = access.writeback {
        if regs.set(rn, value).is_none() {
            halt("a writeback it does not serve", address, pc);
        }
    }
    regs.step(access.length);
    // SAFETY: write-1-to-clear of the status just served.
    unsafe {
        CFSR.write_volatile(cfsr & 0xFF);
        HFSR.write_volatile(FORCED);
    }
}

/// A fault this module does not serve: a message and QEMU's exit under semihosting; on the chip
/// the core spins here, where a debugger (probe-rs's HardFault vector catch) finds it, as in
/// cortex-m-rt's default handler.
fn halt(what: &str, value: u32, pc: u32) -> ! {
    #[cfg(feature = "defmt-semihosting")]
    {
        semihosting::eprintln!("hard fault: {what} ({value:#010x}) at pc {pc:#010x}");
        semihosting::process::exit(loglinear_firmware::EXIT_PANIC);
    }
    #[cfg(not(feature = "defmt-semihosting"))]
    {
        let _ = (what, value, pc);
        loop {
            core::hint::spin_loop();
        }
    }
}
