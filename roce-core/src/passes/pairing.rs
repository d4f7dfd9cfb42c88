//! Which sender QP each data flow belongs to, so CNPs (addressed to the sender's QP) can be tied to the data
//! (addressed to the receiver's QP).
//!
//! A data flow S→R carries BTH.DestQP = q_R; the CNPs R→S carry DestQP = q_S. Nothing in a single packet links
//! the two numbers, so the evidence is gathered over the capture, most reliable first (dcqcn.md):
//! 1. IB CM MADs: a REQ names the active side's QP, the REP that answers it (same communication ID) the passive
//!    side's.
//! 2. Reverse transport traffic: ACKs, NAKs, atomic ACKs and READ responses B→A acknowledge PSNs of A's requests
//!    to B; a response to q_A whose PSN falls inside the PSNs A sent to q_B votes for (q_A, q_B).
//! 3. UD: the DETH carries the sender's QP.
//! 4. Timing: a CNP R→S to q_S shortly (0–20 µs) after a CE-marked packet S→R to q_R votes for (q_S, q_R).
//!
//! State is per flow and per candidate pair, never per packet.

use std::collections::VecDeque;
use std::net::IpAddr;

use roce_wire::Transport;
use roce_wire::mad::{CmMessage, QP1, parse_cm};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use super::flows::FlowKey;
use super::psn::psn_diff;
use crate::decode::{ECN_CE, Frame, Kind};

/// How a pairing was established, most reliable first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    CmMad,
    ReverseTraffic,
    UdDeth,
    Timing,
}

impl Method {
    /// The name JSON and tables use (the same as its serde name).
    pub fn key(self) -> &'static str {
        match self {
            Method::CmMad => "cm_mad",
            Method::ReverseTraffic => "reverse_traffic",
            Method::UdDeth => "ud_deth",
            Method::Timing => "timing",
        }
    }
}

/// Window after a CE mark in which a CNP counts as its answer.
pub const TIMING_WINDOW_NS: u64 = 20_000;
/// CE marks remembered per IP pair for the timing method.
const RECENT_CE: usize = 32;
/// The largest PSN span a READ REQUEST can open (PMTU 256 bytes); its responses fall inside.
fn read_span(len: u32) -> u32 {
    len.div_ceil(256).max(1)
}

/// The PSNs a flow's requests covered, as a 24-bit window [lo, hi].
#[derive(Debug, Clone, Copy)]
struct PsnWindow {
    lo: u32,
    hi: u32,
}

impl PsnWindow {
    fn extend(&mut self, psn: u32, span: u32) {
        let end = (psn + span - 1) & 0xff_ffff;
        if psn_diff(psn, self.lo) < 0 {
            self.lo = psn;
        }
        if psn_diff(end, self.hi) > 0 {
            self.hi = end;
        }
    }
    fn contains(&self, psn: u32) -> bool {
        psn_diff(psn, self.lo) >= 0 && psn_diff(self.hi, psn) >= 0
    }
}

/// A connection seen from one side: (this host, peer host, the QP on the peer that this host addresses).
type Side = FlowKey;

#[derive(Debug, Default)]
pub struct PairingPass {
    /// CM REQs waiting for their REP: (requester, responder, requester's comm ID) → requester's QP.
    cm_req: FxHashMap<(IpAddr, IpAddr, u32), u32>,
    /// Request flows' PSN windows, and the flows per (src, dst) to search.
    windows: FxHashMap<FlowKey, PsnWindow>,
    by_ip_pair: FxHashMap<(IpAddr, IpAddr), Vec<u32>>,
    /// Recent CE marks per (data sender, data receiver): (receiver QP, time).
    recent_ce: FxHashMap<(IpAddr, IpAddr), VecDeque<(u32, u64)>>,
    votes: FxHashMap<(Side, u32, Method), u64>,
}

/// The pairing of one data flow: its key (sender, receiver, receiver's QP) and the sender's QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pair {
    pub sender: IpAddr,
    pub receiver: IpAddr,
    pub receiver_qp: u32,
    pub sender_qp: u32,
    pub method: Method,
    /// How many observations supported it (CM handshakes, matching responses, DETHs, CNPs after CE).
    pub evidence: u64,
}

