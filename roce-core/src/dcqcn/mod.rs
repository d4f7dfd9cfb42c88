//! The DCQCN reaction point (the sender NIC's rate limiter), as specified in docs/dcqcn.md.
//!
//! One [`Rp`] models one sender QP. The analyzer [`replay`]s the CNP arrival times a capture shows and reads
//! every event the model makes. The simulator has a reaction point of its own, written apart from this one, so
//! that its ground truth can prove this model wrong.
//!
//! The model is event-driven: it costs the CNPs it is given and the rate changes it makes, not the ticks of
//! its timers (alpha is brought forward in closed form between the events that read it; see `rp.rs`). A
//! step-by-step replay that walks every tick is kept in the tests, and a property test holds the two equal.
//!
//! Time is integer nanoseconds: every timer period is a whole number of µs, so timer grids are exact and events at
//! "the same instant" really compare equal, which rule 6 (CNP, alpha update, decrease check, increase timer, byte
//! event) depends on. Rates are f64 Mb/s (bits per µs); alpha is a real number, or, with
//! [`Knobs::alpha_fixed_point`], the NIC's 10-bit integer.
//!
//! Choices dcqcn.md leaves open, and what this model does (each an option where it matters, see [`Knobs`]):
//! - Before its first CNP a flow is inactive at Rc = Rt = line: no timers, no byte counting, no events.
//! - Rt never exceeds `rpg_max_rate` (the line rate when 0). Once an increase brings Rc back within
//!   `release_margin_kbps` of it, the limiter is released (`release_at_max`, default on): Rc = Rt = line, the
//!   timers stop, and the next CNP is a first CNP again.
//! - The byte counter starts at 0 at the first CNP and counts Rc·dt/8 (a backlogged sender). A byte event lies
//!   at the first whole nanosecond at which the count reaches B; what accrued past B in that fraction of a
//!   nanosecond counts toward the next event, so the rounding never accumulates.
//! - Rates set from knobs (`rate_to_set_on_first_cnp`, `rpg_min_rate`, the paper floor) are clamped to the line
//!   rate; in the paper profile Rt is clamped to the maximum after an increase, as in the ConnectX profile.
//! - A CNP earlier than the model's clock (unsorted input, or a CNP given after `advance` went past it) is applied
//!   at the clock: the model never goes back in time.

#![warn(missing_docs)]

mod alpha;
mod bytes;
mod feed;
mod knobs;
#[cfg(test)]
mod reference;
mod rp;
#[cfg(test)]
mod tests;

pub use feed::Feed;
pub use knobs::{DcqcnError, EcnConfig, KnobEntry, Knobs, NpKnobs, PaperParams, PriorityEnable};
pub use rp::Rp;

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
    /// `release_at_max`, `release_margin_kbps` and `rpg_max_rate`.
    Paper(PaperParams),
}

impl Profile {
    /// The paper profile with the defaults of dcqcn.md.
    pub fn paper() -> Profile {
        Profile::Paper(PaperParams::default())
    }

    /// Parses the `--dcqcn-profile` value, any case: `connectx`, `connectx-fixed` (ConnectX with the NIC's
    /// integer alpha: sets [`Knobs::alpha_fixed_point`] in `knobs`) or `paper`.
    pub fn from_name(name: &str, knobs: &mut Knobs) -> Result<Profile, DcqcnError> {
        match name.trim().to_ascii_lowercase().as_str() {
            "connectx" | "cx" | "mlx" => Ok(Profile::ConnectX),
            "connectx-fixed" | "cx-fixed" => {
                knobs.alpha_fixed_point = true;
                Ok(Profile::ConnectX)
            }
            "paper" => Ok(Profile::paper()),
            _ => Err(DcqcnError::UnknownProfile(name.to_string())),
        }
    }

