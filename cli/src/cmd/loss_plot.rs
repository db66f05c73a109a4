//! `loglinear loss-plot`: the loss curves of `loglinear train` runs (their `train_log.csv`) in
//! one PNG chart, and a markdown table of each run's end and its distance from the first run.

use crate::plot::{self, LossCurve, PlotOptions};
use crate::Res;
use loglinear_converter::command_paths::{CommandPaths, Reads, Writes};
use loglinear_train::train_log::{self, LogRow};
use std::path::{Path, PathBuf};

/// Arguments of `loglinear loss-plot`.
#[derive(clap::Args)]
pub struct LossPlotArgs {
    /// The runs: `loglinear train` output folders or their `train_log.csv` files, each
    /// optionally named as LABEL=PATH (default: the folder's name). The table compares every
    /// run with the first.
    #[arg(required = true, value_name = "[LABEL=]RUN")]
    runs: Vec<String>,
    /// The PNG chart to write.
    #[arg(short = 'o', long = "output", alias = "out", value_name = "FILE.png")]
    out: PathBuf,
    /// Steps in the centred moving average of the training loss (the bold lines), and in the
    /// mean at the end of the table's training column.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    smooth: u64,
    /// The chart's caption.
    #[arg(long, default_value = "Training loss")]
    title: String,
    /// Size of the plot in pixels, WIDTHxHEIGHT.
    #[arg(long, value_name = "WxH", default_value = "960x600", value_parser = plot::parse_size)]
    plot_size: (u32, u32),
}

/// One run as named on the command line.
struct Run {
    label: String,
    log: PathBuf,
    rows: Vec<LogRow>,
}

/// Splits `LABEL=PATH`; a bare path is labelled by its run folder's name.
fn label_and_path(arg: &str) -> (String, PathBuf) {
    if let Some((label, path)) = arg.split_once('=') {
        if !label.is_empty() && !path.is_empty() {
            return (label.to_string(), PathBuf::from(path));
        }
    }
    let path = PathBuf::from(arg);
    let folder = if path.is_dir() {
        path.as_path()
    } else {
        path.parent().unwrap_or(Path::new(""))
    };
    let label = folder
        .file_name()
        .map_or_else(|| arg.to_string(), |n| n.to_string_lossy().into_owned());
    (label, path)
}

/// The log of a run folder, or the file itself.
fn log_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("train_log.csv")
    } else {
        path.to_path_buf()
    }
}

impl LossPlotArgs {
    /// What `loss-plot` reads and writes.
    pub(crate) fn paths(&self) -> CommandPaths {
        let mut paths = CommandPaths::new();
        for run in &self.runs {
            let log = log_path(&label_and_path(run).1);
            paths = paths.reads("RUN", Some(&log), Reads::File);
        }
        paths.writes("--output", Some(&self.out), Writes::File)
    }
}

/// Runs `loglinear loss-plot`.
pub fn run(args: &LossPlotArgs) -> Res {
    plot::check_png_path(&args.out)?;
    let runs = args
        .runs
        .iter()
        .map(|arg| {
            let (label, path) = label_and_path(arg);
            let log = log_path(&path);
            let rows = train_log::read(&log)?;
            Ok(Run { label, log, rows })
        })
        .collect::<Result<Vec<Run>, train_log::LogError>>()?;
    let smooth = args.smooth as usize;
    let curves: Vec<LossCurve> = runs.iter().map(curve).collect();
    let opts = PlotOptions {
        width: args.plot_size.0,
        height: args.plot_size.1,
        title: args.title.clone(),
    };
    plot::draw_loss_png(&args.out, &curves, smooth, &opts)?.commit()?;
    eprintln!("wrote {}", args.out.display());
    for line in table(&runs, &curves, smooth) {
        outln!("{line}");
    }
    Ok(())
}

/// A run's training and validation points.
fn curve(run: &Run) -> LossCurve {
    LossCurve {
        label: run.label.clone(),
        train: run
            .rows
            .iter()
            .map(|r| (r.step as f64, r.bits_per_token()))
            .collect(),
        val: run
            .rows
            .iter()
            .filter_map(|r| r.val_bits_per_token.map(|v| (r.step as f64, v)))
            .collect(),
    }
}

