//! Per-flow throughput and CE fraction over time, in bins, in memory bounded by a budget rather than by the
//! capture's length.
//!
//! Every flow shares one bin grid anchored at the first frame, so their series line up. A flow keeps only its
//! busy bins (a bursty flow on a long capture has few). The capture's span is unknown while streaming (and
//! stdin cannot be read twice), so the grid starts at [`MIN_BIN_NS`] and doubles its width, merging neighbours
//! in place, whenever the capture would span more than [`MAX_BINS`] bins or all flows together would hold more
//! than [`MAX_TOTAL_BINS`]: with many flows or a long span the bins are wider, never more numerous. With
//! `--bin` the width is fixed until that total (or a span beyond 2^32 bins) forces it wider too, and
//! [`RatesPass::requested_width_ns`] says it did. Only packets that carry payload count: acknowledgements, READ
//! requests and atomics carry none, and a flow of them is no data flow. The same grid holds each link
//! direction's busy time ([`super::occupancy`]), for a peak rate that no link exceeds.

use std::ops::Range;

use super::brief::Brief;
use super::flow_index::FlowIndex;
use super::flows::FlowKey;
use super::occupancy::{Occupancy, Peak};
use crate::decode::{ECN_CE, Kind};
use crate::line::LineRates;
use crate::priority::{PriorityMap, PrioritySource};

/// Bins over the capture's span before widths double (automatic mode): the resolution of a chart.
pub const MAX_BINS: usize = 4096;
/// Narrowest automatic bin: dcqcn.md compares rates in bins of at least 10 µs.
pub const MIN_BIN_NS: u64 = 10_000;
/// Busy bins over all flows (40 bytes each: 40 MiB) before widths double, in either mode. A capture of
/// thousands of flows sending throughout reaches it within seconds and then stays between half of it and all
/// of it, however long it runs; one record with a corrupt timestamp years ahead costs one more.
pub const MAX_TOTAL_BINS: usize = 1 << 20;

/// One busy bin of one flow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bin {
    /// Position on the grid: the bin starts at the grid's start + `index` × width.
    pub index: u32,
    /// Data packets (packets that carry payload) in the bin.
    pub packets: u32,
    /// Of them, CE-marked.
    pub ce: u32,
    /// Their bytes on the wire.
    pub bytes: u64,
    /// Bytes of packets that followed the flow's previous packet within [`PACING_GAP_MAX_NS`], and the sum of
    /// those gaps: their ratio is the rate the sender paced at while it was sending, idle time left out.
    pub paced_bytes: u64,
    /// The sum of the gaps that `paced_bytes` followed.
    pub gap_ns: u64,
}

impl Bin {
    fn add(&mut self, o: &Bin) {
        self.packets = self.packets.saturating_add(o.packets);
        self.ce = self.ce.saturating_add(o.ce);
        self.bytes = self.bytes.saturating_add(o.bytes);
        self.paced_bytes = self.paced_bytes.saturating_add(o.paced_bytes);
        self.gap_ns = self.gap_ns.saturating_add(o.gap_ns);
    }
}

/// Room for one more bin: a flow's bins grow by an eighth at a time, not by doubling (summed over thousands
/// of flows, doubling left up to as much unused room as the budget itself).
fn make_room(bins: &mut Vec<Bin>) {
    if bins.len() == bins.capacity() {
        bins.reserve_exact((bins.len() / 8).max(4));
    }
}

/// The bins with no more bytes in any than `capacity`, what the link carries in one bin.
///
/// A frame is stamped when its last bit arrived, so binning whole frames by timestamp puts all of a frame in
/// the bin where it ended, although the link began carrying it in the bin before: a saturated link then shows
/// one frame too many in some bins (eight 4 KiB frames in 10 µs at 25 Gb/s: 26.6 Gb/s). A bin above what its
/// link can carry held such frames, and its excess belongs to the bins before it: it is moved there, latest
/// bin first, so that every byte is still counted once. Packet, CE and pacing counts stay where they were. An
/// excess that would go before the grid's first bin was carried before the capture's first instant, outside
/// its span: it is left out.
pub fn within_line(bins: &[Bin], capacity: u64) -> Vec<Bin> {
    let capacity = capacity.max(1);
    let mut out: Vec<Bin> = Vec::with_capacity(bins.len());
    // Bytes moving back, and the bin they move into.
    let mut carry: Option<(u32, u64)> = None;
    for b in bins.iter().rev() {
        // A carry that reaches back past the gap to this bin opens bins of its own in between.
        while let Some((index, bytes)) = carry.filter(|&(i, _)| i > b.index) {
            out.push(Bin {
                index,
                bytes: bytes.min(capacity),
                ..Bin::default()
            });
            carry = (bytes > capacity).then(|| (index - 1, bytes - capacity));
        }
        let mut bin = *b;
        if let Some((_, bytes)) = carry.take() {
            bin.bytes = bin.bytes.saturating_add(bytes);
        }
        if bin.bytes > capacity {
            carry = (bin.index > 0).then(|| (bin.index - 1, bin.bytes - capacity));
            bin.bytes = capacity;
        }
        out.push(bin);
    }
    while let Some((index, bytes)) = carry {
        out.push(Bin {
            index,
            bytes: bytes.min(capacity),
            ..Bin::default()
        });
        carry = (bytes > capacity && index > 0).then(|| (index - 1, bytes - capacity));
    }
    out.reverse();
    out
}

