//! The reaction point of one sender QP, event by event: its cost is the CNPs it is given and the rate changes
//! it makes, never the ticks of its timers.
//!
//! Three things tick in dcqcn.md and none of them is walked here:
//! - the alpha update (every µs at the ConnectX default) only matters when something reads alpha: a cut, or
//!   an event that reports it. Alpha is kept as of a tick count on its grid, and brought forward on demand: the
//!   first pending update rises if a CNP came since the last one, the others decay, all at once
//!   ([`super::alpha::Rule::decay`]);
//! - the decrease check only does something after a CNP, so it is scheduled then, on its grid;
//! - the increase timer and the byte counter change the rate at every firing until the rate is back at its
//!   maximum. There the limiter is released (the default), or, when it is kept, the rate sits exactly at the
//!   maximum where every further increase changes nothing: the model then stops firing them until the next CNP
//!   (“saturated”). What the skipped increases would still have moved, the counters T and BC, is read by
//!   nothing before the next cut resets it: at that cut Rt ← Rc leaves Rt at the maximum either way.
//!
//! The step-by-step replay that walks every tick is kept in the tests as the reference this model is proven
//! against (`reference.rs`).

use super::alpha::{Alpha, Rule};
use super::bytes::ByteCounter;
use super::knobs::{DcqcnError, Knobs};
use super::{Cause, Event, EventKind, Profile};

pub(super) const NEVER: u64 = u64::MAX;
pub(super) const NS_PER_US: u64 = 1_000;

/// The reaction point of one sender QP.
///
/// Drive it with [`Rp::on_cnp`] for each CNP and [`Rp::advance`] to move time forward; both emit events through a
/// caller-supplied closure, so nothing is allocated per call.
#[derive(Debug, Clone)]
pub struct Rp {
    profile: Profile,
    knobs: Knobs,
    rule: Rule,
    line: f64,
    /// Rt's ceiling (`rpg_max_rate`, or the line rate).
    max: f64,
    /// Rc floor after clamping to the line rate.
    min_rate: f64,
    /// How close to `max` Rc must come for the limiter to be released; `None` when it never is.
    release_margin: Option<f64>,

    rc: f64,
    rt: f64,
    /// Alpha after `alpha_done` updates of its grid.
    alpha: Alpha,
    /// The alpha grid: updates at `alpha_anchor + k·alpha_period` for k ≥ 1.
    alpha_anchor: u64,
    alpha_done: u64,
    alpha_period: u64,
    counts: Counts,
    bytes: ByteCounter,
    cnp_alpha: bool,
    cnp_dec: bool,
    active: bool,
    /// Rc = Rt at the maximum with the limiter kept: increases would change nothing, so none is scheduled.
    saturated: bool,
    /// Everything at or before this instant has been applied (except timers due exactly now, see `on_cnp`).
    clock: u64,

