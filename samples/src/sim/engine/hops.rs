//! What a packet met between two taps: the truth of `roce-analyzer hops`.
//!
//! The same packet recorded by two taps tells its delay through everything between them, and at a single
//! switch queue that delay is the queue it waited behind. So each packet a tap recorded has a [`Trail`] since the
//! last tap that recorded it (which tap and when, the switches it crossed, how long it waited in their queues, the depth
//! it found and the marking decision), and when the next tap records it the trail becomes one sample of that
//! hop: (from tap, to tap, priority). At the end every hop's samples are summed up into
//! [`HopTruth`](crate::sim::truth::HopTruth).

use std::io::Write;

use super::*;
use crate::sim::scenario::SwitchSpec;
use crate::sim::truth::{
    HopTruth, MarkingBin, MarkingTruth, Percentiles, QueueStats, TapQueueTruth, TapTruth,
};

/// Width of the marking histogram's queue-depth bins.
const MARKING_BIN_BYTES: u64 = 4096;

/// What a packet met since the last tap that recorded it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Trail {
    /// That tap's index + 1 (0: no tap has recorded the packet yet), and the true time it did, ps.
    tap: u32,
    tap_ps: u64,
    /// Switches crossed since, the first of them, and the time waited in their egress queues.
    switches: u8,
    first_switch: u16,
    wait_ps: u64,
    /// The last of those switches, and the time waited in its queue alone.
    last_switch: u16,
    last_wait_ps: u64,
    /// At the last switch: when the packet was queued, the bytes queued ahead of it in its egress queue, the
    /// depth its marking decision compared (`u64::MAX`: none made), and its ECN field when it arrived.
    enq_ps: u64,
    queue_bytes: u64,
    mark_depth: u64,
    ecn_in: u8,
    /// How many taps recorded the packet so far (not reset at a tap).
    seen: u8,
}

/// One packet's passage from one tap to the next.
#[derive(Debug, Clone, Copy)]
struct Passage {
    /// True clock, ns, at each tap.
    from_ns: u64,
    to_ns: u64,
    wait_ps: u64,
    last_switch: u16,
    last_wait_ps: u64,
    queue_bytes: u64,
    mark_depth: u64,
    ecn_in: u8,
    ecn_out: u8,
}

/// The passages of one (from tap, to tap, priority).
#[derive(Debug)]
pub(super) struct HopAcc {
    from: usize,
    to: usize,
    prio: u8,
    /// The switch between the taps when every passage crossed exactly one, the same.
    switch: Option<usize>,
    mixed: bool,
    passages: Vec<Passage>,
}

