//! The committed `microbit` test model equals a fresh generation from its recipe.

use loglinear_runtime::gguf::GgufModel;
use loglinear_tests::{microbit_model, repo_root};

#[test]
fn committed_microbit_model_equals_a_fresh_generation() {
    let path = repo_root().join(microbit_model::PATH);
    let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fresh = microbit_model::generate();
    assert!(
        committed == fresh,
        "{} differs from a fresh generation ({} vs {} bytes); regenerate it with \
         `cargo run -p loglinear-tests --example make_microbit_model`",
        path.display(),
        committed.len(),
        fresh.len()
    );
    // And it reads back as the configured model.
    let mut words = vec![0u64; fresh.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..fresh.len()].copy_from_slice(&fresh);
    let aligned = &bytemuck::cast_slice::<u64, u8>(&words)[..fresh.len()];
    let gguf = GgufModel::parse(aligned).unwrap();
    let model = gguf.model().unwrap();
    assert_eq!(*model.config(), microbit_model::config());
}
