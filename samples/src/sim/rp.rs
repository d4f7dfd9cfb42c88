//! The simulated NIC's DCQCN reaction point (ConnectX profile), written for the simulator alone.
//!
//! The analyzer replays a reaction-point model from a capture; if the simulator paced its senders with that same
//! model, the samples' truth would be the model's own output and could never show the model wrong. So this is a
//! second implementation, written from the DCQCN description alone (its rules as this module follows them are
//! in samples/README.md, "The reaction point"), and it differs from a replay in the one way a NIC does: its byte counter counts the bytes the
//! sender really put on the wire, where a replay can only assume a sender that always had data at its current
//! rate. An application-limited, window-limited or PFC-paused sender earns fewer byte-counter increases than
//! that assumption grants it, and the truth shows exactly which ones it earned.
//!
//! The same reaction point also runs in a second mode, [`ByteSource::Backlogged`], where the byte counter grows
//! at the current rate as a replay assumes. Fed with the same CNPs beside the real one, it shows in the truth
//! what that assumption makes of each flow: where the two part, the assumption bent.
//!
//! Times are integer picoseconds (the simulator's clock), so the alpha and decrease timers stay on their grid
//! exactly; rates are f64 Mb/s. Choices the description leaves open, made here and documented in
//! samples/README.md:
//! - the byte counter counts each data frame's wire bytes (frame, preamble, FCS and gap: what the pacer
//!   spends), retransmissions included, at the instant the frame starts; a byte event keeps the bytes beyond
//!   the threshold for the next one;
//! - the limiter is released (NVIDIA's `rpg_max_rate`: no longer rate limited once the rate is back at the
//!   maximum) when an increase brings Rc within half a Mb/s of the maximum, the knobs' unit, since halving the
//!   distance to Rt never reaches it exactly; release forgets every counter, and the next CNP is a first CNP.

use std::fmt;

use thiserror::Error;

const PS_PER_US: u64 = 1_000_000;
/// The release threshold: rates are configured in whole Mb/s, so within half of one is "at the maximum".
const RELEASE_MARGIN_MBPS: f64 = 0.5;

/// A knob value the reaction point cannot run with.
#[derive(Debug, Error)]
pub enum KnobError {
    /// The name is not one of [`RpKnobs::NAMES`].
    #[error("unknown knob `{0}` (known: {names})", names = RpKnobs::NAMES.join(", "))]
    Unknown(String),
    /// The value is outside what the knob means.
    #[error("`{name}` = {value}: {why}")]
    Range {
        /// The knob's sysfs name.
        name: String,
        /// The value refused.
        value: i64,
        /// The range the knob accepts.
        why: &'static str,
    },
}

/// The reaction point's knobs, by their ConnectX sysfs names (`/sys/class/net/IF/ecn/roce_rp/`), with the
/// ConnectX defaults. A scenario's `[dcqcn]` table sets them by those names, so a scenario reads like the
/// knob dump of a real host.
#[derive(Debug, Clone, PartialEq)]
pub struct RpKnobs {
    /// `dce_tcp_g`: alpha's gain G; alpha moves by g = (1024 − G)/1024 per update.
    pub dce_tcp_g: u32,
    /// `dce_tcp_rtt`, µs: the alpha update period.
    pub dce_tcp_rtt_us: u32,
    /// `initial_alpha_value`: alpha at a first CNP, in 1/1024.
    pub initial_alpha_value: u32,
    /// `rate_to_set_on_first_cnp`, Mb/s: 0 keeps the current rate.
    pub rate_to_set_on_first_cnp_mbps: u32,
    /// `rpg_gd`: a cut removes alpha·1024/2^gd of the rate (11: alpha/2).
    pub rpg_gd: u32,
    /// `rpg_min_dec_fac`, %: one cut keeps at least this share of the rate.
    pub rpg_min_dec_fac: u32,
    /// `rpg_min_rate`, Mb/s: the rate's floor.
    pub rpg_min_rate_mbps: u32,
    /// `rate_reduce_monitor_period`, µs: the decrease check period.
    pub rate_reduce_monitor_period_us: u32,
    /// `clamp_tgt_rate`: every cut also sets the target rate to the current one.
    pub clamp_tgt_rate: bool,
    /// `clamp_tgt_rate_after_time_inc`: a cut sets the target rate when a timer increase happened since the last.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// `rpg_time_reset`, µs: the increase timer's period.
    pub rpg_time_reset_us: u32,
    /// `rpg_byte_reset`, in 64-byte units: the byte counter's threshold.
    pub rpg_byte_reset: u32,
    /// `rpg_threshold`: F, the count of increases that separates the recovery stages.
    pub rpg_threshold: u32,
    /// `rpg_ai_rate`, Mb/s: the additive increase step.
    pub rpg_ai_rate_mbps: u32,
    /// `rpg_hai_rate`, Mb/s: the hyper increase step.
    pub rpg_hai_rate_mbps: u32,
    /// `rpg_max_rate`, Mb/s: the target rate's ceiling, where the limiter is released; 0 is the link speed.
    pub rpg_max_rate_mbps: u32,
    /// `first_cnp_cuts` (not a sysfs knob: the description's switch): a first CNP also asks for a cut.
    pub first_cnp_cuts: bool,
}

