//! The capture's data flows summed on the rate grid: the [`Traffic`] view of every flow (a clean run still has
//! its throughput to show) and the aggregate of the flows DCQCN acted on. A sum never reads more than the
//! links could carry.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rustc_hash::FxHashMap;

use roce_core::line::LineRate;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::occupancy::Peak;
use roce_core::passes::rates::{Bin, FlowSeries, gbps, within_line};

use super::grid::Grid;
use super::report::{AggregateBin, BusyFlow, LinkPeak, RateBin, Traffic};

/// Flows the [`Traffic`] view keeps a series of, the busiest by bytes.
pub const BUSIEST_FLOWS: usize = 8;

impl Traffic {
    /// The view of `chosen` (one series per flow, at the tap that saw most of it), with `peak`, the busiest
    /// link bin the rates pass found; the taps' names are filled in later. `every` holds each flow's series
    /// at every tap: a CE mark is made on the way and never cleared, so each flow's marks are those of the
    /// tap that saw most of them (the furthest along its path), where the tap that saw most of its packets
    /// may be the sender's, which saw none.
    pub(super) fn of(
        chosen: &[&FlowSeries],
        every: &[FlowSeries],
        grid: Grid,
        peak: Option<Peak>,
        line_of: impl Fn(u32) -> LineRate,
    ) -> Traffic {
        let mut marks: FxHashMap<FlowKey, u64> = FxHashMap::default();
        for s in every {
            let ce = s.ce_marked();
            let m = marks.entry(s.key).or_default();
            *m = (*m).max(ce);
        }
        let mut all = Aggregate::default();
        let (mut data_packets, mut ce_packets) = (0u64, 0u64);
        for s in chosen {
            all.add(s);
            data_packets += s.packets();
            ce_packets += marks.get(&s.key).copied().unwrap_or(0);
        }
        let bytes = |s: &FlowSeries| s.bins.iter().map(|b| b.bytes).sum::<u64>();
        let mut by_bytes: Vec<(u64, &FlowSeries)> = chosen.iter().map(|s| (bytes(s), *s)).collect();
        // Most bytes first; the flow key breaks ties, so the choice is stable.
        by_bytes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.key.cmp(&b.1.key)));
        let busiest = by_bytes
            .into_iter()
            .take(BUSIEST_FLOWS)
            .map(|(bytes, s)| BusyFlow {
                sender: s.key.src,
                receiver: s.key.dst,
                receiver_qp: s.key.dest_qp,
                iface: s.iface,
                bytes,
                observed: within_line(&s.bins, grid.capacity(line_of(s.iface)))
                    .iter()
                    .map(|b| RateBin {
                        t_ns: grid.bin_start(b.index as usize),
                        gbps: gbps(b.bytes, grid.width),
                    })
                    .collect(),
            })
            .collect();
        Traffic {
            flows: chosen.len(),
            data_packets,
            ce_packets,
            peak: peak.map(|p| LinkPeak {
                iface: p.iface,
                tap: String::new(),
                t_ns: grid.bin_start(p.index as usize),
                gbps: p.gbps,
                line: p.line,
            }),
            aggregate: all.finish(grid, &line_of),
            busiest,
        }
    }
}

/// Bytes, CE marks and packets of many flows per bin index (a map: the busy bins are sparse). Flows to one
/// receiver seen at one tap cross one link direction, whose line bounds their sum: each such group is kept
/// within its line ([`within_line`]) before the groups are added up, so that no bin reads more than the links
/// could carry.
#[derive(Debug, Default)]
pub(super) struct Aggregate {
    /// (tap, receiver) → the group's bins.
    groups: BTreeMap<(u32, IpAddr), Sums>,
}

/// Per bin index: bytes, CE packets, packets.
type Sums = BTreeMap<u32, (u64, u64, u64)>;

impl Aggregate {
    pub(super) fn add(&mut self, s: &FlowSeries) {
        let group = self.groups.entry((s.iface, s.key.dst)).or_default();
        for b in &s.bins {
            let e = group.entry(b.index).or_default();
            e.0 = e.0.saturating_add(b.bytes);
            e.1 += u64::from(b.ce);
            e.2 += u64::from(b.packets);
        }
    }

    pub(super) fn finish(self, grid: Grid, line_of: impl Fn(u32) -> LineRate) -> Vec<AggregateBin> {
        let mut all = Sums::new();
        for ((iface, _), group) in self.groups {
            let bins: Vec<Bin> = group
                .iter()
                .map(|(&index, &(bytes, ce, packets))| Bin {
                    index,
                    bytes,
                    ce: u32::try_from(ce).unwrap_or(u32::MAX),
                    packets: u32::try_from(packets).unwrap_or(u32::MAX),
                    ..Bin::default()
                })
                .collect();
            for b in within_line(&bins, grid.capacity(line_of(iface))) {
                let e = all.entry(b.index).or_default();
                e.0 = e.0.saturating_add(b.bytes);
                e.1 += group.get(&b.index).map_or(0, |g| g.1);
                e.2 += group.get(&b.index).map_or(0, |g| g.2);
            }
        }
        all.into_iter()
            .map(|(i, (bytes, ce, packets))| AggregateBin {
                t_ns: grid.bin_start(i as usize),
                gbps: gbps(bytes, grid.width),
                ce_fraction: ce as f64 / packets.max(1) as f64,
            })
            .collect()
    }
}
