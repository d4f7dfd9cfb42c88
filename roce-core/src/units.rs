//! Link speeds as people write them: `100G`, `25g`, `400Gbps`, `100000M`, or plain bit/s.

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
#[error("{0:?} is not a link speed (examples: 100G, 25G, 400Gbps, 100000M)")]
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
