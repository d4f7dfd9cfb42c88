//! The ConnectX reaction-point knobs, by their sysfs names, and the paper profile's parameters.
//!
//! One table drives the struct, its defaults, `set` and the listing, so a knob cannot be parsed under one name and
//! documented under another.

use serde::Serialize;
use thiserror::Error;

/// Why a knob, a knob file or a model parameter was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DcqcnError {
    /// The name is not one of [`Knobs::NAMES`].
    #[error("unknown DCQCN knob `{name}` (known: {known})")]
    UnknownKnob { name: String, known: String },
    /// The value is not an integer inside the knob's range.
    #[error(
        "bad value `{value}` for DCQCN knob `{name}`: expected an integer in {min}..={max}{unit}"
    )]
    BadValue {
        name: &'static str,
        value: String,
        min: u64,
        max: u64,
        unit: &'static str,
    },
    /// A line of a knob file that is neither `name=value` nor `name value`.
    #[error("expected `name=value` or `name value`, found `{text}`")]
    Syntax { text: String },
    /// An error in a knob file, with the 1-based line it came from.
    #[error("knob file line {line}: {source}")]
    AtLine {
        line: usize,
        #[source]
        source: Box<DcqcnError>,
    },
    /// The model cannot run with these settings (a zero period would never let time advance).
    #[error("invalid DCQCN setting: {0}")]
    Invalid(String),
    /// `--dcqcn-profile` named something other than `connectx` or `paper`.
    #[error("unknown DCQCN profile `{0}` (known: connectx, paper)")]
    UnknownProfile(String),
}

/// Knob values are stored in their natural Rust type but travel as sysfs integers.
trait KnobValue: Copy {
    fn to_u64(self) -> u64;
    fn from_u64(v: u64) -> Self;
}

impl KnobValue for u32 {
    fn to_u64(self) -> u64 {
        u64::from(self)
    }
    fn from_u64(v: u64) -> Self {
        // `set` checks the range before converting; saturate rather than wrap if a table entry is ever wrong.
        u32::try_from(v).unwrap_or(u32::MAX)
    }
}

impl KnobValue for bool {
    fn to_u64(self) -> u64 {
        u64::from(self)
    }
    fn from_u64(v: u64) -> Self {
        v != 0
    }
}

/// One row of the knob listing, for `--help`-style documentation and for reports that show the knob source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KnobEntry {
    pub name: &'static str,
    pub value: u64,
    pub unit: &'static str,
    pub min: u64,
    pub max: u64,
    pub meaning: &'static str,
}

struct Spec {
    name: &'static str,
    unit: &'static str,
    min: u64,
    max: u64,
    meaning: &'static str,
    get: fn(&Knobs) -> u64,
    put: fn(&mut Knobs, u64),
}

const U32_MAX: u64 = u32::MAX as u64;
/// Rates above 1 Tb/s are certainly typos; the model clamps every rate to the line rate anyway.
const MAX_RATE: u64 = 1_000_000;

