//! Where PFC stopped traffic: pause intervals (from the PFC pass, which owns the rules of wire.md), storms,
//! the flows that went quiet while their priority was paused, and priority checks.

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;

use roce_core::passes::flows::{FlowKey, FlowRow};
use roce_core::passes::rates::FlowSeries;

pub use roce_core::passes::pfc::PauseInterval;

/// A pause a PFC watchdog would act on: one source kept a priority paused without a break for longer than the
/// threshold.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Storm {
    /// The MAC that sent the pauses: a host's or a switch port's, which is where a watchdog would act.
    pub src_mac: String,
    /// The paused priority; null for 802.3x PAUSE (the whole link).
    pub priority: Option<u8>,
    /// When the unbroken pause began.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

/// A flow that sent before a pause and nothing while it lasted.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StalledFlow {
    /// The flow's sender.
    pub src: std::net::IpAddr,
    /// The flow's receiver.
    pub dst: std::net::IpAddr,
    /// The receiver's QP, which names the flow on the wire.
    pub dest_qp: u32,
    /// The flow's priority, to show it was the paused one.
    pub priority: Option<u8>,
}

/// The flows that stalled during one pause interval.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Stall {
    /// The MAC that sent the pause.
    pub src_mac: String,
    /// The host that sent the pause, when `src_mac` belongs to one (not to a switch port).
    pub pauser_ip: Option<std::net::IpAddr>,
    /// The paused priority; null for 802.3x PAUSE (the whole link).
    pub priority: Option<u8>,
    /// When the pause began.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
    /// The flows that were sending before and went quiet during it.
    pub flows: Vec<StalledFlow>,
}

/// The share of one bin during which a priority was paused by at least one source.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PausedBin {
    /// None for 802.3x PAUSE (the whole link).
    pub priority: Option<u8>,
    /// Start of the bin.
    pub t_ns: u64,
    /// Share of the bin the priority was paused, from 0 to 1.
    pub fraction: f64,
}

/// What PFC did in the capture: who paused what and when, and what it stopped.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PauseReport {
    /// Every pause interval, merged per source and priority, for the timeline.
    pub intervals: Vec<PauseInterval>,
    /// Per paused priority, on the rate bins' grid: how much of each bin it was paused.
    pub paused_fraction: Vec<PausedBin>,
    /// Width of the bins of `paused_fraction`: the rate bins' width, or a power-of-two multiple of it (so the
    /// grids still line up) when the capture's span would need more than [`MAX_PAUSED_BINS`] a priority.
    pub paused_bin_ns: u64,
    /// Pauses longer than the storm threshold.
    pub storms: Vec<Storm>,
    /// Pauses during which flows that had been sending went quiet.
    pub stalls: Vec<Stall>,
    /// The capture's first frame, the left edge of the timeline.
    pub start_ns: u64,
    /// The capture's last frame, the right edge.
    pub end_ns: u64,
    /// The threshold `storms` were found with, so they can be read against it.
    pub storm_threshold_ns: u64,
    /// Priorities that PFC frames paused at some point: the ones the fabric treats as lossless.
    pub paused_priorities: Vec<u8>,
    /// Priorities carrying RoCE data that no PFC frame ever named, when PFC is in use at all.
    pub roce_on_unpaused_priorities: Vec<u8>,
    /// Priorities paused although no RoCE flow was seen on them.
    pub paused_without_roce: Vec<u8>,
}

/// Bins of `paused_fraction` per priority at most. The rate bins are bounded per flow, over each flow's own
/// span; these cover the whole capture, so a long capture with short flows (or one far timestamp) would
/// otherwise ask for a bin per rate-bin width over hours or years, for every paused priority.
pub const MAX_PAUSED_BINS: u64 = 1 << 16;

/// Default storm threshold. Switch watchdogs act after hundreds of ms on a production fabric; the default here
/// suits captures of a few ms (the teaching samples). Set it to the watchdog's detection time for long captures.
pub const DEFAULT_STORM_THRESHOLD_NS: u64 = 500_000;

/// The inputs of the analysis: what the streaming passes produced.
#[derive(Debug)]
pub(crate) struct PauseInputs<'a> {
    pub(crate) intervals: Vec<PauseInterval>,
    pub flows: &'a [FlowRow],
    pub series: &'a [FlowSeries],
    pub bins_start_ns: u64,
    pub bin_ns: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub storm_threshold_ns: u64,
    /// MAC → IP of hosts, learned from their RoCE frames.
    pub hosts: &'a [(String, std::net::IpAddr)],
}

