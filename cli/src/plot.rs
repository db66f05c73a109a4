//! PNG charts of per-position loss (bits against position, log-scale position axis), drawn with
//! `plotters`' bitmap backend. Text is rendered with a font compiled into the binary (Hack
//! Regular from `epaint_default_fonts`) through `ab_glyph`, so drawing needs no system fonts
//! and no fontconfig: it works the same on a headless CI machine.

use loglinear_train::per_position::power_of_two_buckets;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
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
/// geometric centre.
pub fn draw_png(path: &Path, curves: &[Curve], opts: &PlotOptions) -> Result<(), PlotError> {
    check_png_path(path)?;
    if !SIZE_RANGE.contains(&opts.width) || !SIZE_RANGE.contains(&opts.height) {
        return Err(PlotError::Size(opts.width, opts.height));
    }
    let ctx = curves.iter().map(|c| c.mean_bits.len()).max().unwrap_or(0);
    if ctx == 0 {
        return Err(PlotError::Empty);
    }
    register_embedded_font()?;
    loglinear_converter::output_file::write_atomic_via(path, |file| {
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
    let draw_err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
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
    chart
        .configure_mesh()
        .x_desc("bytes of context (position + 1), log scale")
        .y_desc("validation loss, bits per byte")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()
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
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw_err(&e))?;
    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}
