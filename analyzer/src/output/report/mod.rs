//! `roce-analyzer report`: everything the analysis found, as one directory a person can open and a script
//! can read.
//!
//! The directory holds `index.html` (self-contained: CSS and charts inline, nothing fetched), the charts again
//! as PNG files, `summary.json` (the numbers behind the page without the long time series) and each table
//! as CSV and Parquet. Nothing in it depends on the wall clock, so the same capture always gives the same
//! bytes and the output can be snapshot-tested and diffed.
//!
//! The page leads with the findings, because that is what a reader came for; the charts after them are the
//! evidence, worst flows first.

pub mod charts;
pub mod html;
pub mod progress;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;
use thiserror::Error;

use crate::analysis::dcqcn::{DcqcnReport, Fit, FlowDcqcn, UnpairedCnps};
use crate::analysis::findings::{Finding, Severity};
use crate::analysis::pauses::PauseReport;
use crate::output::tables::{self, TableError, TableFormat};
use charts::{Chart, Lane, Line, LineChart, MarkShape, Marks, PALETTE, SecondAxis, Timeline};
pub use progress::Progress;
use roce_core::dcqcn::EventKind;
use roce_core::passes::StatsReport;
use roce_core::passes::flows::FlowRow;
use roce_core::passes::pairing::Method;
use roce_core::recorded::{
    FlowProcess, KernelEvent, KernelEvents, KernelSummary, QP_TRACEPOINTS, RDMA_RES_QP,
    flow_process_rows, kernel_event_rows, reverse_flow_qp,
};

/// Flows drawn one chart each; the rest are summed up in the table, since nobody reads forty charts.
pub const MAX_FLOW_CHARTS: usize = 8;
/// Rows of the per-QP table before the remainder is summarized in one row.
pub const MAX_TABLE_ROWS: usize = 50;
/// Lanes of the PFC timeline (source, priority), most paused first.
pub const MAX_PAUSE_LANES: usize = 16;

/// What the report is made from: the results of the passes, computed by the caller.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    pub stats: &'a StatsReport,
    pub dcqcn: &'a DcqcnReport,
    pub pauses: &'a PauseReport,
    pub findings: &'a [Finding],
}

/// The files written, for the CLI to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    pub index: PathBuf,
    pub summary: PathBuf,
    pub charts: Vec<PathBuf>,
    pub tables: Vec<PathBuf>,
}

