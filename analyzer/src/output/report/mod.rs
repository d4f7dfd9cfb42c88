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
//!
//! This module only orders the work. Each section of the page is a module that owns its charts, its HTML
//! tables and its notes ([`findings`], [`fabric`], [`flows`], [`pfc`], [`nic`], [`kernel`], [`cnp`], [`alpha`], [`queues`], [`qp_table`]) and
//! writes them through [`Report`]; [`summary`] writes `summary.json` and [`export`] the CSV and Parquet
//! tables, [`trace`] the timeline for Perfetto. A new section is a module with a `write(&mut Report)` and one line in [`write_report_with`].
//!
//! Every file is listed in the directory's [`manifest`] before it is written, so that the next report into
//! the same directory removes exactly what this one wrote.

pub mod alpha;
pub mod axis;
pub mod charts;
pub mod cnp;
pub mod export;
pub mod fabric;
pub mod findings;
pub mod flows;
pub mod header;
pub mod headline;
pub mod html;
pub mod kernel;
pub mod manifest;
pub mod nic;
pub mod pfc;
pub mod progress;
pub mod qp_table;
pub mod queues;
pub mod summary;
pub mod trace;

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn};
use crate::analysis::fabric::FabricReport;
use crate::analysis::findings::Finding;
use crate::analysis::hops::HopsReport;
use crate::analysis::pauses::PauseReport;
use crate::output::tables::TableError;
use charts::Chart;
use roce_core::passes::StatsReport;
use roce_core::processes::{FlowProcess, KernelSummary};
use roce_core::recorded::KernelEvents;

pub use alpha::alpha_chart;
pub use axis::TimeAxis;
pub use cnp::cnp_rate_chart;
pub use flows::{MAX_FLOW_CHARTS, aggregate_chart, flow_chart};
pub use headline::{Headline, headline};
pub use kernel::{MAX_KERNEL_EVENT_ROWS, kernel_chart, sender_qp_of};
pub use pfc::{MAX_PAUSE_LANES, pause_timeline};
pub use progress::Progress;
pub use qp_table::MAX_TABLE_ROWS;

/// What the report is made from: the results of the passes, computed by the caller.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    /// Counts, the flow table, and per-file summaries: the header, tables and Files section.
    pub stats: &'a StatsReport,
    /// The DCQCN model and observation per flow: the charts of rates, cuts and alpha.
    pub dcqcn: &'a DcqcnReport,
    /// What PFC did: the pause timeline and its table.
    pub pauses: &'a PauseReport,
    /// The diagnoses, which open the page.
    pub findings: &'a [Finding],
    /// Hops, queues and marking, when the capture has taps that saw the same packets.
    pub hops: Option<&'a HopsReport>,
    /// The hosts side by side: the fabric section's heatmaps and slow pairs.
    pub fabric: &'a FabricReport,
}

/// The files written, for the CLI to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// The page (`index.html`), the one to open.
    pub index: PathBuf,
    /// `summary.json`, the numbers for scripts and regression checks.
    pub summary: PathBuf,
    /// `trace.json`, the timeline for Perfetto.
    pub trace: PathBuf,
    /// The PNG charts, for slides and tickets.
    pub charts: Vec<PathBuf>,
    /// The tables (CSV or Parquet), for a closer look in other tools.
    pub tables: Vec<PathBuf>,
}

