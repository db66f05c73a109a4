//! `--qemu` / `--qemu-table`: the firmware's instruction counts from `cargo xtask count`.

use super::*;

/// The task `--qemu` runs (`cargo xtask count`), found by its crate relative to the
/// repository root.
pub(super) const COUNT_INSTRUCTIONS: &str = "xtask/Cargo.toml";

/// Runs `cargo xtask count` (its progress goes to our stderr) and parses its table.
pub(super) fn run_count_instructions() -> Result<Vec<QemuRow>, BenchError> {
    let script = PathBuf::from(COUNT_INSTRUCTIONS);
    if !script.is_file() {
        return Err(BenchError::QemuScriptMissing { script });
    }
    eprintln!("running cargo xtask count (builds firmware, runs QEMU; minutes)…");
    let out = std::process::Command::new("cargo")
        .args(["xtask", "count"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|source| BenchError::QemuSpawn {
            script: script.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(BenchError::QemuFailed {
            script,
            status: out.status,
        });
    }
    parse_qemu_table(&String::from_utf8_lossy(&out.stdout), "cargo xtask count")
}

/// The cells of a markdown table line, trimmed; `None` for other lines.
pub(super) fn table_cells(line: &str) -> Option<Vec<String>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(
        inner
            .split('|')
            .map(|c| c.trim().trim_matches('`').to_string())
            .collect(),
    )
}

/// An integer cell, thousands separators allowed.
pub(super) fn parse_int(cell: &str) -> Option<u64> {
    cell.replace([',', '_', ' '], "").parse().ok()
}

/// Reads `cargo xtask count`'s markdown output (or a table with the same column names, as
/// in BENCHMARKS.md): columns are found by header name, so extra, missing or reordered ones
/// are fine. The model is the row's `model` cell, else the `Model FILE: …` line of older
/// outputs, else the script's default model.
pub(super) fn parse_qemu_table(text: &str, what: &str) -> Result<Vec<QemuRow>, BenchError> {
    // "Model models/x.gguf: N weight MACs per token. …"
    let default_model = text
        .lines()
        .find_map(|l| l.strip_prefix("Model ")?.split(':').next())
        .unwrap_or("models/ll-gdn-mcu-q8_0.gguf")
        .to_string();
    let mut rows = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(header) = table_cells(line) else {
            continue;
        };
        let col = |pred: &dyn Fn(&str) -> bool| header.iter().position(|h| pred(h));
        let (Some(board), Some(per_token), Some(per_mac)) = (
            col(&|h| h == "board"),
            col(&|h| h == "insns / token"),
            col(&|h| h == "insns / weight-MAC"),
        ) else {
            continue;
        };
        let core = col(&|h| h == "core");
        let model = col(&|h| h == "model");
        let act = col(&|h| h == "activations");
        let kernel = col(&|h| h == "integer kernels");
        let state = col(&|h| h.starts_with("state"));
        let levels = col(&|h| h == "levels");
        // "insns, n=16": the long run's token count names the test.
        let test = header
            .iter()
            .filter_map(|h| h.strip_prefix("insns, n="))
            .find(|n| *n != "0")
            .map_or("tg".to_string(), |n| format!("tg{n}"));
        for line in lines.by_ref() {
            let Some(cells) = table_cells(line) else {
                break;
            };
            let is_separator = cells
                .iter()
                .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')));
            if is_separator {
                continue;
            }
            let cell = |i: Option<usize>| i.and_then(|i| cells.get(i)).cloned().unwrap_or_default();
            let or_dash = |c: String| if c.is_empty() { "-".to_string() } else { c };
            let (Some(insn_per_token), Some(insn_per_mac)) = (
                parse_int(&cell(Some(per_token))),
                cell(Some(per_mac)).replace(',', "").parse::<f64>().ok(),
            ) else {
                continue;
            };
            let mut state = cell(state);
            if levels.is_some() {
                state = format!("{state} × {}", cell(levels));
            }
            rows.push(QemuRow {
                model: model.map_or(default_model.clone(), |_| cell(model)),
                board: cell(Some(board)),
                core: cell(core),
                act: or_dash(cell(act)),
                kernel: or_dash(cell(kernel)),
                state,
                test: test.clone(),
                insn_per_token,
                insn_per_mac,
            });
        }
    }
    if rows.is_empty() {
        return Err(BenchError::NoQemuTable { what: what.into() });
    }
    Ok(rows)
}
