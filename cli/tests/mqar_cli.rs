//! `loglinear mqar` end to end on a tiny MQAR (vocab 20, length 16, one key–value pair, so
//! chance is 1 in 10 values): a GDN run and a Mamba-2 run (in micro-batches) learn well above
//! chance in 50 steps; a resumed invocation writes valid JSON and markdown; bad arguments are
//! clear errors.

use std::path::Path;

mod common;
use common::{mqar, temp};

/// The tiny task's flags (shared so that a rerun has the same settings).
const TINY: [&str; 14] = [
    "--vocab",
    "20",
    "--seq-len",
    "16",
    "--kv",
    "1",
    "--train-examples",
    "2048",
    "--test-examples",
    "256",
    "--batch",
    "32",
    "--dims",
    "16",
];

fn results(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn check_run(run: &serde_json::Value) -> f64 {
    let acc = run["accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&acc), "accuracy {acc}");
    let per_kv = run["per_kv"].as_object().unwrap();
    assert_eq!(per_kv.len(), 1, "{run}");
    let mean = per_kv["1"].as_f64().unwrap();
    assert_eq!(mean, acc, "the mean of one kv setting");
    for v in per_kv.values() {
        assert!((0.0..=1.0).contains(&v.as_f64().unwrap()));
    }
    acc
}

#[test]
fn tiny_runs_learn_and_resume() {
    let dir = temp("tiny");
    let out = dir.join("results.json");
    let md = dir.join("results.md");
    let (o, m) = (out.to_str().unwrap(), md.to_str().unwrap());
    // The official LMs' untied head and init: the setting this tiny task is known to learn
    // quickly in (Zoology's tied head, the default, learns it more slowly: 16-20 % here).
    let mut args: Vec<&str> = TINY.to_vec();
    args.extend([
        "--archs", "gdn", "--lrs", "2e-2", "--steps", "50", "--head", "untied", "--init",
        "official", "--out", o, "--md", m,
    ]);
    let r = mqar(&args);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    let v = results(&out);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let acc = check_run(&runs[0]);
    assert_eq!(runs[0]["steps"], 50);
    eprintln!("gdn tiny MQAR: mean test accuracy {acc:.3} (chance 0.1)");
    assert!(acc >= 0.2, "no better than chance: {acc}\n{stderr}");

    // A Mamba-2 run added to the same file (the GDN run is skipped, not redone).
    let mut args: Vec<&str> = TINY.to_vec();
    args.extend([
        "--head",
        "untied",
        "--init",
        "official",
        "--archs",
        "gdn,mamba2",
        "--lrs",
        "2e-2",
        "--steps",
        "50",
        "--max-seconds-per-run",
        "1e-3",
        "--out",
        o,
        "--md",
        m,
    ]);
    // The time limit differs: another setting, refused.
    let r = mqar(&args);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success());
    assert!(stderr.contains("other settings"), "{stderr}");
    args.truncate(args.len() - 6);
    // Micro-batches of 16 (two per step, gradients accumulated): not a setting of the file.
    args.extend(["--micro-batch", "16", "--out", o, "--md", m]);
    let r = mqar(&args[..]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    assert!(stderr.contains("1 runs to do, 1 already"), "{stderr}");
    let v = results(&out);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["arch"], "gdn");
    assert_eq!(runs[1]["arch"], "mamba2");
    // Plain Mamba-2 learns too (31 % here, chance 10 %): its whole training path end to end.
    let acc = check_run(&runs[1]);
    eprintln!("mamba2 tiny MQAR: mean test accuracy {acc:.3} (chance 0.1)");
    assert!(acc >= 0.2, "mamba2 no better than chance: {acc}\n{stderr}");
    let table = std::fs::read_to_string(&md).unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert_eq!(stdout, table, "stdout and --md differ");
    assert!(table.contains("| 16 |"), "{table}");
    assert!(
        table.contains("/ 46.9 (2.3)"),
        "paper's Mamba-2 number: {table}"
    );
    assert!(
        table.contains("/ 38.4 (1.0)"),
        "paper's GDN number: {table}"
    );
    assert!(table.contains("| mamba2 | 16 | 2.00e-2 |"), "{table}");

    // Nothing left to do: the file is kept as it is.
    let before = std::fs::read_to_string(&out).unwrap();
    let r = mqar(&args[..]);
    assert!(r.status.success());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), before);

    // The defaults (Zoology's tied head and init) are another setting, so another file;
    // --merge makes one table of both files and lists each file's settings.
    let out2 = dir.join("tied.json");
    let o2 = out2.to_str().unwrap();
    let mut args: Vec<&str> = TINY.to_vec();
    args.extend([
        "--archs", "gdn", "--lrs", "1e-2", "--steps", "20", "--out", o2,
    ]);
    let r = mqar(&args);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(results(&out2)["settings"]["head"], "tied");
    assert_eq!(results(&out2)["settings"]["init"], "zoology");
    assert_eq!(results(&out2)["settings"]["gdn_expand_v"], 2);
    assert_eq!(results(&out)["settings"]["head"], "untied");
    let merged = dir.join("merged.md");
    let both = format!("{o},{o2}");
    let r = mqar(&[
        "--merge",
        &both,
        "--kv",
        "1",
        "--dims",
        "16",
        "--md",
        merged.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    let table = std::fs::read_to_string(&merged).unwrap();
    assert_eq!(String::from_utf8_lossy(&r.stdout), table);
    // Every run names its file: runs of different settings are never pooled as seeds.
    assert!(
        table.contains("| gdn | 16 | `results.json` | 2.00e-2 | 1 |"),
        "{table}"
    );
    assert!(
        table.contains("| gdn | 16 | `tied.json` | 1.00e-2 | 1 |"),
        "{table}"
    );
    assert!(
        table.contains("| mamba2 | 16 | `results.json` | 2.00e-2 |"),
        "{table}"
    );
    assert!(
        table.contains("(2 runs)") && table.contains("(1 run)"),
        "{table}"
    );
    assert!(table.contains("\"head\":\"untied\""), "{table}");
    assert!(table.contains("\"head\":\"tied\""), "{table}");
    let r = mqar(&[
        "--merge",
        &format!("{o},{}", dir.join("none.json").display()),
    ]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("--merge") && err.contains("none.json: no such file"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_are_clear_errors() {
    let dir = temp("bad");
    let out = dir.join("r.json");
    let o = out.to_str().unwrap();
    for (args, want) in [
        (
            vec!["--archs", "transformer"],
            "invalid value 'transformer'",
        ),
        (vec!["--lrs", "0"], "--lrs"),
        (vec!["--batch", "0"], "--batch"),
        (vec!["--kv", "100"], "--kv 100"),
        (vec!["--dims", "20", "--archs", "mamba2"], "--dims 20"),
        (vec!["--steps", "0"], "--steps"),
        (vec!["--micro-batch", "3"], "--micro-batch 3"),
        (vec!["--gdn-expand-v", "0"], "--gdn-expand-v"),
        (vec!["--early-stop", "nan"], "--early-stop"),
        (
            vec!["--train-examples", "2", "--kv", "4,8,16"],
            "--train-examples",
        ),
        (
            vec!["--train-examples", "10,10", "--kv", "4,8,16"],
            "--train-examples: 2 numbers for 3 --kv settings",
        ),
    ] {
        let mut a = args.clone();
        a.extend(["--out", o]);
        let r = mqar(&a);
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert!(!r.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?} wrote results");
    }
    std::fs::write(&out, "not json").unwrap();
    let r = mqar(&["--out", o]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success());
    assert!(stderr.contains("not MQAR results JSON"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
