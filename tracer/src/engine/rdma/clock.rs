//! From the NIC's clock to wall time.
//!
//! A completion carries the NIC's free-running counter (`ibv_wc_read_completion_ts`), not a time. The device
//! says how fast it counts (`hca_core_clock`, kHz) and how many bits it keeps (`completion_timestamp_mask`),
//! and `ibv_query_rt_values_ex` reads the counter now, which the engine pairs with the wall clock read at the
//! same moment: an [`Anchor`]. A completion's time is then the anchor's wall time plus the distance from the
//! anchor's count, taken modulo the mask so that a wrap of the counter between the two is no jump, and
//! signed, since a completion polled just after a new anchor may have been stamped before it.
//!
//! When the device will not stamp with the raw counter, the engine asks the provider for wall-clock
//! stamps instead, and failing that stamps in the host ([`Stamping`]).
//!
//! The engine takes a new anchor every second, so the NIC oscillator's drift against the host clock (tens
//! of ppm) never adds up to more than tens of microseconds; each re-anchoring can move later timestamps by
//! that much, and by the few microseconds the query itself takes.

/// How the NIC counts: its frequency and the width of its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicClock {
    /// Ticks per millisecond (`hca_core_clock`).
    pub khz: u64,
    /// The counter's valid bits, `2^n - 1`.
    pub mask: u64,
}

/// One reading of the NIC counter and of the wall clock, taken together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// The NIC's free-running counter.
    pub ticks: u64,
    /// ns since the epoch.
    pub wall_ns: u64,
}

/// Why the device's clock information cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    #[error("the device reports a core clock of 0 kHz")]
    /// A frequency of 0 would divide by zero.
    NoFrequency,
    #[error("the device's timestamp mask {0:#x} is not a run of low bits")]
    /// The wrap cannot be followed with this mask.
    BadMask(u64),
}

impl NicClock {
    /// The clock of a device whose counter runs at `khz` and wraps at `mask`, both as the device reports them.
    pub fn new(khz: u64, mask: u64) -> Result<NicClock, ClockError> {
        if khz == 0 {
            return Err(ClockError::NoFrequency);
        }
        if mask == 0 || (mask != u64::MAX && !(mask + 1).is_power_of_two()) {
            return Err(ClockError::BadMask(mask));
        }
        Ok(NicClock { khz, mask })
    }

    /// Ticks from `from` to `to` on a counter that wraps at the mask: the shorter way round, so negative
    /// when `to` was stamped before `from`.
    pub fn ticks_between(&self, from: u64, to: u64) -> i128 {
        let d = to.wrapping_sub(from) & self.mask;
        let half = self.mask / 2;
        if d > half {
            i128::from(d) - i128::from(self.mask) - 1
        } else {
            i128::from(d)
        }
    }

    /// The wall time (ns since the epoch) of a completion stamped `ticks`, from the latest anchor.
    pub fn wall_ns(&self, anchor: Anchor, ticks: u64) -> u64 {
        let ns = self.ticks_between(anchor.ticks, ticks) * 1_000_000 / i128::from(self.khz);
        let t = i128::from(anchor.wall_ns) + ns;
        u64::try_from(t.max(0)).unwrap_or(u64::MAX)
    }
}

/// Some NICs can run their clock in "real-time" mode (ConnectX-6 Dx and later with the firmware's
/// real-time clock enabled), where a timestamp is seconds in the upper 32 bits and nanoseconds in the lower
/// ones, already on the PTP time scale. Such a reading, taken now, decodes to within a minute of the wall
/// clock; a free-running counter almost never does.
pub fn looks_real_time(raw: u64, wall_ns: u64) -> bool {
    real_time_ns(raw).is_some_and(|t| t.abs_diff(wall_ns) < 60_000_000_000)
}

/// A real-time-format stamp as ns since the epoch; `None` when the low half is not a nanosecond count.
pub fn real_time_ns(raw: u64) -> Option<u64> {
    let (secs, ns) = (raw >> 32, raw & 0xffff_ffff);
    (ns < 1_000_000_000).then(|| secs * 1_000_000_000 + ns)
}

