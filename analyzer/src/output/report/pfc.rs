//! The PFC section: the pause timeline per source and priority, storms outlined, and the storms' table.

use std::collections::BTreeMap;

use super::axis::{TimeAxis, fmt_duration};
use super::charts::{Chart, Lane, Timeline};
use super::{Report, ReportError, html};
use crate::analysis::pauses::PauseReport;

/// Lanes of the PFC timeline (source, priority), most paused first.
pub const MAX_PAUSE_LANES: usize = 16;

pub(super) fn write(r: &mut Report<'_>) -> Result<(), ReportError> {
    r.page.section("pfc", "PFC pause timeline");
    let pauses = r.input.pauses;
    let (timeline, note) = pause_timeline(pauses, &r.axis);
    match timeline {
        Some(chart) => r.chart(
            "pfc_timeline",
            &chart,
            "Paused intervals per source MAC and priority; storms outlined in red.",
        )?,
        None => r.page.para(
            "note",
            "No PFC or PAUSE frame paused anything in this capture.",
        ),
    }
    if let Some(note) = note {
        r.page.para("note", &note);
    }
    if !pauses.storms.is_empty() {
        r.page.raw(&storms_table(pauses, &r.axis));
    }
    Ok(())
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
