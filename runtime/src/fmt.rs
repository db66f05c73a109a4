//! Crate-private logging shim (the embassy pattern): the same calls go to `defmt` on boards,
//! to `log` on hosts, and compile to nothing when neither feature is on.
#![allow(unused_macros, unused_imports)]

macro_rules! debug {
    ($($arg:tt)*) => {{
        #[cfg(feature = "defmt")]
        ::defmt::debug!($($arg)*);
        #[cfg(all(feature = "log", not(feature = "defmt")))]
        ::log::debug!($($arg)*);
    }};
}

pub(crate) use debug;
