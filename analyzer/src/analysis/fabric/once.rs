//! Each flow and each CNP stream counted once, however many taps saw it.
//!
//! The passes count per tap, so that a flow mirrored at its sender's and its receiver's link is two rows
//! rather than one row whose second copies read as retransmissions. Across the taps, each of a flow's counts
//! is the most any one tap saw of it: a packet seen at several taps counts once, and a tap that missed some
//! (a capture drop, a packet lost before it) does not lower the count. This is the report's rule (the tap
//! that saw most of a flow, [`crate::analysis::tap_preference`]) taken count by count, for two reasons:
//!
//! - CE marks are made on the way and never cleared, so the tap furthest along a flow's path saw every mark
//!   made before it, while the tap that saw most packets may be the sender's, which saw none; and a
//!   retransmission is a PSN seen again at a tap upstream of the loss, but fills a hole (out of order) at one
//!   downstream of it. The most any tap saw is the nearest the capture comes to each.
//! - No tie between taps can change a number: the Spark job, whose collectors have no order of taps, gets
//!   the same.
//!
//! PSNs never seen are the other way round: the fewest any tap missed, since a PSN one tap saw was sent,
//! whatever another tap missed.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rustc_hash::FxHashMap;

use roce_core::passes::cnp::CnpRow;
use roce_core::passes::flows::{FlowKey, FlowRow};
use roce_core::passes::rates::FlowSeries;

/// One data flow over every tap that saw it carry data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FlowOnce {
    pub key: FlowKey,
    /// Data packets (with payload), the most a tap saw.
    pub packets: u64,
    /// Their frame bytes, the most a tap saw.
    pub bytes: u64,
    /// Of them CE-marked, the most a tap saw.
    pub ce_packets: u64,
    /// PSNs never seen, the fewest a tap missed.
    pub psn_gaps: u64,
    /// PSNs seen again, the most a tap saw.
    pub retransmitted: u64,
    /// The flow's priority at each tap (several when a switch remarks it).
    pub priorities: Vec<Option<u8>>,
}

/// Every flow that carried data at some tap, by key. A tap where the flow carried no data (its frames there
/// were all acknowledgements, say) says nothing of its data and is left out.
pub(super) fn flows(rows: &[FlowRow], series: &[FlowSeries]) -> Vec<FlowOnce> {
    let rows: FxHashMap<(u32, FlowKey), &FlowRow> = rows
        .iter()
        .map(|r| {
            let key = r.key();
            ((r.iface, key), r)
        })
        .collect();
    let mut once: BTreeMap<FlowKey, FlowOnce> = BTreeMap::new();
    for s in series {
        let (packets, bytes, ce) = s.bins.iter().fold((0u64, 0u64, 0u64), |(p, b, c), bin| {
            (
                p + u64::from(bin.packets),
                b.saturating_add(bin.bytes),
                c + u64::from(bin.ce),
            )
        });
        if packets == 0 {
            continue;
        }
        let f = once.entry(s.key).or_insert_with(|| FlowOnce {
            key: s.key,
            packets: 0,
            bytes: 0,
            ce_packets: 0,
            psn_gaps: u64::MAX,
            retransmitted: 0,
            priorities: Vec::new(),
        });
        f.packets = f.packets.max(packets);
        f.bytes = f.bytes.max(bytes);
        f.ce_packets = f.ce_packets.max(ce);
        // The flows table has a row for every frame the rates pass counts (a RoCE frame with an IP header and
        // a BTH); without one there is nothing to say of its PSNs.
        if let Some(r) = rows.get(&(s.iface, s.key)) {
            f.psn_gaps = f.psn_gaps.min(r.psn_gaps);
            f.retransmitted = f.retransmitted.max(r.retransmissions);
            if !f.priorities.contains(&r.priority) {
                f.priorities.push(r.priority);
            }
        }
    }
    once.into_values()
        .map(|mut f| {
            if f.psn_gaps == u64::MAX {
                f.psn_gaps = 0;
            }
            f
        })
        .collect()
}

/// CNPs per (CNP sender, CNP receiver) host pair: each stream (src, dst, QP) at the tap that saw most of it.
pub(super) fn cnps(rows: &[CnpRow]) -> BTreeMap<(IpAddr, IpAddr), u64> {
    let mut streams: BTreeMap<FlowKey, u64> = BTreeMap::new();
    for c in rows {
        let key = FlowKey {
            src: c.src,
            dst: c.dst,
            dest_qp: c.dest_qp,
        };
        let n = streams.entry(key).or_default();
        *n = (*n).max(c.count);
    }
    let mut pairs: BTreeMap<(IpAddr, IpAddr), u64> = BTreeMap::new();
    for (k, n) in streams {
        *pairs.entry((k.src, k.dst)).or_default() += n;
    }
    pairs
}
