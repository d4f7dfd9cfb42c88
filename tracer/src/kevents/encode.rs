//! The kernel events of an interval as `EVNT` and `DROP` records ([`roce_capture::blocks::records`]).

use std::collections::BTreeMap;

use roce_capture::blocks::records::{DropRow, Events};
use tracer_common::DropKey;

/// The largest `EVNT` record written: the analyzer reads custom blocks of up to 1 MiB whole and skips
/// larger ones.
pub const MAX_BLOCK_BYTES: usize = 960 << 10;

/// Encodes an `EVNT` block, halving its events over several blocks until each fits in
/// [`MAX_BLOCK_BYTES`]. Only the first keeps the drops, counts and tracepoint list, so that merging the
/// blocks counts them once. An event too large on its own is dropped (none comes close: a record holds six
/// numbers and two short byte fields).
pub fn encode_split(block: Events) -> Vec<Vec<u8>> {
    let Ok(bytes) = roce_capture::blocks::encode_record(&block) else {
        return Vec::new();
    };
    if bytes.len() <= MAX_BLOCK_BYTES {
        return vec![bytes];
    }
    if block.events.len() <= 1 {
        return Vec::new();
    }
    let mut first = block;
    let second_events = first.events.split_off(first.events.len() / 2);
    let second = Events {
        version: first.version,
        ts_ns: first.ts_ns,
        from_ns: first.from_ns,
        to_ns: first.to_ns,
        events: second_events,
        ..Events::default()
    };
    let mut out = encode_split(first);
    out.extend(encode_split(second));
    out
}

fn protocol_name(ethertype: u16) -> String {
    match ethertype {
        0x0800 => "ipv4".into(),
        0x86dd => "ipv6".into(),
        0x8915 => "roce_v1".into(),
        0x8808 => "mac_control".into(),
        other => format!("0x{other:04x}"),
    }
}

/// Drop rows for the increase from `before` to `now`.
pub(super) fn drop_rows(
    now: &BTreeMap<DropKey, u64>,
    before: &BTreeMap<DropKey, u64>,
    reasons: &BTreeMap<u32, String>,
) -> Vec<DropRow> {
    now.iter()
        .filter_map(|(key, &total)| {
            let count = total.saturating_sub(before.get(key).copied().unwrap_or(0));
            (count > 0).then(|| DropRow {
                protocol: protocol_name(key.protocol),
                reason: reasons
                    .get(&key.reason)
                    .cloned()
                    .unwrap_or_else(|| key.reason.to_string()),
                count,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_interval_is_split_under_the_block_limit() {
        let event = |i: u64| {
            roce_capture::blocks::records::Event {
            ts_ns: 1_000 + i,
            tracepoint: "ib_mad:ib_mad_recv_done_handler".into(),
            pid: 7,
            tid: 8,
            comm: "kworker/u8:1".into(),
            fields: serde_json::json!({"mgmt_class": 7, "method": 3, "attr_id": 16, "pad": "x".repeat(200)})
                .as_object()
                .cloned()
                .unwrap(),
        }
        };
        let n = 12_000u64;
        let block = Events {
            version: roce_capture::blocks::VERSION,
            ts_ns: 9,
            from_ns: 1,
            to_ns: 9,
            tracepoints: Some(Default::default()),
            events: (0..n).map(event).collect(),
            drops: vec![DropRow {
                protocol: "ipv4".into(),
                reason: "NO_SOCKET".into(),
                count: 5,
            }],
            ip: None,
            counts: Vec::new(),
            lost: 3,
        };
        let blocks = encode_split(block);
        assert!(blocks.len() >= 3, "{} blocks", blocks.len());
        assert!(blocks.iter().all(|b| b.len() <= MAX_BLOCK_BYTES));
        // Read back the way the analyzer reads them: every event once, in order, the drops and losses once.
        let custom: Vec<roce_capture::CustomBlock> = blocks
            .into_iter()
            .map(|data| roce_capture::CustomBlock {
                pen: roce_capture::blocks::PEN,
                data,
            })
            .collect();
        let k = roce_core::recorded::Recorded::read(&custom).kernel_events;
        assert_eq!(k.events.len() as u64, n);
        assert!(k.events.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        assert_eq!(k.drop_intervals.len(), 1);
        assert_eq!(k.drop_intervals[0].count, 5);
        assert_eq!(k.lost, 3);
        assert_eq!(k.blocks, custom.len() as u64);
    }
}
