//! `--json` of `inspect`, `plan` and `eval` parses with a JSON parser and carries numbers as
//! numbers; `--model`/`-m` and the positional spelling give the same result.

mod common;

use common::loglinear;
use serde_json::Value;

const TINY: &str = "models/tiny-ll-gdn-microbit-q8_0.gguf";
const SHIPPED: &str = "models/ll-gdn-mcu16k-q8_0.gguf";

/// The JSON object a successful run prints.
fn json_ok(args: &[&str]) -> Value {
    let out = loglinear(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn inspect_json() {
    let v = json_ok(&["inspect", "--json", TINY]);
    assert_eq!(v["file"], TINY);
    assert!(v["bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["metadata"]["general.architecture"], "loglinear_gdn");
    assert!(v["metadata"]["general.alignment"].is_u64() || v["alignment"].is_u64());
    let tensors = v["tensors"].as_array().unwrap();
    assert!(!tensors.is_empty());
    for t in tensors {
        assert!(t["name"].is_string() && t["type"].is_string(), "{t}");
        assert!(
            t["dims"].as_array().unwrap().iter().all(Value::is_u64),
            "{t}"
        );
        assert!(t["bytes"].as_u64().unwrap() > 0, "{t}");
    }
    assert_eq!(v["model"]["loads"], true);
    assert!(v["model"]["vocab"].as_u64().unwrap() > 0);
    // The same file by --model and -m.
    assert_eq!(json_ok(&["inspect", "--json", "--model", TINY]), v);
    assert_eq!(json_ok(&["inspect", "-m", TINY, "--json"]), v);
}

#[test]
fn inspect_json_of_a_refused_file_says_why_and_fails() {
    let dir = std::env::temp_dir().join(format!("loglinear-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A valid GGUF container without a model: the runtime refuses it.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    let file = dir.join("empty.gguf");
    std::fs::write(&file, bytes).unwrap();
    let out = loglinear(&["inspect", "--json", file.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON even when refused");
    assert_eq!(v["model"]["loads"], false);
    assert!(v["model"]["refused"].as_str().unwrap().len() > 3, "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("would refuse"));
}

#[test]
fn plan_json() {
    let v = json_ok(&["plan", "--json", "--board", "mps2-an386", "-m", SHIPPED]);
    assert_eq!(v["board"], "mps2-an386");
    assert_eq!(v["fits"], true);
    for key in ["needed_bytes", "available_bytes", "over_bytes"] {
        assert!(v["flash"][key].is_u64(), "flash {key}: {v}");
        assert!(v["ram"][key].is_u64(), "ram {key}: {v}");
    }
    assert!(v["ram"]["needed_bytes"].as_u64() <= v["ram"]["available_bytes"].as_u64());
    assert!(v["levels"].is_u64() && v["context"].is_u64());
    // The quality table beside the model gives recommendations.
    let at = v["recommendations"]["at"]
        .as_array()
        .expect("recommendations");
    assert!(!at.is_empty());
    assert!(at.iter().all(|r| r["context"].is_u64()));
}

#[test]
fn plan_json_of_a_model_that_does_not_fit_fails_with_the_json_printed() {
    let out = loglinear(&["plan", "--json", "--board", "microbit", "-m", SHIPPED]);
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["fits"], false);
    assert!(
        v["flash"]["over_bytes"].as_u64().unwrap() + v["ram"]["over_bytes"].as_u64().unwrap() > 0
    );
}

#[test]
fn eval_json() {
    let common = [
        "--text",
        "README.md",
        "--context",
        "32",
        "--bytes",
        "200",
        "--json",
    ];
    let mut args = vec!["eval", "-m", TINY];
    args.extend(common);
    let v = json_ok(&args);
    assert_eq!(v["model"], TINY);
    let bpb = v["bits_per_byte"].as_f64().unwrap();
    assert!(bpb > 0.0 && bpb < 16.0, "{v}");
    assert_eq!(v["windows"], 6);
    assert_eq!(v["context"], 32);
    assert_eq!(v["predictions"], 6 * 32);
    assert!(v["baseline"].is_null());
    // The positional spelling measures the same.
    let mut args = vec!["eval", TINY];
    args.extend(common);
    assert_eq!(json_ok(&args)["bits_per_byte"], v["bits_per_byte"]);
    // A baseline nests its own result.
    let mut args = vec!["eval", "-m", TINY, "--baseline", TINY];
    args.extend(common);
    let v = json_ok(&args);
    assert_eq!(v["baseline"]["bits_per_byte"], v["bits_per_byte"]);
}
