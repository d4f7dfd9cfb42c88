//! The CNP section: how often each charted sender was told to slow down, and the CNPs no flow could claim.

use std::collections::BTreeMap;

use super::axis::{TimeAxis, fmt_duration};
use super::charts::{Chart, Line, LineChart, PALETTE};
use super::{Report, ReportError};
use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn};
use crate::analysis::np::Pacing;
use crate::output::empty;

pub(super) fn write(r: &mut Report<'_>) -> Result<(), ReportError> {
    r.page.section("cnp", "CNP rate");
    let d = r.input.dcqcn;
    if let Some(chart) = cnp_rate_chart(d, &r.shown, &r.axis) {
        r.chart(
            "cnp_rate",
            &chart,
            "CNPs received by each sender, counted in bins.",
        )?;
    } else {
        r.page.para("note", empty::NO_PAIRED_CNP);
    }
    if !d.unpaired_cnps.is_empty() {
        r.page.para(
            "note",
            &format!(
                "{} CNP streams could not be tied to a data flow ({} CNPs; {} of them fit several flows and \
                 were left unpaired rather than guessed); see unpaired_cnps.csv and pairing.md.",
                d.unpaired_cnps.len(),
                d.unpaired_cnps.iter().map(|u| u.cnps).sum::<u64>(),
                d.unpaired_cnps
                    .iter()
                    .filter(|u| !u.candidates.is_empty())
                    .count()
            ),
        );
    }
    let odd: Vec<String> = d
        .np_streams
        .iter()
        .filter(|n| matches!(n.check.pacing, Pacing::Faster | Pacing::Slower))
        .map(|n| format!("{} → {} QP 0x{:06x}", n.receiver, n.sender, n.sender_qp))
        .collect();
    if !odd.is_empty() {
        r.page.para(
            "note",
            &format!(
                "The notification point paces {} CNP stream(s) differently from its min_time_between_cnps \
                 ({}); see np_streams.csv for the gap each was checked against and whose knob it is.",
                odd.len(),
                odd.join(", ")
            ),
        );
    }
    Ok(())
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
            points: count(&mut f.cnp_ts_ns.iter()),
            dashed: false,
        })
        .collect();
    if d.flows.len() > 1 {
        lines.push(Line {
            label: format!("all {} flows", d.flows.len()),
            color: PALETTE[7],
            points: count(&mut d.flows.iter().flat_map(|f| f.cnp_ts_ns.iter())),
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