impl<W: Write> World<'_, W> {
    /// A switch queued `pkt` behind `queue_bytes`.
    pub(super) fn trail_enqueue(&mut self, node: usize, pkt: &Packet, queue_bytes: u64) {
        let now = self.now;
        if let Some(t) = self.trails.get_mut(&pkt.id) {
            if t.switches == 0 {
                t.first_switch = node as u16;
            }
            t.switches = t.switches.saturating_add(1);
            t.last_switch = node as u16;
            t.enq_ps = now;
            t.queue_bytes = queue_bytes;
            t.mark_depth = u64::MAX;
            t.ecn_in = pkt.ecn;
        }
    }

    /// The switch compared `depth` with its marking curve for packet `id`.
    pub(super) fn trail_compared(&mut self, id: u64, depth: u64) {
        if let Some(t) = self.trails.get_mut(&id) {
            t.mark_depth = depth;
        }
    }

    /// A switch starts sending `pkt`: its wait ends.
    pub(super) fn trail_dequeue(&mut self, pkt: &Packet) {
        let now = self.now;
        if let Some(t) = self.trails.get_mut(&pkt.id) {
            t.last_wait_ps = now.saturating_sub(t.enq_ps);
            t.wait_ps += t.last_wait_ps;
        }
    }

    /// Tap `tap` records `pkt` now: the trail since the previous tap, if any, is one passage of that hop, and a
    /// new trail starts here.
    pub(super) fn trail_at_tap(&mut self, tap: usize, pkt: &Packet) {
        let t = self.trails.get(&pkt.id).copied().unwrap_or_default();
        if t.tap != 0 && t.tap as usize - 1 != tap {
            let from = t.tap as usize - 1;
            let key = (from, tap, pkt.prio);
            let i = match self.hops.iter().position(|h| (h.from, h.to, h.prio) == key) {
                Some(i) => i,
                None => {
                    self.hops.push(HopAcc {
                        from,
                        to: tap,
                        prio: pkt.prio,
                        switch: (t.switches == 1).then_some(usize::from(t.first_switch)),
                        mixed: false,
                        passages: Vec::new(),
                    });
                    self.hops.len() - 1
                }
            };
            let h = &mut self.hops[i];
            if t.switches != 1 || h.switch != Some(usize::from(t.first_switch)) {
                h.mixed = true;
            }
            h.passages.push(Passage {
                from_ns: t.tap_ps / PS_PER_NS,
                to_ns: self.now / PS_PER_NS,
                wait_ps: t.wait_ps,
                last_switch: t.last_switch,
                last_wait_ps: t.last_wait_ps,
                queue_bytes: t.queue_bytes,
                mark_depth: t.mark_depth,
                ecn_in: t.ecn_in,
                ecn_out: pkt.ecn,
            });
        }
        self.trails.insert(
            pkt.id,
            Trail {
                tap: tap as u32 + 1,
                tap_ps: self.now,
                seen: t.seen.saturating_add(1),
                ..Trail::default()
            },
        );
        self.tap_frames[tap] += 1;
    }

    /// `pkt` ends (consumed or dropped): its trail goes, and if one tap alone recorded it, that tap saw a packet
    /// no other tap can match.
    pub(super) fn trail_end(&mut self, pkt: &Packet) {
        if let Some(t) = self.trails.remove(&pkt.id)
            && t.seen == 1
        {
            self.tap_alone[t.tap as usize - 1] += 1;
        }
    }

    /// The hops' truth, per (from, to, priority), and the queues' truth, per (to, priority), each sorted by tap
    /// and priority.
    pub(super) fn hops_truth(&mut self, taps: &[TapTruth]) -> (Vec<HopTruth>, Vec<TapQueueTruth>) {
        let mut hops = std::mem::take(&mut self.hops);
        hops.sort_by_key(|h| (h.from, h.to, h.prio));
        // A tap records both directions of its link, and each direction leaves a different switch's queue.
        let mut queues: Vec<QueueGroup> = Vec::new();
        for h in &hops {
            for x in &h.passages {
                let key = (h.to, x.last_switch, h.prio);
                let i = match queues.iter().position(|q| q.key == key) {
                    Some(i) => i,
                    None => {
                        queues.push(QueueGroup {
                            key,
                            from: Vec::new(),
                            passages: Vec::new(),
                        });
                        queues.len() - 1
                    }
                };
                let q = &mut queues[i];
                if !q.from.iter().any(|g| std::ptr::eq(*g, h)) {
                    q.from.push(h);
                }
                q.passages.push(x);
            }
        }
        queues.sort_by_key(|q| q.key);
        let sc = self.sc;
        let queues = queues
            .into_iter()
            .map(
                |QueueGroup {
                     key: (to, switch, prio),
                     from,
                     passages,
                 }| TapQueueTruth {
                    tap: taps[to].name.clone(),
                    prio,
                    from: from.iter().map(|h| taps[h.from].name.clone()).collect(),
                    switch: sc.node_name(usize::from(switch)).to_string(),
                    one_switch: from.iter().all(|h| h.single().is_some()),
                    drain_gbps: sc.links[sc.taps[to].link].gbps,
                    packets: passages.len() as u64,
                    queue: self
                        .queue_stats(Some(usize::from(switch)), &passages, |x| x.last_wait_ps),
                },
            )
            .collect();
        let hops = hops.iter().map(|h| self.hop_truth(h, taps)).collect();
        (hops, queues)
    }

    fn hop_truth(&self, h: &HopAcc, taps: &[TapTruth]) -> HopTruth {
        let sc = self.sc;
        let (fa, fb) = (
            &sc.files[sc.taps[h.from].file],
            &sc.files[sc.taps[h.to].file],
        );
        let p: Vec<&Passage> = h.passages.iter().collect();
        let transit: Vec<u64> = p.iter().map(|x| x.to_ns - x.from_ns).collect();
        let local_min = p
            .iter()
            .map(|x| fb.local_ns(x.to_ns) as i64 - fa.local_ns(x.from_ns) as i64)
            .min()
            .unwrap_or(0);
        HopTruth {
            from: taps[h.from].name.clone(),
            to: taps[h.to].name.clone(),
            prio: h.prio,
            switches: h.single().map(|s| vec![sc.node_name(s).to_string()]),
            packets: p.len() as u64,
            clock_offset_ns: local_min,
            transit_ns: Percentiles::of(transit),
            queue: self.queue_stats(h.single(), &p, |x| x.wait_ps),
        }
    }

    /// What the packets found in the queue of `switch` (none: they crossed several, and only their waits, by
    /// `wait`, add up).
    fn queue_stats(
        &self,
        switch: Option<usize>,
        p: &[&Passage],
        wait: impl Fn(&Passage) -> u64,
    ) -> QueueStats {
        let sc = self.sc;
        QueueStats {
            queue_delay_ns: Percentiles::of(p.iter().map(|x| wait(x) / PS_PER_NS).collect()),
            queue_bytes: switch.map(|_| Percentiles::of(p.iter().map(|x| x.queue_bytes).collect())),
            marking: switch.and_then(|s| {
                let sw = &sc.switches[s - sc.hosts.len()];
                sw.ecn.then(|| marking_truth(sw, p))
            }),
        }
    }
}

