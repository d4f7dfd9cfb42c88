//! Taps joined into hops, hops into queues: the congestion point seen from both sides of a switch.
//!
//! Every (file, interface) is a tap. A packet seen at several taps is matched by what switches leave alone
//! ([`matching`]); its copies are put in path order; each pair of consecutive taps is a hop, whose delay beyond
//! the least (the clocks' offset plus the fixed transit, followed over time by [`clock`]) is the time the
//! packet queued. Per queue (downstream tap × priority × next hop), that delay times the port's drain rate is
//! the bytes queued ahead of the packet, and whether it arrived ECN-capable and left CE-marked traces the
//! switch's marking curve ([`red`]). See docs/hops.md.
//!
//! Streaming, in three stages, each holding a bounded window: copies are grouped for `match_window` after a
//! packet's first copy; the first `segment` of groups is held until the direction of every pair of taps is
//! known; after that each hop's samples wait one segment more, until the clock line over the windows around
//! them is known, and then go into histograms and series whose size depends on the values and the capture's
//! span, not on the packets.

pub mod clock;
pub use super::hist;
pub(crate) mod matching;
pub mod np;
pub mod red;

use std::collections::{BTreeMap, BTreeSet};

use roce_capture::Capture;
use roce_core::decode::{Decoder, ECN_CE, Frame, Kind};
use roce_core::frames::Frames;
use roce_core::line::LineRates;
use roce_core::passes::psn::{FlowPsn, Numbering, PsnEvent};
use roce_wire::Opcode;
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::analysis::findings::{Finding, Severity};
use clock::ClockTrack;
use hist::{Hist, Percentiles};
use matching::{Copy, Group, MAX_COPIES, Matcher, Seen};
use np::{NpCheck, NpReport};
use red::{Bin, Curve, Interval, RedFit};

/// Bytes a frame costs on the wire besides its captured length: preamble and start delimiter (8), FCS (4),
/// the inter-frame gap (12).
pub const WIRE_OVERHEAD: u32 = 24;
/// Series keep at most this many bins; past it, the bin width doubles and neighbours merge.
const MAX_SERIES_BINS: usize = 2048;

/// How `hops` runs.
#[derive(Debug, Clone)]
pub struct HopsOptions {
    /// Copies of one packet are grouped within this time of its first copy: it must exceed the largest
    /// delay between taps plus the largest clock offset between files.
    pub match_window_ns: u64,
    /// Each hop's least delay is taken per window this long; a window needs one packet that found the queue
    /// empty.
    pub clock_window_ns: u64,
    /// Drift between two files' clocks beyond this is taken for a standing queue instead.
    pub max_drift_ppm: f64,
    /// `--link-speed`: the drain rate of every queue, and the rate that takes each frame's serialization out
    /// of its delay. `None`: each downstream tap's recorded line rate (`if_speed`); at a tap without one the
    /// drain rate is measured from back-to-back departures, and frames are not corrected by size (a line
    /// that is only assumed would make up queue depths).
    pub link_bps: Option<u64>,
    /// The NP's least time between two CNPs to one QP, for the NP check.
    pub np_min_gap_ns: u64,
    /// Depth bins of the marking fit.
    pub bin_bytes: u64,
    /// The switch's configured curve (Kmin bytes, Kmax bytes, Pmax), to compare the fit with.
    pub switch_ecn: Option<(f64, f64, f64)>,
}

impl Default for HopsOptions {
    fn default() -> Self {
        HopsOptions {
            match_window_ns: 10_000_000,
            clock_window_ns: 10_000_000,
            max_drift_ppm: 100.0,
            link_bps: None,
            np_min_gap_ns: 4_000,
            bin_bytes: 4096,
            switch_ecn: None,
        }
    }
}

impl HopsOptions {
    /// Samples wait this long for the clock windows after them.
    fn segment_ns(&self) -> u64 {
        self.clock_window_ns.saturating_mul(10).max(1)
    }
}

// ---------------------------------------------------------------------------------------------------------
// Output

/// One tap, as every table names it.
#[derive(Debug, Clone, Serialize)]
pub struct TapReport {
    /// `FILE:IFACE`: what hops and queues call it.
    pub tap: String,
    /// The capture file the tap belongs to: taps of one file share a clock.
    pub file: String,
    /// The interface's index in that file.
    pub interface: u32,
    /// The interface's recorded name.
    pub name: Option<String>,
    /// RoCE packets (CNPs included) it saw.
    pub packets: u64,
    /// PSNs its flows skipped (packets it never saw).
    pub psn_gaps: u64,
    /// Drops its interface statistics recorded (`isb_ifdrop` + `isb_osdrop`), when any were written.
    pub isb_dropped: Option<u64>,
}

/// One hop: a pair of taps some packets crossed one after the other.
#[derive(Debug, Clone, Serialize)]
pub struct HopReport {
    /// The upstream tap (`FILE:IFACE`).
    pub from: String,
    /// The downstream tap.
    pub to: String,
    /// Packets seen at both taps, the ones the delays are measured on.
    pub matched: u64,
    /// Packets of this hop's flows seen at only one of its taps (`only_from` + `only_to`).
    pub unmatched: u64,
    /// Seen upstream, never downstream: lost between the taps, or not captured downstream.
    pub only_from: u64,
    /// Seen downstream, never upstream: a switch does not make packets, so the upstream capture missed them.
    pub only_to: u64,
    /// Seen at one tap only, but at a time the other tap's capture did not cover (it began later or ended
    /// earlier than the packet could have passed it): not counted as unmatched.
    pub outside_capture: u64,
    /// Matched packets left out of the delays because one tap saw the packet more often than the other
    /// (a retransmission whose first copy was lost between them).
    pub retransmitted: u64,
    /// What the unmatched packets point to.
    pub loss: Option<String>,
    /// The least delay seen: the clocks' offset plus the base transit.
    pub clock_offset_ns: i64,
    /// The drift followed between the two clocks (0 for taps of one file): the slope of the line the delays are
    /// measured from, as of the end of the capture.
    pub drift_ppm: f64,
    /// Whether the clock windows pinned the drift for every packet of the hop (always, for taps of one file).
    /// When not, a standing queue and a drift could not be told apart: `drift_ppm` is the value nearest zero
    /// that the least delays allow, and `clock_error_ns` bounds what that assumption may cost.
    pub drift_known: bool,
    /// The drifts the least delays allowed over the capture, lowest and highest, ppm: close around `drift_ppm`
    /// when known. Null for taps of one file.
    pub drift_range_ppm: Option<[f64; 2]>,
    /// The largest error the drift's uncertainty may have put in a queueing delay, ns (0 when known).
    pub clock_error_ns: f64,
    /// The time the hop's largest frame holds its port (ns), and that port's rate (Gb/s): how close to the
    /// clock line a window had to come to count as an empty queue, and what a delay error is worth in bytes.
    #[serde(skip)]
    pub frame_time: (f64, f64),
    /// Whether the two taps share a clock (taps of one file).
    pub shared_clock: bool,
    /// Whether the order of the two taps was only assumed (one-way traffic between taps with two clocks).
    pub order_assumed: bool,
    /// Time spent queued on the hop, beyond the least delay: what congestion added.
    pub queue_delay_ns: Percentiles,
    #[serde(skip)]
    /// Queueing delay over time, for the report's charts (not in the JSON).
    pub series: Series,
}

