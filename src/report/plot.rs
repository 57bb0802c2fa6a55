//! Charts as PNG or SVG: a small, typed description ([`Chart`]) rendered with plotters.
//!
//! The description knows nothing of the simulator: series of `(x, y)` points, reference lines
//! ([`Rule`], e.g. an SLO) and highlighted points ([`Marker`], e.g. the chosen operating point).
//! [`render`] never panics on odd data: non-finite points are dropped, so are values `<= 0` on a
//! log axis (the chart says how many points it left out), and empty or single-valued data get a
//! sensible axis range. Text uses the embedded DejaVu Sans font, so no system font library is
//! needed.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::atomic::{write_atomic, write_atomic_with};
use crate::error::{Error, Result};

/// Default image width in pixels.
pub const DEFAULT_WIDTH: u32 = 1024;
/// Default image height in pixels.
pub const DEFAULT_HEIGHT: u32 = 640;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesStyle {
    /// Points joined by a line, in the order given.
    Line,
    /// Points only (a scatter plot).
    Points,
    /// Points joined by a line, each point also marked.
    LineWithPoints,
}

/// One named set of `(x, y)` points; the name appears in the legend (an empty name does not).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// The points, joined in this order for line styles.
    pub points: Vec<(f64, f64)>,
    /// How the points are drawn.
    pub style: SeriesStyle,
}

/// A highlighted point, drawn large with its label (e.g. the chosen operating point).
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// Position on the x axis.
    pub x: f64,
    /// Position on the y axis.
    pub y: f64,
    /// Text drawn next to the point.
    pub label: String,
}

/// A dashed reference line with a label: vertical in [`Chart::x_rules`], horizontal in
/// [`Chart::y_rules`] (e.g. an SLO).
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Where the line crosses its axis.
    pub value: f64,
    /// Text drawn along the line.
    pub label: String,
}

/// A complete chart description. Axis labels should carry units, e.g. `"p99 TTFT (ms)"`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// X axis description, with its unit.
    pub x_label: String,
    /// Y axis description, with its unit.
    pub y_label: String,
    /// The data, each in its own colour.
    pub series: Vec<Series>,
    /// Vertical reference lines.
    pub x_rules: Vec<Rule>,
    /// Horizontal reference lines.
    pub y_rules: Vec<Rule>,
    /// Highlighted points.
    pub markers: Vec<Marker>,
    /// Logarithmic x axis (values `<= 0` are left out).
    pub log_x: bool,
    /// Logarithmic y axis (values `<= 0` are left out).
    pub log_y: bool,
}

/// Output image format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// Raster image, 8-bit RGB.
    Png,
    /// Vector image; text stays text.
    Svg,
}

impl ImageFormat {
    /// The conventional file extension, without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Svg => "svg",
        }
    }
}

/// Renders `chart` to `path` at [`DEFAULT_WIDTH`] x [`DEFAULT_HEIGHT`], atomically.
pub fn render(chart: &Chart, path: &Path, format: ImageFormat) -> Result<()> {
    render_sized(chart, path, format, DEFAULT_WIDTH, DEFAULT_HEIGHT)
}

/// Renders `chart` to `path` at `width` x `height` pixels (each at least 200), atomically.
pub fn render_sized(
    chart: &Chart,
    path: &Path,
    format: ImageFormat,
    width: u32,
    height: u32,
) -> Result<()> {
    ensure_font()?;
    let size = (width.max(200), height.max(200));
    let prepared = Prepared::new(chart);
    match format {
        ImageFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                draw_on(&root, chart, &prepared, path)?;
                root.present().map_err(|e| draw_error(path, e))?;
            }
            write_atomic(path, svg.as_bytes())
        }
        ImageFormat::Png => write_atomic_with(path, |tmp| {
            let root = BitMapBackend::new(tmp, size).into_drawing_area();
            draw_on(&root, chart, &prepared, path)?;
            root.present().map_err(|e| draw_error(path, e))
        }),
    }
}

/// Renders `charts` stacked top to bottom into one image, each `width` x `height_each`
/// pixels (each at least 200), atomically; for views that share a time axis.
pub fn render_stack(
    charts: &[Chart],
    path: &Path,
    format: ImageFormat,
    width: u32,
    height_each: u32,
) -> Result<()> {
    ensure_font()?;
    let n = charts.len().max(1) as u32;
    let size = (width.max(200), height_each.max(200) * n);
    let prepared: Vec<Prepared> = charts.iter().map(Prepared::new).collect();
    match format {
        ImageFormat::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                draw_stack(&root, charts, &prepared, path)?;
                root.present().map_err(|e| draw_error(path, e))?;
            }
            write_atomic(path, svg.as_bytes())
        }
        ImageFormat::Png => write_atomic_with(path, |tmp| {
            let root = BitMapBackend::new(tmp, size).into_drawing_area();
            draw_stack(&root, charts, &prepared, path)?;
            root.present().map_err(|e| draw_error(path, e))
        }),
    }
}

fn draw_stack<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    charts: &[Chart],
    prepared: &[Prepared],
    path: &Path,
) -> Result<()> {
    let areas = root.split_evenly((charts.len().max(1), 1));
    for ((area, chart), p) in areas.iter().zip(charts).zip(prepared) {
        draw_on(area, chart, p, path)?;
    }
    Ok(())
}

/// Turns quantiles `(q in 0..=1, value)` into a CDF line: x = value, y = cumulative fraction.
///
/// Pairs with `q` outside `0..=1` or non-finite numbers are dropped; the rest are sorted by
/// quantile (ties by value) so the line is monotone.
pub fn cdf_series(name: &str, quantiles: &[(f64, f64)]) -> Series {
    let mut pts: Vec<(f64, f64)> = quantiles
        .iter()
        .filter(|(q, v)| q.is_finite() && v.is_finite() && (0.0..=1.0).contains(q))
        .map(|&(q, v)| (v, q))
        .collect();
    pts.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.total_cmp(&b.0)));
    Series {
        name: name.to_string(),
        points: pts,
        style: SeriesStyle::Line,
    }
}

// ---------------------------------------------------------------------------------------------
// Font

const FONT: &str = "sans-serif";

/// Registers the embedded DejaVu Sans once; plotters' `ab_glyph` text needs it.
fn ensure_font() -> Result<()> {
    static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "the embedded DejaVu Sans font is invalid".to_string())?;
            plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold())
                .map_err(|_| "the embedded DejaVu Sans Bold font is invalid".to_string())
        })
        .clone()
        .map_err(Error::Internal)
}

