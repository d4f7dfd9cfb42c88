//! The report's tables as CSV and Parquet, for the scripts and notebooks that take over where the page stops.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::summary::DcqcnFlowRow;
use super::{ReportError, ReportInput, manifest};
use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn};
use crate::output::tables::{self, TableError, TableFormat, TableRow, Typed};
use roce_core::dcqcn::EventKind;
use roce_core::processes::{KernelSummary, flow_process_rows};
use roce_core::recorded::{KernelEvent, kernel_event_rows};
use std::net::Ipv4Addr;

/// The report's tables are written in both, but for the two below.
pub const FORMATS: [TableFormat; 2] = [TableFormat::Csv, TableFormat::Parquet];

/// The tables with a row per model event (`model`: up to eight per column of every flow; `cuts`: one per CNP
/// the model acted on) are Parquet only: on the 15 s saturation benchmark their CSV copies were 36 MB of the
/// report's 92 MB and half the time its tables took, where their Parquet files are 1.7 MB.
pub const EVENT_FORMATS: [TableFormat; 1] = [TableFormat::Parquet];

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

    fn columns(rows: &[Self]) -> Option<Vec<(&'static str, Typed)>> {
        let mut columns = flow_columns(rows, |r| (r.sender, r.receiver, r.receiver_qp, r.t_ns));
        columns.extend([
            (
                "rc_before_gbps",
                Typed::floats(rows.iter().map(|r| r.rc_before_gbps)),
            ),
            (
                "rc_after_gbps",
                Typed::floats(rows.iter().map(|r| r.rc_after_gbps)),
            ),
            ("alpha", Typed::floats(rows.iter().map(|r| r.alpha))),
        ]);
        Some(columns)
    }
}

/// The columns every per-event table starts with, in its rows' field order: sender, receiver,
/// receiver_qp, t_ns.
fn flow_columns<T>(
    rows: &[T],
    head: impl Fn(&T) -> (IpAddr, IpAddr, u32, u64),
) -> Vec<(&'static str, Typed)> {
    let heads: Vec<_> = rows.iter().map(head).collect();
    vec![
        (
            "sender",
            Typed::Text(heads.iter().map(|h| Some(h.0.to_string())).collect()),
        ),
        (
            "receiver",
            Typed::Text(heads.iter().map(|h| Some(h.1.to_string())).collect()),
        ),
        (
            "receiver_qp",
            Typed::U64(heads.iter().map(|h| Some(u64::from(h.2))).collect()),
        ),
        (
            "t_ns",
            Typed::U64(heads.iter().map(|h| Some(h.3)).collect()),
        ),
    ]
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

    fn columns(rows: &[Self]) -> Option<Vec<(&'static str, Typed)>> {
        // An event's name as serde spells it, worked out once per kind.
        let mut names: Vec<(EventKind, Option<String>)> = Vec::new();
        let mut name = |k: EventKind| -> Option<String> {
            if let Some((_, n)) = names.iter().find(|(e, _)| *e == k) {
                return n.clone();
            }
            let n = serde_json::to_value(k)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned));
            names.push((k, n.clone()));
            n
        };
        let events = Typed::Text(rows.iter().map(|r| name(r.event)).collect());
        let mut columns = flow_columns(rows, |r| (r.sender, r.receiver, r.receiver_qp, r.t_ns));
        columns.extend([
            ("event", events),
            ("rc_gbps", Typed::floats(rows.iter().map(|r| r.rc_gbps))),
            ("rt_gbps", Typed::floats(rows.iter().map(|r| r.rt_gbps))),
            ("alpha", Typed::floats(rows.iter().map(|r| r.alpha))),
        ]);
        Some(columns)
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

/// Lists a table's files in the report's manifest, before they are written.
pub fn list(dir: &Path, name: &str, formats: &[TableFormat]) -> Result<(), ReportError> {
    formats
        .iter()
        .try_for_each(|f| manifest::add(dir, &f.file_name(name)))
}

/// One table held whole, listed in the manifest and written in `formats`.
fn whole<T: TableRow>(
    dir: &Path,
    name: &str,
    rows: &[T],
    formats: &[TableFormat],
) -> Result<Vec<PathBuf>, ReportError> {
    list(dir, name, formats)?;
    Ok(tables::write_formats(dir, name, rows, formats)?)
}

/// One table of a row per model event, a chunk of flows at a time, listed in the manifest and written in
/// `formats` ([`EVENT_FORMATS`] in the report).
fn per_event<T: TableRow>(
    dir: &Path,
    name: &str,
    chunks: impl Iterator<Item = Vec<T>>,
    formats: &[TableFormat],
) -> Result<Vec<PathBuf>, ReportError> {
    list(dir, name, formats)?;
    Ok(tables::write_formats_chunked(dir, name, chunks, formats)?)
}

/// One table's writing, a task of its own, given the table's name and formats: each writes its own files, in
/// any order.
type TableTask<'a> =
    Box<dyn Fn(&str, &[TableFormat]) -> Result<Vec<PathBuf>, ReportError> + Send + Sync + 'a>;

