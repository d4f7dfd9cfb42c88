//! How busy each link direction was, bin by bin: the peak throughput a report states must be a rate the link
//! could carry.
//!
//! Binning whole frames by their timestamps puts all of a frame's bytes in one bin, even when the link spent
//! part of the frame's time in the bin before: on a saturated 25 Gb/s link a 10 µs bin then holds eight 4 KiB
//! frames some of the time, 26.6 Gb/s. Here each data frame occupies its link for its serialization time at
//! its tap's line rate (its length × 8 / the rate), ending at its timestamp (a frame is stamped once it has
//! arrived), and that time is spread over the bins it spans. Frames of one link direction never overlap: one
//! stamped before the previous one was through (clock jitter, timestamps a capture coalesced, a line rate set
//! too low) starts when it is. So no bin holds more than its width of busy time, and no rate read from it
//! exceeds the line it was measured on.
//!
//! A link direction is what one tap sees go one way. Frames a tap sees from one sender, or to one receiver,
//! went the same way (an address sits on one side of the link), so the directions are the groups that
//! senders and receivers join: at a host's interface, what it sends and what it receives; at a mirror of
//! a switch port, the two ways through it. Memory: a few words per address and tap, and each direction's busy
//! bins on the rates grid, under that grid's budget.

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use crate::line::{LineRate, LineRates};

/// Picoseconds per nanosecond: busy time is counted in ps, so that a 64-byte frame at 800 Gb/s (640 ps) still
/// counts whole.
const PS: u64 = 1000;
/// Room before the grid's start, ps (about 4.4 s), where a frame stamped at the start had been on the wire.
const BEFORE: u64 = 1 << 42;

/// One busy bin of a direction: its index on the grid and the picoseconds the link was busy in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Busy {
    index: u32,
    ps: u64,
}

/// One link direction at one tap.
#[derive(Debug, Clone)]
struct Direction {
    tap: u32,
    /// Its line rate, from its first frame's tap.
    line: Option<LineRate>,
    /// When the last frame placed on it was through, ps from the grid's start.
    busy_until: u64,
    /// The last frame's length and serialization time, ps: most frames of a direction are of one size, and
    /// the division is the costliest step of a frame.
    last_ser: (u32, u64),
    /// Busy bins in index order.
    bins: Vec<Busy>,
}

/// The busiest bin of one link direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    /// The tap it was measured at.
    pub iface: u32,
    /// Its line rate: `gbps` never exceeds it.
    pub line: LineRate,
    /// The rate the direction carried over its busiest bin, Gb/s.
    pub gbps: f64,
    /// The bin's index on the grid.
    pub index: u32,
}

/// Every link direction's busy time on the rates grid. See the module documentation.
#[derive(Debug, Default)]
pub struct Occupancy {
    lines: LineRates,
    /// (tap, address, whether it sends) → its node.
    nodes: FxHashMap<(u32, IpAddr, bool), u32>,
    /// Union-find over the nodes: a root stands for a direction.
    parent: Vec<u32>,
    /// By node: the direction of a root.
    directions: Vec<Option<Direction>>,
}

impl Occupancy {
    /// Directions whose frames take their line rate by `lines`.
    pub fn new(lines: LineRates) -> Self {
        Occupancy {
            lines,
            ..Occupancy::default()
        }
    }

