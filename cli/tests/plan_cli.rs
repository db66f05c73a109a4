//! `loglinear plan` with a quality table: the recommended levels and state type per context,
//! chosen among the measured settings that fit the board, and a bad table named in the error.

mod common;

use common::repo;
use std::path::PathBuf;
use std::process::{Command, Output};

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .arg("plan")
        .args(args)
        .output()
        .expect("run loglinear")
}

fn table(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("loglinear-plan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn recommends_measured_levels_that_fit() {
    // b-l475e-iot01a holds 3 f16 levels of this model, no f32 ones: the recommendation is the
    // best measured row among those (2 levels f16 is worse, 15 levels do not fit).
    let csv = table(
        "good.levels.csv",
        "context,levels,state,bits_per_byte\n\
         1024,15,f32,2.00\n1024,3,f16,2.20\n1024,2,f16,2.40\n\
         16384,15,f32,1.90\n16384,15,f16,1.91\n16384,3,f16,2.50\n16384,2,f16,2.60\n",
    );
    let model = "models/ll-gdn-mcu16k-q8_0.gguf";
    let out = plan(&[
        "--board",
        "b-l475e-iot01a",
        "--model",
        model,
        "--levels",
        "3",
        "--levels-table",
        csv.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The Q8_0 file does not fit the L475's flash: the plan says so and exits non-zero, and
    // still advises on the state.
    assert!(!out.status.success());
    for want in [
        "recommended for b-l475e-iot01a",
        "1024-token context: 3 levels, f16 state, +0.200 bits per byte",
        "16384-token context: 3 levels, f16 state, +0.600 bits per byte",
    ] {
        assert!(stdout.contains(want), "{want:?} not in\n{stdout}");
    }
    // With --context, that context only, from the next measured one up. The stm32h743 holds
    // 15 levels in f16 but only 13 in f32: the f32 row does not fit, the f16 one does.
    let out = plan(&[
        "--board",
        "stm32h743",
        "--model",
        model,
        "--context",
        "2000",
        "--levels-table",
        csv.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "2000-token context: 15 levels, f16 state, +0.010 bits per byte \
             (1.9100 measured at 16384 tokens"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("1024-token context"), "{stdout}");
}

#[test]
fn a_bad_table_is_an_error_that_names_it() {
    let csv = table(
        "bad.levels.csv",
        "context,levels,state,bits_per_byte\n1024,4,f8,2\n",
    );
    let out = plan(&[
        "--board",
        "stm32h743",
        "--model",
        "models/ll-gdn-mcu16k-q8_0.gguf",
        "--levels-table",
        csv.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("bad.levels.csv") && stderr.contains("state \"f8\""),
        "{stderr}"
    );
}
