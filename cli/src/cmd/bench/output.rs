//! The report as markdown tables, CSV and JSON. Markdown and CSV rows are printed as they are
//! measured (a long benchmark shows its results as it goes); JSON is one object at the end.

use super::*;
use serde::Serialize;

/// Mean and sample standard deviation (llama-bench's `avg_ts` and `stddev_ts`).
pub(super) fn mean_stddev(samples: &[f64]) -> (f64, f64) {
    let n = samples.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = samples.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, 0.0);
    }
    let var = samples.iter().map(|s| (s - mean) * (s - mean)).sum::<f64>() / (n - 1) as f64;
    (mean, var.sqrt())
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

/// A markdown table's columns: header, width (cells are padded to it so that rows printed one
/// at a time line up; a longer cell widens only its own row), right alignment.
struct Columns(&'static [(&'static str, usize, bool)]);

const BENCH_COLUMNS: Columns = Columns(&[
    ("model", 16, false),
    ("size", 10, true),
    ("params", 6, true),
    ("backend", 13, false),
    ("kernel", 7, false),
    ("act", 3, false),
    ("state", 5, false),
    ("test", 11, true),
    ("t/s", 18, true),
]);

const CURVE_COLUMNS: Columns = Columns(&[
    ("model", 16, false),
    ("kernel", 7, false),
    ("act", 3, false),
    ("state", 5, false),
    ("context", 8, true),
    ("live levels", 11, true),
    ("live state", 10, true),
    ("µs/token", 9, true),
    ("t/s", 18, true),
]);

const QEMU_COLUMNS: Columns = Columns(&[
    ("model", 16, false),
    ("board", 14, false),
    ("core", 10, false),
    ("act", 3, false),
    ("kernel", 12, false),
    ("state", 5, false),
    ("test", 5, true),
    ("instructions/token", 18, true),
    ("instructions/MAC", 16, true),
]);

impl Columns {
    fn line(&self, out: &mut dyn Write, cells: &[String]) -> std::io::Result<()> {
        let mut s = String::from("|");
        for (c, &(_, w, right)) in cells.iter().zip(self.0) {
            if right {
                s += &format!(" {c:>w$} |");
            } else {
                s += &format!(" {c:<w$} |");
            }
        }
        writeln!(out, "{s}")
    }

    fn header(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let names: Vec<String> = self.0.iter().map(|(h, ..)| h.to_string()).collect();
        self.line(out, &names)?;
        let rule: Vec<String> = self
            .0
            .iter()
            .map(|&(_, w, right)| match right {
                true => format!("{}:", "-".repeat(w - 1)),
                false => "-".repeat(w),
            })
            .collect();
        self.line(out, &rule)
    }
}

/// A pp/tg row with numbers as numbers (CSV and JSON).
#[derive(Serialize)]
struct BenchRecord<'a> {
    model: &'a str,
    path: String,
    size_bytes: usize,
    params: usize,
    backend: &'a str,
    kernel: &'a str,
    act: &'a str,
    state: &'a str,
    test: &'a str,
    reps: usize,
    avg_ts: f64,
    stddev_ts: f64,
}

impl<'a> BenchRecord<'a> {
    fn new(m: &'a ModelInfo, r: &'a BenchRow) -> Self {
        let (avg_ts, stddev_ts) = mean_stddev(&r.samples);
        Self {
            model: &m.label,
            path: m.path.display().to_string(),
            size_bytes: m.size_bytes,
            params: m.params,
            backend: &r.backend,
            kernel: &r.kernel,
            act: r.act,
            state: r.state,
            test: &r.test,
            reps: r.samples.len(),
            avg_ts,
            stddev_ts,
        }
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.model.into(),
            human_size(self.size_bytes),
            short_count(self.params),
            self.backend.into(),
            self.kernel.into(),
            self.act.into(),
            self.state.into(),
            self.test.into(),
            format!("{:.2} ± {:.2}", self.avg_ts, self.stddev_ts),
        ]
    }
}

/// A decode-vs-context point with numbers as numbers.
#[derive(Serialize)]
struct CurveRecord<'a> {
    model: &'a str,
    path: String,
    kernel: &'a str,
    act: &'a str,
    state: &'a str,
    context: usize,
    live_levels: usize,
    live_state_bytes: usize,
    tokens: usize,
    reps: usize,
    us_per_token: f64,
    avg_ts: f64,
    stddev_ts: f64,
}

impl<'a> CurveRecord<'a> {
    fn new(m: &'a ModelInfo, r: &'a CurveRow) -> Self {
        let (avg_ts, stddev_ts) = mean_stddev(&r.samples);
        Self {
            model: &m.label,
            path: m.path.display().to_string(),
            kernel: &r.kernel,
            act: r.act,
            state: r.state,
            context: r.context,
            live_levels: r.live_levels,
            live_state_bytes: r.live_state_bytes,
            tokens: r.tokens,
            reps: r.samples.len(),
            us_per_token: 1e6 / avg_ts.max(1e-12),
            avg_ts,
            stddev_ts,
        }
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.model.into(),
            self.kernel.into(),
            self.act.into(),
            self.state.into(),
            self.context.to_string(),
            self.live_levels.to_string(),
            human_size(self.live_state_bytes),
            format!("{:.1}", self.us_per_token),
            format!("{:.2} ± {:.2}", self.avg_ts, self.stddev_ts),
        ]
    }
}