/// The passages through one switch queue onto one tapped link: (tap, switch, priority), the hops they came
/// by, and the passages.
struct QueueGroup<'a> {
    key: (usize, u16, u8),
    from: Vec<&'a HopAcc>,
    passages: Vec<&'a Passage>,
}

impl HopAcc {
    /// The switch every passage crossed, alone.
    fn single(&self) -> Option<usize> {
        self.switch.filter(|_| !self.mixed)
    }
}

/// The switch's curve, what its queue did to ECN-capable packets, and the histogram of the depths it compared.
fn marking_truth(sw: &SwitchSpec, p: &[&Passage]) -> MarkingTruth {
    let ect: Vec<&&Passage> = p
        .iter()
        .filter(|x| (x.ecn_in == 1 || x.ecn_in == 2) && x.mark_depth != u64::MAX)
        .collect();
    let mut bins: Vec<MarkingBin> = Vec::new();
    for x in &ect {
        let lo = x.mark_depth / MARKING_BIN_BYTES * MARKING_BIN_BYTES;
        let i = match bins.iter().position(|b| b.depth_bytes == lo) {
            Some(i) => i,
            None => {
                bins.push(MarkingBin {
                    depth_bytes: lo,
                    ect_in: 0,
                    marked: 0,
                });
                bins.len() - 1
            }
        };
        bins[i].ect_in += 1;
        bins[i].marked += u64::from(x.ecn_out == 3);
    }
    bins.sort_by_key(|b| b.depth_bytes);
    MarkingTruth {
        at: sw.mark_at.name(),
        kmin_bytes: sw.kmin_bytes,
        kmax_bytes: sw.kmax_bytes,
        pmax: sw.pmax,
        ect_in: ect.len() as u64,
        marked: ect.iter().filter(|x| x.ecn_out == 3).count() as u64,
        between: ect
            .iter()
            .filter(|x| x.mark_depth > sw.kmin_bytes && x.mark_depth < sw.kmax_bytes)
            .count() as u64,
        bin_bytes: MARKING_BIN_BYTES,
        bins,
    }
}
