//! Which sender QP each data flow belongs to, so CNPs (addressed to the sender's QP) can be tied to the data
//! (addressed to the receiver's QP).
//!
//! A data flow S→R carries BTH.DestQP = q_R; the CNPs R→S carry DestQP = q_S. Nothing in a single packet links
//! the two numbers, so evidence is gathered over the capture for every candidate pair, and a pair is made only
//! when one candidate clearly wins: a CNP stream tied to the wrong flow makes the model cut a flow that was
//! never marked, which is worse than no pairing at all. The kinds of evidence, most reliable first:
//! 1. IB CM MADs: a REQ names the active side's QP, the REP that answers it (same communication ID) the passive
//!    side's. UD: the DETH carries the sender's QP. Either is proof.
//! 2. Reverse transport traffic: ACKs, NAKs, atomic ACKs and READ responses B→A to q_A acknowledge PSNs of A's
//!    requests to B. A response fits a request flow when its PSN is at most [`ACK_WINDOW`] PSNs behind the
//!    flow's highest PSN (24-bit arithmetic, so a flow past 2^23 PSNs still fits; retransmissions do not move
//!    the high-water mark). A real connection fits (nearly) every response; two flows whose PSNs run side by
//!    side (QPs that all start at PSN 0) both fit, and this evidence then only narrows the candidates.
//! 3. Timing: a CNP R→S to q_S within [`TIMING_WINDOW_NS`] after a CE-marked packet S→R to q_R counts for
//!    (q_S, q_R). Each flow keeps only its last CE time per tap, so no evidence is dropped however fast the link.
//! 4. Activity, when the capture shows no CE mark for any candidate (a tap at the sender, before the switch
//!    that marks): a CNP counts for the flows that sent within [`ACTIVITY_WINDOW_NS`] before it.
//!
//! Hits are weighed against chance (`decide`, `chance`; docs/pairing.md): each flow also accumulates the time
//! its windows cover, so that at the end its share of the stream's time says how many hits a flow that is not
//! the stream's would score, and a pair is made only when the winner's score would come by chance at most once
//! in [`FALSE_PAIR_RATE`]⁻¹ streams, over all its candidates. A CNP stream with candidates but no such winner is
//! reported as ambiguous, with every candidate's evidence and the reason. Each pair is also checked to be
//! one-to-one: two streams that claim one flow on equal evidence lose it both.
//!
//! For the check of the notification point, the pass also notes which CE mark each CNP of a paired stream could
//! be answering (the first CE of the flow after the stream's previous CNP). Which flow a stream pairs with is
//! only known at the end, and a stream has as many candidates as its host pair has flows (64 in a saturation
//! test), so nothing is worked out per candidate as the frames pass: each flow logs its CE marks and each
//! stream its CNPs per tap (compactly, a few bytes each), and [`PairingPass::finish`] replays the two logs of
//! each pair made, and of no other. The CNP logs of every stream stay with the [`Pairing`]: the DCQCN analysis
//! reads each stream's CNP times from them ([`Pairing::cnp_times`]) rather than keep a copy in memory.
//!
//! State is per flow, per stream and per candidate pair, plus those two logs of marks and CNPs.

use std::net::IpAddr;

use rayon::prelude::*;
use roce_wire::Transport;
use roce_wire::mad::{CmMessage, QP1};
use rustc_hash::FxHashMap;
use serde::Serialize;

mod chance;
mod decide;
mod logs;
mod psn_fit;

pub use decide::{Ambiguous, Candidate, Evidence, FALSE_PAIR_RATE, RUNNER_UP_CHANCE};
pub use logs::{NP_GAPS_US, NpMarks};

use super::brief::Brief;
use super::flow_index::FlowIndex;
use super::flows::FlowKey;
use crate::decode::{ECN_CE, Kind};
use crate::spill::Spill;
use decide::{Decision, decide};
use logs::{EventLog, np_marks};
use psn_fit::{RequestGroup, Responses, read_span};

/// How a pairing was established, most reliable first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The connection manager's REQ/REP exchange named both QPs.
    CmMad,
    /// ACKs or read responses the other way fitted the flow's PSNs.
    ReverseTraffic,
    /// A UD datagram's DETH named the source QP.
    UdDeth,
    /// CNPs after CE marks of the flow (and, when reverse traffic fitted several flows, this decided).
    Timing,
    /// CNPs while only this flow was sending (no CE visible at the tap).
    Activity,
}