macro_rules! knobs {
    ($( $(#[$doc:meta])* $field:ident : $ty:ty = $default:expr, $min:expr, $max:expr, $unit:expr, $meaning:expr; )*) => {
        /// The reaction-point knobs of a ConnectX NIC, named like the files under
        /// `/sys/class/net/<if>/ecn/roce_rp/`, plus two model options that have no sysfs file.
        ///
        /// Times are whole microseconds and rates whole Mb/s because that is how the NIC takes them; a knob file
        /// recorded by the tracer therefore parses without conversion.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
        pub struct Knobs {
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl Default for Knobs {
            fn default() -> Self {
                Knobs { $( $field: $default, )* }
            }
        }

        const SPECS: &[Spec] = &[
            $( Spec {
                name: stringify!($field),
                unit: $unit,
                min: $min,
                max: $max,
                meaning: $meaning,
                get: |k| KnobValue::to_u64(k.$field),
                put: |k, v| k.$field = KnobValue::from_u64(v),
            }, )*
        ];

        impl Knobs {
            /// Every name `set` accepts, in table order.
            pub const NAMES: &'static [&'static str] = &[ $( stringify!($field), )* ];
        }
    };
}

knobs! {
    /// G in g = (1024 − G)/1024: the closer to 1024, the slower alpha moves.
    dce_tcp_g: u32 = 1019, 0, 1023, "", "alpha gain G; g = (1024-G)/1024";
    /// Alpha update period, µs.
    dce_tcp_rtt: u32 = 1, 1, 131_071, " us", "alpha update period";
    /// Alpha at the first CNP, in 1/1024.
    initial_alpha_value: u32 = 1023, 0, 1023, " /1024", "alpha at the first CNP, in 1/1024";
    /// Rc = Rt = this (clamped to the line rate) at the first CNP, Mb/s; 0 keeps the current rate.
    rate_to_set_on_first_cnp: u32 = 0, 0, MAX_RATE, " Mb/s", "Rc = Rt = this at the first CNP; 0 keeps the rate";
    /// Cut factor is alpha·1024/2^rpg_gd, so 11 halves alpha's effect.
    rpg_gd: u32 = 11, 1, 15, "", "cut factor is alpha*1024/2^rpg_gd (11: alpha/2)";
    /// A single cut keeps at least this percentage of Rc.
    rpg_min_dec_fac: u32 = 50, 0, 100, " %", "a single cut keeps at least this share of Rc";
    /// Floor of Rc, Mb/s (clamped to the line rate).
    rpg_min_rate: u32 = 1, 1, MAX_RATE, " Mb/s", "floor of Rc";
    /// Period of the decrease check, µs; the grid is anchored at the first CNP.
    rate_reduce_monitor_period: u32 = 4, 1, U32_MAX, " us", "decrease-check period";
    /// Always Rt ← Rc on a cut.
    clamp_tgt_rate: bool = false, 0, 1, "", "1: always Rt <- Rc on a cut";
    /// Rt ← Rc on a cut when a timer increase happened since the previous cut.
    clamp_tgt_rate_after_time_inc: bool = true, 0, 1, "", "1: Rt <- Rc on a cut if a timer increase happened since the last cut";
    /// Increase timer period, µs.
    rpg_time_reset: u32 = 300, 1, U32_MAX, " us", "increase timer period";
    /// Byte counter threshold in units of 64 bytes; 0 switches byte-counter increases off.
    rpg_byte_reset: u32 = 32_767, 0, U32_MAX, " x64 B", "byte counter threshold, in 64-byte units (0: off)";
    /// F, the number of increase events that moves recovery to the next stage.
    rpg_threshold: u32 = 1, 0, 31, "", "F, the stage threshold";
    /// Additive increase step of Rt, Mb/s.
    rpg_ai_rate: u32 = 5, 0, MAX_RATE, " Mb/s", "additive increase step";
    /// Hyper increase step of Rt, Mb/s.
    rpg_hai_rate: u32 = 50, 0, MAX_RATE, " Mb/s", "hyper increase step";
    /// Whether the first CNP of an inactive flow arms a cut (dcqcn.md rule 1). Model option, default 1.
    first_cnp_cuts: bool = true, 0, 1, "", "model: 1 = the first CNP leads to a cut at the next decrease tick";
    /// Model option, default 0. dcqcn.md never makes a flow inactive again, so by default the timers keep running
    /// forever once a flow saw a CNP (a fast recovery at line rate changes nothing). With 1, the flow goes back to
    /// inactive (Rc = Rt = line, timers stopped, next CNP is a first CNP) as soon as an increase leaves Rt at line
    /// and Rc within one part in 10^9 of it, which saves the simulator the idle timer events.
    deactivate_at_line: bool = false, 0, 1, "", "model: 1 = a flow back at line rate becomes inactive again";
}

impl Knobs {
    /// Sets one knob from its sysfs text, e.g. `set("rpg_gd", "11")`.
    ///
    /// A path such as `roce_rp/rpg_gd` is accepted too, because that is how a recorded sysfs dump names it.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), DcqcnError> {
        let key = name.trim();
        let key = key.rsplit('/').next().unwrap_or(key);
        let spec = SPECS
            .iter()
            .find(|s| s.name == key)
            .ok_or_else(|| DcqcnError::UnknownKnob {
                name: key.to_string(),
                known: Knobs::NAMES.join(", "),
            })?;
        let text = value.trim();
        let v = text
            .parse::<u64>()
            .ok()
            .filter(|v| (spec.min..=spec.max).contains(v))
            .ok_or_else(|| DcqcnError::BadValue {
                name: spec.name,
                value: text.to_string(),
                min: spec.min,
                max: spec.max,
                unit: spec.unit,
            })?;
        (spec.put)(self, v);
        Ok(())
    }

    /// The defaults overridden by a knob file (see [`Knobs::apply_kv_text`]).
    pub fn from_kv_text(text: &str) -> Result<Knobs, DcqcnError> {
        let mut k = Knobs::default();
        k.apply_kv_text(text)?;
        Ok(k)
    }

    /// Applies `name=value` or `name value` lines on top of the current values, so that a run can layer
    /// defaults, the tracer's recorded file and CLI overrides. `#` starts a comment; blank lines are skipped.
    pub fn apply_kv_text(&mut self, text: &str) -> Result<(), DcqcnError> {
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |source: DcqcnError| DcqcnError::AtLine {
                line: i + 1,
                source: Box::new(source),
            };
            let (name, value) = line
                .split_once('=')
                .or_else(|| line.split_once(char::is_whitespace))
                .ok_or_else(|| {
                    at(DcqcnError::Syntax {
                        text: line.to_string(),
                    })
                })?;
            self.set(name, value).map_err(at)?;
        }
        Ok(())
    }

    /// Every knob with its current value, unit, range and meaning, in table order.
    pub fn list(&self) -> impl Iterator<Item = KnobEntry> + '_ {
        SPECS.iter().map(move |s| KnobEntry {
            name: s.name,
            value: (s.get)(self),
            unit: s.unit.trim(),
            min: s.min,
            max: s.max,
            meaning: s.meaning,
        })
    }

    /// Catches values that bypassed `set` (the fields are public) and would stall the model.
    pub fn validate(&self) -> Result<(), DcqcnError> {
        for e in self.list() {
            if !(e.min..=e.max).contains(&e.value) {
                return Err(DcqcnError::Invalid(format!(
                    "{} = {} is outside {}..={}",
                    e.name, e.value, e.min, e.max
                )));
            }
        }
        Ok(())
    }
}

