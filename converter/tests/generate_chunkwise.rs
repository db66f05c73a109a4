//! `loglinear generate --prefill chunkwise` end to end: the prompt goes through the CPU chunk
//! algorithm (`loglinear-cpu-prefill`), the decoder continues from the state it hands over,
//! and greedy text is byte-identical to feeding the prompt token by token. (With
//! `--activations q8` the stepped prompt goes through Q8 activations while the chunk algorithm
//! stays f32, so the two states differ by the activation rounding and are not compared. An
//! f16 state is rounded after every stepped token but only once after a prefill; on this
//! prompt that leaves greedy text unchanged for Mamba-2, as in `generate_gpu.rs`, but not for
//! the GDN model, whose text forks after 40 tokens.)

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// (stdout, stderr) of `loglinear generate` with `args`, after checking it succeeded.
fn generate(args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
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

#[test]
fn chunkwise_prefill_continues_exactly_like_stepping() {
    // 200 prompt bytes: 4 chunks of 64 (the last one partial) and levels up to 8.
    let prompt = "ROMEO:\\nBut, soft! what light through yonder window breaks?\\n\
                  It is the east, and Juliet is the sun.\\nArise, fair sun, and kill the envious \
                  moon,\\nWho is already sick and pale with grief,\\nThat thou";
    for (model, state, act) in [
        ("models/ll-gdn-mcu-q8_0.gguf", "f32", "f32"),
        ("models/ll-mamba2-mcu", "f16", "f32"),
    ] {
        let common = [
            "--model",
            model,
            "--prompt",
            prompt,
            "-n",
            "60",
            "--temperature",
            "0",
            "--state",
            state,
            "--activations",
            act,
        ];
        let (stepped, _) = generate(&common);
        let mut chunked = common.to_vec();
        chunked.extend(["--prefill", "chunkwise"]);
        let (chunked, note) = generate(&chunked);
        assert_eq!(
            stepped, chunked,
            "{model} ({state} state, {act} activations): chunkwise prefill changed the text"
        );
        assert!(note.contains("chunkwise CPU prefill"), "{note}");
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