#[derive(Debug, Error)]
pub enum ReportError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Font(String),
    #[error("chart {chart:?}: {message}")]
    Chart { chart: String, message: String },
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("summary.json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes the report into `dir` (created if needed), replacing files of the same names.
pub fn write_report(dir: &Path, input: &ReportInput<'_>) -> Result<ReportFiles, ReportError> {
    write_report_with(dir, input, &KernelEvents::default())
}

/// [`write_report`] for a capture that carries kernel events (`roce-tracer --kernel-events`, read with
/// [`roce_core::recorded::kernel_events`]): they get their own section and chart on the report's time axis, the
/// flows are labelled with their processes, and `summary.json` carries them under `kernel_events`.
pub fn write_report_with(
    dir: &Path,
    input: &ReportInput<'_>,
    kernel: &KernelEvents,
) -> Result<ReportFiles, ReportError> {
    // Fail before writing anything when text cannot be drawn, rather than leave half a report.
    charts::ensure_font()?;
    std::fs::create_dir_all(dir).map_err(|source| ReportError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let axis = TimeAxis::of(input);
    let shown = worst_flows(input);
    let kernel_summary = (!kernel.is_empty()).then(|| {
        KernelSummary::of(kernel, &input.stats.flows, &|f| {
            sender_qp_of(input.dcqcn, &input.stats.flows, f)
        })
    });
    let labels: &[FlowProcess] = kernel_summary
        .as_ref()
        .map_or(&[], |k| k.flow_processes.as_slice());
    let mut page = html::Page::default();
    let mut chart_files = Vec::new();
    let mut emit = |page: &mut html::Page,
                    name: &str,
                    chart: &Chart,
                    caption: &str|
     -> Result<(), ReportError> {
        let svg = charts::to_svg(chart)?;
        let png_name = format!("{name}.png");
        let png_path = dir.join(&png_name);
        charts::to_png(chart, &png_path)?;
        page.figure(&svg, caption, &png_name);
        chart_files.push(png_path);
        Ok(())
    };

    let cap = &input.stats.capture;
    page.h1("RoCE congestion report");
    page.para(
        "meta",
        &format!(
            "Capture {} ({}): {} frames, {} bytes over {}. DCQCN model: {} profile, knobs from {}, line rate {} Gb/s.",
            cap.file,
            cap.format,
            cap.frames,
            cap.bytes,
            fmt_duration(cap.duration_ns),
            input.dcqcn.profile,
            input.dcqcn.knob_source,
            fmt_num(input.dcqcn.line_gbps)
        ),
    );
    if let Some(err) = &cap.error {
        page.para("note", &format!("Reading stopped early: {err}"));
    }
    for limit in input.dcqcn.limits() {
        page.para("note", &format!("Limit reached: {limit}."));
    }
    // One silence longer than a second that is most of the span is rarely traffic: usually a record whose
    // timestamp was corrupted, which stretches every time axis below.
    if let Some(n) = cap.largest_gap_frame
        && cap.largest_gap_ns >= 1_000_000_000
        && cap.largest_gap_ns >= cap.duration_ns / 2
    {
        page.para(
            "note",
            &format!(
                "Frame {n} comes {} after the frame before it, most of the capture's span: check its timestamp \
                 (`roce-analyzer decode -c {n}` shows it last).",
                fmt_duration(cap.largest_gap_ns)
            ),
        );
    }

    page.section("findings", "Findings");
    page.raw(&findings_html(input.findings));

    page.section("flows", "Per-flow throughput and the DCQCN model");
    let flows_with_cc = input.dcqcn.flows.len();
    if shown.is_empty() {
        page.para(
            "note",
            "No flow saw ECN congestion marks or CNPs, so there is no rate control to show.",
        );
    } else {
        page.para(
            "note",
            &format!(
                "Showing {} of {} flows with CE marks or CNPs, most CNPs and CE marks first; the per-QP table \
                 below lists them all. Rc and Rt are the modeled current and target rates of the sender's \
                 rate limiter, fed with the CNPs seen in the capture.",
                shown.len(),
                flows_with_cc
            ),
        );
    }
    for (i, f) in shown.iter().enumerate() {
        let mut chart = flow_chart(f, &axis, input.dcqcn, i);
        let processes = label_for(
            labels,
            kernel_summary.as_ref(),
            f.sender,
            f.receiver,
            f.receiver_qp,
        );
        if let (Some(label), Chart::Line(c)) = (&processes, &mut chart) {
            c.title.push_str(&format!(" — {}", label.text));
            if !label.marks.is_empty() {
                c.marks.push(Marks {
                    label: "QP seen in the kernel events".into(),
                    color: PALETTE[7],
                    shape: MarkShape::Dot,
                    points: label.marks.iter().map(|&t| (axis.x(t), 0.0)).collect(),
                });
            }
        }
        let caption = match &processes {
            Some(l) => format!("Flow {}: {} — {}", i + 1, flow_label(f), l.text),
            None => format!("Flow {}: {}", i + 1, flow_label(f)),
        };
        emit(&mut page, &format!("flow_{:02}", i + 1), &chart, &caption)?;
    }

    page.section("aggregate", "Aggregate throughput and CE fraction");
    if let Some(chart) = aggregate_chart(input.dcqcn, &axis) {
        emit(
            &mut page,
            "aggregate",
            &chart,
            "Sum over the flows with CE marks or CNPs; CE fraction weighted by each flow's bytes.",
        )?;
    } else {
        page.para("note", "No flow with CE marks or CNPs.");
    }

    page.section("pfc", "PFC pause timeline");
    let (timeline, pause_note) = pause_timeline(input.pauses, &axis);
    match timeline {
        Some(chart) => emit(
            &mut page,
            "pfc_timeline",
            &chart,
            "Paused intervals per source MAC and priority; storms outlined in red.",
        )?,
        None => page.para(
            "note",
            "No PFC or PAUSE frame paused anything in this capture.",
        ),
    }
    if let Some(note) = pause_note {
        page.para("note", &note);
    }
    if !input.pauses.storms.is_empty() {
        page.raw(&storms_table(input.pauses, &axis));
    }

    if let Some(k) = &kernel_summary {
        page.section("kernel", "Kernel events");
        page.para("note", &kernel_note(k));
        if let Some(chart) = kernel_chart(kernel, &axis) {
            emit(
                &mut page,
                "kernel_events",
                &chart,
                "Kernel drops per second in each interval the tracer reported, and the recorded events as \
                 marks on the capture's time axis.",
            )?;
        }
        page.raw(&qp_processes_table(k, &axis));
        page.raw(&kernel_events_table(kernel, &axis));
    }

    page.section("cnp", "CNP rate");
    if let Some(chart) = cnp_rate_chart(input.dcqcn, &shown, &axis) {
        emit(
            &mut page,
            "cnp_rate",
            &chart,
            "CNPs received by each sender, counted in bins.",
        )?;
    } else {
        page.para("note", "No CNP was paired with a data flow.");
    }
    if !input.dcqcn.unpaired_cnps.is_empty() {
        page.para(
            "note",
            &format!(
                "{} CNP streams could not be tied to a data flow ({} CNPs); see unpaired_cnps.csv.",
                input.dcqcn.unpaired_cnps.len(),
                input
                    .dcqcn
                    .unpaired_cnps
                    .iter()
                    .map(|u| u.cnps)
                    .sum::<u64>()
            ),
        );
    }

    page.section("alpha", "DCQCN alpha");
    if let Some(chart) = alpha_chart(&shown, &axis) {
        emit(
            &mut page,
            "alpha",
            &chart,
            "The modeled congestion estimate alpha of each sender: each cut multiplies the rate by (1 − alpha / 2).",
        )?;
    } else {
        page.para("note", "The model made no rate decision for any flow.");
    }

    page.section("table", "Per-QP table");
    page.raw(&qp_table(input, labels));

    let mut table_files = write_tables(dir, input)?;
    if let Some(k) = &kernel_summary {
        table_files.extend(write_kernel_tables(dir, k, kernel)?);
    }
    page.section("files", "Files");
    let mut listed: Vec<String> = vec!["summary.json".into()];
    listed.extend(
        chart_files
            .iter()
            .chain(&table_files)
            .filter_map(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned()),
    );
    let links: Vec<String> = listed
        .iter()
        .map(|n| format!("<a href=\"{0}\">{0}</a>", html::escape(n)))
        .collect();
    page.raw(&format!("<p class=\"note\">{}</p>", links.join(" · ")));

    let summary_path = dir.join("summary.json");
    let mut summary = summary(input, &chart_files, &table_files);
    summary.kernel_events = kernel_summary.as_ref();
    write_file(&summary_path, &serde_json::to_vec_pretty(&summary)?)?;
    let index = dir.join("index.html");
    write_file(
        &index,
        page.finish(&format!("rocetrace report: {}", cap.file))
            .as_bytes(),
    )?;
    Ok(ReportFiles {
        index,
        summary: summary_path,
        charts: chart_files,
        tables: table_files,
    })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    std::fs::write(path, bytes).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Maps capture timestamps to chart x values: time since the capture's first frame, in a unit that keeps
/// the numbers short.
#[derive(Debug, Clone, Copy)]
pub struct TimeAxis {
    origin_ns: u64,
    span_ns: u64,
    ns_per_unit: f64,
    unit: &'static str,
}

impl TimeAxis {
    pub fn new(origin_ns: u64, span_ns: u64) -> Self {
        let (ns_per_unit, unit) = if span_ns < 2_000_000 {
            (1e3, "µs")
        } else if span_ns < 2_000_000_000 {
            (1e6, "ms")
        } else {
            (1e9, "s")
        };
        TimeAxis {
            origin_ns,
            span_ns,
            ns_per_unit,
            unit,
        }
    }

    fn of(input: &ReportInput<'_>) -> Self {
        let cap = &input.stats.capture;
        let origin = cap.first_ns.unwrap_or(input.pauses.start_ns);
        TimeAxis::new(origin, cap.duration_ns)
    }

    pub fn x(&self, t_ns: u64) -> f64 {
        (t_ns as f64 - self.origin_ns as f64) / self.ns_per_unit
    }

    pub fn range(&self) -> (f64, f64) {
        (0.0, self.span_ns as f64 / self.ns_per_unit)
    }

    pub fn label(&self) -> String {
        format!("time since the first frame ({})", self.unit)
    }
}

fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

fn fmt_duration(ns: u64) -> String {
    match ns {
        n if n < 10_000 => format!("{n} ns"),
        n if n < 10_000_000 => format!("{:.1} µs", n as f64 / 1e3),
        n if n < 10_000_000_000 => format!("{:.2} ms", n as f64 / 1e6),
        n => format!("{:.3} s", n as f64 / 1e9),
    }
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Problem => "problem",
    }
}

fn severity_rank(s: Severity) -> u8 {
    match s {
        Severity::Problem => 0,
        Severity::Warning => 1,
        Severity::Info => 2,
    }
}

fn findings_html(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "<p class=\"note\">No findings: nothing in this capture matched a known congestion-control \
                or PFC problem.</p>"
            .into();
    }
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    // Stable, so findings of one severity keep the order the analysis gave them.
    sorted.sort_by_key(|f| severity_rank(f.severity));
    let mut s = String::new();
    for f in sorted {
        let sev = severity_name(f.severity);
        s.push_str(&format!(
            "<div class=\"finding {sev}\"><h3><span class=\"sev\">{sev}</span> {} <span class=\"code\">{}</span></h3>\n<p>{}</p>",
            html::escape(&f.title),
            html::escape(f.code),
            html::escape(&f.detail)
        ));
        if !f.evidence.is_empty() {
            s.push_str("<ul>");
            for e in &f.evidence {
                s.push_str(&format!("<li>{}</li>", html::escape(e)));
            }
            s.push_str("</ul>");
        }
        s.push_str("</div>\n");
    }
    s
}

/// CE-marked packets of a DCQCN flow, from the stats table (same flow key).
fn ce_packets(stats: &StatsReport, f: &FlowDcqcn) -> u64 {
    stats
        .flows
        .iter()
        .find(|r| r.src == f.sender && r.dst == f.receiver && r.dest_qp == f.receiver_qp)
        .map_or(0, |r| r.ce_packets)
}

/// The flows that get a chart: most CNPs, then most CE marks; ties broken by the flow key so the choice is
/// stable.
fn worst_flows<'a>(input: &ReportInput<'a>) -> Vec<&'a FlowDcqcn> {
    let mut v: Vec<(&FlowDcqcn, u64)> = input
        .dcqcn
        .flows
        .iter()
        .map(|f| (f, ce_packets(input.stats, f)))
        .collect();
    v.sort_by(|a, b| {
        b.0.cnps.cmp(&a.0.cnps).then(b.1.cmp(&a.1)).then(
            (a.0.sender, a.0.receiver, a.0.receiver_qp).cmp(&(
                b.0.sender,
                b.0.receiver,
                b.0.receiver_qp,
            )),
        )
    });
    v.into_iter().take(MAX_FLOW_CHARTS).map(|x| x.0).collect()
}

