//! How much a counter moved over its samples, when it may wrap or be reset in between.
//!
//! The last sample less the first is right only for a counter that never went backwards. A 32-bit hardware
//! counter (irdma's CNP and discard counters are 32-bit in the hardware) wraps; a driver reload, a firmware
//! reset or `ethtool --reset` zeroes one. Each step between two samples is therefore read on its own: forward,
//! it moved by the difference; backwards from the top half of the 32-bit range, it wrapped; backwards
//! otherwise, it restarted from zero and moved by at least its new value, so the total is a lower bound and
//! says so.

use serde::Serialize;

/// A step backwards from at least this value, below 2^32, is taken for a 32-bit counter wrapping.
const WRAP_FROM: u64 = 1 << 31;
/// The range of a 32-bit counter.
const WRAP_32: u64 = 1 << 32;

/// One counter's (or a sum of counters') movement over the samples that hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Movement {
    /// The value in the first sample.
    pub first: u64,
    /// The value in the last sample.
    pub last: u64,
    /// How much it counted between the first and the last sample, wraps included.
    pub delta: u64,
    /// Samples that held it.
    pub samples: u64,
    /// When the first of them was taken (the packets' clock).
    pub first_ns: u64,
    /// When the last was.
    pub last_ns: u64,
    /// Steps that went backwards from the top of the 32-bit range: counted as wraps.
    pub wraps: u32,
    /// Steps that went backwards otherwise: the counter was reset, and `delta` is a lower bound.
    pub resets: u32,
}

impl Movement {
    /// Whether `delta` is only a lower bound (a reset lost what was counted before it was read).
    pub fn at_least(&self) -> bool {
        self.resets > 0
    }
}

/// The movement of a counter sampled at `(time, value)` points, in any order; `None` without samples.
pub fn movement(points: &[(u64, u64)]) -> Option<Movement> {
    let mut sorted = points.to_vec();
    // Stable: two samples of one instant (a rotated file's last and the next file's first) keep file order.
    sorted.sort_by_key(|p| p.0);
    let (&(first_ns, first), rest) = sorted.split_first()?;
    let mut m = Movement {
        first,
        last: first,
        delta: 0,
        samples: 1,
        first_ns,
        last_ns: first_ns,
        wraps: 0,
        resets: 0,
    };
    for &(ts, value) in rest {
        let prev = m.last;
        let step = if value >= prev {
            value - prev
        } else if (WRAP_FROM..WRAP_32).contains(&prev) {
            m.wraps += 1;
            WRAP_32 - prev + value
        } else {
            m.resets += 1;
            value
        };
        m.delta = m.delta.saturating_add(step);
        m.last = value;
        m.last_ns = ts;
        m.samples += 1;
    }
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_wrapped_and_reset_counters() {
        let m = movement(&[(30, 160), (10, 100), (20, 130)]).unwrap();
        assert_eq!((m.first, m.last, m.delta, m.samples), (100, 160, 60, 3));
        assert_eq!((m.first_ns, m.last_ns, m.at_least()), (10, 30, false));
        // A 32-bit counter passing 2^32 between samples: 96 before the wrap, 4 after.
        let w = movement(&[(1, u64::from(u32::MAX) - 95), (2, 4), (3, 10)]).unwrap();
        assert_eq!((w.delta, w.wraps, w.resets), (96 + 4 + 6, 1, 0));
        // A reset: 50 counted before it, then at least the 7 read after it.
        let r = movement(&[(1, 1_000), (2, 1_050), (3, 7)]).unwrap();
        assert_eq!((r.delta, r.resets, r.at_least()), (57, 1, true));
        assert_eq!(movement(&[]), None);
        let one = movement(&[(5, 9)]).unwrap();
        assert_eq!((one.delta, one.samples), (0, 1));
    }
}
