//! The ConnectX congestion-control knobs by their sysfs names, at both ends: the reaction point's
//! (`roce_rp/`, [`Knobs`], with the model's own options) and the notification point's (`roce_np/`,
//! [`NpKnobs`]), each with its per-priority `enable/N` ([`PriorityEnable`]); [`EcnConfig`] holds one NIC's
//! whole set. And the paper profile's parameters.
//!
//! One table per struct drives its fields, defaults, `set` and the listing, so a knob cannot be parsed under
//! one name and documented under another.

use serde::Serialize;
use thiserror::Error;

/// Why a knob, a knob file or a model parameter was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DcqcnError {
    /// The name is not one of the known knobs.
    #[error("unknown DCQCN knob `{name}` (known: {known})")]
    UnknownKnob {
        /// The name as given.
        name: String,
        /// Every name accepted there, for the message.
        known: String,
    },
    /// The value is not an integer inside the knob's range.
    #[error(
        "bad value `{value}` for DCQCN knob `{name}`: expected an integer in {min}..={max}{unit}"
    )]
    BadValue {
        /// The knob.
        name: &'static str,
        /// The value as given.
        value: String,
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
        /// The knob's unit, with a leading space, or empty.
        unit: &'static str,
    },
    /// A line of a knob file that is neither `name=value` nor `name value`.
    #[error("expected `name=value` or `name value`, found `{text}`")]
    Syntax {
        /// The line, trimmed.
        text: String,
    },
    /// An error in a knob file, with the 1-based line it came from. The line's error is part of the
    /// message, not a source: the analysis quotes refused knobs with their `Display`.
    #[error("knob file line {line}: {error}")]
    AtLine {
        /// 1-based line number.
        line: usize,
        /// What was wrong with it.
        error: Box<DcqcnError>,
    },
    /// The model cannot run with these settings (a zero period would never let time advance).
    #[error("invalid DCQCN setting: {0}")]
    Invalid(String),
    /// `--dcqcn-profile` named something other than `connectx`, `connectx-fixed` or `paper`.
    #[error("unknown DCQCN profile `{0}` (known: connectx, connectx-fixed, paper)")]
    UnknownProfile(String),
    /// The CE marks and CNPs the notification point's check needs could not be read back from the temporary
    /// file they were kept in while the capture was read (the check would see part of them).
    #[error(
        "reading back the CE marks and CNPs kept in a temporary file (in TMPDIR) failed: {0}; \
         check that the temporary directory is writable and has room"
    )]
    Spill(String),
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

/// One row of a knob listing, for `--help`-style documentation and for reports that show the knob source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KnobEntry {
    /// The sysfs name (or, for a model option, the name `--set` takes).
    pub name: &'static str,
    /// The current value, as sysfs writes it (booleans 0/1).
    pub value: u64,
    /// The unit, or empty.
    pub unit: &'static str,
    /// The smallest value accepted.
    pub min: u64,
    /// The largest value accepted.
    pub max: u64,
    /// What the knob does, in a few words.
    pub meaning: &'static str,
}

/// One knob of a table: how to read and write it in its struct.
struct Spec<T> {
    name: &'static str,
    unit: &'static str,
    min: u64,
    max: u64,
    meaning: &'static str,
    get: fn(&T) -> u64,
    put: fn(&mut T, u64),
}