/// Gaps longer than this are idle time, not pacing (a 9 KB frame at 1 Gb/s takes 72 µs).
pub const PACING_GAP_MAX_NS: u64 = 100_000;

#[derive(Debug, Clone, Default)]
struct Series {
    /// Busy bins before `open`, by index.
    bins: Vec<Bin>,
    /// The busy bin of the highest index (none before the flow's first frame). A flow's frames nearly all
    /// fall in it, and it sits with the rest of the flow's state: the vector, elsewhere on the heap, is read
    /// only when a bin closes or a frame comes late.
    open: Option<Bin>,
    last_ns: Option<u64>,
    /// The last frame's PCP (untagged: none) and DSCP.
    pcp: Option<u8>,
    dscp: Option<u8>,
    /// The flow's link direction in the pass's [`Occupancy`] ([`NO_WIRE`] until its first frame).
    wire: u32,
}

const NO_WIRE: u32 = u32::MAX;

/// One flow's series at the final bin width, as seen on one capture interface (tap).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSeries {
    /// The tap's index over the capture.
    pub iface: u32,
    /// The flow (src, dst, dest QP).
    pub key: FlowKey,
    /// The busy bins, in index order; a bin that is not here carried nothing.
    pub bins: Vec<Bin>,
    /// The last frame's PCP (none when untagged) and DSCP.
    pub pcp: Option<u8>,
    /// The last frame's DSCP.
    pub dscp: Option<u8>,
    /// The priority of the flow's frames, which decides the PFC pauses that stop it: from `pcp` and `dscp`
    /// through the default [`PriorityMap`] here; [`FlowSeries::resolve_priority`] applies another map.
    pub priority: Option<u8>,
    /// Whether `priority` came from the PCP or through the DSCP map.
    pub priority_source: Option<PrioritySource>,
}

impl FlowSeries {
    /// Takes the priority from `map`.
    pub fn resolve_priority(&mut self, map: &PriorityMap) {
        let p = map.resolve(self.pcp, self.dscp);
        self.priority = p.map(|p| p.0);
        self.priority_source = p.map(|p| p.1);
    }
}

impl FlowSeries {
    /// The bin at `index`, if the flow sent anything in it.
    pub fn get(&self, index: usize) -> Option<&Bin> {
        let i = u32::try_from(index).ok()?;
        self.bins
            .binary_search_by_key(&i, |b| b.index)
            .ok()
            .map(|k| &self.bins[k])
    }

    /// Whether the flow sent anything in the bins of `range`.
    pub fn busy_in(&self, range: Range<usize>) -> bool {
        let from = self
            .bins
            .partition_point(|b| (b.index as usize) < range.start);
        self.bins
            .get(from)
            .is_some_and(|b| (b.index as usize) < range.end)
    }

    /// Packets over the whole series.
    pub fn packets(&self) -> u64 {
        self.bins.iter().map(|b| u64::from(b.packets)).sum()
    }

    /// The CE-marked data packets this tap saw of the flow: a mark is made on the way and never cleared, so
    /// of two taps that saw the same packets, the one with more marks is further along the flow's path.
    pub fn ce_marked(&self) -> u64 {
        self.bins.iter().map(|b| u64::from(b.ce)).sum()
    }
}

/// Per-flow time series on one grid of bins, widened in place so that memory stays under one budget
/// however long the capture is.
#[derive(Debug)]
pub struct RatesPass {
    start_ns: Option<u64>,
    width_ns: u64,
    fixed: bool,
    /// The fixed width asked for, once the grid had to be widened beyond it.
    requested_ns: Option<u64>,
    /// Busy bins held over all flows.
    total_bins: usize,
    /// Per (interface, flow): a flow mirrored at two taps must not count twice, and a tap downstream of a
    /// pause still sees buffered frames drain while the sender is stopped.
    flows: FlowIndex<Series>,
    /// Each link direction's busy time, on the same grid.
    occupancy: Occupancy,
}