pub(crate) fn analyse(inp: PauseInputs<'_>) -> PauseReport {
    // The flow table by key (the first row of a key, as a search of the table finds it), looked up for every
    // series at every pause.
    let mut rows: FxHashMap<FlowKey, &FlowRow> = FxHashMap::default();
    for f in inp.flows {
        let key = f.key();
        rows.entry(key).or_insert(f);
    }
    let storms = inp
        .intervals
        .iter()
        .filter(|i| i.end_ns - i.start_ns >= inp.storm_threshold_ns)
        .map(|i| Storm {
            src_mac: i.src_mac.clone(),
            priority: i.priority,
            start_ns: i.start_ns,
            end_ns: i.end_ns,
        })
        .collect();
    // The series that can stall, with their priority: those of data flows (ACK-only streams stop because the
    // data they acknowledge stopped). Found once, not at every pause: the opcodes are names to search.
    let data: Vec<(&FlowSeries, Option<u8>)> = inp
        .series
        .iter()
        .filter_map(|s| {
            let row = rows.get(&s.key)?;
            let data = row.opcodes.keys().any(|op| !op.contains("ACKNOWLEDGE"));
            data.then_some((s, row.priority))
        })
        .collect();
    // Each pause on its own, over the caller's rayon pool, in the intervals' order.
    let stalls = inp
        .intervals
        .par_iter()
        .filter_map(|i| {
            let flows = stalled_flows(i, &inp, &data);
            (!flows.is_empty()).then(|| Stall {
                src_mac: i.src_mac.clone(),
                pauser_ip: inp
                    .hosts
                    .iter()
                    .find(|(m, _)| *m == i.src_mac)
                    .map(|(_, ip)| *ip),
                priority: i.priority,
                start_ns: i.start_ns,
                end_ns: i.end_ns,
                flows,
            })
        })
        .collect();
    let mut paused: Vec<u8> = inp.intervals.iter().filter_map(|i| i.priority).collect();
    paused.sort_unstable();
    paused.dedup();
    let mut roce: Vec<u8> = inp.flows.iter().filter_map(|f| f.priority).collect();
    roce.sort_unstable();
    roce.dedup();
    let roce_on_unpaused = if paused.is_empty() {
        Vec::new()
    } else {
        roce.iter()
            .copied()
            .filter(|p| !paused.contains(p))
            .collect()
    };
    let paused_without_roce = paused
        .iter()
        .copied()
        .filter(|p| !roce.contains(p))
        .collect();
    let (paused_fraction, paused_bin_ns) = paused_fraction(&inp);
    PauseReport {
        intervals: inp.intervals.clone(),
        paused_fraction,
        paused_bin_ns,
        storms,
        stalls,
        start_ns: inp.start_ns,
        end_ns: inp.end_ns,
        storm_threshold_ns: inp.storm_threshold_ns,
        paused_priorities: paused,
        roce_on_unpaused_priorities: roce_on_unpaused,
        paused_without_roce,
    }
}

/// Data flows on the paused priority (any priority for 802.3x PAUSE) that, at some tap, sent in the bin before
/// the pause and in none of the bins wholly inside it. Pauses shorter than a bin cannot be judged and are
/// skipped. `data` holds the series of data flows, each with its priority.
fn stalled_flows(
    i: &PauseInterval,
    inp: &PauseInputs<'_>,
    data: &[(&FlowSeries, Option<u8>)],
) -> Vec<StalledFlow> {
    let w = inp.bin_ns.max(1);
    let first_full = (i.start_ns.saturating_sub(inp.bins_start_ns)).div_ceil(w) as usize;
    let end_full = (i.end_ns.saturating_sub(inp.bins_start_ns) / w) as usize;
    if end_full <= first_full || first_full == 0 {
        return Vec::new();
    }
    let mut out: Vec<StalledFlow> = Vec::new();
    for &(s, pcp) in data {
        if i.priority.is_some() && pcp != i.priority {
            continue;
        }
        // A flow that stalled at one tap is named once.
        if out
            .iter()
            .any(|f| f.src == s.key.src && f.dst == s.key.dst && f.dest_qp == s.key.dest_qp)
        {
            continue;
        }
        let before = s.get(first_full - 1).is_some();
        let during = s.busy_in(first_full..end_full);
        if before && !during {
            out.push(StalledFlow {
                src: s.key.src,
                dst: s.key.dst,
                dest_qp: s.key.dest_qp,
                priority: pcp,
            });
        }
    }
    out
}