/// Every pairing found, looked up by either direction.
#[derive(Debug, Clone, Default)]
pub struct Pairing {
    /// (sender, receiver, receiver's QP) → pair
    pairs: FxHashMap<FlowKey, Pair>,
}

impl Pairing {
    /// The pair of the flow that sends to `key.dest_qp` on `key.dst` from `key.src`.
    pub fn of_flow(&self, key: &FlowKey) -> Option<&Pair> {
        self.pairs.get(key)
    }

    /// The data flow a CNP stream belongs to: the CNP goes R→S to q_S, so look for S→R flows paired with q_S.
    pub fn of_cnp(&self, cnp: &FlowKey) -> Option<&Pair> {
        self.pairs
            .values()
            .filter(|p| p.sender == cnp.dst && p.receiver == cnp.src && p.sender_qp == cnp.dest_qp)
            .min_by_key(|p| (p.method, std::cmp::Reverse(p.evidence)))
    }

    /// The QP that sends a flow (`src` → `dst`, to `dest_qp`): for a paired data flow its sender's QP; for
    /// the flow coming back (ACKs, responses, CNPs to the sender's QP) the data flow's receiver QP.
    pub fn sender_qp(&self, key: &FlowKey) -> Option<(u32, Method)> {
        if let Some(p) = self.of_flow(key) {
            return Some((p.sender_qp, p.method));
        }
        self.pairs
            .values()
            .filter(|p| p.sender == key.dst && p.receiver == key.src && p.sender_qp == key.dest_qp)
            .min_by_key(|p| (p.method, std::cmp::Reverse(p.evidence)))
            .map(|p| (p.receiver_qp, p.method))
    }

    pub fn pairs(&self) -> impl Iterator<Item = &Pair> {
        self.pairs.values()
    }
}

impl PairingPass {
    fn vote(&mut self, side: Side, other_qp: u32, method: Method) {
        *self.votes.entry((side, other_qp, method)).or_insert(0) += 1;
    }

    pub fn frame(&mut self, f: &Frame<'_>) {
        let (Some(ip), Some(roce)) = (f.ip, f.roce.as_ref()) else {
            return;
        };
        let Some(bth) = roce.packet.bth else { return };
        let (src, dst) = (ip.src, ip.dst);
        if f.kind == Kind::Cnp {
            self.cnp(src, dst, bth.dest_qp, f.ts_ns);
            return;
        }
        let op = bth.opcode;
        let key = FlowKey {
            src,
            dst,
            dest_qp: bth.dest_qp,
        };
        if op.transport() == Transport::Ud {
            if let Some(deth) = roce.packet.ext.deth {
                if bth.dest_qp == QP1 {
                    self.cm(f, src, dst, roce.payload_offset);
                } else {
                    self.vote(key, deth.src_qp, Method::UdDeth);
                }
            }
            return;
        }
        if op.consumes_request_psn() {
            let span = if op.is_read_request() {
                read_span(roce.packet.ext.reth.map_or(0, |r| r.dma_len))
            } else {
                1
            };
            match self.windows.get_mut(&key) {
                Some(w) => w.extend(bth.psn, span),
                None => {
                    self.windows.insert(
                        key,
                        PsnWindow {
                            lo: bth.psn,
                            hi: (bth.psn + span - 1) & 0xff_ffff,
                        },
                    );
                    self.by_ip_pair
                        .entry((src, dst))
                        .or_default()
                        .push(bth.dest_qp);
                }
            }
        } else if op.is_ack() || op.is_read_response() {
            // This packet goes src→dst and answers requests that went dst→src.
            let candidates = self
                .by_ip_pair
                .get(&(dst, src))
                .cloned()
                .unwrap_or_default();
            for q in candidates {
                let req = FlowKey {
                    src: dst,
                    dst: src,
                    dest_qp: q,
                };
                if self.windows.get(&req).is_some_and(|w| w.contains(bth.psn)) {
                    // The requester (dst) addresses q on src; src addresses bth.dest_qp on dst.
                    self.vote(req, bth.dest_qp, Method::ReverseTraffic);
                }
            }
        }
        if ip.ecn == ECN_CE {
            let ring = self.recent_ce.entry((src, dst)).or_default();
            if ring.len() == RECENT_CE {
                ring.pop_front();
            }
            ring.push_back((bth.dest_qp, f.ts_ns));
        }
    }

