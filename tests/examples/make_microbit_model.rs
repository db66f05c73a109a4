//! Writes the test-sized model of the QEMU `microbit` board, `models/tiny-ll-gdn-microbit-q8_0.gguf`
//! (see `loglinear_tests::microbit_model`).
//!
//! `cargo run -p loglinear-tests --example make_microbit_model`

use loglinear_tests::{microbit_model, repo_root};

fn main() {
    let path = repo_root().join(microbit_model::PATH);
    let bytes = microbit_model::generate();
    std::fs::write(&path, &bytes).unwrap();
    println!("{} ({} bytes)", path.display(), bytes.len());
}