fn draw_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("drawing {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// Data preparation: everything that could upset plotters is settled here.

/// Values beyond this magnitude are left out (so spans and paddings stay finite).
const LIMIT: f64 = 1e300;
/// On a log axis, values outside `1/LOG_LIMIT..=LOG_LIMIT` are left out: plotters computes
/// the ratio of the axis ends, which must stay finite (else its tick search never ends).
const LOG_LIMIT: f64 = 1e150;

/// Series colours (Tableau 10: distinct, and readable by most colour-blind readers).
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4E, 0x79, 0xA7),
    RGBColor(0xF2, 0x8E, 0x2B),
    RGBColor(0x59, 0xA1, 0x4F),
    RGBColor(0xE1, 0x57, 0x59),
    RGBColor(0x76, 0xB7, 0xB2),
    RGBColor(0xB0, 0x7A, 0xA1),
    RGBColor(0xED, 0xC9, 0x48),
    RGBColor(0x9C, 0x75, 0x5F),
    RGBColor(0xFF, 0x9D, 0xA7),
    RGBColor(0xBA, 0xB0, 0xAC),
];
/// Rule colours: dark, so reference lines stand apart from the data.
const RULE_COLOURS: [RGBColor; 3] = [
    RGBColor(0xB2, 0x22, 0x22),
    RGBColor(0x33, 0x33, 0x33),
    RGBColor(0x6A, 0x1B, 0x9A),
];
const MARKER_FILL: RGBColor = RGBColor(0xFF, 0xC1, 0x07);
const GREY: RGBColor = RGBColor(0x60, 0x60, 0x60);

/// A series after filtering: name, style, usable points.
type CleanSeries = (String, SeriesStyle, Vec<(f64, f64)>);

#[derive(Clone)]
struct Prepared {
    series: Vec<CleanSeries>,
    x_rules: Vec<Rule>,
    y_rules: Vec<Rule>,
    markers: Vec<Marker>,
    dropped: usize,
    x_range: (f64, f64),
    y_range: (f64, f64),
    has_data: bool,
}

fn usable(v: f64, log: bool) -> bool {
    if log {
        (1.0 / LOG_LIMIT..=LOG_LIMIT).contains(&v)
    } else {
        v.is_finite() && v.abs() <= LIMIT
    }
}

impl Prepared {
    fn new(chart: &Chart) -> Self {
        let (lx, ly) = (chart.log_x, chart.log_y);
        let mut dropped = 0;
        let series: Vec<_> = chart
            .series
            .iter()
            .map(|s| {
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|&(x, y)| usable(x, lx) && usable(y, ly))
                    .collect();
                dropped += s.points.len() - pts.len();
                (s.name.clone(), s.style, pts)
            })
            .collect();
        let x_rules: Vec<Rule> = chart
            .x_rules
            .iter()
            .filter(|r| usable(r.value, lx))
            .cloned()
            .collect();
        let y_rules: Vec<Rule> = chart
            .y_rules
            .iter()
            .filter(|r| usable(r.value, ly))
            .cloned()
            .collect();
        let markers: Vec<Marker> = chart
            .markers
            .iter()
            .filter(|m| usable(m.x, lx) && usable(m.y, ly))
            .cloned()
            .collect();
        dropped += (chart.x_rules.len() - x_rules.len())
            + (chart.y_rules.len() - y_rules.len())
            + (chart.markers.len() - markers.len());

        let xs = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.0))
            .chain(x_rules.iter().map(|r| r.value))
            .chain(markers.iter().map(|m| m.x));
        let x_range = axis_range(xs, lx);
        let ys = series
            .iter()
            .flat_map(|s| s.2.iter().map(|p| p.1))
            .chain(y_rules.iter().map(|r| r.value))
            .chain(markers.iter().map(|m| m.y));
        let y_range = axis_range(ys, ly);
        let has_data = series.iter().any(|s| !s.2.is_empty()) || !markers.is_empty();
        Prepared {
            series,
            x_rules,
            y_rules,
            markers,
            dropped,
            x_range,
            y_range,
            has_data,
        }
    }
}

/// A padded, non-degenerate axis range covering `values` (all usable for the axis).
fn axis_range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        min = min.min(v);
        max = max.max(v);
    }
    if min > max {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        // Whole decades: plotters only labels powers of the base, so a range inside one
        // decade would have no tick labels at all.
        let lo = min.log10().floor().clamp(-150.0, 149.0);
        let mut hi = max.log10().ceil().clamp(-149.0, 150.0);
        if hi <= lo {
            hi = lo + 1.0;
        }
        // Nudged outwards so plotters' tick search, which steps by repeated multiplication,
        // still finds both end decades despite rounding.
        return (10f64.powf(lo) * (1.0 - 1e-9), 10f64.powf(hi) * (1.0 + 1e-9));
    }
    let scale = min.abs().max(max.abs());
    if max - min <= scale * 1e-9 {
        let c = (min + max) / 2.0;
        let h = if c == 0.0 { 1.0 } else { c.abs() * 0.1 };
        let lo = if c > 0.0 && c - h < 0.0 { 0.0 } else { c - h };
        return (lo, c + h);
    }
    let span = max - min;
    let mut lo = min - 0.05 * span;
    let mut hi = max + 0.05 * span;
    // Non-negative data (throughput, latency, cost): show the axis from zero when the data
    // come near it, so ratios read true, and never show an empty negative band.
    if min >= 0.0 && (lo < 0.0 || min <= 0.25 * max) {
        lo = 0.0;
    }
    if max <= 0.0 && (hi > 0.0 || max >= 0.25 * min) {
        hi = 0.0;
    }
    (lo, hi)
}

// ---------------------------------------------------------------------------------------------
// Tick labels

/// A tick label: plain below 1,000, thousands separators below a million, then the SI
/// suffixes M, G, T; scientific notation below 0.001 and from 1e15; trailing zeros trimmed.
pub fn format_tick(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞".into() } else { "-∞".into() };
    }
    let a = v.abs();
    if !(1e-3..1e15).contains(&a) {
        let s = format!("{v:.2e}");
        return match s.split_once('e') {
            Some((m, e)) => format!("{}e{e}", trim_zeros(m)),
            None => s,
        };
    }
    if a >= 1e6 {
        let (div, suffix) = if a >= 1e12 {
            (1e12, "T")
        } else if a >= 1e9 {
            (1e9, "G")
        } else {
            (1e6, "M")
        };
        return format!("{}{suffix}", trim_zeros(&format!("{:.3}", v / div)));
    }
    if a >= 1e3 {
        let s = trim_zeros(&format!("{v:.2}"));
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i.to_string(), format!(".{f}")),
            None => (s.clone(), String::new()),
        };
        let (sign, digits) = match int.strip_prefix('-') {
            Some(d) => ("-", d),
            None => ("", int.as_str()),
        };
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        return format!("{sign}{grouped}{frac}");
    }
    let decimals = (3 - a.log10().floor() as i32).clamp(0, 6) as usize;
    trim_zeros(&format!("{v:.decimals$}"))
}

