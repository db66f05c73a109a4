//! What `cargo xtask boards` needs of the hardware boards' flashing tools, through the tools'
//! own crates used as libraries: probe-rs's built-in chip list, espflash's chip list and its
//! app-image writer, and the UF2 writer of elf2uf2-rs. The checks need these few parts alone;
//! installing the three programs (`cargo install`) compiles three whole command-line tools,
//! 614 s of a fresh 2-core machine (BENCHMARKS.md, "The test command"). A user who flashes a board installs the
//! programs (each board's README says which): `cargo run` runs them.

use std::str::FromStr;
use std::sync::Once;

use anyhow::{bail, Context, Result};

/// Whether probe-rs knows `chip`, as `probe-rs chip info CHIP` looks it up in the chip list it
/// is built with: probe-rs's own targets and the Espressif ones, which the probe-rs program
/// adds from the probe-rs-espressif plugin at start.
pub fn probe_rs_knows(chip: &str) -> bool {
    static ESPRESSIF: Once = Once::new();
    ESPRESSIF.call_once(probe_rs_espressif::register_plugin);
    probe_rs::config::Registry::from_builtin_families()
        .get_target_by_name(chip)
        .is_ok()
}

/// Whether espflash takes `chip` as a `--chip` value.
pub fn espflash_knows(chip: &str) -> bool {
    espflash::target::Chip::from_str(chip).is_ok()
}

/// The app image that `espflash save-image --chip CHIP ELF FILE` writes for `elf`, with
/// espflash's defaults (its flash size, no minimum chip revision, the chip's crystal): the one
/// segment its second-stage bootloader loads. Like `save-image`, it refuses an ELF without the
/// ESP-IDF app descriptor.
pub fn esp_app_image(chip: &str, elf: &[u8]) -> Result<Vec<u8>> {
    use espflash::flasher::{FlashData, FlashSettings, FlashSize};
    use espflash::image_format::idf::{check_idf_bootloader, IdfBootloaderFormat};

    let chip = espflash::target::Chip::from_str(chip)
        .map_err(|_| anyhow::anyhow!("espflash knows no chip '{chip}'"))?;
    check_idf_bootloader(&elf.to_vec())
        .map_err(|e| anyhow::anyhow!("espflash refuses the ELF: {e}"))?;
    let flash = FlashData::new(
        FlashSettings::new(None, Some(FlashSize::default()), None),
        0,
        None,
        chip,
        chip.default_xtal_frequency(),
    );
    let format = IdfBootloaderFormat::new(elf, &flash, None, None, None, None)
        .context("espflash: the app image")?;
    let segments: Vec<_> = format.ota_segments().collect();
    match segments.as_slice() {
        [app] => Ok(app.data.to_vec()),
        _ => bail!(
            "espflash: {} app segments where save-image writes one",
            segments.len()
        ),
    }
}

/// The UF2 file of an RP2040 image, as `elf2uf2-rs ELF FILE` writes it: elf2flash-core is
/// elf2uf2-rs's converter as a library (its tests compare with elf2uf2-rs 2.2's UF2 files).
pub fn rp2040_uf2(elf: &[u8]) -> Result<Vec<u8>> {
    let mut uf2 = Vec::new();
    elf2flash_core::elf2uf2(
        elf,
        &mut uf2,
        &elf2flash_core::boards::RP2040,
        elf2flash_core::NoProgress,
    )
    .context("elf2flash-core: writing the UF2 file")?;
    Ok(uf2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chip_lists_hold_the_boards_chips_and_not_others() {
        for chip in ["STM32H743ZITx", "nRF52840_xxAA", "RP2040", "esp32c3"] {
            assert!(probe_rs_knows(chip), "{chip}");
        }
        assert!(!probe_rs_knows("NoSuchChip123"));
        assert!(espflash_knows("esp32c3"));
        assert!(!espflash_knows("esp32c99"));
    }

    #[test]
    fn an_elf_without_an_app_descriptor_or_pages_is_refused() {
        assert!(esp_app_image("esp32c3", b"not an elf").is_err());
        assert!(esp_app_image("esp32c99", b"").is_err());
        assert!(rp2040_uf2(b"not an elf").is_err());
    }
}
