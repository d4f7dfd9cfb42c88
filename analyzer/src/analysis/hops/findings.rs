//! What the hops and queues say that needs a reader's attention, as findings with their evidence: a marking
//! curve unlike the switch's configuration, marking that starts above PFC, packets seen at one tap only, and
//! a drift between two clocks that could not be told from a standing queue.

use super::HopsOptions;
use super::red::Interval;
use super::report::{HopReport, QueueReport};
use crate::analysis::findings::{Finding, Severity};

/// What the hops and queues say that needs saying: a fitted curve unlike the configured one, marking that
/// starts only where PFC already pauses, packets lost between taps.
pub(super) fn findings(
    hops: &[HopReport],
    queues: &[QueueReport],
    opts: &HopsOptions,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for q in queues {
        let m = &q.marking;
        let (Some(kmin), Some(kmax), Some(pmax), Some([kmin_t, kmax_t, pmax_t])) = (
            m.kmin_interval,
            m.kmax_interval,
            m.pmax_interval,
            m.describe(1.0, 0),
        ) else {
            continue;
        };
        let label = format!("queue {} priority {}", q.tap, q.priority);
        let fitted = format!(
            "fitted, with 95 % intervals: Kmin {kmin_t} B, Kmax {kmax_t} B, Pmax {pmax_t}, fit error {:.3}, \
             {} ECN-capable packets between Kmin and Kmax ({} marked of {})",
            m.fit_rmse.unwrap_or(0.0),
            m.between,
            m.marked,
            m.ect_in
        );
        if let Some((ckmin, ckmax, cpmax)) = opts.switch_ecn {
            // A configured value disagrees when it lies outside what the data allow by more than the
            // measurement can be off: the depth is delay × drain rate, and switches count their queue their
            // own way (cells, the frame being sent).
            let off = |i: Interval, v: f64, tol: f64| {
                v < i.low - tol || i.high.is_some_and(|h| v > h + tol)
            };
            if off(kmin, ckmin, 0.15 * ckmin.max(1.0))
                || off(kmax, ckmax, 0.15 * ckmax.max(1.0))
                || off(pmax, cpmax, 0.05)
            {
                out.push(Finding {
                    code: "ecn_curve_mismatch",
                    severity: Severity::Warning,
                    title: format!("{label}: the marking curve disagrees with the switch's configuration"),
                    detail: format!(
                        "The queue marked as if Kmin were {kmin_t} B, Kmax {kmax_t} B and Pmax {pmax_t}, \
                         not the configured Kmin {ckmin:.0} B, Kmax {ckmax:.0} B, Pmax {cpmax:.2} \
                         (--switch-ecn): the configuration may not be applied to this queue, the queue may be \
                         counted in cells or compared at dequeue, or the drain rate may be off."
                    ),
                    evidence: vec![fitted.clone()],
                });
            }
        }
        if let Some(pfc) = q.pfc_depth_bytes
            && kmin.low > pfc
        {
            out.push(Finding {
                code: "marking_above_pfc",
                severity: Severity::Problem,
                title: format!("{label}: ECN marking starts above the PFC threshold"),
                detail: format!(
                    "Marking starts at {:.0} B of queue or deeper, but the switch paused the priority (PFC) \
                     when the queue held about {pfc:.0} B: PFC stops the senders before ECN slows them, so \
                     DCQCN acts too late. Lower Kmin below the PFC threshold.",
                    kmin.low
                ),
                evidence: vec![fitted],
            });
        }
    }
    for h in hops {
        if let Some(f) = drift_unknown(h) {
            out.push(f);
        }
        if let Some(l) = &h.loss {
            out.push(Finding {
                code: "unmatched_between_taps",
                severity: if h.only_from > 0 {
                    Severity::Warning
                } else {
                    Severity::Info
                },
                title: format!(
                    "hop {} → {}: {} packets seen at one tap only",
                    h.from, h.to, h.unmatched
                ),
                detail: l.clone(),
                evidence: vec![format!(
                    "{} matched, {} only upstream, {} only downstream",
                    h.matched, h.only_from, h.only_to
                )],
            });
        }
    }
    out
}

/// A hop whose clocks' drift the windows could not pin, when what that may cost reaches a frame's worth of
/// queue: the user must know that its depths rest on an assumed drift.
fn drift_unknown(h: &HopReport) -> Option<Finding> {
    let (frame_ns, gbps) = h.frame_time;
    let [low, high] = h.drift_range_ppm?;
    if h.drift_known || h.clock_error_ns < frame_ns || frame_ns <= 0.0 {
        return None;
    }
    let bytes = |ns: f64| ns * gbps / 8.0;
    Some(Finding {
        code: "clock_drift_unknown",
        severity: Severity::Warning,
        title: format!(
            "hop {} → {}: the clocks' drift cannot be told from a standing queue",
            h.from, h.to
        ),
        detail: format!(
            "The least delay of this hop did not come back to one line in most clock windows, and no hop \
             between the same two capture files (the other way, where ACKs and CNPs usually find the queue \
             empty) did either: a queue that never empties and a drift between the two clocks look alike, \
             and so does a drift beyond --max-drift-ppm. Any drift from {low:+.1} to {high:+.1} ppm fits; the \
             delays and depths assume {:+.1} ppm and may be off by up to {:.0} ns, {:.0} B of queue at \
             {gbps:.0} Gb/s. Capture both directions of the traffic at both taps, or give the capturing hosts \
             one clock (PTP).",
            h.drift_ppm,
            h.clock_error_ns,
            bytes(h.clock_error_ns)
        ),
        evidence: vec![format!(
            "{} packets matched; a clock window counted as an empty queue when its least delay came within \
             {frame_ns:.0} ns of the line (the largest frame, {:.0} B, at {gbps:.0} Gb/s)",
            h.matched,
            bytes(frame_ns)
        )],
    })
}
