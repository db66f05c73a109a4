//! PNG charts, drawn with `plotters`' bitmap backend: per-position loss (bits against
//! position, log-scale position axis) and training runs' loss curves (bits against step).
//! Text is rendered with a font compiled into the binary (Hack Regular from
//! `epaint_default_fonts`) through `ab_glyph`, so drawing needs no system fonts and no
//! fontconfig: it works the same on a headless CI machine.

use loglinear_converter::output_file::StagedFile;
use loglinear_train::per_position::power_of_two_buckets;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::CoordTranslate;
use plotters::drawing::DrawingAreaErrorKind;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use plotters_backend::DrawingErrorKind;
use plotters_bitmap::BitMapBackendError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One model's curve.
#[derive(Clone, Debug, PartialEq)]
pub struct Curve {
    /// The legend's name for it.
    pub label: String,
    /// Mean bits at each position `0..ctx`.
    pub mean_bits: Vec<f64>,
}

/// Size and title of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotOptions {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Caption above the chart.
    pub title: String,
}

/// Widths and heights accepted, in pixels.
pub const SIZE_RANGE: std::ops::RangeInclusive<u32> = 64..=8192;

/// Parses `--plot-size WIDTHxHEIGHT` (pixels, each in [`SIZE_RANGE`]).
pub fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected WIDTHxHEIGHT in pixels (e.g. 960x600), got `{s}`");
    let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let w = w.trim().parse().map_err(|_| bad())?;
    let h = h.trim().parse().map_err(|_| bad())?;
    if !SIZE_RANGE.contains(&w) || !SIZE_RANGE.contains(&h) {
        return Err(format!(
            "plot size {w}x{h}: width and height must be in {}..={} pixels",
            SIZE_RANGE.start(),
            SIZE_RANGE.end()
        ));
    }
    Ok((w, h))
}

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// Only PNG is written.
    #[error("{0}: the plot is written as PNG: give a file name ending in .png")]
    NotPng(PathBuf),
    /// The folder to write into does not exist.
    #[error("{0}: no such folder to write the plot into")]
    NoFolder(PathBuf),
    /// Nothing to draw.
    #[error("no curve with positions to draw")]
    Empty,
    /// Width or height outside 64..=8192.
    #[error("plot size {0}x{1}: width and height must be in 64..=8192 pixels")]
    Size(u32, u32),
    /// The embedded font did not load (cannot happen with the shipped crate's font).
    #[error("the embedded font does not load")]
    Font,
    /// The chart's file could not be written.
    #[error(transparent)]
    Output(#[from] loglinear_converter::output_file::OutputFileError),
    /// Drawing or encoding failed (e.g. the file cannot be written).
    #[error("{path}: {message}")]
    Draw {
        /// The file.
        path: PathBuf,
        /// What plotters said.
        message: String,
    },
}

/// What went wrong while drawing or encoding a chart, in words: plotters' own Display of the
/// bitmap backend's error is its Debug form (`ImageError(IoError(Custom { .. }))`).
fn draw_message(e: &DrawingAreaErrorKind<BitMapBackendError>) -> String {
    match e {
        DrawingAreaErrorKind::BackendError(DrawingErrorKind::DrawingError(b)) => match b {
            BitMapBackendError::IOError(io) => format!("cannot write the PNG file: {io}"),
            BitMapBackendError::ImageError(image) => {
                format!("cannot encode or write the PNG file: {image}")
            }
            BitMapBackendError::InvalidBuffer => {
                "the drawing buffer does not match the chart's size".to_string()
            }
        },
        DrawingAreaErrorKind::BackendError(DrawingErrorKind::FontError(f)) => {
            format!("the embedded font does not render: {f}")
        }
        DrawingAreaErrorKind::SharingError => {
            "the chart's drawing area is in use by another drawing".to_string()
        }
        DrawingAreaErrorKind::LayoutError => "the chart's layout does not fit its size".to_string(),
    }
}

/// Checks, before a long evaluation, that `path` can take a PNG chart: a `.png` name in an
/// existing folder.
pub fn check_png_path(path: &Path) -> Result<(), PlotError> {
    let is_png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !is_png {
        return Err(PlotError::NotPng(path.to_path_buf()));
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            Err(PlotError::NoFolder(dir.to_path_buf()))
        }
        _ => Ok(()),
    }
}

/// Checks a chart's file name and size and that it has something to draw (`any`), registers
/// the font its text uses, and stages it: `draw` draws into a temporary file that replaces
/// `path` when the caller commits it.
fn stage_chart(
    path: &Path,
    opts: &PlotOptions,
    any: bool,
    draw: impl FnOnce(&Path) -> Result<(), PlotError>,
) -> Result<StagedFile, PlotError> {
    check_png_path(path)?;
    if !SIZE_RANGE.contains(&opts.width) || !SIZE_RANGE.contains(&opts.height) {
        return Err(PlotError::Size(opts.width, opts.height));
    }
    if !any {
        return Err(PlotError::Empty);
    }
    register_embedded_font()?;
    loglinear_converter::output_file::stage_via(path, draw)
}

