//! What `hops` found, as the text, the JSON and the report read it: the taps, the hops, the queues with their
//! marking curves, the NP check and the findings. Fields marked `serde(skip)` feed the report's charts only.

use serde::Serialize;

use super::np::NpReport;
use super::red::{Bin, Curve, Interval};
use super::series::Series;
use crate::analysis::findings::Finding;
use crate::analysis::hist::Percentiles;

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
