//! What the sender was seen to send: its busy bins as rates, each marked when PFC (or PAUSE) held the flow
//! back during it, and the rate drop seen after each burst of CNPs. A paused bin says nothing of the rate
//! limiter, so every comparison with the model leaves it out.

use roce_core::passes::pfc::PauseInterval;
use roce_core::passes::rates::{Bin, gbps};

use super::Options;
use super::grid::Grid;
use super::report::{Observed, ObservedCut};

/// The time PFC paused each priority (index 0–7) and 802.3x PAUSE the whole link (index 8), as disjoint
/// sorted spans. Every pause counts, from any source at any tap: a pause anywhere on a priority can hold its
/// senders back through the switches between, and leaving out a bin too many costs a comparison, where
/// keeping a paused one blames the rate limiter for PFC.
#[derive(Debug, Default)]
pub(super) struct Paused {
    spans: [Vec<(u64, u64)>; 9],
}

impl Paused {
    pub(super) fn new(pauses: &[PauseInterval]) -> Paused {
        let mut p = Paused::default();
        for i in pauses.iter().filter(|i| i.end_ns > i.start_ns) {
            let k = i.priority.map_or(8, |q| usize::from(q.min(7)));
            p.spans[k].push((i.start_ns, i.end_ns));
        }
        for v in &mut p.spans {
            v.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
            for &(a, b) in v.iter() {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            *v = merged;
        }
        p
    }

    /// Whether a flow on `priority` (any priority when unknown) was paused at some time in `[a, b)`.
    pub(super) fn during(&self, priority: Option<u8>, a: u64, b: u64) -> bool {
        let hits = |v: &Vec<(u64, u64)>| {
            let k = v.partition_point(|s| s.1 <= a);
            v.get(k).is_some_and(|s| s.0 < b)
        };
        match priority {
            Some(q) => hits(&self.spans[usize::from(q.min(7))]) || hits(&self.spans[8]),
            None => self.spans.iter().any(hits),
        }
    }
}

/// The flow's busy bins as rates, each marked when a pause overlapped it.
pub(super) fn observed_series(
    bins: &[Bin],
    grid: Grid,
    paused: impl Fn(u64, u64) -> bool,
) -> Vec<Observed> {
    bins.iter()
        .map(|b| {
            let t = grid.bin_start(b.index as usize);
            Observed {
                t_ns: t,
                gbps: gbps(b.bytes, grid.width),
                ce_fraction: if b.packets > 0 {
                    f64::from(b.ce) / f64::from(b.packets)
                } else {
                    0.0
                },
                pacing_gbps: (b.gap_ns > 0).then(|| gbps(b.paced_bytes, b.gap_ns)),
                paused: paused(t, t.saturating_add(grid.width)),
            }
        })
        .collect()
}

/// Groups CNPs into bursts and measures the rate before each burst and its low point after it, in unpaused
/// bins only.
pub(super) fn observed_cuts(
    cnps: &[u64],
    observed: &[Observed],
    width: u64,
    opts: &Options,
) -> Vec<ObservedCut> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cnps.len() {
        let first = cnps[i];
        let mut j = i + 1;
        while j < cnps.len() && cnps[j] - cnps[j - 1] < opts.burst_gap_ns {
            j += 1;
        }
        // Bins are in time order: find the neighbourhood of the burst by bisection.
        let from =
            observed.partition_point(|o| o.t_ns.saturating_add(width.saturating_mul(4)) <= first);
        let before: Vec<f64> = observed[from..]
            .iter()
            .take_while(|o| o.t_ns.saturating_add(width) <= first)
            .filter(|o| o.gbps > 0.0 && !o.paused)
            .map(|o| o.gbps)
            .collect();
        let at = observed.partition_point(|o| o.t_ns < first);
        let after = observed[at..]
            .iter()
            .take_while(|o| o.t_ns < first.saturating_add(opts.reaction_window_ns))
            // Idle and paused bins say nothing about the rate limiter (dcqcn.md).
            .filter(|o| o.gbps > 0.0 && !o.paused)
            .min_by(|a, b| a.gbps.total_cmp(&b.gbps));
        if let (false, Some(low)) = (before.is_empty(), after) {
            let before_gbps = before.iter().sum::<f64>() / before.len() as f64;
            out.push(ObservedCut {
                t_ns: first,
                cnps: (j - i) as u64,
                lag_ns: low.t_ns - first,
                before_gbps,
                after_gbps: low.gbps,
                ratio: if before_gbps > 0.0 {
                    low.gbps / before_gbps
                } else {
                    0.0
                },
            });
        }
        i = j;
    }
    out
}
