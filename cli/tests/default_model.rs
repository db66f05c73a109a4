//! Without `--model`, `generate` and `bench` find the shipped model from the binary's
//! repository, whatever the current folder.

use std::process::Command;

#[test]
fn generate_and_bench_run_the_shipped_model_from_any_folder() {
    let elsewhere = std::env::temp_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(&elsewhere)
        .args(["generate", "-n", "4", "--temperature", "0"])
        .output()
        .expect("run loglinear");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ROMEO:\n"));

    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(&elsewhere)
        .args([
            "bench", "-p", "0", "-n", "2", "--depth", "0", "--reps", "1", "--json",
        ])
        .output()
        .expect("run loglinear");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let path = v["bench"][0]["path"].as_str().expect("a row");
    assert!(path.ends_with("models/ll-gdn-mcu-q8_0.gguf"), "{path}");
}
