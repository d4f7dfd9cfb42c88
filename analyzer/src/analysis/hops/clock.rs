//! The clock line of a hop: the clocks' offset plus the base transit, followed over time.
//!
//! Two taps' stamps differ by the clocks' offset, the fixed transit between them and the queueing. With traffic
//! one way, offset and transit cannot be told apart, so their sum is estimated as the least delay of packets
//! that found the queue empty. Each window of a hop's packets keeps its least delay; a line laid under those
//! minima is the hop's floor, and its slope the drift between the two clocks.
//!
//! A queue that stands (never empties after some moment) lifts the minima of the windows it stands through,
//! and a line laid under every minimum (Moon, Skelly and Towsley's linear program) tilts towards them: the
//! standing queue reads as drift. So the slope is chosen by the windows that reached the floor, not by all:
//! among the lines under every minimum, the one that the most windows come within `touch_ns` of (about one
//! frame on the wire, what a packet waits behind a frame already leaving an empty queue), and among those the
//! one nearest the minima it touches. Every hop between the same two capture files follows the same two
//! clocks, the hops one way with the drift's sign and the hops the other way (ACKs, CNPs, whose queue is
//! usually empty) with the opposite sign, so they are fitted together: a standing queue one way is outvoted by
//! an empty queue the other way, which is how two-way time transfer separates a clock offset from a delay.
//!
//! The drift counts as known when some hop reached the floor in at least two windows and in at least half of
//! its windows: then the floor was seen often enough that a tilt would have missed it. Otherwise the least
//! delays allow a whole range of drifts (the lines through the lowest minimum of each hop that stay under the
//! others); the line then takes the drift in that range nearest zero, and says how far a delay may be off.

use std::collections::VecDeque;

/// A line `a + b (t − t_ref)`: the hop's offset plus base transit at time `t` (upstream clock, ns).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Line {
    pub a: f64,
    pub b: f64,
    pub t_ref: u64,
}

impl Line {
    pub fn at(&self, t: u64) -> f64 {
        self.a + self.b * (t as f64 - self.t_ref as f64)
    }
}

/// One clock window of a hop.
#[derive(Debug, Clone, Copy)]
struct Window {
    idx: u64,
    /// The least delay in the window.
    least: i64,
    /// When it was seen (not the window's middle: under a drift of 100 ppm, half a window of 10 ms is 500 ns).
    at: u64,
}

/// Each window's least delay, for the windows still needed.
#[derive(Debug, Clone)]
pub(crate) struct ClockTrack {
    window_ns: u64,
    /// Oldest first; the last one may still be filling.
    windows: VecDeque<Window>,
    least: i64,
}

impl ClockTrack {
    pub fn new(window_ns: u64) -> Self {
        ClockTrack {
            window_ns: window_ns.max(1),
            windows: VecDeque::new(),
            least: i64::MAX,
        }
    }

    #[inline]
    pub fn add(&mut self, t: u64, d: i64) {
        self.least = self.least.min(d);
        let idx = t / self.window_ns;
        let lower = |w: &mut Window| {
            if d < w.least {
                w.least = d;
                w.at = t;
            }
        };
        let new = Window {
            idx,
            least: d,
            at: t,
        };
        match self.windows.back_mut() {
            Some(w) if w.idx == idx => lower(w),
            // Samples arrive nearly in time order; a late one goes to the window it belongs to if still kept.
            Some(w) if idx < w.idx => {
                if let Some(w) = self.windows.iter_mut().rev().find(|w| w.idx == idx) {
                    lower(w);
                } else {
                    let at = self.windows.partition_point(|w| w.idx < idx);
                    self.windows.insert(at, new);
                }
            }
            _ => self.windows.push_back(new),
        }
    }

    /// Forgets windows that end before `t`.
    pub fn prune_before(&mut self, t: u64) {
        while self
            .windows
            .front()
            .is_some_and(|w| (w.idx + 1) * self.window_ns <= t)
        {
            self.windows.pop_front();
        }
    }

    /// The line of two taps that share a clock: no drift, flat at the least delay ever seen.
    pub fn flat(&self) -> Option<Line> {
        let first = self.windows.front()?;
        Some(Line {
            a: self.least as f64,
            b: 0.0,
            t_ref: first.at,
        })
    }

