//! What becomes of each group of a packet's copies once the matcher closes it: held while the taps' order is
//! learnt, then put in path order, counted at the hops where a copy is missing, and turned into one sample per
//! hop it crossed, each waiting in its hop for the clock segment that measures it.

use roce_core::decode::ECN_CE;
use rustc_hash::FxHashMap;

use super::hop::{HopAcc, Sample};
use super::matching::{Copy, Group, MAX_COPIES};
use super::order::{Held, Order};
use super::queues::QueueAcc;
use super::rates::WIRE_OVERHEAD;
use super::segments::Segments;
use super::taps::Taps;
use super::{HopsOptions, diff};

const HOP_CACHE: usize = 64;

/// The pass's state past the matcher: the taps' order, the hops and queues, and the clock segments.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) opts: HopsOptions,
    pub(super) start_ns: Option<u64>,
    /// What the pass needs of each tap, by tap index.
    pub(super) taps: Taps,
    /// The groups closed while the order of the taps is learnt; `None` once it is known.
    pub(super) learning: Option<Held>,
    pub(super) learn_until: Option<u64>,
    order: Order,
    hop_index: FxHashMap<(u32, u32), u32>,
    pub(super) hops: Vec<HopAcc>,
    /// `hops` by (from, to): the order they are flushed and reported in.
    hop_order: Vec<u32>,
    /// Recently used entries of `hop_index`, by a hash of the taps: most packets cross a few hops.
    hop_cache: [Option<(u32, u32, u32)>; HOP_CACHE],
    pub(super) queues: Vec<QueueAcc>,
    pub(super) next_flush: Option<u64>,
    /// Per tap: its first and latest RoCE packet.
    pub(super) spans: Vec<(u64, u64)>,
    segments: Segments,
}

impl Core {
    pub(super) fn new(opts: HopsOptions) -> Self {
        Core {
            opts,
            start_ns: None,
            taps: Taps::default(),
            learning: Some(Held::default()),
            learn_until: None,
            order: Order::default(),
            hop_index: FxHashMap::default(),
            hops: Vec::new(),
            hop_order: Vec::new(),
            hop_cache: [None; HOP_CACHE],
            queues: Vec::new(),
            next_flush: None,
            spans: Vec::new(),
            segments: Segments::default(),
        }
    }

    fn span(&self, tap: u32) -> (u64, u64) {
        self.spans
            .get(tap as usize)
            .copied()
            .unwrap_or((u64::MAX, 0))
    }

    /// The line rate of `tap`, bit/s, when one is known ([`Taps::line_bps`]).
    pub(super) fn line_bps(&self, tap: u32) -> Option<u64> {
        self.taps.line_bps(self.opts.link_bps, tap)
    }

    /// A group the matcher closed.
    pub(super) fn group(&mut self, g: &Group) {
        let pi = self.order.path_id(g.key.src, g.key.dst);
        match &mut self.learning {
            Some(held) => held.hold(pi, g.copies()),
            None => self.process(pi, g.copies()),
        }
    }

    /// Decides the order of the taps from the held groups ([`Order::decide`]); then handles them.
    pub(super) fn end_learning(&mut self) {
        let held = self.learning.take().unwrap_or_default();
        for (pi, copies) in held.groups() {
            self.order.learn(pi, copies, &self.taps);
        }
        self.order.decide();
        for (pi, copies) in held.groups() {
            self.process(pi, copies);
        }
    }