impl Method {
    /// The name JSON and tables use (the same as its serde name).
    pub fn key(self) -> &'static str {
        match self {
            Method::CmMad => "cm_mad",
            Method::ReverseTraffic => "reverse_traffic",
            Method::UdDeth => "ud_deth",
            Method::Timing => "timing",
            Method::Activity => "activity",
        }
    }
}

/// Window after a CE mark in which a CNP counts as its answer.
pub const TIMING_WINDOW_NS: u64 = 20_000;
/// How recently a flow must have sent for a CNP to count for it when no CE is visible: the CNP reaches a tap at
/// the sender a round trip (plus the NP's delay) after the marked packet passed it.
pub const ACTIVITY_WINDOW_NS: u64 = 100_000;
/// How far behind a request flow's highest PSN an acknowledgement may be and still fit it: more PSNs than any
/// sender keeps outstanding, far fewer than half the 24-bit space.
pub const ACK_WINDOW: u32 = 1 << 16;
/// A winner by CM handshakes or DETHs must have at least this many times the runner-up's.
pub const CLEAR_MARGIN: f64 = 2.0;
/// The least share of a stream's CNPs that must follow the winner's CE marks (or its sending).
pub const MIN_TIMING_SHARE: f64 = 0.5;
/// The least share of an activity winner: a flow idle at one CNP in ten is no proof.
pub const MIN_ACTIVITY_SHARE: f64 = 0.9;
/// The least share of the responses that a candidate connection must fit to count as consistent with them.
pub const MIN_REVERSE_SHARE: f64 = 0.9;

/// The tap the responses are counted at: all of them, as one.
const ALL_TAPS: u32 = u32::MAX;

/// What one flow S→R did at one tap, for the timing evidence.
#[derive(Debug)]
struct TapFlow {
    receiver_qp: u32,
    /// Its place among the request flows, once it sent a request.
    request: Option<(u32, u32)>,
    last_ce: Option<u64>,
    last_tx: Option<u64>,
    /// Time covered by the timing windows after its CE marks, and by the activity windows after its packets,
    /// up to its last mark and its last packet: what a foreign flow's hits are weighed against.
    ce_covered: u64,
    tx_covered: u64,
}

/// The flows S→R at one tap, in the order they were first seen there: a CNP R→S meets them all, so what it
/// reads of them lies side by side.
#[derive(Debug, Default)]
struct TapGroup {
    flows: Vec<TapFlow>,
    /// Each flow's CE marks, for the NP check of the pair the flow may end in.
    ce_logs: Vec<EventLog>,
}

/// A CNP stream at one tap.
#[derive(Debug, Default)]
struct TapStream {
    /// Per flow of the group, in its order, what it scored. A flow is a candidate once this covers it.
    hits: Vec<Hits>,
    /// The stream's first and last CNP at the tap: the span the candidates' covered time is measured over.
    first: Option<u64>,
    last: u64,
    /// Every CNP, for the NP check.
    log: EventLog,
}

/// What one candidate scored against one stream at one tap: CNPs after one of its CE marks and CNPs while it
/// sent, and its covered time (timing, activity) at the stream's first and latest CNP there.
#[derive(Debug, Default, Clone, Copy)]
struct Hits {
    ce: u32,
    active: u32,
    ce_from: u64,
    ce_to: u64,
    tx_from: u64,
    tx_to: u64,
}

/// One kind of a candidate's hits (timing or activity) at the tap where they were least likely by chance.
#[derive(Debug, Clone, Copy)]
struct Tail {
    /// P(hits or more | the null rate there).
    tail: f64,
    /// The share of the stream's time the candidate's windows covered there.
    null: Option<f64>,
}

impl Default for Tail {
    fn default() -> Self {
        Tail {
            tail: 1.0,
            null: None,
        }
    }
}

impl Tail {
    /// Weighs `hits` of `n` CNPs at a tap where the candidate covered `null` of the time; keeps the least
    /// likely tap.
    fn keep(&mut self, n: u64, hits: u32, null: f64) {
        let tail = chance::binomial_tail(n, u64::from(hits), null);
        if self.null.is_none() || tail < self.tail {
            *self = Tail {
                tail,
                null: Some(null),
            };
        }
    }
}

/// A candidate's timing and activity hits, weighed.
#[derive(Debug, Default, Clone, Copy)]
struct Weighed {
    ce: Tail,
    active: Tail,
}

