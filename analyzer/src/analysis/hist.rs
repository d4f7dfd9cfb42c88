//! A log-linear histogram of nanoseconds: exact below 128 ns, then 128 buckets per power of two (under 0.8 %
//! apart), so percentiles of queueing delay stay well inside the 5 % that matters while memory depends only on
//! the largest value, never on how many were counted.

use serde::Serialize;

/// Buckets per power of two, as a power of two.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
/// Values past this (about 18 minutes) share the last bucket.
const MAX_VALUE: u64 = 1 << 40;

/// The bucket a value falls in.
#[inline]
pub fn bucket(v: u64) -> usize {
    let v = v.min(MAX_VALUE);
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let shift = e - SUB_BITS;
    let m = v >> shift;
    ((shift as u64 + 1) * SUB + (m - SUB)) as usize
}

/// The middle of a bucket's range: what a percentile that lands in it reports.
pub fn value(idx: usize) -> f64 {
    let idx = idx as u64;
    if idx < SUB {
        return idx as f64;
    }
    let shift = idx / SUB - 1;
    let m = SUB + idx % SUB;
    let lo = (m << shift) as f64;
    lo + ((1u64 << shift) as f64 - 1.0) / 2.0
}

/// Counts per bucket, grown to the largest bucket used.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hist {
    counts: Vec<u64>,
    n: u64,
    max: u64,
}

/// Three percentiles and the maximum, as every hop and queue reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// The median: the typical case.
    pub p50: f64,
    /// The 99th percentile: the tail that hurts RDMA, short of a lone outlier.
    pub p99: f64,
    /// The largest value counted.
    pub max: f64,
}

impl Percentiles {
    /// The same percentiles in other units (delay to bytes at a drain rate).
    pub fn scaled(self, k: f64) -> Percentiles {
        Percentiles {
            p50: self.p50 * k,
            p99: self.p99 * k,
            max: self.max * k,
        }
    }
}

impl Hist {
    #[inline]
    pub fn add(&mut self, v: u64) {
        let b = bucket(v);
        if b >= self.counts.len() {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += 1;
        self.n += 1;
        self.max = self.max.max(v);
    }

    /// Adds another histogram's counts, as when two queues turn out to be one.
    pub fn merge(&mut self, o: &Hist) {
        if o.counts.len() > self.counts.len() {
            self.counts.resize(o.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.max = self.max.max(o.max);
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// The value below which a fraction `q` of the counts lie (the nearest-rank percentile).
    pub fn quantile(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return value(i).min(self.max as f64);
            }
        }
        self.max as f64
    }

    pub fn percentiles(&self) -> Percentiles {
        Percentiles {
            p50: self.quantile(0.5),
            p99: self.quantile(0.99),
            max: self.max as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut last = 0;
        for v in 0..100_000u64 {
            let b = bucket(v);
            assert!(b == last || b == last + 1, "{v}");
            last = b;
            let mid = value(b);
            assert!(
                (mid - v as f64).abs() <= (v as f64 * 0.008).max(0.0),
                "{v} {mid}"
            );
        }
    }

    #[test]
    fn quantiles_of_a_uniform_range() {
        let mut h = Hist::default();
        for v in 1..=10_000u64 {
            h.add(v * 10);
        }
        let p = h.percentiles();
        assert!((p.p50 / 50_000.0 - 1.0).abs() < 0.01, "{p:?}");
        assert!((p.p99 / 99_000.0 - 1.0).abs() < 0.01, "{p:?}");
        assert_eq!(p.max, 100_000.0);
    }
}
