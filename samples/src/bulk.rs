//! The benchmark capture: millions of RoCEv2 frames over thousands of QPs, with congestion episodes that
//! bring CE marks, CNPs and PFC pauses, written as a mirror port with a header snap length would record it.
//!
//! Frames are written through [`HeaderEmitter`]: headers only at the snap length, or whole with a valid ICRC
//! when `snaplen` is `None`.

use std::io::{self, Write};

use roce_capture::LinkType;
use roce_capture::write::PcapWriter;
use roce_wire::build::{IpSpec, RoceFrame, emit_mac_control};
use roce_wire::ext::{AethRepr, RethRepr};
use roce_wire::pfc::{MacControlRepr, PfcRepr};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

use crate::corpus::{Rng, T0_NS};
pub use crate::emit::FrameSink;
use crate::emit::HeaderEmitter;

/// What to generate.
#[derive(Debug, Clone)]
pub struct BulkSpec {
    /// Frames to write: the benchmark's size, large enough that the per-frame cost dominates start-up.
    pub frames: u64,
    /// Queue pairs the traffic is spread over: many, so that per-flow tables are exercised as in a cluster.
    pub qps: u32,
    /// Bytes kept per frame; `None` writes whole frames with valid ICRCs.
    pub snaplen: Option<u32>,
    /// RDMA payload per packet (the path MTU).
    pub mtu: u32,
    /// Seeds every random choice, so the same spec always writes the same bytes.
    pub seed: u64,
    /// `None`: data at 400 Gb/s with periodic congestion episodes (the decode benchmark's traffic).
    /// `Some`: a saturation test's steady mix at a fixed frame rate (the scale benchmark's traffic).
    pub saturation: Option<Saturation>,
}

/// The steady mix of a long saturation test: frames at a fixed rate, CE marks, CNPs and PFC spread evenly
/// over the whole span, so that every part of a multi-second capture keeps the model and the tables busy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Saturation {
    /// Time between consecutive frames, whatever their kind (1 µs: a million frames per second).
    pub gap_ns: u64,
    /// Share of data packets written CE-marked, in parts per million.
    pub ce_ppm: u32,
    /// Share of CE-marked packets the receiver answers with a CNP (subject to the NP's 4 µs spacing per QP).
    pub cnp_per_ce_ppm: u32,
    /// Frames between two PFC frames on priority 3, which alternate XOFF and XON.
    pub pfc_every: u64,
}

impl Saturation {
    /// The mix the scale benchmark names: 1 frame per µs, about 5 % CE, 1 % CNPs and 0.1 % PFC of all frames.
    pub fn benchmark() -> Self {
        Saturation {
            gap_ns: 1_000,
            // 16 of every 17 RoCE frames are data: 5.3 % of data is 5 % of frames.
            ce_ppm: 53_000,
            cnp_per_ce_ppm: 200_000,
            pfc_every: 1_000,
        }
    }
}

impl BulkSpec {
    /// The scale benchmark's capture: `frames` at a saturation test's steady mix (see [`Saturation::benchmark`]).
    pub fn saturation(frames: u64) -> Self {
        BulkSpec {
            frames,
            saturation: Some(Saturation::benchmark()),
            ..BulkSpec::default()
        }
    }
}

impl Default for BulkSpec {
    fn default() -> Self {
        BulkSpec {
            frames: 5_000_000,
            qps: 4096,
            snaplen: Some(128),
            mtu: 4096,
            seed: 7,
            saturation: None,
        }
    }
}

/// What was written, to check the analysis against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BulkCounts {
    /// Every frame written.
    pub frames: u64,
    /// RDMA WRITE packets (the data the statistics count).
    pub data: u64,
    /// ACKs, one per message.
    pub acks: u64,
    /// Data packets written CE-marked, during the congestion episodes.
    pub ce: u64,
    /// CNPs, which the CNP statistics must count exactly.
    pub cnps: u64,
    /// PFC frames, which the pause statistics must count exactly.
    pub pfc: u64,
    /// Frame lengths as on the wire (whatever the snap length kept), the byte count the statistics report.
    pub bytes_on_wire: u64,
}

/// Fixed per-QP facts.
#[derive(Debug, Clone, Copy)]
struct Qp {
    sender: u8,
    receiver: u8,
    sender_qp: u32,
    receiver_qp: u32,
    psn: u32,
    msn: u32,
    last_cnp_ns: u64,
    sport: u16,
}

