//! The kernel-events section, for captures made with `roce-tracer --kernel-events`: what the tracer could
//! record, the drops and events on the report's time axis, the QPs' processes, and the events themselves.
//! The processes also label the flows elsewhere on the page.

use std::net::IpAddr;

use super::axis::TimeAxis;
use super::charts::{Chart, Line, LineChart, MarkShape, Marks, PALETTE};
use super::{Report, ReportError, html};
use crate::analysis::dcqcn::DcqcnReport;
use roce_core::passes::flows::FlowRow;
use roce_core::processes::{FlowProcess, KernelSummary, reverse_flow_qp};
use roce_core::recorded::{KernelEvent, KernelEvents, QP_TRACEPOINTS, RDMA_RES_QP};

pub(super) fn write(r: &mut Report<'_>) -> Result<(), ReportError> {
    let Some(k) = r.kernel_summary else {
        return Ok(());
    };
    r.page.section("kernel", "Kernel events");
    r.page.para("note", &kernel_note(k));
    if let Some(chart) = kernel_chart(r.kernel, &r.axis) {
        r.chart(
            "kernel_events",
            &chart,
            "Kernel drops per second in each interval the tracer reported, and the recorded events as \
             marks on the capture's time axis.",
        )?;
    }
    r.page.raw(&qp_processes_table(k, &r.axis));
    r.page.raw(&kernel_events_table(r.kernel, &r.axis));
    Ok(())
}

/// Rows of the kernel events table on the page; `kernel_events.csv` has them all.
pub const MAX_KERNEL_EVENT_ROWS: usize = 200;

/// The sender's QP of a flow and how it is known: the DCQCN pairing (for a data flow, or, for the flow
/// coming back, the pairing of the data flow it answers), else the only flow the other way.
pub fn sender_qp_of(d: &DcqcnReport, flows: &[FlowRow], f: &FlowRow) -> Option<(u32, String)> {
    let paired = d.flows.iter().find_map(|x| {
        let method = x.summary.pairing?.key();
        if x.summary.sender == f.src
            && x.summary.receiver == f.dst
            && x.summary.receiver_qp == f.dest_qp
        {
            return Some((x.summary.sender_qp?, method.to_string()));
        }
        (x.summary.sender == f.dst
            && x.summary.receiver == f.src
            && x.summary.sender_qp == Some(f.dest_qp))
        .then(|| (x.summary.receiver_qp, method.to_string()))
    });
    paired.or_else(|| reverse_flow_qp(flows, f).map(|q| (q, "reverse_flow".to_string())))
}

/// A flow's processes in words, and when its QPs were seen.
#[derive(Debug, Clone)]
pub(super) struct ProcessLabel {
    pub text: String,
    pub marks: Vec<u64>,
}

pub(super) fn flow_processes_text(l: &FlowProcess) -> String {
    let end = |o: &Option<roce_core::processes::QpOwner>| {
        o.as_ref()
            .map_or("?".to_string(), |o| format!("{}[{}]", o.comm, o.pid))
    };
    format!("{} → {}", end(&l.sender), end(&l.receiver))
}

pub(super) fn label_for(
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