fn flow_label(f: &FlowDcqcn) -> String {
    let sqp = f
        .sender_qp
        .map_or(String::new(), |q| format!(" (sender QP {q:#x})"));
    format!("{} → {} QP {:#x}{sqp}", f.sender, f.receiver, f.receiver_qp)
}

/// A step function (value holds until the next point) as polyline points, from `x0` to `x1`.
fn steps(
    start: f64,
    points: impl Iterator<Item = (f64, f64)>,
    x0: f64,
    x1: f64,
) -> Vec<(f64, f64)> {
    let mut out = vec![(x0, start)];
    let mut last = start;
    for (x, y) in points {
        out.push((x, last));
        out.push((x, y));
        last = y;
    }
    out.push((x1, last));
    out
}

/// Throughput as observed in bins, the model's Rc and Rt over it, CE-marked bins and CNP arrivals.
pub fn flow_chart(f: &FlowDcqcn, axis: &TimeAxis, d: &DcqcnReport, index: usize) -> Chart {
    let (x0, x1) = axis.range();
    let half_bin = d.bin_ns / 2;
    let observed: Vec<(f64, f64)> = f
        .observed
        .iter()
        .map(|o| (axis.x(o.t_ns.saturating_add(half_bin)), o.gbps))
        .collect();
    let line = d.line_gbps;
    let rc = steps(
        line,
        f.model.iter().map(|m| (axis.x(m.t_ns), m.rc_gbps)),
        x0,
        x1,
    );
    let rt = steps(
        line,
        f.model.iter().map(|m| (axis.x(m.t_ns), m.rt_gbps)),
        x0,
        x1,
    );
    let y_max = observed
        .iter()
        .map(|p| p.1)
        .chain([line])
        .fold(0.0f64, f64::max)
        * 1.12;
    let ce: Vec<(f64, f64)> = f
        .observed
        .iter()
        .filter(|o| o.ce_fraction > 0.0)
        .map(|o| (axis.x(o.t_ns.saturating_add(half_bin)), o.gbps))
        .collect();
    let cnps: Vec<(f64, f64)> = f.cnp_ts_ns.iter().map(|&t| (axis.x(t), 0.0)).collect();
    let mut marks = Vec::new();
    if !ce.is_empty() {
        marks.push(Marks {
            label: "bin with CE marks".into(),
            color: PALETTE[5],
            shape: MarkShape::Dot,
            points: ce,
        });
    }
    if !cnps.is_empty() {
        marks.push(Marks {
            label: format!("CNP ({})", f.cnps),
            color: PALETTE[3],
            shape: MarkShape::Tick,
            points: cnps,
        });
    }
    Chart::Line(LineChart {
        title: format!("Flow {}: {}", index + 1, flow_label(f)),
        x_label: axis.label(),
        y_label: "throughput (Gb/s)".into(),
        x_range: (x0, x1),
        y_max,
        lines: vec![
            Line {
                label: format!("observed ({} µs bins)", fmt_num(d.bin_ns as f64 / 1e3)),
                color: PALETTE[0],
                points: observed,
                dashed: false,
            },
            Line {
                label: "model Rc".into(),
                color: PALETTE[2],
                points: rc,
                dashed: false,
            },
            Line {
                label: "model Rt".into(),
                color: PALETTE[1],
                points: rt,
                dashed: true,
            },
        ],
        marks,
        y2: None,
    })
}

