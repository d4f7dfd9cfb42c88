//! CNPs counted per (source IP, destination IP, destination QP): who told which sender QP to slow down.

use std::net::IpAddr;

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::flows::FlowKey;
use crate::decode::{Frame, Kind};

/// One row of the CNP table. `dest_qp` is the data sender's QP (the reaction point).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CnpRow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dest_qp: u32,
    pub count: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

#[derive(Debug, Default)]
pub struct CnpPass {
    cnps: FxHashMap<FlowKey, (u64, u64, u64)>,
}

impl CnpPass {
    pub fn frame(&mut self, f: &Frame<'_>) {
        if f.kind != Kind::Cnp {
            return;
        }
        let (Some(ip), Some(bth)) = (f.ip, f.bth()) else {
            return;
        };
        let key = FlowKey {
            src: ip.src,
            dst: ip.dst,
            dest_qp: bth.dest_qp,
        };
        let e = self.cnps.entry(key).or_insert((0, f.ts_ns, f.ts_ns));
        e.0 += 1;
        e.1 = e.1.min(f.ts_ns);
        e.2 = e.2.max(f.ts_ns);
    }

    /// Rows by count, largest first.
    pub fn finish(self) -> Vec<CnpRow> {
        let mut rows: Vec<CnpRow> = self
            .cnps
            .into_iter()
            .map(|(k, (count, first_ns, last_ns))| CnpRow {
                src: k.src,
                dst: k.dst,
                dest_qp: k.dest_qp,
                count,
                first_ns,
                last_ns,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then((a.src, a.dst, a.dest_qp).cmp(&(b.src, b.dst, b.dest_qp)))
        });
        rows
    }
}