impl Default for RpKnobs {
    fn default() -> Self {
        RpKnobs {
            dce_tcp_g: 1019,
            dce_tcp_rtt_us: 1,
            initial_alpha_value: 1023,
            rate_to_set_on_first_cnp_mbps: 0,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate_mbps: 1,
            rate_reduce_monitor_period_us: 4,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
            rpg_time_reset_us: 300,
            rpg_byte_reset: 32_767,
            rpg_threshold: 1,
            rpg_ai_rate_mbps: 5,
            rpg_hai_rate_mbps: 50,
            rpg_max_rate_mbps: 0,
            first_cnp_cuts: true,
        }
    }
}

impl RpKnobs {
    /// Every knob name [`RpKnobs::set`] accepts.
    pub const NAMES: [&'static str; 17] = [
        "dce_tcp_g",
        "dce_tcp_rtt",
        "initial_alpha_value",
        "rate_to_set_on_first_cnp",
        "rpg_gd",
        "rpg_min_dec_fac",
        "rpg_min_rate",
        "rate_reduce_monitor_period",
        "clamp_tgt_rate",
        "clamp_tgt_rate_after_time_inc",
        "rpg_time_reset",
        "rpg_byte_reset",
        "rpg_threshold",
        "rpg_ai_rate",
        "rpg_hai_rate",
        "rpg_max_rate",
        "first_cnp_cuts",
    ];