fn trim_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

/// Labels for a log axis: only 1, 2 and 5 times a power of ten (only powers of ten when the
/// axis spans more than 3.5 decades), so labels never crowd at the top of a decade.
fn log_tick(v: f64, decades: f64) -> String {
    if v <= 0.0 || !v.is_finite() {
        return String::new();
    }
    let exp = v.log10().floor();
    let mantissa = v / 10f64.powf(exp);
    let near = |m: f64| (mantissa - m).abs() < 1e-6 || (mantissa - m * 10.0).abs() < 1e-5;
    let keep = if decades > 3.5 {
        near(1.0)
    } else {
        near(1.0) || near(2.0) || near(5.0)
    };
    if keep {
        format_tick(v)
    } else {
        String::new()
    }
}

// ---------------------------------------------------------------------------------------------
// Drawing

fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
    p: &Prepared,
    path: &Path,
) -> Result<()> {
    let roomy;
    let p = match legend_room(p, chart, root.dim_in_pixel().1) {
        Some(y_range) => {
            roomy = Prepared {
                y_range,
                ..p.clone()
            };
            &roomy
        }
        None => p,
    };
    let (x0, x1) = p.x_range;
    let (y0, y1) = p.y_range;
    match (chart.log_x, chart.log_y) {
        (false, false) => draw_chart(root, chart, p, path, x0..x1, y0..y1),
        (true, false) => draw_chart(root, chart, p, path, (x0..x1).log_scale(), y0..y1),
        (false, true) => draw_chart(root, chart, p, path, x0..x1, (y0..y1).log_scale()),
        (true, true) => draw_chart(
            root,
            chart,
            p,
            path,
            (x0..x1).log_scale(),
            (y0..y1).log_scale(),
        ),
    }
}

/// One chart, layer by layer: the frame (caption, axes, grid), the reference rules, the data
/// series, the markers, the labels of rules and markers, the legend and the notes.
fn draw_chart<DB, XS, YS>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart,
    p: &Prepared,
    path: &Path,
    xs: XS,
    ys: YS,
) -> Result<()>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    YS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    YS::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| draw_error(path, e);
    root.fill(&WHITE).map_err(err)?;
    let mut cc = draw_frame(root, chart, p, path, xs, ys)?;
    draw_rules(&mut cc, p, path)?;
    let any_legend = draw_series(&mut cc, p, path)?;
    let band = legend_band(p, root.dim_in_pixel().1);
    let corner = legend_corner(p, chart.log_x, chart.log_y, band);
    {
        let area = PlotArea::of(root, &cc);
        let mut labels = rule_labels(p, &area, any_legend, &corner);
        labels.extend(draw_markers(p, &area, path)?);
        draw_labels(labels, &area, path)?;
    }
    if any_legend {
        cc.configure_series_labels()
            .position(corner)
            .margin(12)
            .legend_area_size(30)
            .label_font((FONT, 16))
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK.mix(0.35))
            .draw()
            .map_err(err)?;
    }
    let area = PlotArea::of(root, &cc);
    draw_notes(p, &area, path)
}

/// A chart's drawing context on `f64` axes of coordinate types `X` and `Y`.
type Plot2d<'a, DB, X, Y> = ChartContext<'a, DB, Cartesian2d<X, Y>>;

/// The chart's frame: caption, axes with their descriptions and tick labels, and the grid.
fn draw_frame<'a, DB, XS, YS>(
    root: &'a DrawingArea<DB, Shift>,
    chart: &Chart,
    p: &Prepared,
    path: &Path,
    xs: XS,
    ys: YS,
) -> Result<Plot2d<'a, DB, XS::CoordDescType, YS::CoordDescType>>
where
    DB: DrawingBackend,
    XS: AsRangedCoord<Value = f64>,
    YS: AsRangedCoord<Value = f64>,
    XS::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    YS::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| draw_error(path, e);
    let title_font = FontDesc::new(FontFamily::SansSerif, 26.0, FontStyle::Bold);
    let mut cc = ChartBuilder::on(root)
        .caption(&chart.title, title_font)
        .margin_top(14)
        .margin_left(18)
        .margin_right(36)
        .margin_bottom(12)
        .x_label_area_size(64)
        .y_label_area_size(96)
        .build_cartesian_2d(xs, ys)
        .map_err(err)?;

    let x_decades = (p.x_range.1 / p.x_range.0).log10();
    let y_decades = (p.y_range.1 / p.y_range.0).log10();
    let (log_x, log_y) = (chart.log_x, chart.log_y);
    let fx = move |v: &f64| {
        if log_x {
            log_tick(*v, x_decades)
        } else {
            format_tick(*v)
        }
    };
    let fy = move |v: &f64| {
        if log_y {
            log_tick(*v, y_decades)
        } else {
            format_tick(*v)
        }
    };
    let tick_font = (FONT, 16).into_font().color(&BLACK.mix(0.85));
    cc.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .axis_desc_style((FONT, 19))
        .x_label_style(tick_font.clone())
        .y_label_style(tick_font)
        .x_labels(tick_count(x_decades, log_x, 11))
        .y_labels(tick_count(y_decades, log_y, 9))
        .x_label_formatter(&fx)
        .y_label_formatter(&fy)
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .axis_style(BLACK.mix(0.7))
        .draw()
        .map_err(err)?;
    Ok(cc)
}