/// The pass.
#[derive(Debug, Default)]
pub struct PairingPass {
    /// CM REQs waiting for their REP: (requester, responder, requester's comm ID) → requester's QP.
    cm_req: FxHashMap<(IpAddr, IpAddr, u32), u32>,
    /// Request flows' PSNs, grouped per (src, dst): (request flow) → (group, index in it).
    requests: FxHashMap<FlowKey, (u32, u32)>,
    request_groups: Vec<RequestGroup>,
    request_groups_by_pair: FxHashMap<(IpAddr, IpAddr), u32>,
    /// Responses (ACK/NAK/READ response) per stream, over all taps (counted as at tap [`ALL_TAPS`]).
    responses: FlowIndex<Responses>,
    /// Flows per (tap, sender, receiver) and their timing state: (tap, flow) → a number, and by that number
    /// (group, index in it).
    tap_flows: FlowIndex<(u32, u32)>,
    tap_groups: Vec<TapGroup>,
    tap_groups_by_pair: FxHashMap<(u32, IpAddr, IpAddr), u32>,
    tap_streams: FxHashMap<(u32, FlowKey), TapStream>,
    /// Frames met so far: the order of the logs' entries.
    seq: u64,
    /// Where the logs of CE marks and CNPs keep their older entries.
    spill: Spill,
    /// CNPs per stream, over all taps (the timing shares' denominator, counted as the hits are).
    cnps: FxHashMap<FlowKey, u64>,
    /// (stream, candidate receiver QP) → evidence.
    evidence: FxHashMap<(FlowKey, u32), Evidence>,
}

/// The pairing of one data flow: its key (sender, receiver, receiver's QP) and the sender's QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pair {
    /// The data's sender (the reaction point).
    pub sender: IpAddr,
    /// The data's receiver (the notification point).
    pub receiver: IpAddr,
    /// The receiver's QP: the data flow's BTH destination QP.
    pub receiver_qp: u32,
    /// The sender's QP: the QP its CNPs name.
    pub sender_qp: u32,
    /// Which kind of evidence decided.
    pub method: Method,
    /// How many observations of the deciding kind supported it (CM handshakes, fitting responses, DETHs,
    /// CNPs after CE, CNPs while sending).
    pub evidence: u64,
}

impl Pair {
    /// The data flow's key: sender to receiver, to the receiver's QP.
    pub fn flow(&self) -> FlowKey {
        FlowKey {
            src: self.sender,
            dst: self.receiver,
            dest_qp: self.receiver_qp,
        }
    }

    /// The CNP stream's key: the receiver back to the sender, to the sender's QP.
    pub fn stream(&self) -> FlowKey {
        FlowKey {
            src: self.receiver,
            dst: self.sender,
            dest_qp: self.sender_qp,
        }
    }
}

/// Every pairing found, looked up by either direction, and the streams that could not be decided.
#[derive(Debug, Default)]
pub struct Pairing {
    /// (sender, receiver, receiver's QP) → pair
    pairs: FxHashMap<FlowKey, Pair>,
    /// Stream (to the sender's QP) → the data flow's key.
    by_stream: FxHashMap<FlowKey, FlowKey>,
    ambiguous: FxHashMap<FlowKey, Ambiguous>,
    /// Per (tap, stream): the stream's CNPs there, for [`Pairing::cnp_times`].
    cnp_logs: FxHashMap<(u32, FlowKey), EventLog>,
    /// Per (tap, paired stream): its flow's CE marks there, worked with the stream's CNPs into the NP check's
    /// marks when asked ([`Pairing::ce_triggers`]), one pair at a time.
    ce_logs: FxHashMap<(u32, FlowKey), EventLog>,
    /// Where the logs' older entries are.
    spill: Spill,
}

impl Pairing {
    /// The pair of the flow that sends to `key.dest_qp` on `key.dst` from `key.src`.
    pub fn of_flow(&self, key: &FlowKey) -> Option<&Pair> {
        self.pairs.get(key)
    }

    /// The data flow a CNP stream belongs to: the CNP goes R→S to q_S, the flow S→R.
    pub fn of_cnp(&self, cnp: &FlowKey) -> Option<&Pair> {
        self.by_stream.get(cnp).and_then(|k| self.pairs.get(k))
    }

    /// The QP that sends a flow (`src` → `dst`, to `dest_qp`): for a paired data flow its sender's QP; for
    /// the flow coming back (ACKs, responses, CNPs to the sender's QP) the data flow's receiver QP.
    pub fn sender_qp(&self, key: &FlowKey) -> Option<(u32, Method)> {
        if let Some(p) = self.of_flow(key) {
            return Some((p.sender_qp, p.method));
        }
        self.of_cnp(key).map(|p| (p.receiver_qp, p.method))
    }