/// A table's name, its formats and the task that writes it.
type Table<'a> = (&'static str, &'static [TableFormat], TableTask<'a>);

/// The table `name` of `rows`, written whole in [`FORMATS`]: what most of the report's tables are.
fn rows<'a, T: TableRow + Sync>(dir: &'a Path, name: &'static str, rows: &'a [T]) -> Table<'a> {
    (
        name,
        &FORMATS,
        Box::new(move |n, fm| whole(dir, n, rows, fm)),
    )
}

/// The tables that take longest (a row per flow or per model event), started first in this order so that
/// the report does not wait at its end for one of them begun late: on the bench capture the model table
/// takes 95 ms and the flows table 60 ms, against a few ms for most others, and when the flows, cuts and
/// model tables ran in the order the files list them, writing the tables took as long on two threads as on
/// one. The rest follow in their listed order.
const LONGEST_FIRST: [&str; 5] = ["model", "flows", "dcqcn_flows", "cuts", "np_streams"];

/// Every table of the report, each with the formats it is written in and the task that writes it, and the
/// kernel events' tables when the capture has them: [`Tables::files`] says what they will write before
/// [`Tables::write`] does.
pub(super) struct Tables<'a> {
    dir: &'a Path,
    tasks: Vec<Table<'a>>,
    kernel: Option<(&'a KernelSummary, &'a [KernelEvent])>,
}

/// The report's tables in `dir`, in the order their files are listed, the kernel events' last.
pub(super) fn tables<'a>(
    dir: &'a Path,
    input: &'a ReportInput<'_>,
    kernel: Option<(&'a KernelSummary, &'a [KernelEvent])>,
) -> Tables<'a> {
    let d = input.dcqcn;
    let (w, e): (&'static [TableFormat], &'static [TableFormat]) = (&FORMATS, &EVENT_FORMATS);
    let mut tasks: Vec<Table<'_>> = vec![
        rows(dir, "flows", &input.stats.flows),
        rows(dir, "cnps", &input.stats.cnps),
        rows(dir, "pfc", &input.stats.pfc),
        (
            "dcqcn_flows",
            w,
            Box::new(|n, fm| {
                let rows: Vec<DcqcnFlowRow> = d.flows.iter().map(DcqcnFlowRow::of).collect();
                whole(dir, n, &rows, fm)
            }),
        ),
        (
            "cuts",
            e,
            Box::new(|n, fm| per_event(dir, n, flow_chunks(d, cut_rows), fm)),
        ),
        // Whole: a ratio can be null (NaN), and a chunk of nulls only would type its column otherwise. The
        // table has a row per burst of CNPs, far fewer than the cuts.
        (
            "observed_cuts",
            w,
            Box::new(|n, fm| {
                let rows: Vec<ObservedCutRow> =
                    d.flows.iter().flat_map(observed_cut_rows).collect();
                whole(dir, n, &rows, fm)
            }),
        ),
        (
            "model",
            e,
            Box::new(|n, fm| per_event(dir, n, flow_chunks(d, model_rows), fm)),
        ),
        rows(dir, "unpaired_cnps", &d.unpaired_cnps),
        rows(dir, "np_streams", &d.np_streams),
        rows(dir, "np_ports", &d.np_ports),
        rows(dir, "pause_intervals", &input.pauses.intervals),
        rows(dir, "storms", &input.pauses.storms),
        rows(dir, "findings", input.findings),
        rows(dir, "fabric_pairs", &input.fabric.pairs),
        rows(dir, "fabric_hosts", &input.fabric.hosts),
    ];
    // Only captures made with `roce-tracer --counters` / `--kernel-events` carry these.
    if !input.stats.counters.is_empty() {
        tasks.push(rows(dir, "counters", &input.stats.counters));
        tasks.push((
            "nic_counters",
            w,
            Box::new(|n, fm| {
                let nic = roce_core::nic_counters::check::table_rows(&input.stats.nic_counters);
                whole(dir, n, &nic, fm)
            }),
        ));
    }
    if !input.stats.kernel_drops.is_empty() {
        tasks.push(rows(dir, "kernel_drops", &input.stats.kernel_drops));
    }
    Tables { dir, tasks, kernel }
}

impl Tables<'_> {
    /// The files [`Tables::write`] writes, in its order.
    pub(super) fn files(&self) -> Vec<PathBuf> {
        let kernel = self
            .kernel
            .iter()
            .flat_map(|_| KERNEL_TABLES.map(|name| (name, &FORMATS[..])));
        self.tasks
            .iter()
            .map(|&(name, formats, _)| (name, formats))
            .chain(kernel)
            .flat_map(|(name, formats)| {
                formats
                    .iter()
                    .map(move |f| self.dir.join(f.file_name(name)))
            })
            .collect()
    }

    /// Writes every table, each a task on the caller's rayon pool (the kernel events' after them, on this
    /// thread); the files in the order the tables are listed, the first error in that order too.
    pub(super) fn write(&self) -> Result<Vec<PathBuf>, ReportError> {
        let mut out = run_longest_first(&self.tasks)?;
        if let Some((summary, events)) = self.kernel {
            for name in KERNEL_TABLES {
                list(self.dir, name, &FORMATS)?;
            }
            out.extend(write_kernel_tables(self.dir, summary, events, &FORMATS)?);
        }
        Ok(out)
    }
}