    /// The files of a host's `roce_rp/` directory with the values sysfs would show (booleans 0/1): what a
    /// tracer on the host records, so that a capture of the simulator carries the knobs its senders ran with.
    /// `first_cnp_cuts` is the description's switch, not a file of the NIC, so it is not among them.
    pub fn sysfs(&self) -> [(&'static str, u32); 16] {
        [
            ("dce_tcp_g", self.dce_tcp_g),
            ("dce_tcp_rtt", self.dce_tcp_rtt_us),
            ("initial_alpha_value", self.initial_alpha_value),
            (
                "rate_to_set_on_first_cnp",
                self.rate_to_set_on_first_cnp_mbps,
            ),
            ("rpg_gd", self.rpg_gd),
            ("rpg_min_dec_fac", self.rpg_min_dec_fac),
            ("rpg_min_rate", self.rpg_min_rate_mbps),
            (
                "rate_reduce_monitor_period",
                self.rate_reduce_monitor_period_us,
            ),
            ("clamp_tgt_rate", u32::from(self.clamp_tgt_rate)),
            (
                "clamp_tgt_rate_after_time_inc",
                u32::from(self.clamp_tgt_rate_after_time_inc),
            ),
            ("rpg_time_reset", self.rpg_time_reset_us),
            ("rpg_byte_reset", self.rpg_byte_reset),
            ("rpg_threshold", self.rpg_threshold),
            ("rpg_ai_rate", self.rpg_ai_rate_mbps),
            ("rpg_hai_rate", self.rpg_hai_rate_mbps),
            ("rpg_max_rate", self.rpg_max_rate_mbps),
        ]
    }

    /// Sets one knob by its sysfs name; booleans are 0 or 1, as sysfs writes them.
    pub fn set(&mut self, name: &str, value: i64) -> Result<(), KnobError> {
        let range = |lo: i64, hi: i64, why: &'static str| {
            if (lo..=hi).contains(&value) {
                Ok(value as u32)
            } else {
                Err(KnobError::Range {
                    name: name.to_string(),
                    value,
                    why,
                })
            }
        };
        const RATE: &str = "a rate in Mb/s, 0..=800000";
        const PERIOD: &str = "a period in µs, 1..=1000000";
        const FLAG: &str = "0 or 1";
        let rate = || range(0, 800_000, RATE);
        let period = || range(1, 1_000_000, PERIOD);
        let flag = || range(0, 1, FLAG).map(|v| v == 1);
        match name {
            "dce_tcp_g" => self.dce_tcp_g = range(0, 1023, "0..=1023")?,
            "dce_tcp_rtt" => self.dce_tcp_rtt_us = period()?,
            "initial_alpha_value" => self.initial_alpha_value = range(0, 1023, "0..=1023")?,
            "rate_to_set_on_first_cnp" => self.rate_to_set_on_first_cnp_mbps = rate()?,
            "rpg_gd" => self.rpg_gd = range(0, 31, "0..=31")?,
            "rpg_min_dec_fac" => self.rpg_min_dec_fac = range(0, 100, "a percentage, 0..=100")?,
            "rpg_min_rate" => self.rpg_min_rate_mbps = range(1, 800_000, "1..=800000 Mb/s")?,
            "rate_reduce_monitor_period" => self.rate_reduce_monitor_period_us = period()?,
            "clamp_tgt_rate" => self.clamp_tgt_rate = flag()?,
            "clamp_tgt_rate_after_time_inc" => self.clamp_tgt_rate_after_time_inc = flag()?,
            "rpg_time_reset" => self.rpg_time_reset_us = period()?,
            "rpg_byte_reset" => {
                self.rpg_byte_reset = range(1, 1 << 30, "1..=2^30 (64-byte units)")?
            }
            "rpg_threshold" => self.rpg_threshold = range(0, 1 << 20, "0..=2^20")?,
            "rpg_ai_rate" => self.rpg_ai_rate_mbps = rate()?,
            "rpg_hai_rate" => self.rpg_hai_rate_mbps = rate()?,
            "rpg_max_rate" => self.rpg_max_rate_mbps = rate()?,
            "first_cnp_cuts" => self.first_cnp_cuts = flag()?,
            _ => return Err(KnobError::Unknown(name.to_string())),
        }
        Ok(())
    }
}

/// What changed the reaction point's state. The names are the truth file's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RpEventKind {
    /// A CNP reached a released limiter: it engages, alpha starts at `initial_alpha_value`.
    FirstCnp,
    /// A CNP reached an engaged limiter: the next alpha update rises and the next decrease check cuts.
    Cnp,
    /// A decrease check found a CNP since the last: the rate was cut.
    Cut,
    /// An increase in the first stage: Rc halfway back to the unchanged Rt.
    FastRecovery,
    /// An increase in the second stage: Rt up by `rpg_ai_rate`.
    AdditiveIncrease,
    /// An increase in the third stage: Rt up by `rpg_hai_rate`.
    HyperIncrease,
    /// Rc reached the maximum and the limiter let go: the sender runs at link speed until the next CNP.
    Released,
}

impl RpEventKind {
    /// The name as the truth file writes it.
    pub fn name(self) -> &'static str {
        match self {
            RpEventKind::FirstCnp => "first_cnp",
            RpEventKind::Cnp => "cnp",
            RpEventKind::Cut => "cut",
            RpEventKind::FastRecovery => "fast_recovery",
            RpEventKind::AdditiveIncrease => "additive_increase",
            RpEventKind::HyperIncrease => "hyper_increase",
            RpEventKind::Released => "released",
        }
    }
}

impl fmt::Display for RpEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One state change, with the state right after it. Alpha updates are not events: alpha moves every
/// `dce_tcp_rtt` while engaged and is given with every event instead.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RpEvent {
    /// When, in ps of simulated time.
    pub t_ps: u64,
    /// What happened.
    pub kind: RpEventKind,
    /// The current rate after it, Mb/s.
    pub rc_mbps: f64,
    /// The target rate after it, Mb/s.
    pub rt_mbps: f64,
    /// Alpha after it, a fraction.
    pub alpha: f64,
    /// Timer increases since the last cut (T).
    pub timer_count: u32,
    /// Byte-counter increases since the last cut (BC).
    pub byte_count: u32,
}

