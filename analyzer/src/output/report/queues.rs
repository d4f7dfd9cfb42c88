//! The "Queues and ECN marking" section: what `hops` rebuilt of the switch queues between taps. Per-hop
//! queueing delay over time and each queue's depth with its CE marks share the DCQCN charts' time axis, so a
//! cut in a flow's rate can be read against the queue that caused it; the marking scatter shows the marked
//! fraction per depth bin under the fitted RED/WRED curve.

use super::axis::{TimeAxis, fmt_duration};
use super::charts::{Chart, Line, LineChart, MarkShape, Marks, PALETTE};
use super::{Report, ReportError, html};
use crate::analysis::hops::{HopsReport, QueueReport, Series};
use crate::output::empty;
use crate::output::hops::{drift_cell, queue_cells};

/// Hops drawn in the delay chart, and queues drawn one depth chart each, busiest first.
const MAX_HOPS: usize = 8;
const MAX_QUEUES: usize = 4;
/// CE marks drawn per depth chart (the chart stays readable, the JSON has the counts).
const MAX_MARKS: usize = 4_000;

pub(super) fn write(r: &mut Report<'_>) -> Result<(), ReportError> {
    r.page.section("queues", "Queues and ECN marking");
    let Some(h) = r.input.hops else {
        let taps = r.input.stats.capture.interfaces.len();
        r.page.para("note", &empty::no_hops(taps));
        return Ok(());
    };
    r.page.para(
        "note",
        "Each hop is a pair of taps a packet passed one after the other; its queueing delay is its delay beyond \
         the least (the clocks' offset plus the fixed transit, followed per window). A queue's depth is that \
         delay times the port's drain rate: the bytes ahead of a packet as it entered. See docs/hops.md.",
    );
    if let Some(chart) = delay_chart(h, &r.axis) {
        r.chart(
            "hop_delay",
            &chart,
            "Mean queueing delay per hop, per bin (the charts' time axis).",
        )?;
    }
    r.page.raw(&hops_table(h));
    let axis = r.axis;
    for (i, q) in busiest(h).into_iter().enumerate() {
        if let Some(chart) = depth_chart(q, &axis) {
            r.chart(
                &format!("queue_depth_{}", i + 1),
                &chart,
                "Queue depth per bin (mean and maximum), and the packets that left CE-marked.",
            )?;
        }
        if let Some(chart) = marking_chart(q) {
            r.chart(
                &format!("queue_marking_{}", i + 1),
                &chart,
                "Marked fraction of ECN-capable packets per depth bin, and the fitted RED/WRED curve.",
            )?;
        }
    }
    r.page.raw(&queues_table(h));
    Ok(())
}

/// Queues that delayed packets, most packets first.
fn busiest(h: &HopsReport) -> Vec<&QueueReport> {
    let mut v: Vec<&QueueReport> = h
        .queues
        .iter()
        .filter(|q| q.queue_delay_ns.max > 0.0 && q.queue_bytes.is_some())
        .collect();
    v.sort_by_key(|q| std::cmp::Reverse(q.packets));
    v.truncate(MAX_QUEUES);
    v
}

fn bin_x(s: &Series, i: usize, axis: &TimeAxis) -> f64 {
    axis.x(s.start_ns + i as u64 * s.bin_ns + s.bin_ns / 2)
}

fn delay_chart(h: &HopsReport, axis: &TimeAxis) -> Option<Chart> {
    let mut hops: Vec<_> = h
        .hops
        .iter()
        .filter(|x| x.queue_delay_ns.max > 0.0)
        .collect();
    if hops.is_empty() {
        return None;
    }
    hops.sort_by_key(|x| std::cmp::Reverse(x.matched));
    hops.truncate(MAX_HOPS);
    let lines: Vec<Line> = hops
        .iter()
        .enumerate()
        .map(|(i, x)| Line {
            label: format!("{} → {}", short(&x.from), short(&x.to)),
            color: PALETTE[i % PALETTE.len()],
            points: x
                .series
                .bins
                .iter()
                .enumerate()
                .filter(|(_, b)| b.packets > 0)
                .map(|(j, b)| (bin_x(&x.series, j, axis), b.sum_ns / b.packets as f64 / 1e3))
                .collect(),
            dashed: false,
        })
        .collect();
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        * 1.15;
    Some(Chart::Line(LineChart {
        title: format!(
            "Queueing delay per hop ({} bins)",
            fmt_duration(hops[0].series.bin_ns)
        ),
        x_label: axis.label(),
        y_label: "queueing delay (µs)".into(),
        x_range: axis.range(),
        y_max: y_max.max(0.001),
        lines,
        marks: Vec::new(),
        y2: None,
    }))
}