    /// Every pairing made.
    pub fn pairs(&self) -> impl Iterator<Item = &Pair> {
        self.pairs.values()
    }

    /// Why the stream `cnp` (receiver → sender, to the sender's QP) was left unpaired although flows were
    /// candidates; None when it was paired or had no candidate at all.
    pub fn ambiguous(&self, cnp: &FlowKey) -> Option<&Ambiguous> {
        self.ambiguous.get(cnp)
    }

    /// Every stream left unpaired although flows were candidates.
    pub fn ambiguous_streams(&self) -> impl Iterator<Item = &Ambiguous> {
        self.ambiguous.values()
    }

    /// For the stream's CNPs seen at tap `iface`: (CNP time, the CE mark of the paired `flow` it answers), for
    /// the CNPs that had one at that tap, when the notification point waits `min_gap_ns` after each CNP: the
    /// flow's first mark at or after that gap (with a gap not in [`NP_GAPS_US`], the largest below it).
    pub fn ce_triggers(
        &self,
        iface: u32,
        stream: &FlowKey,
        flow: &FlowKey,
        min_gap_ns: u64,
    ) -> Vec<(u64, u64)> {
        let slot = NP_GAPS_US
            .iter()
            .rposition(|&g| g * 1_000 <= min_gap_ns)
            .unwrap_or(0);
        let key = (iface, *stream);
        let (Some(cnps), Some(ce)) = (self.cnp_logs.get(&key), self.ce_logs.get(&key)) else {
            return Vec::new();
        };
        if self.by_stream.get(stream) != Some(flow) {
            return Vec::new();
        }
        np_marks(cnps.iter(&self.spill), ce.iter(&self.spill))
            .into_iter()
            .filter(|(_, m)| m[slot] != u32::MAX)
            .map(|(t, m)| (t, t - u64::from(m[slot])))
            .collect()
    }

    /// Every CNP stream at every tap it was seen at (tap, stream), with its CNPs there.
    pub fn cnp_streams(&self) -> impl Iterator<Item = ((u32, FlowKey), u64)> + '_ {
        self.cnp_logs.iter().map(|(&k, cnps)| (k, cnps.len))
    }

    /// The times of the stream's CNPs at tap `iface`, in the order they were met: read back from the log
    /// that waited on disk, so that no CNP time is held in memory while the capture is read.
    pub fn cnp_times(&self, iface: u32, stream: &FlowKey) -> Vec<u64> {
        self.cnp_logs
            .get(&(iface, *stream))
            .map_or_else(Vec::new, |l| l.iter(&self.spill).map(|(t, _)| t).collect())
    }

    /// Why [`Pairing::ce_triggers`] or [`Pairing::cnp_times`] may have answered from part of the logs: the
    /// first failure to read them back from their temporary file since the last call.
    pub fn spill_error(&self) -> Option<std::io::Error> {
        self.spill.take_error()
    }
}

impl Pairing {
    /// The pairs and the ambiguous streams of `decided`; the logs are added by [`PairingPass::finish`].
    fn of(decided: Vec<(FlowKey, Decision)>) -> Pairing {
        let mut pairing = Pairing::default();
        for (stream, d) in decided {
            match d {
                Decision::Pair {
                    receiver_qp,
                    method,
                    evidence,
                    ..
                } => {
                    let flow = flow_of(&stream, receiver_qp);
                    pairing.pairs.insert(
                        flow,
                        Pair {
                            sender: flow.src,
                            receiver: flow.dst,
                            receiver_qp,
                            sender_qp: stream.dest_qp,
                            method,
                            evidence,
                        },
                    );
                    pairing.by_stream.insert(stream, flow);
                }
                Decision::Ambiguous(a) => {
                    pairing.ambiguous.insert(stream, a);
                }
                Decision::None => {}
            }
        }
        pairing
    }
}

/// The flow a stream to (S, q_S) from R would answer: S → R to `receiver_qp`.
fn flow_of(stream: &FlowKey, receiver_qp: u32) -> FlowKey {
    FlowKey {
        src: stream.dst,
        dst: stream.src,
        dest_qp: receiver_qp,
    }
}

impl PairingPass {
    /// A pass whose logs of CE marks and CNPs stay in memory, for where no temporary file may be made (the
    /// default pass keeps them in one, and only their newest bytes in memory).
    pub fn in_memory() -> PairingPass {
        PairingPass {
            spill: Spill::in_memory(),
            ..PairingPass::default()
        }
    }

