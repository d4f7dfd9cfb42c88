//! The packet side of the NIC counters: per host, when the capture saw the packets a NIC counter has a twin
//! of (CNPs sent and received, CE marks, PSN jumps, sequence-error NAKs, packets sent again), and per MAC and
//! priority its PFC frames.
//!
//! A counter's delta covers the time between its first and last sample, which is not the capture's span
//! (the tracer samples every second, and the blocks are only read after the frames). So the events are kept
//! as counts per time bin, and counted over the samples' stretch once it is known. The bins lie on one grid
//! of power-of-two widths from the epoch, and a series that would need more than [`MAX_BINS`] doubles its
//! width: memory stays bounded per host whatever the capture's length, and two series of one host held by
//! two threads join into exactly what one thread would have counted.

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use super::cnp::CnpRow;
use super::flows::FlowRow;
use super::psn::PsnEvent;
use crate::decode::{ECN_CE, Frame, Kind};
use crate::nic_counters::check::{HostEvent, PacketSide, Windowed};
use roce_wire::ext::{AethKind, NakCode};
use roce_wire::pfc::MacControlRepr;

/// Bins a series may hold before it doubles their width: 4 KiB per host and kind at most.
pub const MAX_BINS: usize = 512;
/// The narrowest bin, 2^20 ns (about a millisecond): finer than any counter interval.
const BASE_SHIFT: u32 = 20;

/// Counts per time bin on the shared grid: bin `i` of width 2^`shift` ns covers `[i << shift, (i + 1) << shift)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Series {
    shift: u32,
    /// The first bin's index on the grid.
    first: u64,
    bins: Vec<u64>,
}

impl Series {
    fn add(&mut self, ts_ns: u64) {
        if self.bins.is_empty() {
            self.shift = BASE_SHIFT;
            self.first = ts_ns >> self.shift;
            self.bins.push(1);
            return;
        }
        self.cover(ts_ns >> self.shift);
        let i = (ts_ns >> self.shift) - self.first;
        if let Some(b) = usize::try_from(i).ok().and_then(|i| self.bins.get_mut(i)) {
            *b += 1;
        }
    }

    /// Makes room for bin `idx` (on the current grid), widening until the whole range fits.
    fn cover(&mut self, mut idx: u64) {
        loop {
            let last = self.first + self.bins.len() as u64 - 1;
            let (lo, hi) = (self.first.min(idx), last.max(idx));
            if hi - lo < MAX_BINS as u64 {
                if lo < self.first {
                    let mut grown = vec![0; (self.first - lo) as usize];
                    grown.append(&mut self.bins);
                    self.bins = grown;
                    self.first = lo;
                }
                let len = (hi - self.first + 1) as usize;
                if self.bins.len() < len {
                    self.bins.resize(len, 0);
                }
                return;
            }
            self.widen();
            idx >>= 1;
        }
    }

    /// Doubles the bins' width, merging neighbours on the grid.
    fn widen(&mut self) {
        let first = self.first >> 1;
        let last = (self.first + self.bins.len() as u64 - 1) >> 1;
        let mut bins = vec![0; (last - first + 1) as usize];
        for (k, c) in self.bins.iter().enumerate() {
            bins[(((self.first + k as u64) >> 1) - first) as usize] += c;
        }
        self.first = first;
        self.bins = bins;
        self.shift += 1;
    }

    /// Adds another series of the same key (a thread's share of the capture).
    fn absorb(&mut self, mut other: Series) {
        if other.bins.is_empty() {
            return;
        }
        if self.bins.is_empty() {
            *self = other;
            return;
        }
        while self.shift < other.shift {
            self.widen();
        }
        while other.shift < self.shift {
            other.widen();
        }
        self.cover(other.first);
        self.cover(other.first + other.bins.len() as u64 - 1);
        // `cover` may have widened this one past the other's width.
        while other.shift < self.shift {
            other.widen();
        }
        for (k, c) in other.bins.into_iter().enumerate() {
            let i = (other.first + k as u64 - self.first) as usize;
            if let Some(b) = self.bins.get_mut(i) {
                *b += c;
            }
        }
    }

