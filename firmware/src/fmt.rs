//! Logging shim (the embassy pattern, like the runtime's `fmt.rs`): with the `defmt` feature the
//! calls are defmt frames; without it the same calls print plain text on semihosting stderr.
//! Use only `{}` placeholders with integers, floats, `&str` and the runtime's error types, which
//! implement both `core::fmt::Display` and `defmt::Format`.
#![allow(unused_macros, unused_imports)]

macro_rules! info {
    ($($arg:tt)*) => {{
        #[cfg(feature = "defmt")]
        ::defmt::info!($($arg)*);
        #[cfg(not(feature = "defmt"))]
        ::semihosting::eprintln!("[INFO ] {}", format_args!($($arg)*));
    }};
}

macro_rules! error {
    ($($arg:tt)*) => {{
        #[cfg(feature = "defmt")]
        ::defmt::error!($($arg)*);
        #[cfg(not(feature = "defmt"))]
        ::semihosting::eprintln!("[ERROR] {}", format_args!($($arg)*));
    }};
}

pub(crate) use error;
pub(crate) use info;
