//! What the tracer stores in pcapng custom blocks, so that counter samples, knobs and probe statistics
//! travel inside the capture file.
//!
//! Each block is a pcapng Custom Block (type 0x00000BAD, copyable) with the Private Enterprise Number
//! [`PEN`], whose data is a 4-byte ASCII record type followed by one UTF-8 JSON object:
//!
//! | type | when | JSON |
//! |---|---|---|
//! | `KNOB` | once, at start | `{"ts_ns", "knobs": {"<iface>/<roce_np or roce_rp>/<name>": "<value>"}}` |
//! | `CTRS` | every `--interval` | `{"ts_ns", "counters": {"<path>": <u64>}}`, paths relative to the sysfs root |
//! | `PROB` | once, at the end (eBPF) | `{"ts_ns", "seen", "matched", "emitted", "ring_full", "qps": [...], "prios": [...]}` |
//!
//! JSON rather than a binary layout because the blocks are rare (one per second at most) and the analyzer,
//! scripts and a human with `tshark -V` can all read it without a schema version dance.

use serde::Serialize;

/// IANA's Private Enterprise Number for documentation use (RFC 5612): the project has none of its own, and
/// this one is guaranteed to mean nothing else.
pub const PEN: u32 = 32473;

/// Record type of the DCQCN knobs.
pub const KNOBS: [u8; 4] = *b"KNOB";
/// Record type of a counter sample.
pub const COUNTERS: [u8; 4] = *b"CTRS";
/// Record type of the probe's own statistics.
pub const PROBE: [u8; 4] = *b"PROB";

/// Encodes one record: the type, then the value as JSON.
pub fn encode<T: Serialize>(kind: [u8; 4], value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = kind.to_vec();
    serde_json::to_writer(&mut out, value)?;
    Ok(out)
}

/// Splits a record back into its type and JSON value; `None` for data that is not one of ours.
pub fn decode(data: &[u8]) -> Option<([u8; 4], serde_json::Value)> {
    let kind: [u8; 4] = data.get(..4)?.try_into().ok()?;
    // pcapng pads block data to 4 bytes with zeros.
    let json = data.get(4..)?;
    let end = json.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let value = serde_json::from_slice(json.get(..end)?).ok()?;
    Some((kind, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_padding() {
        let mut data = encode(
            COUNTERS,
            &serde_json::json!({"ts_ns": 5, "counters": {"a": 1}}),
        )
        .unwrap();
        data.extend_from_slice(&[0, 0, 0]);
        let (kind, value) = decode(&data).unwrap();
        assert_eq!(kind, COUNTERS);
        assert_eq!(value["counters"]["a"], 1);
        assert!(decode(b"KNO").is_none());
        assert!(decode(b"KNOBnot json").is_none());
    }
}
