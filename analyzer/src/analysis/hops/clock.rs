//! Offset plus base transit of one hop, followed over time.
//!
//! Two taps' stamps differ by the clocks' offset, the fixed transit between them and the queueing. With traffic
//! one way, offset and transit cannot be told apart, so their sum is estimated as the least delay of some
//! packet that found the queue empty. Each window of the hop's packets keeps its least delay; a line is then
//! laid under those minima (touching the lowest, below all others: the linear program of Moon, Skelly and
//! Towsley's skew estimate, whose solution is the lower hull's edge over the points' mean time). Its slope is
//! the drift between the two clocks. A slope beyond what oscillators drift (`max_drift_ppm`) is not drift but
//! a queue that stood through whole windows, and is taken as no drift. Taps of one file share a clock: their
//! line is flat at the least delay ever seen.

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

/// Each window's least delay and when it was seen (not the window's middle: under a drift of 100 ppm, half a
/// window of 10 ms is 500 ns), for the windows still needed.
#[derive(Debug, Clone)]
pub(crate) struct ClockTrack {
    window_ns: u64,
    /// (window index, least delay, when it was seen), oldest first; the last one may still be filling.
    windows: VecDeque<(u64, i64, u64)>,
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
        let w = t / self.window_ns;
        let lower = |slot: &mut (u64, i64, u64)| {
            if d < slot.1 {
                slot.1 = d;
                slot.2 = t;
            }
        };
        match self.windows.back_mut() {
            Some(slot) if slot.0 == w => lower(slot),
            // Samples arrive nearly in time order; a late one goes to the window it belongs to if still kept.
            Some(slot) if w < slot.0 => {
                if let Some(slot) = self.windows.iter_mut().rev().find(|s| s.0 == w) {
                    lower(slot);
                } else {
                    let at = self.windows.partition_point(|s| s.0 < w);
                    self.windows.insert(at, (w, d, t));
                }
            }
            _ => self.windows.push_back((w, d, t)),
        }
    }

    /// Forgets windows that end before `t`.
    pub fn prune_before(&mut self, t: u64) {
        while self
            .windows
            .front()
            .is_some_and(|s| (s.0 + 1) * self.window_ns <= t)
        {
            self.windows.pop_front();
        }
    }

    /// The line for packets of this hop, from the windows kept. `shared` when both taps share a clock.
    pub fn line(&self, shared: bool, max_drift_ppm: f64) -> Option<Line> {
        if self.windows.is_empty() {
            return None;
        }
        let t_ref = self.windows[0].2;
        if shared {
            return Some(Line {
                a: self.least as f64,
                b: 0.0,
                t_ref,
            });
        }
        let pts: Vec<(f64, f64)> = self
            .windows
            .iter()
            .map(|&(_, m, t)| (t as f64 - t_ref as f64, m as f64))
            .collect();
        let mut b = hull_slope(&pts);
        if b.abs() > max_drift_ppm * 1e-6 {
            b = 0.0;
        }
        let a = pts
            .iter()
            .map(|&(t, y)| y - b * t)
            .fold(f64::INFINITY, f64::min);
        Some(Line { a, b, t_ref })
    }
}

/// The slope of the lower hull's edge that spans the points' mean time (0 with fewer than two points).
fn hull_slope(pts: &[(f64, f64)]) -> f64 {
    if pts.len() < 2 {
        return 0.0;
    }
    let mut hull: Vec<(f64, f64)> = Vec::with_capacity(pts.len());
    for &p in pts {
        while hull.len() >= 2 {
            let (o, a) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            // Drop `a` when it lies on or above the segment from `o` to `p`.
            let cross = (a.0 - o.0) * (p.1 - o.1) - (a.1 - o.1) * (p.0 - o.0);
            if cross <= 0.0 {
                hull.pop();
            } else {
                break;
            }
        }
        hull.push(p);
    }
    let mean = pts.iter().map(|p| p.0).sum::<f64>() / pts.len() as f64;
    for e in hull.windows(2) {
        if e[0].0 <= mean && mean <= e[1].0 {
            return (e[1].1 - e[0].1) / (e[1].0 - e[0].0);
        }
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drifting clock under a queue that empties now and then: the line follows the drift, not the queue.
    #[test]
    fn follows_drift_under_a_queue() {
        let mut c = ClockTrack::new(10_000_000);
        for i in 0..200_000u64 {
            let t = i * 5_000; // 1 s of packets
            let offset = 1_000_000.0 + 25e-6 * t as f64;
            let queue = if i % 1000 == 0 {
                0
            } else {
                3_000 + (i % 7) * 1_000
            };
            c.add(t, offset as i64 + queue as i64);
        }
        let line = c.line(false, 100.0).unwrap();
        assert!((line.b - 25e-6).abs() < 1e-6, "{line:?}");
        for t in [0u64, 500_000_000, 999_000_000] {
            let truth = 1_000_000.0 + 25e-6 * t as f64;
            assert!((line.at(t) - truth).abs() < 20.0, "{t}: {}", line.at(t));
        }
    }

    /// A queue that never empties after the start is no drift.
    #[test]
    fn a_standing_queue_is_not_drift() {
        let mut c = ClockTrack::new(1_000_000);
        c.add(0, 5_000);
        for i in 1..3_000u64 {
            c.add(i * 1_000, 5_000 + 8_000 + (i % 50) as i64 * 100);
        }
        let line = c.line(false, 100.0).unwrap();
        assert_eq!(line.b, 0.0);
        assert_eq!(line.at(2_000_000), 5_000.0);
    }
}
