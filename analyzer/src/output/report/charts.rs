//! Chart descriptions and their drawing with plotters, once into an SVG string (inlined in the page) and once
//! into a PNG file (for slides and tickets).
//!
//! A chart is first described as plain data ([`LineChart`], [`Timeline`]) so that what the report shows can be
//! decided and tested apart from how plotters draws it; one generic function per kind then draws the
//! description on any backend.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::ReportError;

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 380;
/// Points kept per line after decimation: about two per horizontal pixel, more would not show.
const MAX_POINTS: usize = 2 * WIDTH as usize;

/// Colours that stay apart for the usual forms of colour blindness (Okabe–Ito), then a few more.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
    RGBColor(120, 120, 120),
    RGBColor(150, 80, 30),
];

/// One polyline. Steps (a rate limiter's value between events) are expanded into points by the caller.
#[derive(Debug, Clone)]
pub struct Line {
    /// What the legend calls it.
    pub label: String,
    /// Its colour, from [`PALETTE`] so that lines stay apart for colour-blind readers.
    pub color: RGBColor,
    /// The (x, y) points in chart units, already decimated by the caller or by the drawing.
    pub points: Vec<(f64, f64)>,
    /// Dashed to set a secondary line (a total, a target, a limit, a maximum) apart from the ones the chart is about.
    pub dashed: bool,
}

/// How a run of [`Marks`] is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkShape {
    /// A filled dot, for sparse events each worth seeing.
    Dot,
    /// A short vertical tick: many events close together still read as a band, not a blot.
    Tick,
}

/// Isolated events drawn as marks.
#[derive(Debug, Clone)]
pub struct Marks {
    /// What the legend calls them.
    pub label: String,
    /// Their colour.
    pub color: RGBColor,
    /// How each mark is drawn.
    pub shape: MarkShape,
    /// Where the marks sit, in chart units.
    pub points: Vec<(f64, f64)>,
}

/// A second y axis on the right (CE fraction beside throughput).
#[derive(Debug, Clone)]
pub struct SecondAxis {
    /// The axis title.
    pub label: String,
    /// The top of the axis, so the lines share one scale.
    pub max: f64,
    /// The lines read against this axis.
    pub lines: Vec<Line>,
}

/// A chart of lines and marks over time, as data, so what a chart shows can be tested without drawing it.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// The caption above the plot.
    pub title: String,
    /// The x axis title (the time unit).
    pub x_label: String,
    /// The y axis title (the quantity and its unit).
    pub y_label: String,
    /// The visible time span, shared with the other charts so they line up.
    pub x_range: (f64, f64),
    /// The top of the y axis; the bottom is 0.
    pub y_max: f64,
    /// The lines, drawn in order.
    pub lines: Vec<Line>,
    /// Isolated events drawn over the lines.
    pub marks: Vec<Marks>,
    /// A second y axis on the right, when two quantities share the time axis.
    pub y2: Option<SecondAxis>,
}

/// One row of a timeline: a name and its busy intervals.
#[derive(Debug, Clone)]
pub struct Lane {
    /// The lane's name, on the left (the pauser and its priority).
    pub label: String,
    /// When the lane was busy (paused), as (start, end) in x units.
    pub spans: Vec<(f64, f64)>,
    /// Spans drawn on top in the alarm colour (PFC storms).
    pub alarms: Vec<(f64, f64)>,
}

/// Lanes of intervals over time (who paused what, when), as data, so it can be tested without drawing.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The caption above the plot.
    pub title: String,
    /// The x axis title (the time unit).
    pub x_label: String,
    /// The visible time span, shared with the other charts.
    pub x_range: (f64, f64),
    /// One row per pauser and priority.
    pub lanes: Vec<Lane>,
    /// What the legend calls the ordinary spans.
    pub span_label: String,
    /// What the legend calls the alarm spans.
    pub alarm_label: String,
}

/// One cell of a [`Heatmap`]: its value on the colour scale, and the text written in it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Where the cell's colour sits between 0 and the map's `max`.
    pub value: f64,
    /// What the cell says (the value in its unit), written when the cells are large enough.
    pub text: String,
}

