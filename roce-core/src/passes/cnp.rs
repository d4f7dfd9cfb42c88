//! CNPs counted per tap and (source IP, destination IP, destination QP): who told which sender QP to slow
//! down. Per tap, like flows, so that a CNP stream mirrored at two taps is not counted twice.

use std::net::IpAddr;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::flows::FlowKey;
use crate::decode::{Frame, Kind};

/// One row of the CNP table. `dest_qp` is the data sender's QP (the reaction point).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CnpRow {
    /// The tap's index over the capture (as the flows table's `iface`).
    pub iface: u32,
    /// The tap's name, `FILE:IFACE`; filled in by [`crate::passes::Stats::finish`].
    pub tap: String,
    /// The CNP's sender: the notification point (the data's receiver).
    pub src: IpAddr,
    /// The CNP's receiver: the reaction point (the data's sender).
    pub dst: IpAddr,
    /// The QP the CNP names, on the reaction point's side.
    pub dest_qp: u32,
    /// CNPs in the stream.
    pub count: u64,
    /// The first CNP's time.
    pub first_ns: u64,
    /// The last CNP's time.
    pub last_ns: u64,
    /// The last CNP's 802.1p priority (None when untagged) and DSCP.
    pub pcp: Option<u8>,
    /// The last CNP's DSCP (NVIDIA's default for CNPs is 48).
    pub dscp: u8,
    /// The priority the CNPs travel on, and where it came from (see `FlowRow::priority`).
    pub priority: Option<u8>,
    /// Whether `priority` came from the PCP or through the DSCP map.
    pub priority_source: Option<crate::priority::PrioritySource>,
}

#[derive(Debug, Clone, Copy)]
struct CnpState {
    count: u64,
    first_ns: u64,
    last_ns: u64,
    pcp: Option<u8>,
    dscp: u8,
}

/// Groups CNPs into streams per tap and (src, dst, QP).
#[derive(Debug, Default)]
pub struct CnpPass {
    cnps: FxHashMap<(u32, FlowKey), CnpState>,
}

impl CnpPass {
    /// One test for the frames that are not CNPs (nearly all), inlined into the caller's loop.
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) {
        if f.kind == Kind::Cnp {
            self.cnp(f);
        }
    }

    #[inline(never)]
    fn cnp(&mut self, f: &Frame<'_>) {
        let (Some(ip), Some(bth)) = (f.ip, f.bth()) else {
            return;
        };
        let key = FlowKey {
            src: ip.src,
            dst: ip.dst,
            dest_qp: bth.dest_qp,
        };
        let e = self.cnps.entry((f.iface, key)).or_insert(CnpState {
            count: 0,
            first_ns: f.ts_ns,
            last_ns: f.ts_ns,
            pcp: None,
            dscp: 0,
        });
        e.count += 1;
        e.first_ns = e.first_ns.min(f.ts_ns);
        e.last_ns = e.last_ns.max(f.ts_ns);
        e.pcp = f.pcp;
        e.dscp = ip.dscp;
    }

    /// Takes another pass's streams: a thread's share of the capture, whose keys no other thread held.
    pub fn absorb(&mut self, other: CnpPass) {
        self.cnps.extend(other.cnps);
    }

    /// Rows by count, largest first.
    pub fn finish(self) -> Vec<CnpRow> {
        let mut rows: Vec<CnpRow> = self
            .cnps
            .into_iter()
            .map(|((iface, k), c)| CnpRow {
                iface,
                tap: String::new(),
                src: k.src,
                dst: k.dst,
                dest_qp: k.dest_qp,
                count: c.count,
                first_ns: c.first_ns,
                last_ns: c.last_ns,
                pcp: c.pcp,
                dscp: c.dscp,
                priority: None,
                priority_source: None,
            })
            .collect();
        // CNP streams are unique by key: a total order, so unstable sorting is deterministic.
        rows.sort_unstable_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then((a.src, a.dst, a.dest_qp, a.iface).cmp(&(b.src, b.dst, b.dest_qp, b.iface)))
        });
        rows
    }
}
