//! `trace.json`: the report's timeline in the Chrome trace-event format, which Perfetto (ui.perfetto.dev) and
//! chrome://tracing open, for zooming into microseconds where the charts stop.
//!
//! Timestamps are wall-clock microseconds, as the capture stamped its frames (since the Unix epoch for a
//! live capture), so the file lines up with a PyTorch or NCCL profiler trace of the same run on the same
//! clock; both are JSON objects with a `traceEvents` list and can be merged by concatenating the lists.
//!
//! What goes in: per DCQCN flow, counter tracks of the observed rate, the model's Rc and Rt and alpha, every
//! CNP as an instant (category `cnp`) and every model cut as an instant (category `cut`); PFC pauses as
//! complete events, one track per tap, source and priority; the tracer's kernel events as instants; the
//! findings as global instants at the start; the throughput of all flows as a counter track.
//!
//! A long capture must not make a file no viewer can load, so the file is bounded ([`TraceLimits`]): counter
//! tracks are decimated as the charts are (the first, lowest, highest and last point of each slice of time),
//! counter tracks are drawn for the flows with most CNPs only, and each kind of event has a budget; what did
//! not fit is counted under `otherData.left_out`.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;

use super::charts::decimate;
use super::{ReportError, ReportInput};
use crate::analysis::dcqcn::FlowDcqcn;
use roce_core::recorded::KernelEvents;

/// Process ids of the trace's groups, far above real ones and above the small ids profilers give devices,
/// so a merged trace keeps them apart.
/// The timeline's file name in the report's directory.
pub const TRACE: &str = "trace.json";

const PID_BASE: u64 = 900_000_000;
const PID_CAPTURE: u64 = PID_BASE;
const PID_PFC: u64 = PID_BASE + 1;
const PID_KERNEL: u64 = PID_BASE + 2;
/// Flow `i` (in the DCQCN report's order, most CNPs first) is process `PID_FLOWS + i`.
const PID_FLOWS: u64 = PID_BASE + 100;

/// How big the trace may get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceLimits {
    /// Flows that get counter tracks (the DCQCN flows with most CNPs); the others still get their CNPs and
    /// cuts.
    pub counter_flows: usize,
    /// Points per counter track after decimation.
    pub points_per_track: usize,
    /// CNP instants in all.
    pub cnps: usize,
    /// Model-cut instants in all.
    pub cuts: usize,
    /// PFC pause slices in all.
    pub pauses: usize,
    /// Kernel-event instants in all.
    pub kernel_events: usize,
}

impl Default for TraceLimits {
    /// About 60 MB of JSON at most: Perfetto's UI loads that in seconds, chrome://tracing still copes.
    fn default() -> Self {
        TraceLimits {
            counter_flows: 16,
            points_per_track: 2_400,
            cnps: 200_000,
            cuts: 50_000,
            pauses: 50_000,
            kernel_events: 20_000,
        }
    }
}

impl TraceLimits {
    /// The most events a trace written with these limits holds: what a test checks a long capture against.
    pub fn max_events(&self) -> usize {
        // Per counter flow: observed, Rc, Rt, alpha; plus the all-flows throughput; plus names and findings.
        (self.counter_flows * 4 + 1) * self.points_per_track
            + self.cnps
            + self.cuts
            + self.pauses
            + self.kernel_events
            + METADATA_ALLOWANCE
    }
}

/// Process and thread names, findings and unpaired CNP streams: a few per flow, lane and finding.
const METADATA_ALLOWANCE: usize = 100_000;

/// Counts events as they are written, and what each budget left out.
struct Writer<W: Write> {
    out: W,
    events: usize,
    left_out: std::collections::BTreeMap<&'static str, u64>,
}

/// An instant on a flow's lane (a CNP, a model cut): the bulk of a large capture's trace, written straight
/// from its fields rather than through a JSON map built and dropped for each (a third of the trace's time on
/// the saturation benchmark). Its fields are in the order of the trace's other events.
#[derive(Serialize)]
struct Instant<A: Serialize> {
    ph: &'static str,
    s: &'static str,
    cat: &'static str,
    name: &'static str,
    pid: u64,
    tid: u64,
    ts: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<A>,
}

/// A model cut's numbers in its instant.
#[derive(Serialize)]
struct CutArgs {
    rc_before_gbps: f64,
    rc_after_gbps: f64,
    alpha: f64,
}

/// A counter's point: its one value under the unit's name.
#[derive(Serialize)]
struct Point<'a> {
    ph: &'static str,
    name: &'a str,
    pid: u64,
    ts: f64,
    args: OneValue<'a>,
}

/// `{unit: value}`, a map of one entry whose key is not known until the track is.
struct OneValue<'a>(&'a str, f64);

impl Serialize for OneValue<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry(self.0, &self.1)?;
        m.end()
    }
}

impl<W: Write> Writer<W> {
    fn event(&mut self, e: &impl Serialize) -> std::io::Result<()> {
        if self.events > 0 {
            self.out.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut self.out, e)?;
        self.events += 1;
        Ok(())
    }

