//! The discrete-event core: ports, switches, NICs, RC transport and the event heap.
//!
//! Time is integer picoseconds, so serialization times at 25/100/400 Gb/s are exact and pacing does not drift;
//! the DCQCN model and the capture see nanoseconds. Events at the same instant run in the order they were
//! scheduled (the heap key is `(time, sequence number)`), which with a seeded generator makes a run a pure
//! function of its scenario.
//!
//! Packets are small structs that say what a frame means (kind, flow, linear sequence number, priority, ECN);
//! bytes are only built for frames a tap records, which keeps the simulator fast.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::io::Write;

use roce_capture::LinkType;
use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_core::dcqcn::{Event, EventKind, Profile, Rp};
use roce_wire::build::{IpSpec, RoceFrame, Vlan, emit_mac_control};
use roce_wire::ext::{AethKind, AethRepr, NakCode, RethRepr};
use roce_wire::pfc::{MacControlRepr, PfcRepr, quanta_to_ps};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

use super::scenario::{Op, Scenario};
use super::truth::*;
use super::{LogEntry, LogKind, PacketKind, SimError};
use crate::corpus::Rng;

const NEVER: u64 = u64::MAX;
const PS_PER_NS: u64 = 1_000;
/// Preamble, start delimiter, FCS and inter-frame gap: what a frame costs on the wire beyond its captured bytes.
const WIRE_OVERHEAD: u64 = 24;
const PSN_MASK: u64 = 0x00ff_ffff;
/// XOFF quanta: the longest pause; the sender refreshes it at half time while still congested.
const XOFF_QUANTA: u16 = 0xffff;
/// How often a paced sender re-reads its reaction point while waiting (an increase takes effect at most this late).
const RP_POLL_PS: u64 = 2_000_000;
static ZEROS: [u8; 4096] = [0; 4096];

/// A frame in the simulation. `seq` is the flow's linear PSN (offset from the start PSN, never wrapping); the
/// wire PSN is derived when the frame is written.
#[derive(Debug, Clone, Copy)]
struct Packet {
    id: u64,
    kind: PacketKind,
    flow: u32,
    seq: u64,
    payload: u32,
    len: u32,
    prio: u8,
    ecn: u8,
    opcode: u8,
    msn: u32,
    ident: u16,
    /// Sending host (RoCE) or node (PFC).
    src: u16,
    /// Receiving host (RoCE); unused for PFC, which never leaves its link.
    dst: u16,
    ingress: u16,
    pfc_mask: u8,
    pfc_quanta: u16,
    syndrome: u8,
}

#[derive(Debug)]
enum Ev {
    Arrive { port: usize, pkt: Packet },
    TxDone { port: usize },
    PortWake { port: usize },
    FlowWake { flow: usize },
    Rto { flow: usize },
    PfcRefresh { port: usize, prio: u8 },
    Storm { host: usize },
    Sample,
}

struct Item {
    t: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    // Reversed: BinaryHeap is a max-heap and the earliest event must come out first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.t, o.seq).cmp(&(self.t, self.seq))
    }
}

#[derive(Debug, Default)]
struct Port {
    node: usize,
    peer: usize,
    gbps: u32,
    delay_ps: u64,
    queues: [VecDeque<Packet>; 8],
    qbytes: [u64; 8],
    ctrl: VecDeque<Packet>,
    busy: bool,
    in_flight: Option<Packet>,
    paused_until: [u64; 8],
    pause_open: [Option<u64>; 8],
    wake_at: u64,
    /// Switch only: bytes that entered on this port and still sit in the buffer, per priority.
    ing_bytes: [u64; 8],
    xoff_sent: [bool; 8],
    xoff_count: [u64; 8],
    xon_count: [u64; 8],
    tap: Option<u32>,
    series: [Option<usize>; 8],
    last_sample: [u64; 8],
}

impl Port {
    fn ser_ps(&self, len: u32) -> u64 {
        (u64::from(len) + WIRE_OVERHEAD) * 8_000 / u64::from(self.gbps.max(1))
    }
}

/// The data-sending end of a flow: the requester for WRITE/SEND, the responder for READ.
#[derive(Debug)]
struct Sender {
    host: usize,
    rp: Rp,
    rp_on: bool,
    next: u64,
    max_sent: u64,
    /// Exclusive bound of what may be sent (READ: what has been requested).
    limit: u64,
    una: u64,
    in_nic: bool,
    /// Earliest instant the pacer lets the next packet go.
    pacer_at: u64,
    last_tx: u64,
    last_bits: u64,
    wake_at: u64,
    /// Random extra gap drawn after the last packet, ps.
    jitter: u64,
}

/// The data-receiving end: expected PSN, NAK state, ACK coalescing, CNP pacing.
#[derive(Debug, Default)]
struct Receiver {
    epsn: u64,
    nak_pending: bool,
    /// PSN of the last out-of-sequence packet: one at or below it means the sender went back and lost again.
    oos_last: u64,
    since_ack: u32,
    last_cnp: Option<u64>,
    /// READ requester: next message to request and requests not yet completed.
    next_msg: u64,
    reads_out: u32,
}

#[derive(Debug)]
struct Flow {
    op: Op,
    src: usize,
    dst: usize,
    pkts_per_msg: u64,
    requester_qp: u32,
    responder_qp: u32,
    start_psn: u32,
    sport: u16,
    va: u64,
    rkey: u32,
    tx: Sender,
    rx: Receiver,
    /// The transport timer: the WRITE/SEND requester's, or the READ requester's.
    timer: Timer,
    truth: FlowTruth,
}

/// A restartable timer with at most one event in the heap: restarting only moves the deadline, and an event that
/// fires early re-schedules itself. Without this every ACK would leave a stale event behind for a whole timeout.
#[derive(Debug)]
struct Timer {
    deadline: u64,
    pending: u64,
}

impl Flow {
    fn data_receiver(&self) -> usize {
        if self.op == Op::Read {
            self.src
        } else {
            self.dst
        }
    }
    fn psn(&self, seq: u64) -> u32 {
        ((u64::from(self.start_psn) + seq) & PSN_MASK) as u32
    }
}

/// Everything a test may want to know about a run besides the truth.
#[derive(Debug, Default)]
pub struct RunInternals {
    /// Every packet movement, when asked for.
    pub log: Vec<LogEntry>,
    /// Ids and lengths of packets still inside the network when the run ended (queued, on a wire, or in a NIC).
    pub in_network: Vec<(u64, u32)>,
    /// Per switch: the shared-buffer size and the most it ever held.
    pub buffer_peak: Vec<(String, u64, u64)>,
    /// Per port (the log's `port`): the node it belongs to and the port at the other end of its link.
    pub port_node: Vec<usize>,
    pub port_peer: Vec<usize>,
    /// Every pause a port obeyed: (port, priority, start ps, end ps).
    pub pauses: Vec<(usize, u8, u64, u64)>,
    /// Nodes below this index are hosts, the rest switches.
    pub hosts: usize,
}

