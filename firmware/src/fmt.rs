//! Logging shim (the embassy pattern, like the runtime's `fmt.rs`): with the `defmt` feature the
//! calls are defmt frames; without it the same calls print plain text on semihosting stderr,
//! where the build has semihosting (cfg `semihosting`: QEMU boards, or semihosting as the
//! transport). A hardware board with a UART has none: there the calls only type-check their
//! arguments, so the firmware runs without a debug probe.
//! Use only `{}` placeholders with integers, floats, `&str` and the runtime's error types, which
//! implement both `core::fmt::Display` and `defmt::Format`.
#![allow(unused_macros, unused_imports)]

macro_rules! info {
    ($($arg:tt)*) => {{
        #[cfg(feature = "defmt")]
        ::defmt::info!($($arg)*);
        #[cfg(all(not(feature = "defmt"), semihosting))]
        ::semihosting::eprintln!("[INFO ] {}", format_args!($($arg)*));
        #[cfg(all(not(feature = "defmt"), not(semihosting)))]
        let _ = format_args!($($arg)*);
    }};
}

macro_rules! error {
    ($($arg:tt)*) => {{
        #[cfg(feature = "defmt")]
        ::defmt::error!($($arg)*);
        #[cfg(all(not(feature = "defmt"), semihosting))]
        ::semihosting::eprintln!("[ERROR] {}", format_args!($($arg)*));
        #[cfg(all(not(feature = "defmt"), not(semihosting)))]
        let _ = format_args!($($arg)*);
    }};
}

pub(crate) use error;
pub(crate) use info;