    dec_period: u64,
    /// The decrease grid's origin: the first CNP.
    dec_anchor: u64,
    dec_next: u64,
    inc_next: u64,
    byte_next: u64,
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
        let (min_rate, alpha_period, dec_period) = match &profile {
            Profile::ConnectX => (
                f64::from(knobs.rpg_min_rate),
                u64::from(knobs.dce_tcp_rtt) * NS_PER_US,
                u64::from(knobs.rate_reduce_monitor_period) * NS_PER_US,
            ),
            Profile::Paper(p) => {
                p.validate()?;
                (
                    p.min_rate_mbps,
                    u64::from(p.alpha_timer_us) * NS_PER_US,
                    NEVER,
                )
            }
        };
        let rule = Rule::of(&profile, knobs);
        Ok(Rp {
            alpha: rule.initial(&profile, knobs),
            rule,
            profile,
            knobs: knobs.clone(),
            line: line_mbps,
            max: knobs.max_rate_mbps(line_mbps),
            min_rate: min_rate.min(line_mbps),
            release_margin: knobs
                .release_at_max
                .then(|| f64::from(knobs.release_margin_kbps) / 1000.0),
            rc: line_mbps,
            rt: line_mbps,
            alpha_anchor: 0,
            alpha_done: 0,
            alpha_period,
            counts: Counts::default(),
            bytes: ByteCounter::reset(0),
            cnp_alpha: false,
            cnp_dec: false,
            active: false,
            saturated: false,
            clock: 0,
            dec_period,
            dec_anchor: 0,
            dec_next: NEVER,
            inc_next: NEVER,
            byte_next: NEVER,
        })
    }

    /// Current rate Rc, Mb/s.
    pub fn rc_mbps(&self) -> f64 {
        self.rc
    }

    /// Target rate Rt, Mb/s.
    pub fn rt_mbps(&self) -> f64 {
        self.rt
    }

    /// Alpha as a fraction, as of the last event.
    pub fn alpha(&self) -> f64 {
        self.alpha.value()
    }

    /// Whether the limiter is engaged: the flow has seen a CNP and has not been released since.
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The line rate the model was made for, Mb/s.
    pub fn line_mbps(&self) -> f64 {
        self.line
    }

    /// The instant of the next pending cut, increase or byte event, if any: when Rc can next change.
    pub fn next_event_ns(&self) -> Option<u64> {
        Some(self.next_due()).filter(|&t| t != NEVER)
    }

    /// A CNP arrives at `t_ns`. Runs every event strictly before `t_ns`, then applies the CNP; timers due exactly
    /// at `t_ns` run at the next `advance` (or `on_cnp`) call, after the CNP, as rule 6 orders them. A CNP
    /// earlier than the model's clock is applied at the clock: the model never goes back in time.
    pub fn on_cnp(&mut self, t_ns: u64, emit: &mut impl FnMut(Event)) {
        if t_ns > self.clock {
            self.advance(t_ns - 1, emit);
            self.clock = t_ns;
        }
        let now = self.clock;
        match self.profile {
            Profile::ConnectX => self.cx_cnp(now, emit),
            Profile::Paper(_) => self.paper_cnp(now, emit),
        }
    }

    /// Runs every event with time ≤ `t_ns`, in time order and, within one instant, in the order of rule 6.
    /// Calling it with an earlier time than before does nothing.
    pub fn advance(&mut self, t_ns: u64, emit: &mut impl FnMut(Event)) {
        while self.step(t_ns, emit) {}
        self.clock = self.clock.max(t_ns);
    }

    /// Runs all the events of the next instant at or before `t_ns`, if there is one, and says whether there was.
    /// What a caller that bounds the work (see [`super::replay_with`]) advances by.
    pub fn step(&mut self, t_ns: u64, emit: &mut impl FnMut(Event)) -> bool {
        let next = self.next_due();
        if next == NEVER || next > t_ns {
            return false;
        }
        self.clock = self.clock.max(next);
        // A byte event can fall due again at its own instant (B below a nanosecond's bytes).
        while self.next_due() == next {
            self.fire(next, emit);
        }
        true
    }

    /// The model's clock: everything before it has been applied.
    pub fn clock_ns(&self) -> u64 {
        self.clock
    }

    fn next_due(&self) -> u64 {
        self.dec_next.min(self.inc_next).min(self.byte_next)
    }

    /// Everything due at `now`, in rule 6 order (the alpha update comes first through `sync_alpha`). Each step
    /// re-checks its timer because an earlier step at the same instant may have moved it (a cut re-arms the
    /// increase timer; any rate change moves the byte event).
    fn fire(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        if self.dec_next == now {
            self.cx_cut(now, emit);
        }
        if self.inc_next == now {
            self.increase(now, Cause::IncreaseTimer, emit);
        }
        if self.byte_next == now {
            self.increase(now, Cause::ByteCounter, emit);
        }
    }

    /// Applies every alpha update of the grid at or before `t`, at once.
    fn sync_alpha(&mut self, t: u64) {
        if !self.active || t < self.alpha_anchor {
            return;
        }
        let due = (t - self.alpha_anchor) / self.alpha_period;
        if due <= self.alpha_done {
            return;
        }
        let mut n = due - self.alpha_done;
        if self.cnp_alpha {
            self.alpha = self.rule.rise(self.alpha);
            self.cnp_alpha = false;
            n -= 1;
        }
        self.alpha = self.rule.decay(self.alpha, n);
        self.alpha_done = due;
    }

    /// Alpha's updates strictly before `now`: those a CNP at `now` comes after.
    fn sync_alpha_before(&mut self, now: u64) {
        if let Some(t) = now.checked_sub(1) {
            self.sync_alpha(t);
        }
    }

    fn event(&self, t_ns: u64, kind: EventKind, cause: Cause, rc_before_mbps: f64) -> Event {
        Event {
            t_ns,
            kind,
            cause,
            rc_mbps: self.rc,
            rt_mbps: self.rt,
            alpha: self.alpha.value(),
            rc_before_mbps,
        }
    }

    /// Rules 1 and 2.
    fn cx_cnp(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        if self.active {
            self.sync_alpha_before(now);
            self.cnp_alpha = true;
            self.cnp_dec = true;
            // The increases the saturation skipped would be no-ops until the cut this CNP leads to, which
            // re-arms both the timer and the byte counter.
            self.saturated = false;
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
        self.alpha = self.rule.initial(&self.profile, k);
        self.alpha_anchor = now;
        self.alpha_done = 0;
        if k.rate_to_set_on_first_cnp > 0 {
            self.rc = f64::from(k.rate_to_set_on_first_cnp).min(self.line);
            self.rt = self.rc;
        }
        self.cnp_alpha = false;
        self.cnp_dec = k.first_cnp_cuts;
        self.dec_anchor = now;
        self.dec_next = if self.cnp_dec {
            now.saturating_add(self.dec_period)
        } else {
            NEVER
        };
        self.restart_recovery(now);
        emit(self.event(now, EventKind::FirstCnp, Cause::Cnp, before));
    }

    /// Rule 4: a decrease tick with `cnp_dec` set (ticks without it change nothing and are not scheduled).
    fn cx_cut(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        self.sync_alpha(now);
        let before = self.rc;
        cut_rates(
            &self.knobs,
            self.counts,
            self.alpha,
            (&mut self.rc, &mut self.rt),
            self.min_rate,
        );
        self.cnp_dec = false;
        self.dec_next = NEVER;
        self.restart_recovery(now);
        emit(self.event(now, EventKind::Cut, Cause::DecreaseTimer, before));
    }

    /// The paper's CNP: cut at once, then raise alpha, restart the increase and alpha timers.
    fn paper_cnp(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        let kind = if self.active {
            self.sync_alpha_before(now);
            EventKind::Cnp
        } else {
            self.active = true;
            self.alpha = self.rule.initial(&self.profile, &self.knobs);
            EventKind::FirstCnp
        };
        emit(self.event(now, kind, Cause::Cnp, before));
        paper_cut(self.alpha, (&mut self.rc, &mut self.rt), self.min_rate);
        self.alpha = self.rule.paper_cnp(self.alpha);
        self.alpha_anchor = now;
        self.alpha_done = 0;
        self.restart_recovery(now);
        emit(self.event(now, EventKind::Cut, Cause::Cnp, before));
    }

    /// What a cut (or a first CNP) starts: recovery from stage zero, the increase timer and the byte counter
    /// from now.
    fn restart_recovery(&mut self, now: u64) {
        self.counts = Counts::default();
        self.saturated = false;
        self.inc_next = now.saturating_add(self.inc_period());
        self.bytes = ByteCounter::reset(now);
        self.schedule_bytes();
    }

    /// Rule 5 (ConnectX) or the paper's increase, from the timer or the byte counter.
    fn increase(&mut self, now: u64, cause: Cause, emit: &mut impl FnMut(Event)) {
        self.sync_alpha(now);
        let by_timer = cause == Cause::IncreaseTimer;
        let threshold = self.byte_threshold();
        if by_timer {
            self.bytes.integrate(now, self.rc);
        } else {
            self.bytes.take(now, self.rc, threshold);
        }
        let before = self.rc;
        let kind = increase_rates(
            &self.profile,
            &self.knobs,
            &mut self.counts,
            by_timer,
            (&mut self.rc, &mut self.rt),
            self.max,
        );
        if by_timer {
            self.inc_next = now.saturating_add(self.inc_period());
        }
        self.schedule_bytes();
        emit(self.event(now, kind, cause, before));
        if releases(self.release_margin, self.rc, self.rt, self.max) {
            self.release(now, cause, emit);
        } else if self.rc == self.rt && self.stays_put() {
            self.saturated = true;
            self.inc_next = NEVER;
            self.byte_next = NEVER;
        }
    }

    /// Whether, with Rc = Rt, no increase can ever move them again: Rt is at its ceiling, or every step the
    /// stages can still reach is zero.
    fn stays_put(&self) -> bool {
        if self.rt >= self.max {
            return true;
        }
        let (ai, hai) = match self.profile {
            Profile::ConnectX => (
                f64::from(self.knobs.rpg_ai_rate),
                f64::from(self.knobs.rpg_hai_rate),
            ),
            Profile::Paper(p) => (p.ai_mbps, p.hai_mbps),
        };
        // The hyper stage needs byte events as well as timer ones.
        ai == 0.0 && (hai == 0.0 || self.byte_threshold() <= 0.0)
    }

    /// The limiter lets go: the flow sends at the line rate, unlimited, and its next CNP is a first CNP.
    fn release(&mut self, now: u64, cause: Cause, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        self.active = false;
        self.rc = self.line;
        self.rt = self.line;
        self.cnp_alpha = false;
        self.cnp_dec = false;
        self.saturated = false;
        self.counts = Counts::default();
        self.dec_next = NEVER;
        self.inc_next = NEVER;
        self.byte_next = NEVER;
        emit(self.event(now, EventKind::Released, cause, before));
    }

    fn inc_period(&self) -> u64 {
        inc_period(&self.profile, &self.knobs, self.counts.low())
    }

    fn byte_threshold(&self) -> f64 {
        byte_threshold(&self.profile, &self.knobs, self.counts.low())
    }

    /// Places the next byte event under the current Rc. Called after every change of Rc, of the count or of
    /// the threshold, with the count up to now.
    fn schedule_bytes(&mut self) {
        self.byte_next = if self.active && !self.saturated {
            self.bytes
                .due(self.rc, self.byte_threshold())
                .unwrap_or(NEVER)
        } else {
            NEVER
        };
    }
}