/// What moves the byte counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteSource {
    /// The bytes the sender's NIC really puts on the wire, reported by [`ReactionPoint::on_sent`]: the NIC.
    Sent,
    /// The current rate, all the time while engaged, as if the sender always had data: the assumption a replay
    /// from a capture has to make. [`ReactionPoint::on_sent`] is ignored.
    Backlogged,
}

/// Which of an instant's timers comes first when they coincide: alpha update, then decrease check, then the
/// increase timer, then a backlogged sender's byte event (a CNP at the same instant comes before all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Alpha,
    Decrease,
    Increase,
    Bytes,
}

/// The timers and counters of an engaged limiter.
#[derive(Debug, Clone)]
struct Engaged {
    alpha: f64,
    rt: f64,
    timer_count: u32,
    byte_count: u32,
    /// Wire bytes sent since the last byte event or cut, up to `bytes_at`.
    bytes: f64,
    /// Backlogged: when `bytes` was last brought up to date.
    bytes_at: u64,
    cnp_alpha: bool,
    cnp_dec: bool,
    next_alpha: u64,
    next_decrease: u64,
    next_increase: u64,
}

/// One sender QP's reaction point.
#[derive(Debug, Clone)]
pub struct ReactionPoint {
    knobs: RpKnobs,
    /// g = (1024 − G)/1024.
    gain: f64,
    line_mbps: f64,
    max_mbps: f64,
    byte_threshold: u64,
    source: ByteSource,
    rc: f64,
    /// `None` while released: the sender is not rate limited.
    engaged: Option<Engaged>,
}

impl ReactionPoint {
    /// A released limiter on a link of `line_mbps`, its byte counter moved by `source`.
    pub fn new(knobs: &RpKnobs, line_mbps: f64, source: ByteSource) -> ReactionPoint {
        let max_mbps = match knobs.rpg_max_rate_mbps {
            0 => line_mbps,
            m => f64::from(m).min(line_mbps),
        };
        ReactionPoint {
            knobs: knobs.clone(),
            gain: f64::from(1024 - knobs.dce_tcp_g) / 1024.0,
            line_mbps,
            max_mbps,
            byte_threshold: u64::from(knobs.rpg_byte_reset) * 64,
            source,
            rc: line_mbps,
            engaged: None,
        }
    }

    /// The rate the sender may send at now, Mb/s.
    pub fn rate_mbps(&self) -> f64 {
        self.rc
    }

    /// Whether the limiter is engaged (a CNP came and the rate has not climbed back to the maximum).
    pub fn engaged(&self) -> bool {
        self.engaged.is_some()
    }

    /// When the rate may next rise without a byte event: the increase timer, if engaged.
    pub fn next_increase_ps(&self) -> Option<u64> {
        self.engaged.as_ref().map(|e| e.next_increase)
    }

    /// Runs every timer due at or before `t`.
    pub fn advance(&mut self, t: u64, out: &mut impl FnMut(RpEvent)) {
        self.run_timers(t, true, out);
    }

    /// A CNP arrives at `t`. Timers due before `t` run first, those due at `t` after it.
    pub fn on_cnp(&mut self, t: u64, out: &mut impl FnMut(RpEvent)) {
        self.run_timers(t, false, out);
        let k = &self.knobs;
        let kind = match &mut self.engaged {
            Some(e) => {
                e.cnp_alpha = true;
                e.cnp_dec = true;
                RpEventKind::Cnp
            }
            None => {
                if k.rate_to_set_on_first_cnp_mbps > 0 {
                    self.rc = f64::from(k.rate_to_set_on_first_cnp_mbps);
                }
                self.engaged = Some(Engaged {
                    alpha: f64::from(k.initial_alpha_value) / 1024.0,
                    rt: self.rc,
                    timer_count: 0,
                    byte_count: 0,
                    bytes: 0.0,
                    bytes_at: t,
                    cnp_alpha: false,
                    cnp_dec: k.first_cnp_cuts,
                    next_alpha: t + u64::from(k.dce_tcp_rtt_us) * PS_PER_US,
                    next_decrease: t + u64::from(k.rate_reduce_monitor_period_us) * PS_PER_US,
                    next_increase: t + u64::from(k.rpg_time_reset_us) * PS_PER_US,
                });
                RpEventKind::FirstCnp
            }
        };
        self.emit(t, kind, out);
    }

