//! Replays the committed fuzz corpus (`fuzz/corpus/*/seed-*`) and every crash input that was
//! found and fixed (`fuzz/regressions/*`) through the same code as the fuzz targets, on stable,
//! in every test run.

use loglinear_tests::{exercise_model_file, repo_root};

#[test]
fn model_file_corpus_replays_without_panics() {
    let mut n = 0;
    for dir in ["fuzz/corpus/gguf_model", "fuzz/regressions/gguf_model"] {
        let Ok(entries) = std::fs::read_dir(repo_root().join(dir)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            exercise_model_file(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    assert!(n > 0, "no fuzz corpus found");
    eprintln!("replayed {n} inputs");
}
