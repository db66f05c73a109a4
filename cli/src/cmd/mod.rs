//! One module per subcommand whose logic does not fit beside the clap top level in `main.rs`.

pub mod bench;
pub mod eval;
