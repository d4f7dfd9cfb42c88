//! The DCQCN reaction point (the sender NIC's rate limiter), as specified in `reference/dcqcn.md`.
//!
//! One [`Rp`] models one sender QP. Two users drive it: the packet simulator, which advances many RPs in small
//! steps and reads [`Rp::rc_mbps`] to pace packets, and the analyzer, which [`replay`]s the CNP arrival times of a
//! capture and reports every event. Both see the same state machine, so a simulated run and a replayed capture of it
//! agree event for event.
//!
//! Time is integer nanoseconds: every timer period is a whole number of µs, so timer grids are exact and events at
//! "the same instant" really compare equal, which rule 6 (CNP, alpha tick, decrease tick, increase timer, byte event)
//! depends on. Rates are f64 Mb/s (bits per µs).
//!
//! Choices dcqcn.md leaves open, and what this model does:
//! - Before its first CNP a flow is inactive at Rc = Rt = line: no timers, no byte counting, no events.
//! - Once active, a flow stays active and its timers keep running, even at line rate (the spec never deactivates
//!   it). [`Knobs::deactivate_at_line`] turns that off.
//! - The byte counter `acc` starts at 0 at the first CNP (bytes sent while inactive do not count) and grows by
//!   Rc·dt/8 between events. A byte event is placed at the first whole nanosecond at which `acc` ≥ B (the exact
//!   instant rounded up); the fraction of a nanosecond of overshoot is dropped with `acc = 0`, so each byte event is
//!   at most 1 ns late and errors do not accumulate.
//! - Rates set from knobs (`rate_to_set_on_first_cnp`, `rpg_min_rate`, the paper floor) are clamped to the line
//!   rate; in the paper profile Rt is clamped to the line rate after an increase, as in the ConnectX profile.
//! - A CNP earlier than the model's clock (unsorted input, or a CNP given after `advance` went past it) is applied
//!   at the clock: the model never goes back in time.

mod knobs;
#[cfg(test)]
mod tests;

pub use knobs::{DcqcnError, KnobEntry, Knobs, PaperParams};

use serde::Serialize;

/// Which reaction point to model.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
#[serde(tag = "profile", rename_all = "snake_case")]
pub enum Profile {
    /// ConnectX firmware behaviour, driven by [`Knobs`] (the default).
    #[default]
    #[serde(rename = "connectx")]
    ConnectX,
    /// The SIGCOMM 2015 paper's algorithm with its own parameters; [`Knobs`] are ignored except
    /// `deactivate_at_line`.
    Paper(PaperParams),
}

impl Profile {
    /// The paper profile with the defaults of dcqcn.md.
    pub fn paper() -> Profile {
        Profile::Paper(PaperParams::default())
    }

    /// Parses the `--dcqcn-profile` value (`connectx` or `paper`, any case).
    pub fn from_name(name: &str) -> Result<Profile, DcqcnError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "connectx" | "cx" | "mlx" => Ok(Profile::ConnectX),
            "paper" => Ok(Profile::paper()),
            _ => Err(DcqcnError::UnknownProfile(name.to_string())),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Profile::ConnectX => "connectx",
            Profile::Paper(_) => "paper",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A CNP reached an inactive flow and made it active.
    FirstCnp,
    /// A CNP reached an active flow.
    Cnp,
    /// An alpha timer expiry (the new alpha is in [`Event::alpha`]).
    AlphaTick,
    /// A rate cut; [`Event::rc_before_mbps`] is the rate before it.
    Cut,
    /// An increase that moved Rc halfway to an unchanged Rt.
    FastRecovery,
    /// An increase that first raised Rt by the additive step.
    AdditiveIncrease,
    /// An increase that first raised Rt by the hyper step.
    HyperIncrease,
    /// The flow went back to inactive at line rate (only with `deactivate_at_line`).
    Inactive,
}

/// What triggered an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    Cnp,
    AlphaTimer,
    DecreaseTimer,
    IncreaseTimer,
    ByteCounter,
}

/// One step of the state machine, with the state right after it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Event {
    pub t_ns: u64,
    pub kind: EventKind,
    pub cause: Cause,
    /// Rc after the event.
    pub rc_mbps: f64,
    /// Rt after the event.
    pub rt_mbps: f64,
    /// Alpha after the event, as a fraction (ConnectX: the /1024 value divided by 1024).
    pub alpha: f64,
    /// Rc just before the event: differs from `rc_mbps` for cuts and increases.
    pub rc_before_mbps: f64,
}

