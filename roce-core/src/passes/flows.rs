//! Per-flow transport statistics, a flow being (source IP, destination IP, destination QP).
//!
//! The destination QP alone names the receiving queue pair; adding both addresses keeps two senders that
//! target the same QP number on different hosts apart. ACK streams are flows of their own (towards the
//! requester's QP), which is where NAKs show up.

use std::collections::BTreeMap;
use std::net::IpAddr;

use roce_wire::ext::{AethKind, NakCode};
use rustc_hash::FxHashMap;
use serde::Serialize;

use super::psn::{FlowPsn, Numbering, PsnEvent};
use crate::decode::{ECN_CE, Frame, Icrc, Kind};

/// Identifies a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct FlowKey {
    /// The data's sender.
    pub src: IpAddr,
    /// The data's receiver.
    pub dst: IpAddr,
    /// The BTH destination QP (the receiver's QP).
    pub dest_qp: u32,
}

impl FlowKey {
    /// The flow a RoCE or CNP frame is filed under: its addresses and its BTH destination QP; `None` for a
    /// frame without them (not RoCE, or cut inside the BTH). The one rule the passes and the outputs that
    /// point at a flow's packets share.
    #[inline]
    pub fn of(f: &Frame<'_>) -> Option<FlowKey> {
        let (ip, roce) = (f.ip?, f.roce.as_ref()?);
        Some(FlowKey {
            src: ip.src,
            dst: ip.dst,
            dest_qp: roce.packet.bth?.dest_qp,
        })
    }
}

impl std::hash::Hash for FlowKey {
    /// Two IPv4 addresses in one word and the QP in another: the passes look a flow up for every frame, and
    /// the derived hash took an enum tag and a word per address.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                state.write_u64((u64::from(s.to_bits()) << 32) | u64::from(d.to_bits()));
            }
            (s, d) => {
                let bits = |ip: IpAddr| match ip {
                    IpAddr::V4(a) => u128::from(a.to_bits()),
                    IpAddr::V6(a) => a.to_bits(),
                };
                state.write_u128(bits(s));
                state.write_u128(bits(d));
            }
        }
        state.write_u32(self.dest_qp);
    }
}

/// NAKs by their AETH code, plus RNR NAKs.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
pub struct Naks {
    /// PSN sequence error NAKs: the receiver saw a gap and asks for go-back-N.
    pub psn_sequence_error: u64,
    /// Invalid request NAKs.
    pub invalid_request: u64,
    /// Remote access error NAKs (a bad rkey or address).
    pub remote_access_error: u64,
    /// Remote operational error NAKs.
    pub remote_operational_error: u64,
    /// Invalid RD request NAKs.
    pub invalid_rd_request: u64,
    /// NAKs with a reserved code.
    pub reserved: u64,
    /// Receiver-not-ready NAKs (no receive posted).
    pub rnr: u64,
}

impl Naks {
    /// Every NAK, whatever its code.
    pub fn total(&self) -> u64 {
        self.psn_sequence_error
            + self.invalid_request
            + self.remote_access_error
            + self.remote_operational_error
            + self.invalid_rd_request
            + self.reserved
            + self.rnr
    }
}

/// One flow's state, laid out for the per-frame update: the key and the counters every frame changes fill
/// the first two cache lines and the PSN tracker the third, so a frame touches three adjacent lines; what
/// changes rarely (NAKs, retransmissions, further opcodes) comes after. With thousands of interleaved
/// flows the table outgrows the L2 cache, and the scattered layout cost more in cache misses than in
/// instructions.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
struct FlowState {
    key: PackedKey,
    packets: u64,
    bytes: u64,
    last_ns: u64,
    first_ns: u64,
    ect: u64,
    ce: u64,
    truncated: u64,
    /// Packets per opcode: the first three opcodes in place (a data flow uses FIRST, MIDDLE and LAST, an ACK
    /// stream one), any further ones in `more_opcodes`, which few flows ever allocate.
    op_counts: [u64; INLINE_OPCODES],
    ops: [u8; INLINE_OPCODES],
    ops_used: u8,
    dscp: u8,
    /// The last RoCE frame's priority and DSCP, for the priority checks and the tables.
    pcp: Option<u8>,
    psn: FlowPsn,
    iface: u32,
    flow: FlowKey,
    retransmissions: u64,
    out_of_order: u64,
    naks: Naks,
    icrc_failures: u64,
    more_opcodes: Vec<(u8, u64)>,
}