/// How the CQ is asked to stamp completions, in the order the engine tries them.
///
/// Asking for the raw counter is not only a property of the CQ: mlx5 then gives the raw QP's receive queue
/// free-running timestamps, which a NIC set to real-time timestamps refuses, and the refusal comes when the
/// QP is created, not the CQ. Wall-clock stamps are served in either mode. So a refusal of either object
/// while stamps are asked for moves on to the next way rather than ending the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stamping {
    /// The NIC's free-running counter (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`), turned into wall time with
    /// [`Anchor`]s.
    FreeRunning,
    /// Wall-clock time from the provider (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`): the time of the
    /// NIC's PTP hardware clock, which mlx5 reads straight off a NIC in real-time mode, or converts from
    /// the counter with the clock information the kernel keeps for it. It agrees with the host's clock as
    /// far as something (phc2sys, ptp4l on both) keeps the two together, where the anchors tie the raw
    /// counter to the host's clock itself.
    WallClock,
    /// No NIC stamps: the host's clock when a completion is polled.
    Host,
}

impl Stamping {
    /// The way to try when this one is refused; `None` after the host's, which asks nothing of the device.
    pub fn fallback(self) -> Option<Stamping> {
        match self {
            Stamping::FreeRunning => Some(Stamping::WallClock),
            Stamping::WallClock => Some(Stamping::Host),
            Stamping::Host => None,
        }
    }

    /// Whether a refusal of the raw QP with `errno` may be down to the CQ's stamps, so that a CQ asking
    /// for less is worth a try: EOPNOTSUPP is what mlx5 answers for a timestamp format the queue cannot
    /// have, EINVAL what a provider may answer for a CQ it cannot pair with the QP. Any other errno (EPERM,
    /// ENOMEM) would come back whatever the CQ asked for.
    pub fn qp_refusal_may_be_ours(self, errno: i32) -> bool {
        self != Stamping::Host && matches!(errno, libc::EOPNOTSUPP | libc::EINVAL)
    }

    /// The stamps this way asks for, for messages.
    pub fn asked(self) -> &'static str {
        match self {
            Stamping::FreeRunning => "free-running NIC timestamps",
            Stamping::WallClock => "wall-clock NIC timestamps",
            Stamping::Host => "no timestamps",
        }
    }
}