    /// Bytes of those logs in the temporary file, and in memory.
    pub fn spilled(&self) -> (u64, usize) {
        self.spill.sizes()
    }

    fn evidence(&mut self, stream: FlowKey, receiver_qp: u32) -> &mut Evidence {
        self.evidence.entry((stream, receiver_qp)).or_default()
    }

    /// A connection between (a, qa) and (b, qb) counts for both of its streams.
    fn connection(&mut self, a: IpAddr, qa: u32, b: IpAddr, qb: u32, vote: fn(&mut Evidence)) {
        vote(self.evidence(
            FlowKey {
                src: b,
                dst: a,
                dest_qp: qa,
            },
            qb,
        ));
        vote(self.evidence(
            FlowKey {
                src: a,
                dst: b,
                dest_qp: qb,
            },
            qa,
        ));
    }

    /// Collects evidence from one frame.
    pub fn frame(&mut self, f: &Brief) {
        self.seq += 1;
        let (Some(ip), Some(roce)) = (f.ip, f.roce.as_ref()) else {
            return;
        };
        let bth = roce.bth;
        let key = FlowKey {
            src: ip.src,
            dst: ip.dst,
            dest_qp: bth.dest_qp,
        };
        if f.kind == Kind::Cnp {
            self.cnp(f.iface, key, f.ts_ns);
            return;
        }
        let op = bth.opcode;
        if op.transport() == Transport::Ud {
            if let Some(src_qp) = roce.src_qp {
                if bth.dest_qp == QP1 {
                    self.cm(roce.cm, ip.src, ip.dst);
                } else {
                    // The stream back to the sender's QP answers this flow.
                    let stream = FlowKey {
                        src: ip.dst,
                        dst: ip.src,
                        dest_qp: src_qp,
                    };
                    self.evidence(stream, bth.dest_qp).deth += 1;
                    self.sent(f, key, ip.ecn == ECN_CE);
                }
            }
            return;
        }
        if op.consumes_request_psn() {
            let span = if op.is_read_request() {
                read_span(roce.dma_len.unwrap_or(0))
            } else {
                1
            };
            // The flow's entry at the tap keeps its place among the request flows: one lookup per packet.
            let at = self.tap_flow(f.iface, key);
            let known = self.tap_groups[at.0 as usize].flows[at.1 as usize].request;
            let (g, i) = match known {
                Some(r) => r,
                None => {
                    let r = self.request_flow(key, bth.psn, span);
                    self.tap_groups[at.0 as usize].flows[at.1 as usize].request = Some(r);
                    r
                }
            };
            self.request_groups[g as usize].extend(i as usize, bth.psn, span);
            self.sent_at(at, f.ts_ns, ip.ecn == ECN_CE);
            return;
        }
        if op.is_ack() || op.is_read_response() {
            // This packet goes src→dst to q_dst and answers requests that went dst→src.
            let r = self
                .responses
                .find_or_add(ALL_TAPS, &key, Responses::default);
            r.count += 1;
            if r.group.is_none() {
                r.group = self.request_groups_by_pair.get(&(ip.dst, ip.src)).copied();
            }
            if let Some(group) = r.group.and_then(|g| self.request_groups.get(g as usize)) {
                r.fit(group, bth.psn);
            }
        }
        // Every packet but a pure acknowledgement carries data that a switch may mark (READ responses too).
        if !op.is_ack() {
            self.sent(f, key, ip.ecn == ECN_CE);
        }
    }

    /// A data packet of `key` at the frame's tap.
    fn sent(&mut self, f: &Brief, key: FlowKey, ce: bool) {
        let at = self.tap_flow(f.iface, key);
        self.sent_at(at, f.ts_ns, ce);
    }

    /// The flow's place among the flows of its host pair at the tap, made on its first packet there.
    fn tap_flow(&mut self, iface: u32, key: FlowKey) -> (u32, u32) {
        *self.tap_flows.find_or_add(iface, &key, || {
            let next = self.tap_groups.len() as u32;
            let g = *self
                .tap_groups_by_pair
                .entry((iface, key.src, key.dst))
                .or_insert(next);
            if g == next {
                self.tap_groups.push(TapGroup::default());
            }
            let group = &mut self.tap_groups[g as usize];
            group.flows.push(TapFlow {
                receiver_qp: key.dest_qp,
                request: None,
                last_ce: None,
                last_tx: None,
                ce_covered: 0,
                tx_covered: 0,
            });
            group.ce_logs.push(EventLog::default());
            (g, group.flows.len() as u32 - 1)
        })
    }

