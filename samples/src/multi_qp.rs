//! Captures of many QPs between each two hosts, with the truth of which CNP stream throttles which data flow,
//! for testing the pairing of CNP streams with data flows where it is hardest.
//!
//! A collective such as NCCL's all-reduce opens several QPs (channels) between every two hosts and drives them
//! together: the flows of a host pair send in the same bursts, are marked in the same congested queue, and no
//! packet names both QPs of a connection. A mirror port sees the data of every flow and the CNPs coming back,
//! and, when the responders acknowledge, the ACKs. This generator writes such traffic from a seeded random
//! choice of every number (QP numbers, initial PSNs, burst lengths, when queues congest), seen from a tap at the
//! senders (before the switch that marks, so no CE mark is visible and CNPs arrive a round trip later) or at the
//! receivers (CE marks visible, CNPs a few microseconds after the mark they answer).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::io;
use std::net::{IpAddr, Ipv4Addr};

use roce_wire::build::{IpSpec, RoceFrame};
use roce_wire::ext::{AethRepr, RethRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

use crate::corpus::{Rng, T0_NS};
use crate::emit::{FrameSink, HeaderEmitter};

/// Where the capture is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapAt {
    /// On the senders' side of the switch that marks: data without CE, CNPs a round trip after the data.
    Sender,
    /// On the receivers' side: CE-marked data, CNPs a few microseconds after the marks they answer.
    Receiver,
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct MultiQpSpec {
    /// Frames to write.
    pub frames: u64,
    /// Sender → receiver host pairs; receivers are shared by up to four pairs, so their queues congest
    /// together.
    pub host_pairs: u32,
    /// QPs (connections) per host pair.
    pub qps_per_pair: u32,
    /// How often responders acknowledge a message back to the sender's QP.
    pub acks: Acks,
    /// Where the tap is.
    pub tap: TapAt,
    /// The QPs of a pair send their messages interleaved in the same bursts (NCCL channels); otherwise each
    /// burst is one QP's message.
    pub lockstep: bool,
    /// How long after the mark it answers a CNP leaves the receiver: the least and the most, in ns. A
    /// notification point answers within microseconds; a busy one, or a CNP queued behind a pause, later.
    pub cnp_delay_ns: (u64, u64),
    /// Seeds every choice: the same spec writes the same bytes.
    pub seed: u64,
}

/// How often a responder acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Never (unreliable connections, or ACKs the tap does not see).
    None,
    /// One message in 64.
    Sparse,
    /// Every message.
    Every,
}

impl Default for MultiQpSpec {
    fn default() -> Self {
        MultiQpSpec {
            frames: 100_000,
            host_pairs: 8,
            qps_per_pair: 8,
            acks: Acks::Every,
            tap: TapAt::Receiver,
            lockstep: true,
            cnp_delay_ns: (500, 3_000),
            seed: 1,
        }
    }
}

/// One connection: the data flow sender → receiver to `receiver_qp`, throttled by the CNP stream receiver →
/// sender to `sender_qp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    /// The data's sender (its reaction point).
    pub sender: IpAddr,
    /// The data's receiver (its notification point).
    pub receiver: IpAddr,
    /// The QP the CNPs and ACKs go to.
    pub sender_qp: u32,
    /// The QP the data goes to.
    pub receiver_qp: u32,
}

/// What was written.
#[derive(Debug, Clone, Default)]
pub struct MultiQpTruth {
    /// Every connection.
    pub connections: Vec<Connection>,
    /// Frames written, of which data packets, CE-marked (as seen at the tap), CNPs and ACKs.
    pub frames: u64,
    /// Data packets.
    pub data: u64,
    /// Data packets seen CE-marked at the tap.
    pub ce_seen: u64,
    /// CNPs.
    pub cnps: u64,
    /// ACKs.
    pub acks: u64,
}

/// Link of each sender: 100 Gb/s, 4 KiB MTU. A frame takes its wire time; a mirror of many links interleaves.
const MTU: usize = 4096;
/// Time between two frames at the mirror (several links at once).
const FRAME_GAP_NS: u64 = 120;
/// The notification point's least gap between two CNPs to one QP.
const NP_GAP_NS: u64 = 4_000;

/// A frame waiting for its time at the tap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Pending {
    Data {
        conn: u32,
        psn: u32,
        opcode: u8,
        ce: bool,
        /// The message's length in packets (its RETH's DMA length), on a FIRST or ONLY packet.
        message: u32,
    },
    Cnp {
        conn: u32,
    },
    Ack {
        conn: u32,
        psn: u32,
        msn: u32,
    },
}

