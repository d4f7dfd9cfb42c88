//! The notification point, as a tap near the receiver sees it: how long after a CE-marked data packet the
//! receiver's CNP went out, and whether CNPs keep the NP's pacing (at most one per QP per
//! `min_time_between_cnps`). Written here rather than taken from the pairing pass, which pairs CNPs with flows
//! but does not time them against the marks.

use std::collections::BTreeMap;

use roce_core::decode::{ECN_CE, Kind};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::hist::{Hist, Percentiles};
use super::matching::Seen;

#[derive(Debug, Default)]
struct TapNp {
    cnps: u64,
    answered: u64,
    latency: Hist,
    min_spacing: Option<u64>,
    below_gap: u64,
    qps: FxHashSet<(u128, u32)>,
}

/// The NP check over every tap.
#[derive(Debug, Default)]
pub(crate) struct NpCheck {
    /// (tap, data sender, data receiver) → the first CE data packet not yet answered by a CNP.
    pending: FxHashMap<(u32, u128, u128), u64>,
    /// (tap, CNP destination, destination QP) → the previous CNP.
    last: FxHashMap<(u32, u128, u32), u64>,
    /// (tap, data sender, data receiver) → the previous CNP between them: CE marks inside the NP's least
    /// gap after it are ones the NP rightly ignores, so they start no latency.
    last_pair: FxHashMap<(u32, u128, u128), u64>,
    taps: BTreeMap<u32, TapNp>,
}

/// What one tap showed of the notification point.
#[derive(Debug, Clone, Serialize)]
pub struct NpReport {
    /// The tap's name (`FILE:IFACE`).
    pub tap: String,
    /// CNPs seen at the tap.
    pub cnps: u64,
    /// QPs the CNPs were sent to.
    pub qps: usize,
    /// CNPs that followed a CE-marked data packet to their sender at this tap.
    pub answered: u64,
    /// From the CE-marked packet to the CNP that answered it: the NP's reaction time as this tap sees it.
    pub ce_to_cnp_ns: Option<Percentiles>,
    /// Least time between two CNPs to one QP.
    pub min_spacing_ns: Option<u64>,
    /// Spacings shorter than the NP's configured least time (`--np-min-gap`).
    pub below_min_gap: u64,
    /// The least time the check used, so `below_min_gap` can be read against it.
    pub min_gap_ns: u64,
}

impl NpCheck {
    #[inline]
    pub fn frame(&mut self, s: &Seen, min_gap_ns: u64) {
        let Some(key) = s.key.as_ref() else {
            return;
        };
        let (src, dst) = (key.src, key.dst);
        let (tap, ts) = (s.copy.tap, s.copy.ts);
        match s.kind {
            Kind::Roce => {
                // Most packets are not CE-marked data: only those pay for the lookups.
                if s.copy.ecn != ECN_CE || key.payload_len == 0 {
                    return;
                }
                let quiet = self
                    .last_pair
                    .get(&(tap, src, dst))
                    .is_some_and(|&t| ts < t.saturating_add(min_gap_ns));
                if !quiet {
                    self.pending.entry((tap, src, dst)).or_insert(ts);
                }
            }
            Kind::Cnp => {
                let t = self.taps.entry(tap).or_default();
                t.cnps += 1;
                t.qps.insert((dst, key.dest_qp));
                // The CNP goes from the data's receiver back to its sender.
                self.last_pair.insert((tap, dst, src), ts);
                if let Some(ce) = self.pending.remove(&(tap, dst, src)) {
                    t.answered += 1;
                    t.latency.add(ts.saturating_sub(ce));
                }
                if let Some(prev) = self.last.insert((tap, dst, key.dest_qp), ts) {
                    let gap = ts.saturating_sub(prev);
                    t.min_spacing = Some(t.min_spacing.map_or(gap, |m| m.min(gap)));
                    if gap < min_gap_ns {
                        t.below_gap += 1;
                    }
                }
            }
            _ => {}
        }
    }

    pub fn finish(self, name: impl Fn(u32) -> String, min_gap_ns: u64) -> Vec<NpReport> {
        self.taps
            .into_iter()
            .map(|(tap, t)| NpReport {
                tap: name(tap),
                cnps: t.cnps,
                qps: t.qps.len(),
                answered: t.answered,
                ce_to_cnp_ns: (t.latency.count() > 0).then(|| t.latency.percentiles()),
                min_spacing_ns: t.min_spacing,
                below_min_gap: t.below_gap,
                min_gap_ns,
            })
            .collect()
    }
}
