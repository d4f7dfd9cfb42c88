//! Alpha, the reaction point's congestion estimate, in the arithmetic the model was asked for: a real number
//! as dcqcn.md writes the formulas, or the NIC's 10-bit integer that truncates at every update.
//!
//! Both forms offer one update at a time (the step-by-step reference uses only these) and a run of `n` quiet
//! updates at once, which is what makes the model's cost independent of how long a flow goes without CNPs.

use super::Profile;
use super::knobs::Knobs;

/// Alpha's largest value in the ConnectX profile: 1023/1024 (the 10-bit field is full).
const CX_MAX_Q: u32 = 1023;

/// How alpha moves, fixed by the profile and knobs at the start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Rule {
    /// ConnectX with real arithmetic: a rise is `min(G/1024·a + (1024 − G)/1024, 1023/1024)`, a quiet update
    /// multiplies by `keep`.
    Float {
        rise_keep: f64,
        gain: f64,
        keep: f64,
    },
    /// ConnectX with the NIC's integer: `a` in 1/1024, a rise is `min(floor(G·a/1024) + 1024 − G, 1023)`, a
    /// quiet update is `floor(keep·a/1024)`.
    Fixed { g: u32, keep: u32 },
    /// The paper: no rise at the timer (a CNP raises alpha itself), a quiet expiry multiplies by 1 − g.
    Paper { g: f64 },
}

/// Alpha's value: a fraction, or the integer numerator over 1024.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Alpha {
    Real(f64),
    Q10(u32),
}

impl Rule {
    pub(super) fn of(profile: &Profile, knobs: &Knobs) -> Rule {
        match profile {
            Profile::Paper(p) => Rule::Paper { g: p.g },
            Profile::ConnectX => {
                let g = knobs.dce_tcp_g.min(1023);
                let keep = if knobs.alpha_decay_1024_minus_g {
                    1024 - g
                } else {
                    g
                };
                if knobs.alpha_fixed_point {
                    Rule::Fixed { g, keep }
                } else {
                    Rule::Float {
                        rise_keep: f64::from(g) / 1024.0,
                        gain: f64::from(1024 - g) / 1024.0,
                        keep: f64::from(keep) / 1024.0,
                    }
                }
            }
        }
    }

    /// Alpha at a first CNP.
    pub(super) fn initial(&self, profile: &Profile, knobs: &Knobs) -> Alpha {
        match (self, profile) {
            (Rule::Fixed { .. }, _) => Alpha::Q10(knobs.initial_alpha_value.min(CX_MAX_Q)),
            (_, Profile::Paper(p)) => Alpha::Real(p.initial_alpha),
            _ => Alpha::Real(f64::from(knobs.initial_alpha_value) / 1024.0),
        }
    }

    /// One ConnectX update that saw a CNP since the previous one (dcqcn.md rule 3, first case).
    pub(super) fn rise(&self, a: Alpha) -> Alpha {
        match (*self, a) {
            (
                Rule::Float {
                    rise_keep, gain, ..
                },
                Alpha::Real(x),
            ) => Alpha::Real((rise_keep * x + gain).min(1023.0 / 1024.0)),
            (Rule::Fixed { g, .. }, Alpha::Q10(q)) => {
                Alpha::Q10(((g * q) >> 10).saturating_add(1024 - g).min(CX_MAX_Q))
            }
            // The paper raises alpha at the CNP, never at its timer.
            (_, a) => a,
        }
    }

    /// The paper's rise, at the CNP itself: `(1 − g)·a + g`.
    pub(super) fn paper_cnp(&self, a: Alpha) -> Alpha {
        match (*self, a) {
            (Rule::Paper { g }, Alpha::Real(x)) => Alpha::Real((1.0 - g) * x + g),
            (_, a) => a,
        }
    }

    /// One update without a CNP.
    pub(super) fn decay_once(&self, a: Alpha) -> Alpha {
        match (*self, a) {
            (Rule::Float { keep, .. }, Alpha::Real(x)) => Alpha::Real(keep * x),
            (Rule::Paper { g }, Alpha::Real(x)) => Alpha::Real((1.0 - g) * x),
            (Rule::Fixed { keep, .. }, Alpha::Q10(q)) => Alpha::Q10((keep * q) >> 10),
            (_, a) => a,
        }
    }

    /// `n` updates without a CNP, in closed form.
    ///
    /// Real alpha: `a·keep^n`, one rounding (or a few, inside `powi`) where `n` updates make `n`, so the two
    /// agree to a relative 1e-12 or so rather than to the bit. The integer: truncation has no closed form,
    /// but every quiet update lowers a positive alpha below 1024 by at least one unit until it stops moving
    /// (at 0, or wherever `keep` = 1024 holds it), so at most 1,023 updates are ever computed, to the bit.
    pub(super) fn decay(&self, a: Alpha, n: u64) -> Alpha {
        if n == 0 {
            return a;
        }
        match (*self, a) {
            (Rule::Float { keep, .. }, Alpha::Real(x)) => Alpha::Real(x * powi(keep, n)),
            (Rule::Paper { g }, Alpha::Real(x)) => Alpha::Real(x * powi(1.0 - g, n)),
            (Rule::Fixed { .. }, Alpha::Q10(_)) => {
                let mut a = a;
                for _ in 0..n {
                    let next = self.decay_once(a);
                    if next == a {
                        break;
                    }
                    a = next;
                }
                a
            }
            (_, a) => a,
        }
    }
}

/// `base^n` for any `n`: beyond `i32::MAX` updates a factor below 1 has long reached 0 and 1 stays 1.
fn powi(base: f64, n: u64) -> f64 {
    match i32::try_from(n) {
        Ok(n) => base.powi(n),
        Err(_) if base >= 1.0 => base,
        Err(_) => 0.0,
    }
}

impl Alpha {
    /// As a fraction of 1.
    pub(super) fn value(&self) -> f64 {
        match *self {
            Alpha::Real(x) => x,
            Alpha::Q10(q) => f64::from(q) / 1024.0,
        }
    }

    /// The cut factor's subtrahend `alpha·1024/2^gd` (dcqcn.md rule 4). For the integer this is what the NIC
    /// computes as `rate·a >> gd`, before any rounding of the rate.
    pub(super) fn cut_share(&self, rpg_gd: u32) -> f64 {
        let shift = f64::from(1u32 << rpg_gd.min(31));
        match *self {
            Alpha::Real(x) => x * 1024.0 / shift,
            Alpha::Q10(q) => f64::from(q) / shift,
        }
    }
}