/// The marking a queue did, and the curve fitted to it.
#[derive(Debug, Clone, Serialize)]
pub struct MarkingReport {
    /// Packets that arrived ECT(0) or ECT(1).
    pub ect_in: u64,
    /// Of those, the ones that left CE.
    pub marked: u64,
    /// Depth at which the fitted curve starts marking; null without a fit, or when the data do not bound it
    /// (then `kmin_interval` says what they do say).
    pub kmin_bytes: Option<f64>,
    /// The depths Kmin may have, 95 %; null without a fit.
    pub kmin_interval: Option<Interval>,
    /// Depth at which it reaches `pmax`; above it, every packet is marked. Null when the queue never went
    /// deep enough to show it: `kmax_interval` is then open above.
    pub kmax_bytes: Option<f64>,
    /// The depths Kmax may have, 95 %.
    pub kmax_interval: Option<Interval>,
    /// The marking probability at `kmax`; null without a fit, or when Kmax is not bounded.
    pub pmax: Option<f64>,
    /// The values Pmax may have, 95 %.
    pub pmax_interval: Option<Interval>,
    /// How far the bins' marked fractions lie from the fitted curve, to judge the fit.
    pub fit_rmse: Option<f64>,
    /// ECN-capable packets that found the queue between the fitted Kmin and Kmax: a fit with few of them
    /// says little about the curve's slope.
    pub between: u64,
    /// Width of the depth bins below.
    pub bin_bytes: u64,
    /// ECN-capable packets and marks per depth bin: the evidence the curve is fitted to.
    pub bins: Vec<Bin>,
    /// The most likely curve, for drawing over the depths the queue reached (not in the JSON: where an
    /// interval is open, its value is one of many that fit as well).
    #[serde(skip)]
    pub curve: Option<Curve>,
}

impl MarkingReport {
    /// Kmin and Kmax (in bytes divided by `scale`, with `digits` decimals) and Pmax as every output writes
    /// them: the value with its 95 % interval, or `≥ low` where the data do not bound it. `None` without a fit.
    pub fn describe(&self, scale: f64, digits: usize) -> Option<[String; 3]> {
        let c = self.curve?;
        Some([
            self.kmin_interval?.describe(c.kmin_bytes, scale, digits),
            self.kmax_interval?.describe(c.kmax_bytes, scale, digits),
            self.pmax_interval?.describe(c.pmax, 1.0, 3),
        ])
    }
}

/// One egress queue, as its downstream tap sees it.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    /// The downstream tap that sees the queue's output.
    pub tap: String,
    /// The priority (PCP) the queue serves: a switch queues each priority apart.
    pub priority: u8,
    /// The upstream taps whose packets went through it.
    pub from: Vec<String>,
    /// The destination MACs its packets left with: the packets of two upstream taps share a queue when they
    /// share one, so that one tap's two directions stay apart.
    pub dst_macs: Vec<String>,
    /// Packets counted through the queue.
    pub packets: u64,
    /// The rate it drained at, from `--link-speed` or measured.
    pub drain_gbps: Option<f64>,
    /// Whether `drain_gbps` was measured from back-to-back departures.
    pub drain_measured: bool,
    /// Time spent queued, beyond the least delay of the hop.
    pub queue_delay_ns: Percentiles,
    /// Bytes ahead of a packet when it entered the queue (delay × drain rate).
    pub queue_bytes: Option<Percentiles>,
    /// What the queue marked, and the RED curve fitted to it.
    pub marking: MarkingReport,
    /// Median depth when the upstream tap saw PFC pause this priority, when it did.
    pub pfc_depth_bytes: Option<f64>,
    #[serde(skip)]
    /// Queueing delay over time, for the report's charts (not in the JSON).
    pub series: Series,
    #[serde(skip)]
    /// (time, depth) of marked packets, up to a bound, for the marks on the depth chart (not in the JSON).
    pub marks: Vec<(u64, f64)>,
}

/// Everything `hops` found.
#[derive(Debug, Clone, Serialize)]
pub struct HopsReport {
    /// Every tap, with what it saw.
    pub taps: Vec<TapReport>,
    /// Every hop between two taps, with delays and losses.
    pub hops: Vec<HopReport>,
    /// Every egress queue, with depth and marking.
    pub queues: Vec<QueueReport>,
    /// The notification point's CNPs as each tap saw them.
    pub np: Vec<NpReport>,
    /// What the hops analysis found worth a reader's attention, with evidence (the whole analysis's findings
    /// include them).
    pub findings: Vec<Finding>,
    /// How long a packet's copies were awaited, so the numbers can be read against it.
    pub match_window_ns: u64,
    /// Most packets waiting for their copies at once: the memory the match window cost.
    pub peak_in_flight: usize,
    /// Copies left out of matching: at more taps than one group records.
    pub copies_left_out: u64,
    /// The capture's first timestamp (series are relative to it).
    #[serde(skip)]
    pub start_ns: u64,
}

/// One time bin of a hop's or queue's series.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SeriesBin {
    /// Packets in the bin.
    pub packets: u32,
    /// Sum of their queueing delays, for the bin's mean.
    pub sum_ns: f64,
    /// Their largest queueing delay.
    pub max_ns: u64,
    /// Packets that arrived ECN-capable.
    pub ect_in: u32,
    /// Of those, the ones that left CE-marked.
    pub marked: u32,
}

/// Queueing delay over time, in bins that widen to stay under [`MAX_SERIES_BINS`].
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Start of the first bin.
    pub start_ns: u64,
    /// Width of each bin (doubles as the series grows).
    pub bin_ns: u64,
    /// The bins, from `start_ns` on.
    pub bins: Vec<SeriesBin>,
}

impl Series {
    fn new(start_ns: u64) -> Self {
        Series {
            start_ns,
            bin_ns: 1_000,
            bins: Vec::new(),
        }
    }

    fn add(&mut self, t: u64, q: u64, ect: bool, marked: bool) {
        let rel = t.saturating_sub(self.start_ns);
        let mut i = (rel / self.bin_ns) as usize;
        while i >= MAX_SERIES_BINS {
            self.widen();
            i = (rel / self.bin_ns) as usize;
        }
        if i >= self.bins.len() {
            self.bins.resize(i + 1, SeriesBin::default());
        }
        let b = &mut self.bins[i];
        b.packets += 1;
        b.sum_ns += q as f64;
        b.max_ns = b.max_ns.max(q);
        b.ect_in += ect as u32;
        b.marked += marked as u32;
    }

    fn merge(&mut self, mut o: Series) {
        while self.bin_ns < o.bin_ns {
            self.widen();
        }
        while o.bin_ns < self.bin_ns {
            o.widen();
        }
        if o.bins.len() > self.bins.len() {
            self.bins.resize(o.bins.len(), SeriesBin::default());
        }
        for (a, b) in self.bins.iter_mut().zip(o.bins) {
            a.packets += b.packets;
            a.sum_ns += b.sum_ns;
            a.max_ns = a.max_ns.max(b.max_ns);
            a.ect_in += b.ect_in;
            a.marked += b.marked;
        }
    }

    fn widen(&mut self) {
        let merged = self
            .bins
            .chunks(2)
            .map(|c| {
                c.iter().fold(SeriesBin::default(), |a, b| SeriesBin {
                    packets: a.packets + b.packets,
                    sum_ns: a.sum_ns + b.sum_ns,
                    max_ns: a.max_ns.max(b.max_ns),
                    ect_in: a.ect_in + b.ect_in,
                    marked: a.marked + b.marked,
                })
            })
            .collect();
        self.bins = merged;
        self.bin_ns *= 2;
    }
}

// ---------------------------------------------------------------------------------------------------------
// The pass

/// One packet's crossing of one hop, waiting for its clock line.
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: u64,
    /// Delay less the frame's serialization (when the link speed is known).
    d: i64,
    queue: u32,
    ect: bool,
    marked: bool,
}

