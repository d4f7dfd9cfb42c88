//! Fitting a RED/WRED marking curve to what a queue marked: P(mark) is 0 below Kmin, rises linearly to Pmax at
//! Kmax and is 1 above.
//!
//! Each ECN-capable packet is one draw: marked or not, with the curve's probability at the depth it found. The
//! fit maximises the likelihood of those draws, counted per slice of depth (a slice's packets are a binomial
//! draw), rather than fitting a line through binned fractions: least squares weighs a bin of 10 packets like
//! one of 10,000 once the weights run out of precision, and a fraction of 0 or 1 carries no sign of how sure it
//! is. The slices are the buckets of hops' delay histogram, under 0.8 % wide, and the curve is taken at each
//! bucket's middle, no further than 0.4 % from any of its packets: the 4 KiB bins a reader sees would put
//! Kmin up to 7 % off at 60 KB. (Spreading a bucket's packets evenly across it instead would let a step
//! placed inside one bucket explain any fraction marked there, whatever the rest of the curve.)
//!
//! Kmin and Kmax come from a grid over the depths packets found, refined by a compass search; for each pair
//! the likelihood is concave in Pmax, which Newton's method solves. Each parameter gets a 95 % interval from
//! its profile likelihood: the values whose best likelihood (over the other two) lies within 1.92 of the
//! maximum. A queue that never reached Kmax bounds only the slope of the curve, so Kmax and Pmax are then open
//! above, and the output says so instead of printing a number that looks exact.

use serde::Serialize;

use super::hist;

/// One depth bin of the evidence shown: its packets that arrived ECN-capable, and how many left marked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bin {
    /// The bin's lower edge.
    pub depth_bytes: u64,
    /// Packets in the bin that arrived ECN-capable: only they could be marked.
    pub ect_in: u64,
    /// Of those, the ones that left CE-marked.
    pub marked: u64,
}

/// The ECN-capable packets that found the queue at about one depth, and how many of them were marked: what
/// the fit reads. In a list, slices are ordered by depth.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slice {
    /// The depth they found.
    pub depth_bytes: f64,
    /// Packets that arrived ECN-capable.
    pub ect_in: u64,
    /// Of those, the ones that left marked.
    pub marked: u64,
}

/// The slices of a queue's depth histogram: `ecn[b]` holds the ECN-capable and the marked packets whose
/// queueing delay fell in [`hist`] bucket `b`, and `bytes_per_ns` (the drain rate) turns delay into depth.
/// Depths of `max_bytes` and beyond are left out: no switch buffer holds them, so they come from a delay the
/// clocks could not explain.
pub fn slices(ecn: &[(u64, u64)], bytes_per_ns: f64, max_bytes: f64) -> Vec<Slice> {
    ecn.iter()
        .enumerate()
        .filter(|(_, (n, _))| *n > 0)
        .map(|(b, &(n, m))| Slice {
            depth_bytes: hist::value(b) * bytes_per_ns,
            ect_in: n,
            marked: m,
        })
        .take_while(|s| s.depth_bytes < max_bytes)
        .collect()
}

/// A marking curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Curve {
    /// Depth below which it marks nothing.
    pub kmin_bytes: f64,
    /// Depth at and above which it marks every packet.
    pub kmax_bytes: f64,
    /// The marking probability just below `kmax_bytes`.
    pub pmax: f64,
}

impl Curve {
    /// The marking probability at `depth`.
    pub fn probability(&self, depth: f64) -> f64 {
        if depth < self.kmin_bytes {
            0.0
        } else if depth >= self.kmax_bytes {
            1.0
        } else {
            self.pmax * ramp(self.kmin_bytes, self.kmax_bytes, depth)
        }
    }
}

/// How far `x` is up the ramp from `a` to `b`, as a fraction.
fn ramp(a: f64, b: f64, x: f64) -> f64 {
    ((x - a) / (b - a).max(f64::MIN_POSITIVE)).clamp(0.0, 1.0)
}

/// A 95 % interval of one parameter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The least value the data allow.
    pub low: f64,
    /// The greatest; `None` when the data allow any larger value (a queue that never reached Kmax cannot say
    /// where Kmax is, only that it is deeper than the queue went).
    pub high: Option<f64>,
}

impl Interval {
    /// `value (low–high)`, or `≥ low` when open above; numbers divided by `scale`, with `digits` decimals.
    pub fn describe(&self, value: f64, scale: f64, digits: usize) -> String {
        let f = |v: f64| format!("{:.digits$}", v / scale);
        match self.high {
            Some(h) => format!("{} ({}–{})", f(value), f(self.low), f(h)),
            None => format!("≥ {}", f(self.low)),
        }
    }
}