    /// This hop's line under the drift `fit` found for its pair of clocks, `sign` as the hop was given to
    /// [`fit`]: the line with that slope under every window kept.
    pub fn line(&self, sign: f64, fit: &Fit) -> Option<Line> {
        let b = signed(sign, fit.b);
        let a = self
            .windows
            .iter()
            .map(|w| w.least as f64 - b * (w.at as f64 - fit.t_ref as f64))
            .reduce(f64::min)?;
        Some(Line {
            a,
            b,
            t_ref: fit.t_ref,
        })
    }

    /// The farthest, in time, a sample between `first` and `last` lies from a window kept: a line whose
    /// slope is off by `e` lies at most `e` times this from the right one at that sample, since both lie
    /// under the windows and each window moves by `e` times its distance.
    pub fn lever(&self, first: u64, last: u64) -> f64 {
        let (Some(a), Some(b)) = (
            self.windows.iter().map(|w| w.at).min(),
            self.windows.iter().map(|w| w.at).max(),
        ) else {
            return 0.0;
        };
        (last.saturating_sub(a)).max(b.saturating_sub(first)) as f64
    }

    fn points(&self, t_ref: u64) -> Vec<(f64, f64)> {
        self.windows
            .iter()
            .map(|w| (w.at as f64 - t_ref as f64, w.least as f64))
            .collect()
    }
}

/// The drift between a pair of clocks, from the windows of every hop between them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Fit {
    /// The drift the lines use (ns per ns): how fast the second clock runs ahead of the first.
    pub b: f64,
    /// Whether the windows pinned it (see the module's note); when not, `b` is the value of `low..=high`
    /// nearest zero.
    pub known: bool,
    /// The drifts the least delays allow: `b` itself when known.
    pub low: f64,
    pub high: f64,
    /// Time origin of the lines.
    pub t_ref: u64,
}

impl Fit {
    /// The drifts allowed, lowest first, as a hop of this `sign` sees them.
    pub fn range(&self, sign: f64) -> (f64, f64) {
        let (a, b) = (signed(sign, self.low), signed(sign, self.high));
        (a.min(b), a.max(b))
    }

    /// The largest error the drift's uncertainty can put in a delay `lever` ns from the windows (see
    /// [`ClockTrack::lever`]): none when the drift is known.
    pub fn error_ns(&self, lever: f64) -> f64 {
        if self.known {
            0.0
        } else {
            (self.b - self.low).max(self.high - self.b) * lever
        }
    }
}

/// `v` as a hop of this `sign` sees it; no drift stays +0, which every output writes without a sign.
fn signed(sign: f64, v: f64) -> f64 {
    if v == 0.0 { 0.0 } else { sign * v }
}

/// Two sums of residuals that differ by less than this (ns) are equally good: stamps are whole ns.
const TIE_NS: f64 = 1e-3;

/// At most this many hops between one pair of clocks inform its fit (those with the most windows kept): the
/// search costs the square of their number, and two or three hops each way already hold the floor.
const MAX_LEGS: usize = 8;

/// One hop's windows as the fit reads them.
struct Leg {
    sign: f64,
    /// (time since the fit's origin, least delay), in time order.
    points: Vec<(f64, f64)>,
    /// Indices of the points on their lower hull: whatever the slope, the line under all points rests on one.
    hull: Vec<usize>,
}

impl Leg {
    fn new(c: &ClockTrack, sign: f64, t_ref: u64) -> Leg {
        let points = c.points(t_ref);
        let mut hull: Vec<usize> = Vec::with_capacity(points.len());
        for (i, &p) in points.iter().enumerate() {
            while let [.., o, a] = hull[..] {
                let (o, a) = (points[o], points[a]);
                // Drop `a` when it lies on or above the segment from `o` to `p`.
                if (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0) <= 0.0 {
                    hull.pop();
                } else {
                    break;
                }
            }
            hull.push(i);
        }
        Leg { sign, points, hull }
    }