/// Opcodes counted in a flow's hot cache line.
const INLINE_OPCODES: usize = 3;

impl FlowState {
    fn new(key: PackedKey, iface: u32, flow: FlowKey, first_ns: u64) -> Self {
        FlowState {
            key,
            packets: 0,
            bytes: 0,
            last_ns: 0,
            first_ns,
            ect: 0,
            ce: 0,
            truncated: 0,
            op_counts: [0; INLINE_OPCODES],
            ops: [0; INLINE_OPCODES],
            ops_used: 0,
            dscp: 0,
            pcp: None,
            psn: FlowPsn::default(),
            iface,
            flow,
            retransmissions: 0,
            out_of_order: 0,
            naks: Naks::default(),
            icrc_failures: 0,
            more_opcodes: Vec::new(),
        }
    }

    #[inline]
    fn count_opcode(&mut self, op: u8) {
        let used = usize::from(self.ops_used).min(INLINE_OPCODES);
        for i in 0..used {
            if self.ops[i] == op {
                self.op_counts[i] += 1;
                return;
            }
        }
        if used < INLINE_OPCODES {
            self.ops[used] = op;
            self.op_counts[used] = 1;
            self.ops_used += 1;
            return;
        }
        match self.more_opcodes.iter_mut().find(|(o, _)| *o == op) {
            Some((_, n)) => *n += 1,
            None => self.more_opcodes.push((op, 1)),
        }
    }

    /// Every (opcode, packets) pair counted.
    fn opcodes(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        let used = usize::from(self.ops_used).min(INLINE_OPCODES);
        self.ops[..used]
            .iter()
            .copied()
            .zip(self.op_counts[..used].iter().copied())
            .chain(self.more_opcodes.iter().copied())
    }
}

/// One row of the flows table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FlowRow {
    /// The capture interface (tap) the flow was seen on: a flow mirrored at two points is two rows, or its
    /// second copies would look like retransmissions.
    pub iface: u32,
    /// The tap's name, `FILE:IFACE`; filled in by [`crate::passes::Stats::finish`].
    pub tap: String,
    /// The data's sender.
    pub src: IpAddr,
    /// The data's receiver.
    pub dst: IpAddr,
    /// The BTH destination QP.
    pub dest_qp: u32,
    /// Data packets (CNPs are counted apart).
    pub packets: u64,
    /// Sum of the frames' original lengths, as on the wire.
    pub bytes: u64,
    /// The first packet's time.
    pub first_ns: u64,
    /// The last packet's time.
    pub last_ns: u64,
    /// bytes·8 over (last − first); null for a single-packet flow.
    pub mean_gbps: Option<f64>,
    /// Packets per opcode name.
    pub opcodes: BTreeMap<&'static str, u64>,
    /// Packets marked ECT(0) or ECT(1), not counting CE.
    pub ect_packets: u64,
    /// Packets marked CE: the congestion the switches signalled.
    pub ce_packets: u64,
    /// PSNs skipped and never seen (packets lost before the tap, or not captured), in the flow's requests and
    /// in the READ responses and atomic ACKs it returns, each counted in its own sequence.
    pub psn_gaps: u64,
    /// PSNs seen again: the sender went back (or, for responses, answered a request sent again).
    pub retransmissions: u64,
    /// PSNs that filled an earlier gap.
    pub out_of_order: u64,
    /// NAKs by code.
    pub naks: Naks,
    /// Frames whose ICRC was checked and wrong.
    pub icrc_failures: u64,
    /// Frames cut by the snap length.
    pub truncated: u64,
    /// The last frame's PCP (none when untagged).
    pub pcp: Option<u8>,
    /// The last frame's DSCP.
    pub dscp: u8,
    /// The priority PFC acts on for these frames, and where it came from: the PCP, or (untagged, or a port in
    /// DSCP trust) the DSCP through the DSCP → priority map (`crate::priority`).
    pub priority: Option<u8>,
    /// Whether `priority` came from the PCP or through the DSCP map.
    pub priority_source: Option<crate::priority::PrioritySource>,
}

