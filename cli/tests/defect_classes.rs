//! The defect classes of issue 44, each driven through the flags and commands the earlier
//! robustness cases did not name: an output over an input by another flag, a failed command
//! that replaced its previous output, an output folder checked after the work, internal names
//! in messages, non-finite weights called fine, a flag dropped in silence, overflow in config
//! arithmetic, messages that name neither the flag nor the key, and a valid value refused.
//! (`src/declared_paths_tests.rs` walks every subcommand's declared paths.)

mod common;

use common::{loglinear, repo};
use loglinear_converter::model_source::AlignedBytes;
use loglinear_runtime::gguf::GgufFile;
use std::path::{Path, PathBuf};

const TINY: &str = "models/tiny-ll-gdn-microbit-q8_0.gguf";

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("loglinear-defects-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What no message may show: Rust's Debug forms and the parsers' own type names.
#[track_caller]
fn assert_in_words(err: &str) {
    for internal in [
        "Custom {",
        "kind:",
        "Os {",
        "IoError(",
        "ImageError(",
        "HashMetadata",
        "TensorInfo",
        "expected usize",
        "expected struct",
        "Some(",
        "None",
    ] {
        assert!(!err.contains(internal), "`{internal}` in: {err}");
    }
}

#[test]
fn an_output_over_an_input_through_another_flag_is_refused_and_the_input_kept() {
    let d = scratch("output-is-input");
    let model = d.join("m.gguf");
    std::fs::copy(repo().join(TINY), &model).unwrap();
    let text = d.join("t.txt");
    std::fs::write(
        &text,
        "To be, or not to be, that is the question: ".repeat(8),
    )
    .unwrap();
    let log = d.join("run").join("train_log.csv");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, "step,tokens,lr,loss,bits_per_token,grad_norm,val_bits_per_token,seconds\n1,64,0.001,5.0,7.2,1.0,,0.1\n").unwrap();
    let kept = |p: &Path| std::fs::read(p).unwrap();
    let (model_bytes, text_bytes, log_bytes) = (kept(&model), kept(&text), kept(&log));
    let link = d.join("link.txt");
    std::os::unix::fs::symlink(&text, &link).unwrap();
    for args in [
        vec![
            "eval",
            s(&model),
            "--text",
            s(&text),
            "--context",
            "8",
            "--per-position",
            s(&text),
        ],
        vec![
            "eval",
            s(&model),
            "--text",
            s(&text),
            "--context",
            "8",
            "--per-position",
            s(&model),
        ],
        vec![
            "eval",
            s(&model),
            "--text",
            s(&text),
            "--context",
            "8",
            "--per-position",
            s(&link),
        ],
        vec![
            "eval",
            s(&model),
            "--text",
            s(&text),
            "--context",
            "8",
            "--plot",
            s(&model),
        ],
        vec![
            "generate",
            "--model",
            s(&model),
            "-n",
            "2",
            "--save-snapshot",
            s(&model),
        ],
        vec!["loss-plot", s(log.parent().unwrap()), "-o", s(&log)],
        vec![
            "quantize",
            s(&model),
            "-o",
            s(&text),
            "--type",
            "q8_0",
            "--eval-text",
            s(&text),
        ],
    ] {
        let out = loglinear(&args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains("that is the input"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} worked first: {err}");
    }
    assert!(kept(&model) == model_bytes, "the model changed");
    assert!(kept(&text) == text_bytes, "the text changed");
    assert!(kept(&log) == log_bytes, "the log changed");
    // Two outputs of one command on one file, by two spellings.
    let csv = d.join("x.csv");
    let other = d.join("run").join("..").join("x.csv");
    let out = loglinear(&[
        "eval",
        s(&model),
        "--text",
        s(&text),
        "--context",
        "8",
        "--per-position",
        s(&csv),
        "--plot",
        s(&other),
    ]);
    assert!(
        stderr(&out).contains("are the same file"),
        "{}",
        stderr(&out)
    );
    // A device as an output: a file renamed over it would replace it (root may).
    let out = loglinear(&[
        "generate",
        "--model",
        s(&model),
        "-n",
        "2",
        "--save-snapshot",
        "/dev/null",
    ]);
    assert!(
        stderr(&out).contains("a device or a pipe, not a file"),
        "{}",
        stderr(&out)
    );
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}

#[test]
fn a_failed_command_leaves_its_previous_outputs_as_they_were() {
    let d = scratch("failed-keeps");
    let old = b"the previous output".to_vec();
    let out_gguf = d.join("out.gguf");
    let text = d.join("short.txt");
    std::fs::write(&text, "tiny").unwrap();
    // A missing evaluation text, and one too short for the measurement's window (found only
    // after the export: the measurement runs before the file is written).
    for args in [
        vec![
            "quantize",
            TINY,
            "-o",
            s(&out_gguf),
            "--type",
            "q4_0",
            "--eval-text",
            "/nonexistent/eval.txt",
        ],
        vec![
            "quantize",
            TINY,
            "-o",
            s(&out_gguf),
            "--type",
            "q4_0",
            "--eval-text",
            s(&text),
        ],
    ] {
        std::fs::write(&out_gguf, &old).unwrap();
        let out = loglinear(&args);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            std::fs::read(&out_gguf).unwrap() == old,
            "{args:?} replaced the output"
        );
        assert!(
            stderr(&out).contains("--eval-text") || stderr(&out).contains("--eval-context"),
            "{}",
            stderr(&out)
        );
    }
    // eval's per-position CSV is not written when its chart then fails.
    let csv = d.join("loss.csv");
    std::fs::write(&csv, &old).unwrap();
    let out = loglinear(&[
        "eval",
        TINY,
        "--text",
        "README.md",
        "--context",
        "16",
        "--bytes",
        "200",
        "--per-position",
        s(&csv),
        "--plot",
        s(&d.join("loss.png")),
        "--plot-size",
        "64x9000",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("plot size"), "{}", stderr(&out));
    assert!(std::fs::read(&csv).unwrap() == old, "the CSV was replaced");
    let leftovers: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".loglinear-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn output_folders_are_checked_before_training() {
    let d = scratch("before-training");
    let text = d.join("data.txt");
    std::fs::write(&text, "abcdefgh".repeat(64)).unwrap();
    let missing = d.join("nope").join("x.gguf");
    let run = d.join("run");
    let started = std::time::Instant::now();
    let out = loglinear(&[
        "train",
        "--model",
        TINY,
        "--data",
        s(&text),
        "--output",
        s(&run),
        "--steps",
        "2",
        "--context",
        "8",
        "--batch",
        "2",
        "--export",
        s(&missing),
    ]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("--export: cannot write") && err.contains("no such folder"),
        "{err}"
    );
    assert!(!run.exists(), "the run's folder was made before the check");
    let results = d.join("nope").join("results.json");
    let out = common::mqar(&["--output", s(&results), "--dims", "16", "--archs", "gdn"]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("--output: cannot write") && err.contains("no such folder"),
        "{err}"
    );
    assert!(started.elapsed().as_secs() < 60, "refused only after work");
}

#[test]
fn parser_errors_are_put_in_words() {
    let d = scratch("words");
    let config = std::fs::read(repo().join("models/ll-gdn-mcu/config.json")).unwrap();
    let header = |json: &str| {
        let mut b = (json.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(json.as_bytes());
        b
    };
    // safetensors: headers its parser refuses, each through serde with its own type names.
    for (i, st) in [
        header(r#"{"a": 1}"#),
        header(r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, "x"]}}"#),
        header("[1, 2]"),
        header("{\"a\": \u{0}"),
        b"\x10\x00".to_vec(),
    ]
    .iter()
    .enumerate()
    {
        let ckpt = d.join(format!("ckpt{i}"));
        std::fs::create_dir_all(&ckpt).unwrap();
        std::fs::write(ckpt.join("config.json"), &config).unwrap();
        std::fs::write(ckpt.join("model.safetensors"), st).unwrap();
        let out = loglinear(&["generate", "-m", s(&ckpt), "-n", "1"]);
        let err = stderr(&out);
        assert!(!out.status.success());
        assert!(err.contains("model.safetensors"), "{err}");
        assert_in_words(&err);
    }
    // serde_json: a results file to merge that is not JSON; tokenizers: a tokenizer.json that
    // is not one.
    let bad = d.join("bad.json");
    std::fs::write(&bad, "{\"runs\": [1,,]}").unwrap();
    let out = common::mqar(&["--merge", s(&bad)]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bad.json"), "{}", stderr(&out));
    assert_in_words(&stderr(&out));
    let ckpt = d.join("bpe");
    std::fs::create_dir_all(&ckpt).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(repo().join("models/ll-gdn-mcu").join(f), ckpt.join(f)).unwrap();
    }
    std::fs::write(
        ckpt.join("tokenizer.json"),
        r#"{"model": {"type": "BPE", "vocab": 3}}"#,
    )
    .unwrap();
    let out = loglinear(&["generate", "-m", s(&ckpt), "-n", "1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("tokenizer.json"), "{}", stderr(&out));
    assert_in_words(&stderr(&out));
    // tokenizers: a merge of tokens the vocabulary does not have.
    let bpe = d.join("bpe-merge");
    std::fs::create_dir_all(&bpe).unwrap();
    loglinear_tests::bpe_fixture::write_model_folder(&bpe);
    let path = bpe.join("tokenizer.json");
    let mut tok: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let merges = tok["model"]["merges"].as_array_mut().unwrap();
    let unknown = match merges[0].is_string() {
        true => serde_json::json!("qqqq zzzz"),
        false => serde_json::json!(["qqqq", "zzzz"]),
    };
    merges.push(unknown);
    std::fs::write(&path, tok.to_string()).unwrap();
    let out = loglinear(&["generate", "-m", s(&bpe), "-n", "1"]);
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(err.contains("qqqq"), "{err}");
    assert_in_words(&err);
    // serialport and io: a port that is not a terminal, a text that is a folder, an
    // unwritable chart.
    let out = loglinear(&["serial", "--port", "/dev/null", "-n", "1", "--timeout", "1"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("/dev/null"), "{}", stderr(&out));
    assert_in_words(&stderr(&out));
    let out = loglinear(&["eval", TINY, "--text", s(&d)]);
    assert!(stderr(&out).contains("--text") && stderr(&out).contains("a folder, not a file"));
    assert_in_words(&stderr(&out));
    let out = loglinear(&[
        "eval",
        TINY,
        "--text",
        "README.md",
        "--plot",
        s(&d.join("no/x.png")),
    ]);
    assert!(stderr(&out).contains("--plot"), "{}", stderr(&out));
    assert_in_words(&stderr(&out));
}

/// The tiny model with `value` over every element of `output_norm.weight`.
fn with_output_norm(d: &Path, value: f32) -> PathBuf {
    let bytes = std::fs::read(repo().join(TINY)).unwrap();
    let aligned = AlignedBytes::from_slice(&bytes);
    let file = GgufFile::parse(aligned.as_bytes()).unwrap();
    let t = file
        .tensors()
        .find(|t| t.name == "output_norm.weight")
        .unwrap();
    let at = t.data.as_ptr() as usize - aligned.as_bytes().as_ptr() as usize;
    let mut damaged = bytes.clone();
    for chunk in damaged[at..at + t.data.len()].chunks_exact_mut(4) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    let path = d.join("nan-norm.gguf");
    std::fs::write(&path, damaged).unwrap();
    path
}

#[test]
fn every_command_that_opens_a_model_refuses_non_finite_weights_alike() {
    let d = scratch("non-finite");
    let model = with_output_norm(&d, f32::NAN);
    let m = s(&model);
    for args in [
        vec!["inspect", m],
        vec!["inspect", m, "--json"],
        vec!["plan", "--board", "mps2-an386", "--model", m],
        vec!["generate", "--model", m, "-n", "2"],
        vec![
            "eval",
            m,
            "--text",
            "README.md",
            "--context",
            "8",
            "--bytes",
            "64",
        ],
        vec![
            "quantize",
            m,
            "-o",
            s(&d.join("q.gguf")),
            "--type",
            "q8_0",
            "--no-eval",
        ],
    ] {
        let out = loglinear(&args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?} called the model fine");
        assert!(
            err.contains("output_norm.weight holds a NaN or an infinity"),
            "{args:?}: {err}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("model: ok"),
            "{args:?}"
        );
    }
}

#[test]
fn a_prompt_after_resume_is_fed_after_the_restored_session() {
    let d = scratch("resume-prompt");
    let snap = d.join("s.snap");
    let greedy = ["--temperature", "0", "-n", "12"];
    let save = loglinear(
        &[
            &[
                "generate",
                "--model",
                TINY,
                "--prompt",
                "ROMEO:",
                "-n",
                "0",
                "--save-snapshot",
                s(&snap),
            ][..],
            &greedy[..2],
        ]
        .concat(),
    );
    assert!(save.status.success(), "{}", stderr(&save));
    let resumed = loglinear(
        &[
            &[
                "generate",
                "--model",
                TINY,
                "--resume",
                s(&snap),
                "--prompt",
                r"\nJU",
            ][..],
            &greedy[..],
        ]
        .concat(),
    );
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let whole = loglinear(
        &[
            &["generate", "--model", TINY, "--prompt", r"ROMEO:\nJU"][..],
            &greedy[..],
        ]
        .concat(),
    );
    assert!(resumed.stdout.starts_with(b"\nJU"), "{:?}", resumed.stdout);
    assert_eq!(&resumed.stdout[..], &whole.stdout[b"ROMEO:".len()..]);
    // The chunk prefills start from an empty state: refused with the prompt, not ignored.
    let out = loglinear(&[
        "generate",
        "--model",
        TINY,
        "--resume",
        s(&snap),
        "--prompt",
        "x",
        "--prefill",
        "chunkwise",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--prefill"), "{}", stderr(&out));
}

/// A checkpoint of the shipped GDN model whose config.json has `key` set to `value`.
fn config_with(d: &Path, key: &str, value: serde_json::Value) -> PathBuf {
    let ckpt = d.join(format!("ckpt-{key}"));
    std::fs::create_dir_all(&ckpt).unwrap();
    let src = repo().join("models/ll-gdn-mcu");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    config[key] = value;
    std::fs::write(ckpt.join("config.json"), config.to_string()).unwrap();
    std::fs::copy(
        src.join("model.safetensors"),
        ckpt.join("model.safetensors"),
    )
    .unwrap();
    ckpt
}

#[test]
fn config_sizes_that_overflow_and_bad_epsilons_name_their_key() {
    let d = scratch("config");
    let huge = serde_json::json!(1u64 << 62);
    for (key, value, want) in [
        ("hidden_size", huge.clone(), "hidden_size"),
        ("num_heads", huge.clone(), "num_heads"),
        ("head_dim", huge.clone(), "head_dim"),
        ("vocab_size", huge.clone(), "vocab_size"),
        ("num_hidden_layers", huge.clone(), "num_hidden_layers"),
        ("expand_v", serde_json::json!(1e30), "expand_v"),
        (
            "num_hidden_layers",
            serde_json::json!(0),
            "num_hidden_layers",
        ),
        ("norm_eps", serde_json::json!(-1.0), "norm_eps"),
        ("norm_eps", serde_json::json!(1e300), "norm_eps"),
    ] {
        let ckpt = config_with(&d, key, value.clone());
        let out = loglinear(&["generate", "-m", s(&ckpt), "-n", "1"]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{key} = {value}");
        assert!(err.contains(&format!("`{want}`")), "{key} = {value}: {err}");
        assert!(!err.contains("intermediate_size"), "{key} = {value}: {err}");
    }
    // A GGUF file's epsilon: NaN, named by its metadata key.
    let mut bytes = std::fs::read(repo().join(TINY)).unwrap();
    let key = b"norm_epsilon";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    bytes[at + 4..at + 8].copy_from_slice(&f32::NAN.to_le_bytes());
    let bad = d.join("nan-eps.gguf");
    std::fs::write(&bad, bytes).unwrap();
    let out = loglinear(&["generate", "-m", s(&bad), "-n", "1"]);
    let err = stderr(&out);
    assert!(
        err.contains("metadata key loglinear_gdn.norm_epsilon is NaN"),
        "{err}"
    );
}

#[test]
fn messages_name_the_flag_or_the_file() {
    let d = scratch("names");
    let out = loglinear(&[
        "quantize",
        TINY,
        "-o",
        s(&d.join("q.gguf")),
        "--type",
        "q4_0",
        "--eval-ctx",
        "0",
    ]);
    assert!(
        stderr(&out).contains("--eval-context 0"),
        "{}",
        stderr(&out)
    );
    assert!(!d.join("q.gguf").exists());
    let empty = d.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let out = loglinear(&["eval", TINY, "--text", s(&empty)]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains(s(&empty)), "{}", stderr(&out));
    // A prompt that is not UTF-8 is its bytes (the tokenizer is byte-level); a text flag that
    // is not UTF-8 is named.
    use std::os::unix::ffi::OsStrExt;
    let prompt = std::ffi::OsStr::from_bytes(b"R\xffO");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .args(["generate", "--model", TINY, "-n", "2", "--prompt"])
        .arg(prompt)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.starts_with(b"R\xffO"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .args([
            "convert",
            "models/ll-gdn-mcu",
            "-o",
            s(&d.join("c.gguf")),
            "--name",
        ])
        .arg(prompt)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).starts_with("error: --name: "),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_top_k_beyond_the_vocabulary_cuts_nothing() {
    let sampled = |extra: &[&str]| {
        let out = loglinear(
            &[
                &[
                    "generate",
                    "--model",
                    TINY,
                    "-n",
                    "24",
                    "--seed",
                    "7",
                    "--temperature",
                    "1",
                ][..],
                extra,
            ]
            .concat(),
        );
        assert!(out.status.success(), "{extra:?}: {}", stderr(&out));
        out.stdout
    };
    let uncut = sampled(&[]);
    for k in [
        "18446744073709551615",
        "340282366920938463463374607431768211456",
        "256",
    ] {
        assert_eq!(sampled(&["--top-k", k]), uncut, "--top-k {k}");
    }
    let out = loglinear(&["generate", "--model", TINY, "--top-k", "0"]);
    assert!(stderr(&out).contains("--top-k"), "{}", stderr(&out));
}