/// The fitted curve and what the data say of each parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RedFit {
    /// The most likely curve. Where a parameter's interval is open, its value here is one of many equally
    /// likely ones: right for drawing the curve over the depths the queue reached, not to be read as a number.
    pub curve: Curve,
    /// Kmin's 95 % interval.
    pub kmin: Interval,
    /// Kmax's.
    pub kmax: Interval,
    /// Pmax's: open above when Kmax is (any steeper ramp ending deeper fits as well).
    pub pmax: Interval,
    /// Root of the packet-weighted mean squared difference between the marked fraction of each group of
    /// slices (the bins the output shows) and what the curve expects of it.
    pub fit_rmse: f64,
}

impl RedFit {
    /// Kmin, when the data bound it.
    pub fn kmin_bytes(&self) -> Option<f64> {
        self.kmin.high.map(|_| self.curve.kmin_bytes)
    }

    /// Kmax, when the data bound it.
    pub fn kmax_bytes(&self) -> Option<f64> {
        self.kmax.high.map(|_| self.curve.kmax_bytes)
    }

    /// Pmax, when the data bound it.
    pub fn pmax(&self) -> Option<f64> {
        self.pmax.high.map(|_| self.curve.pmax)
    }

    /// Widens Kmin's and Kmax's intervals for the switch's own depths, which may lie up to `bytes` below the
    /// depths measured: a depth taken from a packet's wait counts the part of the frame then on the wire, which
    /// a switch may leave out of the depth it compares (the simulator does, switches differ). The intervals
    /// above come from the packets alone and would claim a precision finer than a frame.
    pub fn allow_for_frame_on_wire(&mut self, bytes: f64) {
        for i in [&mut self.kmin, &mut self.kmax] {
            i.low = (i.low - bytes).max(0.0);
        }
    }
}

/// The chance given to a mark where the curve says none, and to no mark where it says certain: a few packets
/// whose depth was misjudged (a clock glitch, a frame counted twice) then cost a bounded amount instead of
/// dragging Kmin or Kmax to themselves. Small enough to move Kmin by a few bytes at most.
const LAPSE: f64 = 1e-6;
/// Half the 95 % point of chi-square with one degree of freedom: the drop in log-likelihood that bounds a
/// parameter's interval.
const DROP_95: f64 = 1.920_729;
/// Depths on the grid at most (quantiles of where packets were).
const GRID: usize = 32;

/// Fits the curve to `slices` (ordered by depth); `bin_bytes` groups them for `fit_rmse`. `None` when no
/// packet was marked (a queue that never marked reveals nothing of its curve) or none was ECN-capable.
pub fn fit(slices: &[Slice], bin_bytes: f64) -> Option<RedFit> {
    let lik = Likelihood::new(slices)?;
    let (a, b, p, best) = lik.most_likely();
    let threshold = best - DROP_95;
    let tol = lik.deepest * 1e-4;
    // Kmin: the best Kmax for each Kmin, started from the last one found.
    let kmin = lik.interval(a, [b], threshold, (0.0, None), tol, |x, [b]| {
        let (v, b) = lik.climb1(b, (x + tol, lik.top), |b| lik.best_p(x, b).0);
        (v, [b])
    });
    let kmax = lik.interval(b, [a], threshold, (tol, None), tol, |x, [a]| {
        let (v, a) = lik.climb1(a, (0.0, x - tol), |a| lik.best_p(a, x).0);
        (v, [a])
    });
    let ptol = 1e-5;
    let pmax = lik.interval(p, [a, b], threshold, (0.0, Some(1.0)), ptol, |x, [a, b]| {
        let (v, [a, b]) = lik.climb2([a, b], |[a, b]| lik.ll(a, b, x));
        (v, [a, b])
    });
    let pmax = Interval {
        low: pmax.low,
        high: kmax.high.and(pmax.high),
    };
    let curve = Curve {
        kmin_bytes: a,
        kmax_bytes: b,
        pmax: p,
    };
    Some(RedFit {
        curve,
        kmin,
        kmax,
        pmax,
        fit_rmse: rmse(slices, &curve, bin_bytes),
    })
}

