//! The step-by-step replay: dcqcn.md read literally, every timer firing at every tick of its grid, alpha
//! updated one tick at a time, no event ever skipped. Slow (a tick per µs per flow), plain, and the reference
//! that the event-driven [`super::Rp`] is proven against.
//!
//! It shares only the arithmetic of single steps with the model (one alpha update, [`Rule::rise`] and
//! [`Rule::decay_once`]; one cut; one increase; the release test) and the byte counter, whose instants are tested
//! on their own: what is proven is when the model applies them, and how many quiet alpha updates it folds into
//! one.

use super::alpha::{Alpha, Rule};
use super::bytes::ByteCounter;
use super::rp::{
    Counts, NEVER, NS_PER_US, byte_threshold, cut_rates, inc_period, increase_rates, paper_cut,
    releases,
};
use super::{Cause, Event, EventKind, Knobs, Profile};

pub(super) struct Stepwise {
    profile: Profile,
    knobs: Knobs,
    rule: Rule,
    line: f64,
    max: f64,
    min_rate: f64,
    release_margin: Option<f64>,
    rc: f64,
    rt: f64,
    alpha: Alpha,
    counts: Counts,
    bytes: ByteCounter,
    cnp_alpha: bool,
    cnp_dec: bool,
    active: bool,
    clock: u64,
    alpha_period: u64,
    dec_period: u64,
    alpha_next: u64,
    dec_next: u64,
    inc_next: u64,
    byte_next: u64,
}

impl Stepwise {
    pub(super) fn new(profile: Profile, knobs: &Knobs, line: f64) -> Stepwise {
        let (min_rate, alpha_period, dec_period) = match &profile {
            Profile::ConnectX => (
                f64::from(knobs.rpg_min_rate),
                u64::from(knobs.dce_tcp_rtt) * NS_PER_US,
                u64::from(knobs.rate_reduce_monitor_period) * NS_PER_US,
            ),
            Profile::Paper(p) => (
                p.min_rate_mbps,
                u64::from(p.alpha_timer_us) * NS_PER_US,
                NEVER,
            ),
        };
        let rule = Rule::of(&profile, knobs);
        Stepwise {
            alpha: rule.initial(&profile, knobs),
            rule,
            profile,
            knobs: knobs.clone(),
            line,
            max: knobs.max_rate_mbps(line),
            min_rate: min_rate.min(line),
            release_margin: knobs
                .release_at_max
                .then(|| f64::from(knobs.release_margin_kbps) / 1000.0),
            rc: line,
            rt: line,
            counts: Counts::default(),
            bytes: ByteCounter::reset(0),
            cnp_alpha: false,
            cnp_dec: false,
            active: false,
            clock: 0,
            alpha_period,
            dec_period,
            alpha_next: NEVER,
            dec_next: NEVER,
            inc_next: NEVER,
            byte_next: NEVER,
        }
    }

    /// Every event of the CNPs (sorted) up to `end`.
    pub(super) fn replay(mut self, cnps: &[u64], end: u64) -> Vec<Event> {
        let mut out = Vec::new();
        let mut emit = |e: Event| out.push(e);
        for &t in cnps.iter().take_while(|&&t| t <= end) {
            if t > self.clock {
                self.advance(t - 1, &mut emit);
                self.clock = t;
            }
            self.cnp(self.clock, &mut emit);
        }
        self.advance(end, &mut emit);
        out
    }

    fn advance(&mut self, t: u64, emit: &mut impl FnMut(Event)) {
        loop {
            let next = self
                .alpha_next
                .min(self.dec_next)
                .min(self.inc_next)
                .min(self.byte_next);
            if next == NEVER || next > t {
                break;
            }
            self.clock = self.clock.max(next);
            self.fire(next, emit);
        }
        self.clock = self.clock.max(t);
    }

