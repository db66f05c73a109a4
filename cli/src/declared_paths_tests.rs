//! Every subcommand's declared paths ([`declared_paths`]): each path flag a command line gives
//! is declared; each output, given the path of each input and of each other output in turn, is
//! refused before any work with the input left as it was; each input, given a missing path, is
//! refused naming its flag.

use super::{declared_paths, run, Cli};
use clap::{CommandFactory, Parser};
use loglinear_converter::command_paths::Reads;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The scratch folder of one test, with a file for every kind of input.
fn fixture(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("loglinear-declared-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("ckpt")).unwrap();
    std::fs::create_dir_all(d.join("run")).unwrap();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tiny = repo.join("models/tiny-ll-gdn-microbit-q8_0.gguf");
    std::fs::copy(&tiny, d.join("model.gguf")).unwrap();
    std::fs::copy(&tiny, d.join("base.gguf")).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(
            repo.join("models/ll-gdn-mcu").join(f),
            d.join("ckpt").join(f),
        )
        .unwrap();
    }
    std::fs::copy(
        repo.join("models/ll-gdn-mcu/config.json"),
        d.join("config.json"),
    )
    .unwrap();
    for (f, text) in [
        ("text.txt", "To be, or not to be, that is the question.\n"),
        ("val.txt", "Whether 'tis nobler in the mind to suffer\n"),
        ("snap.bin", "a snapshot"),
        ("levels.csv", "context,levels,state,bits_per_byte\n"),
        ("count.txt", "| board |\n"),
        ("run/train_log.csv", "step,tokens,lr,loss\n"),
        ("merge.json", "{\"settings\": {}, \"runs\": []}"),
        ("firmware.elf", "\x7fELF"),
        ("port", "a serial port stand-in"),
    ] {
        std::fs::write(d.join(f), text).unwrap();
    }
    d
}

/// A command line per subcommand (two where flags exclude each other), every path flag given.
fn samples(d: &Path) -> Vec<Vec<String>> {
    let p = |f: &str| d.join(f).display().to_string();
    vec![
        line(&[
            "convert",
            "--model",
            &p("ckpt"),
            "--eval-text",
            &p("text.txt"),
            "--output",
            &p("out.gguf"),
        ]),
        line(&[
            "quantize",
            "--model",
            &p("model.gguf"),
            "--eval-text",
            &p("text.txt"),
            "--output",
            &p("out.gguf"),
            "--type",
            "q8_0",
        ]),
        line(&["inspect", "--model", &p("model.gguf")]),
        line(&[
            "eval",
            "--model",
            &p("model.gguf"),
            "--text",
            &p("text.txt"),
            "--baseline",
            &p("base.gguf"),
            "--per-position",
            &p("out.csv"),
            "--plot",
            &p("out.png"),
        ]),
        line(&[
            "generate",
            "--model",
            &p("model.gguf"),
            "--resume",
            &p("snap.bin"),
            "--save-snapshot",
            &p("out.snap"),
        ]),
        line(&[
            "plan",
            "--board",
            "mps2-an386",
            "--model",
            &p("model.gguf"),
            "--levels-table",
            &p("levels.csv"),
        ]),
        line(&[
            "serial",
            "--port",
            &p("port"),
            "--restore",
            &p("snap.bin"),
            "--snap",
            &p("out.snap"),
        ]),
        line(&[
            "serial",
            "--qemu-board",
            "mps2-an386",
            "--elf",
            &p("firmware.elf"),
            "--restore",
            &p("snap.bin"),
            "--snap",
            &p("out.snap"),
        ]),
        line(&[
            "bench",
            "--model",
            &p("model.gguf"),
            "--model",
            &p("base.gguf"),
            "--qemu-table",
            &p("count.txt"),
        ]),
        line(&[
            "train",
            "--config",
            &p("config.json"),
            "--data",
            &p("text.txt"),
            "--val",
            &p("val.txt"),
            "--output",
            &p("out-run"),
            "--export",
            &p("out.gguf"),
        ]),
        line(&[
            "train",
            "--model",
            &p("ckpt"),
            "--data",
            &p("text.txt"),
            "--output",
            &p("out-run"),
        ]),
        line(&[
            "loss-plot",
            &p("run/train_log.csv"),
            "--output",
            &p("out.png"),
        ]),
        line(&[
            "mqar",
            "--output",
            &p("results.json"),
            "--md",
            &p("table.md"),
        ]),
        line(&["mqar", "--merge", &p("merge.json"), "--md", &p("table.md")]),
    ]
}