const NEVER: u64 = u64::MAX;
const NS_PER_US: u64 = 1_000;

/// Whether a rate limiter is close enough to line rate to count as back at it (see `deactivate_at_line`).
const AT_LINE_REL: f64 = 1e-9;

/// The reaction point of one sender QP.
///
/// Drive it with [`Rp::on_cnp`] for each CNP and [`Rp::advance`] to move time forward; both emit events through a
/// caller-supplied closure, so nothing is allocated per call.
#[derive(Debug, Clone)]
pub struct Rp {
    profile: Profile,
    knobs: Knobs,
    line: f64,
    /// Rc floor after clamping to the line rate.
    min_rate: f64,
    /// g of the active profile.
    g: f64,

    rc: f64,
    rt: f64,
    alpha: f64,
    /// T: timer increases since the last cut.
    timer_count: u32,
    /// BC: byte-counter increases since the last cut.
    byte_count: u32,
    /// Bytes counted up to `acc_t`.
    acc: f64,
    acc_t: u64,
    cnp_alpha: bool,
    cnp_dec: bool,
    active: bool,
    /// Everything at or before this instant has been applied (except timers due exactly now, see `on_cnp`).
    clock: u64,

    alpha_period: u64,
    dec_period: u64,
    /// The decrease grid's origin: the first CNP.
    dec_anchor: u64,
    alpha_next: u64,
    dec_next: u64,
    inc_next: u64,
    byte_next: u64,
    /// Whether alpha ticks are emitted (see [`Rp::without_alpha_ticks`]).
    alpha_ticks: bool,
}

impl Rp {
    /// A new, inactive RP at line rate. Fails on a line rate that is not a positive finite number or on settings
    /// that could never let time advance (a zero period).
    pub fn new(profile: Profile, knobs: &Knobs, line_mbps: f64) -> Result<Rp, DcqcnError> {
        if !(line_mbps.is_finite() && line_mbps > 0.0) {
            return Err(DcqcnError::Invalid(format!(
                "line rate {line_mbps} Mb/s must be a positive number"
            )));
        }
        knobs.validate()?;
        let (min_rate, g, alpha, alpha_period, dec_period) = match &profile {
            Profile::ConnectX => (
                f64::from(knobs.rpg_min_rate),
                f64::from(1024 - knobs.dce_tcp_g.min(1024)) / 1024.0,
                f64::from(knobs.initial_alpha_value) / 1024.0,
                u64::from(knobs.dce_tcp_rtt) * NS_PER_US,
                u64::from(knobs.rate_reduce_monitor_period) * NS_PER_US,
            ),
            Profile::Paper(p) => {
                p.validate()?;
                (
                    p.min_rate_mbps,
                    p.g,
                    p.initial_alpha,
                    u64::from(p.alpha_timer_us) * NS_PER_US,
                    NEVER,
                )
            }
        };
        Ok(Rp {
            profile,
            knobs: knobs.clone(),
            line: line_mbps,
            min_rate: min_rate.min(line_mbps),
            g,
            rc: line_mbps,
            rt: line_mbps,
            alpha,
            timer_count: 0,
            byte_count: 0,
            acc: 0.0,
            acc_t: 0,
            cnp_alpha: false,
            cnp_dec: false,
            active: false,
            clock: 0,
            alpha_period,
            dec_period,
            dec_anchor: 0,
            alpha_next: NEVER,
            dec_next: NEVER,
            inc_next: NEVER,
            byte_next: NEVER,
            alpha_ticks: true,
        })
    }

    /// Stops emitting [`EventKind::AlphaTick`] events. Alpha still moves tick by tick, with the same
    /// multiplications as with them, so every other event is bit for bit the same; but a run of ticks with
    /// nothing else due costs a multiplication each instead of an event. With the ConnectX default of a tick
    /// per µs, replaying a second of capture is a million ticks per flow, which is what an analysis of
    /// thousands of flows could not afford.
    pub fn without_alpha_ticks(mut self) -> Rp {
        self.alpha_ticks = false;
        self
    }

