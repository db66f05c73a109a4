//! The sweep's records: reading, merging and saving the results file, and the markdown
//! table beside the paper's numbers.

use super::*;

/// One finished run, as stored in the results file.
#[derive(Clone, Debug)]
pub struct RunRecord {
    pub arch: MqarArch,
    pub dim: usize,
    pub lr: f64,
    pub seed: u64,
    /// Mean over kv settings of the per-setting accuracy (0..1).
    pub accuracy: f64,
    /// Zoology's pooled accuracy over all scored positions.
    pub pooled: f64,
    pub per_kv: Vec<(usize, f64)>,
    pub steps: u64,
    pub seconds: f64,
    /// `steps`, `early-stop`, `time-budget` (cut to fit `--max-seconds-per-run`), `time`
    /// (stopped at it) or `diverged`.
    pub stopped: String,
    pub final_loss: f64,
    pub params: usize,
    /// (step, mean accuracy) of every evaluation.
    pub evals: Vec<(u64, f64)>,
    /// Which `--merge` file the run came from (0 outside a merge; not saved). Runs of
    /// different files are never pooled as seeds: their settings may differ.
    pub file: usize,
}

impl RunRecord {
    pub(super) fn same_run(&self, arch: MqarArch, dim: usize, lr: f64, seed: u64) -> bool {
        self.arch == arch && self.dim == dim && self.seed == seed && same_lr(self.lr, lr)
    }

    pub(super) fn to_json(&self) -> serde_json::Value {
        let per_kv: serde_json::Map<String, serde_json::Value> = self
            .per_kv
            .iter()
            .map(|(kv, a)| (kv.to_string(), serde_json::json!(a)))
            .collect();
        serde_json::json!({
            "arch": self.arch.name(),
            "dim": self.dim,
            "lr": self.lr,
            "seed": self.seed,
            "accuracy": self.accuracy,
            "pooled_accuracy": self.pooled,
            "per_kv": per_kv,
            "steps": self.steps,
            "seconds": self.seconds,
            "stopped": self.stopped,
            "final_loss": finite_or_null(self.final_loss),
            "params": self.params,
            "evals": self.evals.iter().map(|(s, a)| serde_json::json!([s, a])).collect::<Vec<_>>(),
        })
    }

    pub(super) fn from_json(v: &serde_json::Value) -> Option<Self> {
        let f = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
        let u = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
        let mut per_kv: Vec<(usize, f64)> = v
            .get("per_kv")?
            .as_object()?
            .iter()
            .filter_map(|(k, a)| Some((k.parse().ok()?, a.as_f64()?)))
            .collect();
        per_kv.sort_by_key(|p| p.0);
        Some(Self {
            arch: MqarArch::from_name(v.get("arch")?.as_str()?)?,
            dim: u("dim")? as usize,
            lr: f("lr")?,
            seed: u("seed")?,
            accuracy: f("accuracy")?,
            pooled: f("pooled_accuracy").unwrap_or(f64::NAN),
            per_kv,
            steps: u("steps").unwrap_or(0),
            seconds: f("seconds").unwrap_or(0.0),
            stopped: v.get("stopped")?.as_str()?.to_string(),
            final_loss: f("final_loss").unwrap_or(f64::NAN),
            params: u("params").unwrap_or(0) as usize,
            evals: v
                .get("evals")
                .and_then(|e| e.as_array())
                .map(|e| {
                    e.iter()
                        .filter_map(|p| Some((p.get(0)?.as_u64()?, p.get(1)?.as_f64()?)))
                        .collect()
                })
                .unwrap_or_default(),
            file: 0,
        })
    }
}

pub(super) fn finite_or_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!(x)
    } else {
        serde_json::Value::Null
    }
}

pub(super) fn same_lr(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// Reads the runs of an earlier invocation (none when the file does not exist). A file made
/// with other settings is an error: mixing them would compare unlike runs.
pub fn load_results(args: &MqarArgs) -> Result<Vec<RunRecord>, MqarError> {
    let path = &args.out;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(MqarError::Read {
                path: path.clone(),
                source,
            })
        }
    };
    let v = parse_results(path, &text)?;
    let want = settings_json(args);
    if v.get("settings") != Some(&want) {
        return Err(MqarError::ResultsOfOtherSettings {
            path: path.clone(),
            found: settings_text(&v),
            want: want.to_string(),
        });
    }
    runs_of(path, &v)?
        .iter()
        .map(|r| run_from_json(path, r))
        .collect()
}