    /// The request flow `key`'s place among the request flows of its host pair, made (at `psn`, a request
    /// of `span` PSNs) on its first request at any tap.
    fn request_flow(&mut self, key: FlowKey, psn: u32, span: u32) -> (u32, u32) {
        if let Some(&at) = self.requests.get(&key) {
            return at;
        }
        let next = self.request_groups.len() as u32;
        let g = *self
            .request_groups_by_pair
            .entry((key.src, key.dst))
            .or_insert(next);
        if g == next {
            self.request_groups.push(RequestGroup::default());
        }
        let at = (
            g,
            self.request_groups[g as usize].push(key.dest_qp, psn, span),
        );
        self.requests.insert(key, at);
        at
    }

    fn sent_at(&mut self, (g, i): (u32, u32), ts_ns: u64, ce: bool) {
        let group = &mut self.tap_groups[g as usize];
        let s = &mut group.flows[i as usize];
        s.tx_covered = chance::covered(s.tx_covered, s.last_tx, ts_ns, ACTIVITY_WINDOW_NS);
        s.last_tx = Some(ts_ns);
        if ce {
            s.ce_covered = chance::covered(s.ce_covered, s.last_ce, ts_ns, TIMING_WINDOW_NS);
            s.last_ce = Some(ts_ns);
            group.ce_logs[i as usize].push(ts_ns, self.seq, &mut self.spill);
        }
    }

    /// A CNP R→S to q_S (`stream`) at `t`: every flow S→R at the same tap is a candidate.
    fn cnp(&mut self, iface: u32, stream: FlowKey, t: u64) {
        *self.cnps.entry(stream).or_default() += 1;
        let st = self.tap_streams.entry((iface, stream)).or_default();
        st.log.push(t, self.seq, &mut self.spill);
        let Some(&g) = self
            .tap_groups_by_pair
            .get(&(iface, stream.dst, stream.src))
        else {
            return;
        };
        let flows = &self.tap_groups[g as usize].flows;
        // A flow met first after the stream's first CNP had covered nothing before it: its Hits start at 0.
        let first = st.first.is_none();
        st.first.get_or_insert(t);
        st.last = t;
        if st.hits.len() < flows.len() {
            st.hits.resize(flows.len(), Hits::default());
        }
        for (tf, h) in flows.iter().zip(&mut st.hits) {
            let ce_hit = tf
                .last_ce
                .is_some_and(|c| c <= t && t - c <= TIMING_WINDOW_NS);
            let active = tf
                .last_tx
                .is_some_and(|s| s <= t && t - s <= ACTIVITY_WINDOW_NS);
            h.ce += u32::from(ce_hit);
            h.active += u32::from(active);
            h.ce_to = chance::covered(tf.ce_covered, tf.last_ce, t, TIMING_WINDOW_NS);
            h.tx_to = chance::covered(tf.tx_covered, tf.last_tx, t, ACTIVITY_WINDOW_NS);
            if first {
                (h.ce_from, h.tx_from) = (h.ce_to, h.tx_to);
            }
        }
    }

    /// A CM message from `src` to `dst` (parsed with the frame's brief: see [`Brief`]).
    fn cm(&mut self, message: Option<CmMessage>, src: IpAddr, dst: IpAddr) {
        match message {
            Some(CmMessage::Req {
                local_comm_id,
                local_qpn,
                ..
            }) => {
                self.cm_req.insert((src, dst, local_comm_id), local_qpn);
            }
            Some(CmMessage::Rep {
                remote_comm_id,
                local_qpn,
                ..
            }) => {
                // The REP goes passive → active; the REQ it answers went active → passive.
                if let Some(&active_qp) = self.cm_req.get(&(dst, src, remote_comm_id)) {
                    self.connection(dst, active_qp, src, local_qpn, |e| e.cm += 1);
                }
            }
            _ => {}
        }
    }

    /// Decides every stream that has candidates, then keeps only the pairs that are one-to-one.
    pub fn finish(mut self) -> Pairing {
        let mut pairing = Pairing::of(self.decide_all());
        // Every stream's CNP log stays (the DCQCN analysis takes the CNP times from them); the CE log of a
        // pair's flow goes with it, to be worked into the NP check's marks when asked.
        for (&(iface, stream), st) in &mut self.tap_streams {
            pairing
                .cnp_logs
                .insert((iface, stream), std::mem::take(&mut st.log));
            let at = pairing
                .by_stream
                .get(&stream)
                .and_then(|flow| self.tap_flows.get_mut(iface, flow));
            if let Some(&mut (g, i)) = at {
                let ce = std::mem::take(&mut self.tap_groups[g as usize].ce_logs[i as usize]);
                pairing.ce_logs.insert((iface, stream), ce);
            }
        }
        pairing.spill = self.spill;
        pairing
    }