#[derive(Debug)]
struct HopAcc {
    from: u32,
    to: u32,
    shared: bool,
    assumed: bool,
    matched: u64,
    only_from: u64,
    only_to: u64,
    retransmitted: u64,
    raw_min: i64,
    /// The largest delay matched: a packet seen upstream later than this before the downstream capture
    /// ended could not have been seen there.
    raw_max: i64,
    outside_capture: u64,
    clock: ClockTrack,
    /// Gaps between departures at the downstream tap before the hop's packets: the port's rate, which turns
    /// a frame into the time it holds the port.
    rate: RateAcc,
    /// The largest frame the hop carried, on the wire (with preamble, FCS and gap), bytes.
    max_wire: u32,
    pending: std::collections::VecDeque<Sample>,
    delay: Hist,
    series: Series,
    /// The slope of the last line (ns per ns).
    drift: f64,
    /// The drifts the windows allowed, lowest and highest over the capture (this hop's sign).
    drift_range: (f64, f64),
    /// Whether every line the hop's packets were measured against had its drift pinned by the windows.
    drift_known: bool,
    /// The largest error the drift's uncertainty may have put in a queueing delay, ns.
    clock_error_ns: f64,
    /// How close to the line a window had to come to count as an empty queue, at the last fit, ns; and the
    /// port rate that came from, Gb/s.
    touch: (f64, f64),
    /// The least of its line less its clocks' carried offset ([`Core::carry_floors`]): the floor it showed.
    floor: f64,
    /// Per priority: the queue this hop's packets waited in (`u32::MAX` until one did).
    queues: [u32; 8],
}

#[derive(Debug)]
struct QueueAcc {
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

/// Back-to-back departures at one tap towards one next hop.
#[derive(Debug, Default)]
struct RateAcc {
    last: Option<u64>,
    /// Count and sum of the rates per quarter Gb/s.
    hist: Vec<(u32, f64)>,
}

const RATE_STEP_GBPS: f64 = 0.25;
const RATE_MAX_GBPS: f64 = 1600.0;
/// Gaps slower than this are idle time, not a port's rate.
const RATE_MIN_GBPS: f64 = 1.0;
/// The rate a port is taken to have when none of a pair of clocks' hops showed one: such ports were never busy
/// enough to hold a standing queue, and a frame's time at 10 Gb/s, the slowest RoCE links, errs towards
/// taking their windows' least delays as an empty queue.
const UNKNOWN_PORT_GBPS: f64 = 10.0;
const MAX_MARKS: usize = 20_000;

/// Per pair of taps (lower index first) and IP direction: the range of `t_hi − t_lo`.
#[derive(Debug, Clone, Copy)]
struct ClassStat {
    lo: i64,
    hi: i64,
}

/// A flow direction's taps, in path order, as its most complete packet showed them.
#[derive(Debug, Default)]
struct PathInfo {
    src: u128,
    dst: u128,
    mask: u64,
    order: Vec<u32>,
    /// The first few of `Core::decided`'s entries for this direction, as (lower tap, higher tap, lower first):
    /// ordering a packet's copies then needs no lookup keyed by its two addresses.
    decided: Vec<(u32, u32, bool)>,
}

const HOP_CACHE: usize = 64;

/// Most pairs of taps a path keeps its own copy of the order decided for.
const PATH_DECIDED: usize = 16;

/// Groups closed while the tap order is learnt, held compactly (a closed [`Group`] reserves room for every
/// copy it could have had; most have two).
#[derive(Debug, Default)]
struct Held {
    /// (path, first copy in `copies`, number of copies).
    groups: Vec<(u32, u32, u8)>,
    copies: Vec<Copy>,
}

/// Departure rates per (tap, destination MAC), looked up on every frame: each tap's first few MACs sit in a
/// short list searched first; a tap with more of them (an odd or fuzzed capture) spills into a map.
#[derive(Debug, Default)]
struct RateMap {
    near: Vec<Vec<([u8; 6], RateAcc)>>,
    far: FxHashMap<(u32, [u8; 6]), RateAcc>,
}

const NEAR_MACS: usize = 8;

impl RateMap {
    #[inline]
    fn get_mut(&mut self, tap: u32, mac: [u8; 6]) -> &mut RateAcc {
        let t = tap as usize;
        if t >= self.near.len() {
            self.near.resize_with(t + 1, Vec::new);
        }
        let near = &mut self.near[t];
        if let Some(i) = near.iter().position(|(m, _)| *m == mac) {
            return &mut near[i].1;
        }
        if near.len() < NEAR_MACS {
            near.push((mac, RateAcc::default()));
            let last = near.len() - 1;
            return &mut near[last].1;
        }
        self.far.entry((tap, mac)).or_default()
    }

    fn get(&self, tap: u32, mac: &[u8; 6]) -> Option<&RateAcc> {
        self.near
            .get(tap as usize)
            .and_then(|n| n.iter().find(|(m, _)| m == mac).map(|(_, r)| r))
            .or_else(|| self.far.get(&(tap, *mac)))
    }
}

type PairKey = (u32, u32, u128, u128);
/// Per pair of capture files (lower first): the fit of their clocks, how close a window had to come to its line
/// to count as an empty queue (ns), and the port rate that came from (Gb/s).
type Fits = FxHashMap<(usize, usize), (clock::Fit, f64, f64)>;
/// An IP direction (source, destination) and its delays between a pair of taps.
type Direction = (u128, u128, ClassStat);

#[derive(Debug)]
struct Core {
    opts: HopsOptions,
    start_ns: Option<u64>,
    /// What the pass needs of each tap, by tap index.
    taps: Vec<TapFacts>,
    learning: Option<Held>,
    learn_until: Option<u64>,
    classes: FxHashMap<PairKey, ClassStat>,
    /// Pairs of taps with two clocks: whether the lower-indexed tap comes first, per IP direction.
    decided: FxHashMap<PairKey, (bool, bool)>,
    /// Per pair of taps with two clocks: a delay between the two directions' ranges, for directions first
    /// seen after the learning.
    threshold: FxHashMap<(u32, u32), f64>,
    path_index: FxHashMap<(u128, u128), u32>,
    paths: Vec<PathInfo>,
    hop_index: FxHashMap<(u32, u32), u32>,
    hops: Vec<HopAcc>,
    /// `hops` by (from, to): the order they are flushed and reported in.
    hop_order: Vec<u32>,
    /// Recently used entries of `hop_index`, by a hash of the taps: most packets cross a few hops.
    hop_cache: [Option<(u32, u32, u32)>; HOP_CACHE],
    queues: Vec<QueueAcc>,
    next_flush: Option<u64>,
    /// Per tap: its first and latest RoCE packet.
    spans: Vec<(u64, u64)>,
    /// Per pair of capture files whose drift is known since the last break: the offset of their clocks at
    /// the last fit's origin, carried from the first (which counts as 0), that origin and the drift fitted
    /// there ([`Core::carry_floors`]).
    offsets: FxHashMap<(usize, usize), (u64, f64, f64)>,
}

/// The streaming pass: hand it every frame of the capture, in order.
#[derive(Debug)]
pub struct HopsPass {
    matcher: Matcher,
    /// The last copy, not yet added to `matcher`: (key, its digest, copy).
    waiting: Option<(matching::Key, u64, Copy)>,
    core: Core,
    side: Side,
}

/// What the pass keeps per frame besides matching: drain rates, PFC pauses, the NP check, packets and PSN
/// gaps per tap. Matching never reads it, and the report only at the end, so with two threads it is kept on
/// the reading one and the matching thread's is left empty.
#[derive(Debug)]
struct Side {
    np_min_gap_ns: u64,
    rates: RateMap,
    psn: FxHashMap<(u32, u128, u32), FlowPsn>,
    packets: Vec<u64>,
    psn_gaps: Vec<u64>,
    np: NpCheck,
    /// (tap, priority, time) of each PFC pause with a nonzero time.
    pauses: Vec<(u32, u8, u64)>,
}

impl Side {
    fn new(np_min_gap_ns: u64) -> Self {
        Side {
            np_min_gap_ns,
            rates: RateMap::default(),
            psn: FxHashMap::default(),
            packets: Vec::new(),
            psn_gaps: Vec::new(),
            np: NpCheck::default(),
            pauses: Vec::new(),
        }
    }

