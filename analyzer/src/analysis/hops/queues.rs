//! The egress queues: each downstream tap, priority and direction the hops' packets left through, what their
//! queueing delays and marks added up to, and what that says in bytes ahead of a packet and of the curve the
//! queue marked by.

use std::collections::{BTreeMap, BTreeSet};

use super::HopsOptions;
use super::hop::Sample;
use super::rates::{RateAcc, RateMap};
use super::red::{self, Bin, RedFit};
use super::report::{MarkingReport, QueueReport};
use super::series::Series;
use crate::analysis::hist::{self, Hist, Percentiles};

/// One queue as the pass fills it.
#[derive(Debug)]
pub(super) struct QueueAcc {
    tap: u32,
    prio: u8,
    /// Destination MACs its packets left with, and how many of each.
    macs: BTreeMap<[u8; 6], u64>,
    /// The MAC counted last and its count not yet in `macs`: a queue's packets nearly all leave with one MAC,
    /// so the map is touched only when it changes.
    recent: Option<([u8; 6], u64)>,
    from: BTreeSet<u32>,
    delay: Hist,
    /// Per delay bucket: (ECN-capable arrivals, of them marked).
    ecn: Vec<(u64, u64)>,
    series: Series,
    /// Times of CE marks (upstream clock), for the report's chart; bounded.
    marks: Vec<(u64, u64)>,
    /// The largest frame that left through it, on the wire, bytes.
    max_wire: u32,
}

const MAX_MARKS: usize = 20_000;

impl QueueAcc {
    /// The queue of packets from tap `from` leaving tap `tap` at priority `prio`; its series start at `start_ns`.
    pub(super) fn new(tap: u32, prio: u8, from: u32, start_ns: u64) -> Self {
        QueueAcc {
            tap,
            prio,
            macs: BTreeMap::new(),
            recent: None,
            from: BTreeSet::from([from]),
            delay: Hist::default(),
            ecn: Vec::new(),
            series: Series::new(start_ns),
            marks: Vec::new(),
            max_wire: 0,
        }
    }

    /// A packet that waited `q` ns in the queue, once its clock line was known; `max_wire` is the largest frame
    /// its hop carried.
    pub(super) fn add(&mut self, s: &Sample, q: u64, max_wire: u32) {
        self.max_wire = self.max_wire.max(max_wire);
        self.delay.add(q);
        self.series.add(s.t, q, s.ect, s.marked);
        if s.ect {
            let b = hist::bucket(q);
            if b >= self.ecn.len() {
                self.ecn.resize(b + 1, (0, 0));
            }
            self.ecn[b].0 += 1;
            self.ecn[b].1 += s.marked as u64;
            if s.marked && self.marks.len() < MAX_MARKS {
                self.marks.push((s.t, q));
            }
        }
    }

    #[inline]
    pub(super) fn count_mac(&mut self, mac: [u8; 6]) {
        match &mut self.recent {
            Some((m, n)) if *m == mac => *n += 1,
            _ => {
                self.settle_macs();
                self.recent = Some((mac, 1));
            }
        }
    }

    /// Moves the recent MAC's count into `macs`.
    fn settle_macs(&mut self) {
        if let Some((m, n)) = self.recent.take() {
            *self.macs.entry(m).or_insert(0) += n;
        }
    }

    fn absorb(&mut self, o: QueueAcc) {
        for (m, n) in o.macs {
            *self.macs.entry(m).or_insert(0) += n;
        }
        self.from.extend(o.from);
        self.delay.merge(&o.delay);
        if o.ecn.len() > self.ecn.len() {
            self.ecn.resize(o.ecn.len(), (0, 0));
        }
        for (a, b) in self.ecn.iter_mut().zip(&o.ecn) {
            a.0 += b.0;
            a.1 += b.1;
        }
        self.series.merge(o.series);
        self.marks.extend(o.marks);
        self.marks.sort_unstable();
        self.marks.truncate(MAX_MARKS);
    }
}

/// One queue per downstream tap, priority and direction: the queues of upstream taps whose packets left the
/// downstream tap towards a common destination MAC are one.
fn merge_directions(queues: Vec<QueueAcc>) -> Vec<QueueAcc> {
    let mut out: Vec<QueueAcc> = Vec::new();
    for q in queues {
        let mut target: Option<usize> = None;
        let mut i = 0;
        while i < out.len() {
            let o = &out[i];
            let joins = o.tap == q.tap
                && o.prio == q.prio
                && (o.macs.keys().any(|m| q.macs.contains_key(m))
                    || target.is_some_and(|t| out[t].macs.keys().any(|m| o.macs.contains_key(m))));
            if !joins {
                i += 1;
                continue;
            }
            match target {
                None => {
                    target = Some(i);
                    i += 1;
                }
                Some(t) => {
                    let o = out.remove(i);
                    let t = if t > i { t - 1 } else { t };
                    out[t].absorb(o);
                    target = Some(t);
                }
            }
        }
        match target {
            Some(t) => out[t].absorb(q),
            None => out.push(q),
        }
    }
    out
}