/// Sum of the observed rates of every flow in the DCQCN report, with the byte-weighted CE fraction.
pub fn aggregate_chart(d: &DcqcnReport, axis: &TimeAxis) -> Option<Chart> {
    if d.flows.is_empty() {
        return None;
    }
    // (sum of Gb/s, sum of Gb/s × CE fraction) per bin start; every flow shares one bin grid.
    let mut bins: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for f in &d.flows {
        for o in &f.observed {
            let e = bins.entry(o.t_ns).or_default();
            e.0 += o.gbps;
            e.1 += o.gbps * o.ce_fraction;
        }
    }
    let half = d.bin_ns / 2;
    let tput: Vec<(f64, f64)> = bins
        .iter()
        .map(|(&t, v)| (axis.x(t.saturating_add(half)), v.0))
        .collect();
    let ce: Vec<(f64, f64)> = bins
        .iter()
        .map(|(&t, v)| {
            (
                axis.x(t.saturating_add(half)),
                if v.0 > 0.0 { v.1 / v.0 } else { 0.0 },
            )
        })
        .collect();
    let y_max = tput.iter().map(|p| p.1).fold(d.line_gbps, f64::max) * 1.12;
    Some(Chart::Line(LineChart {
        title: format!(
            "Aggregate throughput of {} flows with CE marks or CNPs",
            d.flows.len()
        ),
        x_label: axis.label(),
        y_label: "throughput (Gb/s)".into(),
        x_range: axis.range(),
        y_max,
        lines: vec![Line {
            label: "throughput".into(),
            color: PALETTE[0],
            points: tput,
            dashed: false,
        }],
        marks: Vec::new(),
        y2: Some(SecondAxis {
            label: "CE-marked fraction".into(),
            max: 1.05,
            lines: vec![Line {
                label: "CE fraction (right axis)".into(),
                color: PALETTE[5],
                points: ce,
                dashed: false,
            }],
        }),
    }))
}

fn lane_label(mac: &str, prio: Option<u8>) -> String {
    match prio {
        Some(p) => format!("{mac} prio {p}"),
        None => format!("{mac} PAUSE (all)"),
    }
}

/// The pause timeline, and a note when lanes had to be left out.
pub fn pause_timeline(p: &PauseReport, axis: &TimeAxis) -> (Option<Chart>, Option<String>) {
    let mut lanes: BTreeMap<(String, Option<u8>), (u64, Lane)> = BTreeMap::new();
    for iv in &p.intervals {
        let e = lanes
            .entry((iv.src_mac.clone(), iv.priority))
            .or_insert_with(|| {
                (
                    0,
                    Lane {
                        label: lane_label(&iv.src_mac, iv.priority),
                        spans: Vec::new(),
                        alarms: Vec::new(),
                    },
                )
            });
        e.0 += iv.end_ns.saturating_sub(iv.start_ns);
        e.1.spans.push((axis.x(iv.start_ns), axis.x(iv.end_ns)));
    }
    for s in &p.storms {
        if let Some(e) = lanes.get_mut(&(s.src_mac.clone(), s.priority)) {
            e.1.alarms.push((axis.x(s.start_ns), axis.x(s.end_ns)));
        }
    }
    if lanes.is_empty() {
        return (None, None);
    }
    let total = lanes.len();
    let mut v: Vec<(u64, Lane)> = lanes.into_values().collect();
    // Most paused first; the BTreeMap order breaks ties, so the result is stable.
    v.sort_by_key(|x| std::cmp::Reverse(x.0));
    v.truncate(MAX_PAUSE_LANES);
    let note = (total > MAX_PAUSE_LANES).then(|| {
        format!(
            "Showing the {MAX_PAUSE_LANES} most paused of {total} (source, priority) pairs; pause_intervals.csv has them all."
        )
    });
    let chart = Chart::Timeline(Timeline {
        title: format!(
            "PFC pauses ({} intervals, {} storms over {})",
            p.intervals.len(),
            p.storms.len(),
            fmt_duration(p.storm_threshold_ns)
        ),
        x_label: axis.label(),
        x_range: axis.range(),
        lanes: v.into_iter().map(|x| x.1).collect(),
        span_label: "paused".into(),
        alarm_label: "storm".into(),
    });
    (Some(chart), note)
}

fn storms_table(p: &PauseReport, axis: &TimeAxis) -> String {
    let rows: Vec<Vec<String>> = p
        .storms
        .iter()
        .map(|s| {
            vec![
                s.src_mac.clone(),
                s.priority.map_or("all (PAUSE)".into(), |p| p.to_string()),
                format!("{:.3}", axis.x(s.start_ns)),
                format!("{:.3}", axis.x(s.end_ns)),
                fmt_duration(s.end_ns.saturating_sub(s.start_ns)),
            ]
        })
        .collect();
    let start = format!("start ({})", axis.unit);
    let end = format!("end ({})", axis.unit);
    html::table(
        &["source MAC", "priority", &start, &end, "length"],
        &rows,
        &[0],
        None,
    )
}