/// Minimum spacing of CNPs per flow, as the ConnectX NP default (4 µs).
const CNP_GAP_NS: u64 = 4_000;
const PFC_PRIO: usize = 3;

struct Gen<'a> {
    out: &'a mut dyn FrameSink,
    counts: BulkCounts,
    emitter: HeaderEmitter,
}

impl Gen<'_> {
    #[allow(clippy::too_many_arguments)]
    fn roce(
        &mut self,
        ts: u64,
        src: u8,
        dst: u8,
        ecn: u8,
        sport: u16,
        bth: BthRepr,
        ext: ExtHeaders,
        payload_len: usize,
    ) -> io::Result<()> {
        let frame = RoceFrame {
            src_mac: [2, 0, 0, 0, 1, src],
            dst_mac: [2, 0, 0, 0, 1, dst],
            vlan: None,
            ip: IpSpec::V4 {
                src: [10, 1, 0, src],
                dst: [10, 1, 0, dst],
                dscp: if bth.opcode == Opcode::CNP { 48 } else { 26 },
                ecn,
                ttl: 64,
                ident: 0,
            },
            sport,
            bth,
            ext,
            payload: &[],
        };
        let wire = self.emitter.emit(self.out, ts, frame, payload_len)?;
        self.counts.frames += 1;
        self.counts.bytes_on_wire += wire as u64;
        Ok(())
    }

    fn pfc(&mut self, ts: u64, quanta: u16) -> io::Result<()> {
        let mut q = [0u16; 8];
        q[PFC_PRIO] = quanta;
        let mut buf = [0u8; 64];
        let n = emit_mac_control(
            [2, 0, 0, 0, 0xee, 1],
            None,
            &MacControlRepr::Pfc(PfcRepr {
                enable: 1 << PFC_PRIO,
                quanta: q,
            }),
            &mut buf,
        )
        .map_err(|e| io::Error::other(e.to_string()))?;
        self.out.packet(ts, &buf[..n], n as u32)?;
        self.counts.frames += 1;
        self.counts.pfc += 1;
        self.counts.bytes_on_wire += n as u64;
        Ok(())
    }
}

/// Hardware senders set MigReq on RC traffic; the bulk capture does too.
fn bth(opcode: Opcode, dest_qp: u32, psn: u32, ack_req: bool) -> BthRepr {
    BthRepr {
        migreq: true,
        ack_req,
        ..BthRepr::new(opcode, dest_qp, psn)
    }
}

/// Writes the benchmark capture as classic pcap with ns timestamps.
///
/// Traffic: messages of 16 packets (RDMA WRITE FIRST, 14 MIDDLE, LAST) on QPs chosen at random, an ACK per
/// message, at 400 Gb/s aggregate. Every 10 ms a 2 ms congestion episode marks 10 % of data packets CE; the
/// receiver answers CE with a CNP at most every 4 µs per QP, and the switch sends PFC XOFF/XON on priority 3.
/// With [`BulkSpec::saturation`] set, the same messages come at its fixed frame rate and mix instead.
pub fn write<W: Write>(w: W, spec: &BulkSpec) -> io::Result<BulkCounts> {
    let mut out = PcapWriter::new(w, LinkType::ETHERNET, snap_length(spec))?;
    let counts = generate(&mut out, spec)?;
    out.flush()?;
    Ok(counts)
}

/// The snap length a file of this capture declares in its header.
pub fn snap_length(spec: &BulkSpec) -> u32 {
    spec.snaplen.map_or(65535, |s| s.max(64))
}