/// What every knob table can do, from its specs alone.
trait Table: Sized + 'static {
    const SPECS: &'static [Spec<Self>];

    fn names() -> String {
        Self::SPECS
            .iter()
            .map(|s| s.name)
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn spec(name: &str) -> Option<&'static Spec<Self>> {
        Self::SPECS.iter().find(|s| s.name == name)
    }

    fn set_value(&mut self, name: &str, value: &str) -> Result<(), DcqcnError> {
        let spec = Self::spec(name).ok_or_else(|| DcqcnError::UnknownKnob {
            name: name.to_string(),
            known: Self::names(),
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

    fn entries(&self) -> impl Iterator<Item = KnobEntry> + '_ {
        Self::SPECS.iter().map(move |s| KnobEntry {
            name: s.name,
            value: (s.get)(self),
            unit: s.unit.trim(),
            min: s.min,
            max: s.max,
            meaning: s.meaning,
        })
    }

    fn check(&self) -> Result<(), DcqcnError> {
        for e in self.entries() {
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

const U32_MAX: u64 = u32::MAX as u64;
/// Rates above 1 Tb/s are certainly typos; the model clamps every rate to the line rate anyway.
const MAX_RATE: u64 = 1_000_000;

macro_rules! knob_table {
    ($(#[$sdoc:meta])* $name:ident {
        $( $(#[$doc:meta])* $field:ident : $ty:ty = $default:expr, $min:expr, $max:expr, $unit:expr, $meaning:expr; )*
    }) => {
        $(#[$sdoc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
        pub struct $name {
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }

        impl Table for $name {
            const SPECS: &'static [Spec<Self>] = &[
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
        }

        impl $name {
            /// Every name `set` accepts, in table order.
            pub const NAMES: &'static [&'static str] = &[ $( stringify!($field), )* ];

            /// Every knob with its current value, unit, range and meaning, in table order.
            pub fn list(&self) -> impl Iterator<Item = KnobEntry> + '_ {
                self.entries()
            }

            /// Catches values that bypassed `set` (the fields are public).
            pub fn validate(&self) -> Result<(), DcqcnError> {
                self.check()
            }
        }
    };
}

knob_table! {
    /// The reaction-point knobs of a ConnectX NIC, named like the files under
    /// `/sys/class/net/<if>/ecn/roce_rp/`, plus the options of the model where the DCQCN description or
    /// NVIDIA's text leave a choice (see docs/dcqcn.md).
    ///
    /// Times are whole microseconds and rates whole Mb/s because that is how the NIC takes them; a knob file
    /// recorded by the tracer therefore parses without conversion.
    Knobs {
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
        /// Byte counter threshold in units of `rpg_byte_reset_unit` bytes; 0 switches byte-counter increases off.
        rpg_byte_reset: u32 = 32_767, 0, U32_MAX, " units", "byte counter threshold, in units of rpg_byte_reset_unit bytes (0: off)";
        /// F, the number of increase events that moves recovery to the next stage.
        rpg_threshold: u32 = 1, 0, 31, "", "F, the stage threshold";
        /// Additive increase step of Rt, Mb/s.
        rpg_ai_rate: u32 = 5, 0, MAX_RATE, " Mb/s", "additive increase step";
        /// Hyper increase step of Rt, Mb/s.
        rpg_hai_rate: u32 = 50, 0, MAX_RATE, " Mb/s", "hyper increase step";
        /// The highest rate the limiter lets Rt reach, Mb/s, where it is released (see `release_at_max`);
        /// 0 means the line rate. A value above the line rate is the line rate.
        rpg_max_rate: u32 = 0, 0, MAX_RATE, " Mb/s", "Rt's ceiling, where the limiter is released; 0: the line rate";
        /// Whether the first CNP of an inactive flow arms a cut (dcqcn.md rule 1). Model option, default 1.
        first_cnp_cuts: bool = true, 0, 1, "", "model: 1 = the first CNP leads to a cut at the next decrease tick";
        /// Model option, default 1, after NVIDIA's text for `rpg_max_rate` ("no longer rate limited" once the
        /// maximum is reached): an increase that leaves Rt at the maximum and Rc within
        /// `release_margin_kbps` of it releases the limiter: the flow sends at the line rate, its timers
        /// stop, its counters are forgotten, and its next CNP is a first CNP. With 0 the limiter stays
        /// engaged forever, as dcqcn.md alone reads (its timers run on at the maximum, changing nothing).
        release_at_max: bool = true, 0, 1, "", "model: 1 = the limiter is released once Rc is back at the maximum";
        /// How close to the maximum Rc must come to count as back at it, kb/s. Rc only halves its distance to
        /// Rt at each increase and never gets there exactly; rates are configured in whole Mb/s, so within
        /// half of one (500) is taken as there.
        release_margin_kbps: u32 = 500, 0, MAX_RATE, " kb/s", "model: Rc within this of the maximum counts as back at it";
        /// Model option, default 0: alpha as a real number, as dcqcn.md writes its formulas. 1 keeps it as
        /// the NIC does, a 10-bit integer in 1/1024 whose updates truncate (floor(G·a/1024) + 1024 − G on a
        /// rise, floor(G·a/1024) on a decay), which makes later cuts shallower: the third cut of the worked
        /// check lands 4.3 % higher. `--dcqcn-profile connectx-fixed` sets it.
        alpha_fixed_point: bool = false, 0, 1, "", "model: 1 = alpha is a 10-bit integer that truncates, as in the NIC";
        /// Model option, default 0: an update without a CNP multiplies alpha by G/1024 (dcqcn.md, and the
        /// implementations that follow NVIDIA's later text). 1 multiplies it by (1024 − G)/1024 instead, as
        /// an earlier version of NVIDIA's parameter page reads; with the default G = 1019 alpha then all but
        /// vanishes within one µs without CNPs.
        alpha_decay_1024_minus_g: bool = false, 0, 1, "", "model: 1 = alpha decays by (1024-G)/1024, not G/1024";
        /// Bytes per unit of `rpg_byte_reset`: 64 as dcqcn.md and implementations read it; 1 reads the knob
        /// as bytes, as the IEEE QCN field of the same name is defined.
        rpg_byte_reset_unit: u32 = 64, 1, 1 << 20, " B", "model: bytes per unit of rpg_byte_reset";
    }
}

knob_table! {
    /// The notification-point knobs of a ConnectX NIC, named like the files under
    /// `/sys/class/net/<if>/ecn/roce_np/`: how the receiver paces and marks the CNPs it sends. What a check
    /// of the receiver's CNPs against its configuration needs.
    NpKnobs {
        /// Least time between two CNPs to one QP, µs: a CE-marked packet that arrives sooner after the QP's
        /// last CNP gets none; 0 sends a CNP for every CE-marked packet.
        min_time_between_cnps: u32 = 4, 0, U32_MAX, " us", "least time between two CNPs to one QP (0: a CNP per CE packet)";
        /// DSCP of the CNPs the NIC sends.
        cnp_dscp: u32 = 48, 0, 63, "", "DSCP of the CNPs sent";
        /// 802.1p priority (PCP) of the CNPs the NIC sends, when it tags them.
        cnp_802p_prio: u32 = 6, 0, 7, "", "802.1p priority of the CNPs sent";
    }
}

impl Knobs {
    /// Sets one knob from its sysfs text, e.g. `set("rpg_gd", "11")`.
    ///
    /// A path such as `roce_rp/rpg_gd` is accepted too, because that is how a recorded sysfs dump names it.
    /// `deactivate_at_line`, the name of `release_at_max` in earlier versions, still works.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), DcqcnError> {
        let key = name.trim();
        let key = key.rsplit('/').next().unwrap_or(key);
        let key = if key == "deactivate_at_line" {
            "release_at_max"
        } else {
            key
        };
        self.set_value(key, value)
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
        apply_lines(text, |name, value| self.set(name, value))
    }

    /// The ceiling of Rt on a link of `line_mbps`: `rpg_max_rate`, or the line rate when that is 0 or more.
    pub fn max_rate_mbps(&self, line_mbps: f64) -> f64 {
        match self.rpg_max_rate {
            0 => line_mbps,
            m => f64::from(m).min(line_mbps),
        }
    }

    /// `rpg_byte_reset` in bytes (0: the byte counter is off).
    pub fn byte_threshold(&self) -> u64 {
        u64::from(self.rpg_byte_reset) * u64::from(self.rpg_byte_reset_unit)
    }
}

impl NpKnobs {
    /// Sets one knob from its sysfs text; `roce_np/` in front of the name is accepted.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), DcqcnError> {
        let key = name.trim();
        let key = key.rsplit('/').next().unwrap_or(key);
        self.set_value(key, value)
    }
}

/// `name=value` or `name value` lines, `#` comments and blank lines skipped, each handed to `set`; an error
/// names its line.
fn apply_lines(
    text: &str,
    mut set: impl FnMut(&str, &str) -> Result<(), DcqcnError>,
) -> Result<(), DcqcnError> {
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |error: DcqcnError| DcqcnError::AtLine {
            line: i + 1,
            error: Box::new(error),
        };
        let (name, value) = line
            .split_once('=')
            .or_else(|| line.split_once(char::is_whitespace))
            .ok_or_else(|| {
                at(DcqcnError::Syntax {
                    text: line.to_string(),
                })
            })?;
        set(name.trim(), value).map_err(at)?;
    }
    Ok(())
}

/// Which of the eight priorities a side of DCQCN is enabled on, as the NIC's `enable/N` files say; a priority
/// whose file was not recorded is unknown rather than assumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PriorityEnable {
    /// Bit N set: `enable/N` was recorded.
    pub known: u8,
    /// Bit N set: `enable/N` was 1.
    pub enabled: u8,
}

impl PriorityEnable {
    /// Whether DCQCN is enabled on `priority`, when that is known.
    pub fn get(&self, priority: u8) -> Option<bool> {
        let bit = 1u8.checked_shl(u32::from(priority))?;
        (self.known & bit != 0).then_some(self.enabled & bit != 0)
    }

    /// Records `enable/priority`.
    pub fn set(&mut self, priority: u8, enabled: bool) {
        if let Some(bit) = 1u8
            .checked_shl(u32::from(priority))
            .filter(|_| priority < 8)
        {
            self.known |= bit;
            if enabled {
                self.enabled |= bit;
            } else {
                self.enabled &= !bit;
            }
        }
    }

    /// The priorities known to be disabled.
    pub fn disabled(&self) -> Vec<u8> {
        (0..8).filter(|&p| self.get(p) == Some(false)).collect()
    }
}

/// One NIC's DCQCN configuration: what `/sys/class/net/<if>/ecn/` holds for both ends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EcnConfig {
    /// The reaction point's knobs (with the model options at their defaults unless set).
    pub rp: Knobs,
    /// `roce_rp/enable/N`: the priorities on which the reaction point acts on CNPs; on the others the NIC
    /// counts them in `rp_cnp_ignored` and keeps its rate.
    pub rp_enable: PriorityEnable,
    /// The notification point's knobs.
    pub np: NpKnobs,
    /// `roce_np/enable/N`: the priorities on which the receiver answers CE marks with CNPs.
    pub np_enable: PriorityEnable,
    /// Files of the ECN directory that mean nothing to the model, by their path under it: kept to be shown,
    /// so that a knob this version does not know is seen rather than silently dropped.
    pub ignored: Vec<String>,
}