    /// The direction a flow from `src` to `dst` at tap `tap` goes, as a node to hand to [`Occupancy::add`]; its
    /// direction may join another's (their bins summed, never above the bin's width `width_ns`).
    pub fn join(&mut self, tap: u32, src: IpAddr, dst: IpAddr, width_ns: u64) -> u32 {
        let a = self.node(tap, src, true);
        let b = self.node(tap, dst, false);
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            let taken = self.directions[rb as usize].take();
            self.parent[rb as usize] = ra;
            if let (Some(into), Some(from)) = (self.directions[ra as usize].as_mut(), taken) {
                into.absorb(from, width_ns.saturating_mul(PS));
            }
        }
        a
    }

    fn node(&mut self, tap: u32, addr: IpAddr, sends: bool) -> u32 {
        let next = self.parent.len() as u32;
        let n = *self.nodes.entry((tap, addr, sends)).or_insert(next);
        if n == next {
            self.parent.push(n);
            self.directions.push(Some(Direction {
                tap,
                line: None,
                busy_until: 0,
                last_ser: (0, 0),
                bins: Vec::new(),
            }));
        }
        n
    }

    fn find(&mut self, mut n: u32) -> u32 {
        while self.parent[n as usize] != n {
            let up = self.parent[self.parent[n as usize] as usize];
            self.parent[n as usize] = up;
            n = up;
        }
        n
    }

    /// A data frame of `len` bytes on the wire, stamped `end_ns` after the grid's start, on the direction of
    /// `node`, its tap recording `speed_bps`; returns the busy bins it added (for the grid's budget).
    pub fn add(
        &mut self,
        node: u32,
        end_ns: u64,
        len: u32,
        speed_bps: Option<u64>,
        width_ns: u64,
    ) -> usize {
        let root = self.find(node);
        let lines = self.lines;
        let Some(d) = self.directions[root as usize].as_mut() else {
            return 0;
        };
        let line = *d.line.get_or_insert_with(|| lines.of(speed_bps));
        // A length beyond any frame a reader accepts is a corrupt field: it must not occupy a link for hours.
        let len = len.min(roce_capture::read::MAX_CAPLEN);
        let ser = if d.last_ser.0 == len {
            d.last_ser.1
        } else {
            // Rounded up: a frame never takes less time than its bits need.
            let ser = (u128::from(len) * 8 * 1_000_000_000_000).div_ceil(u128::from(line.bps));
            let ser = u64::try_from(ser).unwrap_or(u64::MAX);
            d.last_ser = (len, ser);
            ser
        };
        // Times run from BEFORE ahead of the grid's start: the capture's first frame was on the wire before
        // its timestamp, and must not push the frames after it.
        let start = end_ns
            .saturating_mul(PS)
            .saturating_add(BEFORE)
            .saturating_sub(ser)
            .max(d.busy_until);
        let end = start.saturating_add(ser);
        d.busy_until = end;
        let width = width_ns.max(1).saturating_mul(PS);
        let before = d.bins.len();
        // Only the time inside the grid counts.
        let (mut t, end) = (start.max(BEFORE) - BEFORE, end.saturating_sub(BEFORE));
        while t < end {
            let index = t / width;
            let upto = index.saturating_add(1).saturating_mul(width).min(end);
            if upto <= t {
                break;
            }
            // Time beyond the grid's last index (a backlog no link could clear) is not counted.
            let Ok(index) = u32::try_from(index) else {
                break;
            };
            // Frames start where the last one ended, so a frame adds to the last bin or opens later ones.
            match d.bins.last_mut() {
                Some(b) if b.index == index => b.ps = b.ps.saturating_add(upto - t),
                _ => d.bins.push(Busy {
                    index,
                    ps: upto - t,
                }),
            }
            t = upto;
        }
        d.bins.len() - before
    }

    /// Doubles the bins' width, merging neighbours; returns the busy bins left.
    pub fn widen(&mut self) -> usize {
        let mut kept = 0;
        for d in self.directions.iter_mut().flatten() {
            let mut out: Vec<Busy> = Vec::with_capacity(d.bins.len() / 2 + 1);
            for b in &d.bins {
                let index = b.index / 2;
                match out.last_mut() {
                    Some(o) if o.index == index => o.ps = o.ps.saturating_add(b.ps),
                    _ => out.push(Busy { index, ps: b.ps }),
                }
            }
            kept += out.len();
            d.bins = out;
        }
        kept
    }

    /// Every direction's busiest bin at the grid's final `width_ns`, busiest first.
    pub fn peaks(&self, width_ns: u64) -> Vec<Peak> {
        let width = width_ns.max(1).saturating_mul(PS);
        let mut out: Vec<Peak> = self
            .directions
            .iter()
            .flatten()
            .filter_map(|d| {
                let line = d.line?;
                let top = d
                    .bins
                    .iter()
                    .max_by_key(|b| (b.ps, std::cmp::Reverse(b.index)))?;
                // A share of the line no greater than 1: the busy time never exceeds the bin.
                let share = top.ps.min(width) as f64 / width as f64;
                Some(Peak {
                    iface: d.tap,
                    line,
                    gbps: share * line.gbps(),
                    index: top.index,
                })
            })
            .collect();
        out.sort_by(|a, b| b.gbps.total_cmp(&a.gbps).then(a.iface.cmp(&b.iface)));
        out
    }
}

