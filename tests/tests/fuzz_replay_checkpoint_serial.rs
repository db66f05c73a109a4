//! Replays the committed corpora of the `checkpoint_import` and `serial_protocol` fuzz targets
//! (`fuzz/corpus/<target>/seed-*`) and every crash input found and fixed
//! (`fuzz/regressions/<target>/*`) through the same code as the targets
//! (`fuzz/exercise/*.rs`, included by path), on stable, in every test run.

#[path = "../../fuzz/exercise/checkpoint_import.rs"]
mod checkpoint_exercise;
#[path = "../../fuzz/exercise/serial_protocol.rs"]
mod serial_exercise;

use loglinear_tests::repo_root;

/// Runs `exercise` on every seed and regression input of `target`; returns the seeds' bytes.
fn replay(target: &str, exercise: fn(&[u8])) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut n = 0;
    for dir in ["fuzz/corpus", "fuzz/regressions"] {
        let Ok(entries) = std::fs::read_dir(repo_root().join(dir).join(target)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let bytes = std::fs::read(&p).unwrap();
            exercise(&bytes);
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if dir == "fuzz/corpus" && name.starts_with("seed-") {
                seeds.push((name, bytes));
            }
            n += 1;
        }
    }
    assert!(!seeds.is_empty(), "no seeds for {target}");
    eprintln!("{target}: replayed {n} inputs");
    seeds
}

#[test]
fn checkpoint_import_corpus_replays_without_panics() {
    use checkpoint_exercise::{split_input, with_tensor_data};
    // The seeds are the golden and trained models' configs and safetensors headers: they
    // import, so the fuzzer starts from deep paths.
    for (name, bytes) in replay(
        "checkpoint_import",
        checkpoint_exercise::exercise_checkpoint_import,
    ) {
        let (config, st) = split_input(&bytes);
        let ckpt = loglinear_converter::Checkpoint::from_bytes(config, &with_tensor_data(st))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        ckpt.model().unwrap();
    }
}

#[test]
fn checkpoint_import_input_split_round_trips() {
    use checkpoint_exercise::{join_input, split_input};
    let input = join_input(b"{}", b"\x02\0\0\0\0\0\0\0{}");
    assert_eq!(
        split_input(&input),
        (&b"{}"[..], &b"\x02\0\0\0\0\0\0\0{}"[..])
    );
    // A length past the end takes everything; fewer than 4 bytes is all safetensors.
    assert_eq!(split_input(b"\xff\0\0\0ab"), (&b"ab"[..], &b""[..]));
    assert_eq!(split_input(b"ab"), (&b""[..], &b"ab"[..]));
}

#[test]
fn serial_protocol_corpus_replays_without_panics() {
    replay("serial_protocol", serial_exercise::exercise_serial_protocol);
}