/// Every queue as the tables show it, those of one direction merged: drained at the downstream tap's line rate
/// where one is known (`line_bps`), else at the rate measured there towards the MAC most of its packets left
/// with. `pauses` are the PFC pauses the taps saw, as (tap, priority, time).
pub(super) fn reports(
    mut accs: Vec<QueueAcc>,
    rates: &RateMap,
    line_bps: impl Fn(u32) -> Option<u64>,
    opts: &HopsOptions,
    pauses: &[(u32, u8, u64)],
    name: &impl Fn(u32) -> String,
) -> Vec<QueueReport> {
    for q in &mut accs {
        q.settle_macs();
    }
    merge_directions(accs)
        .into_iter()
        .map(|q| {
            let mac = q.macs.iter().max_by_key(|(_, n)| **n).map(|(m, _)| *m);
            let measured = mac
                .and_then(|m| rates.get(q.tap, &m))
                .and_then(RateAcc::rate);
            let (gbps, is_measured) = match line_bps(q.tap) {
                Some(bps) => (Some(bps as f64 / 1e9), false),
                None => (measured, measured.is_some()),
            };
            queue_report(q, gbps, is_measured, opts, pauses, name)
        })
        .collect()
}

fn mac_string(m: &[u8; 6]) -> String {
    roce_core::decode::mac_to_string(m)
}

/// The marking curve's depth bins at most: 64 Ki bins of the default 4 KiB reach 256 MiB, beyond the largest
/// shared buffer of today's switches.
const MAX_CURVE_BINS: usize = 1 << 16;

/// What a queue showed, in bytes where `gbps` (its drain rate) turns delays into depths, with the marking
/// curve fitted to its marks.
fn queue_report(
    q: QueueAcc,
    gbps: Option<f64>,
    measured: bool,
    opts: &HopsOptions,
    pauses: &[(u32, u8, u64)],
    name: &impl Fn(u32) -> String,
) -> QueueReport {
    // ns × Gb/s = bits; / 8 = bytes.
    let k = gbps.map(|g| g / 8.0);
    let bin_bytes = opts.bin_bytes.max(1);
    // Deeper than any switch buffer: a delay the clock line could not explain (a corrupt or skewed timestamp),
    // not a queue. It stays in the ECT/marked totals but not on the curve, whose bins are dense and would
    // otherwise take memory in proportion to the bogus depth (the fuzzer found 27 GB).
    let max_bytes = MAX_CURVE_BINS as f64 * bin_bytes as f64;
    let slices = k.map_or_else(Vec::new, |k| red::slices(&q.ecn, k, max_bytes));
    let mut bins: Vec<Bin> = Vec::new();
    for s in &slices {
        let i = (s.depth_bytes / bin_bytes as f64) as usize;
        if i >= bins.len() {
            let from = bins.len();
            bins.extend((from..=i).map(|j| Bin {
                depth_bytes: j as u64 * bin_bytes,
                ..Bin::default()
            }));
        }
        bins[i].ect_in += s.ect_in;
        bins[i].marked += s.marked;
    }
    let (ect_in, marked) = q.ecn.iter().fold((0, 0), |(n, m), &(a, b)| (n + a, m + b));
    let mut fit: Option<RedFit> = red::fit(&slices, bin_bytes as f64);
    if let Some(f) = &mut fit {
        f.allow_for_frame_on_wire(f64::from(q.max_wire));
    }
    let between = fit.map_or(0, |f| {
        slices
            .iter()
            .filter(|s| (f.curve.kmin_bytes..f.curve.kmax_bytes).contains(&s.depth_bytes))
            .map(|s| s.ect_in)
            .sum()
    });
    // The upstream tap sees the switch's pauses for this priority when this queue's own ingress fills.
    let pfc_depth_bytes = k.and_then(|k| {
        let mut depths: Vec<f64> = pauses
            .iter()
            .filter(|(tap, prio, _)| *prio == q.prio && q.from.contains(tap))
            .filter_map(|&(_, _, t)| {
                let i = (t.saturating_sub(q.series.start_ns) / q.series.bin_ns) as usize;
                let b = q.series.bins.get(i)?;
                (b.packets > 0).then_some(b.max_ns as f64 * k)
            })
            .collect();
        depths.sort_by(f64::total_cmp);
        depths.get(depths.len() / 2).copied()
    });
    let delay = q.delay.percentiles();
    QueueReport {
        tap: name(q.tap),
        priority: q.prio,
        from: q.from.iter().map(|&t| name(t)).collect(),
        dst_macs: q.macs.keys().map(mac_string).collect(),
        packets: q.delay.count(),
        drain_gbps: gbps,
        drain_measured: measured,
        queue_delay_ns: delay,
        // A queue that never delayed a packet held nothing, whatever its rate.
        queue_bytes: k
            .map(|k| delay.scaled(k))
            .or((delay.max == 0.0).then_some(Percentiles::default())),
        marking: MarkingReport {
            ect_in,
            marked,
            kmin_bytes: fit.and_then(|f| f.kmin_bytes()),
            kmin_interval: fit.map(|f| f.kmin),
            kmax_bytes: fit.and_then(|f| f.kmax_bytes()),
            kmax_interval: fit.map(|f| f.kmax),
            pmax: fit.and_then(|f| f.pmax()),
            pmax_interval: fit.map(|f| f.pmax),
            fit_rmse: fit.map(|f| f.fit_rmse),
            between,
            bin_bytes: opts.bin_bytes,
            bins,
            curve: fit.map(|f| f.curve),
        },
        pfc_depth_bytes,
        marks: q
            .marks
            .iter()
            .map(|&(t, d)| (t, k.map_or(d as f64, |k| d as f64 * k)))
            .collect(),
        series: q.series,
    }
}