/// Coverage of each bin by the union of the pauses of each priority (overlapping pauses from several sources
/// count once), and the bins' width.
fn paused_fraction(inp: &PauseInputs<'_>) -> (Vec<PausedBin>, u64) {
    let span = inp.end_ns.saturating_sub(inp.bins_start_ns);
    let mut w = inp.bin_ns.max(1);
    while span / w >= MAX_PAUSED_BINS {
        w = w.saturating_mul(2);
    }
    let mut prios: Vec<Option<u8>> = inp.intervals.iter().map(|i| i.priority).collect();
    prios.sort_unstable();
    prios.dedup();
    let bins = (span / w + 1) as usize;
    let mut out = Vec::new();
    for prio in prios {
        // Merge this priority's intervals into disjoint spans.
        let mut spans: Vec<(u64, u64)> = inp
            .intervals
            .iter()
            .filter(|i| i.priority == prio)
            .map(|i| (i.start_ns, i.end_ns))
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in spans {
            match merged.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let mut covered = vec![0u64; bins];
        for (a, b) in merged {
            let mut t = a.max(inp.bins_start_ns);
            while t < b {
                let k = ((t - inp.bins_start_ns) / w) as usize;
                let bin_end = inp
                    .bins_start_ns
                    .saturating_add((k as u64 + 1).saturating_mul(w));
                let upto = b.min(bin_end);
                if let Some(c) = covered.get_mut(k) {
                    *c += upto - t;
                }
                t = upto;
            }
        }
        out.extend(covered.iter().enumerate().map(|(k, &c)| {
            PausedBin {
                priority: prio,
                t_ns: inp
                    .bins_start_ns
                    .saturating_add((k as u64).saturating_mul(w)),
                fraction: c as f64 / w as f64,
            }
        }));
    }
    (out, w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(priority: Option<u8>, start_ns: u64, end_ns: u64) -> PauseInterval {
        PauseInterval {
            iface: 0,
            src_mac: "02:00:00:00:00:01".into(),
            priority,
            start_ns,
            end_ns,
        }
    }

    fn inputs(intervals: Vec<PauseInterval>, bin_ns: u64, end_ns: u64) -> PauseInputs<'static> {
        PauseInputs {
            intervals,
            flows: &[],
            series: &[],
            bins_start_ns: 0,
            bin_ns,
            start_ns: 0,
            end_ns,
            storm_threshold_ns: DEFAULT_STORM_THRESHOLD_NS,
            hosts: &[],
        }
    }

    /// Paused time per priority, summed back from the bins.
    fn paused_ns(bins: &[PausedBin], w: u64, priority: Option<u8>) -> f64 {
        bins.iter()
            .filter(|b| b.priority == priority)
            .map(|b| b.fraction * w as f64)
            .sum()
    }

    #[test]
    fn the_rate_grid_is_kept_while_it_is_small_enough() {
        let inp = inputs(vec![interval(Some(3), 25, 75)], 10, 100);
        let (bins, w) = paused_fraction(&inp);
        assert_eq!(w, 10);
        let fractions: Vec<f64> = bins.iter().map(|b| b.fraction).collect();
        assert_eq!(
            fractions,
            [0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0, 0.0]
        );
    }

    #[test]
    fn a_long_span_widens_the_bins_instead_of_asking_for_billions() {
        // 10 µs rate bins over a year: 3e12 bins a priority before the bound.
        let year = 365 * 24 * 3_600 * 1_000_000_000u64;
        let inp = inputs(
            vec![
                interval(Some(3), 1_000, 5_000_000_000),
                interval(None, year / 2, year / 2 + 7_000_000_000),
            ],
            10_000,
            year,
        );
        let (bins, w) = paused_fraction(&inp);
        assert!(w > 10_000 && (w / 10_000).is_power_of_two(), "{w}");
        assert!(year / w < MAX_PAUSED_BINS && year / (w / 2) >= MAX_PAUSED_BINS);
        assert_eq!(bins.len() as u64, 2 * (year / w + 1));
        assert!((paused_ns(&bins, w, Some(3)) - 4_999_999_000.0).abs() < 1.0);
        assert!((paused_ns(&bins, w, None) - 7_000_000_000.0).abs() < 1.0);
        assert!(bins.iter().all(|b| b.t_ns % w == 0));
    }

    #[test]
    fn the_end_of_time_is_a_bounded_grid_too() {
        let inp = inputs(
            vec![interval(Some(0), u64::MAX - 10, u64::MAX)],
            1,
            u64::MAX,
        );
        let (bins, w) = paused_fraction(&inp);
        assert!(
            bins.len() as u64 <= MAX_PAUSED_BINS + 1,
            "{} bins of {w} ns",
            bins.len()
        );
        assert!((paused_ns(&bins, w, Some(0)) - 10.0).abs() < 1e-6);
    }
}