impl RatesPass {
    /// `bin_ns`: a fixed width, or `None` for automatic widths; `lines` gives each tap its line rate, for the
    /// links' busy time.
    pub fn new(bin_ns: Option<u64>, lines: LineRates) -> Self {
        RatesPass {
            start_ns: None,
            width_ns: bin_ns.unwrap_or(MIN_BIN_NS).max(1),
            fixed: bin_ns.is_some(),
            requested_ns: None,
            total_bins: 0,
            flows: FlowIndex::default(),
            occupancy: Occupancy::new(lines),
        }
    }

    /// Adds a data frame to its flow's bin and its link's busy time (other frames only start the grid).
    pub fn frame(&mut self, f: &Brief) {
        let start = *self.start_ns.get_or_insert(f.ts_ns);
        if f.kind != Kind::Roce {
            return;
        }
        let (Some(ip), Some(roce)) = (f.ip, f.roce.as_ref()) else {
            return;
        };
        let bth = &roce.bth;
        if roce.payload_len.is_none_or(|n| n == 0) {
            return;
        }
        // A frame stamped before the first (timestamps out of order) counts in the first bin.
        let offset = f.ts_ns.saturating_sub(start);
        let index = loop {
            let idx = offset / self.width_ns;
            let too_far = if self.fixed {
                idx > u64::from(u32::MAX)
            } else {
                idx >= MAX_BINS as u64
            };
            if !too_far {
                break idx as u32;
            }
            self.widen();
        };
        let key = FlowKey {
            src: ip.src,
            dst: ip.dst,
            dest_qp: bth.dest_qp,
        };
        let s = self.flows.find_or_add(f.iface, &key, || Series {
            wire: NO_WIRE,
            ..Series::default()
        });
        if s.wire == NO_WIRE {
            s.wire = self.occupancy.join(f.iface, ip.src, ip.dst, self.width_ns);
        }
        let busy = self.occupancy.add(
            s.wire,
            f.ts_ns.saturating_sub(start),
            f.len,
            f.speed_bps,
            self.width_ns,
        );
        let gap = s.last_ns.map(|t| f.ts_ns.saturating_sub(t));
        s.last_ns = Some(f.ts_ns);
        s.pcp = f.pcp;
        s.dscp = Some(ip.dscp);
        let mut add = Bin {
            index,
            packets: 1,
            ce: u32::from(ip.ecn == ECN_CE),
            bytes: u64::from(f.len),
            ..Bin::default()
        };
        // A packet's gap to its predecessor is the time the sender's limiter spent on it.
        if let Some(g) = gap.filter(|&g| g > 0 && g <= PACING_GAP_MAX_NS) {
            add.paced_bytes = add.bytes;
            add.gap_ns = g;
        }
        let new = match &mut s.open {
            Some(open) if open.index == index => {
                open.add(&add);
                false
            }
            Some(open) if open.index < index => {
                let closed = std::mem::replace(open, add);
                make_room(&mut s.bins);
                s.bins.push(closed);
                true
            }
            // A late frame: its bin is among the closed ones, or goes between them.
            Some(_) => match s.bins.binary_search_by_key(&index, |b| b.index) {
                Ok(k) => {
                    s.bins[k].add(&add);
                    false
                }
                Err(k) => {
                    make_room(&mut s.bins);
                    s.bins.insert(k, add);
                    true
                }
            },
            None => {
                s.open = Some(add);
                true
            }
        };
        self.total_bins += usize::from(new) + busy;
        if self.total_bins > MAX_TOTAL_BINS {
            self.shrink();
        }
    }

    /// Widens the grid until the busy bins fit the budget again, as far as merging can take them: bins that
    /// stay alone after a doubling (one per flow, at the least) cannot merge, and then the budget gives way.
    fn shrink(&mut self) {
        while self.total_bins > MAX_TOTAL_BINS / 2 {
            let before = self.total_bins;
            self.widen();
            if self.total_bins == before {
                break;
            }
        }
    }