/// The log-likelihood of the slices' marks under a curve, and the searches over it.
struct Likelihood<'a> {
    slices: &'a [Slice],
    /// Running sums of `ect_in` and `marked` over the slices, so that every slice below Kmin (or above Kmax),
    /// whose probability is a constant, costs nothing.
    n: Vec<f64>,
    m: Vec<f64>,
    /// The deepest depth any packet found.
    deepest: f64,
    /// The deepest Kmin or Kmax tried: far enough past `deepest` that a Kmax the queue never reached shows as
    /// an interval that runs into it.
    top: f64,
}

impl<'a> Likelihood<'a> {
    fn new(slices: &'a [Slice]) -> Option<Self> {
        let marked: u64 = slices.iter().map(|s| s.marked).sum();
        let deepest = slices.last().map_or(0.0, |s| s.depth_bytes);
        if marked == 0 || !deepest.is_finite() || deepest <= 0.0 {
            return None;
        }
        let sums = |f: fn(&Slice) -> u64| {
            let mut acc = 0.0;
            let mut v = vec![0.0];
            v.extend(slices.iter().map(|s| {
                acc += f(s) as f64;
                acc
            }));
            v
        };
        Some(Likelihood {
            slices,
            n: sums(|s| s.ect_in),
            m: sums(|s| s.marked),
            deepest,
            top: 2.0 * deepest,
        })
    }

    /// The slices below `a`, and from which on they are at or above `b`.
    fn range(&self, a: f64, b: f64) -> (usize, usize) {
        let i0 = self.slices.partition_point(|s| s.depth_bytes < a);
        let i1 = self.slices.partition_point(|s| s.depth_bytes < b).max(i0);
        (i0, i1)
    }

