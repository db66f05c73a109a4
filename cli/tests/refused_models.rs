//! Model files the runtime refuses: a NaN or an infinity among the weights is refused, naming
//! the tensor, by every command that opens the file, instead of decoding garbage and exiting 0
//! (`convert` and `quantize` never copy such a weight into a new file); a stray tensor is named,
//! not numbered; `inspect` lists a refused file and exits non-zero.

mod common;

use common::{loglinear, repo};
use loglinear_converter::model_source::AlignedBytes;
use loglinear_runtime::gguf::GgufFile;
use loglinear_runtime::DType;
use std::path::{Path, PathBuf};

/// The test-sized model with `value` written over one element of its first f32 tensor;
/// returns the file and that tensor's name.
fn damaged_model(dir: &Path, value: f32) -> (PathBuf, String) {
    let bytes = std::fs::read(repo().join("models/tiny-ll-gdn-microbit-q8_0.gguf")).unwrap();
    let aligned = AlignedBytes::from_slice(&bytes);
    let file = GgufFile::parse(aligned.as_bytes()).unwrap();
    let t = file.tensors().find(|t| t.dtype == DType::F32).unwrap();
    let at = t.data.as_ptr() as usize - aligned.as_bytes().as_ptr() as usize + 4 * 3;
    let mut damaged = bytes.clone();
    damaged[at..at + 4].copy_from_slice(&value.to_le_bytes());
    let path = dir.join(format!("damaged-{value}.gguf"));
    std::fs::write(&path, damaged).unwrap();
    (path, t.name.to_string())
}

#[test]
fn nan_and_infinite_weights_are_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("loglinear-non-finite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for value in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let (model, tensor) = damaged_model(&dir, value);
        let model = model.to_str().unwrap();
        let out_file = dir.join("out.gguf");
        let out = out_file.to_str().unwrap();
        for args in [
            &["generate", "--model", model, "-n", "4"][..],
            &["quantize", model, "-o", out, "--type", "q8_0", "--no-eval"][..],
        ] {
            let run = loglinear(args);
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(!run.status.success(), "{args:?} accepted a {value} weight");
            assert!(
                err.contains(&tensor) && err.contains("NaN or an infinity (element 3)"),
                "{args:?}: {err}"
            );
            assert!(run.stdout.is_empty(), "{args:?} generated: {err}");
            assert!(!out_file.exists(), "{args:?} wrote a file");
        }
    }
}

#[test]
fn inspect_lists_a_refused_file_and_exits_non_zero_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("loglinear-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bytes = std::fs::read(repo().join("models/tiny-ll-gdn-microbit-q8_0.gguf")).unwrap();
    let key = b"state_levels";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    bytes[at + 4..at + 8].copy_from_slice(&7u32.to_le_bytes());
    let path = dir.join("odd-levels.gguf");
    std::fs::write(&path, bytes).unwrap();
    let out = loglinear(&["inspect", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("the runtime would refuse this file: metadata key state_levels"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("43 tensors"));
    let good = loglinear(&["inspect", "models/tiny-ll-gdn-microbit-q8_0.gguf"]);
    assert!(good.status.success());
}

#[test]
fn a_stray_tensor_is_named_not_numbered() {
    let dir = std::env::temp_dir().join(format!("loglinear-stray-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bytes = std::fs::read(repo().join("models/tiny-ll-gdn-microbit-q8_0.gguf")).unwrap();
    let name = b"blk.1.ffn_gate.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap();
    bytes[at + 10..at + 14].copy_from_slice(b"gatX");
    let path = dir.join("stray.gguf");
    std::fs::write(&path, bytes).unwrap();
    let path = path.to_str().unwrap();
    for args in [
        &["generate", "--model", path, "-n", "1"][..],
        &["quantize", path, "-o", "/tmp/never.gguf", "--type", "q8_0"][..],
    ] {
        let out = loglinear(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains("(`blk.1.ffn_gatX.weight`)"), "{args:?}: {err}");
    }
}

#[test]
fn a_missing_tensor_is_named_not_counted() {
    let dir = std::env::temp_dir().join(format!("loglinear-missing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut bytes = std::fs::read(repo().join("models/tiny-ll-gdn-microbit-q8_0.gguf")).unwrap();
    let last = {
        let aligned = AlignedBytes::from_slice(&bytes);
        let file = GgufFile::parse(aligned.as_bytes()).unwrap();
        file.tensors().last().unwrap().name.to_string()
    };
    // One tensor fewer in the header: the file's last tensor drops out of the listing, and
    // the data section (aligned, relative offsets) stays readable.
    let count = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    bytes[8..16].copy_from_slice(&(count - 1).to_le_bytes());
    let path = dir.join("missing.gguf");
    std::fs::write(&path, bytes).unwrap();
    let path = path.to_str().unwrap();
    for args in [
        &["generate", "--model", path, "-n", "1"][..],
        &["inspect", path][..],
    ] {
        let out = loglinear(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            err.contains(&format!("tensor {last} is missing")),
            "{args:?}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
