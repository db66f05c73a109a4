//! `loglinear bench` on the tiny model with tiny sizes: the llama-bench-style table has the
//! right header, rows and numbers (markdown, CSV and JSON), `--curve` reports live levels,
//! `--qemu-table` folds in a `cargo xtask count` output, and bad arguments end in a clear
//! message and a nonzero exit, never a panic.

mod common;

use common::repo;
use loglinear_runtime::quant::KernelPath;
use std::process::{Command, Output};

const TINY: &str = "models/tiny-ll-gdn-microbit-q8_0.gguf";

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .arg("bench")
        .args(args)
        .output()
        .expect("run loglinear")
}

/// stdout of a successful run.
fn bench_ok(args: &[&str]) -> String {
    let out = bench(args);
    assert!(
        out.status.success(),
        "loglinear bench {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// stderr of a run that must fail cleanly.
fn bench_err(args: &[&str]) -> String {
    let out = bench(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "loglinear bench {args:?} succeeded");
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    assert!(!stderr.trim().is_empty(), "{args:?}: no message");
    stderr
}

/// The markdown tables of `stdout`: each a list of rows of trimmed cells, header first,
/// the `---` rule dropped.
fn tables(stdout: &str) -> Vec<Vec<Vec<String>>> {
    let mut tables = Vec::new();
    let mut current: Vec<Vec<String>> = Vec::new();
    for line in stdout.lines() {
        if let Some(inner) = line.strip_prefix('|').and_then(|l| l.strip_suffix('|')) {
            let cells: Vec<String> = inner.split('|').map(|c| c.trim().to_string()).collect();
            if !cells[0].starts_with("---") {
                current.push(cells);
            }
        } else if !current.is_empty() {
            tables.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        tables.push(current);
    }
    tables
}

/// "123.45 ± 6.78" → (123.45, 6.78).
fn rate(cell: &str) -> (f64, f64) {
    let (m, s) = cell.split_once(" ± ").expect("mean ± stddev");
    (m.parse().unwrap(), s.parse().unwrap())
}

const TINY_ARGS: [&str; 10] = [
    "--model", TINY, "-p", "16", "-n", "8", "--depth", "0,64", "--reps", "1",
];

#[test]
fn markdown_table_has_llama_bench_shape() {
    let stdout = bench_ok(&TINY_ARGS);
    let tables = tables(&stdout);
    assert_eq!(tables.len(), 1, "{stdout}");
    let t = &tables[0];
    assert_eq!(
        t[0],
        ["model", "size", "params", "backend", "kernel", "act", "state", "test", "t/s"]
    );
    let tests: Vec<(&str, &str)> = t[1..]
        .iter()
        .map(|r| (r[3].as_str(), r[7].as_str()))
        .collect();
    assert_eq!(
        tests,
        [
            ("CPU", "pp16"),
            ("CPU", "tg8"),
            ("CPU", "tg8@64"),
            ("CPU chunkwise", "pp16")
        ]
    );
    for r in &t[1..] {
        assert_eq!(r.len(), 9);
        assert_eq!(r[0], "ll-gdn 35K Q8_0");
        assert!(r[1].ends_with("KiB"), "{r:?}");
        assert_eq!((r[5].as_str(), r[6].as_str()), ("f32", "f32"));
        let (mean, stddev) = rate(&r[8]);
        assert!(mean > 0.0 && mean.is_finite(), "{r:?}");
        assert_eq!(stddev, 0.0, "one rep has no spread");
    }
    assert!(stdout.contains(TINY), "the notes name the model file");
}

#[test]
fn prefill_picks_the_pp_rows() {
    for (pick, backends) in [
        ("chunkwise", &["CPU chunkwise"][..]),
        ("step", &["CPU"][..]),
        ("step,chunkwise", &["CPU", "CPU chunkwise"][..]),
    ] {
        let args = [
            "--model",
            TINY,
            "-p",
            "16",
            "-n",
            "0",
            "--reps",
            "1",
            "--prefill",
            pick,
        ];
        let stdout = bench_ok(&args);
        let t = &tables(&stdout)[0];
        let rows: Vec<&str> = t[1..].iter().map(|r| r[3].as_str()).collect();
        assert_eq!(rows, backends, "--prefill {pick}: {stdout}");
    }
}

#[test]
fn every_kernel_path_and_both_activation_modes_get_rows() {
    let mut args = TINY_ARGS.to_vec();
    args.extend(["--activations", "both", "--kernel", "all", "--state", "f16"]);
    let stdout = bench_ok(&args);
    let t = &tables(&stdout)[0];
    let paths: Vec<&str> = KernelPath::available().map(|p| p.name()).collect();
    // f32 (no kernel path) and each path with q8: 3 tests each, then the chunkwise pp.
    assert_eq!(t.len() - 1, 3 * (1 + paths.len()) + 1, "{stdout}");
    for path in &paths {
        let rows = t.iter().filter(|r| r[4] == *path && r[5] == "q8").count();
        assert_eq!(rows, 3, "{path}: {stdout}");
    }
    assert!(t[1..].iter().all(|r| r[6] == "f16"));
}

#[test]
fn csv_and_json_outputs() {
    let mut args = TINY_ARGS[..8].to_vec();
    args.extend(["-o", "csv", "--reps", "2"]);
    let csv = bench_ok(&args);
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("model,path,size_bytes,params,backend,kernel,act,state,test,reps,avg_ts,stddev_ts")
    );
    let rows: Vec<Vec<&str>> = lines
        .filter(|l| !l.is_empty())
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 4, "{csv}");
    for r in &rows {
        assert_eq!(r.len(), 12, "{r:?}");
        // Numbers are plain numbers: bytes, weights, reps, mean and stddev apart.
        assert!(r[2].parse::<u64>().unwrap() > 0, "{r:?}");
        assert!(r[3].parse::<u64>().unwrap() > 0, "{r:?}");
        assert_eq!(r[9], "2");
        assert!(r[10].parse::<f64>().unwrap() > 0.0, "{r:?}");
        assert!(r[11].parse::<f64>().unwrap() >= 0.0, "{r:?}");
    }

    for flag in [&["--output", "json"][..], &["--json"]] {
        let mut args = TINY_ARGS.to_vec();
        args.extend(flag);
        let json: serde_json::Value = serde_json::from_str(&bench_ok(&args)).expect("json");
        let rows = json["bench"].as_array().expect("bench rows");
        assert_eq!(rows.len(), 4);
        for r in rows {
            assert!(r["avg_ts"].as_f64().unwrap() > 0.0, "{r}");
            assert_eq!(r["stddev_ts"].as_f64(), Some(0.0), "{r}");
            assert_eq!(r["samples_ts"].as_array().unwrap().len(), 1);
            assert_eq!(r["path"], TINY);
            assert!(r["size_bytes"].as_u64().unwrap() > 0);
        }
        assert_eq!(rows[2]["test"], "tg8@64");
    }
}

/// Rows are printed as they are measured: the first curve point is on stdout while the
/// second (a million tokens reached by stepping, minutes of work) is still running.
#[test]
fn rows_are_printed_as_measured() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .args([
            "bench", "--model", TINY, "--curve", "0,1024K", "--reach", "step",
        ])
        .args(["--curve-tokens", "4", "--reps", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run loglinear");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // Header, rule, then the context-0 row.
    let first_row = lines.nth(2).expect("a row").expect("utf-8");
    let still_running = child.try_wait().expect("wait").is_none();
    child.kill().ok();
    child.wait().ok();
    assert!(first_row.contains("| ll-gdn"), "{first_row}");
    assert!(still_running, "the row came only at the end");
}

#[test]
fn curve_reports_live_levels_per_context() {
    let stdout = bench_ok(&[
        "--model",
        TINY,
        "--curve",
        "0,64,1K",
        "--curve-tokens",
        "4",
        "--reps",
        "1",
    ]);
    let tables = tables(&stdout);
    assert_eq!(tables.len(), 1, "only the curve: {stdout}");
    let t = &tables[0];
    assert_eq!(
        t[0],
        [
            "model",
            "kernel",
            "act",
            "state",
            "context",
            "live levels",
            "live state",
            "µs/token",
            "t/s"
        ]
    );
    let points: Vec<(&str, usize)> = t[1..]
        .iter()
        .map(|r| (r[4].as_str(), r[5].parse().unwrap()))
        .collect();
    // After t tokens the live levels are those of position t − 1: none at t = 0, and at most
    // bitlen + 1 (64 = 0b100_0000: level 0 and the level holding the 64 tokens before).
    assert_eq!(points[0], ("0", 0));
    assert_eq!(points[1].0, "64");
    assert!((1..=8).contains(&points[1].1), "{stdout}");
    assert_eq!(points[2].0, "1024");
    assert!(t[1..].iter().all(|r| r[7].parse::<f64>().unwrap() > 0.0));
}

/// `cargo xtask count`'s first output format.
const SCRIPT_OUTPUT: &str = "
Model models/ll-gdn-mcu-q8_0.gguf: 1369088 weight MACs per token. Runs: `GEN n=0` and `GEN n=16`, temperature 0, prompt \"X\".

| board | core | state | levels | insns, n=0 | insns, n=16 | insns / token | insns / weight-MAC | stack peak B | stack reserve B |
| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| mps2-an386 | Cortex-M4F | f16 | 15 | 24062859 | 596378762 | 35769743 | 26.1 | 9000 | 16384 |
| riscv-virt | rv32imac | f32 | 15 | 337541750 | 5640507846 | 331435381 | 242.1 | 9000 | 16384 |
";

/// Its later format: a model, activations and kernel path per row.
const SCRIPT_OUTPUT_PER_ROW: &str = "
Runs: `GEN n=0` and `GEN n=32`, temperature 0, prompt \"X\".

| board | core | model | weight MACs / token | activations | integer kernels | state | levels | insns, n=0 | insns, n=32 | insns / token | insns / weight-MAC | stack peak B | stack reserve B |
| --- | --- | --- | ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| mps2-an500 | Cortex-M7 | ll-gdn-mcu-q8_0.gguf | 1369088 | q8 | cortex-m-dsp | f32 | 12 | 1 | 2 | 9876543 | 7.2 | 9000 | 16384 |
";

/// The QEMU table of `loglinear bench -p 0 -n 0 --qemu-table` on `text`.
fn qemu_table(text: &str, name: &str) -> Vec<Vec<String>> {
    let path = std::env::temp_dir().join(format!(
        "loglinear-bench-qemu-{name}-{}.md",
        std::process::id()
    ));
    std::fs::write(&path, text).unwrap();
    let stdout = bench_ok(&["-p", "0", "-n", "0", "--qemu-table", path.to_str().unwrap()]);
    std::fs::remove_file(&path).ok();
    let mut tables = tables(&stdout);
    assert_eq!(tables.len(), 1, "{stdout}");
    tables.remove(0)
}

#[test]
fn qemu_table_is_folded_in() {
    let t = qemu_table(SCRIPT_OUTPUT, "first");
    assert_eq!(
        t[0],
        [
            "model",
            "board",
            "core",
            "act",
            "kernel",
            "state",
            "test",
            "instructions/token",
            "instructions/MAC"
        ]
    );
    assert_eq!(
        t[1],
        [
            "models/ll-gdn-mcu-q8_0.gguf",
            "mps2-an386",
            "Cortex-M4F",
            "-",
            "-",
            "f16 × 15",
            "tg16",
            "35769743",
            "26.1"
        ]
    );
    assert_eq!(t[2][1], "riscv-virt");
    assert_eq!(t[2][7], "331435381");

    let t = qemu_table(SCRIPT_OUTPUT_PER_ROW, "per-row");
    assert_eq!(
        t[1],
        [
            "ll-gdn-mcu-q8_0.gguf",
            "mps2-an500",
            "Cortex-M7",
            "q8",
            "cortex-m-dsp",
            "f32 × 12",
            "tg32",
            "9876543",
            "7.2"
        ]
    );
}

#[test]
fn bad_arguments_give_clear_errors() {
    let cases: [(&[&str], &str); 13] = [
        (&["--reps", "0"], "--reps"),
        (&["--depth", "16Q"], "not a token count"),
        (&["-p", "99999999999"], "more than this benchmark takes"),
        (&["--curve", "64,,1K"], "not a token count"),
        (&["--kernel", "sse9"], "expected best, all or one of"),
        (&["--model", "no/such/model.gguf"], "no/such/model.gguf"),
        (&["-o", "csv", "--json"], "cannot be used with"),
        (&["-p", "0", "-n", "0"], "nothing to measure"),
        (&["--reach", "gpu"], "--reach gpu needs --gpu"),
        (&["--prefill", "chunkwise,gpu"], "--prefill gpu needs --gpu"),
        (&["--prefill", "walk"], "--prefill"),
        (&["--activations", "q4"], "--activations"),
        (
            &["-p", "0", "-n", "0", "--qemu-table", "Cargo.toml"],
            "no count-instructions table",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["--model", TINY];
        if args[0] == "--model" {
            all.clear();
        }
        all.extend_from_slice(args);
        let stderr = bench_err(&all);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn gpu_rows_and_contexts_reached_on_the_gpu() {
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(repo())
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .args(["bench", "--gpu"])
        .args(TINY_ARGS)
        .output()
        .expect("run loglinear");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = &tables(&stdout)[0];
    let gpu: Vec<&Vec<String>> = t.iter().filter(|r| r[3] == "GPU").collect();
    assert_eq!(gpu.len(), 1, "{stdout}");
    assert_eq!(gpu[0][7], "pp16");
    assert!(rate(&gpu[0][8]).0 > 0.0);
    assert!(
        stdout.contains("context 64 reached by the GPU prefill"),
        "{stdout}"
    );
    assert!(stdout.contains("GPU: "), "the notes name the adapter");
}

#[test]
fn qemu_outside_the_repository_says_where_to_run() {
    let out = Command::new(env!("CARGO_BIN_EXE_loglinear"))
        .current_dir(std::env::temp_dir())
        .args(["bench", "-p", "0", "-n", "0", "--qemu"])
        .output()
        .expect("run loglinear");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("run loglinear bench from the repository root"),
        "{stderr}"
    );
}
