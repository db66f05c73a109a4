//! Writes the BPE test fixture's model folder (a golden checkpoint with a trained GPT-2-style
//! tokenizer) to the folder given, for `loglinear convert` and the firmware's BPE test
//! (`cargo xtask qemu`).
//!
//! ```text
//! cargo run -p loglinear-tests --example bpe_model -- target/bpe-model
//! ```

use clap::Parser;
use std::path::PathBuf;

/// Writes config.json, model.safetensors, tokenizer.json and tokenizer_config.json.
#[derive(Parser)]
struct Args {
    /// The folder to write (created if missing).
    folder: PathBuf,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.folder)?;
    loglinear_tests::bpe_fixture::write_model_folder(&args.folder);
    println!("wrote {}", args.folder.display());
    Ok(())
}
