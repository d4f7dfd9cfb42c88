//! What the tracer stores in pcapng custom blocks, so that counter samples, knobs and probe statistics
//! travel inside the capture file, and how the analyzer reads them back. The format lives here, with its
//! reader; the tracer re-exports this module to write it.
//!
//! Each block is a pcapng Custom Block (type 0x00000BAD, copyable) with the Private Enterprise Number
//! [`PEN`], whose data is a 4-byte ASCII record type followed by one UTF-8 JSON object:
//!
//! | type | when | JSON |
//! |---|---|---|
//! | `KNOB` | once, at start | `{"ts_ns", "knobs": {"<iface>/<roce_np or roce_rp>/<name>": "<value>"}}` |
//! | `CTRS` | every `--interval` | `{"ts_ns", "counters": {"<path>": <u64>}}`, sysfs paths relative to the sysfs root, and `ethtool/<iface>/<statistic>` |
//! | `PROB` | once, at the end (eBPF) | `{"ts_ns", "seen", "matched", "emitted", "ring_full", "qps": [...], "prios": [...]}` |
//! | `DROP` | at the end of each file (`--kernel-events`) | `{"ts_ns", "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": N}]}` |
//! | `EVNT` | every `--interval` and at the end of each file (`--kernel-events`) | `{"ts_ns", "from_ns", "to_ns", "tracepoints"?, "events": [...], "drops": [...], "counts": [...], "lost"}` |
//!
//! An `EVNT` block covers `[from_ns, to_ns)` of the packets' clock (wall-clock ns):
//! - `tracepoints` (each file's first block): `{"attached": [...], "unavailable": [...], "incomplete":
//!   {"<tracepoint>": ["<field> (why)"]}}`, what the tracer could record on that host.
//! - `events`: `{"ts_ns", "tracepoint": "rdma_cma:cm_qp_create", "pid", "tid", "comm", "fields": {...}}`,
//!   one per event, with the process and thread the tracepoint fired in. `fields` holds the copied fields by
//!   their kernel names: numbers, `<field>_name` where the kernel names the value (`qp_type_name: "RC"`,
//!   `event_name: "ESTABLISHED"`), socket addresses as `"ip:port"`, text as text. Fields a kernel lacks are
//!   absent.
//! - `drops`: the `skb:kfree_skb` drops during the interval, rows as in `DROP`.
//! - `counts`: tracepoints counted in the kernel (`rdma_core:cq_poll`): `{"tracepoint", "key": {"cq_id":
//!   N}, "events", "sum": {"rc": completions}}`.
//! - `lost`: events the tracer could not keep during the interval.
//!
//! A busy interval is split over several `EVNT` blocks with the same `from_ns`/`to_ns` so that none passes
//! the reader's 1 MiB block limit; only the first carries `drops` and `counts`.
//!
//! JSON rather than a binary layout because the blocks are rare (one per second at most) and the analyzer,
//! scripts and a human with `tshark -V` can all read it without a schema version dance.

use serde::Serialize;

use crate::read::CustomBlock;

/// IANA's Private Enterprise Number for documentation use (RFC 5612): the project has none of its own, and
/// this one is guaranteed to mean nothing else.
pub const PEN: u32 = 32473;

/// Record type of the DCQCN knobs.
pub const KNOBS: [u8; 4] = *b"KNOB";
/// Record type of a counter sample.
pub const COUNTERS: [u8; 4] = *b"CTRS";
/// Record type of the probe's own statistics.
pub const PROBE: [u8; 4] = *b"PROB";
/// Record type of the kernel's packet drops (`skb:kfree_skb`) while the file was open, per protocol
/// (`ipv4`, `ipv6`, `roce_v1`, `mac_control`) and drop reason. IPv4/IPv6 drops are of any IP packet: the
/// tracepoint gives the ethertype, not the UDP port, so they are an upper bound on RoCEv2's.
pub const DROPS: [u8; 4] = *b"DROP";
/// Record type of the kernel events of one interval (tracepoints, drops per interval).
pub const EVENTS: [u8; 4] = *b"EVNT";

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

/// Our records of one type, in file order.
pub fn records(
    blocks: &[CustomBlock],
    kind: [u8; 4],
) -> impl Iterator<Item = ([u8; 4], serde_json::Value)> + '_ {
    blocks
        .iter()
        .filter(|b| b.pen == PEN)
        .filter_map(|b| decode(&b.data))
        .filter(move |(k, _)| *k == kind)
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
