//! The alpha section: each charted sender's modeled congestion estimate.

use super::axis::TimeAxis;
use super::charts::{Chart, Line, LineChart, PALETTE};
use super::flows::steps;
use super::{Report, ReportError};
use crate::analysis::dcqcn::FlowDcqcn;

pub(super) fn write(r: &mut Report<'_>) -> Result<(), ReportError> {
    r.page.section("alpha", "DCQCN alpha");
    if let Some(chart) = alpha_chart(&r.shown, &r.axis) {
        r.chart(
            "alpha",
            &chart,
            "The modeled congestion estimate alpha of each sender: each cut multiplies the rate by (1 − alpha / 2).",
        )?;
    } else {
        r.page
            .para("note", "The model made no rate decision for any flow.");
    }
    Ok(())
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
