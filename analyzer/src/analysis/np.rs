//! The notification point (the receiver NIC that answers CE marks with CNPs) checked against its own knobs:
//! per QP, how long a mark waited for its CNP and whether two CNPs to one QP were ever closer than
//! `min_time_between_cnps`; per port, whether the NIC moderates across all its QPs at once.
//!
//! [`check_stream`] and [`check_port`] take plain times, so that any analysis that knows which CE mark a CNP
//! answers (the DCQCN pairing, or a hop between two taps) can call them.

use serde::Serialize;

use super::hist::{Hist, Percentiles};

/// A gap counts as shorter than the least gap below this share of it: a CNP that waited behind another
/// frame at the NIC or the tap shortens the next gap a little, without the NIC breaking its pacing.
const GAP_TOLERANCE: f64 = 0.9;
/// A stream paces faster than its NP's least gap when more than this share of its gaps are shorter.
pub const FAST_SHARE: f64 = 0.1;
/// Gaps a stream needs before its pacing is judged.
pub const MIN_GAPS: u64 = 5;
/// A notification point that leaves a mark unanswered this long (median) after its least gap paces slower
/// than configured: a ConnectX answers within a few µs, and a tap that is not at the receiver adds the round
/// trip between them (a few µs more in a data centre). An NP that keeps 20 µs where its knob says 4 µs waits
/// about 16 µs.
pub const SLOW_WAIT_NS: u64 = 10_000;
/// A port that moderates all its QPs together: at least this many pairs of CNPs in a row to different QPs
/// within twice the least gap, none of them closer than the gap.
pub const PORT_INTERLEAVED: u64 = 10;

/// How a stream's CNPs kept the least gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pacing {
    /// Two CNPs to the QP were never (or seldom) closer than the least gap, and marks were answered promptly.
    Conforms,
    /// More than [`FAST_SHARE`] of the gaps were shorter than the least gap.
    Faster,
    /// Marks waited more than [`SLOW_WAIT_NS`] (median) past the least gap for their CNP.
    Slower,
    /// Too few CNPs to judge, or a least gap of 0 (a CNP per mark) and no mark seen.
    Unknown,
}

/// One QP's CNPs against the least gap.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StreamCheck {
    /// CNPs to the QP at the tap.
    pub cnps: u64,
    /// The least gap the check used (`min_time_between_cnps`).
    pub min_gap_ns: u64,
    /// The shortest gap seen between two CNPs: a number below the least gap proves the NP broke it.
    pub min_spacing_ns: Option<u64>,
    /// Gaps between consecutive CNPs: median, 99th percentile, largest.
    pub spacing_ns: Option<Percentiles>,
    /// Gaps shorter than the least gap (beyond a tolerance of 10 %).
    pub below_min_gap: u64,
    /// CNPs for which the mark they answer is known.
    pub answered: u64,
    /// From the mark a CNP answers (the first after the least gap since the previous CNP) to the CNP, for
    /// the CNPs that kept the gap: the NP's reaction time as the tap sees it.
    pub ce_to_cnp_ns: Option<Percentiles>,
    /// The verdict drawn from the numbers above.
    pub pacing: Pacing,
}

/// The check of one QP's CNP stream.
///
/// `cnps` are the CNP times to the QP at one tap, sorted; `answers` pairs some of them with the CE mark each
/// answers (the first mark of the data flow at or after the previous CNP plus `min_gap_ns`; before the first
/// CNP, the first mark). A CNP sooner than the least gap after the previous one counts in `below_min_gap` and
/// gives no reaction time.
pub fn check_stream(cnps: &[u64], answers: &[(u64, u64)], min_gap_ns: u64) -> StreamCheck {
    let short = |gap: u64| (gap as f64) < GAP_TOLERANCE * min_gap_ns as f64;
    let mut spacing = Hist::default();
    let (mut min_spacing, mut below) = (None::<u64>, 0u64);
    for w in cnps.windows(2) {
        let gap = w[1].saturating_sub(w[0]);
        spacing.add(gap);
        min_spacing = Some(min_spacing.map_or(gap, |m| m.min(gap)));
        below += u64::from(short(gap));
    }
    let mut wait = Hist::default();
    for &(t, ce) in answers {
        let k = cnps.partition_point(|&c| c < t);
        let prev = k.checked_sub(1).map(|i| cnps[i]);
        if prev.is_some_and(|p| short(t.saturating_sub(p))) {
            continue;
        }
        let allowed = prev.map_or(ce, |p| ce.max(p.saturating_add(min_gap_ns)));
        wait.add(t.saturating_sub(allowed));
    }
    let gaps = spacing.count();
    let ce_to_cnp = (wait.count() > 0).then(|| wait.percentiles());
    let pacing = if gaps >= MIN_GAPS && min_gap_ns > 0 && below as f64 > FAST_SHARE * gaps as f64 {
        Pacing::Faster
    } else if ce_to_cnp.is_some_and(|p| p.p50 > SLOW_WAIT_NS as f64) && wait.count() >= MIN_GAPS {
        Pacing::Slower
    } else if gaps >= MIN_GAPS || wait.count() >= MIN_GAPS {
        Pacing::Conforms
    } else {
        Pacing::Unknown
    };
    StreamCheck {
        cnps: cnps.len() as u64,
        min_gap_ns,
        min_spacing_ns: min_spacing,
        spacing_ns: (gaps > 0).then(|| spacing.percentiles()),
        below_min_gap: below,
        answered: answers.len() as u64,
        ce_to_cnp_ns: ce_to_cnp,
        pacing,
    }
}

/// One receiver port's CNPs, all QPs together.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PortCheck {
    /// CNPs the port sent, all QPs together.
    pub cnps: u64,
    /// Distinct QPs they went to.
    pub qps: u64,
    /// Consecutive CNPs to different QPs closer than twice the least gap: the chances per-QP moderation has
    /// to send two CNPs close together.
    pub interleaved: u64,
    /// Consecutive CNPs (to any QPs) closer than the least gap.
    pub below_min_gap: u64,
    /// Interleaved often, and never closer than the gap: the NIC seems to pace the port, not each QP, and a
    /// QP then gets fewer CNPs than its marks would earn it.
    pub per_port: bool,
}

/// The check of one port: `cnps` are (time, destination QP) of every CNP the port sent, as one tap saw them,
/// sorted by time.
pub fn check_port(cnps: &[(u64, u32)], min_gap_ns: u64) -> PortCheck {
    let (mut interleaved, mut below) = (0u64, 0u64);
    for w in cnps.windows(2) {
        let gap = w[1].0.saturating_sub(w[0].0);
        if w[0].1 != w[1].1 && gap < min_gap_ns.saturating_mul(2) {
            interleaved += 1;
        }
        below += u64::from((gap as f64) < GAP_TOLERANCE * min_gap_ns as f64);
    }
    let mut qps: Vec<u32> = cnps.iter().map(|c| c.1).collect();
    qps.sort_unstable();
    qps.dedup();
    PortCheck {
        cnps: cnps.len() as u64,
        qps: qps.len() as u64,
        interleaved,
        below_min_gap: below,
        per_port: min_gap_ns > 0 && interleaved >= PORT_INTERLEAVED && below == 0,
    }
}
