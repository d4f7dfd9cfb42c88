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
//! | `CTRS` | every `--interval` | `{"ts_ns", "counters": {"<path>": <u64>}}`, paths relative to the sysfs root |
//! | `PROB` | once, at the end (eBPF) | `{"ts_ns", "seen", "matched", "emitted", "ring_full", "qps": [...], "prios": [...]}` |
//! | `DROP` | at the end of each file (`--kernel-events`) | `{"ts_ns", "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": N}]}` |
//!
//! JSON rather than a binary layout because the blocks are rare (one per second at most) and the analyzer,
//! scripts and a human with `tshark -V` can all read it without a schema version dance.

use serde::Serialize;

use crate::source::CustomBlock;

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

/// The sender-side DCQCN knobs recorded in the capture's first `KNOB` block, as `name=value` text for
/// [`crate::dcqcn::Knobs::apply_kv_text`], with the interface they came from. Only `roce_rp` knobs of one
/// interface (the first in name order) are taken: the model is of the reaction point, and several NICs may
/// have been configured differently. Knobs the model does not use (`enable/N`, ...) are left out.
pub fn recorded_rp_knobs(blocks: &[CustomBlock]) -> Option<(String, String)> {
    let value = blocks
        .iter()
        .filter(|b| b.pen == PEN)
        .filter_map(|b| decode(&b.data))
        .find(|(kind, _)| *kind == KNOBS)?
        .1;
    let knobs = value.get("knobs")?.as_object()?;
    let mut entries: Vec<(&str, &str, &str)> = knobs
        .iter()
        .filter_map(|(path, v)| {
            let mut parts = path.splitn(3, '/');
            let (iface, group, name) = (parts.next()?, parts.next()?, parts.next()?);
            (group == "roce_rp" && !name.contains('/')).then_some((iface, name, v.as_str()?))
        })
        .collect();
    entries.sort();
    let iface = entries.first()?.0;
    let text = entries
        .iter()
        .filter(|(i, name, _)| *i == iface && crate::dcqcn::Knobs::NAMES.contains(name))
        .map(|(_, name, v)| format!("{name}={}\n", v.trim()))
        .collect();
    Some((iface.to_string(), text))
}

/// How much one NIC counter moved while the capture ran: the first and last samples the tracer recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterDelta {
    /// The counter's path under the sysfs root, e.g. `class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent`.
    pub name: String,
    pub first: u64,
    pub last: u64,
    /// last − first; 0 when the counter went backwards (a reset), with `reset` set.
    pub delta: u64,
    pub reset: bool,
    pub samples: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// The deltas of every counter sampled in the capture's `CTRS` blocks, by name.
pub fn counter_deltas(blocks: &[CustomBlock]) -> Vec<CounterDelta> {
    let mut out: std::collections::BTreeMap<String, CounterDelta> =
        std::collections::BTreeMap::new();
    for (_, v) in records(blocks, COUNTERS) {
        let ts = v
            .get("ts_ns")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        let Some(counters) = v.get("counters").and_then(serde_json::Value::as_object) else {
            continue;
        };
        for (name, value) in counters {
            let Some(value) = value.as_u64() else {
                continue;
            };
            let e = out.entry(name.clone()).or_insert(CounterDelta {
                name: name.clone(),
                first: value,
                last: value,
                delta: 0,
                reset: false,
                samples: 0,
                first_ns: ts,
                last_ns: ts,
            });
            e.reset |= value < e.last;
            e.last = value;
            e.last_ns = ts;
            e.samples += 1;
        }
    }
    out.into_values()
        .map(|mut d| {
            d.delta = if d.reset { 0 } else { d.last - d.first };
            d
        })
        .collect()
}

/// Kernel drops recorded by `roce-tracer --kernel-events`, summed over the capture's `DROP` blocks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelDrop {
    pub protocol: String,
    pub reason: String,
    pub count: u64,
}

pub fn kernel_drops(blocks: &[CustomBlock]) -> Vec<KernelDrop> {
    let mut sums: std::collections::BTreeMap<(String, String), u64> =
        std::collections::BTreeMap::new();
    for (_, v) in records(blocks, DROPS) {
        let Some(rows) = v.get("drops").and_then(serde_json::Value::as_array) else {
            continue;
        };
        for r in rows {
            let text = |k: &str| {
                r.get(k)
                    .map(|x| x.as_str().map_or(x.to_string(), str::to_string))
            };
            let (Some(protocol), Some(reason), Some(count)) = (
                text("protocol"),
                text("reason"),
                r.get("count").and_then(serde_json::Value::as_u64),
            ) else {
                continue;
            };
            *sums.entry((protocol, reason)).or_insert(0) += count;
        }
    }
    sums.into_iter()
        .map(|((protocol, reason), count)| KernelDrop {
            protocol,
            reason,
            count,
        })
        .collect()
}

/// Our records of one type, in file order.
fn records(
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

    #[test]
    fn counter_deltas_and_drops() {
        let block = |kind, v: serde_json::Value| CustomBlock {
            pen: PEN,
            data: encode(kind, &v).unwrap(),
        };
        let blocks = [
            block(
                COUNTERS,
                serde_json::json!({"ts_ns": 10, "counters": {"a/np_cnp_sent": 100, "b/x": 9}}),
            ),
            block(
                COUNTERS,
                serde_json::json!({"ts_ns": 20, "counters": {"a/np_cnp_sent": 130, "b/x": 2}}),
            ),
            block(
                DROPS,
                serde_json::json!({"ts_ns": 20, "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": 3}]}),
            ),
            block(
                DROPS,
                serde_json::json!({"ts_ns": 30, "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": 4}]}),
            ),
        ];
        let d = counter_deltas(&blocks);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].name.as_str(), d[0].delta, d[0].samples, d[0].reset),
            ("a/np_cnp_sent", 30, 2, false)
        );
        assert_eq!((d[1].delta, d[1].reset), (0, true));
        let k = kernel_drops(&blocks);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].count, 7);
    }

    #[test]
    fn recorded_knobs_of_the_first_interface() {
        let knob = |k: &serde_json::Value| CustomBlock {
            pen: PEN,
            data: encode(KNOBS, k).unwrap(),
        };
        let block = knob(&serde_json::json!({"ts_ns": 1, "knobs": {
            "eth1/roce_rp/rpg_gd": "9",
            "eth0/roce_rp/rpg_gd": "10\n",
            "eth0/roce_rp/clamp_tgt_rate": "1",
            "eth0/roce_rp/enable/3": "1",
            "eth0/roce_np/min_time_between_cnps": "4",
        }}));
        let (iface, text) = recorded_rp_knobs(&[block]).unwrap();
        assert_eq!(iface, "eth0");
        let mut k = crate::dcqcn::Knobs::default();
        k.apply_kv_text(&text).unwrap();
        assert_eq!((k.rpg_gd, k.clamp_tgt_rate), (10, true));
        let other = CustomBlock {
            pen: 1,
            data: b"KNOB{}".to_vec(),
        };
        assert!(recorded_rp_knobs(&[other]).is_none());
    }
}