/// The reference rules, dashed, under the data so the data stay visible.
fn draw_rules<DB, X, Y>(cc: &mut Plot2d<'_, DB, X, Y>, p: &Prepared, path: &Path) -> Result<()>
where
    DB: DrawingBackend,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| draw_error(path, e);
    let (xlo, xhi) = p.x_range;
    let (ylo, yhi) = p.y_range;
    for (i, r) in p.x_rules.iter().enumerate() {
        let c = RULE_COLOURS[i % RULE_COLOURS.len()];
        cc.draw_series(DashedLineSeries::new(
            [(r.value, ylo), (r.value, yhi)],
            10,
            6,
            c.stroke_width(2),
        ))
        .map_err(err)?;
    }
    for (i, r) in p.y_rules.iter().enumerate() {
        let c = RULE_COLOURS[(i + p.x_rules.len()) % RULE_COLOURS.len()];
        cc.draw_series(DashedLineSeries::new(
            [(xlo, r.value), (xhi, r.value)],
            10,
            6,
            c.stroke_width(2),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// The data series (lines, points or both) with their legend entries; whether any series has
/// a name for the legend.
fn draw_series<'a, DB, X, Y>(
    cc: &mut Plot2d<'a, DB, X, Y>,
    p: &Prepared,
    path: &Path,
) -> Result<bool>
where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| draw_error(path, e);
    let mut any_legend = false;
    for (i, (name, style, pts)) in p.series.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        let line = matches!(style, SeriesStyle::Line | SeriesStyle::LineWithPoints);
        let dots = matches!(style, SeriesStyle::Points | SeriesStyle::LineWithPoints);
        let radius = if line { 4 } else { 5 };
        let anno = if line {
            if dots {
                cc.draw_series(pts.iter().map(|&pt| Circle::new(pt, radius, c.filled())))
                    .map_err(err)?;
            }
            cc.draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(3)))
                .map_err(err)?
        } else {
            cc.draw_series(pts.iter().map(|&pt| Circle::new(pt, radius, c.filled())))
                .map_err(err)?
        };
        if !name.is_empty() {
            any_legend = true;
            anno.label(name.as_str()).legend(move |(x, y)| {
                if line {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (22, 0)], c.stroke_width(3))
                        + Circle::new((11, 0), if dots { 4 } else { 0 }, c.filled())
                } else {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(11, 0), (11, 0)], c.stroke_width(1))
                        + Circle::new((11, 0), 5, c.filled())
                }
            });
        }
    }
    Ok(any_legend)
}

/// The plotting area in the pixels of `root` (relative to its own corner, not the image's
/// when it is one panel of a stack), with the map from data to those pixels.
struct PlotArea<'a, DB: DrawingBackend> {
    root: &'a DrawingArea<DB, Shift>,
    at: Box<dyn Fn(f64, f64) -> (i32, i32) + 'a>,
    x0: i32,
    x1: i32,
    y0: i32,
    y1: i32,
}

impl<'a, DB: DrawingBackend> PlotArea<'a, DB> {
    fn of<X, Y>(root: &'a DrawingArea<DB, Shift>, cc: &'a Plot2d<'_, DB, X, Y>) -> Self
    where
        DB: 'a,
        X: Ranged<ValueType = f64> + 'a,
        Y: Ranged<ValueType = f64> + 'a,
    {
        let (xr, yr) = cc.plotting_area().get_pixel_range();
        // Backend pixels are absolute; `root` draws relative to its own corner.
        let (bx, by) = root.get_base_pixel();
        PlotArea {
            root,
            at: Box::new(move |x, y| {
                let (px, py) = cc.backend_coord(&(x, y));
                (px - bx, py - by)
            }),
            x0: xr.start - bx,
            x1: xr.end - bx,
            y0: yr.start - by,
            y1: yr.end - by,
        }
    }

    /// The size of `s` in `font`, pixels (8 x 16 a character when the font cannot say).
    fn text_size(&self, s: &str, font: &TextStyle) -> (i32, i32) {
        self.root
            .estimate_text_size(s, font)
            .map(|(w, h)| (w as i32, h as i32))
            .unwrap_or((8 * s.chars().count() as i32, 16))
    }
}

/// A label drawn over the plot in a white box: its top-left corner (pixels), text and colour;
/// bold for a marker's.
struct Label {
    at: (i32, i32),
    text: String,
    colour: RGBColor,
    bold: bool,
}

/// Font size of the rule labels, points.
const LABEL_SIZE: u32 = 16;

/// The rule labels: at the top of a vertical rule, at the right end of a horizontal one, each
/// moved to the other end when the legend's corner is there.
fn rule_labels<DB: DrawingBackend>(
    p: &Prepared,
    area: &PlotArea<'_, DB>,
    any_legend: bool,
    corner: &SeriesLabelPosition,
) -> Vec<Label> {
    let legend_right = matches!(
        corner,
        SeriesLabelPosition::UpperRight | SeriesLabelPosition::LowerRight
    );
    let legend_up = matches!(
        corner,
        SeriesLabelPosition::UpperRight | SeriesLabelPosition::UpperLeft
    );
    let label_font: TextStyle = (FONT, LABEL_SIZE).into_font().into();
    let (ax0, ax1, ay0, ay1) = (area.x0, area.x1, area.y0, area.y1);
    let (xhi, yhi) = (p.x_range.1, p.y_range.1);
    let mut labels = Vec::new();
    for (i, r) in p.x_rules.iter().enumerate() {
        if r.label.is_empty() {
            continue;
        }
        let c = RULE_COLOURS[i % RULE_COLOURS.len()];
        let (px, _) = (area.at)(r.value, yhi);
        let (w, h) = area.text_size(&r.label, &label_font);
        let x = if px + 6 + w > ax1 { px - 6 - w } else { px + 6 };
        let under_legend = any_legend && legend_up && ((px > (ax0 + ax1) / 2) == legend_right);
        let y = if under_legend { ay1 - h - 10 } else { ay0 + 8 };
        labels.push(Label {
            at: (x, y),
            text: r.label.clone(),
            colour: c,
            bold: false,
        });
    }
    for (i, r) in p.y_rules.iter().enumerate() {
        if r.label.is_empty() {
            continue;
        }
        let c = RULE_COLOURS[(i + p.x_rules.len()) % RULE_COLOURS.len()];
        let (_, py) = (area.at)(xhi, r.value);
        let (w, h) = area.text_size(&r.label, &label_font);
        let y = if py - h - 6 < ay0 { py + 6 } else { py - h - 6 };
        let by_legend = any_legend && legend_right && ((py < (ay0 + ay1) / 2) == legend_up);
        let x = if by_legend { ax0 + 10 } else { ax1 - w - 10 };
        labels.push(Label {
            at: (x, y),
            text: r.label.clone(),
            colour: c,
            bold: false,
        });
    }
    labels
}

/// The font of the marker labels: bold, 17 points.
fn marker_font() -> FontDesc<'static> {
    FontDesc::new(FontFamily::SansSerif, 17.0, FontStyle::Bold)
}

