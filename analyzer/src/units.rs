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

#[cfg(test)]
mod tests {
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
