//! The line rate a tap's frames were carried at, and where that number came from.
//!
//! Pause quanta become time at it, the DCQCN model starts at it and never exceeds it, and the report's
//! headline measures throughput against it, so a wrong one is wrong everywhere at once. Each tap has its own:
//! a pcapng interface block may record it (`if_speed`, as dumpcap, `roce-tracer` and `roce-sim` write it),
//! `--link-speed` overrides it for every tap, and where neither says, 100 Gb/s is assumed and every output
//! that uses it says so.

use std::fmt;

use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::units::{MAX_SPEED_BPS, MIN_SPEED_BPS, fmt_rate};

/// What is assumed when neither the capture nor the command line gives a tap's line rate.
pub const ASSUMED_BPS: u64 = 100_000_000_000;

/// Where a line rate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LineSource {
    /// The capture's interface block (pcapng `if_speed`).
    IfSpeed,
    /// `--link-speed`, which wins over the capture.
    Flag,
    /// Nothing said: [`ASSUMED_BPS`].
    Assumed,
}

/// One tap's line rate and its source. It serializes as `line_gbps` and `line_rate_source`, the two fields
/// every output that states a line rate carries (flattened into the object that states it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineRate {
    /// Bits per second.
    pub bps: u64,
    /// Where `bps` came from.
    pub source: LineSource,
}

impl LineRate {
    /// Gb/s, the unit the tables and the model's outputs use.
    pub fn gbps(self) -> f64 {
        self.bps as f64 / 1e9
    }

    /// Mb/s, the unit the reaction-point model computes in.
    pub fn mbps(self) -> f64 {
        self.bps as f64 / 1e6
    }

    /// Whether it was assumed, so that an output can ask for `--link-speed`.
    pub fn assumed(self) -> bool {
        self.source == LineSource::Assumed
    }

    /// The rate and where it came from, as it follows the words "line rate": `25 Gb/s (the capture's
    /// if_speed)`, `25 Gb/s (--link-speed)`, `assumed 100 Gb/s (pass --link-speed)`.
    pub fn value(self) -> String {
        let rate = fmt_rate(self.bps as f64);
        match self.source {
            LineSource::IfSpeed => format!("{rate} (the capture's if_speed)"),
            LineSource::Flag => format!("{rate} (--link-speed)"),
            LineSource::Assumed => format!("assumed {rate} (pass --link-speed)"),
        }
    }
}

impl Serialize for LineRate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("LineRate", 2)?;
        m.serialize_field("line_gbps", &self.gbps())?;
        m.serialize_field("line_rate_source", &self.source)?;
        m.end()
    }
}

/// `line rate 25 Gb/s (the capture's if_speed)`, `line rate 25 Gb/s (--link-speed)`, or `line rate assumed
/// 100 Gb/s (pass --link-speed)`: every output states a line rate in these words, so that a guess always
/// reads as one.
impl fmt::Display for LineRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line rate {}", self.value())
    }
}

/// The rule that gives every tap its line rate: `--link-speed` when given, else the tap's recorded
/// `if_speed`, else [`ASSUMED_BPS`]. Small and `Copy`, so each pass that converts bytes or quanta into time
/// holds its own and asks it per frame (a frame carries its tap's `if_speed`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineRates {
    /// `--link-speed`, bit/s.
    pub flag: Option<u64>,
}

impl LineRates {
    /// The rule with `--link-speed` (or without, for `None`).
    pub fn flag(flag: Option<u64>) -> Self {
        LineRates { flag }
    }

    /// The line of a tap that recorded `if_speed` (bit/s). A recorded speed outside what a link can be
    /// ([`MIN_SPEED_BPS`] to [`MAX_SPEED_BPS`]) is a broken field, not a line rate: it counts as unsaid.
    pub fn of(self, if_speed: Option<u64>) -> LineRate {
        if let Some(bps) = self.flag {
            return LineRate {
                bps,
                source: LineSource::Flag,
            };
        }
        match if_speed.filter(|v| (MIN_SPEED_BPS..=MAX_SPEED_BPS).contains(v)) {
            Some(bps) => LineRate {
                bps,
                source: LineSource::IfSpeed,
            },
            None => LineRate {
                bps: ASSUMED_BPS,
                source: LineSource::Assumed,
            },
        }
    }