    /// The pairing the evidence so far makes, without the logs ([`Pairing::cnp_times`] and
    /// [`Pairing::ce_triggers`] answer nothing): what `roce-tracer top` shows while the capture goes on. The
    /// same decision as [`PairingPass::finish`] would make were the capture to end here.
    pub fn so_far(&self) -> Pairing {
        Pairing::of(self.decide_all())
    }

    /// Every stream's decision on the evidence so far, the one-flow-one-stream rule applied.
    ///
    /// A stream has as many candidates as its host pair has flows, so the streams × candidates of a saturation
    /// test are hundreds of thousands: each stream's evidence is summed and scored on its own and dropped
    /// before the next, rather than all of them held in tables at once (which doubled `report`'s peak).
    fn decide_all(&self) -> Vec<(FlowKey, Decision)> {
        // Each stream's taps, in the tap table's order, so that a tie between taps goes the same way at
        // every call.
        let mut at_taps: FxHashMap<FlowKey, Vec<(u32, &TapStream)>> = FxHashMap::default();
        for (&(iface, stream), st) in &self.tap_streams {
            if let Some(&g) = self
                .tap_groups_by_pair
                .get(&(iface, stream.dst, stream.src))
            {
                at_taps.entry(stream).or_default().push((g, st));
            }
        }
        // The evidence that names both QPs (CM, DETH), and the responses that fit: few, by stream.
        let mut named: FxHashMap<FlowKey, Vec<(u32, Evidence)>> = FxHashMap::default();
        for (&(stream, q), &e) in &self.evidence {
            named.entry(stream).or_default().push((q, e));
        }
        // A response B→A to q_A that fitted the request flow A→B to q_B counts for the connection (q_A, q_B).
        let mut fits: FxHashMap<FlowKey, Vec<(u32, u64, u32)>> = FxHashMap::default();
        for (_, &key, r) in self.responses.iter() {
            let Some(&g) = self.request_groups_by_pair.get(&(key.dst, key.src)) else {
                continue;
            };
            for (&qp, (n, lag)) in self.request_groups[g as usize].qps.iter().zip(r.fitted()) {
                if n > 0 {
                    let stream = FlowKey {
                        src: key.dst,
                        dst: key.src,
                        dest_qp: qp,
                    };
                    fits.entry(key).or_default().push((qp, n, lag));
                    fits.entry(stream).or_default().push((key.dest_qp, n, lag));
                }
            }
        }
        let mut streams: Vec<FlowKey> = at_taps
            .keys()
            .chain(named.keys())
            .chain(fits.keys())
            .copied()
            .collect();
        // In key order: the one-flow-one-stream rule below and every output take the decisions so.
        streams.sort_unstable();
        streams.dedup();
        // Each stream is decided on its own evidence: over the threads of the caller's rayon pool, each with
        // its own table of sums, the decisions kept in the streams' order.
        let mut decided: Vec<(FlowKey, Decision)> = streams
            .par_iter()
            .map_init(FxHashMap::default, |sums, &stream| {
                sums.clear();
                self.decide_one(stream, sums, &named, &at_taps, &fits)
            })
            .collect();
        // One flow, one stream: a flow claimed twice goes to the stronger method, or to neither.
        let mut claims: FxHashMap<FlowKey, Vec<usize>> = FxHashMap::default();
        for (i, (stream, d)) in decided.iter().enumerate() {
            if let Decision::Pair { receiver_qp, .. } = d {
                claims
                    .entry(flow_of(stream, *receiver_qp))
                    .or_default()
                    .push(i);
            }
        }
        for idx in claims.into_values().filter(|v| v.len() > 1) {
            let ranks: Vec<Method> = idx
                .iter()
                .map(|&i| match &decided[i].1 {
                    Decision::Pair { method, .. } => *method,
                    _ => Method::Activity,
                })
                .collect();
            let best = ranks.iter().copied().min().unwrap_or(Method::Activity);
            let winners = ranks.iter().filter(|&&r| r == best).count();
            for (&i, &rank) in idx.iter().zip(&ranks) {
                if winners > 1 || rank != best {
                    let stream = decided[i].0;
                    let d = std::mem::replace(&mut decided[i].1, Decision::None);
                    if let Decision::Pair { candidates, .. } = d {
                        decided[i].1 = Decision::Ambiguous(Ambiguous {
                            stream,
                            reason: "contested",
                            basis: best.key(),
                            cnps: self.cnps.get(&stream).copied().unwrap_or(0),
                            cnps_needed: None,
                            candidates,
                        });
                    }
                }
            }
        }
        decided
    }