/// A grid of coloured cells (a value per row and column: host × host), as data, so what it shows can be
/// tested without drawing it.
#[derive(Debug, Clone)]
pub struct Heatmap {
    /// The caption above the grid.
    pub title: String,
    /// What the columns are (left to right).
    pub x_label: String,
    /// What the rows are (top to bottom).
    pub y_label: String,
    /// The columns' names.
    pub columns: Vec<String>,
    /// The rows' names.
    pub rows: Vec<String>,
    /// `cells[row][column]`; `None` for a cell with nothing in it, drawn grey.
    pub cells: Vec<Vec<Option<Cell>>>,
    /// The value drawn in the full colour; 0 is white.
    pub max: f64,
    /// The full colour.
    pub color: RGBColor,
    /// The colour scale's legend: what 0 and `max` read as.
    pub scale: (String, String),
}

/// Any chart of the report, so the section builders and the SVG/PNG drawing deal with one type.
#[derive(Debug, Clone)]
pub enum Chart {
    /// Lines and marks over time.
    Line(LineChart),
    /// Lanes of intervals over time.
    Timeline(Timeline),
    /// A grid of coloured cells.
    Heatmap(Heatmap),
}

impl Chart {
    /// Pixels high the chart is drawn: a timeline grows with its lanes, a heatmap with its rows, a line chart
    /// does not.
    pub fn height(&self) -> u32 {
        match self {
            Chart::Line(_) => HEIGHT,
            // Room for every lane at a readable height.
            Chart::Timeline(t) => (120 + 28 * t.lanes.len() as u32).max(200),
            Chart::Heatmap(h) => (150 + 30 * h.rows.len() as u32).clamp(240, 1_000),
        }
    }
}

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Where the chart font comes from: `ROCETRACE_FONT` if set, else the first Debian/Arch/Fedora DejaVu path.
/// DejaVu Sans (see assets/fonts/README.md), used when the system has no font.
const BUNDLED_FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

fn font_paths() -> Vec<String> {
    match std::env::var("ROCETRACE_FONT") {
        Ok(p) if !p.is_empty() => vec![p],
        _ => FONT_CANDIDATES.iter().map(|s| s.to_string()).collect(),
    }
}

/// Loads and registers the font plotters measures and rasterizes text with. ab_glyph keeps the bytes for the
/// life of the process, so they are leaked once; the outcome is cached so a missing font is reported the same
/// way on every call instead of being retried.
pub fn ensure_font() -> Result<(), ReportError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    let res = LOADED.get_or_init(|| {
        let tried = font_paths();
        let explicit = std::env::var("ROCETRACE_FONT").is_ok_and(|p| !p.is_empty());
        let found = tried
            .iter()
            .find_map(|p| std::fs::read(p).ok().map(|b| (p.clone(), b)));
        let (path, bytes): (String, &'static [u8]) = match found {
            Some((path, bytes)) => (path, Box::leak(bytes.into_boxed_slice())),
            // No system font: the bundled copy, so a report can always be drawn. A font the user named
            // explicitly and that cannot be read is an error, not something to paper over.
            None if !explicit => ("the bundled DejaVu Sans".to_string(), BUNDLED_FONT),
            None => {
                return Err(format!(
                    "no font found for the charts (tried {}); install Debian's fonts-dejavu-core or set \
                     ROCETRACE_FONT to a .ttf file",
                    tried.join(", ")
                ));
            }
        };
        for style in [FontStyle::Normal, FontStyle::Bold] {
            plotters::style::register_font("sans-serif", style, bytes)
                .map_err(|_| format!("{path} is not a usable TrueType font"))?;
        }
        Ok(())
    });
    res.clone().map_err(ReportError::Font)
}

fn chart_err(title: &str) -> impl Fn(String) -> ReportError + '_ {
    move |message| ReportError::Chart {
        chart: title.to_string(),
        message,
    }
}

/// Draws a chart as an SVG document (no XML prolog, so it can be inlined in HTML).
pub fn to_svg(chart: &Chart) -> Result<String, ReportError> {
    ensure_font()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, chart.height())).into_drawing_area();
        draw(&root, chart).map_err(chart_err(title(chart)))?;
        root.present()
            .map_err(|e| chart_err(title(chart))(e.to_string()))?;
    }
    Ok(out)
}

/// Draws a chart into a PNG file.
pub fn to_png(chart: &Chart, path: &Path) -> Result<(), ReportError> {
    ensure_font()?;
    let (w, h) = (WIDTH, chart.height());
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, chart).map_err(chart_err(title(chart)))?;
        root.present()
            .map_err(|e| chart_err(title(chart))(e.to_string()))?;
    }
    let io = |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::create(path).map_err(io)?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let png_err = |e: png::EncodingError| chart_err(title(chart))(format!("PNG: {e}"));
    let mut writer = enc.write_header().map_err(png_err)?;
    writer.write_image_data(&rgb).map_err(png_err)?;
    writer.finish().map_err(png_err)?;
    Ok(())
}