/// The increase timer's period, ns, given min(T, BC): the paper halves it in its hyper stage.
pub(super) fn inc_period(profile: &Profile, knobs: &Knobs, min_count: u32) -> u64 {
    match profile {
        Profile::ConnectX => u64::from(knobs.rpg_time_reset) * NS_PER_US,
        Profile::Paper(p) => {
            let t = u64::from(p.timer_us) * NS_PER_US;
            if min_count >= p.f { t / 2 } else { t }
        }
    }
}

/// B in bytes (0: the byte counter is off), given min(T, BC): the paper halves it in its hyper stage.
pub(super) fn byte_threshold(profile: &Profile, knobs: &Knobs, min_count: u32) -> f64 {
    match profile {
        Profile::ConnectX => knobs.byte_threshold() as f64,
        Profile::Paper(p) => {
            let b = p.byte_counter as f64;
            if min_count >= p.f { b / 2.0 } else { b }
        }
    }
}

/// T and BC: the increases since the last cut, by what triggered them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) timer: u32,
    pub(super) bytes: u32,
}

impl Counts {
    /// min(T, BC): the paper's hyper stage, the ConnectX hyper test.
    pub(super) fn low(&self) -> u32 {
        self.timer.min(self.bytes)
    }

    fn high(&self) -> u32 {
        self.timer.max(self.bytes)
    }