/// The markers: large, outlined, on top of the data; returns their labels, each placed at the
/// corner around its marker that fits inside the plot and hides the fewest data points.
fn draw_markers<DB: DrawingBackend>(
    p: &Prepared,
    area: &PlotArea<'_, DB>,
    path: &Path,
) -> Result<Vec<Label>> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| draw_error(path, e);
    let (ax0, ax1, ay0, ay1) = (area.x0, area.x1, area.y0, area.y1);
    // Every data point in pixels, so that a marker's label can avoid covering them.
    let points_px: Vec<(i32, i32)> = p
        .series
        .iter()
        .flat_map(|(_, _, pts)| pts.iter().map(|&(x, y)| (area.at)(x, y)))
        .collect();
    let marker_font: TextStyle = marker_font().into();
    let mut labels = Vec::new();
    for m in &p.markers {
        let (px, py) = (area.at)(m.x, m.y);
        let root = area.root;
        root.draw(&Circle::new((px, py), 10, MARKER_FILL.filled()))
            .map_err(err)?;
        root.draw(&Circle::new((px, py), 10, BLACK.stroke_width(2)))
            .map_err(err)?;
        root.draw(&Circle::new((px, py), 2, BLACK.filled()))
            .map_err(err)?;
        if !m.label.is_empty() {
            let (w, h) = area.text_size(&m.label, &marker_font);
            // Of the four corners around the marker that fit inside the plot, the one whose
            // label box hides the fewest data points (first in this order on a tie).
            let corners = [
                (px + 16, py - 16 - h),
                (px - 16 - w, py - 16 - h),
                (px + 16, py + 16),
                (px - 16 - w, py + 16),
            ];
            let fits = |&(x, y): &(i32, i32)| x >= ax0 && x + w <= ax1 && y >= ay0 && y + h <= ay1;
            let hidden = |&(x, y): &(i32, i32)| {
                points_px
                    .iter()
                    .filter(|&&(qx, qy)| {
                        qx >= x - 10 && qx <= x + w + 10 && qy >= y - 8 && qy <= y + h + 10
                    })
                    .count()
            };
            let at = corners
                .iter()
                .filter(|c| fits(c))
                .min_by_key(|c| hidden(c))
                .copied()
                .unwrap_or(corners[0]);
            labels.push(Label {
                at,
                text: m.label.clone(),
                colour: RGBColor(0, 0, 0),
                bold: true,
            });
        }
    }
    Ok(labels)
}

/// The labels of rules and markers, each in a white box kept inside the plotting area.
fn draw_labels<DB: DrawingBackend>(
    labels: Vec<Label>,
    area: &PlotArea<'_, DB>,
    path: &Path,
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| draw_error(path, e);
    let (ax0, ax1, ay0, ay1) = (area.x0, area.x1, area.y0, area.y1);
    for l in labels {
        let font: TextStyle = if l.bold {
            marker_font().into()
        } else {
            (FONT, LABEL_SIZE).into_font().into()
        };
        let font = font.color(&l.colour);
        let (w, h) = area.text_size(&l.text, &font);
        let x = l.at.0.clamp(ax0 + 2, (ax1 - w - 2).max(ax0 + 2));
        let y = l.at.1.clamp(ay0 + 2, (ay1 - h - 2).max(ay0 + 2));
        area.root
            .draw(&Rectangle::new(
                [(x - 4, y - 3), (x + w + 4, y + h + 5)],
                WHITE.mix(0.85).filled(),
            ))
            .map_err(err)?;
        area.root
            .draw(&Text::new(l.text, (x, y), font))
            .map_err(err)?;
    }
    Ok(())
}

