//! `loglinear generate --gpu` end to end: the prompt is prefilled on the GPU (lavapipe in CI),
//! the CPU decoder continues from the state it hands over, and greedy text is byte-identical to
//! the CPU-only run.

#![cfg(feature = "gpu")]

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

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

#[test]
fn gpu_prefill_continues_exactly_like_the_cpu() {
    // 200 prompt bytes: 4 chunks of 64 (the last one partial) and levels up to 8.
    let prompt = "ROMEO:\\nBut, soft! what light through yonder window breaks?\\n\
                  It is the east, and Juliet is the sun.\\nArise, fair sun, and kill the envious \
                  moon,\\nWho is already sick and pale with grief,\\nThat thou";
    for (model, state) in [
        ("models/ll-gdn-mcu-q8_0.gguf", "f32"),
        ("models/ll-mamba2-mcu", "f16"),
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
        ];
        let (cpu, _) = generate(&common);
        let mut with_gpu = common.to_vec();
        with_gpu.push("--gpu");
        let (gpu, note) = generate(&with_gpu);
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