    /// Writes the event `e` makes if `budget` allows, else counts it as left out (and never makes it).
    fn bounded<T: Serialize>(
        &mut self,
        budget: &mut usize,
        kind: &'static str,
        e: impl FnOnce() -> T,
    ) -> std::io::Result<()> {
        if *budget == 0 {
            *self.left_out.entry(kind).or_default() += 1;
            return Ok(());
        }
        *budget -= 1;
        self.event(&e())
    }

    fn name(&mut self, pid: u64, tid: Option<u64>, name: &str) -> std::io::Result<()> {
        match tid {
            None => self.event(&json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})),
            Some(tid) => self.event(
                &json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}),
            ),
        }
    }

    /// A counter track's points, decimated to `max` (time in ns, value).
    fn counter(
        &mut self,
        pid: u64,
        name: &str,
        unit: &str,
        points: &[(f64, f64)],
        max: usize,
    ) -> std::io::Result<()> {
        let (Some(first), Some(last)) = (points.first(), points.last()) else {
            return Ok(());
        };
        for (t, v) in decimate(points, (first.0, last.0), max) {
            self.event(&Point {
                ph: "C",
                name,
                pid,
                ts: t / 1e3,
                args: OneValue(unit, v),
            })?;
        }
        Ok(())
    }
}

/// Wall-clock µs of a capture timestamp (ns).
fn us(t_ns: u64) -> f64 {
    t_ns as f64 / 1e3
}

/// A rate series of busy bins as a step line: each bin's rate from its start, and zero after a bin the next
/// busy bin does not follow at once (the flow was idle).
fn bins_as_steps(bins: impl Iterator<Item = (u64, f64)>, bin_ns: u64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut end: Option<u64> = None;
    for (t, v) in bins {
        if let Some(e) = end
            && t > e
        {
            out.push((e as f64, 0.0));
        }
        out.push((t as f64, v));
        end = Some(t.saturating_add(bin_ns));
    }
    if let Some(e) = end {
        out.push((e as f64, 0.0));
    }
    out
}

/// A model value as a step line over its events.
fn model_steps(
    f: &FlowDcqcn,
    value: impl Fn(&crate::analysis::dcqcn::ModelPoint) -> f64,
) -> Vec<(f64, f64)> {
    f.model.iter().map(|m| (m.t_ns as f64, value(m))).collect()
}

fn flow_name(i: usize, f: &FlowDcqcn) -> String {
    format!(
        "flow {}: {} → {} QP {:#x}",
        i + 1,
        f.summary.sender,
        f.summary.receiver,
        f.summary.receiver_qp
    )
}

/// What the file holds besides the events.
#[derive(Debug, Serialize)]
struct OtherData<'a> {
    generator: &'static str,
    capture: &'a str,
    /// Events each budget of [`TraceLimits`] left out, by kind; empty when everything fit.
    left_out: &'a std::collections::BTreeMap<&'static str, u64>,
    /// Flows whose counter tracks were left out (their CNPs and cuts are in).
    flows_without_counters: usize,
}

/// Writes `DIR/trace.json` with the default limits.
pub fn write_trace(
    dir: &Path,
    input: &ReportInput<'_>,
    kernel: &KernelEvents,
) -> Result<PathBuf, ReportError> {
    write_trace_with(dir, input, kernel, &TraceLimits::default())
}

/// Writes `DIR/trace.json` within `limits`, a event at a time.
pub fn write_trace_with(
    dir: &Path,
    input: &ReportInput<'_>,
    kernel: &KernelEvents,
    limits: &TraceLimits,
) -> Result<PathBuf, ReportError> {
    let path = dir.join(TRACE);
    let io = |source| ReportError::Io {
        path: path.clone(),
        source,
    };
    let file = std::fs::File::create(&path).map_err(io)?;
    let mut w = Writer {
        out: BufWriter::new(file),
        events: 0,
        left_out: Default::default(),
    };
    w.out.write_all(b"{\"traceEvents\": [\n").map_err(io)?;
    events(&mut w, input, kernel, limits).map_err(io)?;
    let d = input.dcqcn;
    let other = OtherData {
        generator: "rocetrace report",
        capture: &input.stats.capture.file,
        left_out: &w.left_out,
        flows_without_counters: d.flows.len().saturating_sub(limits.counter_flows),
    };
    let tail = serde_json::to_string(&other)?;
    write!(
        w.out,
        "\n],\n\"displayTimeUnit\": \"ns\",\n\"otherData\": {tail}\n}}\n"
    )
    .map_err(io)?;
    w.out.flush().map_err(io)?;
    Ok(path)
}