/// The results file `path` holding `text`, as JSON.
fn parse_results(path: &std::path::Path, text: &str) -> Result<serde_json::Value, MqarError> {
    serde_json::from_str(text).map_err(|source| MqarError::NotResultsJson {
        path: path.to_path_buf(),
        source,
    })
}

/// The `runs` array of the results file `path`.
fn runs_of<'a>(
    path: &std::path::Path,
    v: &'a serde_json::Value,
) -> Result<&'a Vec<serde_json::Value>, MqarError> {
    v.get("runs")
        .and_then(|r| r.as_array())
        .ok_or_else(|| MqarError::NoRuns {
            path: path.to_path_buf(),
        })
}

/// One record of the `runs` array of the results file `path`.
fn run_from_json(path: &std::path::Path, r: &serde_json::Value) -> Result<RunRecord, MqarError> {
    RunRecord::from_json(r).ok_or_else(|| MqarError::MalformedRun {
        path: path.to_path_buf(),
        record: r.to_string(),
    })
}

/// A results file's settings as JSON text, `none` when it has none.
fn settings_text(v: &serde_json::Value) -> String {
    v.get("settings").map_or("none".into(), |s| s.to_string())
}

/// One markdown report of the runs in the `--merge` files (their settings may differ: each
/// is listed, every run names its file, and seeds are pooled within a file only).
pub fn merge_tables(args: &MqarArgs) -> Result<String, MqarError> {
    let mut runs = Vec::new();
    let mut notes = String::from("\n## Results files\n\n");
    for (file, path) in args.merge.iter().enumerate() {
        let text = std::fs::read_to_string(path).map_err(|source| MqarError::Read {
            path: path.clone(),
            source,
        })?;
        let v = parse_results(path, &text)?;
        let file_runs = runs_of(path, &v)?;
        for r in file_runs {
            let mut run = run_from_json(path, r)?;
            run.file = file;
            runs.push(run);
        }
        let settings = settings_text(&v);
        notes.push_str(&format!(
            "- `{}` ({} run{}): {settings}\n",
            path.display(),
            file_runs.len(),
            if file_runs.len() == 1 { "" } else { "s" }
        ));
    }
    Ok(markdown(args, &runs) + &notes)
}

