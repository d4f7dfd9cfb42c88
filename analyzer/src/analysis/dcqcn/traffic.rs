//! The capture's data flows summed on the rate grid: the [`Traffic`] view of every flow (a clean run still has
//! its throughput to show) and the aggregate of the flows DCQCN acted on. A sum never reads more than the
//! links could carry.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rayon::prelude::*;
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
        line_of: impl Fn(u32) -> LineRate + Sync,
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

/// Bytes, CE marks and packets of many flows per bin index. Flows to one receiver seen at one tap cross one
/// link direction, whose line bounds their sum: each such group is kept within its line ([`within_line`])
/// before the groups are added up, so that no bin reads more than the links could carry.
///
/// The flows are only gathered by group as they come; [`Aggregate::finish`] sums each group's bins by
/// sorting them, the groups over the threads. Summing bin by bin into ordered maps took about 30 ms of one thread
/// on the benchmark capture (4,096 flows) while the others waited. The sums are of whole numbers, so the
/// order they are taken in changes nothing.
#[derive(Debug, Default)]
pub(super) struct Aggregate<'a> {
    /// (tap, receiver) → the group's flows.
    groups: BTreeMap<(u32, IpAddr), Vec<&'a FlowSeries>>,
}

/// One bin index's sums: (index, bytes, CE packets, packets).
type Sums = (u32, u64, u64, u64);

impl<'a> Aggregate<'a> {
    pub(super) fn add(&mut self, s: &'a FlowSeries) {
        self.groups.entry((s.iface, s.key.dst)).or_default().push(s);
    }

    pub(super) fn finish(
        self,
        grid: Grid,
        line_of: impl Fn(u32) -> LineRate + Sync,
    ) -> Vec<AggregateBin> {
        let groups: Vec<((u32, IpAddr), Vec<&FlowSeries>)> = self.groups.into_iter().collect();
        let parts: Vec<Vec<Sums>> = groups
            .par_iter()
            .map(|((iface, _), flows)| {
                let sums = summed(flows.iter().flat_map(|s| {
                    s.bins
                        .iter()
                        .map(|b| (b.index, b.bytes, u64::from(b.ce), u64::from(b.packets)))
                }));
                let bins: Vec<Bin> = sums
                    .iter()
                    .map(|&(index, bytes, ce, packets)| Bin {
                        index,
                        bytes,
                        ce: u32::try_from(ce).unwrap_or(u32::MAX),
                        packets: u32::try_from(packets).unwrap_or(u32::MAX),
                        ..Bin::default()
                    })
                    .collect();
                // The bytes as the line bounds them (which may move some into earlier bins of their own);
                // the packet and CE counts where they were, as the group counted them.
                let mut part: Vec<Sums> = within_line(&bins, grid.capacity(line_of(*iface)))
                    .iter()
                    .map(|b| (b.index, b.bytes, 0, 0))
                    .collect();
                part.extend(
                    sums.iter()
                        .map(|&(index, _, ce, packets)| (index, 0, ce, packets)),
                );
                part
            })
            .collect();
        summed(parts.into_iter().flatten())
            .into_iter()
            .map(|(i, bytes, ce, packets)| AggregateBin {
                t_ns: grid.bin_start(i as usize),
                gbps: gbps(bytes, grid.width),
                ce_fraction: ce as f64 / packets.max(1) as f64,
            })
            .collect()
    }
}

/// The sums per bin index, in index order.
fn summed(items: impl Iterator<Item = Sums>) -> Vec<Sums> {
    let mut all: Vec<Sums> = items.collect();
    all.sort_unstable_by_key(|e| e.0);
    let mut out: Vec<Sums> = Vec::new();
    for (index, bytes, ce, packets) in all {
        match out.last_mut() {
            Some(last) if last.0 == index => {
                last.1 = last.1.saturating_add(bytes);
                last.2 += ce;
                last.3 += packets;
            }
            _ => out.push((index, bytes, ce, packets)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums come out in index order, one per index, whatever order the bins came in; bytes saturate.
    #[test]
    fn sums_are_per_index_in_order() {
        let got = summed(
            [
                (7, 10, 1, 2),
                (3, 5, 0, 1),
                (7, u64::MAX, 2, 3),
                (3, 1, 1, 1),
                (5, 0, 0, 0),
            ]
            .into_iter(),
        );
        assert_eq!(got, vec![(3, 6, 1, 2), (5, 0, 0, 0), (7, u64::MAX, 3, 5)]);
    }
}
