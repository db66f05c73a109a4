//! The report as markdown tables, CSV and JSON.

use super::*;

/// Median and half the range.
pub(super) fn median_spread(samples: &[f64]) -> (f64, f64) {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let median = match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    };
    let spread = match (s.first(), s.last()) {
        (Some(lo), Some(hi)) => 0.5 * (hi - lo),
        _ => 0.0,
    };
    (median, spread)
}

pub(super) fn human_size(bytes: usize) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.2} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.2} KiB", b / 1024.0)
    }
}

/// A table: header, right-aligned columns, rows of cells.
pub(super) struct Table {
    header: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn bench(report: &Report) -> Self {
        let rows = report
            .bench
            .iter()
            .map(|r| {
                let m = &report.models[r.model];
                let (median, spread) = median_spread(&r.samples);
                vec![
                    m.label.clone(),
                    human_size(m.size_bytes),
                    short_count(m.params),
                    r.backend.clone(),
                    r.kernel.clone(),
                    r.act.into(),
                    r.state.into(),
                    r.test.clone(),
                    format!("{median:.2} ± {spread:.2}"),
                ]
            })
            .collect();
        Self {
            header: vec![
                "model", "size", "params", "backend", "kernel", "act", "state", "test", "t/s",
            ],
            right: vec![false, true, true, false, false, false, false, true, true],
            rows,
        }
    }

    fn curve(report: &Report) -> Self {
        let rows = report
            .curve
            .iter()
            .map(|r| {
                let (median, spread) = median_spread(&r.samples);
                vec![
                    report.models[r.model].label.clone(),
                    r.kernel.clone(),
                    r.act.into(),
                    r.state.into(),
                    r.context.to_string(),
                    r.live_levels.to_string(),
                    human_size(r.live_state_bytes),
                    format!("{:.1}", 1e6 / median.max(1e-12)),
                    format!("{median:.2} ± {spread:.2}"),
                ]
            })
            .collect();
        Self {
            header: vec![
                "model",
                "kernel",
                "act",
                "state",
                "context",
                "live levels",
                "live state",
                "µs/token",
                "t/s",
            ],
            right: vec![false, false, false, false, true, true, true, true, true],
            rows,
        }
    }

    fn qemu(report: &Report) -> Self {
        let rows = report
            .qemu
            .iter()
            .map(|r| {
                vec![
                    r.model.clone(),
                    r.board.clone(),
                    r.core.clone(),
                    r.act.clone(),
                    r.kernel.clone(),
                    r.state.clone(),
                    r.test.clone(),
                    r.insn_per_token.to_string(),
                    format!("{:.1}", r.insn_per_mac),
                ]
            })
            .collect();
        Self {
            header: vec![
                "model",
                "board",
                "core",
                "act",
                "kernel",
                "state",
                "test",
                "instructions/token",
                "instructions/MAC",
            ],
            right: vec![false, false, false, false, false, false, true, true, true],
            rows,
        }
    }

    fn write_markdown(&self, out: &mut impl Write) -> std::io::Result<()> {
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r[i].chars().count())
                .chain([self.header[i].chars().count(), 3])
                .max()
                .unwrap_or(3)
        };
        let widths: Vec<usize> = (0..self.header.len()).map(width).collect();
        let line = |out: &mut dyn Write, cells: &[String]| -> std::io::Result<()> {
            let mut s = String::from("|");
            for (i, c) in cells.iter().enumerate() {
                let pad = " ".repeat(widths[i].saturating_sub(c.chars().count()));
                if self.right[i] {
                    s += &format!(" {pad}{c} |");
                } else {
                    s += &format!(" {c}{pad} |");
                }
            }
            writeln!(out, "{s}")
        };
        let header: Vec<String> = self.header.iter().map(|h| h.to_string()).collect();
        line(out, &header)?;
        let rule: Vec<String> = widths
            .iter()
            .zip(&self.right)
            .map(|(&w, &r)| {
                if r {
                    format!("{}:", "-".repeat(w - 1))
                } else {
                    "-".repeat(w)
                }
            })
            .collect();
        line(out, &rule)?;
        for r in &self.rows {
            line(out, r)?;
        }
        Ok(())
    }

    fn write_csv(&self, out: &mut impl Write) -> std::io::Result<()> {
        let quote = |c: &str| {
            if c.contains([',', '"', '\n']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.to_string()
            }
        };
        let header: Vec<String> = self.header.iter().map(|h| quote(h)).collect();
        writeln!(out, "{}", header.join(","))?;
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(|c| quote(c)).collect();
            writeln!(out, "{}", cells.join(","))?;
        }
        Ok(())
    }
}