/// The font family every text of the chart uses.
const FONT: &str = "sans-serif";

/// Registers the embedded font under [`FONT`] once per process.
fn register_embedded_font() -> Result<(), PlotError> {
    static DONE: OnceLock<bool> = OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        register_font(FONT, FontStyle::Normal, epaint_default_fonts::HACK_REGULAR).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

/// The grid and the axes of a chart: whole-number x labels, y labels to two decimals.
fn draw_mesh<'a, DB, X, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    x_desc: &str,
    y_desc: &str,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
}

/// The legend of a chart's labelled series, at its upper right.
fn draw_legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}

/// Line colours of the curves, in order (matplotlib's first ones).
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// Draws bits against position for each curve into a PNG at `path`: x is the bytes of context
/// a prediction had (position + 1) on a log scale, y bits. Each curve is drawn twice in its
/// colour: every position, thin and pale (position 0 alone, then noisy), and the means over
/// the power-of-two buckets `{0}, {1}, {2,3}, {4..7}, …` bold with markers, at each bucket's
/// geometric centre. The chart replaces `path` when the result is committed.
pub fn draw_png(
    path: &Path,
    curves: &[Curve],
    opts: &PlotOptions,
) -> Result<StagedFile, PlotError> {
    let ctx = curves.iter().map(|c| c.mean_bits.len()).max().unwrap_or(0);
    stage_chart(path, opts, ctx > 0, |file| {
        draw(file, path, curves, opts, ctx)
    })
}

/// [`draw_png`]'s drawing, into `file` (a temporary file that then replaces `path`).
fn draw(
    file: &Path,
    path: &Path,
    curves: &[Curve],
    opts: &PlotOptions,
    ctx: usize,
) -> Result<(), PlotError> {
    let draw_err = |e: &DrawingAreaErrorKind<BitMapBackendError>| PlotError::Draw {
        path: path.to_path_buf(),
        message: draw_message(e),
    };

    let all = curves.iter().flat_map(|c| c.mean_bits.iter().copied());
    let (lo, hi) = all
        .filter(|b| b.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), b| {
            (lo.min(b), hi.max(b))
        });
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 8.0) };
    let pad = ((hi - lo) * 0.06).max(0.05);
    let (y0, y1) = ((lo - pad).max(0.0), hi + pad);
    let x1 = (ctx as f64).max(2.0);
    // Ticks at powers of two, the edges of the buckets.
    let ticks: Vec<f64> = (0..usize::BITS)
        .map(|k| (1u64 << k) as f64)
        .take_while(|&t| t <= x1)
        .collect();

    let root = BitMapBackend::new(file, (opts.width, opts.height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&opts.title, (FONT, 20))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((1.0..x1).log_scale().with_key_points(ticks), y0..y1)
        .map_err(|e| draw_err(&e))?;
    draw_mesh(
        &mut chart,
        "bytes of context (position + 1), log scale",
        "validation loss, bits per byte",
    )
    .map_err(|e| draw_err(&e))?;

    for (i, curve) in curves.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let raw = curve
            .mean_bits
            .iter()
            .enumerate()
            .map(|(p, &b)| ((p + 1) as f64, b));
        chart
            .draw_series(LineSeries::new(raw, colour.mix(0.3).stroke_width(1)))
            .map_err(|e| draw_err(&e))?;
        let buckets: Vec<(f64, f64)> = power_of_two_buckets(&curve.mean_bits)
            .into_iter()
            .map(|(first, last, b)| (((first + 1) as f64 * (last + 1) as f64).sqrt(), b))
            .collect();
        let mean = curve.mean_bits.iter().sum::<f64>() / curve.mean_bits.len().max(1) as f64;
        let style = colour.stroke_width(3);
        chart
            .draw_series(LineSeries::new(buckets.iter().copied(), style))
            .map_err(|e| draw_err(&e))?
            .label(format!("{}: {mean:.4} bits/byte", curve.label))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        chart
            .draw_series(
                buckets
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, colour.filled())),
            )
            .map_err(|e| draw_err(&e))?;
    }
    draw_legend(&mut chart).map_err(|e| draw_err(&e))?;
    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}

/// One training run's curves.
#[derive(Clone, Debug, PartialEq)]
pub struct LossCurve {
    /// The legend's name for it.
    pub label: String,
    /// Training bits per token at each logged step, `(step, bits)`.
    pub train: Vec<(f64, f64)>,
    /// Validation bits per token where the run validated, `(step, bits)`.
    pub val: Vec<(f64, f64)>,
}