    fn cnp(&mut self, from: IpAddr, to: IpAddr, sender_qp: u32, t: u64) {
        // The CNP goes receiver → sender; CE marks went sender → receiver.
        let Some(ring) = self.recent_ce.get(&(to, from)) else {
            return;
        };
        let mut hits: Vec<u32> = ring
            .iter()
            .filter(|(_, ce_t)| t >= *ce_t && t - ce_t <= TIMING_WINDOW_NS)
            .map(|(q, _)| *q)
            .collect();
        hits.sort_unstable();
        hits.dedup();
        for q in hits {
            let data = FlowKey {
                src: to,
                dst: from,
                dest_qp: q,
            };
            self.vote(data, sender_qp, Method::Timing);
        }
    }

    fn cm(&mut self, f: &Frame<'_>, src: IpAddr, dst: IpAddr, payload_offset: usize) {
        let Some(mad) = f.data.get(payload_offset..) else {
            return;
        };
        match parse_cm(mad) {
            Ok(Some(CmMessage::Req {
                local_comm_id,
                local_qpn,
                ..
            })) => {
                self.cm_req.insert((src, dst, local_comm_id), local_qpn);
            }
            Ok(Some(CmMessage::Rep {
                remote_comm_id,
                local_qpn,
                ..
            })) => {
                // The REP goes passive → active; the REQ it answers went active → passive.
                if let Some(&active_qp) = self.cm_req.get(&(dst, src, remote_comm_id)) {
                    let a_to_b = FlowKey {
                        src: dst,
                        dst: src,
                        dest_qp: local_qpn,
                    };
                    self.vote(a_to_b, active_qp, Method::CmMad);
                }
            }
            _ => {}
        }
    }

    /// Resolves the votes: for every flow the best-supported sender QP by the most reliable method, each QP
    /// used once per host pair and method (a greedy assignment, strongest evidence first).
    pub fn finish(self) -> Pairing {
        let mut candidates: Vec<((Side, u32, Method), u64)> = self.votes.into_iter().collect();
        candidates.sort_by(|a, b| {
            (a.0.2, std::cmp::Reverse(a.1), a.0.0, a.0.1).cmp(&(
                b.0.2,
                std::cmp::Reverse(b.1),
                b.0.0,
                b.0.1,
            ))
        });
        let mut pairs: FxHashMap<FlowKey, Pair> = FxHashMap::default();
        let mut used: FxHashSet<(IpAddr, IpAddr, u32)> = FxHashSet::default();
        for ((side, other_qp, method), evidence) in candidates {
            // A connection pairs both directions: side = (A→B, q_B) with q_A, and (B→A, q_A) with q_B.
            let reverse = FlowKey {
                src: side.dst,
                dst: side.src,
                dest_qp: other_qp,
            };
            let (fwd_free, rev_free) = (
                !pairs.contains_key(&side) && !used.contains(&(side.src, side.dst, other_qp)),
                !pairs.contains_key(&reverse)
                    && !used.contains(&(reverse.src, reverse.dst, side.dest_qp)),
            );
            if !fwd_free {
                continue;
            }
            pairs.insert(
                side,
                Pair {
                    sender: side.src,
                    receiver: side.dst,
                    receiver_qp: side.dest_qp,
                    sender_qp: other_qp,
                    method,
                    evidence,
                },
            );
            used.insert((side.src, side.dst, other_qp));
            // UD and timing evidence is one-directional; a connection (CM, RC responses) pairs both ways.
            if rev_free && matches!(method, Method::CmMad | Method::ReverseTraffic) {
                pairs.insert(
                    reverse,
                    Pair {
                        sender: reverse.src,
                        receiver: reverse.dst,
                        receiver_qp: reverse.dest_qp,
                        sender_qp: side.dest_qp,
                        method,
                        evidence,
                    },
                );
                used.insert((reverse.src, reverse.dst, side.dest_qp));
            }
        }
        Pairing { pairs }
    }
}
