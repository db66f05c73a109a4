//! Replays the committed fuzz corpus (`fuzz/corpus/*/seed-*`) and every crash input that was
//! found and fixed (`fuzz/regressions/*`) through the same code as the fuzz targets, on stable,
//! in every test run.

use loglinear_runtime::gguf::GgufModel;
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
            let bytes = std::fs::read(&p).unwrap();
            exercise_model_file(&bytes);
            // The committed seeds are valid models, so the fuzzer starts from deep paths.
            let name = p.file_name().unwrap().to_string_lossy();
            if name.starts_with("seed-") {
                let mut words = vec![0u64; bytes.len().div_ceil(8)];
                let buf = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..bytes.len()];
                buf.copy_from_slice(&bytes);
                let m = GgufModel::parse(buf).unwrap_or_else(|e| panic!("{name}: {e}"));
                m.model().unwrap();
            }
            n += 1;
        }
    }
    assert!(n > 0, "no fuzz corpus found");
    eprintln!("replayed {n} inputs");
}