/// CNPs per millisecond over time, per charted flow and (when there are several flows) in total.
pub fn cnp_rate_chart(d: &DcqcnReport, shown: &[&FlowDcqcn], axis: &TimeAxis) -> Option<Chart> {
    if d.flows.iter().all(|f| f.cnp_ts_ns.is_empty()) {
        return None;
    }
    // About 150 bins over the capture, never narrower than the throughput bins.
    let width = (axis.span_ns / 150).max(d.bin_ns).max(1);
    let count = |times: &mut dyn Iterator<Item = u64>| -> Vec<(f64, f64)> {
        let mut bins: BTreeMap<u64, u64> = BTreeMap::new();
        for t in times {
            *bins
                .entry(t.saturating_sub(axis.origin_ns) / width)
                .or_default() += 1;
        }
        let last = axis.span_ns / width;
        let per_ms = 1e6 / width as f64;
        (0..=last)
            .map(|b| {
                let n = bins.get(&b).copied().unwrap_or(0);
                (
                    axis.x(axis
                        .origin_ns
                        .saturating_add(b.saturating_mul(width))
                        .saturating_add(width / 2)),
                    n as f64 * per_ms,
                )
            })
            .collect()
    };
    let mut lines: Vec<Line> = shown
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.cnp_ts_ns.is_empty())
        .map(|(i, f)| Line {
            label: format!("flow {}", i + 1),
            color: PALETTE[i % PALETTE.len()],
            points: count(&mut f.cnp_ts_ns.iter().copied()),
            dashed: false,
        })
        .collect();
    if d.flows.len() > 1 {
        lines.push(Line {
            label: format!("all {} flows", d.flows.len()),
            color: PALETTE[7],
            points: count(&mut d.flows.iter().flat_map(|f| f.cnp_ts_ns.iter().copied())),
            dashed: true,
        });
    }
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        * 1.15;
    Some(Chart::Line(LineChart {
        title: format!("CNP rate ({} bins)", fmt_duration(width)),
        x_label: axis.label(),
        y_label: "CNPs per ms".into(),
        x_range: axis.range(),
        y_max,
        lines,
        marks: Vec::new(),
        y2: None,
    }))
}

/// The modeled alpha of each charted flow, as a step function.
pub fn alpha_chart(shown: &[&FlowDcqcn], axis: &TimeAxis) -> Option<Chart> {
    let (x0, x1) = axis.range();
    let lines: Vec<Line> = shown
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let first = f.model.first()?;
            let pts = steps(
                first.alpha,
                f.model.iter().map(|m| (axis.x(m.t_ns), m.alpha)),
                axis.x(first.t_ns),
                x1,
            );
            Some(Line {
                label: format!("flow {}", i + 1),
                color: PALETTE[i % PALETTE.len()],
                points: pts,
                dashed: false,
            })
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    Some(Chart::Line(LineChart {
        title: "Modeled alpha (congestion estimate) per sender".into(),
        x_label: axis.label(),
        y_label: "alpha".into(),
        x_range: (x0, x1),
        y_max: 1.1,
        lines,
        marks: Vec::new(),
        y2: None,
    }))
}

fn dcqcn_of(d: &DcqcnReport, src: IpAddr, dst: IpAddr, qp: u32) -> Option<&FlowDcqcn> {
    d.flows
        .iter()
        .find(|f| f.sender == src && f.receiver == dst && f.receiver_qp == qp)
}

fn method_name(m: Option<Method>) -> &'static str {
    match m {
        Some(Method::CmMad) => "CM MAD",
        Some(Method::ReverseTraffic) => "reverse traffic",
        Some(Method::UdDeth) => "UD DETH",
        Some(Method::Timing) => "timing",
        None => "",
    }
}

/// Every data flow, the congested ones first; past [`MAX_TABLE_ROWS`] the rest are summed in one row. With
/// kernel events, a last column names the processes at the flow's ends.
fn qp_table(input: &ReportInput<'_>, labels: &[FlowProcess]) -> String {
    let d = input.dcqcn;
    let mut flows: Vec<_> = input
        .stats
        .flows
        .iter()
        .map(|r| (r, dcqcn_of(d, r.src, r.dst, r.dest_qp)))
        .collect();
    flows.sort_by(|a, b| {
        let cnps = |x: &Option<&FlowDcqcn>| x.map_or(0, |f| f.cnps);
        cnps(&b.1)
            .cmp(&cnps(&a.1))
            .then(b.0.ce_packets.cmp(&a.0.ce_packets))
            .then(b.0.bytes.cmp(&a.0.bytes))
            .then((a.0.src, a.0.dst, a.0.dest_qp).cmp(&(b.0.src, b.0.dst, b.0.dest_qp)))
    });
    let mut header = vec![
        "source",
        "destination",
        "dest QP",
        "prio",
        "packets",
        "bytes",
        "mean Gb/s",
        "CE packets",
        "CE %",
        "CNPs",
        "pairing",
        "model cuts",
        "retransmitted",
        "PSN gaps",
        "NAKs",
    ];
    if !labels.is_empty() {
        header.push("processes");
    }
    let rows: Vec<Vec<String>> = flows
        .iter()
        .take(MAX_TABLE_ROWS)
        .map(|(r, f)| {
            let mut row = vec![
                r.src.to_string(),
                r.dst.to_string(),
                format!("{:#x}", r.dest_qp),
                r.pcp.map_or("-".into(), |p| p.to_string()),
                r.packets.to_string(),
                r.bytes.to_string(),
                r.mean_gbps.map_or("-".into(), |g| format!("{g:.2}")),
                r.ce_packets.to_string(),
                format!(
                    "{:.2}",
                    100.0 * r.ce_packets as f64 / r.packets.max(1) as f64
                ),
                f.map_or("0".into(), |f| f.cnps.to_string()),
                method_name(f.and_then(|f| f.pairing)).into(),
                f.map_or("-".into(), |f| f.cuts.len().to_string()),
                r.retransmissions.to_string(),
                r.psn_gaps.to_string(),
                r.naks.total().to_string(),
            ];
            if !labels.is_empty() {
                row.push(
                    labels
                        .iter()
                        .find(|l| {
                            l.iface == r.iface
                                && l.src == r.src
                                && l.dst == r.dst
                                && l.dest_qp == r.dest_qp
                        })
                        .map_or(String::new(), flow_processes_text),
                );
            }
            row
        })
        .collect();
    let rest: Option<Vec<String>> = (flows.len() > MAX_TABLE_ROWS).then(|| {
        let others = &flows[MAX_TABLE_ROWS.min(flows.len())..];
        let sum = |g: &dyn Fn(&roce_core::passes::flows::FlowRow) -> u64| -> u64 {
            others.iter().map(|(r, _)| g(r)).sum()
        };
        let packets = sum(&|r| r.packets);
        let ce = sum(&|r| r.ce_packets);
        vec![
            format!("{} more flows", others.len()),
            String::new(),
            String::new(),
            String::new(),
            packets.to_string(),
            sum(&|r| r.bytes).to_string(),
            String::new(),
            ce.to_string(),
            format!("{:.2}", 100.0 * ce as f64 / packets.max(1) as f64),
            others
                .iter()
                .map(|(_, f)| f.map_or(0, |f| f.cnps))
                .sum::<u64>()
                .to_string(),
            String::new(),
            others
                .iter()
                .map(|(_, f)| f.map_or(0, |f| f.cuts.len()))
                .sum::<usize>()
                .to_string(),
            sum(&|r| r.retransmissions).to_string(),
            sum(&|r| r.psn_gaps).to_string(),
            sum(&|r| r.naks.total()).to_string(),
        ]
        .into_iter()
        .chain((!labels.is_empty()).then(String::new))
        .collect()
    });
    if rows.is_empty() {
        return "<p class=\"note\">No RoCE data flow in this capture.</p>".into();
    }
    html::table(&header, &rows, &[0, 1, 2], rest.as_deref())
}

