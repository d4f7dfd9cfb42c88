//! Link speeds as people write them: `100G`, `25g`, `400Gbps`, `100000M`, or plain bit/s.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("{0:?} is not a link speed (examples: 100G, 25G, 400Gbps, 100000M)")]
/// A link speed that does not parse; holds what was given.
pub struct SpeedError(pub String);

/// Parses a link speed into bit/s.
pub fn parse_speed(s: &str) -> Result<u64, SpeedError> {
    let t = s.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("bps")
        .or_else(|| t.strip_suffix("b/s"))
        .unwrap_or(&t);
    let (num, mult) = match t.chars().last() {
        Some('t') => (&t[..t.len() - 1], 1_000_000_000_000u64),
        Some('g') => (&t[..t.len() - 1], 1_000_000_000),
        Some('m') => (&t[..t.len() - 1], 1_000_000),
        Some('k') => (&t[..t.len() - 1], 1_000),
        _ => (t, 1),
    };
    let v: f64 = num.parse().map_err(|_| SpeedError(s.to_string()))?;
    let bps = v * mult as f64;
    if !(1.0..=1e15).contains(&bps) {
        return Err(SpeedError(s.to_string()));
    }
    Ok(bps.round() as u64)
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
        assert_eq!(parse_speed("100000M"), Ok(100_000_000_000));
        assert_eq!(parse_speed("2.5G"), Ok(2_500_000_000));
        assert!(parse_speed("fast").is_err());
        assert!(parse_speed("0").is_err());
        assert!(parse_speed("-5G").is_err());
    }
}