/// The notes: "no data" in the middle of an empty chart, and at the bottom right how many
/// points could not be shown.
fn draw_notes<DB: DrawingBackend>(
    p: &Prepared,
    area: &PlotArea<'_, DB>,
    path: &Path,
) -> Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| draw_error(path, e);
    let root = area.root;
    if !p.has_data {
        let font = (FONT, 22).into_font().color(&GREY);
        let (w, h) = area.text_size("no data", &font);
        root.draw(&Text::new(
            "no data",
            ((area.x0 + area.x1 - w) / 2, (area.y0 + area.y1 - h) / 2),
            font,
        ))
        .map_err(err)?;
    }
    if p.dropped > 0 {
        let note = format!(
            "{} point{} not shown (NaN, infinite, or ≤ 0 on a log axis)",
            p.dropped,
            if p.dropped == 1 { "" } else { "s" }
        );
        let font = (FONT, 13).into_font().color(&GREY);
        let (w, _) = area.text_size(&note, &font);
        let (width, h) = root.dim_in_pixel();
        root.draw(&Text::new(
            note,
            (width as i32 - w - 10, h as i32 - 20),
            font,
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// How many ticks to ask plotters for. On a log axis it only offers the 2..9 multiples of each
/// decade when asked for about ten per decade; [`log_tick`] then labels the 1, 2, 5 ones.
fn tick_count(decades: f64, log: bool, linear: usize) -> usize {
    if log && decades.is_finite() && decades <= 3.5 {
        (decades.round() as usize).max(1) * 10 + 2
    } else {
        linear
    }
}

/// Pixels of a chart's height outside its plot area: the top margin, the caption, the
/// bottom margin and the x-axis label area ([`draw_frame`]).
const FRAME_HEIGHT_PX: f64 = 14.0 + 32.0 + 12.0 + 64.0;
/// Pixels of the legend's height: its margin from the plot's edge and padding, and each
/// entry's line at the 16-pixel legend font (measured on rendered charts: 3 entries, 86).
const LEGEND_BASE_PX: f64 = 12.0 + 14.0;
/// Pixels of one legend entry.
const LEGEND_ENTRY_PX: f64 = 22.0;

/// When every corner of the plot holds data, a legend there would hide some: a y range whose
/// top is raised until the data fill only the plot's height below the legend's band
/// (`height_px`: the drawing area's height, pixels); `None` when a corner is free, the chart
/// has no legend, or the plot is too small to give up the band.
fn legend_room(p: &Prepared, chart: &Chart, height_px: u32) -> Option<(f64, f64)> {
    if !p.has_data || legend_entries(p) == 0 {
        return None;
    }
    let band = legend_band(p, height_px);
    if corner_counts(p, chart.log_x, chart.log_y, band).contains(&0) {
        return None;
    }
    let free = 1.0 - band;
    if free < 0.3 {
        return None;
    }
    let (y0, y1) = p.y_range;
    Some(if chart.log_y {
        (y0, y0 * (y1 / y0).powf(1.0 / free))
    } else {
        (y0, y0 + (y1 - y0) / free)
    })
}

/// Entries of the legend: the named series.
fn legend_entries(p: &Prepared) -> usize {
    p.series.iter().filter(|s| !s.0.is_empty()).count()
}

/// The share of the plot's height a corner must leave free for the legend: 40% (a corner
/// is the outer 40% of each axis), or the legend's own height over the plot's if taller
/// (`height_px`: the drawing area's height, pixels).
fn legend_band(p: &Prepared, height_px: u32) -> f64 {
    let plot_px = (f64::from(height_px) - FRAME_HEIGHT_PX).max(1.0);
    let legend_px = LEGEND_BASE_PX + LEGEND_ENTRY_PX * legend_entries(p) as f64;
    (legend_px / plot_px).max(0.4)
}

/// The legend corner that covers the fewest data (points, line samples and markers), each
/// corner `band` of the plot's height tall ([`legend_band`]).
fn legend_corner(p: &Prepared, log_x: bool, log_y: bool, band: f64) -> SeriesLabelPosition {
    let counts = corner_counts(p, log_x, log_y, band);
    let corners = [
        SeriesLabelPosition::UpperRight,
        SeriesLabelPosition::UpperLeft,
        SeriesLabelPosition::LowerRight,
        SeriesLabelPosition::LowerLeft,
    ];
    let mut best = 0;
    for i in 1..4 {
        if counts[i] < counts[best] {
            best = i;
        }
    }
    corners[best].clone()
}

/// Data (points, line samples and markers) in each corner of the plot, the outer 40% of
/// the x axis and `band` of the y axis: [upper-right, upper-left, lower-right, lower-left].
fn corner_counts(p: &Prepared, log_x: bool, log_y: bool, band: f64) -> [usize; 4] {
    let norm = |v: f64, (lo, hi): (f64, f64), log: bool| {
        if log {
            (v.log10() - lo.log10()) / (hi.log10() - lo.log10())
        } else {
            (v - lo) / (hi - lo)
        }
    };
    // Counts in [upper-right, upper-left, lower-right, lower-left].
    let mut counts = [0usize; 4];
    let mut add = |x: f64, y: f64| {
        let (nx, ny) = (norm(x, p.x_range, log_x), norm(y, p.y_range, log_y));
        let right = nx > 0.6;
        let left = nx < 0.4;
        let up = ny > 1.0 - band;
        let down = ny < band;
        if up && right {
            counts[0] += 1;
        }
        if up && left {
            counts[1] += 1;
        }
        if down && right {
            counts[2] += 1;
        }
        if down && left {
            counts[3] += 1;
        }
    };
    for (_, style, pts) in &p.series {
        for pt in pts {
            add(pt.0, pt.1);
        }
        if *style != SeriesStyle::Points {
            for w in pts.windows(2) {
                for k in 1..8 {
                    let t = k as f64 / 8.0;
                    add(
                        w[0].0 + t * (w[1].0 - w[0].0),
                        w[0].1 + t * (w[1].1 - w[0].1),
                    );
                }
            }
        }
    }
    for m in &p.markers {
        for _ in 0..10 {
            add(m.x, m.y);
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(name: &str, points: Vec<(f64, f64)>, style: SeriesStyle) -> Series {
        Series {
            name: name.into(),
            points,
            style,
        }
    }

    /// The charts a capacity-planning report draws, plus degenerate inputs.
    fn gallery() -> Vec<(&'static str, Chart)> {
        let rates = [1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0];
        let curve = |tps_per_req: f64, base: f64| -> Vec<(f64, f64)> {
            rates
                .iter()
                .map(|r| {
                    let rho = r / 17.0;
                    (r * tps_per_req, base * (1.0 + 0.6 * rho / (1.0 - rho)))
                })
                .collect()
        };
        let tradeoff = Chart {
            title: "Throughput vs p99 TPOT — Llama-3.1-70B on H100, TP4".into(),
            x_label: "Output throughput (tokens/s)".into(),
            y_label: "p99 TPOT (ms)".into(),
            series: vec![
                line(
                    "max_num_seqs=128",
                    curve(240.0, 28.0),
                    SeriesStyle::LineWithPoints,
                ),
                line(
                    "max_num_seqs=256",
                    curve(255.0, 31.0),
                    SeriesStyle::LineWithPoints,
                ),
            ],
            y_rules: vec![Rule {
                value: 80.0,
                label: "SLO: p99 TPOT 80 ms".into(),
            }],
            markers: vec![Marker {
                x: 2880.0,
                y: 68.3,
                label: "chosen: 12 req/s".into(),
            }],
            ..Chart::default()
        };
        let latency = Chart {
            title: "Throughput vs p99 latency".into(),
            x_label: "p99 end-to-end latency (ms)".into(),
            y_label: "Output throughput (tokens/s)".into(),
            series: vec![line(
                "H100 TP4",
                curve(240.0, 2000.0)
                    .into_iter()
                    .map(|(a, b)| (b, a))
                    .collect(),
                SeriesStyle::LineWithPoints,
            )],
            x_rules: vec![Rule {
                value: 6000.0,
                label: "SLO: p99 6 s".into(),
            }],
            markers: vec![Marker {
                x: 4500.0,
                y: 2880.0,
                label: "chosen point".into(),
            }],
            ..Chart::default()
        };
        let q: Vec<(f64, f64)> = (0..=100)
            .map(|i| {
                let p = i as f64 / 100.0;
                (p.min(0.999), 120.0 - 300.0 * (1.0 - p.min(0.999)).ln())
            })
            .collect();
        let q2: Vec<(f64, f64)> = q.iter().map(|&(p, v)| (p, v * 1.7)).collect();
        let cdf = Chart {
            title: "TTFT distribution".into(),
            x_label: "Time to first token (ms)".into(),
            y_label: "Fraction of requests (CDF)".into(),
            series: vec![cdf_series("8 req/s", &q), cdf_series("12 req/s", &q2)],
            x_rules: vec![Rule {
                value: 2000.0,
                label: "SLO: TTFT 2 s".into(),
            }],
            y_rules: vec![Rule {
                value: 0.99,
                label: "p99".into(),
            }],
            ..Chart::default()
        };
        let cost = Chart {
            title: "Cost per million output tokens vs load".into(),
            x_label: "Offered load (requests/s)".into(),
            y_label: "Cost ($ per 1M output tokens)".into(),
            series: vec![
                line(
                    "H100 × 4 @ $2.50/h",
                    rates
                        .iter()
                        .map(|r| (*r, 10.0 / (r * 240.0 * 3600.0) * 1e6))
                        .collect(),
                    SeriesStyle::LineWithPoints,
                ),
                line(
                    "H200 × 2 @ $3.80/h",
                    rates
                        .iter()
                        .map(|r| (*r, 7.6 / (r * 230.0 * 3600.0) * 1e6))
                        .collect(),
                    SeriesStyle::LineWithPoints,
                ),
            ],
            log_y: true,
            ..Chart::default()
        };
        let t: Vec<f64> = (0..600).map(|i| i as f64 * 0.5).collect();
        let wave = |i: usize| ((i as f64) / 40.0).sin();
        let timeseries = Chart {
            title: "Replica state over time".into(),
            x_label: "Time (s)".into(),
            y_label: "Requests / KV cache use (%)".into(),
            series: vec![
                line(
                    "running (requests)",
                    t.iter()
                        .enumerate()
                        .map(|(i, &x)| (x, (60.0 + 30.0 * wave(i)).round()))
                        .collect(),
                    SeriesStyle::Line,
                ),
                line(
                    "waiting (requests)",
                    t.iter()
                        .enumerate()
                        .map(|(i, &x)| (x, (20.0 * wave(i)).max(0.0).round()))
                        .collect(),
                    SeriesStyle::Line,
                ),
                line(
                    "KV cache use (%)",
                    t.iter()
                        .enumerate()
                        .map(|(i, &x)| (x, 55.0 + 40.0 * wave(i)))
                        .collect(),
                    SeriesStyle::Line,
                ),
            ],
            y_rules: vec![Rule {
                value: 100.0,
                label: "KV cache full".into(),
            }],
            ..Chart::default()
        };
        let scatter = Chart {
            title: "Deployments: cost vs p99 TTFT".into(),
            x_label: "p99 TTFT (ms)".into(),
            y_label: "$ per 1M output tokens".into(),
            series: vec![
                line(
                    "TP1",
                    vec![(900.0, 0.8), (1400.0, 0.6), (3100.0, 0.45)],
                    SeriesStyle::Points,
                ),
                line(
                    "TP2",
                    vec![(600.0, 1.1), (800.0, 0.9), (1900.0, 0.7)],
                    SeriesStyle::Points,
                ),
            ],
            x_rules: vec![Rule {
                value: 2000.0,
                label: "SLO".into(),
            }],
            markers: vec![Marker {
                x: 1400.0,
                y: 0.6,
                label: "cheapest within SLO".into(),
            }],
            ..Chart::default()
        };
        let loglog = Chart {
            title: "Log-log, with unusable points".into(),
            x_label: "Batch size (sequences)".into(),
            y_label: "Step time (µs)".into(),
            series: vec![line(
                "decode step",
                vec![
                    (0.0, 5.0),
                    (-1.0, 3.0),
                    (1.0, 9000.0),
                    (8.0, 9500.0),
                    (64.0, 12000.0),
                    (512.0, 41000.0),
                    (f64::NAN, 1.0),
                    (4.0, f64::INFINITY),
                ],
                SeriesStyle::LineWithPoints,
            )],
            x_rules: vec![Rule {
                value: -5.0,
                label: "dropped".into(),
            }],
            log_x: true,
            log_y: true,
            ..Chart::default()
        };
        let empty = Chart {
            title: "Empty".into(),
            ..Chart::default()
        };
        let single = Chart {
            title: "Single point".into(),
            series: vec![line("one", vec![(3.0, 7.0)], SeriesStyle::Line)],
            ..Chart::default()
        };
        let flat = Chart {
            title: "All equal".into(),
            series: vec![line(
                "flat",
                vec![(5.0, 0.0); 4],
                SeriesStyle::LineWithPoints,
            )],
            markers: vec![Marker {
                x: 5.0,
                y: 0.0,
                label: "here".into(),
            }],
            log_x: true,
            ..Chart::default()
        };
        let huge = Chart {
            title: "Huge ranges".into(),
            series: vec![
                line(
                    "wide",
                    vec![
                        (-1e300, 1e-140),
                        (1e300, 1e140),
                        (f64::MAX, 1.0),
                        (1.0, 1e-300),
                    ],
                    SeriesStyle::Line,
                ),
                line(
                    "tiny",
                    vec![(1e15, 1.0), (1e15 + 0.001, 1.0 + 1e-12)],
                    SeriesStyle::Points,
                ),
            ],
            log_y: true,
            ..Chart::default()
        };
        let narrow_log = Chart {
            title: "Narrow log range".into(),
            series: vec![line(
                "",
                vec![(20.0, 30.0), (80.0, 31.0)],
                SeriesStyle::Line,
            )],
            log_x: true,
            log_y: true,
            ..Chart::default()
        };
        vec![
            ("tradeoff", tradeoff),
            ("latency", latency),
            ("cdf", cdf),
            ("cost", cost),
            ("timeseries", timeseries),
            ("scatter", scatter),
            ("loglog", loglog),
            ("empty", empty),
            ("single", single),
            ("flat", flat),
            ("huge", huge),
            ("narrow_log", narrow_log),
        ]
    }

    #[test]
    fn a_legend_gets_room_above_the_data_when_every_corner_holds_some() {
        // A week's replicas: three lines from corner to corner (low at night at both ends,
        // high by day), as the period plan's chart draws them, 360 pixels tall.
        let hours = |f: &dyn Fn(f64) -> f64| (0..48).map(|h| (h as f64, f(h as f64))).collect();
        let day = |h: f64| 2.0 + 6.0 * (1.0 - ((h - 14.0) / 12.0).cos()).abs().min(1.0);
        let chart = Chart {
            title: "replicas".into(),
            series: vec![
                line(
                    "paid for",
                    hours(&|h| day(h) + (h % 24.0).min(1.0)),
                    SeriesStyle::Line,
                ),
                line("ready", hours(&day), SeriesStyle::Line),
                line("sized", hours(&|h| 9.0 - day(h)), SeriesStyle::Line),
            ],
            ..Default::default()
        };
        let p = Prepared::new(&chart);
        let band = legend_band(&p, 360);
        // Three entries (92 pixels) fit a corner, the outer 40% of a 238-pixel plot.
        assert_eq!(band, 0.4);
        assert!(!corner_counts(&p, false, false, band).contains(&0));
        let y_range = legend_room(&p, &chart, 360).expect("every corner holds data");
        let roomy = Prepared {
            y_range,
            ..p.clone()
        };
        // The legend goes to an upper corner, and no datum lies in its band.
        let counts = corner_counts(&roomy, false, false, band);
        assert_eq!((counts[0], counts[1]), (0, 0), "{counts:?}");
        assert!(matches!(
            legend_corner(&roomy, false, false, band),
            SeriesLabelPosition::UpperRight
        ));
        // A chart with a free corner keeps its range (every other chart stays as it was).
        let free = Chart {
            series: vec![line("one", vec![(0.0, 0.0), (1.0, 1.0)], SeriesStyle::Line)],
            ..Default::default()
        };
        assert_eq!(legend_room(&Prepared::new(&free), &free, 360), None);
        // Six entries (158 pixels) are taller than a corner: the band is the legend's.
        let six = Chart {
            series: (0..6)
                .map(|i| line(&format!("s{i}"), vec![(0.0, i as f64)], SeriesStyle::Line))
                .collect(),
            ..Default::default()
        };
        let band = legend_band(&Prepared::new(&six), 360);
        assert!((band - 158.0 / 238.0).abs() < 1e-12, "{band}");
    }

    #[test]
    fn renders_every_kind_as_png_and_svg() {
        let tmp = tempfile::tempdir().unwrap();
        // Set SERVESIM_PLOT_DIR to keep the images for a look.
        let dir = std::env::var_os("SERVESIM_PLOT_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| tmp.path().to_path_buf());
        for (name, chart) in gallery() {
            let png = dir.join(format!("{name}.png"));
            render(&chart, &png, ImageFormat::Png).unwrap();
            let bytes = std::fs::read(&png).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{name}");
            assert!(bytes.len() > 5_000, "{name}: {} bytes", bytes.len());

            let svg = dir.join(format!("{name}.svg"));
            render(&chart, &svg, ImageFormat::Svg).unwrap();
            let text = std::fs::read_to_string(&svg).unwrap();
            assert!(
                text.starts_with("<svg") && text.trim_end().ends_with("</svg>"),
                "{name}"
            );
            assert!(text.contains(&chart.title), "{name}");
            for s in chart.series.iter().filter(|s| !s.name.is_empty()) {
                assert!(text.contains(&s.name), "{name}: legend lacks {}", s.name);
            }
        }
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn extreme_value_pairs_never_hang_or_panic() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.svg");
        let vals = [
            0.0,
            -1.0,
            1.0,
            1.0 + f64::EPSILON,
            5e-324,
            f64::MIN_POSITIVE,
            1e-150,
            1e150,
            1e-300,
            1e300,
            f64::MAX,
            f64::NAN,
            f64::INFINITY,
        ];
        for (i, &a) in vals.iter().enumerate() {
            for &b in &vals[i..] {
                for (log_x, log_y) in [(false, false), (true, false), (false, true), (true, true)] {
                    let chart = Chart {
                        series: vec![line("s", vec![(a, b), (b, a)], SeriesStyle::LineWithPoints)],
                        x_rules: vec![Rule {
                            value: a,
                            label: "r".into(),
                        }],
                        y_rules: vec![Rule {
                            value: b,
                            label: "r".into(),
                        }],
                        markers: vec![Marker {
                            x: b,
                            y: b,
                            label: "m".into(),
                        }],
                        log_x,
                        log_y,
                        ..Chart::default()
                    };
                    render(&chart, &path, ImageFormat::Svg)
                        .unwrap_or_else(|e| panic!("{a} {b} {log_x} {log_y}: {e}"));
                }
            }
        }
    }

    #[test]
    fn render_to_missing_directory_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("no/such/dir/x.png");
        assert!(render(&Chart::default(), &path, ImageFormat::Png).is_err());
        assert!(render(&Chart::default(), &path, ImageFormat::Svg).is_err());
    }

    #[test]
    fn cdf_series_sorts_and_filters() {
        let s = cdf_series(
            "ttft",
            &[
                (0.99, 30.0),
                (0.5, 10.0),
                (1.5, 1.0),
                (f64::NAN, 2.0),
                (0.9, f64::INFINITY),
            ],
        );
        assert_eq!(s.points, vec![(10.0, 0.5), (30.0, 0.99)]);
        assert_eq!(s.style, SeriesStyle::Line);
    }

    #[test]
    fn tick_labels_are_readable() {
        assert_eq!(format_tick(0.0), "0");
        assert_eq!(format_tick(0.30000000000000004), "0.3");
        assert_eq!(format_tick(150.0), "150");
        assert_eq!(format_tick(12500.0), "12,500");
        assert_eq!(format_tick(-1250.5), "-1,250.5");
        assert_eq!(format_tick(2_500_000.0), "2.5M");
        assert_eq!(format_tick(3e9), "3G");
        assert_eq!(format_tick(0.00015), "1.5e-4");
        assert_eq!(format_tick(f64::NAN), "NaN");
        assert_eq!(log_tick(300.0, 2.0), "");
        assert_eq!(log_tick(200.0, 2.0), "200");
        assert_eq!(log_tick(200.0, 5.0), "");
        assert_eq!(log_tick(1000.0, 5.0), "1,000");
    }

    #[test]
    fn axis_ranges_are_never_degenerate() {
        assert_eq!(axis_range(std::iter::empty(), false), (0.0, 1.0));
        assert_eq!(axis_range([0.0].into_iter(), false), (-1.0, 1.0));
        assert_eq!(axis_range([5.0, 5.0].into_iter(), false), (4.5, 5.5));
        let near = |(a, b): (f64, f64), (c, d): (f64, f64)| {
            (a / c - 1.0).abs() < 1e-6 && (b / d - 1.0).abs() < 1e-6
        };
        assert!(near(
            axis_range([20.0, 80.0].into_iter(), true),
            (10.0, 100.0)
        ));
        assert!(near(axis_range([100.0].into_iter(), true), (100.0, 1000.0)));
        assert_eq!(axis_range([10.0, 100.0].into_iter(), false), (0.0, 104.5));
        let (lo, hi) = axis_range([-1e300, 1e300].into_iter(), false);
        assert!(lo.is_finite() && hi.is_finite() && lo < hi);
    }
}