fn depth_chart(q: &QueueReport, axis: &TimeAxis) -> Option<Chart> {
    let gbps = q.drain_gbps?;
    let kb = gbps / 8.0 / 1e3; // ns → KB
    let s = &q.series;
    let busy = || s.bins.iter().enumerate().filter(|(_, b)| b.packets > 0);
    let mean: Vec<(f64, f64)> = busy()
        .map(|(i, b)| (bin_x(s, i, axis), b.sum_ns / b.packets as f64 * kb))
        .collect();
    let max: Vec<(f64, f64)> = busy()
        .map(|(i, b)| (bin_x(s, i, axis), b.max_ns as f64 * kb))
        .collect();
    let step = q.marks.len().div_ceil(MAX_MARKS).max(1);
    let marks: Vec<(f64, f64)> = q
        .marks
        .iter()
        .step_by(step)
        .map(|&(t, bytes)| (axis.x(t), bytes / 1e3))
        .collect();
    let y_max = max.iter().map(|p| p.1).fold(0.0f64, f64::max) * 1.15;
    let mut lines = vec![
        Line {
            label: "mean depth".into(),
            color: PALETTE[0],
            points: mean,
            dashed: false,
        },
        Line {
            label: "max depth".into(),
            color: PALETTE[1],
            points: max,
            dashed: true,
        },
    ];
    if let Some(k) = q.marking.kmin_bytes {
        let (x0, x1) = axis.range();
        lines.push(Line {
            label: "fitted Kmin".into(),
            color: PALETTE[7],
            points: vec![(x0, k / 1e3), (x1, k / 1e3)],
            dashed: true,
        });
    }
    Some(Chart::Line(LineChart {
        title: format!(
            "Queue {} priority {} ({} bins, drained at {gbps:.1} Gb/s)",
            short(&q.tap),
            q.priority,
            fmt_duration(s.bin_ns)
        ),
        x_label: axis.label(),
        y_label: "bytes ahead (KB)".into(),
        x_range: axis.range(),
        y_max: y_max.max(0.001),
        lines,
        marks: vec![Marks {
            label: format!("CE-marked ({})", q.marking.marked),
            color: PALETTE[3],
            shape: MarkShape::Tick,
            points: marks,
        }],
        y2: None,
    }))
}

fn marking_chart(q: &QueueReport) -> Option<Chart> {
    let m = &q.marking;
    if m.marked == 0 || m.bins.is_empty() {
        return None;
    }
    let points: Vec<(f64, f64)> = m
        .bins
        .iter()
        .filter(|b| b.ect_in > 0)
        .map(|b| {
            (
                (b.depth_bytes as f64 + m.bin_bytes as f64 / 2.0) / 1e3,
                b.marked as f64 / b.ect_in as f64,
            )
        })
        .collect();
    let x_max = points.iter().map(|p| p.0).fold(0.0f64, f64::max) * 1.1;
    let mut lines = Vec::new();
    if let (Some(c), Some([kmin, kmax, pmax])) = (m.curve, m.describe(1e3, 0)) {
        // Where Kmax is open the curve is known only as deep as the queue went.
        let deepest = m
            .bins
            .last()
            .map_or(0.0, |b| (b.depth_bytes + m.bin_bytes) as f64);
        let end = if m.kmax_bytes.is_some() {
            x_max * 1e3
        } else {
            deepest.min(x_max * 1e3)
        };
        let curve = (0..=200)
            .map(|i| {
                let x = end * i as f64 / 200.0;
                (x / 1e3, c.probability(x))
            })
            .collect();
        lines.push(Line {
            label: format!(
                "fit (95 % intervals): Kmin {kmin} KB, Kmax {kmax} KB, Pmax {pmax} (error {:.3})",
                m.fit_rmse.unwrap_or(0.0)
            ),
            color: PALETTE[0],
            points: curve,
            dashed: false,
        });
    }
    Some(Chart::Line(LineChart {
        title: format!(
            "Marking of queue {} priority {} ({} of {} ECN-capable packets marked)",
            short(&q.tap),
            q.priority,
            m.marked,
            m.ect_in
        ),
        x_label: format!("queue depth found ({} B bins, KB)", m.bin_bytes),
        y_label: "marked fraction".into(),
        x_range: (0.0, x_max.max(1.0)),
        y_max: 1.05,
        lines,
        marks: vec![Marks {
            label: "per depth bin".into(),
            color: PALETTE[3],
            shape: MarkShape::Dot,
            points,
        }],
        y2: None,
    }))
}

/// The tap's interface name, when `FILE:IFACE` is long: charts have little room.
fn short(tap: &str) -> &str {
    tap.rsplit(['/', '\\']).next().unwrap_or(tap)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |v| format!("{v:.digits$}"))
}

fn hops_table(h: &HopsReport) -> String {
    let rows: Vec<Vec<String>> = h
        .hops
        .iter()
        .map(|x| {
            vec![
                x.from.clone(),
                x.to.clone(),
                x.matched.to_string(),
                x.unmatched.to_string(),
                x.clock_offset_ns.to_string(),
                drift_cell(x),
                format!("{:.0}", x.queue_delay_ns.p50),
                format!("{:.0}", x.queue_delay_ns.p99),
                format!("{:.0}", x.queue_delay_ns.max),
            ]
        })
        .collect();
    html::table(
        &[
            "from",
            "to",
            "matched",
            "unmatched",
            "offset + base (ns)",
            "drift (ppm)",
            "queueing p50 (ns)",
            "p99",
            "max",
        ],
        &rows,
        &[0, 1],
        None,
    )
}

fn queues_table(h: &HopsReport) -> String {
    let rows: Vec<Vec<String>> = h
        .queues
        .iter()
        .filter(|q| q.queue_delay_ns.max > 0.0 || q.marking.marked > 0)
        .map(|q| {
            let mut row = vec![q.tap.clone(), q.priority.to_string()];
            row.extend(queue_cells(q));
            row.push(q.marking.between.to_string());
            row.push(opt(q.pfc_depth_bytes, 0));
            row
        })
        .collect();
    html::table(
        &[
            "queue (downstream tap)",
            "priority",
            "packets",
            "drain (Gb/s)",
            "bytes p50",
            "p99",
            "max",
            "CE / ECT",
            "Kmin (B, 95 %)",
            "Kmax (B, 95 %)",
            "Pmax (95 %)",
            "fit error",
            "between",
            "depth at PFC (B)",
        ],
        &rows,
        &[0],
        None,
    )
}