    /// The events in `[from, to]`: whole bins, and the cut ones in proportion to their overlap.
    fn between(&self, from: u64, to: u64) -> Windowed {
        let width = 1u128 << self.shift;
        let (mut whole, mut part, mut edge) = (0u64, 0u128, 0u64);
        for (k, &c) in self.bins.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let start = u128::from(self.first + k as u64) << self.shift;
            let end = start + width;
            let (a, b) = (u128::from(from), u128::from(to) + 1);
            if start >= a && end <= b {
                whole += c;
            } else if end > a && start < b {
                let overlap = end.min(b) - start.max(a);
                part += u128::from(c) * overlap;
                edge += c;
            }
        }
        Windowed {
            count: whole + u64::try_from((part + width / 2) / width).unwrap_or(u64::MAX),
            edge,
        }
    }
}

/// The pause frames of one source MAC and priority at one tap.
#[derive(Debug, Clone, Default)]
struct Pauses {
    frames: Series,
    xoff: Series,
}

/// Folds the frames a NIC counter has a twin of, per host (or MAC) and tap.
#[derive(Debug, Default)]
pub struct NicSidePass {
    hosts: FxHashMap<(IpAddr, HostEvent, u32), Series>,
    pfc: FxHashMap<([u8; 6], u8, u32), Pauses>,
}

impl NicSidePass {
    /// Looks at one frame, with what its PSN meant to its flow (from the flows pass). Only CNPs, CE-marked
    /// packets, PSN jumps, retransmissions, NAKs and PFC frames cost more than a test or two.
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>, psn: Option<PsnEvent>) {
        match f.kind {
            Kind::Cnp => self.cnp(f),
            Kind::Roce => {
                let Some(ip) = f.ip else { return };
                let nak = f
                    .roce
                    .as_ref()
                    .and_then(|r| r.packet.ext.aeth)
                    .is_some_and(|a| a.kind() == AethKind::Nak(NakCode::PsnSequenceError));
                if ip.ecn == ECN_CE
                    || nak
                    || matches!(psn, Some(PsnEvent::Gap(_) | PsnEvent::Retransmission))
                {
                    self.roce(f, ip.src, ip.dst, ip.ecn == ECN_CE, nak, psn);
                }
            }
            Kind::Pfc => self.pfc(f),
            _ => {}
        }
    }

    fn add(&mut self, host: IpAddr, kind: HostEvent, f: &Frame<'_>) {
        self.hosts
            .entry((host.to_canonical(), kind, f.iface))
            .or_default()
            .add(f.ts_ns);
    }

    #[inline(never)]
    fn cnp(&mut self, f: &Frame<'_>) {
        if let Some(ip) = f.ip {
            self.add(ip.src, HostEvent::CnpFrom, f);
            self.add(ip.dst, HostEvent::CnpTo, f);
        }
    }

    #[inline(never)]
    fn roce(
        &mut self,
        f: &Frame<'_>,
        src: IpAddr,
        dst: IpAddr,
        ce: bool,
        nak: bool,
        psn: Option<PsnEvent>,
    ) {
        if ce {
            self.add(dst, HostEvent::CeTo, f);
        }
        if nak {
            self.add(dst, HostEvent::SeqNakTo, f);
        }
        match psn {
            Some(PsnEvent::Gap(_)) => self.add(dst, HostEvent::GapInto, f),
            Some(PsnEvent::Retransmission) => self.add(src, HostEvent::RetransmitFrom, f),
            _ => {}
        }
    }

    #[inline(never)]
    fn pfc(&mut self, f: &Frame<'_>) {
        let (Some(mac), Some(MacControlRepr::Pfc(pfc))) = (f.src_mac, f.mac_control) else {
            return;
        };
        for prio in 0..8u8 {
            if pfc.enabled(prio) {
                let p = self.pfc.entry((mac, prio, f.iface)).or_default();
                p.frames.add(f.ts_ns);
                if pfc.quanta[usize::from(prio)] > 0 {
                    p.xoff.add(f.ts_ns);
                }
            }
        }
    }

    /// Takes a thread's share of the capture: its series are added to these, bin by bin.
    pub fn absorb(&mut self, other: NicSidePass) {
        for (k, s) in other.hosts {
            self.hosts.entry(k).or_default().absorb(s);
        }
        for (k, p) in other.pfc {
            let mine = self.pfc.entry(k).or_default();
            mine.frames.absorb(p.frames);
            mine.xoff.absorb(p.xoff);
        }
    }

    /// The most any one tap saw of what `count` counts at that tap: each packet once, at the tap that saw
    /// most of them.
    fn best_tap(taps: impl Iterator<Item = (u32, Windowed)>) -> Windowed {
        let mut per: FxHashMap<u32, Windowed> = FxHashMap::default();
        for (tap, w) in taps {
            let e = per.entry(tap).or_default();
            e.count += w.count;
            e.edge += w.edge;
        }
        per.into_values()
            .max_by_key(|w| (w.count, w.edge))
            .unwrap_or_default()
    }
}

