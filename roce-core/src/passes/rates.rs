//! Per-flow throughput and CE fraction over time, in bins.
//!
//! The capture's span is unknown while streaming (and stdin cannot be read twice), so bins start narrow and
//! double in width whenever a flow would need more than [`MAX_BINS`]; every flow shares one bin grid anchored at
//! the first frame, so their series line up. With `--bin` the width is fixed and the count grows with time, up to
//! [`MAX_FIXED_BINS`] over all flows; beyond that the width doubles too, and [`RatesPass::requested_width_ns`]
//! says it did.

use rustc_hash::FxHashMap;

use super::flows::FlowKey;
use crate::decode::{ECN_CE, Frame, Kind};

/// Bins per flow before widths double (automatic mode).
pub const MAX_BINS: usize = 4096;
/// Narrowest automatic bin: dcqcn.md compares rates in bins of at least 10 µs.
pub const MIN_BIN_NS: u64 = 10_000;
/// Bins over all flows (at 40 bytes each, 640 MiB, and up to as much again while vectors grow) that a fixed
/// width may fill. One record with a corrupt timestamp years ahead would otherwise ask for more memory than
/// any machine has.
pub const MAX_FIXED_BINS: usize = 1 << 24;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bin {
    pub bytes: u64,
    pub packets: u64,
    pub ce: u64,
    /// Bytes of packets that followed the flow's previous packet within [`PACING_GAP_MAX_NS`], and the sum of
    /// those gaps: their ratio is the rate the sender paced at while it was sending, idle time left out.
    pub paced_bytes: u64,
    pub gap_ns: u64,
}

/// Gaps longer than this are idle time, not pacing (a 9 KB frame at 1 Gb/s takes 72 µs).
pub const PACING_GAP_MAX_NS: u64 = 100_000;

#[derive(Debug, Clone, Default)]
struct Series {
    bins: Vec<Bin>,
    last_ns: Option<u64>,
    priority: Option<u8>,
}

/// One flow's series at the final bin width, as seen on one capture interface (tap).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSeries {
    pub iface: u32,
    pub key: FlowKey,
    pub bins: Vec<Bin>,
    /// The priority of the flow's frames ([`Frame::priority`], the last one seen): which PFC pauses stop it.
    pub priority: Option<u8>,
}

#[derive(Debug)]
pub struct RatesPass {
    start_ns: Option<u64>,
    width_ns: u64,
    fixed: bool,
    /// The fixed width asked for, once the grid had to be widened beyond it.
    requested_ns: Option<u64>,
    /// Bins held over all flows.
    total_bins: usize,
    /// Per (interface, flow): a flow mirrored at two taps must not count twice, and a tap downstream of a
    /// pause still sees buffered frames drain while the sender is stopped.
    flows: FxHashMap<(u32, FlowKey), Series>,
}

impl RatesPass {
    /// `bin_ns`: a fixed width, or `None` for automatic widths.
    pub fn new(bin_ns: Option<u64>) -> Self {
        RatesPass {
            start_ns: None,
            width_ns: bin_ns.unwrap_or(MIN_BIN_NS).max(1),
            fixed: bin_ns.is_some(),
            requested_ns: None,
            total_bins: 0,
            flows: FxHashMap::default(),
        }
    }

    pub fn frame(&mut self, f: &Frame<'_>) {
        let start = *self.start_ns.get_or_insert(f.ts_ns);
        if f.kind != Kind::Roce {
            return;
        }
        let (Some(ip), Some(bth)) = (f.ip, f.bth()) else {
            return;
        };
        let offset = f.ts_ns.saturating_sub(start);
        let mut idx = (offset / self.width_ns) as usize;
        if !self.fixed {
            while idx >= MAX_BINS {
                self.widen();
                idx = (offset / self.width_ns) as usize;
            }
        }
        let key = FlowKey {
            src: ip.src,
            dst: ip.dst,
            dest_qp: bth.dest_qp,
        };
        let s = loop {
            let s = self.flows.entry((f.iface, key)).or_default();
            let grow = (idx + 1).saturating_sub(s.bins.len());
            if grow == 0 {
                break s;
            }
            if self.fixed && self.total_bins.saturating_add(grow) > MAX_FIXED_BINS {
                self.requested_ns.get_or_insert(self.width_ns);
                self.widen();
                idx = (offset / self.width_ns) as usize;
                continue;
            }
            s.bins.resize(idx + 1, Bin::default());
            self.total_bins += grow;
            break s;
        };
        let gap = s.last_ns.map(|t| f.ts_ns.saturating_sub(t));
        s.last_ns = Some(f.ts_ns);
        if let Some(p) = f.priority() {
            s.priority = Some(p);
        }
        let b = &mut s.bins[idx];
        b.bytes += u64::from(f.len);
        b.packets += 1;
        b.ce += u64::from(ip.ecn == ECN_CE);
        // A packet's gap to its predecessor is the time the sender's limiter spent on it.
        if let Some(g) = gap.filter(|&g| g > 0 && g <= PACING_GAP_MAX_NS) {
            b.paced_bytes += u64::from(f.len);
            b.gap_ns += g;
        }
    }

    /// Doubles the bin width, merging neighbours, so the grid covers twice the time in the same memory.
    fn widen(&mut self) {
        self.width_ns = self.width_ns.saturating_mul(2);
        self.total_bins = 0;
        for s in self.flows.values_mut() {
            let merged: Vec<Bin> = s
                .bins
                .chunks(2)
                .map(|c| {
                    c.iter().fold(Bin::default(), |a, b| Bin {
                        bytes: a.bytes + b.bytes,
                        packets: a.packets + b.packets,
                        ce: a.ce + b.ce,
                        paced_bytes: a.paced_bytes + b.paced_bytes,
                        gap_ns: a.gap_ns.saturating_add(b.gap_ns),
                    })
                })
                .collect();
            self.total_bins += merged.len();
            s.bins = merged;
        }
    }

    pub fn start_ns(&self) -> u64 {
        self.start_ns.unwrap_or(0)
    }

    pub fn width_ns(&self) -> u64 {
        self.width_ns
    }

    /// The fixed width asked for, when the capture's span made the grid widen beyond it.
    pub fn requested_width_ns(&self) -> Option<u64> {
        self.requested_ns
    }

    pub fn finish(self) -> Vec<FlowSeries> {
        self.flows
            .into_iter()
            .map(|((iface, key), s)| FlowSeries {
                iface,
                key,
                bins: s.bins,
                priority: s.priority,
            })
            .collect()
    }
}

/// Gb/s carried by `bytes` in a bin of `width_ns` (bytes·8 per ns is Gb/s).
pub fn gbps(bytes: u64, width_ns: u64) -> f64 {
    bytes as f64 * 8.0 / width_ns as f64
}