/// A board of `cargo xtask count` with numbers as numbers.
#[derive(Serialize)]
struct QemuRecord<'a> {
    model: &'a str,
    board: &'a str,
    core: &'a str,
    act: &'a str,
    kernel: &'a str,
    state: &'a str,
    test: &'a str,
    instructions_per_token: u64,
    instructions_per_mac: f64,
}

impl<'a> QemuRecord<'a> {
    fn new(r: &'a QemuRow) -> Self {
        Self {
            model: &r.model,
            board: &r.board,
            core: &r.core,
            act: &r.act,
            kernel: &r.kernel,
            state: &r.state,
            test: &r.test,
            instructions_per_token: r.insn_per_token,
            instructions_per_mac: r.insn_per_mac,
        }
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.model.into(),
            self.board.into(),
            self.core.into(),
            self.act.into(),
            self.kernel.into(),
            self.state.into(),
            self.test.into(),
            self.instructions_per_token.to_string(),
            format!("{:.1}", self.instructions_per_mac),
        ]
    }
}

/// Which table the printer is in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Bench,
    Curve,
    Qemu,
}

/// Prints rows to stdout as they come, a header before each table's first row.
#[derive(Default)]
pub(super) struct Printer {
    format: OutputFormat,
    section: Option<Section>,
    csv: Option<csv::Writer<std::io::Stdout>>,
}

impl Printer {
    pub(super) fn new(format: OutputFormat) -> Self {
        Self {
            format,
            section: None,
            csv: None,
        }
    }

    /// Starts `section` unless it is the current one: a blank line after a previous table,
    /// then the markdown header, or a new CSV writer that writes its header line.
    fn enter(&mut self, section: Section) -> std::io::Result<()> {
        if self.section == Some(section) {
            return Ok(());
        }
        if let Some(mut w) = self.csv.take() {
            w.flush()?;
        }
        let mut out = std::io::stdout().lock();
        if self.section.is_some() {
            writeln!(out)?;
        }
        self.section = Some(section);
        match self.format {
            OutputFormat::Md => match section {
                Section::Bench => BENCH_COLUMNS.header(&mut out)?,
                Section::Curve => CURVE_COLUMNS.header(&mut out)?,
                Section::Qemu => QEMU_COLUMNS.header(&mut out)?,
            },
            OutputFormat::Csv => self.csv = Some(csv::Writer::from_writer(std::io::stdout())),
            OutputFormat::Json => {}
        }
        Ok(())
    }

    fn row(
        &mut self,
        section: Section,
        columns: &Columns,
        cells: Vec<String>,
        record: impl Serialize,
    ) -> std::io::Result<()> {
        if self.format == OutputFormat::Json {
            return Ok(());
        }
        self.enter(section)?;
        match &mut self.csv {
            Some(w) => {
                w.serialize(record).map_err(std::io::Error::other)?;
                w.flush()
            }
            None => {
                let mut out = std::io::stdout().lock();
                columns.line(&mut out, &cells)?;
                out.flush()
            }
        }
    }

    pub(super) fn bench(&mut self, m: &ModelInfo, r: &BenchRow) -> std::io::Result<()> {
        let rec = BenchRecord::new(m, r);
        self.row(Section::Bench, &BENCH_COLUMNS, rec.cells(), rec)
    }

    pub(super) fn curve(&mut self, m: &ModelInfo, r: &CurveRow) -> std::io::Result<()> {
        let rec = CurveRecord::new(m, r);
        self.row(Section::Curve, &CURVE_COLUMNS, rec.cells(), rec)
    }

    pub(super) fn qemu(&mut self, r: &QemuRow) -> std::io::Result<()> {
        let rec = QemuRecord::new(r);
        self.row(Section::Qemu, &QEMU_COLUMNS, rec.cells(), rec)
    }

    /// After the last row: the model lines and notes (markdown: under the tables; CSV: on
    /// stderr, to keep stdout machine-readable), or the whole JSON object.
    pub(super) fn finish(mut self, report: &Report) -> std::io::Result<()> {
        if let Some(mut w) = self.csv.take() {
            w.flush()?;
        }
        let mut out = std::io::stdout().lock();
        match self.format {
            OutputFormat::Md => {
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
            }
            OutputFormat::Csv => {
                for n in &report.notes {
                    eprintln!("{n}");
                }
            }
            OutputFormat::Json => writeln!(out, "{:#}", report_json(report))?,
        }
        out.flush()
    }
}

/// The whole report as one JSON object; each row as its CSV record plus the timed samples.
pub(super) fn report_json(report: &Report) -> serde_json::Value {
    let with_samples = |mut v: serde_json::Value, samples: &[f64]| {
        v["samples_ts"] = json!(samples);
        v
    };
    let bench: Vec<_> = report
        .bench
        .iter()
        .map(|r| {
            let rec = BenchRecord::new(&report.models[r.model], r);
            with_samples(json!(rec), &r.samples)
        })
        .collect();
    let curve: Vec<_> = report
        .curve
        .iter()
        .map(|r| {
            let rec = CurveRecord::new(&report.models[r.model], r);
            with_samples(json!(rec), &r.samples)
        })
        .collect();
    let qemu: Vec<_> = report
        .qemu
        .iter()
        .map(|r| json!(QemuRecord::new(r)))
        .collect();
    json!({ "bench": bench, "curve": curve, "qemu": qemu, "notes": report.notes })
}