    /// Doubles the bin width, merging neighbours in place, so the grid covers twice the time in at most the
    /// same memory.
    fn widen(&mut self) {
        if self.fixed {
            self.requested_ns.get_or_insert(self.width_ns);
        }
        self.width_ns = self.width_ns.saturating_mul(2);
        self.total_bins = 0;
        for s in self.flows.values_mut() {
            if let Some(open) = s.open.take() {
                make_room(&mut s.bins);
                s.bins.push(open);
            }
            let mut kept = 0;
            for r in 0..s.bins.len() {
                let mut b = s.bins[r];
                b.index /= 2;
                if kept > 0 && s.bins[kept - 1].index == b.index {
                    s.bins[kept - 1].add(&b);
                } else {
                    s.bins[kept] = b;
                    kept += 1;
                }
            }
            s.bins.truncate(kept);
            s.open = s.bins.pop();
            // The room the merged bins left is given back: the budget counts what flows hold, not what they
            // once grew to.
            s.bins.shrink_to(kept + kept / 8);
            self.total_bins += kept;
        }
        self.total_bins += self.occupancy.widen();
    }

    /// Where bin 0 starts: the first frame's time.
    pub fn start_ns(&self) -> u64 {
        self.start_ns.unwrap_or(0)
    }

    /// The bins' width now (it only grows).
    pub fn width_ns(&self) -> u64 {
        self.width_ns
    }

    /// The fixed width asked for, when the capture's span or its flows made the grid widen beyond it.
    pub fn requested_width_ns(&self) -> Option<u64> {
        self.requested_ns
    }

    /// Every link direction's busiest bin at the present width, busiest first: a rate never above the line
    /// of the tap it was measured at.
    pub fn peaks(&self) -> Vec<Peak> {
        self.occupancy.peaks(self.width_ns)
    }

    /// Every flow's busy bins at the final width.
    pub fn finish(self) -> Vec<FlowSeries> {
        self.flows
            .into_map_order()
            .map(|(iface, key, mut s)| {
                s.bins.extend(s.open.take());
                let mut f = FlowSeries {
                    iface,
                    key,
                    bins: s.bins,
                    pcp: s.pcp,
                    dscp: s.dscp,
                    priority: None,
                    priority_source: None,
                };
                f.resolve_priority(&PriorityMap::default());
                f
            })
            .collect()
    }
}