/// One DCQCN flow without its long series: what `summary.json` and `dcqcn_flows.*` carry.
#[derive(Debug, Clone, Serialize)]
pub struct DcqcnFlowSummary {
    pub sender: IpAddr,
    pub receiver: IpAddr,
    pub sender_qp: Option<u32>,
    pub receiver_qp: u32,
    pub pairing: Option<Method>,
    pub cnps: u64,
    pub first_cnp_ns: Option<u64>,
    pub last_cnp_ns: Option<u64>,
    pub ce_packets: u64,
    pub cuts: usize,
    pub min_rc_gbps: Option<f64>,
    pub max_alpha: Option<f64>,
    pub observed_cuts: usize,
    /// Mean of the observed after/before ratios; null without observed cuts.
    pub mean_observed_cut_ratio: Option<f64>,
    pub fit: Option<Fit>,
}

impl DcqcnFlowSummary {
    fn of(f: &FlowDcqcn, stats: &StatsReport) -> Self {
        let n_obs = f.observed_cuts.len();
        DcqcnFlowSummary {
            sender: f.sender,
            receiver: f.receiver,
            sender_qp: f.sender_qp,
            receiver_qp: f.receiver_qp,
            pairing: f.pairing,
            cnps: f.cnps,
            first_cnp_ns: f.cnp_ts_ns.first().copied(),
            last_cnp_ns: f.cnp_ts_ns.last().copied(),
            ce_packets: ce_packets(stats, f),
            cuts: f.cuts.len(),
            min_rc_gbps: f.model.iter().map(|m| m.rc_gbps).reduce(f64::min),
            max_alpha: f.model.iter().map(|m| m.alpha).reduce(f64::max),
            observed_cuts: n_obs,
            mean_observed_cut_ratio: (n_obs > 0)
                .then(|| f.observed_cuts.iter().map(|c| c.ratio).sum::<f64>() / n_obs as f64),
            fit: f.fit,
        }
    }
}

#[derive(Debug, Serialize)]
struct DcqcnSummary<'a> {
    profile: &'static str,
    knob_source: &'a str,
    line_gbps: f64,
    bin_ns: u64,
    cnp_delay_ns: i64,
    flows: Vec<DcqcnFlowSummary>,
    unpaired_cnps: &'a [UnpairedCnps],
}

#[derive(Debug, Serialize)]
struct Summary<'a> {
    stats: &'a StatsReport,
    dcqcn: DcqcnSummary<'a>,
    pauses: &'a PauseReport,
    findings: &'a [Finding],
    /// File names (not paths: the directory may be moved).
    charts: Vec<String>,
    tables: Vec<String>,
    /// Captures made with `roce-tracer --kernel-events` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_events: Option<&'a KernelSummary>,
}

fn file_names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
}

fn summary<'a>(input: &ReportInput<'a>, charts: &[PathBuf], tables: &[PathBuf]) -> Summary<'a> {
    let d = input.dcqcn;
    Summary {
        stats: input.stats,
        dcqcn: DcqcnSummary {
            profile: d.profile,
            knob_source: &d.knob_source,
            line_gbps: d.line_gbps,
            bin_ns: d.bin_ns,
            cnp_delay_ns: d.cnp_delay_ns,
            flows: d
                .flows
                .iter()
                .map(|f| DcqcnFlowSummary::of(f, input.stats))
                .collect(),
            unpaired_cnps: &d.unpaired_cnps,
        },
        pauses: input.pauses,
        findings: input.findings,
        charts: file_names(charts),
        tables: file_names(tables),
        kernel_events: None,
    }
}

/// One row per modeled cut, with the flow it belongs to.
#[derive(Debug, Serialize)]
struct CutRow {
    sender: IpAddr,
    receiver: IpAddr,
    receiver_qp: u32,
    t_ns: u64,
    rc_before_gbps: f64,
    rc_after_gbps: f64,
    alpha: f64,
}

/// One row per observed rate change after a CNP burst.
#[derive(Debug, Serialize)]
struct ObservedCutRow {
    sender: IpAddr,
    receiver: IpAddr,
    receiver_qp: u32,
    t_ns: u64,
    cnps: u64,
    lag_ns: u64,
    before_gbps: f64,
    after_gbps: f64,
    ratio: f64,
}

/// One row per model event (not the alpha ticks), for plotting elsewhere.
#[derive(Debug, Serialize)]
struct ModelRow {
    sender: IpAddr,
    receiver: IpAddr,
    receiver_qp: u32,
    t_ns: u64,
    event: EventKind,
    rc_gbps: f64,
    rt_gbps: f64,
    alpha: f64,
}

/// Rows of the model table per chunk: enough to keep writing cheap, few enough that the table (a row per
/// model event of every flow: 7 M for 4,096 flows over 0.4 s) is never held whole.
const MODEL_CHUNK_ROWS: usize = 1 << 16;

/// The model table's rows, a chunk of whole flows at a time.
fn model_chunks(d: &DcqcnReport) -> impl Iterator<Item = Vec<ModelRow>> + '_ {
    let mut flows = d.flows.iter().peekable();
    std::iter::from_fn(move || {
        flows.peek()?;
        let mut chunk = Vec::new();
        while chunk.len() < MODEL_CHUNK_ROWS
            && let Some(f) = flows.next()
        {
            chunk.extend(f.model.iter().map(|m| ModelRow {
                sender: f.sender,
                receiver: f.receiver,
                receiver_qp: f.receiver_qp,
                t_ns: m.t_ns,
                event: m.event,
                rc_gbps: m.rc_gbps,
                rt_gbps: m.rt_gbps,
                alpha: m.alpha,
            }));
        }
        Some(chunk)
    })
}