    /// A packet's copies, of path `pi`: put in order, counted where one is missing, and one sample per hop.
    fn process(&mut self, pi: usize, copies: &[Copy]) {
        let mut buf = [Copy::default(); MAX_COPIES];
        let n = copies.len().min(MAX_COPIES);
        buf[..n].copy_from_slice(&copies[..n]);
        let order = &mut buf[..n];
        // Insertion sort: a handful of copies, and `before` is a comparison, not a key.
        for i in 1..order.len() {
            let mut j = i;
            while j > 0 && self.order.before(&order[j], &order[j - 1], pi, &self.taps) {
                order.swap(j, j - 1);
                j -= 1;
            }
        }
        let order = &buf[..n];
        let mask: u64 = order
            .iter()
            .filter(|c| c.tap < 64)
            .fold(0, |m, c| m | 1 << c.tap);
        let path = &mut self.order.paths[pi];
        path.mask |= mask;
        if mask == path.mask
            && order.len() >= path.order.len()
            && !path.order.iter().copied().eq(order.iter().map(|c| c.tap))
        {
            path.order.clear();
            path.order.extend(order.iter().map(|c| c.tap));
        }
        let missing = path.mask & !mask;
        if missing != 0 && path.order.len() >= 2 {
            let porder = path.order.clone();
            for (i, &t) in porder.iter().enumerate() {
                if t >= 64 || missing & (1 << t) == 0 {
                    continue;
                }
                let at = |tap: u32| order.iter().find(|c| c.tap == tap).map(|c| c.ts);
                if let Some(&p) = i.checked_sub(1).and_then(|j| porder.get(j))
                    && let Some(ts) = at(p)
                {
                    // A copy that could only have reached `t` after `t`'s capture ended is not missing.
                    let (first, last) = self.span(t);
                    let h = self.hop(p, t);
                    let reach = ns(ts).saturating_add(h.raw_max.max(0));
                    if reach > ns(last) || ns(ts) < ns(first).saturating_sub(h.raw_max.max(0)) {
                        h.outside_capture += 1;
                    } else {
                        h.only_from += 1;
                    }
                }
                if let Some(&n) = porder.get(i + 1)
                    && n < 64
                    && let Some(ts) = at(n)
                {
                    // Nor one that passed `t` before `t`'s capture began.
                    let (first, _) = self.span(t);
                    let h = self.hop(t, n);
                    if ns(ts).saturating_sub(h.raw_max.max(0)) < ns(first) {
                        h.outside_capture += 1;
                    } else {
                        h.only_to += 1;
                    }
                }
            }
        }
        for w in order.windows(2) {
            let (u, d) = (w[0], w[1]);
            let link = self.line_bps(d.tap);
            let prio = if d.pcp != 0xff { d.pcp } else { u.pcp };
            let prio = if prio == 0xff { 0 } else { prio };
            let hi = self.hop_id(u.tap, d.tap);
            let queue = self.queue(hi, prio, d.dst_mac);
            let h = &mut self.hops[hi];
            h.matched += 1;
            h.rate.gap(u64::from(d.gap), d.len);
            h.max_wire = h.max_wire.max(d.len.saturating_add(WIRE_OVERHEAD));
            if u.seen != d.seen {
                h.retransmitted += 1;
                continue;
            }
            let raw = diff(d.ts, u.ts);
            h.raw_min = h.raw_min.min(raw);
            h.raw_max = h.raw_max.max(raw);
            let ser = link.map_or(0, |bps| {
                ((u128::from(d.len) + u128::from(WIRE_OVERHEAD)) * 8 * 1_000_000_000 / bps as u128)
                    as i64
            });
            let s = Sample {
                t: u.ts,
                d: raw.saturating_sub(ser),
                queue,
                ect: matches!(u.ecn, 1 | 2),
                marked: matches!(u.ecn, 1 | 2) && d.ecn == ECN_CE,
            };
            h.clock.add(s.t, s.d);
            h.pending.push_back(s);
        }
    }

    fn hop(&mut self, from: u32, to: u32) -> &mut HopAcc {
        let i = self.hop_id(from, to);
        &mut self.hops[i]
    }

    /// The index of the hop from `from` to `to` in `hops`, made when first needed.
    #[inline]
    fn hop_id(&mut self, from: u32, to: u32) -> usize {
        let slot = (from.wrapping_mul(31).wrapping_add(to) as usize) % HOP_CACHE;
        if let Some((f, t, i)) = self.hop_cache[slot]
            && (f, t) == (from, to)
        {
            return i as usize;
        }
        if let Some(&i) = self.hop_index.get(&(from, to)) {
            self.hop_cache[slot] = Some((from, to, i));
            return i as usize;
        }
        let shared = self.taps.file_of(from) == self.taps.file_of(to);
        let (lo, hi) = (from.min(to), from.max(to));
        let assumed = !shared && !self.order.two_way(lo, hi);
        let window = self.opts.clock_window_ns;
        let start = self.start_ns.unwrap_or(0);
        let i = self.hops.len() as u32;
        self.hops
            .push(HopAcc::new(from, to, shared, assumed, window, start));
        self.hop_index.insert((from, to), i);
        let hops = &self.hops;
        let at = self
            .hop_order
            .partition_point(|&j| (hops[j as usize].from, hops[j as usize].to) < (from, to));
        self.hop_order.insert(at, i);
        i as usize
    }

    /// The queue that packets crossing hop `hop` at priority `prio` waited in (the hop's downstream tap, the
    /// priority, the hop's upstream tap), counting the destination MAC they left with.
    #[inline]
    fn queue(&mut self, hop: usize, prio: u8, mac: [u8; 6]) -> u32 {
        let h = &mut self.hops[hop];
        let slot = &mut h.queues[usize::from(prio & 7)];
        if *slot == u32::MAX {
            *slot = self.queues.len() as u32;
            self.queues.push(QueueAcc::new(
                h.to,
                prio,
                h.from,
                self.start_ns.unwrap_or(0),
            ));
        }
        let i = *slot;
        self.queues[i as usize].count_mac(mac);
        i
    }

    /// Measures every hop's samples from before `t` ([`Segments::flush`]).
    pub(super) fn flush(&mut self, t: u64) {
        self.segments.flush(
            t,
            &mut self.hops,
            &self.hop_order,
            &mut self.queues,
            &self.taps,
            &self.opts,
        );
    }
}

/// A timestamp as signed ns; past 2262 (a corrupt record) it saturates rather than wrapping negative.
fn ns(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}
