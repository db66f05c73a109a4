//! One module per subcommand; `main.rs` holds the clap top level and what several share.

pub mod bench;
pub mod convert;
pub mod eval;
pub mod generate;
pub mod inspect;
pub mod loss_plot;
pub mod plan;
pub mod serial;
mod table;