    /// Current rate Rc, Mb/s: the pacing rate the simulator should send at.
    pub fn rc_mbps(&self) -> f64 {
        self.rc
    }

    /// Target rate Rt, Mb/s.
    pub fn rt_mbps(&self) -> f64 {
        self.rt
    }

    /// Alpha as a fraction.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Whether the flow has seen a CNP (and, with `deactivate_at_line`, not recovered since).
    pub fn is_active(&self) -> bool {
        self.active
    }

    pub fn line_mbps(&self) -> f64 {
        self.line
    }

    /// The instant of the next pending timer or byte event, if any: lets a simulator sleep until Rc can change.
    /// Alpha ticks count as events even though they leave Rc alone.
    pub fn next_event_ns(&self) -> Option<u64> {
        Some(self.next_due()).filter(|&t| t != NEVER)
    }

    /// A CNP arrives at `t_ns`. Runs every event strictly before `t_ns`, then applies the CNP; timers due exactly
    /// at `t_ns` run at the next `advance` (or `on_cnp`) call, after the CNP, as rule 6 orders them.
    pub fn on_cnp(&mut self, t_ns: u64, emit: &mut impl FnMut(Event)) {
        if t_ns > self.clock {
            self.advance(t_ns - 1, emit);
            self.clock = t_ns;
        }
        let now = self.clock;
        match self.profile {
            Profile::ConnectX => self.cx_cnp(now, emit),
            Profile::Paper(p) => self.paper_cnp(now, &p, emit),
        }
    }

    /// Runs every timer and byte event with time ≤ `t_ns`, in time order and, within one instant, in the order of
    /// rule 6. Calling it with an earlier time than before does nothing.
    pub fn advance(&mut self, t_ns: u64, emit: &mut impl FnMut(Event)) {
        loop {
            let next = self.next_due();
            if next == NEVER || next > t_ns {
                break;
            }
            if !self.alpha_ticks && next == self.alpha_next {
                // Ticks up to and including the next other event: at one instant the tick comes first (rule 6),
                // so the event then sees the alpha it would have seen after a tick-by-tick run.
                let until = t_ns
                    .min(self.dec_next)
                    .min(self.inc_next)
                    .min(self.byte_next);
                let last = self.silent_alpha_ticks(until);
                self.clock = self.clock.max(last);
                continue;
            }
            self.clock = self.clock.max(next);
            self.fire(next, emit);
        }
        self.clock = self.clock.max(t_ns);
    }

    /// Every alpha tick from `alpha_next` to `until` (at least one), without events; returns the last tick's
    /// time. Each tick is [`Rp::alpha_tick`], as in [`Rp::fire`], so the result is the same to the bit. Once a
    /// tick without a pending CNP leaves alpha as it was, so would every later one, and they are skipped: after
    /// a long quiet stretch alpha ends on zero or on a subnormal that rounds back to itself.
    fn silent_alpha_ticks(&mut self, until: u64) -> u64 {
        let period = self.alpha_period;
        let n = (until - self.alpha_next) / period + 1;
        let last = self.alpha_next + (n - 1) * period;
        self.alpha_next = last.saturating_add(period);
        for _ in 0..n {
            let (before, cnp) = (self.alpha, self.cnp_alpha);
            self.alpha_tick();
            if !cnp && self.alpha == before {
                break;
            }
        }
        last
    }

    /// Rule 3 (ConnectX: alpha rises toward 1 if a CNP came since the last tick, else decays) or the paper's
    /// decay: one alpha timer expiry.
    fn alpha_tick(&mut self) {
        match self.profile {
            Profile::ConnectX => {
                self.alpha = if self.cnp_alpha {
                    ((1.0 - self.g) * self.alpha + self.g).min(1023.0 / 1024.0)
                } else {
                    (1.0 - self.g) * self.alpha
                };
                self.cnp_alpha = false;
            }
            Profile::Paper(_) => self.alpha *= 1.0 - self.g,
        }
    }

    /// The next instant at which something is emitted: [`Rp::next_due`] without the alpha ticks when they
    /// run silently. While a flow is active its increase timer is always set, so this is `NEVER` only for an
    /// inactive flow.
    fn next_emitting(&self) -> u64 {
        if self.alpha_ticks {
            self.next_due()
        } else {
            self.dec_next.min(self.inc_next).min(self.byte_next)
        }
    }