    /// Rule 6: alpha update, decrease check, increase timer, byte event.
    fn fire(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        if self.alpha_next == now {
            self.alpha_next = now.saturating_add(self.alpha_period);
            self.alpha = if self.cnp_alpha {
                self.rule.rise(self.alpha)
            } else {
                self.rule.decay_once(self.alpha)
            };
            self.cnp_alpha = false;
        }
        if self.dec_next == now {
            self.dec_next = now.saturating_add(self.dec_period);
            if self.cnp_dec {
                self.cut(now, emit);
            }
        }
        if self.inc_next == now {
            self.increase(now, Cause::IncreaseTimer, emit);
        }
        if self.byte_next == now {
            self.increase(now, Cause::ByteCounter, emit);
        }
    }

    fn event(&self, t_ns: u64, kind: EventKind, cause: Cause, before: f64) -> Event {
        Event {
            t_ns,
            kind,
            cause,
            rc_mbps: self.rc,
            rt_mbps: self.rt,
            alpha: self.alpha.value(),
            rc_before_mbps: before,
        }
    }

    fn cnp(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        if let Profile::Paper(_) = self.profile {
            let kind = if self.active {
                EventKind::Cnp
            } else {
                self.active = true;
                self.alpha = self.rule.initial(&self.profile, &self.knobs);
                EventKind::FirstCnp
            };
            emit(self.event(now, kind, Cause::Cnp, before));
            paper_cut(self.alpha, (&mut self.rc, &mut self.rt), self.min_rate);
            self.alpha = self.rule.paper_cnp(self.alpha);
            self.counts = Counts::default();
            self.inc_next = now.saturating_add(self.inc_period());
            self.alpha_next = now.saturating_add(self.alpha_period);
            self.bytes = ByteCounter::reset(now);
            self.schedule_bytes();
            emit(self.event(now, EventKind::Cut, Cause::Cnp, before));
            return;
        }
        if self.active {
            self.cnp_alpha = true;
            self.cnp_dec = true;
            emit(self.event(now, EventKind::Cnp, Cause::Cnp, before));
            return;
        }
        let k = self.knobs.clone();
        self.active = true;
        self.alpha = self.rule.initial(&self.profile, &k);
        if k.rate_to_set_on_first_cnp > 0 {
            self.rc = f64::from(k.rate_to_set_on_first_cnp).min(self.line);
            self.rt = self.rc;
        }
        self.cnp_alpha = false;
        self.cnp_dec = k.first_cnp_cuts;
        self.counts = Counts::default();
        self.alpha_next = now.saturating_add(self.alpha_period);
        self.dec_next = now.saturating_add(self.dec_period);
        self.inc_next = now.saturating_add(self.inc_period());
        self.bytes = ByteCounter::reset(now);
        self.schedule_bytes();
        emit(self.event(now, EventKind::FirstCnp, Cause::Cnp, before));
    }

    fn cut(&mut self, now: u64, emit: &mut impl FnMut(Event)) {
        let before = self.rc;
        cut_rates(
            &self.knobs,
            self.counts,
            self.alpha,
            (&mut self.rc, &mut self.rt),
            self.min_rate,
        );
        self.cnp_dec = false;
        self.counts = Counts::default();
        self.inc_next = now.saturating_add(self.inc_period());
        self.bytes = ByteCounter::reset(now);
        self.schedule_bytes();
        emit(self.event(now, EventKind::Cut, Cause::DecreaseTimer, before));
    }

    fn increase(&mut self, now: u64, cause: Cause, emit: &mut impl FnMut(Event)) {
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
            let before = self.rc;
            self.active = false;
            self.rc = self.line;
            self.rt = self.line;
            self.cnp_alpha = false;
            self.cnp_dec = false;
            self.counts = Counts::default();
            self.alpha_next = NEVER;
            self.dec_next = NEVER;
            self.inc_next = NEVER;
            self.byte_next = NEVER;
            emit(self.event(now, EventKind::Released, cause, before));
        }
    }

    fn inc_period(&self) -> u64 {
        inc_period(&self.profile, &self.knobs, self.counts.low())
    }

    fn byte_threshold(&self) -> f64 {
        byte_threshold(&self.profile, &self.knobs, self.counts.low())
    }

    fn schedule_bytes(&mut self) {
        self.byte_next = if self.active {
            self.bytes
                .due(self.rc, self.byte_threshold())
                .unwrap_or(NEVER)
        } else {
            NEVER
        };
    }
}