pub(super) struct World<'s, W: Write> {
    sc: &'s Scenario,
    now: u64,
    end: u64,
    heap: BinaryHeap<Item>,
    seq: u64,
    rng: Rng,
    ports: Vec<Port>,
    /// Per node, its ports' indices.
    node_ports: Vec<Vec<usize>>,
    /// Per switch (indexed by node - hosts), per destination host: egress port.
    routes: Vec<Vec<usize>>,
    buffer_used: Vec<u64>,
    buffer_peak: Vec<u64>,
    flows: Vec<Flow>,
    ident: Vec<u16>,
    next_id: u64,
    keep_log: bool,
    internals: RunInternals,
    queues: Vec<QueueTruth>,
    pauses: Vec<PauseTruth>,
    drops: Vec<DropTruth>,
    totals: Totals,
    cap: Option<PcapngWriter<W>>,
    snaplen: u32,
    frame_buf: Vec<u8>,
    io_error: Option<std::io::Error>,
}

fn host_ip(h: usize) -> [u8; 4] {
    [10, 0, (h >> 8) as u8, (h & 0xff) as u8 + 1]
}
fn host_mac(h: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, (h >> 8) as u8, (h & 0xff) as u8 + 1]
}
fn port_mac(port: usize) -> [u8; 6] {
    [0x02, 0, 0, 1, (port >> 8) as u8, (port & 0xff) as u8]
}
fn fmt_ip(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

impl<'s, W: Write> World<'s, W> {
    pub(super) fn new(
        sc: &'s Scenario,
        capture: Option<W>,
        keep_log: bool,
    ) -> Result<Self, SimError> {
        let nodes = sc.hosts.len() + sc.switches.len();
        if nodes > 250 || sc.flows.len() > 60_000 {
            return Err(SimError::TooBig);
        }
        let mut rng = Rng::new(sc.seed ^ 0x005e_ed0f_5105);
        let mut ports = Vec::new();
        let mut node_ports = vec![Vec::new(); nodes];
        let mut link_ports = Vec::new();
        for l in &sc.links {
            let pa = ports.len();
            let pb = pa + 1;
            for (node, peer) in [(l.a, pb), (l.b, pa)] {
                node_ports[node].push(ports.len());
                ports.push(Port {
                    node,
                    peer,
                    gbps: l.gbps,
                    delay_ps: l.delay_ns * PS_PER_NS,
                    wake_at: NEVER,
                    ..Port::default()
                });
            }
            link_ports.push((pa, pb));
        }
        // Shortest paths by breadth-first search from every host; ties go to the lower port index, so routes are
        // stable.
        let nh = sc.hosts.len();
        let mut routes = vec![vec![usize::MAX; nh]; sc.switches.len()];
        for h in 0..nh {
            let mut dist = vec![usize::MAX; nodes];
            dist[h] = 0;
            let mut q = VecDeque::from([h]);
            while let Some(n) = q.pop_front() {
                for &p in &node_ports[n] {
                    let m = ports[ports[p].peer].node;
                    if dist[m] == usize::MAX {
                        dist[m] = dist[n] + 1;
                        // m reaches h through its port facing n.
                        if m >= nh {
                            routes[m - nh][h] = ports[p].peer;
                        }
                        if m >= nh {
                            q.push_back(m);
                        }
                    }
                }
            }
        }
        let mut flows = Vec::new();
        for (i, f) in sc.flows.iter().enumerate() {
            let pkts_per_msg = u64::from(f.message_bytes.div_ceil(f.mtu));
            let data_sender = if f.op == Op::Read { f.dst } else { f.src };
            let line_mbps = f64::from(ports[node_ports[data_sender][0]].gbps) * 1_000.0;
            let rp = Rp::new(Profile::ConnectX, &sc.knobs, line_mbps)
                .map_err(|e| SimError::Model(e.to_string()))?;
            let requester_qp = 0x100 + (rng.below(0xff00) as u32) * 4 + (i as u32 & 3);
            let responder_qp = 0x100 + (rng.below(0xff00) as u32) * 4 + (i as u32 & 3);
            let start_psn = rng.below(1 << 24) as u32;
            let sport = 0xc000 | rng.below(0x3fff) as u16;
            let rkey = rng.next_u64() as u32;
            let va = 0x7f00_0000_0000 + (rng.below(1 << 20) << 12);
            let limit = match f.op {
                Op::Read => 0,
                _ if f.messages == 0 => NEVER,
                _ => f.messages.saturating_mul(pkts_per_msg),
            };
            flows.push(Flow {
                op: f.op,
                src: f.src,
                dst: f.dst,
                pkts_per_msg,
                requester_qp,
                responder_qp,
                start_psn,
                sport,
                va,
                rkey,
                tx: Sender {
                    host: data_sender,
                    rp,
                    rp_on: sc.hosts[data_sender].rp,
                    next: 0,
                    max_sent: 0,
                    limit,
                    una: 0,
                    in_nic: false,
                    pacer_at: f.start_ns * PS_PER_NS,
                    last_tx: 0,
                    last_bits: 0,
                    wake_at: NEVER,
                    jitter: 0,
                },
                rx: Receiver::default(),
                timer: Timer {
                    deadline: NEVER,
                    pending: NEVER,
                },
                truth: FlowTruth {
                    name: f.name.clone(),
                    op: f.op.name(),
                    src: sc.hosts[f.src].name.clone(),
                    dst: sc.hosts[f.dst].name.clone(),
                    src_ip: fmt_ip(host_ip(f.src)),
                    dst_ip: fmt_ip(host_ip(f.dst)),
                    requester_qp,
                    responder_qp,
                    start_psn,
                    mtu: f.mtu,
                    prio: f.prio,
                    dscp: f.dscp,
                    data_sender: if f.op == Op::Read {
                        "responder"
                    } else {
                        "requester"
                    },
                    data_packets_sent: 0,
                    data_payload_bytes_sent: 0,
                    retransmitted_packets: 0,
                    go_back_n: Vec::new(),
                    messages_completed: 0,
                    naks_sent: 0,
                    acks_sent: 0,
                    ce_received: 0,
                    cnps_sent: 0,
                    cnps_received: 0,
                    cnps_ignored: 0,
                    rp_enabled: sc.hosts[data_sender].rp,
                    line_mbps,
                    rp: Vec::new(),
                    cuts: 0,
                },
            });
        }
        // Taps see frames whether or not a capture is written, so counts agree between the two.
        for (id, t) in sc.taps.iter().enumerate() {
            let (pa, pb) = link_ports[t.link];
            ports[pa].tap = Some(id as u32);
            ports[pb].tap = Some(id as u32);
        }
        let mut cap = None;
        let snaplen = sc.snaplen.unwrap_or(0);
        if let Some(out) = capture {
            let mut w = PcapngWriter::new(
                out,
                &SectionInfo {
                    user_application: Some("roce-sim (rocetrace)".into()),
                    comment: Some(format!("scenario {} seed {}", sc.name, sc.seed)),
                    ..SectionInfo::default()
                },
            )?;
            for t in &sc.taps {
                let l = &sc.links[t.link];
                let desc = format!(
                    "mirror of the link {} <-> {}",
                    sc.node_name(l.a),
                    sc.node_name(l.b)
                );
                w.add_interface(LinkType::ETHERNET, snaplen, Some(&t.name), Some(&desc))?;
            }
            cap = Some(w);
        }
        let mut w = World {
            sc,
            now: 0,
            end: sc.duration_ns * PS_PER_NS,
            heap: BinaryHeap::new(),
            seq: 0,
            rng,
            ports,
            node_ports,
            routes,
            buffer_used: vec![0; sc.switches.len()],
            buffer_peak: vec![0; sc.switches.len()],
            flows,
            ident: vec![0; nh],
            next_id: 0,
            keep_log,
            internals: RunInternals::default(),
            queues: Vec::new(),
            pauses: Vec::new(),
            drops: Vec::new(),
            totals: Totals::default(),
            cap,
            snaplen,
            frame_buf: vec![0; 9_216],
            io_error: None,
        };
        for (i, f) in sc.flows.iter().enumerate() {
            w.at(f.start_ns * PS_PER_NS, Ev::FlowWake { flow: i });
        }
        for (h, spec) in sc.hosts.iter().enumerate() {
            if let Some(s) = spec.storm {
                w.at(s.start_ns * PS_PER_NS, Ev::Storm { host: h });
            }
        }
        if !sc.switches.is_empty() {
            w.at(0, Ev::Sample);
        }
        Ok(w)
    }

    /// Schedules an event. Events after the end are kept (the run stops before them) so that a frame on a wire
    /// at the end is still accounted for.
    fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Item {
            t,
            seq: self.seq,
            ev,
        });
    }

    fn is_switch(&self, node: usize) -> bool {
        node >= self.sc.hosts.len()
    }

    fn node_name(&self, node: usize) -> String {
        self.sc.node_name(node).to_string()
    }

    fn log(&mut self, kind: LogKind, port: usize, node: usize, p: &Packet) {
        if self.keep_log {
            self.internals.log.push(LogEntry {
                t_ps: self.now,
                kind,
                node: node as u16,
                port: port as u32,
                packet: p.id,
                len: p.len,
                prio: p.prio,
                packet_kind: p.kind,
                flow: p.flow,
                seq: p.seq,
                buffer_bytes: 0,
            });
        }
    }

    pub(super) fn run(mut self) -> Result<(Truth, RunInternals), SimError> {
        while self.heap.peek().is_some_and(|i| i.t <= self.end) {
            let Some(item) = self.heap.pop() else {
                break;
            };
            self.now = item.t;
            self.totals.events += 1;
            match item.ev {
                Ev::Arrive { port, pkt } => self.arrive(port, pkt),
                Ev::TxDone { port } => self.tx_done(port),
                Ev::PortWake { port } => {
                    if self.ports[port].wake_at == self.now {
                        self.ports[port].wake_at = NEVER;
                        self.close_expired_pauses(port);
                        self.try_tx(port);
                    }
                }
                Ev::FlowWake { flow } => {
                    if self.flows[flow].tx.wake_at == self.now {
                        self.flows[flow].tx.wake_at = NEVER;
                    }
                    self.try_send(flow);
                }
                Ev::Rto { flow } => self.rto(flow),
                Ev::PfcRefresh { port, prio } => {
                    if self.ports[port].xoff_sent[usize::from(prio)] {
                        self.send_pfc(port, prio, XOFF_QUANTA);
                    }
                }
                Ev::Storm { host } => self.storm(host),
                Ev::Sample => self.sample(),
            }
            if let Some(e) = self.io_error.take() {
                return Err(SimError::Io(e));
            }
        }
        self.now = self.end;
        self.finish()
    }

    fn finish(mut self) -> Result<(Truth, RunInternals), SimError> {
        let end_ns = self.end / PS_PER_NS;
        for f in &mut self.flows {
            let truth = &mut f.truth;
            let mut push = |e: Event| record_rp(truth, e);
            f.tx.rp.advance(end_ns, &mut push);
        }
        for p in 0..self.ports.len() {
            for prio in 0..8 {
                if let Some(start) = self.ports[p].pause_open[prio] {
                    let stop = self.ports[p].paused_until[prio].min(self.end);
                    self.push_pause(p, prio, start, stop);
                }
            }
        }
        for p in 0..self.ports.len() {
            let port = &self.ports[p];
            let mut resident: Vec<(u64, u32)> = Vec::new();
            resident.extend(port.in_flight.iter().map(|k| (k.id, k.len)));
            resident.extend(port.ctrl.iter().map(|k| (k.id, k.len)));
            for q in &port.queues {
                resident.extend(q.iter().map(|k| (k.id, k.len)));
            }
            self.internals.in_network.extend(resident);
        }
        // What is still on a wire sits in the heap as an arrival.
        for item in self.heap.iter() {
            if let Ev::Arrive { pkt, .. } = &item.ev {
                self.internals.in_network.push((pkt.id, pkt.len));
            }
        }
        self.internals.in_network.sort_unstable();
        self.internals.port_node = self.ports.iter().map(|p| p.node).collect();
        self.internals.port_peer = self.ports.iter().map(|p| p.peer).collect();
        self.internals.hosts = self.sc.hosts.len();
        for (s, spec) in self.sc.switches.iter().enumerate() {
            self.internals.buffer_peak.push((
                spec.name.clone(),
                spec.buffer_bytes,
                self.buffer_peak[s],
            ));
        }
        if let Some(mut cap) = self.cap.take() {
            cap.flush()?;
        }
        let sc = self.sc;
        let mut pfc_frames = Vec::new();
        for p in &self.ports {
            for prio in 0..8 {
                if p.xoff_count[prio] + p.xon_count[prio] > 0 {
                    pfc_frames.push(PfcSent {
                        node: sc.node_name(p.node).to_string(),
                        port: sc.node_name(self.ports[p.peer].node).to_string(),
                        prio: prio as u8,
                        xoff: p.xoff_count[prio],
                        xon: p.xon_count[prio],
                    });
                }
            }
        }
        self.pauses
            .sort_by(|a, b| (a.start_ns, &a.node, &a.port).cmp(&(b.start_ns, &b.node, &b.port)));
        let truth = Truth {
            scenario: sc.name.clone(),
            description: sc.description.clone(),
            seed: sc.seed,
            duration_ns: sc.duration_ns,
            hosts: sc
                .hosts
                .iter()
                .enumerate()
                .map(|(i, h)| HostTruth {
                    name: h.name.clone(),
                    ip: fmt_ip(host_ip(i)),
                    mac: roce_core::decode::mac_to_string(&host_mac(i)),
                    rp: h.rp,
                    np: h.np,
                })
                .collect(),
            links: sc
                .links
                .iter()
                .map(|l| LinkTruth {
                    a: sc.node_name(l.a).to_string(),
                    b: sc.node_name(l.b).to_string(),
                    gbps: l.gbps,
                    delay_ns: l.delay_ns,
                })
                .collect(),
            taps: sc
                .taps
                .iter()
                .enumerate()
                .map(|(i, t)| TapTruth {
                    name: t.name.clone(),
                    interface: i as u32,
                    a: sc.node_name(sc.links[t.link].a).to_string(),
                    b: sc.node_name(sc.links[t.link].b).to_string(),
                })
                .collect(),
            flows: self.flows.into_iter().map(|f| f.truth).collect(),
            queues: self.queues,
            pauses: self.pauses,
            pfc_frames,
            drops: self.drops,
            totals: self.totals,
        };
        Ok((truth, self.internals))
    }

    // ---------------------------------------------------------------- ports

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Starts the next frame on an idle port: MAC control first, then the highest priority that is not paused.
    fn try_tx(&mut self, port: usize) {
        if self.ports[port].busy {
            return;
        }
        let now = self.now;
        let mut pkt = if let Some(p) = self.ports[port].ctrl.pop_front() {
            p
        } else {
            let pt = &mut self.ports[port];
            let mut found = None;
            let mut wake = NEVER;
            for prio in (0..8).rev() {
                if pt.queues[prio].is_empty() {
                    continue;
                }
                if pt.paused_until[prio] > now {
                    wake = wake.min(pt.paused_until[prio]);
                    continue;
                }
                found = Some(prio);
                break;
            }
            let Some(prio) = found else {
                if wake != NEVER && pt.wake_at != wake {
                    pt.wake_at = wake;
                    self.at(wake, Ev::PortWake { port });
                }
                return;
            };
            let Some(p) = pt.queues[prio].pop_front() else {
                return;
            };
            pt.qbytes[prio] -= u64::from(p.len);
            p
        };
        let node = self.ports[port].node;
        if self.is_switch(node) && pkt.kind != PacketKind::Pfc {
            self.release_buffer(node, &pkt);
            self.mark(node, port, &mut pkt);
        }
        self.log(LogKind::TxStart, port, node, &pkt);
        self.totals.frames_transmitted += 1;
        let pt = &mut self.ports[port];
        pt.busy = true;
        let ser = pt.ser_ps(pkt.len);
        pt.in_flight = Some(pkt);
        self.at(now + ser, Ev::TxDone { port });
        if !self.is_switch(node) && pkt.kind == PacketKind::Data {
            let f = pkt.flow as usize;
            if let Some(fl) = self.flows.get_mut(f)
                && fl.tx.host == node
            {
                fl.tx.in_nic = false;
                self.try_send(f);
            }
        }
    }

    fn tx_done(&mut self, port: usize) {
        let pt = &mut self.ports[port];
        pt.busy = false;
        let Some(pkt) = pt.in_flight.take() else {
            return;
        };
        let peer = pt.peer;
        let delay = pt.delay_ps;
        if let Some(iface) = pt.tap {
            self.capture(iface, &pkt);
        }
        self.at(self.now + delay, Ev::Arrive { port: peer, pkt });
        self.try_tx(port);
    }

    fn enqueue_host(&mut self, host: usize, pkt: Packet) {
        let port = self.node_ports[host][0];
        self.log(LogKind::Create, port, host, &pkt);
        self.totals.packets_created += 1;
        let pt = &mut self.ports[port];
        let prio = usize::from(pkt.prio & 7);
        pt.qbytes[prio] += u64::from(pkt.len);
        pt.queues[prio].push_back(pkt);
        self.try_tx(port);
    }

    fn arrive(&mut self, port: usize, mut pkt: Packet) {
        let node = self.ports[port].node;
        self.log(LogKind::Arrive, port, node, &pkt);
        if pkt.kind == PacketKind::Pfc {
            self.log(LogKind::Consume, port, node, &pkt);
            self.on_pfc(port, &pkt);
            return;
        }
        if !self.is_switch(node) {
            self.log(LogKind::Consume, port, node, &pkt);
            self.totals.packets_delivered += 1;
            self.host_receive(node, pkt);
            return;
        }
        let s = node - self.sc.hosts.len();
        let egress = self.routes[s]
            .get(usize::from(pkt.dst))
            .copied()
            .unwrap_or(usize::MAX);
        if egress == usize::MAX {
            self.drop_packet(port, egress, &pkt, "no_route");
            return;
        }
        let sw = &self.sc.switches[s];
        let prio = usize::from(pkt.prio & 7);
        let len = u64::from(pkt.len);
        let lossless = sw.pfc_mask & (1 << prio) != 0;
        if self.buffer_used[s] + len > sw.buffer_bytes {
            self.drop_packet(port, egress, &pkt, "buffer_full");
            return;
        }
        if !lossless && self.ports[egress].qbytes[prio] + len > sw.queue_limit_bytes {
            self.drop_packet(port, egress, &pkt, "tail_drop");
            return;
        }
        pkt.ingress = port as u16;
        self.buffer_used[s] += len;
        self.buffer_peak[s] = self.buffer_peak[s].max(self.buffer_used[s]);
        let xoff = sw.xoff_bytes;
        let pi = &mut self.ports[port];
        pi.ing_bytes[prio] += len;
        let over = lossless && pi.ing_bytes[prio] > xoff && !pi.xoff_sent[prio];
        let pe = &mut self.ports[egress];
        pe.qbytes[prio] += len;
        pe.queues[prio].push_back(pkt);
        self.log(LogKind::Enqueue, egress, node, &pkt);
        if let Some(e) = self.internals.log.last_mut() {
            e.buffer_bytes = self.buffer_used[s];
        }
        if over {
            self.ports[port].xoff_sent[prio] = true;
            self.send_pfc(port, prio as u8, XOFF_QUANTA);
        }
        self.try_tx(egress);
    }

    /// CP: marks CE as the packet leaves, by the depth of the queue it leaves behind. Marking at dequeue rather
    /// than enqueue keeps the queueing delay out of the feedback loop, as the DCQCN paper recommends.
    fn mark(&mut self, node: usize, port: usize, pkt: &mut Packet) {
        let sw = &self.sc.switches[node - self.sc.hosts.len()];
        if !sw.ecn || !(pkt.ecn == 1 || pkt.ecn == 2) {
            return;
        }
        let q = self.ports[port].qbytes[usize::from(pkt.prio & 7)];
        let p = if q <= sw.kmin_bytes {
            0.0
        } else if q >= sw.kmax_bytes {
            1.0
        } else {
            sw.pmax * (q - sw.kmin_bytes) as f64 / (sw.kmax_bytes - sw.kmin_bytes) as f64
        };
        if p > 0.0 && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p {
            pkt.ecn = 3;
            self.totals.ce_marked += 1;
        }
    }

    fn release_buffer(&mut self, node: usize, pkt: &Packet) {
        let s = node - self.sc.hosts.len();
        let len = u64::from(pkt.len);
        self.buffer_used[s] -= len;
        let prio = usize::from(pkt.prio & 7);
        let ing = usize::from(pkt.ingress);
        let xon = self.sc.switches[s].xon_bytes;
        let pi = &mut self.ports[ing];
        pi.ing_bytes[prio] -= len;
        if pi.xoff_sent[prio] && pi.ing_bytes[prio] <= xon {
            pi.xoff_sent[prio] = false;
            self.send_pfc(ing, prio as u8, 0);
        }
    }

    fn drop_packet(&mut self, ingress: usize, egress: usize, pkt: &Packet, reason: &'static str) {
        let node = self.ports[ingress].node;
        self.log(LogKind::Drop, ingress, node, pkt);
        self.totals.packets_dropped += 1;
        let (flow, psn) = match self.flows.get(pkt.flow as usize) {
            Some(f) => (f.truth.name.clone(), f.psn(pkt.seq)),
            None => (String::new(), 0),
        };
        let port = self
            .ports
            .get(egress)
            .map_or_else(|| "?".into(), |p| self.node_name(self.ports[p.peer].node));
        self.drops.push(DropTruth {
            t_ns: self.now / PS_PER_NS,
            switch: self.node_name(node),
            port,
            prio: pkt.prio,
            flow,
            kind: pkt.kind.name(),
            psn,
            reason,
        });
    }

    /// Sends a PFC frame for one priority out of `port`, ahead of any queued data.
    fn send_pfc(&mut self, port: usize, prio: u8, quanta: u16) {
        let node = self.ports[port].node;
        let pkt = Packet {
            id: self.new_id(),
            kind: PacketKind::Pfc,
            flow: u32::MAX,
            seq: 0,
            payload: 0,
            len: 60,
            prio,
            ecn: 0,
            opcode: 0,
            msn: 0,
            ident: 0,
            src: port as u16,
            dst: 0,
            ingress: 0,
            pfc_mask: 1 << (prio & 7),
            pfc_quanta: quanta,
            syndrome: 0,
        };
        self.log(LogKind::Create, port, node, &pkt);
        let pt = &mut self.ports[port];
        let p = usize::from(prio & 7);
        if quanta == 0 {
            pt.xon_count[p] += 1;
        } else {
            pt.xoff_count[p] += 1;
            let half = quanta_to_ps(quanta, u64::from(pt.gbps) * 1_000_000_000) / 2;
            if self.is_switch(node) {
                self.at(self.now + half, Ev::PfcRefresh { port, prio });
            }
        }
        self.ports[port].ctrl.push_back(pkt);
        self.try_tx(port);
    }

    fn on_pfc(&mut self, port: usize, pkt: &Packet) {
        let now = self.now;
        let pt = &mut self.ports[port];
        let dur = quanta_to_ps(pkt.pfc_quanta, u64::from(pt.gbps) * 1_000_000_000);
        let mut closed = Vec::new();
        for prio in 0..8 {
            if pkt.pfc_mask & (1 << prio) == 0 {
                continue;
            }
            if dur == 0 {
                if let Some(start) = pt.pause_open[prio].take() {
                    closed.push((prio, start));
                }
                pt.paused_until[prio] = now;
            } else {
                if pt.pause_open[prio].is_none() || pt.paused_until[prio] <= now {
                    if let Some(start) = pt.pause_open[prio].take() {
                        closed.push((prio, start));
                    }
                    pt.pause_open[prio] = Some(now);
                }
                pt.paused_until[prio] = now + dur;
            }
        }
        for (prio, start) in closed {
            let stop = self.ports[port].paused_until[prio].min(now);
            self.push_pause(port, prio, start, stop);
        }
        self.try_tx(port);
    }

    fn close_expired_pauses(&mut self, port: usize) {
        for prio in 0..8 {
            let pt = &self.ports[port];
            if let Some(start) = pt.pause_open[prio]
                && pt.paused_until[prio] <= self.now
            {
                let stop = pt.paused_until[prio];
                self.ports[port].pause_open[prio] = None;
                self.push_pause(port, prio, start, stop);
            }
        }
    }

    fn push_pause(&mut self, port: usize, prio: usize, start: u64, stop: u64) {
        self.internals.pauses.push((port, prio as u8, start, stop));
        let pt = &self.ports[port];
        self.pauses.push(PauseTruth {
            node: self.node_name(pt.node),
            port: self.node_name(self.ports[pt.peer].node),
            prio: prio as u8,
            start_ns: start / PS_PER_NS,
            end_ns: stop.div_ceil(PS_PER_NS),
        });
    }

    fn storm(&mut self, host: usize) {
        let Some(s) = self.sc.hosts[host].storm else {
            return;
        };
        let port = self.node_ports[host][0];
        if self.now >= s.end_ns * PS_PER_NS {
            self.send_pfc(port, s.prio, 0);
            return;
        }
        self.send_pfc(port, s.prio, XOFF_QUANTA);
        let half = quanta_to_ps(
            XOFF_QUANTA,
            u64::from(self.ports[port].gbps) * 1_000_000_000,
        ) / 2;
        let next = (self.now + half).min(s.end_ns * PS_PER_NS);
        self.at(next, Ev::Storm { host });
    }

    fn sample(&mut self) {
        let t_ns = self.now / PS_PER_NS;
        let nh = self.sc.hosts.len();
        for p in 0..self.ports.len() {
            if self.ports[p].node < nh {
                continue;
            }
            for prio in 0..8 {
                let pt = &self.ports[p];
                let q = pt.qbytes[prio];
                if q == 0 && pt.last_sample[prio] == 0 {
                    continue;
                }
                let idx = match pt.series[prio] {
                    Some(i) => i,
                    None => {
                        let i = self.queues.len();
                        self.queues.push(QueueTruth {
                            switch: self.node_name(pt.node),
                            port: self.node_name(self.ports[pt.peer].node),
                            prio: prio as u8,
                            max_bytes: 0,
                            samples: Vec::new(),
                        });
                        self.ports[p].series[prio] = Some(i);
                        i
                    }
                };
                let series = &mut self.queues[idx];
                series.samples.push([t_ns, q]);
                series.max_bytes = series.max_bytes.max(q);
                self.ports[p].last_sample[prio] = q;
            }
        }
        self.at(self.now + self.sc.queue_sample_ns * PS_PER_NS, Ev::Sample);
    }

    // ---------------------------------------------------------------- capture

    fn capture(&mut self, iface: u32, pkt: &Packet) {
        self.totals.captured_frames += 1;
        if self.cap.is_none() {
            return;
        }
        let Some(n) = self.build_frame(pkt) else {
            return;
        };
        let cut = if self.snaplen > 0 {
            n.min(self.snaplen as usize)
        } else {
            n
        };
        let ts = self.now / PS_PER_NS;
        if let Some(cap) = &mut self.cap {
            let data = self.frame_buf.get(..cut).unwrap_or(&[]);
            if let Err(e) = cap.write_packet(iface, ts, data, n as u32) {
                self.io_error = Some(e);
            }
        }
    }

    fn roce_frame(&self, pkt: &Packet) -> Option<RoceFrame<'static>> {
        let f = self.flows.get(pkt.flow as usize)?;
        let dest_qp = if usize::from(pkt.dst) == f.src {
            f.requester_qp
        } else {
            f.responder_qp
        };
        let op = Opcode(pkt.opcode);
        let mut ext = ExtHeaders::default();
        let mut psn = f.psn(pkt.seq);
        let mut ack_req = false;
        match pkt.kind {
            PacketKind::Cnp => psn = 0,
            PacketKind::Ack | PacketKind::Nak => {
                ext.aeth = Some(AethRepr {
                    syndrome: pkt.syndrome,
                    msn: pkt.msn & 0x00ff_ffff,
                });
            }
            PacketKind::ReadReq => {
                let m = pkt.seq / f.pkts_per_msg;
                let k = pkt.seq % f.pkts_per_msg;
                let spec = self.sc.flows.get(pkt.flow as usize)?;
                let off = k * u64::from(spec.mtu);
                ext.reth = Some(RethRepr {
                    va: f.va + m * u64::from(spec.message_bytes) + off,
                    rkey: f.rkey,
                    dma_len: (u64::from(spec.message_bytes) - off) as u32,
                });
                ack_req = true;
            }
            PacketKind::Data => {
                if op == Opcode::RC_RDMA_WRITE_FIRST || op == Opcode::RC_RDMA_WRITE_ONLY {
                    let spec = self.sc.flows.get(pkt.flow as usize)?;
                    let m = pkt.seq / f.pkts_per_msg;
                    ext.reth = Some(RethRepr {
                        va: f.va + m * u64::from(spec.message_bytes),
                        rkey: f.rkey,
                        dma_len: spec.message_bytes,
                    });
                }
                if matches!(
                    op,
                    Opcode::RC_RDMA_READ_RESPONSE_FIRST
                        | Opcode::RC_RDMA_READ_RESPONSE_LAST
                        | Opcode::RC_RDMA_READ_RESPONSE_ONLY
                ) {
                    ext.aeth = Some(AethRepr {
                        syndrome: AethKind::Ack { credits: 31 }.syndrome(),
                        msn: pkt.msn & 0x00ff_ffff,
                    });
                }
                ack_req = matches!(
                    op,
                    Opcode::RC_RDMA_WRITE_LAST
                        | Opcode::RC_RDMA_WRITE_ONLY
                        | Opcode::RC_SEND_LAST
                        | Opcode::RC_SEND_ONLY
                );
            }
            PacketKind::Pfc => return None,
        }
        let payload = if pkt.kind == PacketKind::Cnp {
            &ZEROS[..16]
        } else {
            ZEROS.get(..pkt.payload as usize)?
        };
        let bth = if pkt.kind == PacketKind::Cnp {
            BthRepr::cnp(dest_qp)
        } else {
            BthRepr {
                ack_req,
                ..BthRepr::new(op, dest_qp, psn)
            }
        };
        let src = usize::from(pkt.src);
        let dst = usize::from(pkt.dst);
        Some(RoceFrame {
            src_mac: host_mac(src),
            dst_mac: host_mac(dst),
            vlan: Some(Vlan {
                pcp: pkt.prio & 7,
                dei: false,
                vid: self.sc.vlan,
            }),
            ip: IpSpec::V4 {
                src: host_ip(src),
                dst: host_ip(dst),
                dscp: self.dscp_of(pkt),
                ecn: pkt.ecn,
                ttl: 64,
                ident: pkt.ident,
            },
            sport: f.sport,
            bth,
            ext,
            payload,
        })
    }

    fn dscp_of(&self, pkt: &Packet) -> u8 {
        if pkt.kind == PacketKind::Cnp {
            self.sc.hosts[usize::from(pkt.src)].cnp_dscp
        } else {
            self.sc.flows[pkt.flow as usize].dscp
        }
    }

    fn build_frame(&mut self, pkt: &Packet) -> Option<usize> {
        if pkt.kind == PacketKind::Pfc {
            let mut quanta = [0u16; 8];
            for (i, q) in quanta.iter_mut().enumerate() {
                if pkt.pfc_mask & (1 << i) != 0 {
                    *q = pkt.pfc_quanta;
                }
            }
            let ctl = MacControlRepr::Pfc(PfcRepr {
                enable: u16::from(pkt.pfc_mask),
                quanta,
            });
            // A host's NIC pauses with its own MAC; a switch port with the port's.
            let port = usize::from(pkt.src);
            let node = self.ports.get(port).map_or(usize::MAX, |p| p.node);
            let mac = if node < self.sc.hosts.len() {
                host_mac(node)
            } else {
                port_mac(port)
            };
            return emit_mac_control(mac, None, &ctl, &mut self.frame_buf).ok();
        }
        let frame = self.roce_frame(pkt)?;
        frame.emit(&mut self.frame_buf).ok()
    }

    // ---------------------------------------------------------------- hosts

    /// Makes a RoCE packet and fills in its length from the frame it will become.
    #[allow(clippy::too_many_arguments)]
    fn make(
        &mut self,
        kind: PacketKind,
        flow: usize,
        from: usize,
        to: usize,
        seq: u64,
        opcode: Opcode,
        payload: u32,
        prio: u8,
        ecn: u8,
    ) -> Packet {
        let ident = self.ident[from];
        self.ident[from] = ident.wrapping_add(1);
        let mut p = Packet {
            id: self.new_id(),
            kind,
            flow: flow as u32,
            seq,
            payload,
            len: 0,
            prio,
            ecn,
            opcode: opcode.0,
            msn: 0,
            ident,
            src: from as u16,
            dst: to as u16,
            ingress: 0,
            pfc_mask: 0,
            pfc_quanta: 0,
            syndrome: 0,
        };
        p.len = self.roce_frame(&p).map_or(60, |f| f.len() as u32);
        p
    }

    fn host_receive(&mut self, host: usize, pkt: Packet) {
        let f = pkt.flow as usize;
        if f >= self.flows.len() {
            return;
        }
        match pkt.kind {
            PacketKind::Data => {
                if pkt.ecn == 3 {
                    self.flows[f].truth.ce_received += 1;
                    self.maybe_cnp(host, f);
                }
                if self.flows[f].op == Op::Read {
                    self.read_response(f, &pkt);
                } else {
                    self.write_data(f, &pkt);
                }
            }
            PacketKind::ReadReq => {
                let n = self.flows[f].pkts_per_msg;
                let tx = &mut self.flows[f].tx;
                let end = (pkt.seq / n + 1) * n;
                tx.limit = if tx.limit == NEVER {
                    end
                } else {
                    tx.limit.max(end)
                };
                if pkt.seq < tx.next {
                    tx.next = pkt.seq;
                }
                self.try_send(f);
            }
            PacketKind::Ack | PacketKind::Nak => self.on_ack(f, &pkt),
            PacketKind::Cnp => {
                let fl = &mut self.flows[f];
                fl.truth.cnps_received += 1;
                if fl.tx.rp_on {
                    let truth = &mut fl.truth;
                    let mut push = |e: Event| record_rp(truth, e);
                    fl.tx.rp.on_cnp(self.now / PS_PER_NS, &mut push);
                    self.try_send(f);
                } else {
                    fl.truth.cnps_ignored += 1;
                }
            }
            PacketKind::Pfc => {}
        }
    }

    /// NP: one CNP per flow per `min_time_between_cnps`, on the host's CNP priority and DSCP, not ECN-capable.
    fn maybe_cnp(&mut self, host: usize, f: usize) {
        let spec = &self.sc.hosts[host];
        if !spec.np {
            return;
        }
        let gap = spec.min_time_between_cnps_ns * PS_PER_NS;
        let prio = spec.cnp_prio;
        let rx = &mut self.flows[f].rx;
        if let Some(last) = rx.last_cnp
            && self.now < last + gap
        {
            return;
        }
        rx.last_cnp = Some(self.now);
        self.flows[f].truth.cnps_sent += 1;
        let to = self.flows[f].tx.host;
        let p = self.make(PacketKind::Cnp, f, host, to, 0, Opcode::CNP, 16, prio, 0);
        self.enqueue_host(host, p);
    }

    fn write_data(&mut self, f: usize, pkt: &Packet) {
        let spec = &self.sc.flows[f];
        let ack_every = spec.ack_every;
        let prio = spec.prio;
        let fl = &mut self.flows[f];
        let n = fl.pkts_per_msg;
        let rx = &mut fl.rx;
        let last_of_msg = (pkt.seq + 1).is_multiple_of(n);
        let reply = if pkt.seq == rx.epsn {
            rx.epsn += 1;
            rx.nak_pending = false;
            rx.since_ack += 1;
            if last_of_msg {
                fl.truth.messages_completed = rx.epsn / n;
            }
            if last_of_msg || rx.since_ack >= ack_every {
                rx.since_ack = 0;
                Some((PacketKind::Ack, pkt.seq))
            } else {
                None
            }
        } else if pkt.seq > rx.epsn {
            // One NAK per gap; a new one only when the sender has visibly gone back since and lost again.
            let again = pkt.seq <= rx.oos_last;
            rx.oos_last = pkt.seq;
            if rx.nak_pending && !again {
                None
            } else {
                rx.nak_pending = true;
                Some((PacketKind::Nak, rx.epsn))
            }
        } else if last_of_msg {
            Some((PacketKind::Ack, rx.epsn - 1))
        } else {
            None
        };
        let Some((kind, seq)) = reply else {
            return;
        };
        let msn = (rx.epsn / n) as u32;
        let (from, to) = (fl.dst, fl.src);
        let syndrome = if kind == PacketKind::Nak {
            fl.truth.naks_sent += 1;
            AethKind::Nak(NakCode::PsnSequenceError).syndrome()
        } else {
            fl.truth.acks_sent += 1;
            AethKind::Ack { credits: 31 }.syndrome()
        };
        let mut p = self.make(kind, f, from, to, seq, Opcode::RC_ACKNOWLEDGE, 0, prio, 2);
        p.msn = msn;
        p.syndrome = syndrome;
        self.enqueue_host(from, p);
    }

    fn on_ack(&mut self, f: usize, pkt: &Packet) {
        let now = self.now;
        let fl = &mut self.flows[f];
        let tx = &mut fl.tx;
        let progressed;
        if pkt.kind == PacketKind::Ack {
            progressed = pkt.seq + 1 > tx.una;
            if progressed {
                tx.una = pkt.seq + 1;
            }
        } else {
            progressed = pkt.seq > tx.una;
            tx.una = tx.una.max(pkt.seq);
            if tx.next > pkt.seq {
                tx.next = pkt.seq;
                let psn = fl.psn(pkt.seq);
                fl.truth.go_back_n.push(GoBack {
                    t_ns: now / PS_PER_NS,
                    from_psn: psn,
                    cause: "nak",
                });
            }
        }
        let tx = &mut fl.tx;
        if tx.next < tx.una {
            tx.next = tx.una;
        }
        fl.truth.messages_completed = tx.una / fl.pkts_per_msg;
        if progressed || pkt.kind == PacketKind::Nak {
            self.arm_rto(f);
        }
        self.try_send(f);
    }

    /// Starts (or restarts) the flow's transport timer when `armed`, else stops it.
    fn set_timer(&mut self, f: usize, armed: bool) {
        let timeout = self.sc.flows[f].timeout_ns * PS_PER_NS;
        let now = self.now;
        let t = &mut self.flows[f].timer;
        if !armed {
            t.deadline = NEVER;
            return;
        }
        t.deadline = now + timeout;
        if t.pending == NEVER {
            t.pending = t.deadline;
            let at = t.deadline;
            self.at(at, Ev::Rto { flow: f });
        }
    }

    fn arm_rto(&mut self, f: usize) {
        let tx = &self.flows[f].tx;
        let armed = tx.una < tx.max_sent;
        self.set_timer(f, armed);
    }

    fn rto(&mut self, f: usize) {
        let now = self.now;
        let t = &mut self.flows[f].timer;
        t.pending = NEVER;
        if t.deadline == NEVER {
            return;
        }
        if now < t.deadline {
            t.pending = t.deadline;
            let at = t.deadline;
            self.at(at, Ev::Rto { flow: f });
            return;
        }
        t.deadline = NEVER;
        if self.flows[f].op == Op::Read {
            let fl = &mut self.flows[f];
            if fl.rx.reads_out == 0 {
                return;
            }
            let from = fl.rx.epsn;
            let psn = fl.psn(from);
            fl.truth.go_back_n.push(GoBack {
                t_ns: now / PS_PER_NS,
                from_psn: psn,
                cause: "timeout",
            });
            self.send_read_request(f, from);
            return;
        }
        let fl = &mut self.flows[f];
        let tx = &mut fl.tx;
        if tx.una >= tx.max_sent {
            return;
        }
        tx.next = tx.una;
        let una = tx.una;
        let psn = fl.psn(una);
        fl.truth.go_back_n.push(GoBack {
            t_ns: now / PS_PER_NS,
            from_psn: psn,
            cause: "timeout",
        });
        self.arm_rto(f);
        self.try_send(f);
    }

    /// READ requester: asks for messages while fewer than `max_reads` are outstanding.
    fn issue_reads(&mut self, f: usize) {
        let spec = &self.sc.flows[f];
        let (max_reads, stop, messages) = (spec.max_reads, spec.stop_ns * PS_PER_NS, spec.messages);
        loop {
            let fl = &self.flows[f];
            if fl.rx.reads_out >= max_reads
                || self.now >= stop
                || (messages > 0 && fl.rx.next_msg >= messages)
            {
                return;
            }
            let seq = fl.rx.next_msg * fl.pkts_per_msg;
            let fl = &mut self.flows[f];
            fl.rx.next_msg += 1;
            fl.rx.reads_out += 1;
            self.send_read_request(f, seq);
        }
    }

    fn send_read_request(&mut self, f: usize, seq: u64) {
        let prio = self.sc.flows[f].prio;
        let (from, to) = (self.flows[f].src, self.flows[f].dst);
        let p = self.make(
            PacketKind::ReadReq,
            f,
            from,
            to,
            seq,
            Opcode::RC_RDMA_READ_REQUEST,
            0,
            prio,
            2,
        );
        self.enqueue_host(from, p);
        self.set_timer(f, true);
    }

    fn read_response(&mut self, f: usize, pkt: &Packet) {
        let now = self.now;
        let fl = &mut self.flows[f];
        let n = fl.pkts_per_msg;
        let rx = &mut fl.rx;
        if pkt.seq == rx.epsn {
            rx.epsn += 1;
            rx.nak_pending = false;
            if rx.epsn.is_multiple_of(n) {
                rx.reads_out = rx.reads_out.saturating_sub(1);
                fl.truth.messages_completed += 1;
                self.issue_reads(f);
            }
            let armed = self.flows[f].rx.reads_out > 0;
            self.set_timer(f, armed);
        } else if pkt.seq > rx.epsn && !rx.nak_pending {
            rx.nak_pending = true;
            let from = rx.epsn;
            let psn = fl.psn(from);
            fl.truth.go_back_n.push(GoBack {
                t_ns: now / PS_PER_NS,
                from_psn: psn,
                cause: "read_gap",
            });
            self.send_read_request(f, from);
        }
    }

    /// Hands the flow's next data packet to its NIC when the window, the request limit and the pacer allow.
    fn try_send(&mut self, f: usize) {
        let now = self.now;
        let now_ns = now / PS_PER_NS;
        let spec = &self.sc.flows[f];
        if self.flows[f].op == Op::Read && now >= spec.start_ns * PS_PER_NS {
            let fl = &self.flows[f];
            if fl.rx.next_msg == 0 && fl.rx.reads_out == 0 {
                self.issue_reads(f);
            }
        }
        let spec = &self.sc.flows[f];
        let (mtu, msg_bytes, window, stop, prio) = (
            u64::from(spec.mtu),
            u64::from(spec.message_bytes),
            u64::from(spec.window_packets),
            spec.stop_ns * PS_PER_NS,
            spec.prio,
        );
        let fl = &mut self.flows[f];
        let n = fl.pkts_per_msg;
        let receiver = fl.data_receiver();
        {
            let truth = &mut fl.truth;
            let mut push = |e: Event| record_rp(truth, e);
            fl.tx.rp.advance(now_ns, &mut push);
        }
        let tx = &mut fl.tx;
        if tx.in_nic || tx.next >= tx.limit {
            return;
        }
        if fl.op != Op::Read && tx.next - tx.una >= window {
            return;
        }
        let new_data = tx.next >= tx.max_sent;
        // A READ responder serves whatever was asked; only the requester stops asking.
        if fl.op != Op::Read && new_data && tx.next.is_multiple_of(n) && now >= stop {
            return;
        }
        // Pacing: the gap after the previous packet is its wire size at the current rate.
        let rc = tx.rp.rc_mbps().max(1e-3);
        let gap = (tx.last_bits as f64 * 1e6 / rc) as u64 + tx.jitter;
        tx.pacer_at = tx.last_tx + gap;
        if now < tx.pacer_at {
            let mut wake = tx.pacer_at;
            // Rc may rise before the gap ends; look again at the model's next event, but not more often than every
            // RP_POLL_PS, since most of those events are alpha ticks that leave Rc alone.
            if let Some(t) = tx.rp.next_event_ns() {
                wake = wake.min((t * PS_PER_NS).max(now + RP_POLL_PS));
            }
            if tx.wake_at > wake || tx.wake_at <= now {
                tx.wake_at = wake;
                self.at(wake, Ev::FlowWake { flow: f });
            }
            return;
        }
        let seq = tx.next;
        let k = seq % n;
        let payload = if k + 1 == n {
            (msg_bytes - k * mtu) as u32
        } else {
            mtu as u32
        };
        let opcode = match (fl.op, n == 1, k == 0, k + 1 == n) {
            (Op::Write, true, _, _) => Opcode::RC_RDMA_WRITE_ONLY,
            (Op::Write, _, true, _) => Opcode::RC_RDMA_WRITE_FIRST,
            (Op::Write, _, _, true) => Opcode::RC_RDMA_WRITE_LAST,
            (Op::Write, _, _, _) => Opcode::RC_RDMA_WRITE_MIDDLE,
            (Op::Send, true, _, _) => Opcode::RC_SEND_ONLY,
            (Op::Send, _, true, _) => Opcode::RC_SEND_FIRST,
            (Op::Send, _, _, true) => Opcode::RC_SEND_LAST,
            (Op::Send, _, _, _) => Opcode::RC_SEND_MIDDLE,
            (Op::Read, true, _, _) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (Op::Read, _, true, _) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (Op::Read, _, _, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
            (Op::Read, _, _, _) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        };
        let (from, to) = (tx.host, receiver);
        tx.next += 1;
        let retx = !new_data;
        tx.max_sent = tx.max_sent.max(tx.next);
        tx.in_nic = true;
        fl.truth.data_packets_sent += 1;
        fl.truth.data_payload_bytes_sent += u64::from(payload);
        if retx {
            fl.truth.retransmitted_packets += 1;
        }
        let mut p = self.make(PacketKind::Data, f, from, to, seq, opcode, payload, prio, 2);
        // Responses carry the MSN of the message they answer.
        p.msn = ((seq / n + 1) & PSN_MASK) as u32;
        let jitter = self.sc.hosts[from].jitter_ns * PS_PER_NS;
        let jitter = if jitter > 0 {
            self.rng.below(jitter + 1)
        } else {
            0
        };
        let tx = &mut self.flows[f].tx;
        tx.jitter = jitter;
        tx.last_tx = now;
        tx.last_bits = (u64::from(p.len) + WIRE_OVERHEAD) * 8;
        let arm = self.flows[f].op != Op::Read && self.flows[f].timer.deadline == NEVER;
        self.enqueue_host(from, p);
        if arm {
            self.arm_rto(f);
        }
    }
}

fn record_rp(truth: &mut FlowTruth, e: Event) {
    if e.kind == EventKind::Cut {
        truth.cuts += 1;
    }
    truth.rp.push(RpPoint {
        t_ns: e.t_ns,
        kind: e.kind,
        rc_mbps: e.rc_mbps,
        rt_mbps: e.rt_mbps,
        alpha: e.alpha,
    });
}

impl<W: Write> std::fmt::Debug for World<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now_ps", &self.now)
            .field("flows", &self.flows.len())
            .finish()
    }
}