    /// The sender put `wire_bytes` on the wire at `t`: the byte counter moves, and may raise the rate.
    pub fn on_sent(&mut self, t: u64, wire_bytes: u64, out: &mut impl FnMut(RpEvent)) {
        self.run_timers(t, true, out);
        if self.source != ByteSource::Sent {
            return;
        }
        let threshold = self.byte_threshold as f64;
        let Some(e) = &mut self.engaged else {
            return;
        };
        e.bytes += wire_bytes as f64;
        while let Some(e) = &mut self.engaged
            && e.bytes >= threshold
        {
            e.bytes -= threshold;
            self.increase(t, false, out);
        }
    }

    /// Backlogged: brings the byte count up to `t` at the current rate (before the rate changes).
    fn accrue(&mut self, t: u64) {
        if self.source != ByteSource::Backlogged {
            return;
        }
        let rc = self.rc;
        if let Some(e) = &mut self.engaged {
            // Mb/s × ps = 1e-6 bits.
            e.bytes += rc * (t - e.bytes_at) as f64 * 1e-6 / 8.0;
            e.bytes_at = t;
        }
    }

    /// Backlogged: when the byte count reaches the threshold at the current rate.
    fn next_byte_event(&self, e: &Engaged) -> u64 {
        if self.source != ByteSource::Backlogged || self.rc <= 0.0 {
            return u64::MAX;
        }
        let left = (self.byte_threshold as f64 - e.bytes).max(0.0);
        e.bytes_at + (left * 8.0 * 1e6 / self.rc).ceil() as u64
    }

    /// Runs the timers due before `t` (and at `t` when `inclusive`), earliest first, coinciding ones in
    /// [`Timer`] order.
    fn run_timers(&mut self, t: u64, inclusive: bool, out: &mut impl FnMut(RpEvent)) {
        while let Some(e) = &self.engaged {
            let (at, which) = [
                (e.next_alpha, Timer::Alpha),
                (e.next_decrease, Timer::Decrease),
                (e.next_increase, Timer::Increase),
                (self.next_byte_event(e), Timer::Bytes),
            ]
            .into_iter()
            .min()
            .unwrap_or((u64::MAX, Timer::Alpha));
            if at > t || (at == t && !inclusive) {
                break;
            }
            match which {
                Timer::Alpha => self.alpha_update(),
                Timer::Decrease => self.decrease_check(at, out),
                Timer::Increase => self.increase(at, true, out),
                Timer::Bytes => {
                    if let Some(e) = &mut self.engaged {
                        e.bytes = self.byte_threshold as f64;
                        e.bytes_at = at;
                    }
                    self.increase(at, false, out);
                }
            }
        }
    }

    fn alpha_update(&mut self) {
        let g = self.gain;
        let period = u64::from(self.knobs.dce_tcp_rtt_us) * PS_PER_US;
        if let Some(e) = &mut self.engaged {
            e.alpha = if e.cnp_alpha {
                ((1.0 - g) * e.alpha + g).min(1023.0 / 1024.0)
            } else {
                (1.0 - g) * e.alpha
            };
            e.cnp_alpha = false;
            e.next_alpha += period;
        }
    }

    fn decrease_check(&mut self, t: u64, out: &mut impl FnMut(RpEvent)) {
        let k = &self.knobs;
        let Some(e) = &mut self.engaged else {
            return;
        };
        e.next_decrease += u64::from(k.rate_reduce_monitor_period_us) * PS_PER_US;
        if !e.cnp_dec {
            return;
        }
        if k.clamp_tgt_rate
            || e.byte_count > 0
            || (k.clamp_tgt_rate_after_time_inc && e.timer_count > 0)
        {
            e.rt = self.rc;
        }
        let cut_share = e.alpha * 1024.0 / 2f64.powi(k.rpg_gd as i32);
        let factor = (1.0 - cut_share).max(f64::from(k.rpg_min_dec_fac) / 100.0);
        self.rc = (self.rc * factor).max(f64::from(k.rpg_min_rate_mbps));
        e.cnp_dec = false;
        e.timer_count = 0;
        e.byte_count = 0;
        e.bytes = 0.0;
        e.bytes_at = t;
        e.next_increase = t + u64::from(k.rpg_time_reset_us) * PS_PER_US;
        self.emit(t, RpEventKind::Cut, out);
    }