/// The markdown table: per run its steps, its smoothed training loss at the end, its last
/// validation, and its distance from the first run (at the validation steps both have, and
/// of the smoothed training curves at every step both have).
fn table(runs: &[Run], curves: &[LossCurve], smooth: usize) -> Vec<String> {
    let reference = &curves[0];
    let ref_avg = plot::moving_average(&reference.train, smooth);
    let mut lines = vec![
        format!(
            "| run | steps | training, mean of last {smooth} steps | last validation | \
             validation − {0}: mean (max \\|Δ\\|) | smoothed training − {0}: mean (max \\|Δ\\|) | log |",
            reference.label
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |".to_string(),
    ];
    for (run, c) in runs.iter().zip(curves) {
        let avg = plot::moving_average(&c.train, smooth);
        let tail = &c.train[c.train.len().saturating_sub(smooth)..];
        let end = tail.iter().map(|p| p.1).sum::<f64>() / tail.len().max(1) as f64;
        let last_val = c.val.last().map_or("—".to_string(), |p| {
            format!("{:.4} (step {:.0})", p.1, p.0)
        });
        lines.push(format!(
            "| {} | {} | {end:.4} | {last_val} | {} | {} | `{}` |",
            run.label,
            run.rows.last().map_or(0, |r| r.step),
            difference(&c.val, &reference.val),
            difference(&avg, &ref_avg),
            run.log.display()
        ));
    }
    lines
}

/// "mean (max |Δ|)" of `a − b` over the steps both have, "—" when none. Both are in
/// increasing steps (as `train_log::read` returns them), so one walk pairs them.
fn difference(a: &[(f64, f64)], b: &[(f64, f64)]) -> String {
    let mut deltas = Vec::new();
    let mut rest = b;
    for &(x, y) in a {
        let skipped = rest.iter().take_while(|p| p.0 < x).count();
        rest = &rest[skipped..];
        if let Some(&(_, yb)) = rest.first().filter(|p| p.0 == x) {
            deltas.push(y - yb);
        }
    }
    if deltas.is_empty() {
        return "—".to_string();
    }
    let mean = deltas.iter().sum::<f64>() / deltas.len() as f64;
    let max = deltas.iter().fold(0.0_f64, |m, d| m.max(d.abs()));
    format!("{mean:+.4} ({max:.4})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_from_the_argument_or_the_run_folder() {
        assert_eq!(
            label_and_path("fp32=runs/a"),
            ("fp32".to_string(), PathBuf::from("runs/a"))
        );
        assert_eq!(
            label_and_path("runs/b/train_log.csv"),
            ("b".to_string(), PathBuf::from("runs/b/train_log.csv"))
        );
        // An empty label is no label.
        assert_eq!(label_and_path("=x/y.csv").1, PathBuf::from("=x/y.csv"));
    }

    #[test]
    fn differences_over_shared_steps() {
        let a = [(1.0, 2.0), (2.0, 1.5), (3.0, 1.0)];
        let b = [(2.0, 1.0), (3.0, 2.0), (4.0, 0.0)];
        // Steps 2 and 3: +0.5 and −1.0.
        assert_eq!(difference(&a, &b), "-0.2500 (1.0000)");
        assert_eq!(difference(&a, &[(9.0, 1.0)]), "—");
        // Steps only one side has, on either side, are passed over: steps 3 and 5 pair.
        let a = [(1.0, 1.0), (3.0, 1.0), (5.0, 2.0)];
        let b = [(2.0, 9.0), (3.0, 0.5), (4.0, 9.0), (5.0, 1.0), (6.0, 9.0)];
        assert_eq!(difference(&a, &b), "+0.7500 (1.0000)");
    }

    #[test]
    fn moving_average_is_centred() {
        let p = [(1.0, 1.0), (2.0, 3.0), (3.0, 5.0), (4.0, 7.0)];
        let m = plot::moving_average(&p, 3);
        assert_eq!(m, vec![(1.0, 2.0), (2.0, 3.0), (3.0, 5.0), (4.0, 6.0)]);
        assert_eq!(plot::moving_average(&p, 1), p.to_vec());
        // An even window takes one more point before than after.
        assert_eq!(plot::moving_average(&p, 2)[1], (2.0, 2.0));
        // Each point is the mean of its window, clipped at the ends.
        let p: Vec<(f64, f64)> = (0..40).map(|i| (i as f64, ((i * 7) % 11) as f64)).collect();
        for (i, &(x, y)) in plot::moving_average(&p, 9).iter().enumerate() {
            let span = &p[i.saturating_sub(4)..(i + 5).min(p.len())];
            let mean = span.iter().map(|q| q.1).sum::<f64>() / span.len() as f64;
            assert_eq!(x, i as f64);
            assert!((y - mean).abs() < 1e-12, "{i}: {y} against {mean}");
        }
    }
}