    /// Counts the frame, and gives its copy the gap since the frame before it towards the same next hop.
    #[inline]
    fn seen(&mut self, s: &mut Seen) {
        let tap = s.copy.tap as usize;
        let ts = s.copy.ts;
        if tap >= self.packets.len() {
            self.packets.resize(tap + 1, 0);
            self.psn_gaps.resize(tap + 1, 0);
        }
        if s.has_mac && matches!(s.kind, Kind::Roce | Kind::Cnp | Kind::Other) {
            s.copy.gap = self
                .rates
                .get_mut(s.copy.tap, s.copy.dst_mac)
                .departure(ts, s.copy.len);
        }
        if s.paused != 0 {
            for prio in 0..8u8 {
                if s.paused & (1 << prio) != 0 && self.pauses.len() < 1_000_000 {
                    self.pauses.push((s.copy.tap, prio, ts));
                }
            }
        }
        self.np.frame(s, self.np_min_gap_ns);
        let Some(key) = s.key.as_ref() else {
            return;
        };
        self.packets[tap] += 1;
        if s.kind == Kind::Roce
            && let Some(numbering) = Numbering::of(Opcode(key.opcode), s.read_len)
        {
            let ev = self
                .psn
                .entry((s.copy.tap, key.dst, key.dest_qp))
                .or_default()
                .observe(key.psn, numbering);
            if let PsnEvent::Gap(n) = ev {
                self.psn_gaps[tap] += n as u64;
            }
        }
    }
}

impl HopsPass {
    /// A pass with these options; the taps' files are learnt as the capture is read ([`HopsPass::learn_taps`]).
    pub fn new(opts: HopsOptions) -> Self {
        HopsPass {
            matcher: Matcher::new(opts.match_window_ns),
            waiting: None,
            side: Side::new(opts.np_min_gap_ns),
            core: Core {
                opts,
                start_ns: None,
                taps: Vec::new(),
                learning: Some(Held::default()),
                learn_until: None,
                classes: FxHashMap::default(),
                decided: FxHashMap::default(),
                threshold: FxHashMap::default(),
                path_index: FxHashMap::default(),
                paths: Vec::new(),
                hop_index: FxHashMap::default(),
                hops: Vec::new(),
                hop_order: Vec::new(),
                hop_cache: [None; HOP_CACHE],
                queues: Vec::new(),
                next_flush: None,
                spans: Vec::new(),
                offsets: FxHashMap::default(),
            },
        }
    }

    /// Learns the files of taps that appeared since the last call (taps of one file share a clock). Call
    /// it after each frame: a tap's file is needed only once its first copies close, later.
    #[inline]
    pub fn learn_taps(&mut self, capture: &Capture) {
        let taps = capture.taps();
        if taps.len() != self.core.taps.len() {
            self.core.taps = TapFacts::of(taps);
        }
    }

    /// One frame. Its tap's file must be known ([`HopsPass::learn_taps`]) before its copies close.
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.seen(Seen::of(f));
    }

    /// One frame, as [`Seen::of`] cut it out.
    #[inline]
    fn seen(&mut self, mut s: Seen) {
        self.side.seen(&mut s);
        self.matched(&s);
    }

    /// The matching part of [`HopsPass::seen`].
    #[inline]
    fn matched(&mut self, s: &Seen) {
        let tap = s.copy.tap as usize;
        let ts = s.copy.ts;
        let start = *self.core.start_ns.get_or_insert(ts);
        let segment = self.core.opts.segment_ns();
        let Some(key) = s.key else {
            return;
        };
        let copy = s.copy;
        if tap >= self.core.spans.len() {
            self.core.spans.resize(tap + 1, (u64::MAX, 0));
        }
        let span = &mut self.core.spans[tap];
        span.0 = span.0.min(ts);
        span.1 = span.1.max(ts);
        let core = &mut self.core;
        if core.learn_until.is_none() {
            core.learn_until = Some(start.saturating_add(segment));
        }
        // This frame's copy joins the matcher at the next frame, its table entry fetched meanwhile; the groups
        // its window closes close now, as if it had joined.
        let digest = s.digest;
        self.matcher.prefetch(digest);
        if let Some((k, d, c)) = self.waiting.replace((key, digest, copy)) {
            self.matcher.add_digested(k, d, c, |g| core.group(g));
        }
        let now = ts.saturating_sub(core.opts.match_window_ns);
        self.matcher.close_before(now, &mut |g| core.group(g));
        if core.learning.is_some() && core.learn_until.is_some_and(|t| now >= t) {
            core.end_learning();
        }
        if core.learning.is_none() {
            let next = *core
                .next_flush
                .get_or_insert(start.saturating_add(2 * segment));
            if now >= next {
                core.flush(now.saturating_sub(segment));
                core.next_flush = Some(now.saturating_add(segment));
            }
        }
    }

    /// Closes every window and computes the report. `capture` names the taps and gives their drop counters.
    pub fn finish(mut self, capture: &Capture) -> HopsReport {
        let core = &mut self.core;
        if let Some((k, d, c)) = self.waiting.take() {
            self.matcher.add_digested(k, d, c, |g| core.group(g));
        }
        self.matcher.close_all(&mut |g| core.group(g));
        if core.learning.is_some() {
            core.end_learning();
        }
        core.flush(u64::MAX);
        let name = |i: u32| crate::analysis::tap_name(capture, i);
        let taps: Vec<TapReport> = capture
            .taps()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let file = capture
                    .files()
                    .nth(t.file)
                    .map(|f| f.name.clone())
                    .unwrap_or_default();
                let dropped = match (t.stats.dropped_iface, t.stats.dropped_os) {
                    (None, None) => None,
                    (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
                };
                TapReport {
                    tap: t.name.clone(),
                    file,
                    interface: t.interface,
                    name: t.description.name.clone(),
                    packets: self.side.packets.get(i).copied().unwrap_or(0),
                    psn_gaps: self.side.psn_gaps.get(i).copied().unwrap_or(0),
                    isb_dropped: dropped,
                }
            })
            .collect();
        let opts = core.opts.clone();
        let mut accs = std::mem::take(&mut core.hops);
        accs.sort_unstable_by_key(|h| (h.from, h.to));
        let hops: Vec<HopReport> = accs
            .into_iter()
            .filter(|h| h.matched > 0)
            .map(|h| {
                let to_drops = taps.get(h.to as usize).and_then(|t| t.isb_dropped);
                let from_gaps = taps.get(h.from as usize).map_or(0, |t| t.psn_gaps);
                HopReport {
                    from: name(h.from),
                    to: name(h.to),
                    matched: h.matched,
                    unmatched: h.only_from + h.only_to,
                    only_from: h.only_from,
                    only_to: h.only_to,
                    outside_capture: h.outside_capture,
                    retransmitted: h.retransmitted,
                    loss: loss_verdict(&h, to_drops, from_gaps, &name),
                    clock_offset_ns: h.raw_min,
                    drift_ppm: h.drift * 1e6,
                    drift_known: h.drift_known,
                    drift_range_ppm: (h.drift_range.0 <= h.drift_range.1)
                        .then_some([h.drift_range.0 * 1e6, h.drift_range.1 * 1e6]),
                    clock_error_ns: h.clock_error_ns,
                    frame_time: h.touch,
                    shared_clock: h.shared,
                    order_assumed: h.assumed,
                    queue_delay_ns: h.delay.percentiles(),
                    series: h.series,
                }
            })
            .collect();
        let pauses = std::mem::take(&mut self.side.pauses);
        let mut accs = std::mem::take(&mut core.queues);
        for q in &mut accs {
            q.settle_macs();
        }
        let queues: Vec<QueueReport> = merge_directions(accs)
            .into_iter()
            .map(|q| {
                let mac = q.macs.iter().max_by_key(|(_, n)| **n).map(|(m, _)| *m);
                let measured = mac
                    .and_then(|m| self.side.rates.get(q.tap, &m))
                    .and_then(RateAcc::rate);
                let (gbps, is_measured) = match core.line_bps(q.tap) {
                    Some(bps) => (Some(bps as f64 / 1e9), false),
                    None => (measured, measured.is_some()),
                };
                queue_report(q, gbps, is_measured, &opts, &pauses, &name)
            })
            .collect();
        let findings = findings(&hops, &queues, &opts);
        let np = self.side.np.finish(name, opts.np_min_gap_ns);
        HopsReport {
            taps,
            hops,
            queues,
            np,
            findings,
            match_window_ns: opts.match_window_ns,
            peak_in_flight: self.matcher.peak_open,
            copies_left_out: self.matcher.overflow,
            start_ns: core.start_ns.unwrap_or(0),
        }
    }
}

