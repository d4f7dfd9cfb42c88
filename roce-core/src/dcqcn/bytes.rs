//! The reaction point's byte counter under the backlogged-sender assumption: bytes accrue at Rc, and a byte
//! event falls due when they reach the threshold B.
//!
//! The counter is integrated exactly between the instants at which Rc changes, and a byte event at a whole
//! nanosecond keeps what accrued beyond B since the exact crossing (the overshoot of less than a nanosecond at
//! Rc) for the next event. So every byte event lies at the first whole nanosecond at which the bytes counted
//! since the last reset reach the next multiple of B: the rounding to nanoseconds never accumulates. (Restarting
//! from zero at the rounded instant instead would lose up to a nanosecond of bytes per event: 51 ns after 53
//! events at 100 Gb/s, enough to push an increase past a cut.)

/// Bytes counted toward the next byte event, up to an instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct ByteCounter {
    /// Bytes counted up to `at_ns`, less B for every byte event since the last reset.
    bytes: f64,
    at_ns: u64,
}

impl ByteCounter {
    /// A counter that starts from zero at `now`.
    pub(super) fn reset(now: u64) -> ByteCounter {
        ByteCounter {
            bytes: 0.0,
            at_ns: now,
        }
    }

    /// Adds what a backlogged sender sent at `rc_mbps` from the last instant to `now` (Mb/s is bits per µs, so
    /// bytes per ns are Rc/8000).
    pub(super) fn integrate(&mut self, now: u64, rc_mbps: f64) {
        if now > self.at_ns {
            self.bytes += rc_mbps * (now - self.at_ns) as f64 / 8_000.0;
            self.at_ns = now;
        }
    }

    /// A byte event at `now`: B leaves the count, the overshoot stays.
    pub(super) fn take(&mut self, now: u64, rc_mbps: f64, threshold: f64) {
        self.integrate(now, rc_mbps);
        self.bytes = (self.bytes - threshold).max(0.0);
    }

    /// The first whole ns at which the count reaches `threshold` at a constant `rc_mbps`, or `None` when it
    /// never will (counter off, no rate, or beyond the end of time). Called right after a change of the count
    /// or of Rc, so that the count is up to date.
    pub(super) fn due(&self, rc_mbps: f64, threshold: f64) -> Option<u64> {
        if threshold <= 0.0 || !(rc_mbps > 0.0 && rc_mbps.is_finite()) {
            return None;
        }
        let need = threshold - self.bytes;
        if need <= 0.0 {
            return Some(self.at_ns);
        }
        let dt = (need * 8_000.0 / rc_mbps).ceil();
        (dt < u64::MAX as f64)
            .then(|| self.at_ns.checked_add(dt as u64))
            .flatten()
    }
}
