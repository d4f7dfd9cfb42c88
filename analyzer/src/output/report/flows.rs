//! The per-flow section (one chart per flow that DCQCN acted on, worst first: the observed rate beside the
//! model's Rc and Rt) and the aggregate section (the flows together, with their CE fraction).

use super::axis::{TimeAxis, fmt_num};
use super::charts::{Chart, Line, LineChart, MarkShape, Marks, PALETTE, SecondAxis};
use super::kernel::label_for;
use super::{Report, ReportError, ReportInput};
use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn};
use crate::output::empty;
use roce_core::passes::StatsReport;
use roce_core::units::rate_scale;

/// Flows drawn one chart each; the rest are summed up in the table, since nobody reads forty charts.
pub const MAX_FLOW_CHARTS: usize = 8;

pub(super) fn write(r: &mut Report<'_>) -> Result<(), ReportError> {
    r.page
        .section("flows", "Per-flow throughput and the DCQCN model");
    let flows_with_cc = r.input.dcqcn.flows.len();
    if r.shown.is_empty() {
        r.page.para("note", empty::NO_RATE_CONTROL);
    } else {
        r.page.para(
            "note",
            &format!(
                "Showing {} of {} flows with CE marks or CNPs, most CNPs and CE marks first; the per-QP table \
                 below lists them all. Rc and Rt are the modeled current and target rates of the sender's \
                 rate limiter, fed with the CNPs seen in the capture.",
                r.shown.len(),
                flows_with_cc
            ),
        );
    }
    for i in 0..r.shown.len() {
        let f = r.shown[i];
        let mut chart = flow_chart(f, &r.axis, r.input.dcqcn, i);
        let processes = label_for(
            r.labels(),
            r.kernel_summary,
            f.summary.sender,
            f.summary.receiver,
            f.summary.receiver_qp,
        );
        if let (Some(label), Chart::Line(c)) = (&processes, &mut chart) {
            c.title.push_str(&format!(" — {}", label.text));
            if !label.marks.is_empty() {
                c.marks.push(Marks {
                    label: "QP seen in the kernel events".into(),
                    color: PALETTE[7],
                    shape: MarkShape::Dot,
                    points: label.marks.iter().map(|&t| (r.axis.x(t), 0.0)).collect(),
                });
            }
        }
        let caption = match &processes {
            Some(l) => format!("Flow {}: {} — {}", i + 1, flow_label(f), l.text),
            None => format!("Flow {}: {}", i + 1, flow_label(f)),
        };
        r.chart(&format!("flow_{:02}", i + 1), &chart, &caption)?;
    }

    r.page.section(
        "aggregate",
        "Throughput: every flow together, the busiest, and the CE fraction",
    );
    if let Some(chart) = aggregate_chart(r.input.dcqcn, &r.axis) {
        r.chart(
            "aggregate",
            &chart,
            "Every RoCE data flow, congested or not, each counted at the tap that saw most of it; the CE \
             fraction is the share of all their packets that was CE-marked. flows.csv has every flow's totals.",
        )?;
    } else {
        r.page.para("note", "No RoCE data flow in this capture.");
    }
    Ok(())
}

/// CE-marked packets of a DCQCN flow, from the stats table (same flow key).
pub(super) fn ce_packets(stats: &StatsReport, f: &FlowDcqcn) -> u64 {
    stats
        .flows
        .iter()
        .find(|r| {
            r.src == f.summary.sender
                && r.dst == f.summary.receiver
                && r.dest_qp == f.summary.receiver_qp
        })
        .map_or(0, |r| r.ce_packets)
}

/// The flows that get a chart: most CNPs, then most CE marks; ties broken by the flow key so the choice is
/// stable.
pub(super) fn worst_flows<'a>(input: &ReportInput<'a>) -> Vec<&'a FlowDcqcn> {
    let mut v: Vec<(&FlowDcqcn, u64)> = input
        .dcqcn
        .flows
        .iter()
        .map(|f| (f, ce_packets(input.stats, f)))
        .collect();
    v.sort_by(|a, b| {
        b.0.summary
            .cnps
            .cmp(&a.0.summary.cnps)
            .then(b.1.cmp(&a.1))
            .then(
                (
                    a.0.summary.sender,
                    a.0.summary.receiver,
                    a.0.summary.receiver_qp,
                )
                    .cmp(&(
                        b.0.summary.sender,
                        b.0.summary.receiver,
                        b.0.summary.receiver_qp,
                    )),
            )
    });
    v.into_iter().take(MAX_FLOW_CHARTS).map(|x| x.0).collect()
}