impl RateAcc {
    /// A frame of `len` bytes leaving at `ts`; gives the time since the one before (0 for the first).
    #[inline]
    fn departure(&mut self, ts: u64, len: u32) -> u32 {
        let gap = self.last.map_or(0, |last| ts.saturating_sub(last));
        self.gap(gap, len);
        self.last = Some(ts);
        u32::try_from(gap).unwrap_or(u32::MAX)
    }

    /// A frame of `len` bytes that left `gap` ns after the one before it towards the same next hop.
    #[inline]
    fn gap(&mut self, gap: u64, len: u32) {
        if gap > 0 && gap < 100_000 {
            let gbps = (u64::from(len) + u64::from(WIRE_OVERHEAD)) as f64 * 8.0 / gap as f64;
            if (RATE_MIN_GBPS..RATE_MAX_GBPS).contains(&gbps) {
                // The step is a power of two: multiplying by its inverse is exact and spares a division.
                let i = (gbps * (1.0 / RATE_STEP_GBPS)) as usize;
                if i >= self.hist.len() {
                    self.hist.resize(i + 1, (0, 0.0));
                }
                self.hist[i].0 += 1;
                self.hist[i].1 += gbps;
            }
        }
    }

    /// The line rate: back-to-back frames leave at it, any other gap shows a slower one, so it is the most
    /// common rate among the fastest fifth of the gaps (their mean in that quarter Gb/s). `None` unless ten
    /// gaps and a twentieth of all agree on it: a port that was never busy does not show its rate.
    fn rate(&self) -> Option<f64> {
        let n: u64 = self.hist.iter().map(|&(c, _)| c as u64).sum();
        let mut seen = 0;
        let mut p80 = 0;
        for (i, &(c, _)) in self.hist.iter().enumerate() {
            seen += c as u64;
            if seen * 5 >= n * 4 {
                p80 = i;
                break;
            }
        }
        let &(c, sum) = self.hist.iter().skip(p80).max_by(|a, b| a.0.cmp(&b.0))?;
        (c >= 10 && c as u64 * 20 >= n).then(|| sum / c as f64)
    }
}

impl Core {
    fn span(&self, tap: u32) -> (u64, u64) {
        self.spans
            .get(tap as usize)
            .copied()
            .unwrap_or((u64::MAX, 0))
    }

    /// The line rate of `tap`, bit/s, when one is known (`--link-speed`, else the tap's `if_speed`); `None`
    /// rather than the assumed 100 Gb/s, which would make up serialization times and queue depths.
    fn line_bps(&self, tap: u32) -> Option<u64> {
        let recorded = self.taps.get(tap as usize).and_then(|t| t.speed_bps);
        let line = LineRates::flag(self.opts.link_bps).of(recorded);
        (!line.assumed()).then_some(line.bps)
    }

    fn file_of(&self, tap: u32) -> usize {
        self.taps.get(tap as usize).map_or(tap as usize, |t| t.file)
    }

    fn group(&mut self, g: &Group) {
        let pi = self.path_id(g.key.src, g.key.dst);
        match &mut self.learning {
            Some(held) => {
                let copies = g.copies();
                held.groups
                    .push((pi as u32, held.copies.len() as u32, copies.len() as u8));
                held.copies.extend_from_slice(copies);
            }
            None => self.process(pi, g.copies()),
        }
    }

    /// Decides, for every pair of taps with two clocks, which tap each IP direction reaches first; then
    /// handles the held groups.
    fn end_learning(&mut self) {
        let held = self.learning.take().unwrap_or_default();
        let copies_of = |&(_, first, n): &(u32, u32, u8)| {
            &held.copies[first as usize..first as usize + n as usize]
        };
        for g in &held.groups {
            self.learn(g.0 as usize, copies_of(g));
        }
        let mut pairs: FxHashMap<(u32, u32), Vec<Direction>> = FxHashMap::default();
        for (&(a, b, s, d), &c) in &self.classes {
            pairs.entry((a, b)).or_default().push((s, d, c));
        }
        for ((a, b), classes) in pairs {
            // A direction and its reverse: the one with the larger delays goes from `a` to `b`.
            let mut forward_lo = i64::MAX;
            let mut reverse_hi = i64::MIN;
            for &(s, d, c) in &classes {
                if let Some(r) = self.classes.get(&(a, b, d, s))
                    && (c.lo, c.hi) != (r.lo, r.hi)
                {
                    let first = c.lo > r.lo;
                    self.decided.insert((a, b, s, d), (first, false));
                    if first {
                        forward_lo = forward_lo.min(c.lo);
                    } else {
                        reverse_hi = reverse_hi.max(c.hi);
                    }
                }
            }
            if forward_lo != i64::MAX && reverse_hi != i64::MIN {
                self.threshold
                    .insert((a, b), (forward_lo as f64 + reverse_hi as f64) / 2.0);
            }
            for &(s, d, c) in &classes {
                self.decided
                    .entry((a, b, s, d))
                    .or_insert_with(|| self_decide(self.threshold.get(&(a, b)), c));
            }
        }
        for g in &held.groups {
            self.process(g.0 as usize, copies_of(g));
        }
    }

    /// The index of the path of packets from `src` to `dst`.
    #[inline]
    fn path_id(&mut self, src: u128, dst: u128) -> usize {
        let n = self.paths.len() as u32;
        let i = *self.path_index.entry((src, dst)).or_insert(n);
        if i == n {
            self.paths.push(PathInfo {
                src,
                dst,
                ..PathInfo::default()
            });
        }
        i as usize
    }

    fn learn(&mut self, pi: usize, copies: &[Copy]) {
        let (src, dst) = (self.paths[pi].src, self.paths[pi].dst);
        let path = &mut self.paths[pi];
        for c in copies {
            if c.tap < 64 {
                path.mask |= 1 << c.tap;
            }
        }
        for (i, x) in copies.iter().enumerate() {
            for y in &copies[i + 1..] {
                let (lo, hi) = if x.tap < y.tap { (x, y) } else { (y, x) };
                if self.file_of(lo.tap) == self.file_of(hi.tap) {
                    continue;
                }
                let d = diff(hi.ts, lo.ts);
                self.classes
                    .entry((lo.tap, hi.tap, src, dst))
                    .and_modify(|c| {
                        c.lo = c.lo.min(d);
                        c.hi = c.hi.max(d);
                    })
                    .or_insert(ClassStat { lo: d, hi: d });
            }
        }
    }