impl EcnConfig {
    /// Sets one file of the ECN directory by its path under it: `roce_rp/NAME`, `roce_np/NAME`,
    /// `roce_rp/enable/N` or `roce_np/enable/N`. A bare name is looked up among the RP knobs (with the model
    /// options) first, then the NP knobs. A well-formed path that names nothing the model reads is
    /// remembered in `ignored`; a bad value of a known knob is an error.
    pub fn set(&mut self, path: &str, value: &str) -> Result<(), DcqcnError> {
        let path = path.trim().trim_matches('/');
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            [side @ ("roce_rp" | "roce_np"), "enable", prio] => {
                let Some(p) = prio.parse::<u8>().ok().filter(|&p| p < 8) else {
                    self.ignored.push(path.to_string());
                    return Ok(());
                };
                let on = match value.trim() {
                    "0" => false,
                    "1" => true,
                    other => {
                        return Err(DcqcnError::BadValue {
                            name: "enable",
                            value: other.to_string(),
                            min: 0,
                            max: 1,
                            unit: "",
                        });
                    }
                };
                let e = if *side == "roce_rp" {
                    &mut self.rp_enable
                } else {
                    &mut self.np_enable
                };
                e.set(p, on);
                Ok(())
            }
            ["roce_rp", name] if Knobs::spec(name).is_some() => self.rp.set(name, value),
            ["roce_np", name] if NpKnobs::spec(name).is_some() => self.np.set(name, value),
            ["roce_rp" | "roce_np", ..] => {
                self.ignored.push(path.to_string());
                Ok(())
            }
            [name] if Knobs::spec(name).is_some() || *name == "deactivate_at_line" => {
                self.rp.set(name, value)
            }
            [name] if NpKnobs::spec(name).is_some() => self.np.set(name, value),
            _ => Err(DcqcnError::UnknownKnob {
                name: path.to_string(),
                known: format!("{}, {}", Knobs::names(), NpKnobs::names()),
            }),
        }
    }

    /// Applies `path=value` lines (see [`EcnConfig::set`] for the paths; `#` comments).
    pub fn apply_kv_text(&mut self, text: &str) -> Result<(), DcqcnError> {
        apply_lines(text, |name, value| self.set(name, value))
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