/// Parameters of the paper profile (Zhu et al., SIGCOMM 2015), defaults as in dcqcn.md.
///
/// Floats where the paper uses real numbers; periods in whole µs so the timer grid stays exact in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PaperParams {
    /// Alpha gain g (default 1/256).
    pub g: f64,
    /// Alpha when a flow gets its first CNP (default 1).
    pub initial_alpha: f64,
    /// F, the stage threshold (default 5).
    pub f: u32,
    /// R_AI, additive increase step, Mb/s (default 40).
    pub ai_mbps: f64,
    /// R_HAI, hyper increase step, Mb/s (default 200).
    pub hai_mbps: f64,
    /// Floor of Rc, Mb/s (default 100; clamped to the line rate).
    pub min_rate_mbps: f64,
    /// T, the increase timer period, µs (default 55). In the hyper stage (min(T, BC) ≥ F) the timer is re-armed
    /// with half the period (integer ns); a timer already armed when a byte event enters that stage keeps its
    /// instant, because the paper only says the period halves, not that a running timer is shortened.
    pub timer_us: u32,
    /// K, the alpha timer period, µs (default 55).
    pub alpha_timer_us: u32,
    /// B, bytes between byte-counter increases (default 10 MB = 10^7 bytes; 0 = off). Halved in the hyper stage,
    /// immediately: the bytes already counted are compared with B/2 from the event that entered the stage.
    pub byte_counter: u64,
}

impl Default for PaperParams {
    fn default() -> Self {
        PaperParams {
            g: 1.0 / 256.0,
            initial_alpha: 1.0,
            f: 5,
            ai_mbps: 40.0,
            hai_mbps: 200.0,
            min_rate_mbps: 100.0,
            timer_us: 55,
            alpha_timer_us: 55,
            byte_counter: 10_000_000,
        }
    }
}

impl PaperParams {
    /// Refuses values that would stall or poison the model (zero periods, NaN, alpha or g outside 0..=1).
    pub fn validate(&self) -> Result<(), DcqcnError> {
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        let rate = |x: f64| x.is_finite() && x >= 0.0;
        if !unit(self.g) || !unit(self.initial_alpha) {
            return Err(DcqcnError::Invalid(
                "paper g and initial alpha must be in 0..=1".into(),
            ));
        }
        if !rate(self.ai_mbps) || !rate(self.hai_mbps) || !rate(self.min_rate_mbps) {
            return Err(DcqcnError::Invalid(
                "paper rates must be finite and >= 0".into(),
            ));
        }
        if self.timer_us == 0 || self.alpha_timer_us == 0 {
            return Err(DcqcnError::Invalid(
                "paper timer periods must be >= 1 us".into(),
            ));
        }
        Ok(())
    }
}
