//! The clock trees that HAL board crates derive from their board.toml at build time, so that a
//! clock the chip cannot make fails the build with the board and the key named, instead of a
//! HAL assertion at boot.

use crate::BoardProfile;

/// The STM32L4's main PLL as its HAL takes it: SYSCLK = source / `prediv` × `mul` / `divr`
/// (RM0351, 6.4.4 RCC_PLLCFGR: PLLM, PLLN, PLLR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stm32l4Pll {
    /// The oscillator the PLL runs from.
    pub source: Stm32l4PllSource,
    /// PLLM, 1 to 8.
    pub prediv: u32,
    /// PLLN, 8 to 86.
    pub mul: u32,
    /// PLLR: 2, 4, 6 or 8.
    pub divr: u32,
}

/// The PLL inputs of board.toml's `pll_source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stm32l4PllSource {
    /// `hsi16`: the 16 MHz internal RC oscillator.
    Hsi16,
    /// `msi4`: the multi-speed internal oscillator in its 4 MHz range (its reset state).
    Msi4,
}

impl Stm32l4PllSource {
    /// The `pll_source` values, as board.toml spells them.
    pub const NAMES: [&'static str; 2] = ["hsi16", "msi4"];

    fn from_name(name: &str) -> Option<Self> {
        match name {
            "hsi16" => Some(Self::Hsi16),
            "msi4" => Some(Self::Msi4),
            _ => None,
        }
    }

    /// The oscillator's frequency.
    pub fn hz(self) -> u64 {
        match self {
            Self::Hsi16 => 16_000_000,
            Self::Msi4 => 4_000_000,
        }
    }
}

/// The STM32L4's limits in voltage range 1 (RM0351 6.2.5 and 6.4.4; the datasheet's PLL
/// characteristics): SYSCLK at most 80 MHz, PLL input 4 to 16 MHz, VCO 64 to 344 MHz.
const SYSCLK_MAX_HZ: u64 = 80_000_000;
const PLL_IN_HZ: (u64, u64) = (4_000_000, 16_000_000);
const VCO_HZ: (u64, u64) = (64_000_000, 344_000_000);
const PREDIV: std::ops::RangeInclusive<u32> = 1..=8;
const MUL: std::ops::RangeInclusive<u32> = 8..=86;
const DIVR: [u32; 4] = [2, 4, 6, 8];

/// The PLL settings that make board.toml's `clock_hz` exactly from its `pll_source`, with the
/// smallest PLLM and then PLLR that do; an error names the board, its board.toml and the key
/// at fault.
pub fn stm32l4_pll(board: &BoardProfile) -> Result<Stm32l4Pll, String> {
    let at = |key: &str| format!("board {} ({}): {key}", board.name, board.path.display());
    let name = board.pll_source.as_deref().ok_or_else(|| {
        format!(
            "{} is missing: the PLL's oscillator, one of {:?}",
            at("pll_source"),
            Stm32l4PllSource::NAMES
        )
    })?;
    let source = Stm32l4PllSource::from_name(name).ok_or_else(|| {
        format!(
            "{} = {name:?} is not one of {:?}",
            at("pll_source"),
            Stm32l4PllSource::NAMES
        )
    })?;
    let target = board.clock_hz;
    if target > SYSCLK_MAX_HZ {
        return Err(format!(
            "{} = {target} is above the STM32L4's SYSCLK limit of {SYSCLK_MAX_HZ} Hz",
            at("clock_hz")
        ));
    }
    for prediv in PREDIV {
        let input = source.hz() / u64::from(prediv);
        if source.hz() % u64::from(prediv) != 0 || !(PLL_IN_HZ.0..=PLL_IN_HZ.1).contains(&input) {
            continue;
        }
        for divr in DIVR {
            let vco = target * u64::from(divr);
            if vco % input != 0 || !(VCO_HZ.0..=VCO_HZ.1).contains(&vco) {
                continue;
            }
            let Ok(mul) = u32::try_from(vco / input) else {
                continue;
            };
            if MUL.contains(&mul) {
                return Ok(Stm32l4Pll {
                    source,
                    prediv,
                    mul,
                    divr,
                });
            }
        }
    }
    Err(format!(
        "{} = {target} cannot be made from pll_source = {name:?} ({} Hz): the PLL divides by \
         M {PREDIV:?} to 4-16 MHz, multiplies by N {MUL:?} to a 64-344 MHz VCO and divides by \
         R {DIVR:?}",
        at("clock_hz"),
        source.hz()
    ))
}