impl FlowRow {
    /// The flow this row counts, whatever tap saw it: the key that joins a flow's rows across taps and
    /// tables.
    pub fn key(&self) -> FlowKey {
        FlowKey {
            src: self.src,
            dst: self.dst,
            dest_qp: self.dest_qp,
        }
    }
}

/// Folds RoCE data frames (not CNPs) into per-flow statistics.
/// A flow's key packed into machine words, so hashing and comparing it per frame is a handful of
/// instructions (hashing `IpAddr`s field by field was a fifth of this pass).
#[derive(Debug, Clone, Copy, Eq)]
struct PackedKey([u64; 5]);

impl std::hash::Hash for PackedKey {
    /// The five words, as `eq` compares them (and without the length prefix an array's hash adds).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for w in self.0 {
            state.write_u64(w);
        }
    }
}

impl PartialEq for PackedKey {
    /// Word by word without branches: the derived comparison of the array called `memcmp` for every lookup.
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        let (a, b) = (&self.0, &other.0);
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
    }
}

impl PackedKey {
    fn new(iface: u32, key: &FlowKey) -> Self {
        fn words(ip: IpAddr) -> (u64, u64, u64) {
            match ip {
                IpAddr::V4(a) => (0, u64::from(a.to_bits()), 4),
                IpAddr::V6(a) => {
                    let bits = a.to_bits();
                    ((bits >> 64) as u64, bits as u64, 6)
                }
            }
        }
        let (s_hi, s_lo, s_v) = words(key.src);
        let (d_hi, d_lo, d_v) = words(key.dst);
        let tag = (u64::from(iface) << 32) | u64::from(key.dest_qp);
        // The address families go into the spare top bits of the QP word (QPNs are 24 bits), keeping an IPv4
        // address apart from the IPv6 address with the same low bits.
        PackedKey([s_hi, s_lo, d_hi, d_lo, tag ^ (s_v << 24) ^ (d_v << 28)])
    }
}

/// Slots of [`FlowsPass::recent`]: 64 Ki slots of 4 bytes, small enough to stay in the cache.
const RECENT_SLOTS: usize = 1 << 16;

#[derive(Debug)]
/// Per-flow counters, PSN tracking and NAKs, over every RoCE data frame.
pub struct FlowsPass {
    index: FxHashMap<PackedKey, usize>,
    flows: Vec<FlowState>,
    /// A flow index per low 16 bits of the destination QP, checked against the flow's full key before use.
    /// QP numbers are handed out nearly in sequence, so thousands of interleaved flows rarely share a slot,
    /// and most frames find their flow here without hashing; a miss falls back to the hash map.
    recent: Vec<u32>,
}

impl Default for FlowsPass {
    fn default() -> Self {
        FlowsPass {
            index: FxHashMap::default(),
            flows: Vec::new(),
            recent: vec![u32::MAX; RECENT_SLOTS],
        }
    }
}

