//! The slow pairs: how far below the median pair each runs, and the evidence of its own that explains it.
//!
//! An all-to-all gives every pair the same work, so the median pair is what the fabric delivers and a pair
//! well below it is the one to look at. Each slow pair's reasons come from its own numbers only: CE marks
//! (a queue on its path was above the switch's marking threshold), CNPs (its receiver told its sender to slow
//! down), PFC pauses at its ends, and retransmissions or PSNs never seen (loss). A pair with none of these was
//! not held back by the network the capture saw: its application or its sender gave it less to send.

use serde::Serialize;

use super::PairRow;
use roce_core::units::fmt_rate;

/// A pair runs slow below this share of the median pair's rate; within a tenth of it, pairs of one
/// collective differ by no more than their start and end times and their message sizes make them.
pub const SLOW_BELOW: f64 = 0.9;

/// A CE-marked share of a pair's packets from which the marks are a reason: below a hundredth, a queue
/// crossed the marking threshold now and then, as any busy fabric's does.
pub const CE_REASON: f64 = 0.01;

/// A share of the capture's span paused by PFC from which the pauses are a reason.
pub const PAUSE_REASON: f64 = 0.01;

/// One slow pair.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlowPair {
    /// The data's sender.
    pub src: std::net::IpAddr,
    /// The data's receiver.
    pub dst: std::net::IpAddr,
    /// The pair's rate over the capture's span.
    pub gbps: f64,
    /// The median pair's rate.
    pub median_gbps: f64,
    /// `gbps` / `median_gbps`: the pairs are ranked by it, lowest first.
    pub share_of_median: f64,
    /// What held it back, as the capture shows it.
    pub reasons: Vec<Reason>,
}

/// One reason a pair runs slow: a code for scripts and the words for a person.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Reason {
    /// `ce_marked`, `cnps`, `pfc_paused`, `retransmitting`, or `not_the_network` when none of these.
    pub code: &'static str,
    /// The evidence in words.
    pub text: String,
}

/// The median of `values`: the middle one, or the mean of the two middle ones.
pub(super) fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The pairs below [`SLOW_BELOW`] of the median, slowest first (the lower address pair first on a tie).
pub(super) fn rank(pairs: &[PairRow], median_gbps: Option<f64>, span_ns: u64) -> Vec<SlowPair> {
    let Some(median) = median_gbps.filter(|m| *m > 0.0) else {
        return Vec::new();
    };
    let mut slow: Vec<SlowPair> = pairs
        .iter()
        .filter_map(|p| {
            let gbps = p.gbps?;
            let share = gbps / median;
            (share < SLOW_BELOW).then(|| SlowPair {
                src: p.src,
                dst: p.dst,
                gbps,
                median_gbps: median,
                share_of_median: share,
                reasons: reasons(p, span_ns),
            })
        })
        .collect();
    slow.sort_by(|a, b| {
        a.share_of_median
            .total_cmp(&b.share_of_median)
            .then((a.src, a.dst).cmp(&(b.src, b.dst)))
    });
    slow
}

/// What the pair's own numbers say held it back.
fn reasons(p: &PairRow, span_ns: u64) -> Vec<Reason> {
    let mut out = Vec::new();
    if p.ce_fraction >= CE_REASON {
        out.push(Reason {
            code: "ce_marked",
            text: format!(
                "CE-marked: {:.1} % of its packets crossed a queue above the switch's marking threshold",
                100.0 * p.ce_fraction
            ),
        });
    }
    if p.cnps > 0 {
        out.push(Reason {
            code: "cnps",
            text: format!(
                "throttled by {} CNPs from {}, each a cut of the sender's rate",
                p.cnps, p.dst
            ),
        });
    }
    let paused = p
        .paused_ns
        .filter(|&ns| span_ns > 0 && ns as f64 >= PAUSE_REASON * span_ns as f64);
    if let Some(ns) = paused {
        out.push(Reason {
            code: "pfc_paused",
            text: format!(
                "paused by PFC {:.1} % of the capture",
                100.0 * ns as f64 / span_ns as f64
            ),
        });
    }
    if p.retransmitted > 0 || p.psn_gaps > 0 {
        out.push(Reason {
            code: "retransmitting",
            text: format!(
                "losing and retransmitting: {} packets sent again, {} PSNs never seen",
                p.retransmitted, p.psn_gaps
            ),
        });
    }
    if out.is_empty() {
        let rate = fmt_rate(p.gbps.unwrap_or(0.0) * 1e9);
        out.push(Reason {
            code: "not_the_network",
            text: match p.paused_ns {
                Some(_) => format!(
                    "no CE marks, CNPs, pauses or losses: at {rate} it was given less to send, by the \
                     application or the sender"
                ),
                None => format!(
                    "no CE marks, CNPs or losses: at {rate} it was given less to send, by the application \
                     or the sender, unless PFC paused it where the capture cannot place pauses"
                ),
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    fn pair(last: u8, gbps: f64) -> PairRow {
        PairRow {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 100)),
            flows: 1,
            packets: 1000,
            bytes: 0,
            gbps: Some(gbps),
            ce_packets: 0,
            ce_fraction: 0.0,
            cnps: 0,
            psn_gaps: 0,
            retransmitted: 0,
            priority: Some(3),
            paused_ns: Some(0),
        }
    }

    #[test]
    fn the_median_is_the_middle_value_or_the_mean_of_the_two() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0].into_iter()), Some(2.5));
        assert_eq!(median(std::iter::empty()), None);
    }

    #[test]
    fn pairs_within_the_tolerance_are_not_slow_and_the_rest_come_slowest_first() {
        let mut pairs = vec![
            pair(1, 10.0),
            pair(2, 9.5),
            pair(3, 8.0),
            pair(4, 10.2),
            pair(5, 3.0),
        ];
        pairs[4].ce_packets = 400;
        pairs[4].ce_fraction = 0.4;
        pairs[4].cnps = 12;
        pairs[2].retransmitted = 7;
        let m = median(pairs.iter().filter_map(|p| p.gbps));
        assert_eq!(m, Some(9.5));
        let slow = rank(&pairs, m, 1_000_000);
        let who: Vec<u8> = slow
            .iter()
            .map(|s| match s.src {
                IpAddr::V4(a) => a.octets()[3],
                IpAddr::V6(_) => 0,
            })
            .collect();
        assert_eq!(who, [5, 3]);
        let codes = |s: &SlowPair| s.reasons.iter().map(|r| r.code).collect::<Vec<_>>();
        assert_eq!(codes(&slow[0]), ["ce_marked", "cnps"]);
        assert_eq!(codes(&slow[1]), ["retransmitting"]);
        assert!((slow[0].share_of_median - 3.0 / 9.5).abs() < 1e-12);
    }

    #[test]
    fn a_slow_pair_without_evidence_is_not_the_network_and_says_when_pauses_are_unknown() {
        let mut p = pair(1, 1.0);
        assert_eq!(reasons(&p, 1_000)[0].code, "not_the_network");
        assert!(!reasons(&p, 1_000)[0].text.contains("unless"));
        p.paused_ns = None;
        assert!(reasons(&p, 1_000)[0].text.contains("unless PFC paused it"));
        p.paused_ns = Some(9);
        assert_eq!(reasons(&p, 1_000)[0].code, "not_the_network");
        p.paused_ns = Some(10);
        assert_eq!(reasons(&p, 1_000)[0].code, "pfc_paused");
        assert_eq!(
            reasons(&p, 1_000)[0].text,
            "paused by PFC 1.0 % of the capture"
        );
    }
}