    /// One stream's decision from its evidence: what its CNPs met at its taps (`at_taps`), the evidence that
    /// names both QPs (`named`) and the responses that fitted (`fits`); `sums` is the caller's table, empty.
    fn decide_one(
        &self,
        stream: FlowKey,
        sums: &mut FxHashMap<u32, (Evidence, Weighed)>,
        named: &FxHashMap<FlowKey, Vec<(u32, Evidence)>>,
        at_taps: &FxHashMap<FlowKey, Vec<(u32, &TapStream)>>,
        fits: &FxHashMap<FlowKey, Vec<(u32, u64, u32)>>,
    ) -> (FlowKey, Decision) {
        for &(q, e) in named.get(&stream).map_or(&[][..], Vec::as_slice) {
            sums.entry(q).or_default().0 = e;
        }
        // Every flow the stream's CNPs met at a tap is its candidate, with the hits counted there, weighed
        // against what its covered time there gives by chance.
        let tapped = at_taps.get(&stream).map_or(&[][..], Vec::as_slice);
        for &(g, st) in tapped {
            let span = st.last.saturating_sub(st.first.unwrap_or(st.last));
            let n = st.log.len;
            for (tf, h) in self.tap_groups[g as usize].flows.iter().zip(&st.hits) {
                let (e, w) = sums.entry(tf.receiver_qp).or_default();
                e.ce_hits += u64::from(h.ce);
                e.active_hits += u64::from(h.active);
                w.ce.keep(n, h.ce, chance::null_rate(h.ce_from, h.ce_to, span));
                w.active
                    .keep(n, h.active, chance::null_rate(h.tx_from, h.tx_to, span));
            }
        }
        for &(q, n, lag) in fits.get(&stream).map_or(&[][..], Vec::as_slice) {
            let (e, _) = sums.entry(q).or_default();
            e.reverse_fit += n;
            e.reverse_lag = e.reverse_lag.max(lag);
        }
        let taps = (tapped.len() as u32).max(1);
        let mut cands: Vec<(u32, Evidence, Weighed)> =
            sums.iter().map(|(&q, &(e, w))| (q, e, w)).collect();
        cands.sort_unstable_by_key(|c| c.0);
        let scored: Vec<Candidate> = cands
            .into_iter()
            .map(|(q, evidence, w)| self.score(&stream, q, evidence, w, taps))
            .collect();
        // Every flow the other way between the two hosts could have scored by chance.
        let requests = self
            .request_groups_by_pair
            .get(&(stream.dst, stream.src))
            .map_or(0, |&g| self.request_groups[g as usize].qps.len());
        let m = scored.len().max(requests);
        let cnps = self.cnps.get(&stream).copied().unwrap_or(0);
        (stream, decide(stream, scored, m, cnps))
    }

    fn score(
        &self,
        stream: &FlowKey,
        receiver_qp: u32,
        evidence: Evidence,
        weighed: Weighed,
        taps: u32,
    ) -> Candidate {
        let flow = flow_of(stream, receiver_qp);
        // Responses both ways: to the stream's QP, and to the flow's receiver QP (coming back the stream's way).
        let count = |k: &FlowKey| self.responses.get(ALL_TAPS, k).map_or(0, |r| r.count);
        let responses = count(stream) + count(&flow);
        let cnps = self.cnps.get(stream).copied().unwrap_or(0);
        let share = |n: u64, of: u64| (of > 0).then(|| n as f64 / of as f64);
        Candidate {
            receiver_qp,
            evidence,
            reverse_share: share(evidence.reverse_fit, responses),
            ce_share: share(evidence.ce_hits, cnps),
            active_share: share(evidence.active_hits, cnps),
            reverse_null: None,
            ce_null: weighed.ce.null,
            active_null: weighed.active.null,
            chance: None,
            // Any of the taps that saw the stream could have given the best evidence by chance.
            ce_tail: (weighed.ce.tail * f64::from(taps)).min(1.0),
            active_tail: (weighed.active.tail * f64::from(taps)).min(1.0),
        }
    }
}
