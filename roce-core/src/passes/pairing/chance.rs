//! How likely a candidate that is not the flow would score its hits by chance alone.
//!
//! A candidate's hits count only when a flow unrelated to the stream would rarely score them: a flow that
//! sends all the time has been "active before" every CNP, whatever the CNPs answer. Under that null the hits
//! of a candidate are binomial: each of the stream's n CNPs lands in the candidate's covered time (the
//! windows after its packets, or after its CE marks) with probability p, the share of the stream's time those
//! windows cover. [`binomial_tail`] is then the chance of its hits or more.

/// The chance of at least `k` successes in `n` trials of probability `p`, P(K ≥ k) for K ~ Binomial(n, p).
///
/// Summed term by term from `k` away from the distribution's middle (upwards when `k` lies above the mean,
/// else as the complement of the terms below `k`), which converges in a few standard deviations' worth of
/// terms; each term comes from the one before, the first from the log-gamma function.
pub fn binomial_tail(n: u64, k: u64, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (nf, q) = (n as f64, 1.0 - p);
    if k as f64 > nf * p {
        let mut term = ln_pmf(n, k, p).exp();
        let mut sum = term;
        let mut i = k;
        while i < n && term > sum * 1e-17 {
            term *= (nf - i as f64) / (i as f64 + 1.0) * p / q;
            sum += term;
            i += 1;
        }
        sum.min(1.0)
    } else {
        let mut i = k - 1;
        let mut term = ln_pmf(n, i, p).exp();
        let mut below = term;
        while i > 0 && term > below * 1e-17 {
            term *= i as f64 / (nf - i as f64 + 1.0) * q / p;
            below += term;
            i -= 1;
        }
        (1.0 - below).clamp(0.0, 1.0)
    }
}

/// ln P(K = k) for K ~ Binomial(n, p), 0 < p < 1.
fn ln_pmf(n: u64, k: u64, p: f64) -> f64 {
    let (n, k) = (n as f64, k as f64);
    ln_gamma(n + 1.0) - ln_gamma(k + 1.0) - ln_gamma(n - k + 1.0)
        + k * p.ln()
        + (n - k) * (-p).ln_1p()
}

/// ln Γ(x) for x ≥ 1, by Lanczos' series (g = 7, nine terms), good to about 15 digits: enough for
/// probabilities compared with 10⁻⁴.
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The share of `span` ns that windows of `window` ns after each of a flow's events cover, from the covered
/// time accumulated at the span's two ends (see [`covered`]); 1 without a span to measure (a single CNP says
/// nothing about how often a foreign flow would be covered).
pub fn null_rate(covered_from: u64, covered_to: u64, span: u64) -> f64 {
    if span == 0 {
        return 1.0;
    }
    (covered_to.saturating_sub(covered_from) as f64 / span as f64).clamp(0.0, 1.0)
}

/// Time covered up to `t` by windows of `window` ns after events, given `acc`, the time covered up to the last
/// event at `last` (windows overlap: each event adds at most the gap since the one before).
pub fn covered(acc: u64, last: Option<u64>, t: u64, window: u64) -> u64 {
    acc + last.map_or(0, |l| t.saturating_sub(l).min(window))
}

#[cfg(test)]
mod tests {
    use super::{binomial_tail, covered, ln_gamma};
    use proptest::prelude::*;

    /// The tail summed from the definition, with exact binomial coefficients (small n only).
    fn tail_by_definition(n: u64, k: u64, p: f64) -> f64 {
        let mut c = 1.0f64;
        let mut sum = 0.0;
        for i in 0..=n {
            if i > 0 {
                c = c * (n - i + 1) as f64 / i as f64;
            }
            if i >= k {
                sum += c * p.powi(i as i32) * (1.0 - p).powi((n - i) as i32);
            }
        }
        sum
    }

    #[test]
    fn log_gamma_of_integers_is_the_log_factorial() {
        let mut f = 1.0f64;
        for n in 1..30u32 {
            f *= f64::from(n);
            let got = ln_gamma(f64::from(n) + 1.0);
            assert!((got - f.ln()).abs() < 1e-10 * f.ln().max(1.0), "{n}: {got}");
        }
    }

    #[test]
    fn the_examples_of_the_pairing_page() {
        // One CNP, one hit, a candidate covering 2.5 % of the time: 0.025; eight of eight: 0.025^8.
        assert!((binomial_tail(1, 1, 0.025) - 0.025).abs() < 1e-15);
        let eight = binomial_tail(8, 8, 0.025);
        assert!((eight / 0.025f64.powi(8) - 1.0).abs() < 1e-9, "{eight}");
        assert_eq!(binomial_tail(5, 0, 0.3), 1.0);
        assert_eq!(binomial_tail(5, 6, 0.3), 0.0);
        assert_eq!(binomial_tail(5, 3, 1.0), 1.0);
        assert_eq!(binomial_tail(5, 3, 0.0), 0.0);
    }

    #[test]
    fn a_large_tail_far_out_is_tiny_but_not_zero_and_near_the_mean_about_a_half() {
        let far = binomial_tail(100_000, 2_000, 0.01);
        assert!(far > 0.0 && far < 1e-100, "{far}");
        let middle = binomial_tail(1_000_000, 500_000, 0.5);
        assert!((middle - 0.5).abs() < 0.001, "{middle}");
    }

    #[test]
    fn coverage_counts_overlapping_windows_once() {
        // Events at 0, 10 and 100 with 20 ns windows: [0, 10) + [10, 30) covered by 100, then 7 of the last.
        let mut acc = 0;
        let mut last = None;
        for t in [0u64, 10, 100] {
            acc = covered(acc, last, t, 20);
            last = Some(t);
        }
        assert_eq!(acc, 30);
        assert_eq!(covered(acc, last, 107, 20), 37);
        assert_eq!(covered(acc, last, 500, 20), 50);
    }

    proptest! {
        #[test]
        fn the_tail_is_the_sum_of_its_terms(n in 1u64..60, k in 0u64..62, p in 0.001f64..0.999) {
            let want = tail_by_definition(n, k, p);
            let got = binomial_tail(n, k, p);
            prop_assert!((got - want).abs() <= 1e-9 * want.max(1e-300) + 1e-12, "{} vs {}", got, want);
        }
    }
}