/// Writes every run (atomically: a temporary file renamed over the old one) and the markdown.
pub fn save_results(args: &MqarArgs, runs: &[RunRecord]) -> Result<(), MqarError> {
    let v = serde_json::json!({
        "settings": settings_json(args),
        "runs": runs.iter().map(RunRecord::to_json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&v)?;
    write_atomic(&args.out, &text)?;
    if let Some(md) = &args.md {
        write_atomic(md, &markdown(args, runs))?;
    }
    Ok(())
}

pub(super) fn write_atomic(path: &std::path::Path, text: &str) -> Result<(), MqarError> {
    loglinear_converter::output_file::write_atomic(path, text.as_bytes())?;
    Ok(())
}

/// Mean and (population) standard deviation.
pub(super) fn mean_std(x: &[f64]) -> (f64, f64) {
    let n = x.len().max(1) as f64;
    let m = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n;
    (m, var.sqrt())
}

/// The best learning rate of (arch, dim) by mean accuracy over seeds: (lr, runs at it). The
/// seeds pooled are those of one results file (`RunRecord::file`).
pub(super) fn best_lr(
    runs: &[RunRecord],
    arch: MqarArch,
    dim: usize,
) -> Option<(f64, Vec<&RunRecord>)> {
    let mut groups: Vec<(usize, f64)> = Vec::new();
    for r in runs.iter().filter(|r| r.arch == arch && r.dim == dim) {
        if !groups.iter().any(|&(f, l)| f == r.file && same_lr(l, r.lr)) {
            groups.push((r.file, r.lr));
        }
    }
    groups
        .into_iter()
        .map(|(file, lr)| {
            let at: Vec<&RunRecord> = runs
                .iter()
                .filter(|r| r.arch == arch && r.dim == dim && r.file == file && same_lr(r.lr, lr))
                .collect();
            (lr, at)
        })
        .max_by(|a, b| {
            let ma = mean_std(&a.1.iter().map(|r| r.accuracy).collect::<Vec<_>>()).0;
            let mb = mean_std(&b.1.iter().map(|r| r.accuracy).collect::<Vec<_>>()).0;
            ma.total_cmp(&mb)
        })
}

pub(super) fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

pub(super) fn pct_std(x: &[f64]) -> String {
    let (m, s) = mean_std(x);
    if x.len() > 1 {
        format!("{} ({})", pct(m), pct(s))
    } else {
        pct(m)
    }
}

/// The markdown report: the paper-style table (ours / paper), then per (arch, dim) the best
/// learning rate with per-kv accuracies, then every run.
pub fn markdown(args: &MqarArgs, runs: &[RunRecord]) -> String {
    let mut s = String::new();
    s.push_str("# MQAR: mean accuracy (%) over kv settings, ours / paper\n\n");
    if args.merge.is_empty() {
        s.push_str(&format!(
            "Sequence length {}, vocab {}, kv {:?}, training examples {:?} (per kv setting), {} \
             test examples per kv setting, batch {}; best learning rate per cell; paper: 5 \
             seeds, mean (std).\n\n",
            args.seq_len,
            args.vocab,
            args.kv,
            train_counts(args).unwrap_or_default(),
            args.test_examples,
            args.batch
        ));
    } else {
        s.push_str(
            "Runs of the results files listed at the end (their settings there); best learning \
             rate per cell over all of them; paper: 5 seeds, mean (std).\n\n",
        );
    }
    let archs = [
        MqarArch::Mamba2,
        MqarArch::LlMamba2,
        MqarArch::Gdn,
        MqarArch::LlGdn,
    ];
    s.push_str("| dim |");
    for a in archs {
        s.push_str(&format!(" {} |", a.title()));
    }
    s.push_str("\n| --- |");
    for _ in archs {
        s.push_str(" --- |");
    }
    s.push('\n');
    let mut dims: Vec<usize> = args.dims.clone();
    for r in runs {
        if !dims.contains(&r.dim) {
            dims.push(r.dim);
        }
    }
    dims.sort_unstable();
    for &dim in &dims {
        s.push_str(&format!("| {dim} |"));
        for a in archs {
            let ours = best_lr(runs, a, dim).map_or("–".to_string(), |(_, at)| {
                pct_std(&at.iter().map(|r| r.accuracy).collect::<Vec<_>>())
            });
            s.push_str(&format!(" {ours} / {} |", a.paper(dim).unwrap_or("–")));
        }
        s.push('\n');
    }
    // In a merge, runs of different files are apart (their settings may differ): name the file.
    let merged = !args.merge.is_empty();
    let file_col = |r: &RunRecord| match args.merge.get(r.file) {
        Some(p) => {
            let name = p.file_name().map_or(p.as_os_str(), |n| n);
            format!(" `{}` |", name.to_string_lossy())
        }
        _ => String::new(),
    };
    let (file_head, file_rule) = if merged {
        (" file |", " --- |")
    } else {
        ("", "")
    };
    s.push_str(&format!(
        "\n## Best learning rate per model\n\n| model | dim |{file_head} lr | mean |"
    ));
    for kv in &args.kv {
        s.push_str(&format!(" kv {kv} |"));
    }
    s.push_str(&format!(" paper |\n| --- | --- |{file_rule} --- | --- |"));
    for _ in &args.kv {
        s.push_str(" --- |");
    }
    s.push_str(" --- |\n");
    for a in archs {
        for &dim in &dims {
            let Some((lr, at)) = best_lr(runs, a, dim) else {
                continue;
            };
            s.push_str(&format!(
                "| {} | {dim} |{} {lr:.2e} | {} |",
                a.name(),
                file_col(at[0]),
                pct_std(&at.iter().map(|r| r.accuracy).collect::<Vec<_>>())
            ));
            for kv in &args.kv {
                let x: Vec<f64> = at
                    .iter()
                    .filter_map(|r| r.per_kv.iter().find(|p| p.0 == *kv).map(|p| p.1))
                    .collect();
                s.push_str(&format!(" {} |", pct_std(&x)));
            }
            s.push_str(&format!(" {} |\n", a.paper(dim).unwrap_or("–")));
        }
    }
    s.push_str(&format!(
        "\n## Every run\n\n| model | dim |{file_head} lr | seed | mean | pooled | steps | stopped \
         | seconds | final loss |\n| --- | --- |{file_rule} --- | --- | --- | --- | --- | --- | --- \
         | --- |\n"
    ));
    for r in runs {
        s.push_str(&format!(
            "| {} | {} |{} {:.2e} | {} | {} | {} | {} | {} | {:.1} | {:.4} |\n",
            r.arch.name(),
            r.dim,
            file_col(r),
            r.lr,
            r.seed,
            pct(r.accuracy),
            pct(r.pooled),
            r.steps,
            r.stopped,
            r.seconds,
            r.final_loss
        ));
    }
    s
}