fn write_tables(dir: &Path, input: &ReportInput<'_>) -> Result<Vec<PathBuf>, ReportError> {
    let d = input.dcqcn;
    let dcqcn_flows: Vec<DcqcnFlowSummary> = d
        .flows
        .iter()
        .map(|f| DcqcnFlowSummary::of(f, input.stats))
        .collect();
    let cuts: Vec<CutRow> = d
        .flows
        .iter()
        .flat_map(|f| {
            f.cuts.iter().map(|c| CutRow {
                sender: f.sender,
                receiver: f.receiver,
                receiver_qp: f.receiver_qp,
                t_ns: c.t_ns,
                rc_before_gbps: c.rc_before_gbps,
                rc_after_gbps: c.rc_after_gbps,
                alpha: c.alpha,
            })
        })
        .collect();
    let observed_cuts: Vec<ObservedCutRow> = d
        .flows
        .iter()
        .flat_map(|f| {
            f.observed_cuts.iter().map(|c| ObservedCutRow {
                sender: f.sender,
                receiver: f.receiver,
                receiver_qp: f.receiver_qp,
                t_ns: c.t_ns,
                cnps: c.cnps,
                lag_ns: c.lag_ns,
                before_gbps: c.before_gbps,
                after_gbps: c.after_gbps,
                ratio: c.ratio,
            })
        })
        .collect();
    let mut out = Vec::new();
    let mut both = |paths: Result<Vec<PathBuf>, TableError>| {
        out.extend(paths?);
        Ok::<(), ReportError>(())
    };
    let formats = [TableFormat::Csv, TableFormat::Parquet];
    both(tables::write_formats(
        dir,
        "flows",
        &input.stats.flows,
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "cnps",
        &input.stats.cnps,
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "pfc",
        &input.stats.pfc,
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "dcqcn_flows",
        &dcqcn_flows,
        &formats,
    ))?;
    both(tables::write_formats(dir, "cuts", &cuts, &formats))?;
    both(tables::write_formats(
        dir,
        "observed_cuts",
        &observed_cuts,
        &formats,
    ))?;
    both(tables::write_formats_chunked(
        dir,
        "model",
        model_chunks(d),
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "unpaired_cnps",
        &d.unpaired_cnps,
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "pause_intervals",
        &input.pauses.intervals,
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "storms",
        &input.pauses.storms,
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "findings",
        input.findings,
        &formats,
    ))?;
    // Only captures made with `roce-tracer --counters` / `--kernel-events` carry these.
    if !input.stats.counters.is_empty() {
        both(tables::write_formats(
            dir,
            "counters",
            &input.stats.counters,
            &formats,
        ))?;
    }
    if !input.stats.kernel_drops.is_empty() {
        both(tables::write_formats(
            dir,
            "kernel_drops",
            &input.stats.kernel_drops,
            &formats,
        ))?;
    }
    Ok(out)
}

/// Rows of the kernel events table on the page; `kernel_events.csv` has them all.
pub const MAX_KERNEL_EVENT_ROWS: usize = 200;

/// The sender's QP of a flow and how it is known: the DCQCN pairing (for a data flow, or, for the flow
/// coming back, the pairing of the data flow it answers), else the only flow the other way.
pub fn sender_qp_of(d: &DcqcnReport, flows: &[FlowRow], f: &FlowRow) -> Option<(u32, String)> {
    let paired = d.flows.iter().find_map(|x| {
        let method = x.pairing?.key();
        if x.sender == f.src && x.receiver == f.dst && x.receiver_qp == f.dest_qp {
            return Some((x.sender_qp?, method.to_string()));
        }
        (x.sender == f.dst && x.receiver == f.src && x.sender_qp == Some(f.dest_qp))
            .then(|| (x.receiver_qp, method.to_string()))
    });
    paired.or_else(|| reverse_flow_qp(flows, f).map(|q| (q, "reverse_flow".to_string())))
}

/// A flow's processes in words, and when its QPs were seen.
#[derive(Debug, Clone)]
struct ProcessLabel {
    text: String,
    marks: Vec<u64>,
}

fn flow_processes_text(l: &FlowProcess) -> String {
    let end = |o: &Option<roce_core::recorded::QpOwner>| {
        o.as_ref()
            .map_or("?".to_string(), |o| format!("{}[{}]", o.comm, o.pid))
    };
    format!("{} → {}", end(&l.sender), end(&l.receiver))
}

fn label_for(
    labels: &[FlowProcess],
    summary: Option<&KernelSummary>,
    sender: IpAddr,
    receiver: IpAddr,
    receiver_qp: u32,
) -> Option<ProcessLabel> {
    let l = labels
        .iter()
        .find(|l| l.src == sender && l.dst == receiver && l.dest_qp == receiver_qp)?;
    let marks = summary
        .map(|k| {
            k.qp_processes
                .iter()
                .filter(|q| {
                    [&l.sender, &l.receiver]
                        .into_iter()
                        .flatten()
                        .any(|o| o.qp_num == q.qp_num && o.pid == q.pid)
                })
                .map(|q| q.seen_ns)
                .collect()
        })
        .unwrap_or_default();
    Some(ProcessLabel {
        text: flow_processes_text(l),
        marks,
    })
}

fn kernel_note(k: &KernelSummary) -> String {
    let t = &k.tracepoints;
    let mut s = format!(
        "Recorded by roce-tracer --kernel-events on the traced host: {} interval blocks.",
        k.blocks
    );
    if !t.attached.is_empty() {
        s.push_str(&format!(" Attached: {}.", t.attached.join(", ")));
    }
    if !t.unavailable.is_empty() {
        s.push_str(&format!(
            " Not available there: {}.",
            t.unavailable.join(", ")
        ));
    }
    let per: Vec<String> = k
        .events_per_tracepoint
        .iter()
        .map(|(n, c)| format!("{n} {c}"))
        .collect();
    if !per.is_empty() {
        s.push_str(&format!(" Events: {}.", per.join(", ")));
    }
    if k.lost > 0 {
        s.push_str(&format!(" {} events were lost by the tracer.", k.lost));
    }
    s.push_str(&format!(
        " {} QPs tied to a process, {} flows labelled with theirs.",
        k.qp_processes.len(),
        k.flow_processes.len()
    ));
    s
}