/// The pass's answers, with the flows and CNP tables to tell whether a host is in the capture at all.
#[derive(Debug, Clone, Copy)]
pub struct Packets<'a> {
    /// The binned events.
    pub pass: &'a NicSidePass,
    /// The flows table.
    pub flows: &'a [FlowRow],
    /// The CNP table.
    pub cnps: &'a [CnpRow],
}

impl PacketSide for Packets<'_> {
    fn host_events(&self, kind: HostEvent, addrs: &[IpAddr], from_ns: u64, to_ns: u64) -> Windowed {
        NicSidePass::best_tap(
            self.pass
                .hosts
                .iter()
                .filter(|((ip, k, _), _)| *k == kind && addrs.contains(ip))
                .map(|((_, _, tap), s)| (*tap, s.between(from_ns, to_ns))),
        )
    }

    fn pause_frames(
        &self,
        mac: [u8; 6],
        priority: Option<u8>,
        xoff_only: bool,
        from_ns: u64,
        to_ns: u64,
    ) -> Windowed {
        NicSidePass::best_tap(
            self.pass
                .pfc
                .iter()
                .filter(|((m, p, _), _)| *m == mac && priority.is_none_or(|q| q == *p))
                .map(|((_, _, tap), s)| {
                    let series = if xoff_only { &s.xoff } else { &s.frames };
                    (*tap, series.between(from_ns, to_ns))
                }),
        )
    }

    fn host_seen(&self, addrs: &[IpAddr]) -> bool {
        let has = |ip: IpAddr| addrs.contains(&ip.to_canonical());
        self.flows.iter().any(|f| has(f.src) || has(f.dst))
            || self.cnps.iter().any(|c| has(c.src) || has(c.dst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1 << BASE_SHIFT;

    #[test]
    fn a_series_counts_over_a_stretch_and_stays_bounded() {
        let mut s = Series::default();
        for i in 0..100u64 {
            s.add(1_000 * MS + i * MS);
        }
        assert_eq!(s.between(0, u64::MAX).count, 100);
        // Bins 1010..1029 inclusive: exactly 20 events, no cut bin.
        let w = s.between(1_010 * MS, 1_030 * MS - 1);
        assert_eq!((w.count, w.edge), (20, 0));
        // Half of bin 1050 is inside: half its one event, rounded.
        let half = s.between(1_040 * MS, 1_050 * MS + MS / 2 - 1);
        assert_eq!((half.count, half.edge), (11, 1));
        // A long capture: the width doubles, the count stays whole, the bins stay few.
        for i in 0..10_000u64 {
            s.add(2_000 * MS + i * 7 * MS);
        }
        assert!(s.bins.len() <= MAX_BINS, "{}", s.bins.len());
        assert_eq!(s.between(0, u64::MAX).count, 10_100);
        assert_eq!(s.bins.iter().sum::<u64>(), 10_100);
        // Out of order (taps merged by time may step back): still counted.
        s.add(10 * MS);
        assert_eq!(s.between(0, u64::MAX).count, 10_101);
    }

    #[test]
    fn two_threads_shares_join_into_what_one_counted() {
        let times: Vec<u64> = (0..5_000u64)
            .map(|i| (i * i * 37) % (900_000 * MS))
            .collect();
        let mut one = Series::default();
        let (mut a, mut b) = (Series::default(), Series::default());
        for (i, &t) in times.iter().enumerate() {
            one.add(t);
            if i % 3 == 0 { a.add(t) } else { b.add(t) }
        }
        a.absorb(b);
        assert_eq!(a, one);
    }
}