/// Generates the capture into any sink: the rotation of a long test over several files is the sink's business,
/// so the traffic (and every random choice) is the same however it is split.
pub fn generate(out: &mut dyn FrameSink, spec: &BulkSpec) -> io::Result<BulkCounts> {
    let mut rng = Rng::new(spec.seed);
    let qps: Vec<Qp> = (0..spec.qps)
        .map(|i| Qp {
            sender: 1 + (i % 64) as u8,
            receiver: 101 + (i % 8) as u8,
            sender_qp: 0x1000 + i,
            receiver_qp: 0x20_0000 + i,
            psn: rng.below(1 << 24) as u32,
            msn: 0,
            last_cnp_ns: 0,
            sport: 49152 + (i % 16384) as u16,
        })
        .collect();
    let mut qps = qps;
    let mut g = Gen {
        out,
        counts: BulkCounts::default(),
        emitter: HeaderEmitter::new(spec.snaplen, spec.mtu as usize),
    };
    let wire_ns = |bytes: u64| bytes * 8 / 400;
    let mut t = T0_NS;
    let mut paused = false;
    let sat = spec.saturation;
    // In a saturation test every frame, whatever its kind, takes the next slot of the fixed frame rate.
    let slot = |t: &mut u64| {
        if let Some(s) = sat {
            *t += s.gap_ns;
        }
    };
    let mut next_pfc = sat.map_or(u64::MAX, |s| s.pfc_every);
    while g.counts.frames < spec.frames {
        let qi = rng.below(u64::from(spec.qps)) as usize;
        let q = qps[qi];
        let in_episode = sat.is_none() && (t - T0_NS) % 10_000_000 < 2_000_000;
        if sat.is_none() && in_episode != paused && g.counts.frames + 1 < spec.frames {
            g.pfc(t, if in_episode { 0xffff } else { 0 })?;
            paused = in_episode;
        }
        if g.counts.frames >= next_pfc && g.counts.frames + 1 < spec.frames {
            paused = !paused;
            g.pfc(t, if paused { 0xffff } else { 0 })?;
            slot(&mut t);
            next_pfc += sat.map_or(u64::MAX, |s| s.pfc_every);
        }
        let mut psn = q.psn;
        let mut last_cnp = q.last_cnp_ns;
        for k in 0..16u32 {
            if g.counts.frames >= spec.frames {
                break;
            }
            let (op, ext) = match k {
                0 => (
                    Opcode::RC_RDMA_WRITE_FIRST,
                    ExtHeaders {
                        reth: Some(RethRepr {
                            va: 0x7f00_0000_0000 + u64::from(psn) * 4096,
                            rkey: 0x1234,
                            dma_len: 16 * spec.mtu,
                        }),
                        ..ExtHeaders::default()
                    },
                ),
                15 => (Opcode::RC_RDMA_WRITE_LAST, ExtHeaders::default()),
                _ => (Opcode::RC_RDMA_WRITE_MIDDLE, ExtHeaders::default()),
            };
            let ce = match sat {
                None => in_episode && rng.below(10) == 0,
                Some(s) => rng.below(1_000_000) < u64::from(s.ce_ppm),
            };
            let ecn = if ce { 3 } else { 2 };
            g.roce(
                t,
                q.sender,
                q.receiver,
                ecn,
                q.sport,
                bth(op, q.receiver_qp, psn, k == 15),
                ext,
                spec.mtu as usize,
            )?;
            g.counts.data += 1;
            match sat {
                None => t += wire_ns(u64::from(spec.mtu) + 62),
                Some(s) => t += s.gap_ns,
            }
            psn = (psn + 1) & 0xff_ffff;
            if ce {
                g.counts.ce += 1;
                let answered =
                    sat.is_none_or(|s| rng.below(1_000_000) < u64::from(s.cnp_per_ce_ppm));
                if answered && t - last_cnp >= CNP_GAP_NS && g.counts.frames < spec.frames {
                    g.roce(
                        t,
                        q.receiver,
                        q.sender,
                        2,
                        0,
                        BthRepr::cnp(q.sender_qp),
                        ExtHeaders::default(),
                        16,
                    )?;
                    g.counts.cnps += 1;
                    last_cnp = t;
                    slot(&mut t);
                }
            }
        }
        let q = &mut qps[qi];
        q.psn = psn;
        q.last_cnp_ns = last_cnp;
        q.msn = (q.msn + 1) & 0xff_ffff;
        if g.counts.frames < spec.frames {
            let ack = ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: 0x1f,
                    msn: q.msn,
                }),
                ..ExtHeaders::default()
            };
            let last = psn.wrapping_sub(1) & 0xff_ffff;
            let (rcv, snd, sport, sqp) = (q.receiver, q.sender, q.sport, q.sender_qp);
            g.roce(
                t,
                rcv,
                snd,
                2,
                sport,
                bth(Opcode::RC_ACKNOWLEDGE, sqp, last, false),
                ack,
                0,
            )?;
            g.counts.acks += 1;
            slot(&mut t);
        }
    }
    Ok(g.counts)
}