/// Gb/s carried by `bytes` in a bin of `width_ns` (bytes·8 per ns is Gb/s).
pub fn gbps(bytes: u64, width_ns: u64) -> f64 {
    bytes as f64 * 8.0 / width_ns as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Decoder;
    use roce_capture::{LinkType, Record};
    use roce_wire::{BthRepr, ExtHeaders, Opcode};

    /// A data frame (or an ACK) of the flow 10.0.0.1 → 10.0.0.`dst`, QP 0x10, given to `pass` at `ts`.
    fn send(pass: &mut RatesPass, ts: u64, dst: u8, opcode: Opcode) {
        let payload = [0u8; 64];
        let ext = ExtHeaders {
            aeth: opcode.is_ack().then_some(roce_wire::ext::AethRepr {
                syndrome: 0x1f,
                msn: 1,
            }),
            ..ExtHeaders::default()
        };
        let payload: &[u8] = if opcode.is_ack() { &[] } else { &payload };
        let buf = testkit::frames::v4_frame(1, dst, 2, BthRepr::new(opcode, 0x10, 1), ext, payload);
        let n = buf.len();
        let rec = Record {
            iface: 0,
            link: LinkType::ETHERNET,
            speed_bps: None,
            ts_ns: ts,
            caplen: n as u32,
            len: n as u32,
            data: &buf[..n],
            offset: 0,
        };
        pass.frame(&Brief::of(&Decoder::default().decode(1, &rec)));
    }

    const DATA: Opcode = Opcode::RC_RDMA_WRITE_MIDDLE;

    #[test]
    fn only_busy_bins_are_kept_and_acks_are_not_counted() {
        let mut p = RatesPass::new(None, LineRates::default());
        for t in [0, 5_000, 35_000, 36_000] {
            send(&mut p, t, 2, DATA);
        }
        send(&mut p, 50_000, 2, Opcode::RC_ACKNOWLEDGE);
        let s = p.finish();
        assert_eq!(s.len(), 1);
        let idx: Vec<(u32, u32)> = s[0].bins.iter().map(|b| (b.index, b.packets)).collect();
        assert_eq!(idx, [(0, 2), (3, 2)]);
        assert!(s[0].busy_in(1..4) && !s[0].busy_in(1..3));
        assert_eq!(s[0].get(3).map(|b| b.packets), Some(2));
        assert_eq!(s[0].get(2), None);
        assert_eq!(s[0].packets(), 4);
    }

    #[test]
    fn a_long_span_widens_in_place_and_keeps_every_packet() {
        let mut p = RatesPass::new(None, LineRates::default());
        // One packet every 10 µs for 100 ms: 10,000 bins at 10 µs, past MAX_BINS.
        for k in 0..10_000u64 {
            send(&mut p, k * 10_000, 2, DATA);
        }
        assert_eq!(p.width_ns(), 40_000);
        let s = p.finish();
        assert!(s[0].bins.len() <= MAX_BINS);
        assert_eq!(s[0].packets(), 10_000);
        assert!(s[0].bins.windows(2).all(|w| w[0].index < w[1].index));
    }

    #[test]
    fn out_of_order_frames_land_in_their_bin() {
        let mut p = RatesPass::new(Some(1_000), LineRates::default());
        for t in [100, 5_500, 2_500, 5_600, 2_700, 0] {
            send(&mut p, t, 2, DATA);
        }
        let s = p.finish();
        let idx: Vec<(u32, u32)> = s[0].bins.iter().map(|b| (b.index, b.packets)).collect();
        assert_eq!(idx, [(0, 2), (2, 2), (5, 2)]);
    }

    /// A saturated link, each frame stamped as its last bit arrived: some 10 µs bins hold one frame more
    /// than the link carried in them. Within the line, none holds more than the link carries, every byte is
    /// still there, and the packet counts did not move.
    #[test]
    fn a_saturated_flow_never_reads_above_its_line() {
        let line = 1_000_000_000u64; // 1 Gb/s: the test frames take about 1 µs each.
        let mut p = RatesPass::new(Some(10_000), LineRates::flag(Some(line)));
        let probe = testkit::frames::v4_frame(
            1,
            2,
            2,
            BthRepr::new(DATA, 0x10, 1),
            ExtHeaders::default(),
            &[0u8; 64],
        );
        let len = probe.len() as u64;
        let ser_ns = (len * 8 * 1_000_000_000).div_ceil(line);
        let frames = 10_000u64;
        for k in 1..=frames {
            send(&mut p, k * ser_ns, 2, DATA);
        }
        let s = p.finish();
        let capacity = line / 8 * 10_000 / 1_000_000_000;
        assert!(
            s[0].bins.iter().any(|b| b.bytes > capacity),
            "the test must be able to fail"
        );
        let within = within_line(&s[0].bins, capacity);
        assert!(within.iter().all(|b| b.bytes <= capacity));
        // Every byte is still there but some of the first frame's: stamped at the grid's start, the link
        // carried it before the capture's first instant (moving excess back assumes the link busy to the end
        // of the last bin, so a little of it may stay in).
        let bytes = |v: &[Bin]| v.iter().map(|b| b.bytes).sum::<u64>();
        assert_eq!(bytes(&s[0].bins), frames * len);
        let left_out = frames * len - bytes(&within);
        assert!(left_out > 0 && left_out <= len, "{left_out}");
        let packets = |v: &[Bin]| {
            v.iter()
                .map(|b| (b.index, b.packets))
                .filter(|p| p.1 > 0)
                .collect::<Vec<_>>()
        };
        assert_eq!(packets(&within), packets(&s[0].bins));
        assert!(within.windows(2).all(|w| w[0].index < w[1].index));
    }

    #[test]
    fn excess_reaches_back_over_idle_bins_and_stops_at_the_first() {
        let bin = |index, bytes| Bin {
            index,
            bytes,
            packets: 1,
            ..Bin::default()
        };
        let pairs = |v: Vec<Bin>| v.iter().map(|b| (b.index, b.bytes)).collect::<Vec<_>>();
        assert_eq!(
            pairs(within_line(&[bin(1, 250), bin(5, 100)], 100)),
            [(0, 100), (1, 100), (5, 100)]
        );
        assert_eq!(
            pairs(within_line(&[bin(2, 100), bin(7, 350)], 100)),
            [(2, 100), (4, 50), (5, 100), (6, 100), (7, 100)]
        );
        // Into a bin that is there, up to its capacity, then on.
        assert_eq!(
            pairs(within_line(&[bin(2, 60), bin(3, 180)], 100)),
            [(1, 40), (2, 100), (3, 100)]
        );
    }

    #[test]
    fn a_fixed_width_widens_for_a_span_beyond_the_index_and_says_so() {
        let mut p = RatesPass::new(Some(10_000), LineRates::default());
        send(&mut p, 0, 2, DATA);
        send(&mut p, 75 * 365 * 24 * 3_600 * 1_000_000_000, 2, DATA);
        assert_eq!(p.requested_width_ns(), Some(10_000));
        assert!(p.width_ns() > 10_000);
        assert_eq!(p.finish()[0].bins.len(), 2);
    }
}
