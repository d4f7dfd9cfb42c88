//! The discrete-event core: the world's state, its event heap and the loop that runs it.
//!
//! Time is integer picoseconds, so serialization times at 25/100/400 Gb/s are exact and pacing does not drift;
//! the DCQCN model and the capture see nanoseconds. Events at the same instant run in the order they were
//! scheduled (the heap key is `(time, sequence number)`), which with a seeded generator makes a run a pure
//! function of its scenario.
//!
//! Packets are small structs that say what a frame means (kind, flow, linear sequence number, priority, ECN);
//! bytes are only built for frames a tap records, which keeps the simulator fast.
//!
//! The world's rooms, each an `impl World` of its own: [`setup`] builds the topology, routes and flows from the
//! scenario; [`port`] serializes frames onto links; [`pfc`] sends and obeys pause frames; [`switch`] forwards,
//! buffers and marks (the CP); [`transport`] is the RC protocol of the NICs and their notification point;
//! [`sender`] paces each flow's data by its reaction point; [`tap`] writes what the mirrors see; [`finish`]
//! turns the end state into the truth. Beside them, plain helpers: [`flow`] holds a queue pair's two ends,
//! [`hops`] follows tapped packets across switches, [`addr`] says who has which address, and [`knobs`] makes
//! the `KNOB` block each capture file starts with.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::io::Write;

use roce_capture::write::PcapngWriter;

use super::scenario::Scenario;
use super::truth::*;
use super::{LogEntry, LogKind, PacketKind, SimError};
use crate::corpus::Rng;

mod addr;
mod finish;
mod flow;
mod hops;
mod knobs;
mod pfc;
mod port;
mod sender;
mod setup;
mod switch;
mod tap;
mod transport;

use addr::{fmt_ip, host_ip, host_mac, port_mac};
use flow::Flow;
use pfc::XOFF_QUANTA;
use port::Port;

const NEVER: u64 = u64::MAX;
const PS_PER_NS: u64 = 1_000;
/// Preamble, start delimiter, FCS and inter-frame gap: what a frame costs on the wire beyond its captured bytes.
const WIRE_OVERHEAD: u64 = 24;
const PSN_MASK: u64 = 0x00ff_ffff;

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

/// Everything a test may want to know about a run besides the truth.
#[derive(Debug, Default)]
pub struct RunInternals {
    /// Every packet movement, when asked for.
    pub log: Vec<LogEntry>,
    /// Ids and lengths of packets still inside the network when the run ended (queued, on a wire, or in a NIC).
    pub in_network: Vec<(u64, u32)>,
    /// Per switch: the shared-buffer size and the most it ever held.
    pub buffer_peak: Vec<(String, u64, u64)>,
    /// Per port (the log's `port`): the node it belongs to, so a test can check where a packet is.
    pub port_node: Vec<usize>,
    /// Per port: the port at the other end of its link, so a test can check that a packet arrived where it
    /// was sent.
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
    /// One writer per capture file (none when nothing is written).
    caps: Vec<PcapngWriter<W>>,
    /// Per tap: its capture file and its interface in that file.
    tap_iface: Vec<(usize, u32)>,
    tap_frames: Vec<u64>,
    tap_alone: Vec<u64>,
    hops: Vec<hops::HopAcc>,
    /// Per packet a tap has recorded (by id), what it met since: kept beside the packets rather than in them,
    /// so that runs without taps do not carry it through the event heap.
    trails: std::collections::HashMap<u64, hops::Trail>,
    snaplen: u32,
    frame_buf: Vec<u8>,
    io_error: Option<std::io::Error>,
}

impl<W: Write> World<'_, W> {
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

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

impl<W: Write> std::fmt::Debug for World<'_, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("now_ps", &self.now)
            .field("flows", &self.flows.len())
            .finish()
    }
}