/// Which row of marks an event goes on in the kernel chart.
fn event_group(e: &KernelEvent) -> usize {
    if QP_TRACEPOINTS.contains(&e.tracepoint.as_str()) || e.tracepoint == RDMA_RES_QP {
        0
    } else if e.tracepoint.starts_with("rdma_cma:") {
        1
    } else if e.tracepoint.starts_with("ib_mad:") {
        2
    } else {
        3
    }
}

/// The kernel's drops per second over the intervals the tracer reported, and the events as marks in rows
/// above them (QP events, connection events, MADs, others), on the report's time axis. `None` when there is
/// nothing to draw.
pub fn kernel_chart(k: &KernelEvents, axis: &TimeAxis) -> Option<Chart> {
    let (x0, x1) = axis.range();
    let inside = |x: f64| x >= x0 && x <= x1;
    let mut drops = Vec::new();
    let mut total = 0u64;
    for d in &k.drop_intervals {
        let (a, b) = (axis.x(d.from_ns), axis.x(d.to_ns));
        if b < x0 || a > x1 || d.to_ns <= d.from_ns {
            continue;
        }
        let rate = d.count as f64 * 1e9 / (d.to_ns - d.from_ns) as f64;
        total += d.count;
        drops.push((a.max(x0), rate));
        drops.push((b.min(x1), rate));
    }
    let mut groups: [Vec<f64>; 4] = Default::default();
    for e in &k.events {
        let x = axis.x(e.ts_ns);
        if inside(x) {
            groups[event_group(e)].push(x);
        }
    }
    if drops.is_empty() && groups.iter().all(Vec::is_empty) {
        return None;
    }
    let y_max = drops.iter().map(|p| p.1).fold(0.0f64, f64::max).max(1.0) * 1.15;
    let names = [
        "QP created or connected",
        "connection events",
        "MADs",
        "other events",
    ];
    let heights = [0.92, 0.80, 0.68, 0.56];
    let colors = [PALETTE[2], PALETTE[3], PALETTE[4], PALETTE[8]];
    let marks = groups
        .into_iter()
        .enumerate()
        .filter(|(_, xs)| !xs.is_empty())
        .map(|(i, xs)| Marks {
            label: format!("{} ({})", names[i], xs.len()),
            color: colors[i],
            shape: if i == 0 {
                MarkShape::Dot
            } else {
                MarkShape::Tick
            },
            points: xs.into_iter().map(|x| (x, y_max * heights[i])).collect(),
        })
        .collect();
    Some(Chart::Line(LineChart {
        title: format!(
            "Kernel events: {total} drops, {} events",
            k.events.iter().filter(|e| inside(axis.x(e.ts_ns))).count()
        ),
        x_label: axis.label(),
        y_label: "kernel drops per second".into(),
        x_range: (x0, x1),
        y_max,
        lines: if drops.is_empty() {
            Vec::new()
        } else {
            vec![Line {
                label: "drops/s (skb:kfree_skb, IP and MAC Control)".into(),
                color: PALETTE[5],
                points: drops,
                dashed: false,
            }]
        },
        marks,
        y2: None,
    }))
}

fn qp_processes_table(k: &KernelSummary, axis: &TimeAxis) -> String {
    if k.qp_processes.is_empty() {
        return "<p class=\"note\">No QP was tied to a process: the QP events (rdma_cma) were not recorded, \
                or no QP was created or connected while the capture ran.</p>"
            .into();
    }
    let rows: Vec<Vec<String>> = k
        .qp_processes
        .iter()
        .map(|q| {
            vec![
                format!("{:#x}", q.qp_num),
                q.process(),
                q.local.map_or("-".into(), |a| a.to_string()),
                q.remote.map_or("-".into(), |a| a.to_string()),
                q.qp_type.clone().unwrap_or_else(|| "-".into()),
                q.tracepoint.clone(),
                format!("{:.3}", axis.x(q.seen_ns)),
            ]
        })
        .collect();
    let at = format!("seen at ({})", axis.unit);
    html::table(
        &["QP", "process", "host", "peer", "type", "seen by", &at],
        &rows,
        &[0, 1, 2, 3, 4, 5],
        None,
    )
}

fn kernel_events_table(k: &KernelEvents, axis: &TimeAxis) -> String {
    if k.events.is_empty() {
        return "<p class=\"note\">No kernel event was recorded.</p>".into();
    }
    let rows: Vec<Vec<String>> = k
        .events
        .iter()
        .take(MAX_KERNEL_EVENT_ROWS)
        .map(|e| {
            vec![
                format!("{:.3}", axis.x(e.ts_ns)),
                e.tracepoint.clone(),
                e.process(),
                e.summary(),
            ]
        })
        .collect();
    let at = format!("time ({})", axis.unit);
    let mut s = html::table(
        &[&at, "tracepoint", "process", "event"],
        &rows,
        &[1, 2, 3],
        None,
    );
    if k.events.len() > MAX_KERNEL_EVENT_ROWS {
        s.push_str(&format!(
            "<p class=\"note\">The first {MAX_KERNEL_EVENT_ROWS} of {} events; kernel_events.csv has them all.</p>",
            k.events.len()
        ));
    }
    s
}

fn write_kernel_tables(
    dir: &Path,
    k: &KernelSummary,
    events: &KernelEvents,
) -> Result<Vec<PathBuf>, ReportError> {
    let rows = kernel_event_rows(&events.events);
    let flows = flow_process_rows(&k.flow_processes);
    let mut out = Vec::new();
    for fmt in [TableFormat::Csv, TableFormat::Parquet] {
        out.push(tables::write(dir, "kernel_events", &rows, fmt)?);
        out.push(tables::write(
            dir,
            "kernel_drop_intervals",
            &k.drop_intervals,
            fmt,
        )?);
        out.push(tables::write(dir, "qp_processes", &k.qp_processes, fmt)?);
        out.push(tables::write(dir, "flow_processes", &flows, fmt)?);
    }
    Ok(out)
}