    fn next_due(&self) -> u64 {
        self.alpha_next
            .min(self.dec_next)
            .min(self.inc_next)
            .min(self.byte_next)
    }

    /// Everything due at `now`, in rule 6 order. Each step re-checks its timer because an earlier step at the same
    /// instant may have moved it (a cut re-arms the increase timer; any rate change moves the byte event).
    fn fire(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        if self.alpha_next == now {
            self.alpha_next = now.saturating_add(self.alpha_period);
            let before = self.rc;
            self.alpha_tick();
            emit(self.event(now, EventKind::AlphaTick, Cause::AlphaTimer, before));
        }
        if self.dec_next == now {
            self.cx_cut(now, emit);
        }
        if self.inc_next == now {
            self.increase(now, Cause::IncreaseTimer, emit);
        }
        if self.active && self.byte_next == now {
            self.increase(now, Cause::ByteCounter, emit);
        }
    }

    fn event(&self, t_ns: u64, kind: EventKind, cause: Cause, rc_before_mbps: f64) -> Event {
        Event {
            t_ns,
            kind,
            cause,
            rc_mbps: self.rc,
            rt_mbps: self.rt,
            alpha: self.alpha,
            rc_before_mbps,
        }
    }

    /// Rules 1 and 2.
    fn cx_cnp(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        if self.active {
            self.cnp_alpha = true;
            self.cnp_dec = true;
            if self.dec_next == NEVER {
                // Next point of the grid at or after now, but never the anchor itself: the first tick is one
                // period after the first CNP.
                let p = self.dec_period;
                let k = (now - self.dec_anchor).div_ceil(p).max(1);
                self.dec_next = self.dec_anchor.saturating_add(k.saturating_mul(p));
            }
            emit(self.event(now, EventKind::Cnp, Cause::Cnp, before));
            return;
        }
        let k = &self.knobs;
        self.active = true;
        self.alpha = f64::from(k.initial_alpha_value) / 1024.0;
        if k.rate_to_set_on_first_cnp > 0 {
            self.rc = f64::from(k.rate_to_set_on_first_cnp).min(self.line);
            self.rt = self.rc;
        }
        self.cnp_alpha = false;
        self.cnp_dec = k.first_cnp_cuts;
        self.timer_count = 0;
        self.byte_count = 0;
        self.dec_anchor = now;
        self.alpha_next = now.saturating_add(self.alpha_period);
        self.dec_next = if self.cnp_dec {
            now.saturating_add(self.dec_period)
        } else {
            NEVER
        };
        self.inc_next = now.saturating_add(self.inc_period());
        self.reset_acc(now);
        emit(self.event(now, EventKind::FirstCnp, Cause::Cnp, before));
    }

    /// Rule 4: a decrease tick with `cnp_dec` set (ticks without it change nothing and are not scheduled).
    fn cx_cut(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        let k = &self.knobs;
        let before = self.rc;
        if k.clamp_tgt_rate
            || self.byte_count > 0
            || (k.clamp_tgt_rate_after_time_inc && self.timer_count > 0)
        {
            self.rt = self.rc;
        }
        let shift = f64::from(1u32 << k.rpg_gd.min(31));
        let factor = (1.0 - self.alpha * 1024.0 / shift).max(f64::from(k.rpg_min_dec_fac) / 100.0);
        self.rc = (self.rc * factor).max(self.min_rate);
        self.cnp_dec = false;
        self.dec_next = NEVER;
        self.timer_count = 0;
        self.byte_count = 0;
        self.inc_next = now.saturating_add(self.inc_period());
        self.reset_acc(now);
        emit(self.event(now, EventKind::Cut, Cause::DecreaseTimer, before));
    }

    /// The paper's CNP: cut at once, then raise alpha, restart the increase and alpha timers.
    fn paper_cnp(&mut self, now: u64, p: &PaperParams, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        let kind = if self.active {
            EventKind::Cnp
        } else {
            self.active = true;
            self.alpha = p.initial_alpha;
            EventKind::FirstCnp
        };
        emit(self.event(now, kind, Cause::Cnp, before));
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(self.min_rate);
        self.alpha = (1.0 - self.g) * self.alpha + self.g;
        self.timer_count = 0;
        self.byte_count = 0;
        self.inc_next = now.saturating_add(self.inc_period());
        self.alpha_next = now.saturating_add(self.alpha_period);
        self.reset_acc(now);
        emit(self.event(now, EventKind::Cut, Cause::Cnp, before));
    }