#[derive(Debug, Clone, Copy)]
struct Qp {
    conn: Connection,
    psn: u32,
    msn: u32,
    sport: u16,
    last_cnp: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct HostPair {
    receiver: u8,
    /// One-way delay sender → receiver.
    one_way_ns: u64,
}

fn host_ip(h: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 3, h / 100, h % 100 + 1)
}

/// Writes the capture into `out` and returns its truth.
pub fn generate(out: &mut dyn FrameSink, spec: &MultiQpSpec) -> io::Result<MultiQpTruth> {
    let mut rng = Rng::new(spec.seed);
    let receivers = spec.host_pairs.div_ceil(4).max(1);
    let per_pair = spec.qps_per_pair.max(1) as usize;
    // QP numbers unique per host, drawn from the whole 24-bit space as hardware hands them out.
    let mut taken: BTreeSet<(u8, u32)> = BTreeSet::new();
    let mut draw_qp = |rng: &mut Rng, host: u8| loop {
        let q = 2 + rng.below((1 << 24) - 2) as u32;
        if taken.insert((host, q)) {
            return q;
        }
    };
    let mut pairs = Vec::new();
    let mut qps = Vec::new();
    for i in 0..spec.host_pairs {
        let (sender, receiver) = (i as u8, 100 + (i % receivers) as u8);
        pairs.push(HostPair {
            receiver,
            one_way_ns: 1_000 + rng.below(4_000),
        });
        for _ in 0..per_pair {
            let conn = Connection {
                sender: IpAddr::V4(host_ip(sender)),
                receiver: IpAddr::V4(host_ip(receiver)),
                sender_qp: draw_qp(&mut rng, sender),
                receiver_qp: draw_qp(&mut rng, receiver),
            };
            qps.push(Qp {
                conn,
                psn: rng.below(1 << 24) as u32,
                msn: 0,
                sport: 49152 + rng.below(16384) as u16,
                last_cnp: None,
            });
        }
    }
    let mut w = Writer {
        out,
        emitter: HeaderEmitter::new(Some(128), MTU),
        truth: MultiQpTruth {
            connections: qps.iter().map(|q| q.conn).collect(),
            ..MultiQpTruth::default()
        },
    };
    // Each receiver's queue congests now and then: (congested until, calm until).
    let mut congestion: Vec<(u64, u64)> = vec![(0, 0); receivers as usize];
    let mut pending: BinaryHeap<Reverse<(u64, u64, Pending)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |pending: &mut BinaryHeap<_>, at: u64, what: Pending| {
        seq += 1;
        pending.push(Reverse((at, seq, what)));
    };
    let mut t = T0_NS;
    while w.truth.frames < spec.frames {
        // Now and then the senders pause (a collective's step ends): no flow is active all the time.
        if rng.below(64) == 0 {
            t += 5_000 + rng.below(200_000);
        }
        let p = rng.below(u64::from(spec.host_pairs)) as usize;
        let members: Vec<usize> = if spec.lockstep {
            (p * per_pair..(p + 1) * per_pair).collect()
        } else {
            vec![p * per_pair + rng.below(per_pair as u64) as usize]
        };
        let hp = pairs[p];
        let msg_packets = 1 + rng.below(8) as u32;
        for k in 0..msg_packets {
            for &qi in &members {
                // Everything due at the tap by now is written first.
                while let Some(&Reverse((at, _, what))) = pending.peek() {
                    if at > t || w.truth.frames >= spec.frames {
                        break;
                    }
                    pending.pop();
                    w.write(at, what, &qps)?;
                }
                if w.truth.frames >= spec.frames {
                    return Ok(w.truth);
                }
                // The receiver's queue: congested for 20-300 µs, then calm for 0.1-3 ms.
                let (busy_until, calm_until) = &mut congestion[usize::from(hp.receiver - 100)];
                if t >= *calm_until {
                    *busy_until = t + 20_000 + rng.below(280_000);
                    *calm_until = *busy_until + 100_000 + rng.below(2_900_000);
                }
                let marked = t < *busy_until && rng.below(8) == 0;
                let q = &mut qps[qi];
                let last = k + 1 == msg_packets;
                let opcode = match (msg_packets, k) {
                    (1, _) => Opcode::RC_RDMA_WRITE_ONLY,
                    (_, 0) => Opcode::RC_RDMA_WRITE_FIRST,
                    _ if last => Opcode::RC_RDMA_WRITE_LAST,
                    _ => Opcode::RC_RDMA_WRITE_MIDDLE,
                };
                let at_receiver = t + hp.one_way_ns;
                // What comes back from the receiver reaches a sender-side tap one way later still.
                let back = |delay: u64| match spec.tap {
                    TapAt::Sender => at_receiver + delay + hp.one_way_ns,
                    TapAt::Receiver => at_receiver + delay,
                };
                let data = Pending::Data {
                    conn: qi as u32,
                    psn: q.psn,
                    opcode: opcode.0,
                    // The switch marks after a sender-side tap.
                    ce: marked && spec.tap == TapAt::Receiver,
                    message: msg_packets,
                };
                let seen_at = match spec.tap {
                    TapAt::Sender => t,
                    TapAt::Receiver => at_receiver,
                };
                push(&mut pending, seen_at, data);
                if marked && q.last_cnp.is_none_or(|c| at_receiver >= c + NP_GAP_NS) {
                    q.last_cnp = Some(at_receiver);
                    let cnp = Pending::Cnp { conn: qi as u32 };
                    let (least, most) = spec.cnp_delay_ns;
                    let delay = least + rng.below(most.saturating_sub(least) + 1);
                    push(&mut pending, back(delay), cnp);
                }
                let acked = match spec.acks {
                    Acks::None => false,
                    Acks::Sparse => rng.below(64) == 0,
                    Acks::Every => true,
                };
                if last && acked {
                    q.msn = (q.msn + 1) & 0xff_ffff;
                    let ack = Pending::Ack {
                        conn: qi as u32,
                        psn: q.psn,
                        msn: q.msn,
                    };
                    push(&mut pending, back(300 + rng.below(1_000)), ack);
                }
                q.psn = (q.psn + 1) & 0xff_ffff;
                t += FRAME_GAP_NS;
            }
        }
    }
    Ok(w.truth)
}

