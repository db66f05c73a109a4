//! `loglinear generate --prefill chunkwise|gpu` end to end: the prompt goes through the CPU
//! chunk algorithm (`loglinear-cpu-prefill`) or is prefilled on the GPU (lavapipe in CI), the
//! CPU decoder continues from the state it hands over, and greedy text is byte-identical to
//! feeding the prompt token by token. (With `--activations q8` the stepped prompt goes through
//! Q8 activations while both prefills stay f32, so those states differ by the activation
//! rounding and are not compared. An f16 state is rounded after every stepped token but only
//! once after a prefill; on this prompt that leaves greedy text unchanged for Mamba-2 but not
//! for the GDN model, whose text forks after 40 tokens: so GDN runs with an f32 state here.)

mod common;

use common::repo;
use std::process::Command;

/// 200 prompt bytes: 4 chunks of 64 (the last one partial) and levels up to 8.
const PROMPT: &str = "ROMEO:\\nBut, soft! what light through yonder window breaks?\\n\
                      It is the east, and Juliet is the sun.\\nArise, fair sun, and kill the \
                      envious moon,\\nWho is already sick and pale with grief,\\nThat thou";

/// The (model, state type) pairs every prefill is checked on.
const CASES: [(&str, &str); 2] = [
    ("models/ll-gdn-mcu-q8_0.gguf", "f32"),
    ("models/ll-mamba2-mcu", "f16"),
];

/// stdout of `loglinear generate` with `args`, after checking it succeeded.
fn generate(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        // Exact fp32 prefill: with tensor cores the projections take f16 inputs, and greedy
        // text may then legitimately differ from the CPU's.
        .env("LOGLINEAR_GPU_NO_COOP", "1")
        .arg("generate")
        .args(args)
        .output()
        .expect("run loglinear");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "loglinear generate {args:?} failed:\n{stderr}"
    );
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// `generate` with greedy sampling on a case, plus `extra` arguments: (stdout, stderr).
fn greedy(model: &str, state: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec![
        "--model",
        model,
        "--prompt",
        PROMPT,
        "-n",
        "60",
        "--temperature",
        "0",
        "--state",
        state,
    ];
    args.extend(extra);
    generate(&args)
}

#[test]
fn chunkwise_prefill_continues_exactly_like_stepping() {
    for (model, state) in CASES {
        let (stepped, _) = greedy(model, state, &[]);
        let (chunked, note) = greedy(model, state, &["--prefill", "chunkwise"]);
        assert_eq!(
            stepped, chunked,
            "{model} ({state} state): chunkwise prefill changed the greedy continuation"
        );
        assert!(note.contains("chunkwise CPU prefill"), "{note}");
    }
}

#[test]
fn gpu_prefill_continues_exactly_like_the_cpu() {
    for (model, state) in CASES {
        let (cpu, _) = greedy(model, state, &[]);
        let (gpu, note) = greedy(model, state, &["--gpu"]);
        assert_eq!(
            gpu, cpu,
            "{model}: GPU prefill changed the greedy continuation"
        );
        assert!(
            note.contains("GPU prefill on") && note.contains("tokens/s"),
            "{model}: no prefill report on stderr:\n{note}"
        );
    }
}

#[test]
fn unknown_prefill_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .args(["generate", "--prefill", "fpga", "-n", "1"])
        .output()
        .expect("run loglinear");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("step") && stderr.contains("chunkwise"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}