impl FlowsPass {
    /// Adds one frame to its flow (only RoCE data frames count).
    #[inline]
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.observe(f);
    }

    /// [`FlowsPass::frame`], saying what the frame's PSN was to its flow's sequence: a retransmission, a
    /// late PSN filling a gap, and so on (`None` for a frame that counts in no flow, or whose opcode numbers
    /// no PSN). What the flows table counts is the sum of these, so an output that points at the packets
    /// behind a count (`annotate`) takes them from here.
    pub fn observe(&mut self, f: &Frame<'_>) -> Option<PsnEvent> {
        if f.kind != Kind::Roce {
            return None;
        }
        let (Some(ip), Some(roce)) = (f.ip, f.roce.as_ref()) else {
            return None;
        };
        // Cut inside the BTH: no QP to file it under. Counted by the capture pass as truncated.
        let bth = roce.packet.bth?;
        let key = FlowKey::of(f)?;
        let packed = PackedKey::new(f.iface, &key);
        let slot = bth.dest_qp as usize & (RECENT_SLOTS - 1);
        let cached = self.recent.get(slot).map_or(usize::MAX, |&i| i as usize);
        let at = match self.flows.get(cached) {
            Some(s) if s.key == packed => cached,
            _ => {
                let next = self.flows.len();
                let at = *self.index.entry(packed).or_insert(next);
                if at == next {
                    self.flows
                        .push(FlowState::new(packed, f.iface, key, f.ts_ns));
                }
                if let (Some(r), Ok(i)) = (self.recent.get_mut(slot), u32::try_from(at)) {
                    *r = i;
                }
                at
            }
        };
        let s = self.flows.get_mut(at)?;
        s.packets += 1;
        s.bytes += u64::from(f.len);
        s.last_ns = s.last_ns.max(f.ts_ns);
        s.first_ns = s.first_ns.min(f.ts_ns);
        s.count_opcode(bth.opcode.0);
        match ip.ecn {
            ECN_CE => s.ce += 1,
            1 | 2 => s.ect += 1,
            _ => {}
        }
        s.pcp = f.pcp;
        s.dscp = ip.dscp;
        let event = Numbering::of(bth.opcode, roce.packet.ext.reth.map(|r| r.dma_len))
            .map(|numbering| s.psn.observe(bth.psn, numbering));
        match event {
            Some(PsnEvent::Retransmission) => s.retransmissions += 1,
            Some(PsnEvent::OutOfOrder) => s.out_of_order += 1,
            _ => {}
        }
        if let Some(aeth) = roce.packet.ext.aeth {
            match aeth.kind() {
                AethKind::Nak(code) => match code {
                    NakCode::PsnSequenceError => s.naks.psn_sequence_error += 1,
                    NakCode::InvalidRequest => s.naks.invalid_request += 1,
                    NakCode::RemoteAccessError => s.naks.remote_access_error += 1,
                    NakCode::RemoteOperationalError => s.naks.remote_operational_error += 1,
                    NakCode::InvalidRdRequest => s.naks.invalid_rd_request += 1,
                    NakCode::Reserved(_) => s.naks.reserved += 1,
                },
                AethKind::RnrNak { .. } => s.naks.rnr += 1,
                AethKind::Ack { .. } | AethKind::Reserved(_) => {}
            }
        }
        if matches!(roce.icrc, Icrc::Bad { .. }) {
            s.icrc_failures += 1;
        }
        if f.truncated {
            s.truncated += 1;
        }
        event
    }

    /// Takes another pass's flows: a thread's share of the capture, whose flows no other thread held.
    pub fn absorb(&mut self, other: FlowsPass) {
        for state in other.flows {
            self.index.insert(state.key, self.flows.len());
            self.flows.push(state);
        }
    }

    /// The table, ordered by bytes (largest first) and then by key, so the heaviest flows lead.
    pub fn finish(self) -> Vec<FlowRow> {
        let mut rows: Vec<FlowRow> = self
            .flows
            .into_iter()
            .map(|s| {
                let (iface, k) = (s.iface, s.flow);
                let span = s.last_ns.saturating_sub(s.first_ns);
                let mut opcodes = BTreeMap::new();
                for (op, n) in s.opcodes() {
                    *opcodes.entry(roce_wire::Opcode(op).name()).or_insert(0) += n;
                }
                FlowRow {
                    iface,
                    tap: String::new(),
                    src: k.src,
                    dst: k.dst,
                    dest_qp: k.dest_qp,
                    packets: s.packets,
                    bytes: s.bytes,
                    first_ns: s.first_ns,
                    last_ns: s.last_ns,
                    mean_gbps: (span > 0).then(|| s.bytes as f64 * 8.0 / span as f64),
                    opcodes,
                    ect_packets: s.ect,
                    ce_packets: s.ce,
                    psn_gaps: s.psn.unseen(),
                    retransmissions: s.retransmissions,
                    out_of_order: s.out_of_order,
                    naks: s.naks,
                    icrc_failures: s.icrc_failures,
                    truncated: s.truncated,
                    pcp: s.pcp,
                    dscp: s.dscp,
                    priority: None,
                    priority_source: None,
                }
            })
            .collect();
        // Flows are unique by (iface, key), so this order is total and an unstable sort, which moves the large
        // rows less, gives the same result.
        rows.sort_unstable_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then((a.src, a.dst, a.dest_qp, a.iface).cmp(&(b.src, b.dst, b.dest_qp, b.iface)))
        });
        rows
    }
}

