//! Drain rates: how fast a port emptied, measured from back-to-back departures at the tap behind it. A queue's
//! depth is its delay times this rate where the line rate is not known, and the time the largest frame holds
//! the fastest port is how close to the clock line a window must come to count as an empty queue.

use rustc_hash::FxHashMap;

/// Bytes a frame costs on the wire besides its captured length: preamble and start delimiter (8), FCS (4),
/// the inter-frame gap (12).
pub const WIRE_OVERHEAD: u32 = 24;

/// Back-to-back departures at one tap towards one next hop.
#[derive(Debug, Default)]
pub(super) struct RateAcc {
    last: Option<u64>,
    /// Count and sum of the rates per quarter Gb/s.
    hist: Vec<(u32, f64)>,
}

const RATE_STEP_GBPS: f64 = 0.25;
const RATE_MAX_GBPS: f64 = 1600.0;
/// Gaps slower than this are idle time, not a port's rate.
const RATE_MIN_GBPS: f64 = 1.0;

impl RateAcc {
    /// A frame of `len` bytes leaving at `ts`; gives the time since the one before (0 for the first).
    #[inline]
    pub(super) fn departure(&mut self, ts: u64, len: u32) -> u32 {
        let gap = self.last.map_or(0, |last| ts.saturating_sub(last));
        self.gap(gap, len);
        self.last = Some(ts);
        u32::try_from(gap).unwrap_or(u32::MAX)
    }

    /// A frame of `len` bytes that left `gap` ns after the one before it towards the same next hop.
    #[inline]
    pub(super) fn gap(&mut self, gap: u64, len: u32) {
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
    pub(super) fn rate(&self) -> Option<f64> {
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

/// Departure rates per (tap, destination MAC), looked up on every frame: each tap's first few MACs sit in a
/// short list searched first; a tap with more of them (an odd or fuzzed capture) spills into a map.
#[derive(Debug, Default)]
pub(super) struct RateMap {
    near: Vec<Vec<([u8; 6], RateAcc)>>,
    far: FxHashMap<(u32, [u8; 6]), RateAcc>,
}

const NEAR_MACS: usize = 8;

impl RateMap {
    #[inline]
    pub(super) fn get_mut(&mut self, tap: u32, mac: [u8; 6]) -> &mut RateAcc {
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

    pub(super) fn get(&self, tap: u32, mac: &[u8; 6]) -> Option<&RateAcc> {
        self.near
            .get(tap as usize)
            .and_then(|n| n.iter().find(|(m, _)| m == mac).map(|(_, r)| r))
            .or_else(|| self.far.get(&(tap, *mac)))
    }
}