    fn bump(&mut self, by_timer: bool) {
        let c = if by_timer {
            &mut self.timer
        } else {
            &mut self.bytes
        };
        *c = c.saturating_add(1);
    }
}

/// The arithmetic of one increase (dcqcn.md rule 5, or the paper's): the stage, Rt's step and cap, Rc halfway
/// to Rt, and the trigger's counter moved (after the stage is chosen in the ConnectX profile, before in the
/// paper's).
pub(super) fn increase_rates(
    profile: &Profile,
    knobs: &Knobs,
    counts: &mut Counts,
    by_timer: bool,
    (rc, rt): (&mut f64, &mut f64),
    max: f64,
) -> EventKind {
    let kind = match profile {
        Profile::ConnectX => {
            let kind = if counts.low() > knobs.rpg_threshold {
                *rt += f64::from(knobs.rpg_hai_rate);
                EventKind::HyperIncrease
            } else if counts.high() >= knobs.rpg_threshold {
                *rt += f64::from(knobs.rpg_ai_rate);
                EventKind::AdditiveIncrease
            } else {
                EventKind::FastRecovery
            };
            counts.bump(by_timer);
            kind
        }
        Profile::Paper(p) => {
            counts.bump(by_timer);
            if counts.high() < p.f {
                EventKind::FastRecovery
            } else if counts.low() >= p.f {
                *rt += f64::from(counts.low() - p.f + 1) * p.hai_mbps;
                EventKind::HyperIncrease
            } else {
                *rt += p.ai_mbps;
                EventKind::AdditiveIncrease
            }
        }
    };
    *rt = rt.min(max);
    *rc = (*rc + *rt) / 2.0;
    kind
}

/// The arithmetic of one ConnectX cut (rule 4): Rt ← Rc when a clamp says so, then Rc times the cut factor,
/// no lower than the floor.
pub(super) fn cut_rates(
    knobs: &Knobs,
    counts: Counts,
    alpha: Alpha,
    (rc, rt): (&mut f64, &mut f64),
    min_rate: f64,
) {
    if knobs.clamp_tgt_rate
        || counts.bytes > 0
        || (knobs.clamp_tgt_rate_after_time_inc && counts.timer > 0)
    {
        *rt = *rc;
    }
    let factor =
        (1.0 - alpha.cut_share(knobs.rpg_gd)).max(f64::from(knobs.rpg_min_dec_fac) / 100.0);
    *rc = (*rc * factor).max(min_rate);
}

/// The paper's cut at a CNP: Rt ← Rc, Rc times 1 − alpha/2, no lower than the floor.
pub(super) fn paper_cut(alpha: Alpha, (rc, rt): (&mut f64, &mut f64), min_rate: f64) {
    *rt = *rc;
    *rc = (*rc * (1.0 - alpha.value() / 2.0)).max(min_rate);
}

/// Whether an increase that left these rates releases the limiter: Rt at the maximum and Rc within the
/// margin of it (or above it).
pub(super) fn releases(margin: Option<f64>, rc: f64, rt: f64, max: f64) -> bool {
    margin.is_some_and(|m| rt >= max && max - rc <= m)
}