fn title(chart: &Chart) -> &str {
    match chart {
        Chart::Line(c) => &c.title,
        Chart::Timeline(t) => &t.title,
        Chart::Heatmap(h) => &h.title,
    }
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    match chart {
        Chart::Line(c) => draw_line_chart(root, c),
        Chart::Timeline(t) => draw_timeline(root, t),
        Chart::Heatmap(h) => draw_heatmap(root, h),
    }
}

/// The colour of `value` on a scale from white (0) to `color` (`max` and above).
pub fn shade(value: f64, max: f64, color: RGBColor) -> RGBColor {
    let t = if max > 0.0 && value.is_finite() {
        (value / max).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let mix = |c: u8| (255.0 - t * (255.0 - f64::from(c))).round() as u8;
    RGBColor(mix(color.0), mix(color.1), mix(color.2))
}

/// Cells narrower or lower than this (pixels) go without their text, which would not fit.
const MIN_TEXT_CELL: (i32, i32) = (56, 18);

fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    h: &Heatmap,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (w, _) = root.dim_in_pixel();
    let (grid, legend) = root.split_horizontally(w.saturating_sub(120));
    let (nx, ny) = (h.columns.len().max(1), h.rows.len().max(1));
    let longest = h.rows.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let mut chart = ChartBuilder::on(&grid)
        .caption(&h.title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(56)
        .y_label_area_size((longest as u32 * 8 + 40).clamp(60, 320))
        // A segmented 0..n has a segment for each of 0..=n: one per row and column is 0..n - 1.
        .build_cartesian_2d((0..nx - 1).into_segmented(), (0..ny - 1).into_segmented())
        .map_err(e)?;
    // Rows from the top, as a table reads: row r is drawn at y = ny - 1 - r.
    let name = |names: &[String], v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    let x_fmt = |v: &SegmentValue<usize>| name(&h.columns, v);
    let y_fmt = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) if *i < ny => name(&h.rows, &SegmentValue::CenterOf(ny - 1 - i)),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .x_desc(&h.x_label)
        .y_desc(&h.y_label)
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 14))
        .x_labels(nx)
        .y_labels(ny)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .disable_mesh()
        .draw()
        .map_err(e)?;
    let cell_px = {
        let (x0, y0) = chart.backend_coord(&(SegmentValue::Exact(0), SegmentValue::Exact(0)));
        let (x1, y1) = chart.backend_coord(&(SegmentValue::Exact(1), SegmentValue::Exact(1)));
        ((x1 - x0).abs(), (y1 - y0).abs())
    };
    let room = cell_px.0 >= MIN_TEXT_CELL.0 && cell_px.1 >= MIN_TEXT_CELL.1;
    let grey = RGBColor(235, 235, 235);
    let mut rects = Vec::new();
    let mut texts = Vec::new();
    for (r, row) in h.cells.iter().enumerate().take(ny) {
        let y = ny - 1 - r;
        for (x, cell) in row.iter().enumerate().take(nx) {
            let corners = [
                (SegmentValue::Exact(x), SegmentValue::Exact(y)),
                (SegmentValue::Exact(x + 1), SegmentValue::Exact(y + 1)),
            ];
            let fill = cell
                .as_ref()
                .map_or(grey, |v| shade(v.value, h.max, h.color));
            rects.push(Rectangle::new(corners.clone(), fill.filled()));
            rects.push(Rectangle::new(corners, WHITE.stroke_width(2)));
            if let Some(v) = cell.as_ref().filter(|_| room) {
                let dark = h.max > 0.0 && v.value / h.max > 0.6;
                let style = ("sans-serif", 13)
                    .into_font()
                    .color(if dark { &WHITE } else { &BLACK })
                    .pos(Pos::new(HPos::Center, VPos::Center));
                let at = (SegmentValue::CenterOf(x), SegmentValue::CenterOf(y));
                texts.push(Text::new(v.text.clone(), at, style));
            }
        }
    }
    chart.draw_series(rects).map_err(e)?;
    chart.draw_series(texts).map_err(e)?;
    draw_scale(&legend, h).map_err(|e| e.to_string())
}

