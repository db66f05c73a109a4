//! The project's copies of the golden data and of the trained models agree with `../shared`
//! whenever it is present (developer machines and CI), so they cannot drift apart. Without
//! `../shared` (a user's clone) there is nothing to compare: both tests report as ignored, with
//! the reason, through libtest-mimic (libtest can ignore only at compile time).

use libtest_mimic::Trial;
use loglinear_tests::*;
use std::path::Path;

fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Asserts that every file under `copy` (but `skip`) equals its namesake under `shared`;
/// returns how many were compared.
fn assert_files_match(copy: &Path, shared: &Path, skip: &[&str]) -> usize {
    let mut n = 0;
    for f in files_under(copy) {
        let rel = f.strip_prefix(copy).unwrap();
        // Model files (*.gguf) are our own conversions, checked in model_file.rs.
        if skip.iter().any(|s| rel == Path::new(s)) || rel.extension().is_some_and(|e| e == "gguf")
        {
            continue;
        }
        let theirs = std::fs::read(shared.join(rel))
            .unwrap_or_else(|e| panic!("{}: not in {}: {e}", rel.display(), shared.display()));
        assert!(
            std::fs::read(&f).unwrap() == theirs,
            "{} differs from {}",
            rel.display(),
            shared.display()
        );
        n += 1;
    }
    n
}

fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let shared = shared_dir();
    if shared.is_none() {
        eprintln!("golden_sync: ../shared is absent (a user's clone): both tests are ignored");
    }
    let trial = |name: &str, test: fn(&Path)| {
        let dir = shared.clone();
        Trial::test(name, move || {
            test(&dir.ok_or("../shared is absent: nothing to compare")?);
            Ok(())
        })
        .with_ignored_flag(shared.is_none())
    };
    let trials = vec![
        trial("golden_copy_matches_shared", golden_copy_matches_shared),
        trial("model_copies_match_shared", model_copies_match_shared),
    ];
    libtest_mimic::run(&args, trials).exit();
}

fn golden_copy_matches_shared(shared: &Path) {
    let copy = Path::new(env!("CARGO_MANIFEST_DIR")).join("golden");
    let shared = shared.join("golden");
    let n = assert_files_match(&copy, &shared, &["manifest.json", "COPY.md"]);
    // The pruned manifest: every entry it keeps is the original entry, untouched.
    let ours: serde_json::Value =
        serde_json::from_slice(&std::fs::read(copy.join("manifest.json")).unwrap()).unwrap();
    let theirs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(shared.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(ours["plan"], theirs["plan"]);
    for section in ["operator", "layer", "model"] {
        for (name, entry) in cases(&ours, section) {
            assert_eq!(
                entry, theirs[section][&name],
                "manifest entry {section}/{name} differs"
            );
        }
    }
    assert!(n > 50, "only {n} files compared");
}

fn model_copies_match_shared(shared: &Path) {
    let copy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    let shared = shared.join("models");
    // Every model of ../shared has its copy here; the project's own models (trained with
    // `loglinear train`, e.g. ll-gdn-mcu16k) have no namesake there and are not compared.
    let mut n = 0;
    for entry in std::fs::read_dir(&shared).unwrap() {
        let theirs = entry.unwrap().path();
        if theirs.is_dir() {
            let ours = copy.join(theirs.file_name().unwrap());
            assert!(ours.is_dir(), "{} has no copy in models/", theirs.display());
            n += assert_files_match(&ours, &theirs, &[]);
        }
    }
    assert!(n >= 3 * 5, "only {n} files compared");
}