#[cfg(test)]
mod test {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    fn key(src: IpAddr, dst: IpAddr, dest_qp: u32) -> FlowKey {
        FlowKey { src, dst, dest_qp }
    }

    #[test]
    fn a_frame_touches_the_first_three_cache_lines_of_its_flow() {
        use super::super::psn::PsnTracker;
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<FlowState>(), 64);
        assert!(offset_of!(FlowState, last_ns) + 8 <= 64);
        assert_eq!(offset_of!(FlowState, first_ns), 64);
        assert!(offset_of!(FlowState, pcp) + 2 <= 128);
        assert_eq!(offset_of!(FlowState, psn), 128);
        // The request tracker's hot fields come first and fit the third line; the responses' tracker, behind
        // a pointer, is read only for responses.
        assert_eq!(offset_of!(FlowPsn, requests), 0);
        assert!(size_of::<PsnTracker>() <= 64);
    }

    #[test]
    fn opcodes_beyond_the_inline_ones_are_still_counted() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let k = key(v4, v4, 7);
        let mut s = FlowState::new(PackedKey::new(0, &k), 0, k, 0);
        for op in [6u8, 7, 8, 7, 10, 10, 10, 6] {
            s.count_opcode(op);
        }
        let mut got: Vec<(u8, u64)> = s.opcodes().collect();
        got.sort_unstable();
        assert_eq!(got, vec![(6, 2), (7, 2), (8, 1), (10, 3)]);
    }

    #[test]
    fn packed_keys_keep_families_interfaces_and_directions_apart() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let v4b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        // The IPv6 address whose 128-bit value equals the IPv4 one's 32 bits.
        let v6 = IpAddr::V6(Ipv6Addr::from_bits(u128::from(
            Ipv4Addr::new(10, 0, 0, 1).to_bits(),
        )));
        let v6b = IpAddr::V6(Ipv6Addr::from_bits(u128::from(
            Ipv4Addr::new(10, 0, 0, 2).to_bits(),
        )));
        let keys = [
            PackedKey::new(0, &key(v4, v4b, 7)),
            PackedKey::new(0, &key(v6, v6b, 7)),
            PackedKey::new(0, &key(v4, v6b, 7)),
            PackedKey::new(0, &key(v6, v4b, 7)),
            PackedKey::new(0, &key(v4b, v4, 7)),
            PackedKey::new(1, &key(v4, v4b, 7)),
            PackedKey::new(0, &key(v4, v4b, 0xff_ffff)),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(keys[0], PackedKey::new(0, &key(v4, v4b, 7)));
    }
}