/// The heatmap's colour scale: a strip from the full colour (top) to white, with what each end reads as.
fn draw_scale<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    h: &Heatmap,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (_, height) = area.dim_in_pixel();
    let (top, bottom) = (60i32, height as i32 - 70);
    let steps = 40;
    for k in 0..steps {
        let y0 = top + (bottom - top) * k / steps;
        let y1 = top + (bottom - top) * (k + 1) / steps;
        let v = h.max * f64::from(steps - k) / f64::from(steps);
        area.draw(&Rectangle::new(
            [(10, y0), (34, y1)],
            shade(v, h.max, h.color).filled(),
        ))?;
    }
    area.draw(&Rectangle::new(
        [(10, top), (34, bottom)],
        RGBColor(160, 160, 160).stroke_width(1),
    ))?;
    let font = ("sans-serif", 14).into_font();
    area.draw(&Text::new(h.scale.1.clone(), (40, top - 6), font.clone()))?;
    area.draw(&Text::new(h.scale.0.clone(), (40, bottom - 8), font))?;
    Ok(())
}

/// A range plotters accepts: finite, and not empty.
fn sane_range(lo: f64, hi: f64) -> (f64, f64) {
    let lo = if lo.is_finite() { lo } else { 0.0 };
    let hi = if hi.is_finite() { hi } else { lo + 1.0 };
    if hi > lo { (lo, hi) } else { (lo, lo + 1.0) }
}

/// Keeps the first, lowest, highest and last point of each horizontal bucket, in order: the line looks the
/// same at chart resolution, and the SVG stays small for long captures.
pub fn decimate(points: &[(f64, f64)], x_range: (f64, f64), max_points: usize) -> Vec<(f64, f64)> {
    if points.len() <= max_points {
        return points.to_vec();
    }
    let buckets = (max_points / 4).max(1);
    let (lo, hi) = sane_range(x_range.0, x_range.1);
    let bucket_of = |x: f64| (((x - lo) / (hi - lo)) * buckets as f64).floor() as i64;
    let mut out = Vec::with_capacity(max_points);
    let mut i = 0;
    while i < points.len() {
        let b = bucket_of(points[i].0);
        let mut j = i;
        while j < points.len() && bucket_of(points[j].0) == b {
            j += 1;
        }
        let group = &points[i..j];
        let mut keep = vec![0, group.len() - 1];
        if let Some((k, _)) = group
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.1.total_cmp(&b.1.1))
        {
            keep.push(k);
        }
        if let Some((k, _)) = group
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.1.total_cmp(&b.1.1))
        {
            keep.push(k);
        }
        keep.sort_unstable();
        keep.dedup();
        out.extend(keep.into_iter().filter_map(|k| group.get(k).copied()));
        i = j;
    }
    out
}

fn draw_line_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (x0, x1) = sane_range(c.x_range.0, c.x_range.1);
    let (_, y_max) = sane_range(0.0, c.y_max);
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(&c.title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .right_y_label_area_size(if c.y2.is_some() { 70 } else { 10 });
    let mut chart = builder
        .build_cartesian_2d(x0..x1, 0.0..y_max)
        .map_err(e)?
        .set_secondary_coord(
            x0..x1,
            0.0..c.y2.as_ref().map_or(1.0, |a| sane_range(0.0, a.max).1),
        );
    chart
        .configure_mesh()
        .x_desc(&c.x_label)
        .y_desc(&c.y_label)
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 15))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    if let Some(a) = &c.y2 {
        chart
            .configure_secondary_axes()
            .y_desc(&a.label)
            .axis_desc_style(("sans-serif", 17))
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(e)?;
    }
    for l in &c.lines {
        let pts = decimate(&l.points, (x0, x1), MAX_POINTS);
        let color = l.color;
        let style = color.stroke_width(2);
        let anno = if l.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 8, 5, style))
                .map_err(e)?
        } else {
            chart.draw_series(LineSeries::new(pts, style)).map_err(e)?
        };
        anno.label(l.label.clone()).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        });
    }
    if let Some(a) = &c.y2 {
        for l in &a.lines {
            let pts = decimate(&l.points, (x0, x1), MAX_POINTS);
            let color = l.color;
            chart
                .draw_secondary_series(LineSeries::new(pts, color.stroke_width(1)))
                .map_err(e)?
                .label(l.label.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(1))
                });
        }
    }
    for m in &c.marks {
        let color = m.color;
        let pts = decimate(&m.points, (x0, x1), MAX_POINTS);
        let anno = match m.shape {
            MarkShape::Dot => chart
                .draw_series(
                    pts.into_iter()
                        .map(|p| Circle::new(p, 3, color.mix(0.8).filled())),
                )
                .map_err(e)?,
            MarkShape::Tick => chart
                .draw_series(pts.into_iter().map(|p| {
                    EmptyElement::at(p)
                        + PathElement::new(vec![(0, 0), (0, -12)], color.stroke_width(1))
                }))
                .map_err(e)?,
        };
        anno.label(m.label.clone()).legend(move |(x, y)| {
            Rectangle::new([(x + 6, y - 4), (x + 14, y + 4)], color.filled())
        });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    Ok(())
}

