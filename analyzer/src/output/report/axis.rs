//! Where things sit on the page's time axis, and how times and numbers are written.

use super::ReportInput;

/// Maps capture timestamps to chart x values: time since the capture's first frame, in a unit that keeps
/// the numbers short.
#[derive(Debug, Clone, Copy)]
pub struct TimeAxis {
    pub(super) origin_ns: u64,
    pub(super) span_ns: u64,
    ns_per_unit: f64,
    pub(super) unit: &'static str,
}

impl TimeAxis {
    /// An axis starting at `origin_ns`, in the unit that suits a capture of `span_ns`.
    pub fn new(origin_ns: u64, span_ns: u64) -> Self {
        let (ns_per_unit, unit) = if span_ns < 2_000_000 {
            (1e3, "µs")
        } else if span_ns < 2_000_000_000 {
            (1e6, "ms")
        } else {
            (1e9, "s")
        };
        TimeAxis {
            origin_ns,
            span_ns,
            ns_per_unit,
            unit,
        }
    }

    pub(super) fn of(input: &ReportInput<'_>) -> Self {
        let cap = &input.stats.capture;
        let origin = cap.first_ns.unwrap_or(input.pauses.start_ns);
        TimeAxis::new(origin, cap.duration_ns)
    }

    /// Where a capture timestamp sits on every chart's x axis.
    pub fn x(&self, t_ns: u64) -> f64 {
        (t_ns as f64 - self.origin_ns as f64) / self.ns_per_unit
    }

    /// The x span of the whole capture, so every chart of the page shows the same span.
    pub(super) fn range(&self) -> (f64, f64) {
        (0.0, self.span_ns as f64 / self.ns_per_unit)
    }

    /// The x axis title, naming the unit [`TimeAxis::new`] chose.
    pub(super) fn label(&self) -> String {
        format!("time since the first frame ({})", self.unit)
    }
}

pub(super) fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

pub(super) fn fmt_duration(ns: u64) -> String {
    match ns {
        n if n < 10_000 => format!("{n} ns"),
        n if n < 10_000_000 => format!("{:.1} µs", n as f64 / 1e3),
        n if n < 10_000_000_000 => format!("{:.2} ms", n as f64 / 1e6),
        n => format!("{:.3} s", n as f64 / 1e9),
    }
}