impl Direction {
    /// Takes another direction's bins: they turned out to be one way of one link. Two frames cannot share a
    /// link at once, so where their busy times together exceed a bin's width the timestamps overlapped them,
    /// and the bin is full.
    fn absorb(&mut self, other: Direction, width_ps: u64) {
        let mut all = std::mem::take(&mut self.bins);
        all.extend(other.bins);
        all.sort_by_key(|b| b.index);
        for b in all {
            match self.bins.last_mut() {
                Some(last) if last.index == b.index => {
                    last.ps = last.ps.saturating_add(b.ps).min(width_ps)
                }
                _ => self.bins.push(b),
            }
        }
        self.busy_until = self.busy_until.max(other.busy_until);
        self.line = self.line.or(other.line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::line::LineSource;

    const G25: u64 = 25_000_000_000;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_saturated_link_reads_its_line_not_more() {
        // 4 KiB frames back to back at 25 Gb/s, stamped as they end, 10 µs bins: whole frames by timestamp
        // would put eight in some bins (26.6 Gb/s), busy time never more than the bin.
        let mut o = Occupancy::new(LineRates::default());
        let n = o.join(0, ip(1), ip(5), 10_000);
        let len = 4_158u32;
        let gap_ps = u64::from(len) * 8 * 1_000 / 25;
        for k in 1..=200u64 {
            o.add(n, k * gap_ps / 1000, len, Some(G25), 10_000);
        }
        let p = o.peaks(10_000)[0];
        assert_eq!(p.line.source, LineSource::IfSpeed);
        assert!(p.gbps <= 25.0, "{}", p.gbps);
        assert!(p.gbps > 24.9, "{}", p.gbps);
    }

    #[test]
    fn the_first_frame_was_on_the_wire_before_the_capture_began() {
        // The grid starts at the first frame's timestamp, when the frame had already arrived: its time before
        // counts nowhere and delays nothing. Frames every 1338 ns at 25 Gb/s (4158 B + 24 B of preamble, FCS
        // and gap, as a saturated port sends them) fill 99.4 % of each bin, every bin.
        let mut o = Occupancy::new(LineRates::default());
        let n = o.join(0, ip(1), ip(5), 10_000);
        for k in 0..200u64 {
            o.add(n, k * 1_338, 4_158, Some(G25), 10_000);
        }
        let d = o
            .directions
            .iter()
            .flatten()
            .find(|d| !d.bins.is_empty())
            .unwrap();
        assert!(
            d.bins[1..5].iter().all(|b| b.ps < 9_950_000),
            "{:?}",
            &d.bins[..5]
        );
        let p = o.peaks(10_000)[0];
        assert!((24.8..24.9).contains(&p.gbps), "{}", p.gbps);
    }

    #[test]
    fn a_corrupt_length_on_a_slow_line_stays_bounded() {
        // 4 GB at 1 Mb/s would occupy the link for 9 hours, 3 billion bins of 10 µs: the length is capped at
        // the largest frame a reader accepts (256 KiB, 2.1 s), and nothing exceeds the line.
        let mut o = Occupancy::new(LineRates::flag(Some(1_000_000)));
        let n = o.join(0, ip(1), ip(2), 10_000);
        let added = o.add(n, 3_000_000_000, u32::MAX, None, 10_000);
        assert!(added <= 210_000, "{added}");
        assert!(o.peaks(10_000)[0].gbps <= 0.001);
    }

    #[test]
    fn frames_stamped_together_are_spread_not_stacked() {
        // Ten frames stamped at one instant, as a capture that coalesces timestamps leaves them: the link
        // carried them one after another.
        let mut o = Occupancy::new(LineRates::flag(Some(G25)));
        let n = o.join(3, ip(1), ip(2), 1_000);
        for _ in 0..10 {
            o.add(n, 5_000, 1_000, None, 1_000);
        }
        let p = o.peaks(1_000)[0];
        assert_eq!((p.iface, p.gbps), (3, 25.0));
        assert_eq!(p.line.source, LineSource::Flag);
        // 10 frames of 320 ns: 3.2 µs of busy time, all of it counted once.
        let total: u64 = o
            .directions
            .iter()
            .flatten()
            .flat_map(|d| &d.bins)
            .map(|b| b.ps)
            .sum();
        assert_eq!(total, 3_200_000);
    }

    #[test]
    fn directions_are_the_ways_through_a_tap() {
        let mut o = Occupancy::new(LineRates::default());
        // At a host's tap: two flows out (one sender), two in (one receiver): two directions.
        let out1 = o.join(0, ip(1), ip(2), 10_000);
        let out2 = o.join(0, ip(1), ip(3), 10_000);
        let in1 = o.join(0, ip(2), ip(1), 10_000);
        let in2 = o.join(0, ip(3), ip(1), 10_000);
        assert_eq!(o.find(out1), o.find(out2));
        assert_eq!(o.find(in1), o.find(in2));
        assert_ne!(o.find(out1), o.find(in1));
        // Each way full at once: two directions at their line each, neither above it.
        for k in 0..100u64 {
            o.add(out1, 1_000 + k * 400, 1_250, Some(G25), 10_000);
            o.add(in1, 1_000 + k * 400, 1_250, Some(G25), 10_000);
        }
        let peaks = o.peaks(10_000);
        assert_eq!(peaks.len(), 2);
        assert!(
            peaks.iter().all(|p| p.gbps > 24.0 && p.gbps <= 25.0),
            "{peaks:?}"
        );
        // The same addresses at another tap are another link.
        let other = o.join(1, ip(1), ip(2), 10_000);
        assert_ne!(o.find(other), o.find(out1));
    }

    #[test]
    fn joined_directions_keep_their_bins_within_the_width() {
        let mut o = Occupancy::new(LineRates::flag(Some(G25)));
        let a = o.join(0, ip(1), ip(9), 1_000);
        let b = o.join(0, ip(2), ip(8), 1_000);
        o.add(a, 1_000, 3_000, None, 1_000);
        o.add(b, 1_000, 3_000, None, 1_000);
        assert_eq!(o.peaks(1_000).len(), 2);
        // A flow from 1 to 8 shows both went the same way: one direction, its overlap clipped to the bin.
        o.join(0, ip(1), ip(8), 1_000);
        let peaks = o.peaks(1_000);
        assert_eq!(peaks.len(), 1);
        assert_eq!(peaks[0].gbps, 25.0);
        // A bin twice as wide holds the same busy time: half the rate.
        assert_eq!(o.widen(), 1);
        assert_eq!(o.peaks(2_000)[0].gbps, 12.5);
    }
}