    /// The line of a capture's tap.
    pub fn of_tap(self, tap: &roce_capture::Tap) -> LineRate {
        self.of(tap.description.speed_bps)
    }
}

/// Several taps' lines in one phrase, for a header over all of them: the one line when they agree, else the
/// range and where each part came from (`line rates 25 Gb/s to 50 Gb/s, per tap (the capture's if_speed)`).
pub fn describe_lines(lines: impl IntoIterator<Item = LineRate>) -> String {
    let mut all: Vec<LineRate> = lines.into_iter().collect();
    all.sort_by_key(|l| (l.bps, l.source));
    all.dedup();
    match all.as_slice() {
        [] => LineRates::default().of(None).to_string(),
        [one] => one.to_string(),
        many => {
            let (lo, hi) = (many[0].bps, many[many.len() - 1].bps);
            let mut sources: Vec<LineSource> = many.iter().map(|l| l.source).collect();
            sources.sort();
            sources.dedup();
            let whence: Vec<&str> = sources
                .iter()
                .map(|s| match s {
                    LineSource::IfSpeed => "the capture's if_speed",
                    LineSource::Flag => "--link-speed",
                    LineSource::Assumed => {
                        "assumed where the capture says nothing: pass --link-speed"
                    }
                })
                .collect();
            let range = if lo == hi {
                fmt_rate(lo as f64)
            } else {
                format!("{} to {}", fmt_rate(lo as f64), fmt_rate(hi as f64))
            };
            format!("line rates {range}, per tap ({})", whence.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G25: u64 = 25_000_000_000;

    #[test]
    fn the_flag_wins_then_if_speed_then_the_assumption() {
        let flagged = LineRates::flag(Some(G25));
        assert_eq!(flagged.of(Some(100_000_000_000)).bps, G25);
        assert_eq!(flagged.of(None).source, LineSource::Flag);
        let plain = LineRates::default();
        assert_eq!(
            plain.of(Some(G25)),
            LineRate {
                bps: G25,
                source: LineSource::IfSpeed
            }
        );
        assert_eq!(plain.of(None).bps, ASSUMED_BPS);
        assert!(plain.of(None).assumed());
        // A broken field is not a line rate.
        assert!(plain.of(Some(3)).assumed());
        assert!(plain.of(Some(u64::MAX)).assumed());
    }

    #[test]
    fn every_source_says_where_the_number_came_from() {
        let plain = LineRates::default();
        assert_eq!(
            plain.of(Some(G25)).to_string(),
            "line rate 25 Gb/s (the capture's if_speed)"
        );
        assert_eq!(
            LineRates::flag(Some(2_500_000_000)).of(None).to_string(),
            "line rate 2.5 Gb/s (--link-speed)"
        );
        assert_eq!(
            plain.of(None).to_string(),
            "line rate assumed 100 Gb/s (pass --link-speed)"
        );
    }

    #[test]
    fn several_lines_read_as_one_phrase() {
        let plain = LineRates::default();
        let a = plain.of(Some(G25));
        assert_eq!(describe_lines([a, a]), a.to_string());
        assert_eq!(describe_lines([]), plain.of(None).to_string());
        assert_eq!(
            describe_lines([a, plain.of(Some(50_000_000_000))]),
            "line rates 25 Gb/s to 50 Gb/s, per tap (the capture's if_speed)"
        );
        assert_eq!(
            describe_lines([plain.of(None), a]),
            "line rates 25 Gb/s to 100 Gb/s, per tap (the capture's if_speed; assumed where the capture says \
             nothing: pass --link-speed)"
        );
    }
}
