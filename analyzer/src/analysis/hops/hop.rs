//! One hop's accumulator: what the packets that crossed a pair of taps showed, from the copies matched and
//! missing to the queueing delays measured once the clock line around them was known, and what it reports.

use std::collections::VecDeque;

use super::clock::ClockTrack;
use super::rates::RateAcc;
use super::report::{HopReport, TapReport};
use super::series::Series;
use crate::analysis::hist::Hist;

/// One packet's crossing of one hop, waiting for its clock line.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub(super) t: u64,
    /// Delay less the frame's serialization (when the link speed is known).
    pub(super) d: i64,
    /// The queue it waited in, in the pass's list of queues.
    pub(super) queue: u32,
    pub(super) ect: bool,
    pub(super) marked: bool,
}

/// A hop between two taps, as the pass fills it.
#[derive(Debug)]
pub(super) struct HopAcc {
    pub(super) from: u32,
    pub(super) to: u32,
    pub(super) shared: bool,
    pub(super) assumed: bool,
    pub(super) matched: u64,
    pub(super) only_from: u64,
    pub(super) only_to: u64,
    pub(super) retransmitted: u64,
    pub(super) raw_min: i64,
    /// The largest delay matched: a packet seen upstream later than this before the downstream capture
    /// ended could not have been seen there.
    pub(super) raw_max: i64,
    pub(super) outside_capture: u64,
    pub(super) clock: ClockTrack,
    /// Gaps between departures at the downstream tap before the hop's packets: the port's rate, which turns
    /// a frame into the time it holds the port.
    pub(super) rate: RateAcc,
    /// The largest frame the hop carried, on the wire (with preamble, FCS and gap), bytes.
    pub(super) max_wire: u32,
    pub(super) pending: VecDeque<Sample>,
    pub(super) delay: Hist,
    pub(super) series: Series,
    /// The slope of the last line (ns per ns).
    pub(super) drift: f64,
    /// The drifts the windows allowed, lowest and highest over the capture (this hop's sign).
    pub(super) drift_range: (f64, f64),
    /// Whether every line the hop's packets were measured against had its drift pinned by the windows.
    pub(super) drift_known: bool,
    /// The largest error the drift's uncertainty may have put in a queueing delay, ns.
    pub(super) clock_error_ns: f64,
    /// How close to the line a window had to come to count as an empty queue, at the last fit, ns; and the
    /// port rate that came from, Gb/s.
    pub(super) touch: (f64, f64),
    /// The least of its line less its clocks' carried offset ([`super::segments::Segments`]): the floor it showed.
    pub(super) floor: f64,
    /// Per priority: the queue this hop's packets waited in (`u32::MAX` until one did).
    pub(super) queues: [u32; 8],
}

impl HopAcc {
    /// A hop that no packet crossed yet. `shared`: its taps share a clock; `assumed`: their order was only
    /// assumed. Its clock windows are `window_ns` long, its series start at `start_ns`.
    pub(super) fn new(
        from: u32,
        to: u32,
        shared: bool,
        assumed: bool,
        window_ns: u64,
        start_ns: u64,
    ) -> Self {
        HopAcc {
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
            clock: ClockTrack::new(window_ns),
            rate: RateAcc::default(),
            max_wire: 0,
            pending: VecDeque::new(),
            delay: Hist::default(),
            series: Series::new(start_ns),
            drift: 0.0,
            drift_range: (f64::INFINITY, f64::NEG_INFINITY),
            drift_known: true,
            clock_error_ns: 0.0,
            touch: (0.0, 0.0),
            floor: f64::INFINITY,
            queues: [u32::MAX; 8],
        }
    }

    /// The hop as the tables show it; `taps` are the taps' reports, whose drops and PSN gaps say where the
    /// unmatched packets went.
    pub(super) fn report(self, taps: &[TapReport], name: &impl Fn(u32) -> String) -> HopReport {
        let to_drops = taps.get(self.to as usize).and_then(|t| t.isb_dropped);
        let from_gaps = taps.get(self.from as usize).map_or(0, |t| t.psn_gaps);
        HopReport {
            from: name(self.from),
            to: name(self.to),
            matched: self.matched,
            unmatched: self.only_from + self.only_to,
            only_from: self.only_from,
            only_to: self.only_to,
            outside_capture: self.outside_capture,
            retransmitted: self.retransmitted,
            loss: loss_verdict(&self, to_drops, from_gaps, name),
            clock_offset_ns: self.raw_min,
            drift_ppm: self.drift * 1e6,
            drift_known: self.drift_known,
            drift_range_ppm: (self.drift_range.0 <= self.drift_range.1)
                .then_some([self.drift_range.0 * 1e6, self.drift_range.1 * 1e6]),
            clock_error_ns: self.clock_error_ns,
            frame_time: self.touch,
            shared_clock: self.shared,
            order_assumed: self.assumed,
            queue_delay_ns: self.delay.percentiles(),
            series: self.series,
        }
    }
}

/// What the packets seen at one tap only point to: capture loss at the other tap, or loss between the two.
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
