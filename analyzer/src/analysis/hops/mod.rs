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
//!
//! One file per job, and no circle between them: `pass.rs` (the pass and its entry points) hands
//! frames to `matching.rs` and the groups it closes to `groups.rs`, which orders their copies (`order.rs`),
//! fills each hop (`hop.rs`) and its queue (`queues.rs`), and leaves the clock line to `segments.rs` (over
//! `clock.rs`); `taps.rs` and `rates.rs` keep what is counted per tap and per port, `series.rs` the charts'
//! series; `report.rs` holds what is found, `red.rs` the marking curve's fit, `np.rs` the NP check and
//! `findings.rs` what needs saying.

pub mod clock;
mod findings;
mod groups;
mod hop;
pub(crate) mod matching;
pub mod np;
mod order;
mod pass;
mod queues;
mod rates;
pub mod red;
mod report;
mod segments;
mod series;
mod taps;

pub use super::hist;
pub use pass::{HopsPass, run, run_on};
pub use rates::WIRE_OVERHEAD;
pub use report::{HopReport, HopsReport, MarkingReport, QueueReport, TapReport};
pub use series::{Series, SeriesBin};

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

/// `a - b` in signed ns, saturating: a corrupt timestamp makes a huge delay, never an overflow.
#[inline]
fn diff(a: u64, b: u64) -> i64 {
    let d = i128::from(a) - i128::from(b);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}
