//! Whole models against `golden/model`: full-sequence logits (T = 100 and 300) and hidden
//! states by stepping, and the decode trace (prefill by stepping, Fenwick and conv states
//! level by level, then single steps with logits at each). See `loglinear_tests::golden`.

use loglinear_converter::Checkpoint;
use loglinear_tests::golden::check_model;
use loglinear_tests::*;

#[test]
fn models_match_golden() {
    let m = manifest();
    let mut checked = 0;
    for (name, entry) in cases(&m, "model") {
        let dir = golden_dir().join(
            entry["dir"]
                .as_str()
                .unwrap_or_else(|| panic!("{name}: no dir")),
        );
        let ckpt = Checkpoint::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
        let model = ckpt.model().unwrap();
        let g = read_arrays(&dir.join("golden.safetensors"));
        check_model(&name, &model, &g, tol::MODEL);
        checked += 1;
    }
    eprintln!("checked {checked} models");
}