fn events<W: Write>(
    w: &mut Writer<W>,
    input: &ReportInput<'_>,
    kernel: &KernelEvents,
    limits: &TraceLimits,
) -> std::io::Result<()> {
    let d = input.dcqcn;
    let cap = &input.stats.capture;
    let start = cap.first_ns.unwrap_or(input.pauses.start_ns);
    let mut budget = *limits;

    w.name(PID_CAPTURE, None, &format!("rocetrace: {}", cap.file))?;
    w.name(PID_CAPTURE, Some(1), "findings")?;
    for f in input.findings {
        w.event(&json!({
            "ph": "i", "s": "g", "cat": "finding", "name": f.title, "pid": PID_CAPTURE, "tid": 1, "ts": us(start),
            "args": {"severity": f.severity, "code": f.code, "detail": f.detail, "evidence": f.evidence},
        }))?;
    }
    let all = bins_as_steps(
        d.traffic.aggregate.iter().map(|b| (b.t_ns, b.gbps)),
        d.bin_ns,
    );
    w.counter(
        PID_CAPTURE,
        "throughput of all flows",
        "Gb/s",
        &all,
        limits.points_per_track,
    )?;
    // Streams of CNPs no flow could be tied to: their span, since only their first and last CNP are kept.
    w.name(PID_CAPTURE, Some(2), "CNPs not tied to a flow")?;
    for u in &d.unpaired_cnps {
        w.event(&json!({
            "ph": "X", "cat": "cnp_unpaired", "name": format!("{} CNPs {} → {} QP {:#x}", u.cnps, u.src, u.dst, u.dest_qp),
            "pid": PID_CAPTURE, "tid": 2, "ts": us(u.first_ns), "dur": (u.last_ns - u.first_ns) as f64 / 1e3,
            "args": {"cnps": u.cnps, "tap": u.tap},
        }))?;
    }

    for (i, f) in d.flows.iter().enumerate() {
        let pid = PID_FLOWS + i as u64;
        w.name(pid, None, &flow_name(i, f))?;
        w.event(&json!({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": i + 10}}))?;
        w.name(pid, Some(1), "CNPs and cuts")?;
        if i < limits.counter_flows {
            let observed = bins_as_steps(f.observed.iter().map(|o| (o.t_ns, o.gbps)), d.bin_ns);
            let n = limits.points_per_track;
            w.counter(pid, "observed", "Gb/s", &observed, n)?;
            w.counter(pid, "model Rc", "Gb/s", &model_steps(f, |m| m.rc_gbps), n)?;
            w.counter(pid, "model Rt", "Gb/s", &model_steps(f, |m| m.rt_gbps), n)?;
            w.counter(pid, "alpha", "alpha", &model_steps(f, |m| m.alpha), n)?;
        }
        for t in f.cnp_ts_ns.iter() {
            w.bounded(&mut budget.cnps, "cnp", || Instant::<()> {
                ph: "i",
                s: "t",
                cat: "cnp",
                name: "CNP",
                pid,
                tid: 1,
                ts: us(t),
                args: None,
            })?;
        }
        for c in f.cuts.iter() {
            w.bounded(&mut budget.cuts, "cut", || Instant {
                ph: "i",
                s: "t",
                cat: "cut",
                name: "model cut",
                pid,
                tid: 1,
                ts: us(c.t_ns),
                args: Some(CutArgs {
                    rc_before_gbps: c.rc_before_gbps,
                    rc_after_gbps: c.rc_after_gbps,
                    alpha: c.alpha,
                }),
            })?;
        }
    }

    w.name(PID_PFC, None, "PFC pauses")?;
    let mut lanes: Vec<(u32, &str, Option<u8>)> = Vec::new();
    for p in &input.pauses.intervals {
        let lane = (p.iface, p.src_mac.as_str(), p.priority);
        let tid = match lanes.iter().position(|l| *l == lane) {
            Some(k) => k,
            None => {
                lanes.push(lane);
                let what = p
                    .priority
                    .map_or("PAUSE (all)".to_string(), |x| format!("prio {x}"));
                w.name(
                    PID_PFC,
                    Some(lanes.len() as u64),
                    &format!("tap {} {} {what}", p.iface, p.src_mac),
                )?;
                lanes.len() - 1
            }
        } as u64
            + 1;
        let paused_ns = p.end_ns.saturating_sub(p.start_ns);
        w.bounded(
            &mut budget.pauses,
            "pause",
            || json!({"ph": "X", "cat": "pfc", "name": "paused", "pid": PID_PFC, "tid": tid, "ts": us(p.start_ns),
                    "dur": paused_ns as f64 / 1e3,
                    "args": {"paused_ns": paused_ns, "src_mac": p.src_mac, "priority": p.priority, "iface": p.iface}}),
        )?;
    }

    if !kernel.is_empty() {
        w.name(PID_KERNEL, None, "kernel events (roce-tracer)")?;
        w.name(PID_KERNEL, Some(1), "events")?;
        for e in &kernel.events {
            w.bounded(
                &mut budget.kernel_events,
                "kernel_event",
                || json!({"ph": "i", "s": "t", "cat": "kernel", "name": e.tracepoint, "pid": PID_KERNEL, "tid": 1,
                        "ts": us(e.ts_ns), "args": {"process": e.process(), "event": e.summary()}}),
            )?;
        }
    }
    Ok(())
}