/// The report's non-empty tables, in output order (bench, curve, QEMU).
pub(super) fn tables(report: &Report) -> Vec<Table> {
    let mut tables = Vec::new();
    if !report.bench.is_empty() {
        tables.push(Table::bench(report));
    }
    if !report.curve.is_empty() {
        tables.push(Table::curve(report));
    }
    if !report.qemu.is_empty() {
        tables.push(Table::qemu(report));
    }
    tables
}

pub(super) fn write_markdown(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    for (i, table) in tables(report).iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        table.write_markdown(out)?;
    }
    if !report.models.is_empty() || !report.notes.is_empty() {
        writeln!(out)?;
    }
    for m in &report.models {
        writeln!(
            out,
            "model {}: {} ({} bytes of tensors, {} weights)",
            m.label,
            m.path.display(),
            m.size_bytes,
            m.params
        )?;
    }
    for n in &report.notes {
        writeln!(out, "{n}")?;
    }
    Ok(())
}

/// CSV: the t/s cells keep "median ± spread" so that every format shows the same table; the
/// JSON output has the numbers apart.
pub(super) fn write_csv(out: &mut impl Write, report: &Report) -> std::io::Result<()> {
    for (i, table) in tables(report).iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        table.write_csv(out)?;
    }
    for n in &report.notes {
        eprintln!("{n}");
    }
    Ok(())
}

pub(super) fn report_json(report: &Report) -> serde_json::Value {
    let model = |i: usize| {
        let m = &report.models[i];
        json!({
            "model": m.label,
            "path": m.path.display().to_string(),
            "size_bytes": m.size_bytes,
            "params": m.params,
        })
    };
    let bench: Vec<_> = report
        .bench
        .iter()
        .map(|r| {
            let (median, spread) = median_spread(&r.samples);
            let mut v = model(r.model);
            v["backend"] = json!(r.backend);
            v["kernel"] = json!(r.kernel);
            v["act"] = json!(r.act);
            v["state"] = json!(r.state);
            v["test"] = json!(r.test);
            v["tokens_per_s"] = json!(median);
            v["spread"] = json!(spread);
            v["samples"] = json!(r.samples);
            v
        })
        .collect();
    let curve: Vec<_> = report
        .curve
        .iter()
        .map(|r| {
            let (median, spread) = median_spread(&r.samples);
            let mut v = model(r.model);
            v["kernel"] = json!(r.kernel);
            v["act"] = json!(r.act);
            v["state"] = json!(r.state);
            v["context"] = json!(r.context);
            v["live_levels"] = json!(r.live_levels);
            v["live_state_bytes"] = json!(r.live_state_bytes);
            v["tokens"] = json!(r.tokens);
            v["us_per_token"] = json!(1e6 / median.max(1e-12));
            v["tokens_per_s"] = json!(median);
            v["spread"] = json!(spread);
            v["samples"] = json!(r.samples);
            v
        })
        .collect();
    let qemu: Vec<_> = report
        .qemu
        .iter()
        .map(|r| {
            json!({
                "model": r.model,
                "board": r.board,
                "core": r.core,
                "act": r.act,
                "kernel": r.kernel,
                "state": r.state,
                "test": r.test,
                "instructions_per_token": r.insn_per_token,
                "instructions_per_mac": r.insn_per_mac,
            })
        })
        .collect();
    json!({ "bench": bench, "curve": curve, "qemu": qemu, "notes": report.notes })
}