/// A command line's arguments as owned strings.
fn line(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// Every file under `d`, with its bytes.
fn contents(d: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![d.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

fn parse(argv: &[String]) -> Cli {
    let line = std::iter::once("loglinear".to_string()).chain(argv.iter().cloned());
    Cli::try_parse_from(line).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

/// `argv` with the argument `from` replaced by `to`.
fn with(argv: &[String], from: &Path, to: &Path) -> Vec<String> {
    let from = from.display().to_string();
    assert!(argv.contains(&from), "{from} is not in {argv:?}");
    argv.iter()
        .map(|a| match *a == from {
            true => to.display().to_string(),
            false => a.clone(),
        })
        .collect()
}

#[test]
fn every_subcommand_declares_every_path_flag_it_is_given() {
    let d = fixture("flags");
    let samples = samples(&d);
    let cli = Cli::command();
    for sub in cli.get_subcommands() {
        let name = sub.get_name();
        let lines: Vec<_> = samples.iter().filter(|l| l[0] == name).collect();
        assert!(
            !lines.is_empty(),
            "no sample command line for `loglinear {name}`"
        );
        let path_flags: Vec<_> = sub
            .get_arguments()
            .filter(|a| a.get_value_parser().type_id() == std::any::TypeId::of::<PathBuf>())
            .collect();
        for line in lines {
            let declared = declared_paths(&parse(line).command).unwrap();
            let declared: Vec<&Path> = declared
                .inputs
                .iter()
                .map(|i| i.path.as_path())
                .chain(declared.outputs.iter().map(|o| o.path.as_path()))
                .collect();
            for arg in &path_flags {
                let Some(long) = arg.get_long() else { continue };
                let flag = format!("--{long}");
                let given = line.iter().position(|a| *a == flag).map(|i| &line[i + 1]);
                if let Some(value) = given {
                    assert!(
                        declared.contains(&Path::new(value)),
                        "loglinear {name} {flag} is not declared: {line:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn every_output_given_an_input_or_another_output_is_refused_before_any_work() {
    let d = fixture("outputs");
    let before = contents(&d);
    let mut tried = 0;
    for line in samples(&d) {
        let declared = declared_paths(&parse(&line).command).unwrap();
        let given = |p: &Path| line.contains(&p.display().to_string());
        for output in declared.outputs.iter().filter(|o| given(&o.path)) {
            // Paths the command line gives (not those derived from them, such as mqar's
            // checkpoint folder, which move with their flag's value).
            let others = declared
                .inputs
                .iter()
                .map(|i| (&i.flag, &i.path))
                .chain(
                    declared
                        .outputs
                        .iter()
                        .filter(|o| o.flag != output.flag)
                        .map(|o| (&o.flag, &o.path)),
                )
                .filter(|(_, path)| given(path));
            for (flag, path) in others {
                let argv = with(&line, &output.path, path);
                let e = run(parse(&argv))
                    .expect_err(&format!("{argv:?} ran"))
                    .to_string();
                assert!(
                    e.starts_with(&format!("{} ", output.flag)) || e.contains(&output.flag),
                    "{argv:?}: {e}"
                );
                assert!(
                    e.contains(&format!("the input {flag}")) || e.contains("are the same file"),
                    "{argv:?}: {e}"
                );
                assert!(contents(&d) == before, "{argv:?} changed a file");
                tried += 1;
            }
        }
    }
    assert!(tried >= 32, "only {tried} pairs tried");
}

#[test]
fn every_input_is_checked_before_any_work_naming_its_flag() {
    let d = fixture("inputs");
    let before = contents(&d);
    for line in samples(&d) {
        let declared = declared_paths(&parse(&line).command).unwrap();
        // A serial port is checked by the code that opens it (it suggests `--list-ports`).
        for input in declared.inputs.iter().filter(|i| i.kind != Reads::Device) {
            let missing = d.join("no-such-file");
            let argv = with(&line, &input.path, &missing);
            let e = run(parse(&argv))
                .expect_err(&format!("{argv:?} ran"))
                .to_string();
            let want = format!("{} {}: no such", input.flag, missing.display());
            assert!(e.starts_with(&want), "{argv:?}: {e}");
            assert!(contents(&d) == before, "{argv:?} changed a file");
        }
    }
}