    /// The slices between `a` and `b`, as (u, marked, unmarked): P(mark) = Pmax u before the lapse.
    fn between(&self, a: f64, b: f64) -> impl Iterator<Item = (f64, f64, f64)> + '_ {
        let (i0, i1) = self.range(a, b);
        self.slices[i0..i1].iter().map(move |s| {
            (
                ramp(a, b, s.depth_bytes),
                s.marked as f64,
                (s.ect_in - s.marked) as f64,
            )
        })
    }

    /// The log-likelihood of the slices outside `a..b`, where the curve is 0 or 1.
    fn outside(&self, a: f64, b: f64) -> f64 {
        let (i0, i1) = self.range(a, b);
        let last = self.slices.len();
        let (n_below, m_below) = (self.n[i0], self.m[i0]);
        let (n_above, m_above) = (self.n[last] - self.n[i1], self.m[last] - self.m[i1]);
        let (miss, hit) = (LAPSE.ln(), (1.0 - LAPSE).ln());
        m_below * miss + (n_below - m_below) * hit + m_above * hit + (n_above - m_above) * miss
    }

    fn ll(&self, a: f64, b: f64, p: f64) -> f64 {
        if !(0.0 <= a && a < b && b <= self.top && (0.0..=1.0).contains(&p)) {
            return f64::NEG_INFINITY;
        }
        let inside: f64 = self
            .between(a, b)
            .map(|(u, m, k)| {
                let q = LAPSE + (1.0 - 2.0 * LAPSE) * p * u;
                m * q.ln() + k * (1.0 - q).ln()
            })
            .sum();
        self.outside(a, b) + inside
    }

    /// The best Pmax for Kmin `a` and Kmax `b`, and the log-likelihood there. The log-likelihood is concave in
    /// Pmax: Newton's method on its derivative, kept inside a shrinking bracket.
    fn best_p(&self, a: f64, b: f64) -> (f64, f64) {
        if !(0.0 <= a && a < b && b <= self.top) {
            return (f64::NEG_INFINITY, 0.0);
        }
        let slope = |p: f64| {
            let (mut g, mut h) = (0.0, 0.0);
            for (u, m, k) in self.between(a, b) {
                let d = (1.0 - 2.0 * LAPSE) * u;
                let q = LAPSE + d * p;
                g += d * (m / q - k / (1.0 - q));
                h -= d * d * (m / (q * q) + k / ((1.0 - q) * (1.0 - q)));
            }
            (g, h)
        };
        let (mut lo, mut hi, mut p) = (0.0, 1.0, 0.5);
        for _ in 0..100 {
            let (g, h) = slope(p);
            // No slice between Kmin and Kmax: Pmax changes nothing.
            if g == 0.0 || h == 0.0 {
                break;
            }
            if g > 0.0 {
                lo = p;
            } else {
                hi = p;
            }
            let newton = p - g / h;
            let next = if newton > lo && newton < hi {
                newton
            } else {
                (lo + hi) / 2.0
            };
            let done = (next - p).abs() < 1e-10 || hi - lo < 1e-9;
            p = next;
            if done {
                break;
            }
        }
        (self.ll(a, b, p), p)
    }

    /// The most likely curve: the best of a grid of (Kmin, Kmax) over the depths packets found, refined.
    fn most_likely(&self) -> (f64, f64, f64, f64) {
        let total = self.n[self.slices.len()];
        let mut grid: Vec<f64> = (0..=GRID)
            .map(|i| {
                let rank = total * i as f64 / GRID as f64;
                let at = self
                    .n
                    .partition_point(|&c| c < rank)
                    .clamp(1, self.slices.len());
                self.slices[at - 1].depth_bytes
            })
            .chain([0.0, 1.25 * self.deepest, 1.5 * self.deepest, self.top])
            .collect();
        grid.sort_by(f64::total_cmp);
        grid.dedup();
        let mut best = (f64::NEG_INFINITY, [0.0, self.deepest]);
        for (i, &a) in grid.iter().enumerate() {
            for &b in &grid[i + 1..] {
                let (v, _) = self.best_p(a, b);
                if v > best.0 {
                    best = (v, [a, b]);
                }
            }
        }
        let (v, [a, b]) = self.climb2(best.1, |[a, b]| self.best_p(a, b).0);
        let (_, p) = self.best_p(a, b);
        (a, b, p, v)
    }

    /// Compass search for the maximum of `f` along one axis within `range`, from `start`.
    fn climb1(&self, start: f64, range: (f64, f64), f: impl Fn(f64) -> f64) -> (f64, f64) {
        let inside = |[x]: [f64; 1]| {
            if x >= range.0 && x <= range.1 {
                f(x)
            } else {
                f64::NEG_INFINITY
            }
        };
        let start = start.clamp(range.0, range.1.max(range.0));
        let (v, [x]) = climb([start], inside, self.deepest / 256.0, self.deepest * 1e-4);
        (v, x)
    }

    /// Compass search for the maximum of `f` over (Kmin, Kmax), from `start`.
    fn climb2(&self, start: [f64; 2], f: impl Fn([f64; 2]) -> f64) -> (f64, [f64; 2]) {
        climb(start, f, self.deepest / 16.0, self.deepest * 1e-5)
    }

    /// The interval of one parameter around its most likely value `best`: where its profile (`profile(x,
    /// warm)` gives the best log-likelihood at `x` and where the other parameters were then, to start the next
    /// search from) stays at or above `threshold`, within `domain` (an upper end of `None` is the search's
    /// limit, beyond which the data cannot tell: the interval is open there).
    fn interval<const N: usize>(
        &self,
        best: f64,
        warm: [f64; N],
        threshold: f64,
        domain: (f64, Option<f64>),
        tol: f64,
        profile: impl Fn(f64, [f64; N]) -> (f64, [f64; N]),
    ) -> Interval {
        let upper_limit = domain.1.unwrap_or(self.top);
        let low = edge(best, warm, threshold, domain.0, tol, &profile);
        let high = edge(best, warm, threshold, upper_limit, tol, &profile);
        Interval {
            low: low.unwrap_or(domain.0),
            // Reaching the search's own limit (not a bound of the parameter itself) leaves the interval open.
            high: match (high, domain.1) {
                (None, None) => None,
                (h, _) => Some(h.unwrap_or(upper_limit)),
            },
        }
    }
}

/// Where the profile falls below `threshold` between `best` and `limit`: doubling steps out from `best`, then
/// halving the last step. `None` when it is still above at `limit`.
fn edge<const N: usize>(
    best: f64,
    warm: [f64; N],
    threshold: f64,
    limit: f64,
    tol: f64,
    profile: &impl Fn(f64, [f64; N]) -> (f64, [f64; N]),
) -> Option<f64> {
    let dir = if limit >= best { 1.0 } else { -1.0 };
    let (mut inside, mut warm) = (best, warm);
    let mut step = tol.max((limit - best).abs() / 1024.0);
    let outside = loop {
        let x = if (limit - inside).abs() <= step {
            limit
        } else {
            inside + dir * step
        };
        let (v, w) = profile(x, warm);
        if v < threshold {
            break x;
        }
        if x == limit {
            return None;
        }
        (inside, warm) = (x, w);
        step *= 2.0;
    };
    let mut outside = outside;
    while (outside - inside).abs() > tol {
        let mid = (inside + outside) / 2.0;
        let (v, w) = profile(mid, warm);
        if v >= threshold {
            (inside, warm) = (mid, w);
        } else {
            outside = mid;
        }
    }
    Some((inside + outside) / 2.0)
}