fn draw_timeline<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    t: &Timeline,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let (x0, x1) = sane_range(t.x_range.0, t.x_range.1);
    let n = t.lanes.len().max(1);
    let longest = t
        .lanes
        .iter()
        .map(|l| l.label.chars().count())
        .max()
        .unwrap_or(0);
    let mut chart = ChartBuilder::on(root)
        .caption(&t.title, ("sans-serif", 24))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size((longest as u32 * 8 + 16).clamp(60, 320))
        .build_cartesian_2d(x0..x1, (0..n).into_segmented())
        .map_err(e)?;
    let labels: Vec<&str> = t.lanes.iter().map(|l| l.label.as_str()).collect();
    let fmt = |v: &SegmentValue<usize>| match v {
        SegmentValue::CenterOf(i) => labels.get(*i).copied().unwrap_or("").to_string(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .x_desc(&t.x_label)
        .axis_desc_style(("sans-serif", 17))
        .label_style(("sans-serif", 15))
        .y_labels(n)
        .y_label_formatter(&fmt)
        .disable_y_mesh()
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    let lane = |i: usize| (SegmentValue::Exact(i), SegmentValue::Exact(i + 1));
    let span_color = PALETTE[0];
    let alarm_color = RGBColor(200, 30, 30);
    let clip = |a: f64, b: f64| (a.max(x0), b.min(x1).max(a.max(x0)));
    let mut spans = Vec::new();
    let mut alarms = Vec::new();
    for (i, l) in t.lanes.iter().enumerate() {
        let (lo, hi) = lane(i);
        for &(a, b) in &l.spans {
            let (a, b) = clip(a, b);
            spans.push(Rectangle::new(
                [(a, lo.clone()), (b, hi.clone())],
                span_color.mix(0.75).filled(),
            ));
        }
        for &(a, b) in &l.alarms {
            let (a, b) = clip(a, b);
            alarms.push(Rectangle::new(
                [(a, lo.clone()), (b, hi.clone())],
                alarm_color.stroke_width(3),
            ));
        }
    }
    chart
        .draw_series(spans)
        .map_err(e)?
        .label(t.span_label.clone())
        .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], span_color.filled()));
    chart
        .draw_series(alarms)
        .map_err(e)?
        .label(t.alarm_label.clone())
        .legend(move |(x, y)| {
            Rectangle::new([(x, y - 5), (x + 18, y + 5)], alarm_color.stroke_width(3))
        });
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimate_keeps_extremes_and_order() {
        let pts: Vec<(f64, f64)> = (0..10_000)
            .map(|i| (i as f64, if i == 5_000 { 99.0 } else { (i % 7) as f64 }))
            .collect();
        let d = decimate(&pts, (0.0, 10_000.0), 400);
        assert!(d.len() <= 400 + 4, "{}", d.len());
        assert!(d.iter().any(|p| p.1 == 99.0));
        assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(d.first(), pts.first());
        assert_eq!(d.last(), pts.last());
    }

    #[test]
    fn shades_run_from_white_to_the_full_colour_and_stop_there() {
        let blue = PALETTE[0];
        assert_eq!(shade(0.0, 10.0, blue), RGBColor(255, 255, 255));
        assert_eq!(shade(10.0, 10.0, blue), blue);
        assert_eq!(shade(25.0, 10.0, blue), blue);
        assert_eq!(
            shade(5.0, 10.0, RGBColor(55, 155, 255)),
            RGBColor(155, 205, 255)
        );
        assert_eq!(shade(f64::NAN, 10.0, blue), RGBColor(255, 255, 255));
        assert_eq!(shade(3.0, 0.0, blue), RGBColor(255, 255, 255));
    }

    #[test]
    fn ranges_are_made_drawable() {
        assert_eq!(sane_range(5.0, 5.0), (5.0, 6.0));
        assert_eq!(sane_range(f64::NAN, f64::INFINITY), (0.0, 1.0));
    }
}