/// Runs every task, each taken up by the first thread free in [`LONGEST_FIRST`] order (a FIFO scope: the
/// thread that starts the tasks and those that steal from it all take the oldest waiting), and returns
/// their files in the tasks' own order.
fn run_longest_first(tasks: &[Table<'_>]) -> Result<Vec<PathBuf>, ReportError> {
    let rank = |name: &str| {
        LONGEST_FIRST
            .iter()
            .position(|&n| n == name)
            .unwrap_or(LONGEST_FIRST.len())
    };
    let mut written: Vec<Option<Result<Vec<PathBuf>, ReportError>>> =
        tasks.iter().map(|_| None).collect();
    let mut order: Vec<_> = tasks.iter().zip(written.iter_mut()).collect();
    // Stable: tables of one rank keep their listed order.
    order.sort_by_key(|((name, _, _), _)| rank(name));
    rayon::scope_fifo(|scope| {
        for ((name, formats, task), slot) in order {
            scope.spawn_fifo(move |_| *slot = Some(task(name, formats)));
        }
    });
    let mut out = Vec::new();
    for files in written {
        // The scope ends only once every task has set its slot (or raises a task's panic).
        out.extend(files.expect("every table's task ran before the scope ended")?);
    }
    Ok(out)
}

/// The tables [`write_kernel_tables`] writes, in its order.
pub const KERNEL_TABLES: [&str; 4] = [
    "kernel_events",
    "kernel_drop_intervals",
    "qp_processes",
    "flow_processes",
];

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
    let [events_table, drops_table, qps_table, flows_table] = KERNEL_TABLES;
    let mut out = tables::write_formats(dir, events_table, &rows, formats)?;
    out.extend(tables::write_formats(
        dir,
        drops_table,
        &k.drop_intervals,
        formats,
    )?);
    out.extend(tables::write_formats(
        dir,
        qps_table,
        &k.qp_processes,
        formats,
    )?);
    out.extend(tables::write_formats(dir, flows_table, &flows, formats)?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed columns of the model and cuts tables give the files the serde path gives (whole tables go
    /// through serde), nulls for non-finite floats and IPv6 included.
    #[test]
    fn typed_columns_write_the_bytes_of_the_serde_path() {
        let v6: IpAddr = "fe80::1".parse().unwrap();
        let v4: IpAddr = "10.0.0.2".parse().unwrap();
        let model: Vec<ModelRow> = [
            EventKind::FirstCnp,
            EventKind::Cut,
            EventKind::HyperIncrease,
        ]
        .into_iter()
        .enumerate()
        .map(|(i, event)| ModelRow {
            sender: if i == 1 { v6 } else { v4 },
            receiver: v4,
            receiver_qp: 0x00ab_cdef + i as u32,
            t_ns: 1_700_000_000_000_000_000 + i as u64,
            event,
            rc_gbps: [100.0, f64::NAN, 0.1 + 0.2][i],
            rt_gbps: [f64::INFINITY, 50.0, 1e-300][i],
            alpha: 1.0 / (i as f64 + 3.0),
        })
        .collect();
        let cuts: Vec<CutRow> = model
            .iter()
            .map(|m| CutRow {
                sender: m.sender,
                receiver: m.receiver,
                receiver_qp: m.receiver_qp,
                t_ns: m.t_ns,
                rc_before_gbps: m.rt_gbps,
                rc_after_gbps: m.rc_gbps,
                alpha: m.alpha,
            })
            .collect();
        let typed = tempfile::tempdir().unwrap();
        let serde = tempfile::tempdir().unwrap();
        let mut written = tables::write_formats_chunked(
            typed.path(),
            "model",
            [model.iter().map(copy_model).collect()],
            &FORMATS,
        )
        .unwrap();
        written.extend(
            tables::write_formats_chunked(
                typed.path(),
                "cuts",
                [cuts.iter().map(copy_cut).collect()],
                &FORMATS,
            )
            .unwrap(),
        );
        tables::write_formats(serde.path(), "model", &model, &FORMATS).unwrap();
        tables::write_formats(serde.path(), "cuts", &cuts, &FORMATS).unwrap();
        assert_eq!(written.len(), 4);
        for path in written {
            let name = path.file_name().unwrap();
            assert_eq!(
                std::fs::read(&path).unwrap(),
                std::fs::read(serde.path().join(name)).unwrap(),
                "{name:?}"
            );
        }
    }

    fn copy_model(m: &ModelRow) -> ModelRow {
        ModelRow { ..*m }
    }

    fn copy_cut(c: &CutRow) -> CutRow {
        CutRow { ..*c }
    }
}
