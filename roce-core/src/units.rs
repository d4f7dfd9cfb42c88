//! Link speeds as people write them (`25`, `100G`, `25g`, `400Gbps`, `100000M`), durations and times as the
//! command lines take them, and rates written in a unit that fits them.

use thiserror::Error;

/// The slowest line rate believed, bit/s: below it a number is a slip (bits meant as Gb/s), not a link.
pub const MIN_SPEED_BPS: u64 = 1_000_000;
/// The fastest line rate believed, bit/s: above it a number is a slip too (Mb/s meant as Gb/s, say).
pub const MAX_SPEED_BPS: u64 = 10_000_000_000_000;

#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "{0:?} is not a link speed: give Gb/s as a number (25, 2.5) or a number with a unit (25G, 400Gbps, \
     100000M, 1.6T), from 1 Mb/s to 10 Tb/s"
)]
/// A link speed that does not parse, or that no link has; holds what was given.
pub struct SpeedError(pub String);

/// Parses a link speed into bit/s. A number alone is Gb/s, as people say it (`--link-speed 25`); a unit
/// (`k`, `M`, `G`, `T`, optionally followed by `bps`, `b/s`, `bit/s` or `b`, any case) says otherwise, and
/// `bps` alone means bits. Anything outside [`MIN_SPEED_BPS`]..=[`MAX_SPEED_BPS`] is refused rather than taken
/// as a line: `25000000000` is not 25 Gb/s written in bits, it is a slip.
pub fn parse_speed(s: &str) -> Result<u64, SpeedError> {
    let t = s.trim().to_ascii_lowercase();
    let bits_unit = ["bit/s", "bps", "b/s", "b"]
        .iter()
        .find_map(|u| t.strip_suffix(u));
    let t = bits_unit.unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('t') => (&t[..t.len() - 1], 1e12),
        Some('g') => (&t[..t.len() - 1], 1e9),
        Some('m') => (&t[..t.len() - 1], 1e6),
        Some('k') => (&t[..t.len() - 1], 1e3),
        _ if bits_unit.is_some() => (t, 1.0),
        _ => (t, 1e9),
    };
    let v: f64 = num.trim().parse().map_err(|_| SpeedError(s.to_string()))?;
    let bps = v * mult;
    if !(MIN_SPEED_BPS as f64..=MAX_SPEED_BPS as f64).contains(&bps) {
        return Err(SpeedError(s.to_string()));
    }
    Ok(bps.round() as u64)
}

/// A rate (bit/s) in the unit that keeps its number readable: `26.6 Gb/s`, `320 Mb/s`, `4.8 kb/s`, `0 b/s`.
/// Three significant digits at most, trailing zeros dropped (`25 Gb/s`). Every rate the headline, the text
/// tables and the charts show goes through here, so a slow flow never reads as `0.000 Gb/s`.
pub fn fmt_rate(bps: f64) -> String {
    let (per, unit) = rate_scale(bps);
    format!("{} {unit}", fmt_sig(bps / per))
}

/// The unit [`fmt_rate`] writes `bps` in, as bit/s per unit and its name: also the unit of a chart axis that
/// reaches `bps`.
pub fn rate_scale(bps: f64) -> (f64, &'static str) {
    match bps.abs() {
        a if a >= 1e9 => (1e9, "Gb/s"),
        a if a >= 1e6 => (1e6, "Mb/s"),
        a if a >= 1e3 => (1e3, "kb/s"),
        _ => (1.0, "b/s"),
    }
}

/// Up to three significant digits (all the integer digits of a larger number), without trailing zeros.
fn fmt_sig(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let decimals = match v.abs() {
        a if a >= 99.95 => 0,
        a if a >= 9.995 => 1,
        _ => 2,
    };
    let s = format!("{v:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    if s == "-0" { "0".into() } else { s.into() }
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error("{0:?} is not a duration (examples: 10us, 2.5ms, 500ns, -3us)")]
/// A duration that does not parse; holds what was given.
pub struct DurationError(pub String);

/// Parses a signed duration with a unit (`ns`, `us`/`µs`, `ms`, `s`) into ns; a bare number is ns.
pub fn parse_duration_ns(s: &str) -> Result<i64, DurationError> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = [
        ("ns", 1.0),
        ("us", 1e3),
        ("µs", 1e3),
        ("ms", 1e6),
        ("s", 1e9),
    ]
    .iter()
    .find_map(|(suffix, m)| t.strip_suffix(suffix).map(|n| (n.to_string(), *m)))
    .unwrap_or((t.clone(), 1.0));
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| DurationError(s.to_string()))?;
    let ns = v * mult;
    if !ns.is_finite() || ns.abs() > 1e18 {
        return Err(DurationError(s.to_string()));
    }
    Ok(ns.round() as i64)
}

#[derive(Debug, Error, PartialEq, Eq)]
#[error(
    "{0:?} is not a time (an offset from the first frame such as +12.5s or +300us, or seconds since the \
     epoch such as 1732440000.25)"
)]
/// A `--from`/`--to` time that does not parse; holds what was given.
pub struct TimeError(pub String);