    /// The profile's name as `--dcqcn-profile` takes it, the alpha arithmetic included.
    pub fn label(&self, knobs: &Knobs) -> &'static str {
        match self {
            Profile::ConnectX if knobs.alpha_fixed_point => "connectx-fixed",
            Profile::ConnectX => "connectx",
            Profile::Paper(_) => "paper",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A CNP reached an inactive flow and engaged its limiter.
    FirstCnp,
    /// A CNP reached an active flow.
    Cnp,
    /// A rate cut; [`Event::rc_before_mbps`] is the rate before it.
    Cut,
    /// An increase that moved Rc halfway to an unchanged Rt.
    FastRecovery,
    /// An increase that first raised Rt by the additive step.
    AdditiveIncrease,
    /// An increase that first raised Rt by the hyper step.
    HyperIncrease,
    /// The limiter was released at the maximum rate (see [`Knobs::release_at_max`]): the flow is back at the
    /// line rate and inactive.
    Released,
}

impl EventKind {
    /// Whether the event is one of the three increases.
    pub fn is_increase(&self) -> bool {
        matches!(
            self,
            EventKind::FastRecovery | EventKind::AdditiveIncrease | EventKind::HyperIncrease
        )
    }
}

/// What triggered an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A CNP arrived.
    Cnp,
    /// The decrease check found a CNP since the last one.
    DecreaseTimer,
    /// The increase timer expired.
    IncreaseTimer,
    /// The byte counter reached its threshold.
    ByteCounter,
}

/// One step of the state machine, with the state right after it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Event {
    /// When, ns (the capture's clock, shifted by any CNP delay the caller applied).
    pub t_ns: u64,
    /// What happened.
    pub kind: EventKind,
    /// Why.
    pub cause: Cause,
    /// Rc after the event.
    pub rc_mbps: f64,
    /// Rt after the event.
    pub rt_mbps: f64,
    /// Alpha after the event (and after every alpha update up to its instant), as a fraction.
    pub alpha: f64,
    /// Rc just before the event: differs from `rc_mbps` for cuts and increases.
    pub rc_before_mbps: f64,
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
    let mut out = Vec::new();
    replay_with(
        Rp::new(profile, knobs, line_mbps)?,
        cnp_times_ns,
        end_ns,
        u64::MAX,
        |e| out.push(e),
    );
    Ok(out)
}

/// How many instants with events [`replay_with`] allows a flow with `cnps` CNPs by default.
///
/// Only a guard: the model's work is bounded by its CNPs and by the increases that bring the rate back after
/// each (at most a few thousand even from the floor, and the limiter is then released or saturated, so that
/// time without CNPs costs nothing). A flow that meets this bound has knobs whose increases can never reach the
/// maximum (no additive step) over a span no capture has: a timestamp gone wrong.
pub fn step_guard(cnps: usize) -> u64 {
    10_000_000u64.saturating_add((cnps as u64).saturating_mul(10_000))
}

/// Replays `rp` over the CNPs (sorted first if they are not) up to `end_ns`, handing each event to `emit` as it
/// is made, and running at most `max_steps` instants with events (CNPs included).
///
/// Returns `None` when the replay reached `end_ns`, or the instant it stopped at when the steps ran out: every
/// event up to and including that instant was emitted, none after it.
pub fn replay_with(
    rp: Rp,
    cnp_times_ns: &[u64],
    end_ns: u64,
    max_steps: u64,
    mut emit: impl FnMut(Event),
) -> Option<u64> {
    let sorted;
    let mut times = cnp_times_ns;
    if !times.is_sorted() {
        let mut v = times.to_vec();
        v.sort_unstable();
        sorted = v;
        times = &sorted;
    }
    let mut feed = Feed::new(rp, Some(max_steps));
    for &t in times.iter().take_while(|&&t| t <= end_ns) {
        feed.cnp(t, &mut emit);
        if let Some(stop) = feed.stopped() {
            return Some(stop);
        }
    }
    feed.advance(end_ns, &mut emit);
    feed.stopped()
}
