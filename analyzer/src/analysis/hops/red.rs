//! Fitting a RED/WRED marking curve to what a queue marked: P(mark) is 0 below Kmin, rises linearly to Pmax at
//! Kmax and is 1 above. Packets are binned by the queue depth they found; each bin's marked fraction is fitted
//! by least squares weighted by the bin's packets. Kmin and Kmax come from a grid, Pmax in closed form for each
//! pair: the error is then quadratic in Pmax alone, so no local minimum can trap the fit. Running sums over the
//! bins make each grid pair cost the same whatever the number of bins.

use serde::Serialize;

/// One depth bin: its packets that arrived ECN-capable, how many of them left marked, and their mean depth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bin {
    /// The bin's lower edge.
    pub depth_bytes: u64,
    /// Packets in the bin that arrived ECN-capable: only they could be marked.
    pub ect_in: u64,
    /// Of those, the ones that left CE-marked.
    pub marked: u64,
    /// Mean depth of its packets (the fit's abscissa: a bin's packets are not spread evenly over it).
    #[serde(skip)]
    pub mean_depth: f64,
}

/// The fitted curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RedFit {
    /// Depth below which the curve marks nothing.
    pub kmin_bytes: f64,
    /// Depth at and above which it marks every packet.
    pub kmax_bytes: f64,
    /// The marking probability just below `kmax`.
    pub pmax: f64,
    /// Root of the count-weighted mean squared difference between each bin's marked fraction and the curve.
    pub fit_rmse: f64,
}

/// The marking probability of the curve at `depth`.
pub fn probability(kmin: f64, kmax: f64, pmax: f64, depth: f64) -> f64 {
    if depth < kmin {
        0.0
    } else if depth >= kmax {
        1.0
    } else {
        pmax * (depth - kmin) / (kmax - kmin).max(1.0)
    }
}

/// Grid points per axis at most: a deep queue widens the step rather than the work.
const MAX_GRID: usize = 512;

/// Running sums over the bins in depth order, so that any range of bins sums in O(1).
struct Prefix {
    n: Vec<f64>,
    nx: Vec<f64>,
    nxx: Vec<f64>,
    m: Vec<f64>,
    mx: Vec<f64>,
    /// Σ n f² = Σ m² / n.
    mff: Vec<f64>,
}

impl Prefix {
    fn of(bins: &[&Bin]) -> Prefix {
        let mut p = Prefix {
            n: vec![0.0],
            nx: vec![0.0],
            nxx: vec![0.0],
            m: vec![0.0],
            mx: vec![0.0],
            mff: vec![0.0],
        };
        for b in bins {
            let (n, m, x) = (b.ect_in as f64, b.marked as f64, b.mean_depth);
            let push = |v: &mut Vec<f64>, d: f64| v.push(v.last().copied().unwrap_or(0.0) + d);
            push(&mut p.n, n);
            push(&mut p.nx, n * x);
            push(&mut p.nxx, n * x * x);
            push(&mut p.m, m);
            push(&mut p.mx, m * x);
            push(&mut p.mff, m * m / n);
        }
        p
    }

    fn sum(v: &[f64], a: usize, b: usize) -> f64 {
        v[b] - v[a]
    }
}

/// Fits the curve, on a grid of `step` bytes for Kmin and Kmax (widened to keep the grid under
/// [`MAX_GRID`] points); `None` when no bin has a marked packet (a queue that never marked reveals nothing of
/// its curve) or no bin has packets.
pub fn fit(bins: &[Bin], step: f64) -> Option<RedFit> {
    let mut used: Vec<&Bin> = bins.iter().filter(|b| b.ect_in > 0).collect();
    used.sort_by(|a, b| a.mean_depth.total_cmp(&b.mean_depth));
    let total: f64 = used.iter().map(|b| b.ect_in as f64).sum();
    if total == 0.0 || used.iter().all(|b| b.marked == 0) || step <= 0.0 {
        return None;
    }
    let top = used.iter().map(|b| b.mean_depth).fold(0.0, f64::max) + 2.0 * step;
    let step = step.max(top / MAX_GRID as f64);
    let grid: Vec<f64> = (0..)
        .map(|i| i as f64 * step)
        .take_while(|&k| k <= top)
        .collect();
    let p = Prefix::of(&used);
    let nb = used.len();
    let first_at = |k: f64| used.partition_point(|b| b.mean_depth < k);
    let mut best: Option<(f64, RedFit)> = None;
    for (gi, &kmin) in grid.iter().enumerate() {
        let i0 = first_at(kmin);
        // Below Kmin the curve says 0: the error is each bin's fraction squared.
        let below = Prefix::sum(&p.mff, 0, i0);
        for &kmax in &grid[gi + 1..] {
            let i1 = first_at(kmax).max(i0);
            let span = kmax - kmin;
            // Above Kmax it says 1: Σ n (f − 1)² = Σ n f² − 2 Σ m + Σ n.
            let above = Prefix::sum(&p.mff, i1, nb) - 2.0 * Prefix::sum(&p.m, i1, nb)
                + Prefix::sum(&p.n, i1, nb);
            // Between, with u = (x − Kmin) / span: Σ n u f and Σ n u².
            let suf = (Prefix::sum(&p.mx, i0, i1) - kmin * Prefix::sum(&p.m, i0, i1)) / span;
            let suu = (Prefix::sum(&p.nxx, i0, i1) - 2.0 * kmin * Prefix::sum(&p.nx, i0, i1)
                + kmin * kmin * Prefix::sum(&p.n, i0, i1))
                / (span * span);
            let pmax = if suu > 0.0 {
                (suf / suu).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let between = Prefix::sum(&p.mff, i0, i1) - 2.0 * pmax * suf + pmax * pmax * suu;
            let sse = (below + above + between).max(0.0);
            if best.as_ref().is_none_or(|(e, _)| sse < *e - 1e-9) {
                best = Some((
                    sse,
                    RedFit {
                        kmin_bytes: kmin,
                        kmax_bytes: kmax,
                        pmax,
                        fit_rmse: (sse / total).sqrt(),
                    },
                ));
            }
        }
    }
    best.map(|(_, f)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bins drawn exactly from a known curve give it back, to the grid's step.
    #[test]
    fn recovers_an_exact_curve() {
        let (kmin, kmax, pmax) = (40_000.0, 160_000.0, 0.5);
        let bins: Vec<Bin> = (0..50)
            .map(|i| {
                let d = i as f64 * 4096.0 + 2048.0;
                let p = probability(kmin, kmax, pmax, d);
                Bin {
                    depth_bytes: i * 4096,
                    ect_in: 1000,
                    marked: (p * 1000.0).round() as u64,
                    mean_depth: d,
                }
            })
            .collect();
        let f = fit(&bins, 2048.0).unwrap();
        assert!((f.kmin_bytes - kmin).abs() <= 4096.0, "{f:?}");
        assert!((f.kmax_bytes - kmax).abs() <= 4096.0, "{f:?}");
        assert!((f.pmax - pmax).abs() < 0.03, "{f:?}");
        assert!(f.fit_rmse < 0.01, "{f:?}");
    }

    #[test]
    fn nothing_marked_fits_nothing() {
        let bins = [Bin {
            depth_bytes: 0,
            ect_in: 10,
            marked: 0,
            mean_depth: 100.0,
        }];
        assert_eq!(fit(&bins, 1024.0), None);
        assert_eq!(fit(&[], 1024.0), None);
    }
}
