//! The report's tables as CSV and Parquet, for the scripts and notebooks that take over where the page stops.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::summary::DcqcnFlowRow;
use super::{ReportError, ReportInput};
use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn};
use crate::output::tables::{self, TableError, TableFormat, TableRow};
use roce_core::dcqcn::EventKind;
use roce_core::recorded::{KernelEvent, KernelSummary, flow_process_rows, kernel_event_rows};
use std::net::Ipv4Addr;

/// Every table of the report is written in both.
pub const FORMATS: [TableFormat; 2] = [TableFormat::Csv, TableFormat::Parquet];

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

const IP: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

impl TableRow for CutRow {
    fn example() -> Self {
        CutRow {
            sender: IP,
            receiver: IP,
            receiver_qp: 0,
            t_ns: 0,
            rc_before_gbps: 0.0,
            rc_after_gbps: 0.0,
            alpha: 0.0,
        }
    }
}

impl TableRow for ObservedCutRow {
    fn example() -> Self {
        ObservedCutRow {
            sender: IP,
            receiver: IP,
            receiver_qp: 0,
            t_ns: 0,
            cnps: 0,
            lag_ns: 0,
            before_gbps: 0.0,
            after_gbps: 0.0,
            ratio: 0.0,
        }
    }
}

impl TableRow for ModelRow {
    fn example() -> Self {
        ModelRow {
            sender: IP,
            receiver: IP,
            receiver_qp: 0,
            t_ns: 0,
            event: EventKind::Cnp,
            rc_gbps: 0.0,
            rt_gbps: 0.0,
            alpha: 0.0,
        }
    }
}

/// Rows of the per-event tables (model, cuts, observed cuts) per chunk: enough to keep writing cheap, few enough
/// that a table (the model's is a row per model event of every flow: 7 M for 4,096 flows over 0.4 s) is never
/// held whole, nor the much larger cells the table is built from.
const CHUNK_ROWS: usize = 1 << 16;

/// A per-event table's rows, a chunk of whole flows at a time: `rows` gives one flow's.
fn flow_chunks<'a, T, I>(
    d: &'a DcqcnReport,
    rows: impl Fn(&'a FlowDcqcn) -> I + 'a,
) -> impl Iterator<Item = Vec<T>> + 'a
where
    I: Iterator<Item = T>,
{
    let mut flows = d.flows.iter().peekable();
    std::iter::from_fn(move || {
        flows.peek()?;
        let mut chunk = Vec::new();
        while chunk.len() < CHUNK_ROWS
            && let Some(f) = flows.next()
        {
            chunk.extend(rows(f));
        }
        Some(chunk)
    })
}

fn model_rows(f: &FlowDcqcn) -> impl Iterator<Item = ModelRow> + '_ {
    f.model.iter().map(|m| ModelRow {
        sender: f.summary.sender,
        receiver: f.summary.receiver,
        receiver_qp: f.summary.receiver_qp,
        t_ns: m.t_ns,
        event: m.event,
        rc_gbps: m.rc_gbps,
        rt_gbps: m.rt_gbps,
        alpha: m.alpha,
    })
}

fn cut_rows(f: &FlowDcqcn) -> impl Iterator<Item = CutRow> + '_ {
    f.cuts.iter().map(|c| CutRow {
        sender: f.summary.sender,
        receiver: f.summary.receiver,
        receiver_qp: f.summary.receiver_qp,
        t_ns: c.t_ns,
        rc_before_gbps: c.rc_before_gbps,
        rc_after_gbps: c.rc_after_gbps,
        alpha: c.alpha,
    })
}

fn observed_cut_rows(f: &FlowDcqcn) -> impl Iterator<Item = ObservedCutRow> + '_ {
    f.observed_cuts.iter().map(|c| ObservedCutRow {
        sender: f.summary.sender,
        receiver: f.summary.receiver,
        receiver_qp: f.summary.receiver_qp,
        t_ns: c.t_ns,
        cnps: c.cnps,
        lag_ns: c.lag_ns,
        before_gbps: c.before_gbps,
        after_gbps: c.after_gbps,
        ratio: c.ratio,
    })
}

pub(super) fn write_tables(
    dir: &Path,
    input: &ReportInput<'_>,
) -> Result<Vec<PathBuf>, ReportError> {
    let d = input.dcqcn;
    let dcqcn_flows: Vec<DcqcnFlowRow> = d.flows.iter().map(DcqcnFlowRow::of).collect();
    let mut out = Vec::new();
    let mut both = |paths: Result<Vec<PathBuf>, TableError>| {
        out.extend(paths?);
        Ok::<(), ReportError>(())
    };
    let formats = FORMATS;
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
    both(tables::write_formats_chunked(
        dir,
        "cuts",
        flow_chunks(d, cut_rows),
        &formats,
    ))?;
    // Whole: a ratio can be null (NaN), and a chunk of nulls only would type its column otherwise. The table
    // has a row per burst of CNPs, far fewer than the cuts.
    let observed_cuts: Vec<ObservedCutRow> = d.flows.iter().flat_map(observed_cut_rows).collect();
    both(tables::write_formats(
        dir,
        "observed_cuts",
        &observed_cuts,
        &formats,
    ))?;
    both(tables::write_formats_chunked(
        dir,
        "model",
        flow_chunks(d, model_rows),
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
        "np_streams",
        &d.np_streams,
        &formats,
    ))?;
    both(tables::write_formats(
        dir,
        "np_ports",
        &d.np_ports,
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

/// The tables of a capture with kernel events (`roce-tracer --kernel-events`), in each of `formats`: the
/// report writes them beside its other tables, `stats --csv/--parquet` on their own.
pub fn write_kernel_tables(
    dir: &Path,
    k: &KernelSummary,
    events: &[KernelEvent],
    formats: &[TableFormat],
) -> Result<Vec<PathBuf>, TableError> {
    let rows = kernel_event_rows(events);
    let flows = flow_process_rows(&k.flow_processes);
    let mut out = tables::write_formats(dir, "kernel_events", &rows, formats)?;
    out.extend(tables::write_formats(
        dir,
        "kernel_drop_intervals",
        &k.drop_intervals,
        formats,
    )?);
    out.extend(tables::write_formats(
        dir,
        "qp_processes",
        &k.qp_processes,
        formats,
    )?);
    out.extend(tables::write_formats(
        dir,
        "flow_processes",
        &flows,
        formats,
    )?);
    Ok(out)
}