    /// Rule 5 (ConnectX) or the paper's increase, from the timer or the byte counter.
    fn increase(&mut self, now: u64, cause: Cause, emit: &mut impl FnMut(Event)) {
        self.integrate(now);
        let before = self.rc;
        let by_timer = cause == Cause::IncreaseTimer;
        let kind = match self.profile {
            Profile::ConnectX => {
                let k = &self.knobs;
                let (lo, hi) = self.counts();
                let kind = if lo > k.rpg_threshold {
                    self.rt += f64::from(k.rpg_hai_rate);
                    EventKind::HyperIncrease
                } else if hi >= k.rpg_threshold {
                    self.rt += f64::from(k.rpg_ai_rate);
                    EventKind::AdditiveIncrease
                } else {
                    EventKind::FastRecovery
                };
                self.bump(by_timer);
                kind
            }
            Profile::Paper(p) => {
                self.bump(by_timer);
                let (lo, hi) = self.counts();
                if hi < p.f {
                    EventKind::FastRecovery
                } else if lo >= p.f {
                    self.rt += f64::from(lo - p.f + 1) * p.hai_mbps;
                    EventKind::HyperIncrease
                } else {
                    self.rt += p.ai_mbps;
                    EventKind::AdditiveIncrease
                }
            }
        };
        self.rt = self.rt.min(self.line);
        self.rc = (self.rc + self.rt) / 2.0;
        if by_timer {
            self.inc_next = now.saturating_add(self.inc_period());
            self.schedule_bytes();
        } else {
            self.reset_acc(now);
        }
        emit(self.event(now, kind, cause, before));
        if self.knobs.deactivate_at_line
            && self.rt >= self.line
            && self.line - self.rc <= self.line * AT_LINE_REL
        {
            self.deactivate(now, cause, emit);
        }
    }

    fn deactivate(&mut self, now: u64, cause: Cause, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        self.active = false;
        self.rc = self.line;
        self.rt = self.line;
        self.cnp_alpha = false;
        self.cnp_dec = false;
        self.timer_count = 0;
        self.byte_count = 0;
        self.acc = 0.0;
        self.alpha_next = NEVER;
        self.dec_next = NEVER;
        self.inc_next = NEVER;
        self.byte_next = NEVER;
        emit(self.event(now, EventKind::Inactive, cause, before));
    }

    fn counts(&self) -> (u32, u32) {
        (
            self.timer_count.min(self.byte_count),
            self.timer_count.max(self.byte_count),
        )
    }

    fn bump(&mut self, by_timer: bool) {
        if by_timer {
            self.timer_count = self.timer_count.saturating_add(1);
        } else {
            self.byte_count = self.byte_count.saturating_add(1);
        }
    }

    /// Whether the paper profile is in its hyper stage, where its timer period and byte threshold halve.
    fn paper_hyper(&self) -> bool {
        match self.profile {
            Profile::Paper(p) => self.counts().0 >= p.f,
            Profile::ConnectX => false,
        }
    }

    fn inc_period(&self) -> u64 {
        match self.profile {
            Profile::ConnectX => u64::from(self.knobs.rpg_time_reset) * NS_PER_US,
            Profile::Paper(p) => {
                let t = u64::from(p.timer_us) * NS_PER_US;
                if self.paper_hyper() { t / 2 } else { t }
            }
        }
    }

    /// B in bytes; 0 means the byte counter is off.
    fn byte_threshold(&self) -> f64 {
        match self.profile {
            Profile::ConnectX => f64::from(self.knobs.rpg_byte_reset) * 64.0,
            Profile::Paper(p) => {
                let b = p.byte_counter as f64;
                if self.paper_hyper() { b / 2.0 } else { b }
            }
        }
    }

    /// Brings `acc` up to `now` under the Rc that held since `acc_t` (Rc only changes at events).
    fn integrate(&mut self, now: u64) {
        if now > self.acc_t {
            self.acc += self.rc * (now - self.acc_t) as f64 / 8_000.0;
            self.acc_t = now;
        }
    }