    /// An increase from the timer (`by_timer`) or the byte counter. The stage is chosen by the counters as they
    /// were before this increase.
    fn increase(&mut self, t: u64, by_timer: bool, out: &mut impl FnMut(RpEvent)) {
        self.accrue(t);
        let k = &self.knobs;
        let Some(e) = &mut self.engaged else {
            return;
        };
        let f = k.rpg_threshold;
        let kind = if e.timer_count.min(e.byte_count) > f {
            e.rt += f64::from(k.rpg_hai_rate_mbps);
            RpEventKind::HyperIncrease
        } else if e.timer_count.max(e.byte_count) >= f {
            e.rt += f64::from(k.rpg_ai_rate_mbps);
            RpEventKind::AdditiveIncrease
        } else {
            RpEventKind::FastRecovery
        };
        e.rt = e.rt.min(self.max_mbps);
        self.rc = (self.rc + e.rt) / 2.0;
        if by_timer {
            e.timer_count += 1;
            e.next_increase = t + u64::from(k.rpg_time_reset_us) * PS_PER_US;
        } else {
            e.byte_count += 1;
            if self.source == ByteSource::Backlogged {
                e.bytes = 0.0;
            }
        }
        self.emit(t, kind, out);
        if self.rc >= self.max_mbps - RELEASE_MARGIN_MBPS {
            self.engaged = None;
            self.rc = self.line_mbps;
            self.emit(t, RpEventKind::Released, out);
        }
    }

