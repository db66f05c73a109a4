//! Decode speed from a model file through the runtime's own `GgufModel` (what firmware uses:
//! every weight lookup walks the tensor headers) against the host's hash-indexed `IndexedGguf`.
//!
//! `cargo run --release -p loglinear-converter --example gguf_lookup_bench [-- MODEL.gguf]`

use clap::Parser;
use loglinear_converter::model_source::{AlignedBytes, IndexedGguf};
use loglinear_runtime::gguf::GgufModel;
use loglinear_runtime::{Model, Session, SessionConfig};
use std::time::Instant;

fn tokens_per_s(model: &Model<'_>, n: usize) -> f64 {
    let cfg = SessionConfig::default();
    let mut arena = vec![0u8; Session::<f32>::arena_bytes(model, &cfg).unwrap()];
    let mut s = Session::<f32>::new(model, &mut arena, cfg).unwrap();
    let start = Instant::now();
    for i in 0..n {
        s.step((i % 251) as u32).unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

#[derive(Parser)]
#[command(about = "Decode speed: the runtime's GgufModel against the host's IndexedGguf")]
struct Args {
    /// The model file.
    #[arg(
        value_name = "MODEL.gguf",
        default_value = "models/ll-gdn-mcu-q8_0.gguf"
    )]
    path: String,
}

fn main() {
    let Args { path } = Args::parse();
    let bytes = AlignedBytes::read(path.as_ref()).unwrap();
    let direct = GgufModel::parse(bytes.as_bytes()).unwrap();
    let indexed = IndexedGguf::parse(bytes.as_bytes()).unwrap();
    let n = 1000;
    let (a, b) = (direct.model().unwrap(), indexed.model().unwrap());
    tokens_per_s(&a, 100);
    println!("{path}: {n} tokens from t = 0");
    for round in 0..3 {
        println!(
            "  round {round}: GgufModel (header walk) {:.0} tok/s, IndexedGguf (hash map) {:.0} tok/s",
            tokens_per_s(&a, n),
            tokens_per_s(&b, n)
        );
    }
}
