//! RP2040 second-stage bootloader (feature `rp2040`): the boot ROM copies the first 256 bytes
//! of flash to SRAM, checks their CRC and runs them; they set up execute-in-place for the
//! external flash and jump to the vector table at 0x1000_0100. `boards/rp2040/memory.x` puts
//! the `.boot2` section there.

/// rp2040-boot2's loader for Winbond W25Q080-compatible flash (the Pico's W25Q16 is one).
#[link_section = ".boot2"]
#[used]
#[no_mangle]
pub static BOOT2_FIRMWARE: [u8; 256] = rp2040_boot2::BOOT_LOADER_W25Q080;