/// Centred moving average over `window` points (fewer at the ends), so the average does not
/// lag behind a falling loss.
pub fn moving_average(points: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let before = window.max(1) / 2;
    let after = window.max(1) - 1 - before;
    // Prefix sums: each mean is one difference, whatever the window.
    let mut prefix = Vec::with_capacity(points.len() + 1);
    prefix.push(0.0);
    for p in points {
        prefix.push(prefix[prefix.len() - 1] + p.1);
    }
    (0..points.len())
        .map(|i| {
            let (lo, hi) = (i.saturating_sub(before), (i + after + 1).min(points.len()));
            (points[i].0, (prefix[hi] - prefix[lo]) / (hi - lo) as f64)
        })
        .collect()
}

/// The points from the first one at or under `y1` on: the first steps of a run start above
/// the chart's y range and enter it from the top edge.
fn from_under(points: &[(f64, f64)], y1: f64) -> Vec<(f64, f64)> {
    points.iter().copied().skip_while(|p| p.1 > y1).collect()
}

/// Draws training loss against step for each run into a PNG at `path`. Each run is drawn in
/// its colour: every step thin and pale, the centred moving average over `smooth` steps bold,
/// and the validation points as markers joined by a line. The y axis spans the averages and
/// the validation points after the first tenth of the steps, so the first steps' high loss
/// does not flatten the rest. The chart replaces `path` when the result is committed.
pub fn draw_loss_png(
    path: &Path,
    runs: &[LossCurve],
    smooth: usize,
    opts: &PlotOptions,
) -> Result<StagedFile, PlotError> {
    let any = runs.iter().any(|r| !r.train.is_empty());
    stage_chart(path, opts, any, |file| {
        draw_loss(file, path, runs, smooth, opts)
    })
}

/// [`draw_loss_png`]'s drawing, into `file` (a temporary file that then replaces `path`).
fn draw_loss(
    file: &Path,
    path: &Path,
    runs: &[LossCurve],
    smooth: usize,
    opts: &PlotOptions,
) -> Result<(), PlotError> {
    let draw_err = |e: &DrawingAreaErrorKind<BitMapBackendError>| PlotError::Draw {
        path: path.to_path_buf(),
        message: draw_message(e),
    };
    let averages: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| moving_average(&r.train, smooth))
        .collect();
    let x1 = runs
        .iter()
        .flat_map(|r| r.train.iter().chain(&r.val))
        .map(|p| p.0)
        .fold(1.0_f64, f64::max);
    let settled = |p: &&(f64, f64)| p.0 >= x1 / 10.0;
    let (lo, hi) = averages
        .iter()
        .flatten()
        .chain(runs.iter().flat_map(|r| &r.val))
        .filter(settled)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), p| {
            (lo.min(p.1), hi.max(p.1))
        });
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (0.0, 8.0) };
    let pad = ((hi - lo) * 0.08).max(0.02);
    let (y0, y1) = ((lo - pad).max(0.0), hi + pad);

    let root = BitMapBackend::new(file, (opts.width, opts.height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&opts.title, (FONT, 20))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x1, y0..y1)
        .map_err(|e| draw_err(&e))?;
    draw_mesh(&mut chart, "optimizer step", "loss, bits per token").map_err(|e| draw_err(&e))?;

    for (i, (run, average)) in runs.iter().zip(&averages).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(
                from_under(&run.train, y1),
                colour.mix(0.25).stroke_width(1),
            ))
            .map_err(|e| draw_err(&e))?;
        let style = colour.stroke_width(3);
        let last_val = run
            .val
            .last()
            .map(|v| format!(", validation {:.4} at step {:.0}", v.1, v.0))
            .unwrap_or_default();
        chart
            .draw_series(LineSeries::new(from_under(average, y1), style))
            .map_err(|e| draw_err(&e))?
            .label(format!("{}{last_val}", run.label))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style));
        chart
            .draw_series(LineSeries::new(
                from_under(&run.val, y1),
                colour.stroke_width(1),
            ))
            .map_err(|e| draw_err(&e))?;
        chart
            .draw_series(
                from_under(&run.val, y1)
                    .into_iter()
                    .map(|(x, y)| Circle::new((x, y), 4, colour.filled())),
            )
            .map_err(|e| draw_err(&e))?;
    }
    draw_legend(&mut chart).map_err(|e| draw_err(&e))?;
    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_that_cannot_be_written_is_explained_in_words() {
        // The image encoder itself fails: the file it is given is in no folder.
        register_embedded_font().unwrap();
        let curves = [Curve {
            label: "m".to_string(),
            mean_bits: vec![8.0, 4.0, 2.0, 1.5],
        }];
        let opts = PlotOptions {
            width: 200,
            height: 120,
            title: "t".to_string(),
        };
        let file = Path::new("/nonexistent-loglinear-folder/chart.png");
        let e = draw(file, Path::new("chart.png"), &curves, &opts, 4)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("chart.png: cannot "), "{e}");
        assert!(e.contains("No such file or directory"), "{e}");
        for internal in ["IoError(", "ImageError(", "Custom {", "kind:", "Os {"] {
            assert!(!e.contains(internal), "{e}");
        }
    }
}