/// Parses a `--from`/`--to` time: `+DURATION` from the capture's first frame, or seconds since the epoch
/// (with a fraction down to the nanosecond, read exactly rather than through a float).
pub fn parse_time(s: &str) -> Result<roce_capture::Bound, TimeError> {
    let t = s.trim();
    let err = || TimeError(s.to_string());
    if let Some(offset) = t.strip_prefix('+') {
        let ns = parse_duration_ns(offset).map_err(|_| err())?;
        return u64::try_from(ns)
            .map(roce_capture::Bound::After)
            .map_err(|_| err());
    }
    let (secs, frac) = t.split_once('.').unwrap_or((t, ""));
    let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
    if !digits(secs) || (!frac.is_empty() && !digits(frac)) || frac.len() > 9 {
        return Err(err());
    }
    let secs: u64 = secs.parse().map_err(|_| err())?;
    let frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().map_err(|_| err())? * 10u64.pow(9 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(frac_ns))
        .map(roce_capture::Bound::At)
        .ok_or_else(err)
}

/// A duration that must be positive, for bin widths.
pub fn parse_positive_ns(s: &str) -> Result<u64, DurationError> {
    match parse_duration_ns(s)? {
        n if n > 0 => Ok(n as u64),
        _ => Err(DurationError(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn times() {
        use super::parse_time;
        use roce_capture::Bound;
        assert_eq!(parse_time("+12.5s"), Ok(Bound::After(12_500_000_000)));
        assert_eq!(parse_time("+300us"), Ok(Bound::After(300_000)));
        assert_eq!(parse_time("+0"), Ok(Bound::After(0)));
        assert_eq!(
            parse_time("1732440000.000000001"),
            Ok(Bound::At(1_732_440_000_000_000_001))
        );
        assert_eq!(
            parse_time("1732440000.25"),
            Ok(Bound::At(1_732_440_000_250_000_000))
        );
        assert_eq!(
            parse_time("1732440000"),
            Ok(Bound::At(1_732_440_000_000_000_000))
        );
        for bad in [
            "+-3s",
            "12s",
            "1.2.3",
            "1.0000000001",
            "",
            "abc",
            "99999999999999999999",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("10us"), Ok(10_000));
        assert_eq!(parse_duration_ns("2.5ms"), Ok(2_500_000));
        assert_eq!(parse_duration_ns("-3us"), Ok(-3_000));
        assert_eq!(parse_duration_ns("7"), Ok(7));
        assert_eq!(parse_duration_ns("1s"), Ok(1_000_000_000));
        assert!(parse_duration_ns("soon").is_err());
        assert!(parse_positive_ns("0us").is_err());
    }

    use super::*;

    #[test]
    fn speeds() {
        assert_eq!(parse_speed("100G"), Ok(100_000_000_000));
        assert_eq!(parse_speed("25gbps"), Ok(25_000_000_000));
        assert_eq!(parse_speed("25 Gb/s"), Ok(25_000_000_000));
        assert_eq!(parse_speed("25Gbit/s"), Ok(25_000_000_000));
        assert_eq!(parse_speed("100000M"), Ok(100_000_000_000));
        assert_eq!(parse_speed("2.5G"), Ok(2_500_000_000));
        assert_eq!(parse_speed("1.6T"), Ok(1_600_000_000_000));
        assert_eq!(parse_speed("400000kbps"), Ok(400_000_000));
        assert!(parse_speed("fast").is_err());
        assert!(parse_speed("0").is_err());
        assert!(parse_speed("-5G").is_err());
        assert!(parse_speed("NaN").is_err());
    }

    #[test]
    fn a_bare_number_is_gigabits_never_bits() {
        assert_eq!(parse_speed("25"), Ok(25_000_000_000));
        assert_eq!(parse_speed(" 2.5 "), Ok(2_500_000_000));
        assert_eq!(parse_speed("400"), Ok(400_000_000_000));
        // Bits written out, or Mb/s as ethtool prints them, are slips: refused with the accepted forms.
        for slip in ["25000000000", "25000", "25bps"] {
            let e = parse_speed(slip).unwrap_err().to_string();
            assert!(
                e.contains("25G") && e.contains("Gb/s as a number"),
                "{slip}: {e}"
            );
        }
    }

    #[test]
    fn rates_read_in_a_unit_that_fits() {
        assert_eq!(fmt_rate(26.6e9), "26.6 Gb/s");
        assert_eq!(fmt_rate(25e9), "25 Gb/s");
        assert_eq!(fmt_rate(100e9), "100 Gb/s");
        assert_eq!(fmt_rate(2.5e9), "2.5 Gb/s");
        assert_eq!(fmt_rate(15.54e9), "15.5 Gb/s");
        assert_eq!(fmt_rate(320e6), "320 Mb/s");
        assert_eq!(fmt_rate(1.234e6), "1.23 Mb/s");
        assert_eq!(fmt_rate(4_800.0), "4.8 kb/s");
        assert_eq!(fmt_rate(12.0), "12 b/s");
        assert_eq!(fmt_rate(0.0), "0 b/s");
        // Rounding up to the next unit's 1000 keeps the digits honest rather than reading 1000 Mb/s.
        assert_eq!(fmt_rate(999.97e6), "1000 Mb/s");
        assert_eq!(fmt_rate(1600e9), "1600 Gb/s");
    }
}