pub(super) fn flow_label(f: &FlowDcqcn) -> String {
    let sqp = f
        .summary
        .sender_qp
        .map_or(String::new(), |q| format!(" (sender QP {q:#x})"));
    format!(
        "{} → {} QP {:#x}{sqp}",
        f.summary.sender, f.summary.receiver, f.summary.receiver_qp
    )
}

/// A step function (value holds until the next point) as polyline points, from `x0` to `x1`.
pub(super) fn steps(
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
    let line = f.summary.line.gbps();
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
    let cnps: Vec<(f64, f64)> = f.cnp_ts_ns.iter().map(|t| (axis.x(t), 0.0)).collect();
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
            label: format!("CNP ({})", f.summary.cnps),
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

/// Every data flow's throughput, congested or not: all of them together (with the share of their packets
/// CE-marked, on the right axis), and the busiest few each on its own line. The axis scales to the data, in
/// the unit that fits it: the line rate is drawn when the data comes within a quarter of it, and otherwise
/// only named, so that a trickle is not flattened under a line far above it.
pub fn aggregate_chart(d: &DcqcnReport, axis: &TimeAxis) -> Option<Chart> {
    let t = &d.traffic;
    if t.aggregate.is_empty() {
        return None;
    }
    let half = d.bin_ns / 2;
    let at = |t_ns: u64| axis.x(t_ns.saturating_add(half));
    let (x0, x1) = axis.range();
    let top = t.aggregate.iter().map(|b| b.gbps).fold(0.0, f64::max);
    let line = d.line.gbps();
    let show_line = top >= line / 4.0;
    let (per, unit) = rate_scale(if show_line { top.max(line) } else { top } * 1e9);
    // Gb/s to the axis' unit.
    let k = 1e9 / per;
    let mut lines = vec![Line {
        label: match t.flows {
            1 => "the flow".to_string(),
            n => format!("all {n} flows"),
        },
        color: PALETTE[7],
        points: t
            .aggregate
            .iter()
            .map(|b| (at(b.t_ns), b.gbps * k))
            .collect(),
        dashed: false,
    }];
    // One flow alone is the aggregate already.
    if t.flows > 1 {
        lines.extend(t.busiest.iter().enumerate().map(|(i, f)| {
            Line {
                label: format!("{} → {} QP {:#x}", f.sender, f.receiver, f.receiver_qp),
                color: PALETTE[i % 7],
                points: f
                    .observed
                    .iter()
                    .map(|b| (at(b.t_ns), b.gbps * k))
                    .collect(),
                dashed: false,
            }
        }));
    }
    if show_line {
        lines.push(Line {
            label: d.line.to_string(),
            color: PALETTE[8],
            points: vec![(x0, line * k), (x1, line * k)],
            dashed: true,
        });
    }
    let y_max = if show_line { top.max(line) } else { top } * k * 1.12;
    let title = match (t.flows, t.busiest.len()) {
        (1, _) => "Throughput of the only flow".to_string(),
        (n, b) if b == n => format!("Throughput: {n} flows, together and each"),
        (n, b) => format!("Throughput: all {n} flows together and the busiest {b}"),
    };
    Some(Chart::Line(LineChart {
        title,
        x_label: axis.label(),
        y_label: if show_line {
            format!(
                "throughput ({unit}, {} µs bins)",
                fmt_num(d.bin_ns as f64 / 1e3)
            )
        } else {
            format!(
                "throughput ({unit}, {} µs bins; {})",
                fmt_num(d.bin_ns as f64 / 1e3),
                d.line
            )
        },
        x_range: (x0, x1),
        y_max,
        lines,
        marks: Vec::new(),
        y2: Some(SecondAxis {
            label: "CE-marked fraction".into(),
            max: 1.05,
            lines: vec![Line {
                label: "CE fraction of all flows (right axis)".into(),
                color: PALETTE[5],
                points: t
                    .aggregate
                    .iter()
                    .map(|b| (at(b.t_ns), b.ce_fraction))
                    .collect(),
                dashed: false,
            }],
        }),
    }))
}