/// The wall time (ns since the epoch) of a stamp from `ibv_wc_read_completion_wallclock_ns`, read at
/// `now_ns`. On a NIC in real-time mode rdma-core's mlx5 provider hands the completion's stamp on as the
/// NIC wrote it, seconds in the upper 32 bits and nanoseconds in the lower ones (the kernel's mlx5 driver
/// decodes its own real-time stamps that way), not as a count of nanoseconds; a stamp that decodes so to
/// within a minute of now is taken in that format, and any other as nanoseconds.
pub fn provider_wall_ns(raw: u64, now_ns: u64) -> u64 {
    if looks_real_time(raw, now_ns) {
        real_time_ns(raw).unwrap_or(raw)
    } else {
        raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 156.25 MHz, the core clock of many ConnectX parts, with a 48-bit counter.
    fn cx() -> NicClock {
        NicClock::new(156_250, (1 << 48) - 1).unwrap()
    }

    #[test]
    fn ticks_become_nanoseconds_at_the_device_rate() {
        let c = cx();
        let a = Anchor {
            ticks: 1_000_000,
            wall_ns: 1_700_000_000_000_000_000,
        };
        assert_eq!(c.wall_ns(a, 1_000_000), a.wall_ns);
        // 156 250 ticks = 1 ms.
        assert_eq!(c.wall_ns(a, 1_000_000 + 156_250), a.wall_ns + 1_000_000);
        // One tick = 6.4 ns, truncated.
        assert_eq!(c.wall_ns(a, 1_000_001), a.wall_ns + 6);
        // Stamped 100 us before the anchor (polled after a re-anchoring).
        assert_eq!(c.wall_ns(a, 1_000_000 - 15_625), a.wall_ns - 100_000);
    }

    #[test]
    fn a_wrap_of_the_counter_is_no_jump() {
        let c = cx();
        let a = Anchor {
            ticks: c.mask - 100,
            wall_ns: 5_000_000_000,
        };
        // 200 ticks later the counter has wrapped to 99.
        assert_eq!(c.ticks_between(a.ticks, 99), 200);
        assert_eq!(c.wall_ns(a, 99), 5_000_000_000 + 200 * 64 / 10);
        // And the other way: anchor just after the wrap, completion just before it.
        let b = Anchor {
            ticks: 10,
            wall_ns: 5_000_000_000,
        };
        assert_eq!(c.ticks_between(b.ticks, c.mask - 9), -20);
        assert_eq!(c.wall_ns(b, c.mask - 9), 5_000_000_000 - 128);
    }

    #[test]
    fn a_full_64_bit_counter_works_too() {
        let c = NicClock::new(1_000_000, u64::MAX).unwrap();
        let a = Anchor {
            ticks: u64::MAX - 1,
            wall_ns: 1_000,
        };
        assert_eq!(c.wall_ns(a, 2), 1_004);
    }

    #[test]
    fn unusable_clock_information_is_refused() {
        assert_eq!(NicClock::new(0, 0xffff), Err(ClockError::NoFrequency));
        assert_eq!(NicClock::new(1, 0), Err(ClockError::BadMask(0)));
        assert_eq!(NicClock::new(1, 0x1234), Err(ClockError::BadMask(0x1234)));
        // Before the epoch clamps to 0 rather than wrapping to the far future.
        let c = NicClock::new(1_000_000, 0xffff).unwrap();
        assert_eq!(
            c.wall_ns(
                Anchor {
                    ticks: 100,
                    wall_ns: 5
                },
                50
            ),
            0
        );
    }

    #[test]
    fn real_time_stamps_are_recognised() {
        let wall = 1_764_000_000_123_456_789u64;
        let raw = ((wall / 1_000_000_000) << 32) | (wall % 1_000_000_000);
        assert!(looks_real_time(raw, wall + 2_000_000));
        assert_eq!(real_time_ns(raw), Some(wall));
        // A free-running counter a few hours after reset is not.
        assert!(!looks_real_time(156_250_000 * 3600 * 5, wall));
        assert_eq!(real_time_ns(0x0000_0001_ffff_ffff), None);
    }

    #[test]
    fn the_providers_wall_clock_stamps_read_in_either_format() {
        let wall = 1_764_000_000_123_456_789u64;
        let now = wall + 3_000_000;
        // Nanoseconds, as the provider converts a free-running counter.
        assert_eq!(provider_wall_ns(wall, now), wall);
        // Seconds:nanoseconds, as a real-time NIC stamps and mlx5 passes on.
        let raw = ((wall / 1_000_000_000) << 32) | (wall % 1_000_000_000);
        assert_eq!(provider_wall_ns(raw, now), wall);
        // Nanoseconds whose low half happens to be below 10^9 do not pass for the other format.
        let ns = 1_764_000_000_000_000_000u64 & !0xffff_ffff;
        assert_eq!(provider_wall_ns(ns, ns + 5), ns);
    }

    #[test]
    fn stamping_falls_back_from_the_raw_counter_to_the_wall_clock_to_the_host() {
        use Stamping::*;
        assert_eq!(FreeRunning.fallback(), Some(WallClock));
        assert_eq!(WallClock.fallback(), Some(Host));
        assert_eq!(Host.fallback(), None);
        for s in [FreeRunning, WallClock] {
            assert!(s.qp_refusal_may_be_ours(libc::EOPNOTSUPP));
            assert!(s.qp_refusal_may_be_ours(libc::ENOTSUP));
            assert!(s.qp_refusal_may_be_ours(libc::EINVAL));
            assert!(!s.qp_refusal_may_be_ours(libc::EPERM));
            assert!(!s.qp_refusal_may_be_ours(libc::ENOMEM));
        }
        // Without stamps a refusal is the QP's own.
        assert!(!Host.qp_refusal_may_be_ours(libc::EOPNOTSUPP));
    }
}