    fn reset_acc(&mut self, now: u64) {
        self.acc = 0.0;
        self.acc_t = now;
        self.schedule_bytes();
    }

    /// Places the next byte event at the first whole ns where `acc` reaches B under the current Rc.
    /// Must be called with `acc_t` = now, after every change of Rc, `acc` or the threshold.
    fn schedule_bytes(&mut self) {
        self.byte_next = NEVER;
        let b = self.byte_threshold();
        if !self.active || b <= 0.0 || !(self.rc > 0.0 && self.rc.is_finite()) {
            return;
        }
        let need = b - self.acc;
        if need <= 0.0 {
            self.byte_next = self.acc_t;
            return;
        }
        // Mb/s is bits per µs, so bytes per ns is Rc/8000.
        let dt = (need * 8_000.0 / self.rc).ceil();
        if dt < NEVER as f64 {
            self.byte_next = self.acc_t.saturating_add(dt as u64);
        }
    }
}

/// Replays the CNPs a capture shows arriving at one sender QP and returns every event up to `end_ns`.
///
/// CNPs are processed in time order (the input is sorted first if needed); CNPs after `end_ns` are ignored.
pub fn replay(
    profile: Profile,
    knobs: &Knobs,
    line_mbps: f64,
    cnp_times_ns: &[u64],
    end_ns: u64,
) -> Result<Vec<Event>, DcqcnError> {
    Ok(replay_on(
        Rp::new(profile, knobs, line_mbps)?,
        cnp_times_ns,
        end_ns,
    ))
}

/// [`replay`] on an RP the caller made, such as one [`Rp::without_alpha_ticks`].
pub fn replay_on(rp: Rp, cnp_times_ns: &[u64], end_ns: u64) -> Vec<Event> {
    replay_within(rp, cnp_times_ns, end_ns, usize::MAX).events
}

/// A replay that may have stopped before its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub events: Vec<Event>,
    /// Set when the event budget ran out: the model is complete up to this instant and says nothing after it.
    pub stopped_ns: Option<u64>,
}

/// [`replay_on`] that stops once `max_events` events are out (a few more when several fall on one instant).
///
/// Once a flow has seen a CNP its increase timer never stops (dcqcn.md), so the events grow with the time
/// from a flow's first CNP to the end of the capture, not with what the capture holds: an hour-long capture,
/// or one record whose timestamp is corrupt and lies years ahead, would otherwise take hours and all memory.
/// Up to the stop, the events are those of [`replay_on`], bit for bit.
pub fn replay_within(mut rp: Rp, cnp_times_ns: &[u64], end_ns: u64, max_events: usize) -> Replay {
    let mut sorted;
    let mut times = cnp_times_ns;
    if !times.is_sorted() {
        sorted = times.to_vec();
        sorted.sort_unstable();
        times = &sorted;
    }
    let mut out = Vec::new();
    for &t in times.iter().take_while(|&&t| t <= end_ns) {
        if t > 0
            && let Some(stop) = advance_within(&mut rp, t - 1, &mut out, max_events)
        {
            return Replay {
                events: out,
                stopped_ns: Some(stop),
            };
        }
        rp.on_cnp(t, &mut |e: Event| out.push(e));
    }
    let stopped_ns = advance_within(&mut rp, end_ns, &mut out, max_events);
    Replay {
        events: out,
        stopped_ns,
    }
}

/// [`Rp::advance`] to `t_ns` one emitting instant at a time, stopping early (and returning the RP's clock)
/// once `out` holds `max_events` events. Advancing in steps gives the same events as one call: `advance` runs
/// everything up to its argument, whatever came before.
fn advance_within(rp: &mut Rp, t_ns: u64, out: &mut Vec<Event>, max_events: usize) -> Option<u64> {
    loop {
        if out.len() >= max_events {
            // After a CNP the timers due at its very instant are still pending (rule 6 runs them after it):
            // run them, so that the replay is complete up to and including the instant it stops at.
            let now = rp.clock;
            rp.advance(now, &mut |e: Event| out.push(e));
            return Some(now);
        }
        let next = rp.next_emitting();
        let step = if next == NEVER || next > t_ns {
            t_ns
        } else {
            next
        };
        rp.advance(step, &mut |e: Event| out.push(e));
        if step == t_ns {
            return None;
        }
    }
}
