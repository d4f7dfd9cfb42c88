//! The events worth a line on the screen: what the report's findings would later raise, seen as it starts.

use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::Pair;

/// How bad a notice is: the view colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something to know (a pairing made).
    Info,
    /// Something to look at (a deep cut).
    Warning,
    /// Something wrong (a PFC storm, lost frames).
    Problem,
}

/// One event, at its capture time.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Capture time, ns since the epoch.
    pub t_ns: u64,
    /// How bad.
    pub level: Level,
    /// What happened, in a line.
    pub text: String,
}

/// A pause this long, in one piece, is a storm: the analyzer's default threshold
/// (`analyzer::analysis::pauses::DEFAULT_STORM_THRESHOLD_NS`), so that the view and the report agree.
pub const STORM_NS: u64 = 500_000;

impl Notice {
    /// The model cut a sender below a tenth of its line.
    pub fn deep_cut(t_ns: u64, stream: &FlowKey, rc_mbps: f64, line_mbps: f64) -> Notice {
        Notice {
            t_ns,
            level: Level::Warning,
            text: format!(
                "{} qp {:#08x} cut to {} (under a tenth of its {} line)",
                stream.dst,
                stream.dest_qp,
                gbps(rc_mbps / 1000.0),
                gbps(line_mbps / 1000.0)
            ),
        }
    }

    /// A priority paused for [`STORM_NS`] or more without a break.
    pub fn storm(t_ns: u64, tap: &str, src_mac: &str, priority: Option<u8>, ns: u64) -> Notice {
        let what = priority.map_or_else(|| "the link (PAUSE)".to_string(), |p| format!("prio {p}"));
        Notice {
            t_ns,
            level: Level::Problem,
            text: format!(
                "PFC storm: {what} paused {:.2} ms so far by {src_mac} (tap {tap})",
                ns as f64 / 1e6
            ),
        }
    }

    /// The pairing tied a CNP stream to a data flow.
    pub fn paired(t_ns: u64, p: &Pair) -> Notice {
        Notice {
            t_ns,
            level: Level::Info,
            text: format!(
                "paired {} → {} qp {:#08x} with CNPs to qp {:#08x} ({})",
                p.sender,
                p.receiver,
                p.receiver_qp,
                p.sender_qp,
                p.method.key()
            ),
        }
    }

    /// The capture lost frames since the last look.
    pub fn lost(t_ns: u64, frames: u64, total: u64) -> Notice {
        Notice {
            t_ns,
            level: Level::Problem,
            text: format!("the capture lost {frames} frames ({total} in all): the numbers are low"),
        }
    }
}

/// A rate in Gb/s with three significant digits at most, so that columns stay narrow.
pub fn gbps(g: f64) -> String {
    if !g.is_finite() {
        return "-".into();
    }
    if g >= 100.0 {
        format!("{g:.0} Gb/s")
    } else if g >= 10.0 {
        format!("{g:.1} Gb/s")
    } else if g >= 0.01 || g == 0.0 {
        format!("{g:.2} Gb/s")
    } else {
        format!("{:.0} Mb/s", g * 1000.0)
    }
}
