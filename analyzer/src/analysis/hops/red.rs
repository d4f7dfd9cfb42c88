//! Fitting a RED/WRED marking curve to what a queue marked: P(mark) is 0 below Kmin, rises linearly to Pmax at
//! Kmax and is 1 above. Packets are binned by the queue depth they found; each bin's marked fraction is fitted
//! by least squares weighted by the bin's packets. Kmin and Kmax come from a grid (half a bin apart), Pmax in
//! closed form for each pair: the error is then quadratic in Pmax alone, so no local minimum can trap the fit.

use serde::Serialize;

/// One depth bin: its packets that arrived ECN-capable, how many of them left marked, and their mean depth.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Bin {
    /// The bin's lower edge.
    pub depth_bytes: u64,
    pub ect_in: u64,
    pub marked: u64,
    /// Mean depth of its packets (the fit's abscissa: a bin's packets are not spread evenly over it).
    #[serde(skip)]
    pub mean_depth: f64,
}

/// The fitted curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RedFit {
    pub kmin_bytes: f64,
    pub kmax_bytes: f64,
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

/// Fits the curve, on a grid of `step` bytes for Kmin and Kmax; `None` when no bin has a marked packet (a queue
/// that never marked reveals nothing of its curve) or no bin has packets.
pub fn fit(bins: &[Bin], step: f64) -> Option<RedFit> {
    let used: Vec<&Bin> = bins.iter().filter(|b| b.ect_in > 0).collect();
    let total: f64 = used.iter().map(|b| b.ect_in as f64).sum();
    if total == 0.0 || used.iter().all(|b| b.marked == 0) || step <= 0.0 {
        return None;
    }
    let top = used.iter().map(|b| b.mean_depth).fold(0.0, f64::max) + 2.0 * step;
    let grid: Vec<f64> = (0..)
        .map(|i| i as f64 * step)
        .take_while(|&k| k <= top)
        .collect();
    let mut best: Option<(f64, RedFit)> = None;
    for (i, &kmin) in grid.iter().enumerate() {
        for &kmax in &grid[i + 1..] {
            let span = kmax - kmin;
            let (mut suf, mut suu, mut sse_fixed) = (0.0, 0.0, 0.0);
            for b in &used {
                let n = b.ect_in as f64;
                let f = b.marked as f64 / n;
                if b.mean_depth < kmin {
                    sse_fixed += n * f * f;
                } else if b.mean_depth >= kmax {
                    sse_fixed += n * (f - 1.0) * (f - 1.0);
                } else {
                    let u = (b.mean_depth - kmin) / span;
                    suf += n * u * f;
                    suu += n * u * u;
                }
            }
            let pmax = if suu > 0.0 {
                (suf / suu).clamp(0.0, 1.0)
            } else {
                0.0
            };
            let mut sse = sse_fixed;
            for b in &used {
                if b.mean_depth >= kmin && b.mean_depth < kmax {
                    let n = b.ect_in as f64;
                    let d = b.marked as f64 / n - pmax * (b.mean_depth - kmin) / span;
                    sse += n * d * d;
                }
            }
            if best.as_ref().is_none_or(|(e, _)| sse < *e - 1e-12) {
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
