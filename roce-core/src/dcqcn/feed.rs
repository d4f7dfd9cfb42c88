//! The reaction point fed one CNP at a time, under the guard on its work.
//!
//! The analyzer knows every CNP before it replays a flow; `roce-tracer top` learns them as the capture
//! goes. Both go through this one loop, [`super::replay_with`] included, so that the live model column and
//! `roce-analyzer dcqcn` order a CNP against the timers due before it, and stop at the guard, alike.

use super::{Event, Rp, step_guard};

/// A reaction point and the instants with events it has taken so far.
#[derive(Debug, Clone)]
pub struct Feed {
    rp: Rp,
    steps: u64,
    /// The guard; `None` sizes it from the CNPs fed so far ([`step_guard`]).
    max_steps: Option<u64>,
    cnps: usize,
    /// The guard was met: nothing more runs.
    spent: bool,
    /// The instant the guard stopped the model at, when it stopped it before the time asked for.
    stopped: Option<u64>,
}

impl Feed {
    /// `rp` before any CNP, with the guard `max_steps` (`None`: sized from the CNPs as they come).
    pub fn new(rp: Rp, max_steps: Option<u64>) -> Feed {
        Feed {
            rp,
            steps: 0,
            max_steps,
            cnps: 0,
            spent: false,
            stopped: None,
        }
    }

    /// The model as of the last call.
    pub fn rp(&self) -> &Rp {
        &self.rp
    }

    /// CNPs fed so far.
    pub fn cnps(&self) -> usize {
        self.cnps
    }

    /// The instant the guard stopped the model at, if it did.
    pub fn stopped(&self) -> Option<u64> {
        self.stopped
    }

    fn limit(&self) -> u64 {
        self.max_steps.unwrap_or_else(|| step_guard(self.cnps))
    }

    /// One step taken; true when that spends the guard.
    fn count(&mut self) -> bool {
        self.steps += 1;
        self.spent = self.steps >= self.limit();
        self.spent
    }

    /// A CNP reaching the sender at `t_ns`: every event strictly before it runs first; those due at its own
    /// instant wait for the next call, after it (rule 6).
    pub fn cnp(&mut self, t_ns: u64, emit: &mut impl FnMut(Event)) {
        if self.spent {
            return;
        }
        self.cnps += 1;
        if let Some(before) = t_ns.checked_sub(1) {
            while self.rp.step(before, emit) {
                if self.count() {
                    self.stopped = Some(self.rp.clock_ns());
                    return;
                }
            }
        }
        self.rp.on_cnp(t_ns, emit);
        if self.count() {
            // Timers due at the CNP's own instant come after it (rule 6): run them, so that the replay is
            // complete up to and including the instant it stops at.
            let now = self.rp.clock_ns();
            self.rp.advance(now, emit);
            self.stopped = Some(now);
        }
    }

    /// Runs every event up to and including `t_ns`.
    pub fn advance(&mut self, t_ns: u64, emit: &mut impl FnMut(Event)) {
        if self.spent {
            return;
        }
        while self.rp.step(t_ns, emit) {
            if self.count() {
                self.stopped = self
                    .rp
                    .next_event_ns()
                    .filter(|&t| t <= t_ns)
                    .map(|_| self.rp.clock_ns());
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dcqcn::{Knobs, Profile, replay};

    /// `top` feeds the model a CNP at a time and moves it on between them, at instants the CNPs do not
    /// choose (bins closing): that must make the events a replay of all the CNPs at once makes.
    #[test]
    fn fed_piecemeal_it_makes_the_replays_events() {
        const US: u64 = 1_000;
        let cnps: Vec<u64> = [3, 4, 9, 50, 52, 53, 400, 401, 2_000, 2_003]
            .iter()
            .map(|t| t * US)
            .collect();
        let end = 5_000 * US;
        let knobs = Knobs::default();
        let whole = replay(Profile::ConnectX, &knobs, 25_000.0, &cnps, end).unwrap();
        for step in [1, 7 * US, 50 * US + 1, 333 * US] {
            let mut feed = Feed::new(Rp::new(Profile::ConnectX, &knobs, 25_000.0).unwrap(), None);
            let mut got = Vec::new();
            let mut t = 0;
            for &c in &cnps {
                // Bins closing before the CNP, at the CNP's own instant minus one, never at or after it.
                while t + step < c {
                    t += step;
                    feed.advance(t, &mut |e| got.push(e));
                }
                feed.cnp(c, &mut |e| got.push(e));
            }
            feed.advance(end, &mut |e| got.push(e));
            assert_eq!(got, whole, "moved on every {step} ns");
            assert_eq!(feed.cnps(), cnps.len());
            assert_eq!(feed.stopped(), None);
        }
        assert!(whole.iter().any(|e| e.kind == crate::dcqcn::EventKind::Cut));
    }

    #[test]
    fn the_guard_stops_it_where_the_replay_stops() {
        let knobs = Knobs::default();
        let rp = || Rp::new(Profile::ConnectX, &knobs, 100_000.0).unwrap();
        let cnps = [10_000, 20_000, 30_000];
        let stop = crate::dcqcn::replay_with(rp(), &cnps, 10_000_000, 5, |_| {});
        let mut feed = Feed::new(rp(), Some(5));
        for &c in &cnps {
            feed.cnp(c, &mut |_| {});
        }
        feed.advance(10_000_000, &mut |_| {});
        assert!(stop.is_some());
        assert_eq!(feed.stopped(), stop);
    }
}