    /// How many points lie within `touch` above the line of drift `b` laid under them all, and the sum of
    /// their distances to it.
    fn touching(&self, b: f64, touch: f64) -> (usize, f64) {
        let slope = self.sign * b;
        let y = |&(t, m): &(f64, f64)| m - slope * t;
        let a = self
            .hull
            .iter()
            .map(|&i| y(&self.points[i]))
            .fold(f64::INFINITY, f64::min);
        // A point exactly `touch` above, as a candidate slope puts it, must not drop out by a rounding.
        let reach = touch * (1.0 + 1e-12) + 1e-9;
        self.points
            .iter()
            .map(|q| y(q) - a)
            .filter(|&r| r <= reach)
            .fold((0, 0.0), |(n, sum), r| (n + 1, sum + r))
    }

    /// Whether the windows came back to the line of drift `b` often enough to show where its floor is: in at
    /// least two windows, and in at least half of them.
    fn reaches_floor(&self, b: f64, touch: f64) -> bool {
        let (k, _) = self.touching(b, touch);
        k >= 2 && 2 * k >= self.points.len()
    }

    /// The drifts at which what [`Leg::touching`] counts or sums can turn: where the line moves from one hull
    /// point to the next, and where a point comes `touch` above the hull point the line rests on.
    fn turns(&self, touch: f64, out: &mut Vec<f64>) {
        for e in self.hull.windows(2) {
            let (p, q) = (self.points[e[0]], self.points[e[1]]);
            out.push(self.sign * (q.1 - p.1) / (q.0 - p.0));
        }
        for &v in &self.hull {
            let (tv, mv) = self.points[v];
            for &(t, m) in &self.points {
                if t != tv {
                    out.push(self.sign * (m - mv - touch) / (t - tv));
                }
            }
        }
    }
}

/// Fits the drift of a pair of clocks to the windows of the hops between them, each given with its sign: +1
/// when its delays grow as the second clock runs ahead (the hop goes from the first clock's taps to the
/// second's), −1 for the hops the other way. `touch_ns`: how far above the line a window's least delay may be
/// and still count as a queue that emptied. Drifts beyond `max_drift_ppm` are not believed. `None` without
/// a window.
pub(crate) fn fit(legs: &[(&ClockTrack, f64)], touch_ns: f64, max_drift_ppm: f64) -> Option<Fit> {
    let mut legs: Vec<&(&ClockTrack, f64)> =
        legs.iter().filter(|(c, _)| !c.windows.is_empty()).collect();
    // Stable: among hops with as many windows, the first given stay.
    legs.sort_by_key(|(c, _)| std::cmp::Reverse(c.windows.len()));
    legs.truncate(MAX_LEGS);
    let t_ref = legs
        .iter()
        .flat_map(|(c, _)| c.windows.iter().map(|w| w.at))
        .min()?;
    let legs: Vec<Leg> = legs.iter().map(|(c, s)| Leg::new(c, *s, t_ref)).collect();
    // A bound that is not a number believes no drift; one past a million ppm (a clock twice as fast) means
    // any, and stays finite so that every slope does.
    let bound = if max_drift_ppm.is_nan() {
        0.0
    } else {
        max_drift_ppm.abs().min(1e6) / 1e6
    };
    let touch = touch_ns.max(0.0);
    // The count of windows within `touch` of the line changes only where some window comes `touch` above it,
    // and their sum of distances bends only there and where the line moves to another hull point: the best
    // drift is one of those, or a bound, or none.
    let mut candidates = vec![0.0, -bound, bound];
    for l in &legs {
        l.turns(touch, &mut candidates);
    }
    let mut best = (0usize, f64::INFINITY, 0.0f64);
    for &b in candidates.iter().filter(|b| b.abs() <= bound) {
        let (n, sum) = legs.iter().fold((0, 0.0), |(n, sum), l| {
            let (k, r) = l.touching(b, touch);
            (n + k, sum + r)
        });
        let (bn, bsum, bb) = best;
        let better = n > bn
            || (n == bn && (sum < bsum - TIE_NS || (sum <= bsum + TIE_NS && b.abs() < bb.abs())));
        if better {
            best = (n, sum, b);
        }
    }
    let b = best.2;
    // At the bound, the windows asked for more drift than is believed (with a bound of 0, for any).
    let pinned = b.abs() >= bound;
    let floor_seen = legs.iter().any(|l| l.reaches_floor(b, touch));
    if floor_seen && !pinned {
        return Some(Fit {
            b,
            known: true,
            low: b,
            high: b,
            t_ref,
        });
    }
    let (low, high) = through_least(&legs, bound);
    Some(Fit {
        b: if low > 0.0 {
            low
        } else if high < 0.0 {
            high
        } else {
            0.0
        },
        known: false,
        low,
        high,
        t_ref,
    })
}