/// Why the report could not be written, with what was being written: the CLI adds the advice.
#[derive(Debug, Error)]
pub enum ReportError {
    /// A file or directory of the report could not be made or written.
    #[error("{path}")]
    Io {
        /// The file or directory concerned, so the user knows where to look.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// No font could be loaded for the charts' text, which plotters needs to draw any chart.
    #[error("{0}")]
    Font(String),
    /// plotters failed to draw a chart.
    #[error("chart {chart:?}: {message}")]
    Chart {
        /// The chart's title, to tell which one.
        chart: String,
        /// What plotters said.
        message: String,
    },
    /// A table could not be built or written.
    #[error(transparent)]
    Table(#[from] TableError),
    /// `summary.json` could not be serialized.
    #[error("summary.json")]
    Json(#[from] serde_json::Error),
}

/// The report being written: what every section reads (the input, the time axis, the flows chosen for
/// charts, the kernel events) and what it writes into (the page, the chart files).
#[derive(Debug)]
pub(crate) struct Report<'a> {
    dir: &'a Path,
    pub input: &'a ReportInput<'a>,
    pub axis: TimeAxis,
    /// The flows drawn one chart each, worst first (see [`flows::worst_flows`]).
    pub shown: Vec<&'a FlowDcqcn>,
    pub kernel: &'a KernelEvents,
    /// Present when the capture carries kernel events.
    pub kernel_summary: Option<&'a KernelSummary>,
    pub page: html::Page,
    /// The PNG files written so far.
    pub charts: Vec<PathBuf>,
}

impl Report<'_> {
    /// Draws `chart` into the page (inline SVG, with `caption`) and beside it as `NAME.png`.
    pub fn chart(&mut self, name: &str, chart: &Chart, caption: &str) -> Result<(), ReportError> {
        let png_name = format!("{name}.png");
        let png_path = self.dir.join(&png_name);
        manifest::add(self.dir, &png_name)?;
        // The two drawings of one chart need nothing of each other: on two threads when there are two.
        let (svg, png) = rayon::join(
            || charts::to_svg(chart),
            || charts::to_png(chart, &png_path),
        );
        let svg = svg?;
        png?;
        self.page.figure(&svg, caption, &png_name);
        self.charts.push(png_path);
        Ok(())
    }

    /// The flows labelled with their processes (empty without kernel events).
    pub fn labels(&self) -> &[FlowProcess] {
        self.kernel_summary
            .map_or(&[], |k| k.flow_processes.as_slice())
    }
}

/// Writes the report into `dir` (created if needed), replacing files of the same names and removing the
/// other files an earlier report wrote there (see [`manifest`]).
pub fn write_report(dir: &Path, input: &ReportInput<'_>) -> Result<ReportFiles, ReportError> {
    write_report_with(dir, input, &KernelEvents::default())
}

/// [`write_report`] for a capture that carries kernel events (`roce-tracer --kernel-events`, as
/// [`roce_core::recorded::Recorded`] read them): they get their own section and chart on the report's time axis, the
/// flows are labelled with their processes, and `summary.json` carries them under `kernel_events`.
pub fn write_report_with(
    dir: &Path,
    input: &ReportInput<'_>,
    kernel: &KernelEvents,
) -> Result<ReportFiles, ReportError> {
    // Fail before writing anything when text cannot be drawn, rather than leave half a report.
    charts::ensure_font()?;
    manifest::start(dir)?;
    for name in [INDEX, SUMMARY, trace::TRACE] {
        manifest::add(dir, name)?;
    }
    let kernel_summary = (!kernel.is_empty()).then(|| {
        KernelSummary::of(kernel, &input.stats.flows, &|f| {
            sender_qp_of(input.dcqcn, &input.stats.flows, f)
        })
    });
    // The tables and the trace need nothing the sections make: they are written as tasks of their own (each
    // table one) while the sections draw their charts, on as many threads as the caller's rayon pool has
    // (the flows, model and cuts tables alone took a third of the report's time on the bench capture). They
    // start before the page is laid out: choosing the flows it shows took 30 ms of one thread there. The
    // tables' files are known before they are written, so `summary.json`, which lists them, is written as
    // soon as the charts are drawn, beside the last tables rather than after them (30 to 40 ms of one
    // thread). Errors come out in the order a single thread would meet them. Each result is set by its task
    // before the scope ends (a task that panics raises its panic there).
    let work = export::tables(
        dir,
        input,
        kernel_summary.as_ref().map(|k| (k, &kernel.events[..])),
    );
    let planned = work.files();
    let mut tables = Ok(Vec::new());
    let mut trace = Ok(PathBuf::new());
    let (done, mut r) = rayon::scope(|scope| {
        scope.spawn(|_| tables = work.write());
        scope.spawn(|_| trace = trace::write_trace(dir, input, kernel));
        let mut r = Report {
            dir,
            input,
            axis: TimeAxis::of(input),
            shown: flows::worst_flows(input),
            kernel,
            kernel_summary: kernel_summary.as_ref(),
            page: html::Page::default(),
            charts: Vec::new(),
        };
        // The outer result is the sections', the inner one `summary.json`'s, written only after them.
        let done = write_sections(&mut r).map(|()| summary::write_json(&r, &planned));
        (done, r)
    });
    let summary = done?;
    let tables = tables?;
    debug_assert_eq!(
        tables, planned,
        "the tables wrote the files they said they would"
    );
    let trace = trace?;
    let summary_path = summary?;
    summary::write_files_section(&mut r, &tables);
    let index = dir.join(INDEX);
    let title = format!("rocetrace report: {}", input.stats.capture.file);
    write_file(&index, r.page.finish(&title).as_bytes())?;
    manifest::finish(dir)?;
    Ok(ReportFiles {
        index,
        summary: summary_path,
        trace,
        charts: r.charts,
        tables,
    })
}

/// The page's file name.
const INDEX: &str = "index.html";
/// The numbers' file name.
pub(crate) const SUMMARY: &str = "summary.json";

/// Every section of the page, in its order.
fn write_sections(r: &mut Report<'_>) -> Result<(), ReportError> {
    header::write(r);
    findings::write(r);
    fabric::write(r)?;
    flows::write(r)?;
    pfc::write(r)?;
    nic::write(r);
    kernel::write(r)?;
    cnp::write(r)?;
    alpha::write(r)?;
    queues::write(r)?;
    qp_table::write(r);
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    std::fs::write(path, bytes).map_err(|source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    })
}