/// Compass search: from `start`, move to the best improving neighbour at distance `step` along each axis and
/// each diagonal of two axes (a ridge where Kmin and Kmax move together needs the diagonals), halving the step
/// when none improves, until it is below `tol`.
fn climb<const N: usize>(
    start: [f64; N],
    f: impl Fn([f64; N]) -> f64,
    step: f64,
    tol: f64,
) -> (f64, [f64; N]) {
    let mut dirs: Vec<[f64; N]> = Vec::new();
    for i in 0..N {
        for s in [1.0, -1.0] {
            let mut d = [0.0; N];
            d[i] = s;
            dirs.push(d);
            for j in i + 1..N {
                for t in [1.0, -1.0] {
                    let mut d2 = d;
                    d2[j] = t;
                    dirs.push(d2);
                }
            }
        }
    }
    let (mut x, mut v) = (start, f(start));
    let mut step = step.max(tol);
    while step >= tol {
        let mut moved = false;
        for d in &dirs {
            let mut y = x;
            for k in 0..N {
                y[k] += d[k] * step;
            }
            let w = f(y);
            if w > v {
                (x, v, moved) = (y, w, true);
            }
        }
        if !moved {
            step /= 2.0;
        }
    }
    (v, x)
}

/// The packet-weighted root mean square difference between each group's marked fraction and what the curve
/// expects of the group's slices; groups are `bin_bytes` wide, as the bins the output shows.
fn rmse(slices: &[Slice], curve: &Curve, bin_bytes: f64) -> f64 {
    let mut groups: Vec<(u64, f64, f64)> = Vec::new();
    let mut total = 0.0;
    for s in slices {
        let g = (s.depth_bytes / bin_bytes.max(1.0)) as u64;
        if groups.last().is_none_or(|l| l.0 != g) {
            groups.push((g, 0.0, 0.0));
        }
        if let Some(l) = groups.last_mut() {
            l.1 += s.ect_in as f64;
            l.2 += s.marked as f64 - s.ect_in as f64 * curve.probability(s.depth_bytes);
        }
        total += s.ect_in as f64;
    }
    let sse: f64 = groups.iter().map(|&(_, n, d)| d * d / n).sum();
    (sse / total).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use samples::corpus::Rng;

    /// A uniform number in [0, 1).
    fn uniform(rng: &mut Rng) -> f64 {
        (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `packets` ECN-capable packets at depths spread evenly up to `deepest`, each marked with the curve's
    /// probability, measured as hops measures them: the queueing delay (at 25 Gb/s, 3.125 bytes per ns) in
    /// the delay histogram, whose buckets become the slices.
    fn draws(truth: Curve, packets: u64, deepest: f64, seed: u64) -> Vec<Slice> {
        let bytes_per_ns = 3.125;
        let mut rng = Rng::new(seed);
        let mut ecn: Vec<(u64, u64)> = Vec::new();
        for _ in 0..packets {
            let depth = uniform(&mut rng) * deepest;
            let marked = uniform(&mut rng) < truth.probability(depth);
            let b = hist::bucket((depth / bytes_per_ns).round() as u64);
            if b >= ecn.len() {
                ecn.resize(b + 1, (0, 0));
            }
            ecn[b].0 += 1;
            ecn[b].1 += u64::from(marked);
        }
        slices(&ecn, bytes_per_ns, f64::INFINITY)
    }

    const ISSUE: Curve = Curve {
        kmin_bytes: 60_000.0,
        kmax_bytes: 240_000.0,
        pmax: 0.25,
    };

    fn contains(i: &Interval, v: f64) -> bool {
        i.low <= v && i.high.is_none_or(|h| v <= h)
    }

    /// The issue's queue: Kmin 60 KB, Kmax 240 KB, Pmax 0.25, 189 k packets swept past Kmax. Least squares on
    /// the fractions of 4 KiB bins put Kmin at 70 KB and Pmax at 0.28 on these draws.
    #[test]
    fn recovers_the_curve_from_per_packet_marks() {
        let f = fit(&draws(ISSUE, 189_000, 320_000.0, 28), 4096.0).unwrap();
        let (kmin, kmax, pmax) = (
            f.kmin_bytes().unwrap(),
            f.kmax_bytes().unwrap(),
            f.pmax().unwrap(),
        );
        assert!((kmin / 60_000.0 - 1.0).abs() < 0.05, "{f:?}");
        assert!((kmax / 240_000.0 - 1.0).abs() < 0.05, "{f:?}");
        assert!((pmax - 0.25).abs() < 0.02, "{f:?}");
        assert!(contains(&f.kmin, 60_000.0), "{f:?}");
        assert!(contains(&f.kmax, 240_000.0), "{f:?}");
        assert!(contains(&f.pmax, 0.25), "{f:?}");
        // Each interval holds its estimate and says something: a few percent wide, not the whole range.
        for (i, v, width) in [
            (f.kmin, kmin, 12_000.0),
            (f.kmax, kmax, 12_000.0),
            (f.pmax, pmax, 0.04),
        ] {
            let h = i.high.expect("bounded");
            assert!(i.low <= v && v <= h && h - i.low < width, "{f:?}");
        }
        assert!(f.fit_rmse < 0.05, "{f:?}");
    }

    /// Many smaller captures of the same queue: the fit leans neither way (the estimates' mean is within a
    /// fraction of their spread of the truth), and the 95 % intervals hold the truth about 95 % of the time.
    #[test]
    fn estimates_do_not_lean_and_intervals_cover() {
        let runs = 40;
        let (mut sum, mut covered) = ([0.0; 3], [0; 3]);
        for seed in 0..runs {
            let f = fit(&draws(ISSUE, 20_000, 320_000.0, 100 + seed), 4096.0).unwrap();
            let got = [f.curve.kmin_bytes, f.curve.kmax_bytes, f.curve.pmax];
            let truth = [ISSUE.kmin_bytes, ISSUE.kmax_bytes, ISSUE.pmax];
            for (k, i) in [f.kmin, f.kmax, f.pmax].iter().enumerate() {
                sum[k] += got[k] / truth[k] - 1.0;
                covered[k] += u32::from(contains(i, truth[k]));
            }
        }
        for k in 0..3 {
            let mean = sum[k] / runs as f64;
            assert!(
                mean.abs() < 0.02,
                "parameter {k}: mean relative error {mean}"
            );
            // 95 % coverage over 40 runs: fewer than 34 would happen by chance less than once in a hundred.
            assert!(
                covered[k] >= 34,
                "parameter {k}: truth inside {} of {runs}",
                covered[k]
            );
        }
    }

    /// A queue that never went past 200 KB cannot show a Kmax of 240 KB: Kmax and Pmax are open above, not
    /// numbers, while Kmin is still pinned.
    #[test]
    fn a_kmax_never_reached_is_open() {
        let f = fit(&draws(ISSUE, 189_000, 200_000.0, 29), 4096.0).unwrap();
        assert_eq!(f.kmax.high, None, "{f:?}");
        assert_eq!(f.pmax.high, None, "{f:?}");
        assert_eq!((f.kmax_bytes(), f.pmax()), (None, None));
        assert!(f.kmax.low <= 200_000.0 * 1.01, "{f:?}");
        assert!(
            contains(&f.kmax, 240_000.0) && contains(&f.pmax, 0.25),
            "{f:?}"
        );
        let kmin = f.kmin_bytes().expect("Kmin is still bounded");
        assert!((kmin / 60_000.0 - 1.0).abs() < 0.05, "{f:?}");
        assert!(contains(&f.kmin, 60_000.0), "{f:?}");
        assert_eq!(
            f.kmax.describe(f.curve.kmax_bytes, 1e3, 0).chars().next(),
            Some('≥')
        );
    }

    /// One unmarked packet far above Kmax (a depth misjudged) moves nothing: the curve would have to ignore
    /// thousands of marks to explain it.
    #[test]
    fn a_stray_packet_does_not_drag_kmax() {
        let mut s = draws(ISSUE, 189_000, 320_000.0, 28);
        let clean = fit(&s, 4096.0).unwrap();
        let stray = s.iter().position(|x| x.depth_bytes > 300_000.0).unwrap();
        s[stray].ect_in += 1;
        let f = fit(&s, 4096.0).unwrap();
        assert!(
            (f.curve.kmax_bytes - clean.curve.kmax_bytes).abs() < 500.0,
            "{f:?} {clean:?}"
        );
    }

    #[test]
    fn nothing_marked_fits_nothing() {
        let s = [Slice {
            depth_bytes: 100.0,
            ect_in: 10,
            marked: 0,
        }];
        assert_eq!(fit(&s, 1024.0), None);
        assert_eq!(fit(&[], 1024.0), None);
    }
}