/// The drifts within `bound` for which the line under each hop's windows passes through that hop's lowest
/// window: what the data allow when the lowest window is all that is known to have found the queue empty.
/// The whole `-bound..=bound` when the hops disagree.
fn through_least(legs: &[Leg], bound: f64) -> (f64, f64) {
    let (mut low, mut high) = (-bound, bound);
    for l in legs {
        let Some(&(tp, mp)) = l.points.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
            continue;
        };
        // The slope of the hop's own line: no window may lie below the line through the lowest one.
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        for &(t, m) in &l.points {
            let slope = (m - mp) / (t - tp);
            if t > tp {
                hi = hi.min(slope);
            } else if t < tp {
                lo = lo.max(slope);
            }
        }
        let (lo, hi) = if l.sign > 0.0 { (lo, hi) } else { (-hi, -lo) };
        low = low.max(lo);
        high = high.min(hi);
    }
    if low <= high {
        (low, high)
    } else {
        (-bound, bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 10_000_000;
    /// Serialization of a 4 KB frame at 25 Gb/s.
    const TOUCH: f64 = 1_340.0;

    /// A hop whose clock line is `offset + drift · t` under a queue of `queue(i)` ns at packet `i`, a packet every
    /// 5 µs for `secs` seconds.
    fn hop(drift: f64, secs: f64, queue: impl Fn(u64) -> i64) -> ClockTrack {
        let mut c = ClockTrack::new(W);
        for i in 0..(secs * 200_000.0) as u64 {
            let t = i * 5_000;
            let offset = 1_000_000.0 + drift * t as f64;
            c.add(t, offset.round() as i64 + queue(i));
        }
        c
    }

    fn emptying(i: u64) -> i64 {
        if i.is_multiple_of(1000) {
            0
        } else {
            3_000 + (i % 7) as i64 * 1_000
        }
    }

    /// A queue that empties in the first 5 ms and then never again.
    fn standing(i: u64) -> i64 {
        if i < 1000 {
            0
        } else {
            8_000 + (i % 50) as i64 * 100
        }
    }

    /// A queue that empties now and then, the clock drifting: the line follows the drift, not the queue.
    #[test]
    fn follows_drift_under_an_emptying_queue() {
        let c = hop(25e-6, 1.0, emptying);
        let f = fit(&[(&c, 1.0)], TOUCH, 100.0).unwrap();
        assert!(f.known, "{f:?}");
        assert!((f.b - 25e-6).abs() < 1e-8, "{f:?}");
        let line = c.line(1.0, &f).unwrap();
        for t in [0u64, 500_000_000, 999_000_000] {
            let truth = 1_000_000.0 + 25e-6 * t as f64;
            assert!((line.at(t) - truth).abs() < 2.0, "{t}: {}", line.at(t));
        }
        assert_eq!(f.error_ns(c.lever(0, 999_000_000)), 0.0);
    }

    /// A queue that never empties after its first window, one way only: nothing tells its rise from drift.
    /// The drift is not known, the line stays flat on the one empty window, and the error it may carry is
    /// the whole rise the windows allow.
    #[test]
    fn a_standing_queue_one_way_is_not_drift_and_says_so() {
        let c = hop(0.0, 0.3, standing);
        let f = fit(&[(&c, 1.0)], TOUCH, 100.0).unwrap();
        assert!(!f.known, "{f:?}");
        assert_eq!(f.b, 0.0);
        assert_eq!(f.low, -100e-6);
        // The steepest line through the empty window under the last one: 8 µs over about 0.3 s.
        assert!(f.high > 20e-6 && f.high < 40e-6, "{f:?}");
        let line = c.line(1.0, &f).unwrap();
        assert_eq!(line.at(200_000_000), 1_000_000.0);
        let e = f.error_ns(c.lever(0, 299_995_000));
        assert!((e - 100e-6 * 299_995_000.0).abs() < 1.0, "{e}");
    }

    /// The same standing queue, with its ACKs coming back through a queue that stays empty: the two directions
    /// together know the drift, with and without one.
    #[test]
    fn the_reverse_direction_separates_drift_from_a_standing_queue() {
        for drift in [0.0, 20e-6, -35e-6] {
            let data = hop(drift, 0.3, standing);
            // Back from the other clock: the drift with the other sign, an ACK every 50 µs, never queued.
            let mut acks = ClockTrack::new(W);
            for i in 0..6_000u64 {
                let t = i * 50_000 + 7;
                acks.add(t, (-1_000_000.0 - drift * t as f64 + 900.0).round() as i64);
            }
            let f = fit(&[(&data, 1.0), (&acks, -1.0)], TOUCH, 100.0).unwrap();
            assert!(f.known, "{drift}: {f:?}");
            assert!((f.b - drift).abs() < 0.05e-6, "{drift}: {f:?}");
            let line = data.line(1.0, &f).unwrap();
            for t in [0u64, 150_000_000, 299_000_000] {
                let truth = 1_000_000.0 + drift * t as f64;
                assert!(
                    (line.at(t) - truth).abs() < 2.0,
                    "{drift} {t}: {}",
                    line.at(t)
                );
            }
            let back = acks.line(-1.0, &f).unwrap();
            assert!((back.b + drift).abs() < 0.05e-6);
        }
    }

    /// A clean line steeper than the bound is not believed: no drift, and the drift is not known.
    #[test]
    fn a_drift_beyond_the_bound_is_not_believed() {
        let c = hop(150e-6, 0.2, emptying);
        let f = fit(&[(&c, 1.0)], TOUCH, 100.0).unwrap();
        assert!(!f.known, "{f:?}");
        assert_eq!(f.b, 0.0);
        assert!(f.error_ns(c.lever(0, 199_995_000)) > 10_000.0);
    }

    /// One window cannot show a slope: not known, flat, and the error only what the window's span allows.
    #[test]
    fn one_window_shows_no_slope() {
        let mut c = ClockTrack::new(W);
        for i in 0..100u64 {
            c.add(1_000 + i * 13_000, 5_000 + (i % 3) as i64 * 700);
        }
        let f = fit(&[(&c, -1.0)], TOUCH, 100.0).unwrap();
        assert!(!f.known);
        assert_eq!((f.b, f.low, f.high), (0.0, -100e-6, 100e-6));
        assert_eq!(c.line(-1.0, &f).unwrap().at(900_000), 5_000.0);
        let e = f.error_ns(c.lever(1_000, 1_288_000));
        assert!(e > 0.0 && e < 130.0, "{e}");
    }

    /// A bound that is no number, or infinite, or negative, neither panics nor lets a slope run away.
    #[test]
    fn odd_bounds_are_harmless() {
        let c = hop(25e-6, 0.1, emptying);
        for (bound, known) in [
            (f64::NAN, false),
            (f64::INFINITY, true),
            (-100.0, true),
            (0.0, false),
        ] {
            let f = fit(&[(&c, 1.0)], TOUCH, bound).unwrap();
            assert_eq!(f.known, known, "{bound}: {f:?}");
            assert!(
                f.b.is_finite() && f.low <= f.b && f.b <= f.high,
                "{bound}: {f:?}"
            );
            if known {
                assert!((f.b - 25e-6).abs() < 1e-8, "{bound}: {f:?}");
            }
        }
    }

    /// Taps of one file: flat at the least delay, whatever the windows.
    #[test]
    fn a_shared_clock_is_flat() {
        let c = hop(0.0, 0.1, |i| if i < 5 { 0 } else { 4_000 });
        let line = c.flat().unwrap();
        assert_eq!((line.a, line.b), (1_000_000.0, 0.0));
        assert!(ClockTrack::new(W).flat().is_none());
        assert!(fit(&[(&ClockTrack::new(W), 1.0)], TOUCH, 100.0).is_none());
    }
}