    fn emit(&self, t: u64, kind: RpEventKind, out: &mut impl FnMut(RpEvent)) {
        let (rt_mbps, alpha, timer_count, byte_count) = match &self.engaged {
            Some(e) => (e.rt, e.alpha, e.timer_count, e.byte_count),
            None => (self.rc, 0.0, 0, 0),
        };
        out(RpEvent {
            t_ps: t,
            kind,
            rc_mbps: self.rc,
            rt_mbps,
            alpha,
            timer_count,
            byte_count,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = PS_PER_US;

    fn events(rp: &mut ReactionPoint, cnps_us: &[u64], until_us: u64) -> Vec<RpEvent> {
        let mut v = Vec::new();
        for &c in cnps_us {
            rp.on_cnp(c * US, &mut |e| v.push(e));
        }
        rp.advance(until_us * US, &mut |e| v.push(e));
        v
    }

    /// The description's worked check: 100 Gb/s, CNPs at 0, 50 and 100 µs, no bytes counted.
    #[test]
    fn worked_check() {
        let mut rp = ReactionPoint::new(&RpKnobs::default(), 100_000.0, ByteSource::Sent);
        let mut v = Vec::new();
        for c in [0, 50, 100] {
            rp.on_cnp(c * US, &mut |e| v.push(e));
        }
        rp.advance(400 * US, &mut |e| v.push(e));
        let cuts: Vec<(u64, f64)> = v
            .iter()
            .filter(|e| e.kind == RpEventKind::Cut)
            .map(|e| (e.t_ps / US, e.rc_mbps))
            .collect();
        assert_eq!(cuts.len(), 3, "{cuts:?}");
        let want = [(4, 51_017.3), (52, 31_136.9), (100, 21_468.0)];
        for ((t, rc), (wt, wrc)) in cuts.iter().zip(want) {
            assert_eq!(*t, wt);
            assert!((rc - wrc).abs() < 0.05, "cut at {t} µs to {rc}, want {wrc}");
        }
        let first = 1.0 - (1023.0 / 1024.0) * (1019.0f64 / 1024.0).powi(4) / 2.0;
        assert!((cuts[0].1 / 100_000.0 - first).abs() < 1e-12);
        let fr = v
            .iter()
            .find(|e| e.kind == RpEventKind::FastRecovery)
            .unwrap();
        assert_eq!(fr.t_ps, 400 * US);
        assert!((fr.rc_mbps - 60_734.0).abs() < 0.05, "{}", fr.rc_mbps);
        assert_eq!(fr.rt_mbps, 100_000.0);
    }

    /// A CNP at the same instant as a decrease check is seen by it; alpha has already risen for it.
    #[test]
    fn a_cnp_on_the_grid_comes_first() {
        let mut rp = ReactionPoint::new(&RpKnobs::default(), 100_000.0, ByteSource::Sent);
        let v = events(&mut rp, &[0, 8], 8);
        let cuts: Vec<u64> = v
            .iter()
            .filter(|e| e.kind == RpEventKind::Cut)
            .map(|e| e.t_ps / US)
            .collect();
        assert_eq!(cuts, [4, 8]);
    }

    /// Stages by the counters before the increase: fast recovery, then additive once either count reaches
    /// F, hyper once both exceed it.
    #[test]
    fn stages_follow_the_counters() {
        let k = RpKnobs::default();
        let mut rp = ReactionPoint::new(&k, 100_000.0, ByteSource::Sent);
        let mut v = Vec::new();
        rp.on_cnp(0, &mut |e| v.push(e));
        rp.advance(4 * US, &mut |e| v.push(e));
        let threshold = u64::from(k.rpg_byte_reset) * 64;
        // Timer at 304 µs (T 0 → FR), bytes (BC 0, T 1 → AI), timer (T 1, BC 1 → AI), bytes twice
        // (T 2, BC 1 → AI; T 2, BC 2 → hyper).
        rp.advance(304 * US, &mut |e| v.push(e));
        rp.on_sent(305 * US, threshold, &mut |e| v.push(e));
        rp.advance(604 * US, &mut |e| v.push(e));
        rp.on_sent(605 * US, threshold, &mut |e| v.push(e));
        rp.on_sent(606 * US, threshold, &mut |e| v.push(e));
        let kinds: Vec<RpEventKind> = v.iter().skip(2).map(|e| e.kind).collect();
        use RpEventKind::*;
        assert_eq!(
            kinds,
            [
                FastRecovery,
                AdditiveIncrease,
                AdditiveIncrease,
                AdditiveIncrease,
                HyperIncrease
            ]
        );
        let last = v.last().unwrap();
        assert_eq!((last.timer_count, last.byte_count), (2, 3));
    }

    /// Bytes sent before the first CNP, or while released, count for nothing; bytes beyond a threshold carry.
    #[test]
    fn only_bytes_sent_while_engaged_count() {
        let k = RpKnobs::default();
        let threshold = u64::from(k.rpg_byte_reset) * 64;
        let mut rp = ReactionPoint::new(&k, 100_000.0, ByteSource::Sent);
        let mut v = Vec::new();
        rp.on_sent(0, 10 * threshold, &mut |e| v.push(e));
        assert!(v.is_empty());
        rp.on_cnp(US, &mut |e| v.push(e));
        rp.advance(5 * US, &mut |e| v.push(e));
        rp.on_sent(6 * US, threshold + threshold / 2, &mut |e| v.push(e));
        rp.on_sent(7 * US, threshold / 2, &mut |e| v.push(e));
        let bytes: Vec<u32> = v.iter().map(|e| e.byte_count).collect();
        assert_eq!(bytes, [0, 0, 1, 2]);
    }

    /// One CNP at 0 on a 25 Gb/s link with `rpg_max_rate` = `max`, then 100 ms of timers: the events, and the
    /// index of the release.
    fn recover_from_one_cnp(max: u32) -> (ReactionPoint, Vec<RpEvent>, usize) {
        let k = RpKnobs {
            rpg_max_rate_mbps: max,
            ..RpKnobs::default()
        };
        let mut rp = ReactionPoint::new(&k, 25_000.0, ByteSource::Sent);
        let mut v = Vec::new();
        rp.on_cnp(0, &mut |e| v.push(e));
        rp.advance(100_000 * US, &mut |e| v.push(e));
        let rel = v
            .iter()
            .position(|e| e.kind == RpEventKind::Released)
            .unwrap();
        (rp, v, rel)
    }

    /// The limiter lets go once Rc is back at the maximum, and the next CNP is a first CNP with alpha reset:
    /// a cut of about half, not the sliver a decayed alpha would give.
    #[test]
    fn release_at_the_maximum_then_a_full_cut() {
        let (mut rp, v, rel) = recover_from_one_cnp(25_000);
        assert!(!rp.engaged());
        assert_eq!(rp.rate_mbps(), 25_000.0);
        assert!(v[rel - 1].rc_mbps >= 25_000.0 - 0.5);
        assert!(v[1..rel - 1].iter().all(|e| e.rc_mbps < 25_000.0 - 0.5));
        let t = v[rel].t_ps + 10 * US;
        let mut w = Vec::new();
        rp.on_cnp(t, &mut |e| w.push(e));
        rp.advance(t + 4 * US, &mut |e| w.push(e));
        assert_eq!(w[0].kind, RpEventKind::FirstCnp);
        assert_eq!(w[1].kind, RpEventKind::Cut);
        assert!(w[1].rc_mbps < 0.52 * 25_000.0, "{:?}", w[1]);
    }

    /// `rpg_max_rate` below the link speed caps the target rate and releases there, to link speed.
    #[test]
    fn max_rate_caps_the_target() {
        let (_, v, rel) = recover_from_one_cnp(10_000);
        let increases = v[..rel]
            .iter()
            .filter(|e| e.kind != RpEventKind::Cut && e.kind != RpEventKind::FirstCnp);
        assert!(increases.clone().count() > 0);
        assert!(increases.clone().all(|e| e.rt_mbps <= 10_000.0));
        assert_eq!(v[rel].rc_mbps, 25_000.0);
    }

    /// Backlogged, the byte counter fills at Rc: after the first cut (4 µs, 51017.3 Mb/s) and the first timer
    /// increase (304 µs, to 75508.7 Mb/s), the 2 MB threshold is reached at the new rate.
    #[test]
    fn a_backlogged_counter_fills_at_the_rate() {
        let k = RpKnobs::default();
        let mut rp = ReactionPoint::new(&k, 100_000.0, ByteSource::Backlogged);
        let mut v = Vec::new();
        rp.on_cnp(0, &mut |e| v.push(e));
        rp.on_sent(US, 1 << 30, &mut |e| v.push(e));
        rp.advance(330 * US, &mut |e| v.push(e));
        let kinds: Vec<RpEventKind> = v.iter().map(|e| e.kind).collect();
        use RpEventKind::*;
        assert_eq!(kinds, [FirstCnp, Cut, FastRecovery, AdditiveIncrease]);
        let bits = (k.rpg_byte_reset as f64) * 64.0 * 8.0;
        let (cut, fr) = (v[1].rc_mbps, v[2].rc_mbps);
        let want_us = 304.0 + (bits - cut * 300.0) / fr;
        let got_us = v[3].t_ps as f64 / US as f64;
        assert!((got_us - want_us).abs() < 1e-5, "{got_us} vs {want_us}");
        assert_eq!((v[3].timer_count, v[3].byte_count), (1, 1));
        assert!((v[3].rc_mbps - (fr + 100_000.0) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn knobs_by_name() {
        let mut k = RpKnobs::default();
        k.set("clamp_tgt_rate", 1).unwrap();
        assert!(k.clamp_tgt_rate);
        k.set("rpg_time_reset", 55).unwrap();
        assert_eq!(k.rpg_time_reset_us, 55);
        assert!(matches!(k.set("rpg_gd", 99), Err(KnobError::Range { .. })));
        assert!(matches!(
            k.set("dce_tcp_rtt", 0),
            Err(KnobError::Range { .. })
        ));
        let e = k.set("no_such_knob", 1).unwrap_err().to_string();
        assert!(
            e.contains("no_such_knob") && e.contains("rpg_hai_rate"),
            "{e}"
        );
        for n in RpKnobs::NAMES {
            let mut k = RpKnobs::default();
            k.set(n, 1).unwrap();
        }
    }

    #[test]
    fn sysfs_files_read_back_as_the_same_knobs() {
        // Every value differs from its default, so a file listed under the wrong knob shows.
        let mut k = RpKnobs::default();
        for (i, n) in RpKnobs::NAMES.iter().enumerate() {
            let flag = n.starts_with("clamp") || *n == "first_cnp_cuts";
            let v = if flag { 1 } else { 2 + i as i64 };
            k.set(n, v).unwrap();
        }
        k.clamp_tgt_rate_after_time_inc = false;
        let mut back = RpKnobs {
            first_cnp_cuts: k.first_cnp_cuts,
            ..RpKnobs::default()
        };
        for (n, v) in k.sysfs() {
            back.set(n, i64::from(v)).unwrap();
        }
        assert_eq!(back, k);
        let files: Vec<&str> = k.sysfs().iter().map(|(n, _)| *n).collect();
        let not_files: Vec<&&str> = RpKnobs::NAMES
            .iter()
            .filter(|n| !files.contains(n))
            .collect();
        assert_eq!(not_files, [&"first_cnp_cuts"]);
    }
}