    /// Whether copy `x` came before copy `y` of a packet of path `pi`.
    fn before(&mut self, x: &Copy, y: &Copy, pi: usize) -> bool {
        if self.file_of(x.tap) == self.file_of(y.tap) {
            return (x.ts, x.tap) < (y.ts, y.tap);
        }
        let (lo, hi, lo_is_x) = if x.tap < y.tap {
            (x, y, true)
        } else {
            (y, x, false)
        };
        let path = &mut self.paths[pi];
        let (src, dst) = (path.src, path.dst);
        if let Some(&(_, _, lo_first)) = path
            .decided
            .iter()
            .find(|&&(a, b, _)| (a, b) == (lo.tap, hi.tap))
        {
            return lo_first == lo_is_x;
        }
        let d = diff(hi.ts, lo.ts);
        let threshold = &self.threshold;
        let (lo_first, _) = *self
            .decided
            .entry((lo.tap, hi.tap, src, dst))
            .or_insert_with(|| {
                self_decide(threshold.get(&(lo.tap, hi.tap)), ClassStat { lo: d, hi: d })
            });
        if path.decided.len() < PATH_DECIDED {
            path.decided.push((lo.tap, hi.tap, lo_first));
        }
        lo_first == lo_is_x
    }

    fn process(&mut self, pi: usize, copies: &[Copy]) {
        let mut buf = [Copy::default(); MAX_COPIES];
        let n = copies.len().min(MAX_COPIES);
        buf[..n].copy_from_slice(&copies[..n]);
        let order = &mut buf[..n];
        // Insertion sort: a handful of copies, and `before` is a comparison, not a key.
        for i in 1..order.len() {
            let mut j = i;
            while j > 0 && self.before(&order[j], &order[j - 1], pi) {
                order.swap(j, j - 1);
                j -= 1;
            }
        }
        let order = &buf[..n];
        let mask: u64 = order
            .iter()
            .filter(|c| c.tap < 64)
            .fold(0, |m, c| m | 1 << c.tap);
        let path = &mut self.paths[pi];
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
        let shared = self.file_of(from) == self.file_of(to);
        let (lo, hi) = (from.min(to), from.max(to));
        let assumed = !shared && !self.threshold.contains_key(&(lo, hi));
        let window = self.opts.clock_window_ns;
        let start = self.start_ns.unwrap_or(0);
        let i = self.hops.len() as u32;
        self.hops.push(HopAcc {
            from,
            to,
            shared,
            assumed,
            matched: 0,
            only_from: 0,
            only_to: 0,
            retransmitted: 0,
            raw_min: i64::MAX,
            raw_max: i64::MIN,
            outside_capture: 0,
            clock: ClockTrack::new(window),
            rate: RateAcc::default(),
            max_wire: 0,
            pending: Default::default(),
            delay: Hist::default(),
            series: Series::new(start),
            drift: 0.0,
            drift_range: (f64::INFINITY, f64::NEG_INFINITY),
            drift_known: true,
            clock_error_ns: 0.0,
            touch: (0.0, 0.0),
            floor: f64::INFINITY,
            queues: [u32::MAX; 8],
        });
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
            self.queues.push(QueueAcc {
                tap: h.to,
                prio,
                macs: BTreeMap::new(),
                recent: None,
                from: BTreeSet::from([h.from]),
                delay: Hist::default(),
                ecn: Vec::new(),
                series: Series::new(self.start_ns.unwrap_or(0)),
                marks: Vec::new(),
                max_wire: 0,
            });
        }
        let i = *slot;
        self.queues[i as usize].count_mac(mac);
        i
    }

    /// The pair of clocks hop `h` crosses (lower file first) and the sign its delays follow their drift with
    /// (+1 from the lower file's taps to the higher's); `None` for taps of one file.
    fn clocks(&self, h: &HopAcc) -> Option<((usize, usize), f64)> {
        let (a, b) = (self.file_of(h.from), self.file_of(h.to));
        (!h.shared && a != b).then(|| ((a.min(b), a.max(b)), if b > a { 1.0 } else { -1.0 }))
    }

    /// For each pair of capture files that a hop with samples before `t` crosses: the drift of their clocks,
    /// fitted to the windows of every hop between the two files, both ways ([`clock::fit`]), with how close a
    /// window had to come to its line to count as an empty queue (ns) and the port rate that came from (Gb/s).
    fn fit_clocks(&self, t: u64) -> Fits {
        #[derive(Default)]
        struct Legs<'a> {
            legs: Vec<(&'a ClockTrack, f64)>,
            wire: u32,
            gbps: Option<f64>,
            needed: bool,
        }
        let mut pairs: FxHashMap<(usize, usize), Legs> = FxHashMap::default();
        for h in &self.hops {
            let Some((pair, sign)) = self.clocks(h) else {
                continue;
            };
            let l = pairs.entry(pair).or_default();
            l.legs.push((&h.clock, sign));
            l.wire = l.wire.max(h.max_wire);
            if let Some(g) = h.rate.rate() {
                l.gbps = Some(l.gbps.map_or(g, |x: f64| x.max(g)));
            }
            l.needed |= h.pending.front().is_some_and(|s| s.t < t);
        }
        pairs
            .into_iter()
            .filter(|(_, l)| l.needed)
            .filter_map(|(pair, l)| {
                let gbps = self
                    .opts
                    .link_bps
                    .map(|bps| bps as f64 / 1e9)
                    .or(l.gbps)
                    .unwrap_or(UNKNOWN_PORT_GBPS);
                // The time the largest frame holds the fastest port: what a packet that found the queue empty
                // may still wait behind a frame already leaving.
                let touch = f64::from(l.wire) * 8.0 / gbps;
                let fit = clock::fit(&l.legs, touch, self.opts.max_drift_ppm)?;
                Some((pair, (fit, touch, gbps)))
            })
            .collect()
    }

    /// Under a known drift the clocks' offset moves by the drift times the time elapsed, so it can be carried
    /// from one segment to the next, and with it the floor each hop showed: its line less the offset. A queue
    /// that emptied once and then stood through every window kept (the windows in which it emptied are
    /// forgotten after two segments) is still measured from that floor, not from the least of its standing
    /// windows. A segment whose drift is not known breaks the chain: the floors are forgotten and learnt anew.
    fn carry_floors(&mut self, fits: &Fits, lines: &mut [Option<clock::Line>]) {
        let mut offsets: FxHashMap<(usize, usize), Option<f64>> = FxHashMap::default();
        for (&pair, (fit, ..)) in fits {
            let offset = if fit.known {
                // The drift between two segments' origins: the mean of the two fitted.
                let c = self.offsets.get(&pair).map_or(0.0, |&(t0, c0, b0)| {
                    c0 + (b0 + fit.b) / 2.0 * (fit.t_ref as f64 - t0 as f64)
                });
                self.offsets.insert(pair, (fit.t_ref, c, fit.b));
                Some(c)
            } else {
                self.offsets.remove(&pair);
                None
            };
            offsets.insert(pair, offset);
        }
        let clocks: Vec<_> = self.hops.iter().map(|h| self.clocks(h)).collect();
        for ((h, line), clocks) in self.hops.iter_mut().zip(lines.iter_mut()).zip(clocks) {
            let Some((pair, sign)) = clocks else {
                continue;
            };
            match (offsets.get(&pair), line) {
                (Some(Some(c)), Some(line)) => {
                    h.floor = h.floor.min(line.a - sign * c);
                    line.a = line.a.min(h.floor + sign * c);
                }
                (Some(None), _) => h.floor = f64::INFINITY,
                _ => {}
            }
        }
    }

    /// Every hop's samples from before `t` get their queueing delay, from the clock line over the windows
    /// kept around them.
    fn flush(&mut self, t: u64) {
        let keep = self.opts.segment_ns().saturating_mul(2);
        let fits = self.fit_clocks(t);
        let mut lines: Vec<Option<clock::Line>> = self
            .hops
            .iter()
            .map(|h| match self.clocks(h) {
                None => h.clock.flat(),
                Some((pair, sign)) => fits.get(&pair).and_then(|(f, ..)| h.clock.line(sign, f)),
            })
            .collect();
        self.carry_floors(&fits, &mut lines);
        for &hi in &self.hop_order {
            let clocks = self.clocks(&self.hops[hi as usize]);
            let h = &mut self.hops[hi as usize];
            let Some(first) = h.pending.front().map(|s| s.t).filter(|&f| f < t) else {
                continue;
            };
            let Some(line) = lines[hi as usize] else {
                continue;
            };
            let fit = clocks.and_then(|(pair, sign)| Some((*fits.get(&pair)?, sign)));
            h.drift = line.b;
            let mut last = first;
            while let Some(s) = h.pending.front().copied() {
                if s.t >= t {
                    break;
                }
                h.pending.pop_front();
                last = last.max(s.t);
                let q = round_up_half((s.d as f64 - line.at(s.t)).max(0.0));
                h.delay.add(q);
                h.series.add(s.t, q, s.ect, s.marked);
                let queue = &mut self.queues[s.queue as usize];
                queue.max_wire = queue.max_wire.max(h.max_wire);
                queue.delay.add(q);
                queue.series.add(s.t, q, s.ect, s.marked);
                if s.ect {
                    let b = hist::bucket(q);
                    if b >= queue.ecn.len() {
                        queue.ecn.resize(b + 1, (0, 0));
                    }
                    queue.ecn[b].0 += 1;
                    queue.ecn[b].1 += s.marked as u64;
                    if s.marked && queue.marks.len() < MAX_MARKS {
                        queue.marks.push((s.t, q));
                    }
                }
            }
            if let Some(((f, touch, gbps), sign)) = fit {
                let (low, high) = f.range(sign);
                h.drift_range = (h.drift_range.0.min(low), h.drift_range.1.max(high));
                h.drift_known &= f.known;
                h.clock_error_ns = h.clock_error_ns.max(f.error_ns(h.clock.lever(first, last)));
                h.touch = (touch, gbps);
            }
        }
        if t != u64::MAX {
            for h in &mut self.hops {
                h.clock.prune_before(t.saturating_sub(keep));
            }
        }
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

impl QueueAcc {
    #[inline]
    fn count_mac(&mut self, mac: [u8; 6]) {
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

/// A direction first seen after the learning: on the side of the pair's threshold its delay falls, or, with
/// no threshold (traffic one way only), by its sign (assumed).
fn self_decide(threshold: Option<&f64>, c: ClassStat) -> (bool, bool) {
    match threshold {
        Some(&t) => (c.lo as f64 > t, false),
        None => (c.lo + c.hi >= 0, true),
    }
}

fn loss_verdict(
    h: &HopAcc,
    to_drops: Option<u64>,
    from_gaps: u64,
    name: &impl Fn(u32) -> String,
) -> Option<String> {
    let mut parts = Vec::new();
    if h.only_to > 0 {
        parts.push(format!(
            "{} packets seen only at {}: not captured at {} (a switch does not make packets{})",
            h.only_to,
            name(h.to),
            name(h.from),
            if from_gaps > 0 {
                format!("; {from_gaps} PSNs missing there too")
            } else {
                String::new()
            }
        ));
    }
    if h.only_from > 0 {
        let why = match to_drops {
            Some(d) if d >= h.only_from => format!(
                "capture loss at {} likely: its interface statistics count {d} drops",
                name(h.to)
            ),
            Some(d) if d > 0 => format!(
                "lost between the taps, mostly: {} records only {d} capture drops",
                name(h.to)
            ),
            _ if h.retransmitted > 0 => {
                "lost between the taps: the sender retransmitted, and no capture drops were recorded"
                    .to_string()
            }
            _ => format!(
                "lost between the taps, or not captured at {} (it records no drops)",
                name(h.to)
            ),
        };
        parts.push(format!(
            "{} packets seen only at {}: {why}",
            h.only_from,
            name(h.from)
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// `v.round() as u64` for `v >= 0`, without the call to libm's `round` that x86_64's baseline instruction set
/// needs (it was a percent of the pass): the conversion truncates, and the fraction it dropped is exact.
#[inline]
fn round_up_half(v: f64) -> u64 {
    let t = v as u64;
    t.saturating_add(u64::from(v - t as f64 >= 0.5))
}

/// A timestamp as signed ns; past 2262 (a corrupt record) it saturates rather than wrapping negative.
fn ns(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

/// `a - b` in signed ns, saturating: a corrupt timestamp makes a huge delay, never an overflow.
fn diff(a: u64, b: u64) -> i64 {
    let d = i128::from(a) - i128::from(b);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

fn mac_string(m: &[u8; 6]) -> String {
    roce_core::decode::mac_to_string(m)
}

/// The marking curve's depth bins at most: 64 Ki bins of the default 4 KiB reach 256 MiB, beyond the largest
/// shared buffer of today's switches.
const MAX_CURVE_BINS: usize = 1 << 16;

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

/// What the hops and queues say that needs saying: a fitted curve unlike the configured one, marking that
/// starts only where PFC already pauses, packets lost between taps.
fn findings(hops: &[HopReport], queues: &[QueueReport], opts: &HopsOptions) -> Vec<Finding> {
    let mut out = Vec::new();
    for q in queues {
        let m = &q.marking;
        let (Some(kmin), Some(kmax), Some(pmax), Some([kmin_t, kmax_t, pmax_t])) = (
            m.kmin_interval,
            m.kmax_interval,
            m.pmax_interval,
            m.describe(1.0, 0),
        ) else {
            continue;
        };
        let label = format!("queue {} priority {}", q.tap, q.priority);
        let fitted = format!(
            "fitted, with 95 % intervals: Kmin {kmin_t} B, Kmax {kmax_t} B, Pmax {pmax_t}, fit error {:.3}, \
             {} ECN-capable packets between Kmin and Kmax ({} marked of {})",
            m.fit_rmse.unwrap_or(0.0),
            m.between,
            m.marked,
            m.ect_in
        );
        if let Some((ckmin, ckmax, cpmax)) = opts.switch_ecn {
            // A configured value disagrees when it lies outside what the data allow by more than the
            // measurement can be off: the depth is delay × drain rate, and switches count their queue their
            // own way (cells, the frame being sent).
            let off = |i: Interval, v: f64, tol: f64| {
                v < i.low - tol || i.high.is_some_and(|h| v > h + tol)
            };
            if off(kmin, ckmin, 0.15 * ckmin.max(1.0))
                || off(kmax, ckmax, 0.15 * ckmax.max(1.0))
                || off(pmax, cpmax, 0.05)
            {
                out.push(Finding {
                    code: "ecn_curve_mismatch",
                    severity: Severity::Warning,
                    title: format!("{label}: the marking curve disagrees with the switch's configuration"),
                    detail: format!(
                        "The queue marked as if Kmin were {kmin_t} B, Kmax {kmax_t} B and Pmax {pmax_t}, \
                         not the configured Kmin {ckmin:.0} B, Kmax {ckmax:.0} B, Pmax {cpmax:.2} \
                         (--switch-ecn): the configuration may not be applied to this queue, the queue may be \
                         counted in cells or compared at dequeue, or the drain rate may be off."
                    ),
                    evidence: vec![fitted.clone()],
                });
            }
        }
        if let Some(pfc) = q.pfc_depth_bytes
            && kmin.low > pfc
        {
            out.push(Finding {
                code: "marking_above_pfc",
                severity: Severity::Problem,
                title: format!("{label}: ECN marking starts above the PFC threshold"),
                detail: format!(
                    "Marking starts at {:.0} B of queue or deeper, but the switch paused the priority (PFC) \
                     when the queue held about {pfc:.0} B: PFC stops the senders before ECN slows them, so \
                     DCQCN acts too late. Lower Kmin below the PFC threshold.",
                    kmin.low
                ),
                evidence: vec![fitted],
            });
        }
    }
    for h in hops {
        if let Some(f) = drift_unknown(h) {
            out.push(f);
        }
        if let Some(l) = &h.loss {
            out.push(Finding {
                code: "unmatched_between_taps",
                severity: if h.only_from > 0 {
                    Severity::Warning
                } else {
                    Severity::Info
                },
                title: format!(
                    "hop {} → {}: {} packets seen at one tap only",
                    h.from, h.to, h.unmatched
                ),
                detail: l.clone(),
                evidence: vec![format!(
                    "{} matched, {} only upstream, {} only downstream",
                    h.matched, h.only_from, h.only_to
                )],
            });
        }
    }
    out
}

/// A hop whose clocks' drift the windows could not pin, when what that may cost reaches a frame's worth of
/// queue: the user must know that its depths rest on an assumed drift.
fn drift_unknown(h: &HopReport) -> Option<Finding> {
    let (frame_ns, gbps) = h.frame_time;
    let [low, high] = h.drift_range_ppm?;
    if h.drift_known || h.clock_error_ns < frame_ns || frame_ns <= 0.0 {
        return None;
    }
    let bytes = |ns: f64| ns * gbps / 8.0;
    Some(Finding {
        code: "clock_drift_unknown",
        severity: Severity::Warning,
        title: format!(
            "hop {} → {}: the clocks' drift cannot be told from a standing queue",
            h.from, h.to
        ),
        detail: format!(
            "The least delay of this hop did not come back to one line in most clock windows, and no hop \
             between the same two capture files (the other way, where ACKs and CNPs usually find the queue \
             empty) did either: a queue that never empties and a drift between the two clocks look alike, \
             and so does a drift beyond --max-drift-ppm. Any drift from {low:+.1} to {high:+.1} ppm fits; the \
             delays and depths assume {:+.1} ppm and may be off by up to {:.0} ns, {:.0} B of queue at \
             {gbps:.0} Gb/s. Capture both directions of the traffic at both taps, or give the capturing hosts \
             one clock (PTP).",
            h.drift_ppm,
            h.clock_error_ns,
            bytes(h.clock_error_ns)
        ),
        evidence: vec![format!(
            "{} packets matched; a clock window counted as an empty queue when its least delay came within \
             {frame_ns:.0} ns of the line (the largest frame, {:.0} B, at {gbps:.0} Gb/s)",
            h.matched,
            bytes(frame_ns)
        )],
    })
}

/// Frames per batch: small enough that the batches in flight between the threads stay in the cores' caches,
/// large enough that the threads seldom wait on each other.
const BATCH: usize = 1024;
/// Batches in flight between the threads: what the reader may run ahead of the pass.
const BATCHES_AHEAD: usize = 4;
/// How many frames ahead of the one it handles [`HopsPass::feed`] fetches the table entry of a frame's key,
/// and (fewer, once that entry is in the cache) the group it points to.
const PREFETCH_TABLE: usize = 16;
const PREFETCH_GROUP: usize = 8;

/// A batch of frames for the pass, with the taps' facts when a tap appeared while it was filled.
type Batch = (Vec<Seen>, Option<Vec<TapFacts>>);

impl HopsPass {
    /// Matches frames in capture order (their [`Side`] was kept as they were read), the table entries and
    /// groups their copies go to fetched from memory a few frames ahead: waiting on them was most of the
    /// pass's time once it no longer decoded between frames.
    fn feed(&mut self, batch: &[Seen]) {
        for (i, s) in batch.iter().enumerate() {
            if let Some(a) = batch.get(i + PREFETCH_TABLE)
                && a.key.is_some()
            {
                self.matcher.prefetch(a.digest);
            }
            if let Some(a) = batch.get(i + PREFETCH_GROUP)
                && a.key.is_some()
            {
                self.matcher.prefetch_group(a.digest);
            }
            self.matched(s);
        }
    }
}

/// Fills `batch` with up to [`BATCH`] frames, keeping `side` on them; false once the capture has ended and
/// none was left.
fn fill(frames: &mut Frames<'_>, batch: &mut Vec<Seen>, side: &mut Side) -> bool {
    // Each frame is cut down where it was decoded: moving it (360 bytes) out of `Frames::next_frame` cost a
    // tenth of the pass's time.
    frames.for_each_until(|f| {
        let mut s = Seen::of(f);
        side.seen(&mut s);
        batch.push(s);
        batch.len() >= BATCH
    });
    !batch.is_empty()
}

/// The taps' files, when taps appeared since `known` of them were seen. The pass needs a tap's file only once
/// its first copies close, later than the batch in which it appeared.
fn new_taps(capture: &Capture, known: &mut usize) -> Option<Vec<TapFacts>> {
    let taps = capture.taps();
    (taps.len() != *known).then(|| {
        *known = taps.len();
        TapFacts::of(taps)
    })
}

/// What the pass needs of a tap: its file (taps of one file share a clock) and its recorded line rate.
#[derive(Debug, Clone, Copy)]
struct TapFacts {
    file: usize,
    speed_bps: Option<u64>,
}

impl TapFacts {
    fn of(taps: &[roce_capture::Tap]) -> Vec<TapFacts> {
        taps.iter()
            .map(|t| TapFacts {
                file: t.file,
                speed_bps: t.description.speed_bps,
            })
            .collect()
    }
}

/// Runs the pass over a whole capture. With a second core, one thread reads, decodes and keeps the [`Side`]
/// while another matches (each takes about half of the work); the pass sees the same frames in the same order
/// either way.
pub fn run(capture: &mut Capture, decoder: Decoder, opts: HopsOptions) -> HopsReport {
    // Matching keys on the ICRC the frame carries, never on whether it is right: no CRC over every frame.
    let decoder = Decoder {
        check_icrc: false,
        ..decoder
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pass = if cores > 1 {
        run_two_threads(capture, decoder, opts)
    } else {
        let mut pass = HopsPass::new(opts);
        let mut frames = Frames::new(capture, decoder);
        let mut batch = Vec::with_capacity(BATCH);
        let mut known = 0;
        while fill(&mut frames, &mut batch, &mut pass.side) {
            if let Some(taps) = new_taps(frames.capture(), &mut known) {
                pass.core.taps = taps;
            }
            pass.feed(&batch);
            batch.clear();
        }
        pass
    };
    pass.finish(capture)
}

/// This thread reads, decodes and cuts frames down to [`Seen`]s; a second one runs the pass over them.
fn run_two_threads(capture: &mut Capture, decoder: Decoder, opts: HopsOptions) -> HopsPass {
    let mut side = Side::new(opts.np_min_gap_ns);
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Batch>(BATCHES_AHEAD);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<Seen>>();
    std::thread::scope(|scope| {
        let worker = scope.spawn(move || {
            let mut pass = HopsPass::new(opts);
            for (mut batch, taps) in full_rx {
                if let Some(taps) = taps {
                    pass.core.taps = taps;
                }
                pass.feed(&batch);
                batch.clear();
                // The reader may have finished and gone: then the batch is simply dropped.
                let _ = empty_tx.send(batch);
            }
            pass
        });
        let mut frames = Frames::new(capture, decoder);
        let mut batch = Vec::with_capacity(BATCH);
        let mut known = 0;
        while fill(&mut frames, &mut batch, &mut side) {
            let taps = new_taps(frames.capture(), &mut known);
            let fresh = empty_rx
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(BATCH));
            // A send fails only when the pass thread has panicked: joining it passes the panic on.
            if full_tx
                .send((std::mem::replace(&mut batch, fresh), taps))
                .is_err()
            {
                break;
            }
        }
        drop(full_tx);
        match worker.join() {
            Ok(mut pass) => {
                pass.side = side;
                pass
            }
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::round_up_half;

    #[test]
    fn rounds_like_round() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut values = vec![
            0.0,
            0.5,
            1.5,
            2.5,
            0.499_999_999_999_999_94,
            4_503_599_627_370_495.5,
            9_007_199_254_740_993.0,
            1e19,
            1e300,
            f64::INFINITY,
        ];
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push((x >> 11) as f64 / (1u64 << (x % 50)) as f64);
        }
        for v in values {
            assert_eq!(round_up_half(v), v.round() as u64, "{v}");
        }
    }
}
