//! The clock segments: every segment, each hop's samples from before it are measured against the clock line
//! over the windows around them. Between two capture files the line's drift is fitted to every hop between them
//! at once ([`clock::fit`]), and where it is known the clocks' offset is carried from segment to segment, with
//! the floor each hop showed (see docs/hops.md, Clocks).

use rustc_hash::FxHashMap;

use super::HopsOptions;
use super::clock::{self, ClockTrack};
use super::hop::HopAcc;
use super::queues::QueueAcc;
use super::taps::Taps;

/// The rate a port is taken to have when none of a pair of clocks' hops showed one: such ports were never busy
/// enough to hold a standing queue, and a frame's time at 10 Gb/s, the slowest RoCE links, errs towards
/// taking their windows' least delays as an empty queue.
const UNKNOWN_PORT_GBPS: f64 = 10.0;
/// Per pair of capture files (lower first): the fit of their clocks, how close a window had to come to its line
/// to count as an empty queue (ns), and the port rate that came from (Gb/s).
type Fits = FxHashMap<(usize, usize), (clock::Fit, f64, f64)>;

/// What carries over from one segment to the next.
#[derive(Debug, Default)]
pub(super) struct Segments {
    /// Per pair of capture files whose drift is known since the last break: the offset of their clocks at
    /// the last fit's origin, carried from the first (which counts as 0), that origin and the drift fitted
    /// there ([`Segments::carry_floors`]).
    offsets: FxHashMap<(usize, usize), (u64, f64, f64)>,
}

impl Segments {
    /// Every hop's samples from before `t` get their queueing delay, from the clock line over the windows
    /// kept around them.
    pub(super) fn flush(
        &mut self,
        t: u64,
        hops: &mut [HopAcc],
        hop_order: &[u32],
        queues: &mut [QueueAcc],
        taps: &Taps,
        opts: &HopsOptions,
    ) {
        let keep = opts.segment_ns().saturating_mul(2);
        let fits = fit_clocks(hops, taps, opts, t);
        let mut lines: Vec<Option<clock::Line>> = hops
            .iter()
            .map(|h| match clocks_of(h, taps) {
                None => h.clock.flat(),
                Some((pair, sign)) => fits.get(&pair).and_then(|(f, ..)| h.clock.line(sign, f)),
            })
            .collect();
        self.carry_floors(hops, taps, &fits, &mut lines);
        for &hi in hop_order {
            let clocks = clocks_of(&hops[hi as usize], taps);
            let h = &mut hops[hi as usize];
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
                queues[s.queue as usize].add(&s, q, h.max_wire);
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
            for h in hops.iter_mut() {
                h.clock.prune_before(t.saturating_sub(keep));
            }
        }
    }

    /// Under a known drift the clocks' offset moves by the drift times the time elapsed, so it can be carried
    /// from one segment to the next, and with it the floor each hop showed: its line less the offset. A queue
    /// that emptied once and then stood through every window kept (the windows in which it emptied are
    /// forgotten after two segments) is still measured from that floor, not from the least of its standing
    /// windows. A segment whose drift is not known breaks the chain: the floors are forgotten and learnt anew.
    fn carry_floors(
        &mut self,
        hops: &mut [HopAcc],
        taps: &Taps,
        fits: &Fits,
        lines: &mut [Option<clock::Line>],
    ) {
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
        let clocks: Vec<_> = hops.iter().map(|h| clocks_of(h, taps)).collect();
        for ((h, line), clocks) in hops.iter_mut().zip(lines.iter_mut()).zip(clocks) {
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
}

/// The pair of clocks hop `h` crosses (lower file first) and the sign its delays follow their drift with
/// (+1 from the lower file's taps to the higher's); `None` for taps of one file.
fn clocks_of(h: &HopAcc, taps: &Taps) -> Option<((usize, usize), f64)> {
    let (a, b) = (taps.file_of(h.from), taps.file_of(h.to));
    (!h.shared && a != b).then(|| ((a.min(b), a.max(b)), if b > a { 1.0 } else { -1.0 }))
}

/// For each pair of capture files that a hop with samples before `t` crosses: the drift of their clocks,
/// fitted to the windows of every hop between the two files, both ways ([`clock::fit`]), with how close a
/// window had to come to its line to count as an empty queue (ns) and the port rate that came from (Gb/s).
fn fit_clocks(hops: &[HopAcc], taps: &Taps, opts: &HopsOptions, t: u64) -> Fits {
    #[derive(Default)]
    struct Legs<'a> {
        legs: Vec<(&'a ClockTrack, f64)>,
        wire: u32,
        gbps: Option<f64>,
        needed: bool,
    }
    let mut pairs: FxHashMap<(usize, usize), Legs> = FxHashMap::default();
    for h in hops {
        let Some((pair, sign)) = clocks_of(h, taps) else {
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
            let gbps = opts
                .link_bps
                .map(|bps| bps as f64 / 1e9)
                .or(l.gbps)
                .unwrap_or(UNKNOWN_PORT_GBPS);
            // The time the largest frame holds the fastest port: what a packet that found the queue empty
            // may still wait behind a frame already leaving.
            let touch = f64::from(l.wire) * 8.0 / gbps;
            let fit = clock::fit(&l.legs, touch, opts.max_drift_ppm)?;
            Some((pair, (fit, touch, gbps)))
        })
        .collect()
}

/// `v.round() as u64` for `v >= 0`, without the call to libm's `round` that x86_64's baseline instruction set
/// needs (it was a percent of the pass): the conversion truncates, and the fraction it dropped is exact.
#[inline]
fn round_up_half(v: f64) -> u64 {
    let t = v as u64;
    t.saturating_add(u64::from(v - t as f64 >= 0.5))
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