struct Writer<'a> {
    out: &'a mut dyn FrameSink,
    emitter: HeaderEmitter,
    truth: MultiQpTruth,
}

impl Writer<'_> {
    fn write(&mut self, ts: u64, what: Pending, qps: &[Qp]) -> io::Result<()> {
        let (conn, forward, ecn, bth, ext, payload) = match what {
            Pending::Data {
                conn,
                psn,
                opcode,
                ce,
                message,
            } => {
                let q = &qps[conn as usize];
                let opcode = Opcode(opcode);
                let mut bth = BthRepr::new(opcode, q.conn.receiver_qp, psn);
                bth.ack_req = matches!(
                    opcode,
                    Opcode::RC_RDMA_WRITE_ONLY | Opcode::RC_RDMA_WRITE_LAST
                );
                let reth = matches!(
                    opcode,
                    Opcode::RC_RDMA_WRITE_ONLY | Opcode::RC_RDMA_WRITE_FIRST
                )
                .then_some(RethRepr {
                    va: 0x7f00_0000_0000,
                    rkey: 0x4321,
                    dma_len: message * MTU as u32,
                });
                self.truth.data += 1;
                self.truth.ce_seen += u64::from(ce);
                let ext = ExtHeaders {
                    reth,
                    ..ExtHeaders::default()
                };
                (q, true, if ce { 3 } else { 2 }, bth, ext, MTU)
            }
            Pending::Cnp { conn } => {
                let q = &qps[conn as usize];
                self.truth.cnps += 1;
                (
                    q,
                    false,
                    0,
                    BthRepr::cnp(q.conn.sender_qp),
                    ExtHeaders::default(),
                    16,
                )
            }
            Pending::Ack { conn, psn, msn } => {
                let q = &qps[conn as usize];
                self.truth.acks += 1;
                let ext = ExtHeaders {
                    aeth: Some(AethRepr {
                        syndrome: 0x1f,
                        msn,
                    }),
                    ..ExtHeaders::default()
                };
                let bth = BthRepr::new(Opcode::RC_ACKNOWLEDGE, q.conn.sender_qp, psn);
                (q, false, 2, bth, ext, 0)
            }
        };
        let (src, dst) = if forward {
            (conn.conn.sender, conn.conn.receiver)
        } else {
            (conn.conn.receiver, conn.conn.sender)
        };
        let octets = |ip: IpAddr| match ip {
            IpAddr::V4(v4) => v4.octets(),
            IpAddr::V6(_) => [0; 4],
        };
        let (s, d) = (octets(src), octets(dst));
        let frame = RoceFrame {
            src_mac: [2, 0, s[0], s[1], s[2], s[3]],
            dst_mac: [2, 0, d[0], d[1], d[2], d[3]],
            vlan: None,
            ip: IpSpec::V4 {
                src: s,
                dst: d,
                dscp: if bth.opcode == Opcode::CNP { 48 } else { 26 },
                ecn,
                ttl: 64,
                ident: 0,
            },
            sport: if bth.opcode == Opcode::CNP {
                0
            } else {
                conn.sport
            },
            bth,
            ext,
            payload: &[],
        };
        self.emitter.emit(self.out, ts, frame, payload)?;
        self.truth.frames += 1;
        Ok(())
    }
}
