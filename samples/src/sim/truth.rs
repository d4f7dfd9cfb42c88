//! What really happened in a run: written beside each capture as `NAME.truth.json` (documented in
//! samples/README.md), so that the analysis of the capture can be checked against it.
//!
//! Times are nanoseconds of true time since the start of the run, which is also the main capture's epoch (a
//! `[[file]]` stamps by its own clock, see [`FileTruth`]). Each field is what some check of the analysis needs:
//! the field's comment says what it holds; samples/README.md says how to read them together.

use super::rp::RpEvent;
use serde::Serialize;

/// Everything a run knows that its captures do not say.
#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    /// The scenario's name, which names its files.
    pub scenario: String,
    /// Its one-line description.
    pub description: String,
    /// The codes of the findings (docs/report.md) that `roce-analyzer report` of the scenario's capture files,
    /// with default flags, must raise: what happened, said by the analysis, and nothing it did not do.
    pub findings: Vec<String>,
    /// The seed of this run (`roce-sim --seed` may override the scenario's).
    pub seed: u64,
    /// How long the run simulated.
    pub duration_ns: u64,
    /// The hosts, to turn the capture's addresses back into names.
    pub hosts: Vec<HostTruth>,
    /// The links, for delays and speeds a check must account for.
    pub links: Vec<LinkTruth>,
    /// The capture files and their clocks.
    pub files: Vec<FileTruth>,
    /// The taps: which link each mirrors, and into which file and interface.
    pub taps: Vec<TapTruth>,
    /// What packets met between two taps.
    pub hops: Vec<HopTruth>,
    /// Each switch queue as its downstream tap measures it.
    pub tap_queues: Vec<TapQueueTruth>,
    /// What each flow's two ends did, the reaction point included.
    pub flows: Vec<FlowTruth>,
    /// Every egress queue's depth over time.
    pub queues: Vec<QueueTruth>,
    /// Every time a transmitter was held by PFC.
    pub pauses: Vec<PauseTruth>,
    /// PFC frames sent, per port and priority.
    pub pfc_frames: Vec<PfcSent>,
    /// Every packet a switch dropped.
    pub drops: Vec<DropTruth>,
    /// Counts over the whole run.
    pub totals: Totals,
}

/// A host as the capture shows it.
#[derive(Debug, Clone, Serialize)]
pub struct HostTruth {
    /// Its name in the scenario.
    pub name: String,
    /// Its address, as in the capture.
    pub ip: String,
    /// Its MAC, which also sends its PFC frames.
    pub mac: String,
    /// Whether its reaction point is on.
    pub rp: bool,
    /// Whether its notification point is on.
    pub np: bool,
}

/// A link between two nodes.
#[derive(Debug, Clone, Serialize)]
pub struct LinkTruth {
    /// One end's name.
    pub a: String,
    /// The other end's name.
    pub b: String,
    /// Its speed, which turns pause quanta and queue delays into time and bytes.
    pub gbps: u32,
    /// One-way propagation, which shifts what a tap sees from what a node does.
    pub delay_ns: u64,
}

/// A capture file, as one capturing host writes it: its taps share its clock.
#[derive(Debug, Clone, Serialize)]
pub struct FileTruth {
    /// The file's name, `NAME.pcapng` or `NAME.<file>.pcapng`.
    pub name: String,
    /// The host's clock reads `t + clock_offset_ns + t × clock_drift_ppm / 10^6` at true time `t` (ns, rounded);
    /// the truth's times are true times, which are the main file's.
    pub clock_offset_ns: u64,
    /// See `clock_offset_ns`.
    pub clock_drift_ppm: f64,
    /// Its taps, in interface order.
    pub taps: Vec<String>,
}

/// A mirror of one link, both directions.
#[derive(Debug, Clone, Serialize)]
pub struct TapTruth {
    /// Its name, which is also its pcapng interface's name.
    pub name: String,
    /// The capture file it writes to, and its pcapng interface id in that file.
    pub file: String,
    /// See `file`.
    pub interface: u32,
    /// The link's ends.
    pub a: String,
    /// See `a`.
    pub b: String,
    /// Frames it recorded.
    pub frames: u64,
    /// Frames of packets that no other tap recorded (delivered or dropped): a matcher must leave them unmatched.
    pub alone: u64,
}

/// p50, p99 and max of a set of values, nearest rank (the value at rank ⌈p·n/100⌉ of the sorted values).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    /// The median.
    pub p50: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// The largest value.
    pub max: u64,
}

impl Percentiles {
    /// The percentiles of `v` (all zero when empty).
    pub fn of(mut v: Vec<u64>) -> Percentiles {
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_unstable();
        let rank = |p: usize| v[(p * v.len()).div_ceil(100).max(1) - 1];
        Percentiles {
            p50: rank(50),
            p99: rank(99),
            max: v[v.len() - 1],
        }
    }
}

/// The packets of one priority that one tap recorded and then the next tap on their way recorded again: one hop.
#[derive(Debug, Clone, Serialize)]
pub struct HopTruth {
    /// The taps, by name, in the order the packets passed them.
    pub from: String,
    /// See `from`.
    pub to: String,
    /// The packets' priority (VLAN PCP): each priority has its own egress queue.
    pub prio: u8,
    /// The switch between the two taps, when every packet crossed exactly that one; null otherwise (then
    /// `queue_bytes` and `marking` are null too).
    pub switches: Option<Vec<String>>,
    /// Packets that passed both taps: what a matcher must match.
    pub packets: u64,
    /// The least `t_to − t_from` over the packets, each time read on its own tap's clock: offset plus base
    /// transit, what `hops` calls `clock_offset_ns` (may be negative).
    pub clock_offset_ns: i64,
    /// `t_to − t_from` on the true clock.
    pub transit_ns: Percentiles,
    /// What the packets found in the switch's queue (its waits summed over the switches when there are several).
    #[serde(flatten)]
    pub queue: QueueStats,
}

/// What the packets found in a switch queue.
#[derive(Debug, Clone, Serialize)]
pub struct QueueStats {
    /// Time spent waiting in the switch's egress queue (from being queued to starting to leave).
    pub queue_delay_ns: Percentiles,
    /// Bytes queued ahead of each packet in its egress queue when it arrived (frame bytes, the switch's own count,
    /// without the frame already on the wire); null unless every packet crossed the same single switch.
    pub queue_bytes: Option<Percentiles>,
    /// The switch's marking; null when it does not mark (or as `queue_bytes`).
    pub marking: Option<MarkingTruth>,
}

/// One switch egress queue as a downstream tap measures it: the packets of one priority that the tap recorded
/// after an upstream tap had, leaving `switch` onto the tapped link, all upstream taps together (what `hops`
/// reports per queue). Its delays and depths are that queue's alone.
#[derive(Debug, Clone, Serialize)]
pub struct TapQueueTruth {
    /// The downstream tap.
    pub tap: String,
    /// The packets' priority.
    pub prio: u8,
    /// The upstream taps whose packets it measures.
    pub from: Vec<String>,
    /// The switch whose egress queue onto the tapped link it is.
    pub switch: String,
    /// Whether every packet crossed that switch alone since its upstream tap; if not, a delay measured between
    /// the taps holds other queues' waits too.
    pub one_switch: bool,
    /// The speed of the tapped link, which drains the queue.
    pub drain_gbps: u32,
    /// Packets measured: what a matcher must match into this queue.
    pub packets: u64,
    /// What they found in the queue.
    #[serde(flatten)]
    pub queue: QueueStats,
}

/// A switch queue's ECN marking: the configured curve and what it did.
#[derive(Debug, Clone, Serialize)]
pub struct MarkingTruth {
    /// `enqueue` (the depth ahead of the packet when it arrived) or `dequeue` (the depth behind it when it left).
    pub at: &'static str,
    /// The switch's configured curve: what a fit must find.
    pub kmin_bytes: u64,
    /// See `kmin_bytes`.
    pub kmax_bytes: u64,
    /// See `kmin_bytes`.
    pub pmax: f64,
    /// Packets that arrived ECT (ECT(0) or ECT(1)): the only ones a marking tells about.
    pub ect_in: u64,
    /// Those of them that left CE.
    pub marked: u64,
    /// ECT packets whose compared depth lay strictly between Kmin and Kmax: the ones that reveal the curve.
    pub between: u64,
    /// The ECT packets by compared depth, in bins of `bin_bytes` (`depth_bytes` is a bin's lower edge).
    pub bin_bytes: u64,
    /// See `bin_bytes`; bins without packets are left out.
    pub bins: Vec<MarkingBin>,
}

/// ECT packets whose compared queue depth fell in one bin: the marked share per bin traces the curve.
#[derive(Debug, Clone, Serialize)]
pub struct MarkingBin {
    /// The bin's lower edge.
    pub depth_bytes: u64,
    /// ECT packets in the bin.
    pub ect_in: u64,
    /// Those of them that left CE.
    pub marked: u64,
}

/// A reaction-point event is written as `[t_ns, kind, rc_mbps, rt_mbps, alpha, T, BC]`, because a flow can have
/// thousands and one object each would dwarf the capture; rates to the kb/s and alpha to 10^-6 keep the files
/// stable to read and small.
impl Serialize for RpEvent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let mut t = s.serialize_tuple(7)?;
        t.serialize_element(&(self.t_ps / 1_000))?;
        t.serialize_element(&self.kind)?;
        t.serialize_element(&round3(self.rc_mbps))?;
        t.serialize_element(&round3(self.rt_mbps))?;
        t.serialize_element(&((self.alpha * 1e6).round() / 1e6))?;
        t.serialize_element(&self.timer_count)?;
        t.serialize_element(&self.byte_count)?;
        t.end()
    }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// A go-back-N episode: the sender rewound to `from_psn`.
#[derive(Debug, Clone, Serialize)]
pub struct GoBack {
    /// When the sender decided to go back.
    pub t_ns: u64,
    /// The wire PSN it went back to.
    pub from_psn: u32,
    /// `nak` (a NAK sequence error arrived), `timeout` (the transport timer expired) or `read_gap` (a READ
    /// requester saw a response PSN gap and asked again).
    pub cause: &'static str,
}

/// One RC queue pair: what both its ends did.
#[derive(Debug, Clone, Serialize)]
pub struct FlowTruth {
    /// Its name in the scenario.
    pub name: String,
    /// `write`, `send` or `read`.
    pub op: &'static str,
    /// The requester's host name.
    pub src: String,
    /// The responder's host name.
    pub dst: String,
    /// The requester's address.
    pub src_ip: String,
    /// The responder's address.
    pub dst_ip: String,
    /// The BTH DestQP of frames to the requester: the QP its CNPs name when it sends the data.
    pub requester_qp: u32,
    /// The BTH DestQP of frames to the responder.
    pub responder_qp: u32,
    /// The PSN of its first data packet (random, as a NIC's would be).
    pub start_psn: u32,
    /// The path MTU.
    pub mtu: u32,
    /// The priority of its data, ACKs and requests.
    pub prio: u8,
    /// Their DSCP.
    pub dscp: u8,
    /// Which end sends the data and therefore runs the reaction point: `requester` (WRITE, SEND) or
    /// `responder` (READ).
    pub data_sender: &'static str,
    /// Data packets put on the wire by the data sender, retransmissions included.
    pub data_packets_sent: u64,
    /// Their payload bytes: the throughput the flow really had.
    pub data_payload_bytes_sent: u64,
    /// Data packets sent again after going back.
    pub retransmitted_packets: u64,
    /// Every time the sender went back.
    pub go_back_n: Vec<GoBack>,
    /// Messages the requester saw completed.
    pub messages_completed: u64,
    /// NAKs the data receiver sent.
    pub naks_sent: u64,
    /// ACKs the data receiver sent.
    pub acks_sent: u64,
    /// CE-marked data packets the data receiver got.
    pub ce_received: u64,
    /// CNPs the data receiver sent for them.
    pub cnps_sent: u64,
    /// CNPs that reached the data sender (the rest are in flight at the end).
    pub cnps_received: u64,
    /// CNPs that reached a sender whose reaction point is switched off.
    pub cnps_ignored: u64,
    /// Whether the data sender's reaction point is on.
    pub rp_enabled: bool,
    /// The data sender's link speed: its reaction point's start and, unless `rpg_max_rate` says less, maximum.
    pub line_mbps: f64,
    /// Every reaction-point event but alpha updates, `[t_ns, kind, rc_mbps, rt_mbps, alpha, T, BC]`.
    pub rp: Vec<RpEvent>,
    /// The same reaction point fed the same CNPs, its byte counter moving at Rc all the time: what a replay that
    /// assumes a backlogged sender computes. Where it parts from `rp`, the sender was not backlogged.
    pub rp_backlogged: Vec<RpEvent>,
    /// Cuts in `rp`.
    pub cuts: u64,
}

/// Depth of one egress queue, sampled every `queue_sample_ns` while it is not empty (plus the sample at which it
/// became empty again): `[t_ns, bytes]` pairs.
#[derive(Debug, Clone, Serialize)]
pub struct QueueTruth {
    /// The switch.
    pub switch: String,
    /// The node at the other end of the egress port.
    pub port: String,
    /// The queue's priority.
    pub prio: u8,
    /// The deepest sample.
    pub max_bytes: u64,
    /// The samples, `[t_ns, bytes]`.
    pub samples: Vec<[u64; 2]>,
}

/// A transmitter held by PFC: `node`'s port towards `port` could not send `prio` from `start_ns` to `end_ns`.
#[derive(Debug, Clone, Serialize)]
pub struct PauseTruth {
    /// The node whose transmitter was held.
    pub node: String,
    /// The node its port faces (who sent the PFC).
    pub port: String,
    /// The priority held.
    pub prio: u8,
    /// When the pause began (the PFC frame arrived).
    pub start_ns: u64,
    /// When it ended: an XON, or the quanta ran out.
    pub end_ns: u64,
}

/// PFC frames a node sent on one port for one priority.
#[derive(Debug, Clone, Serialize)]
pub struct PfcSent {
    /// The node that sent them.
    pub node: String,
    /// The node its port faces.
    pub port: String,
    /// The priority.
    pub prio: u8,
    /// XOFF frames (quanta 65535), refreshes included.
    pub xoff: u64,
    /// XON frames (quanta 0).
    pub xon: u64,
}

/// A packet a switch dropped: loss between two taps, or a gap the receiver will see.
#[derive(Debug, Clone, Serialize)]
pub struct DropTruth {
    /// When.
    pub t_ns: u64,
    /// Where.
    pub switch: String,
    /// Egress port (the node at its other end).
    pub port: String,
    /// Its priority.
    pub prio: u8,
    /// Its flow's name.
    pub flow: String,
    /// What it was (`data`, `ack`, `cnp`, ...).
    pub kind: &'static str,
    /// Its wire PSN (0 for a CNP).
    pub psn: u32,
    /// `tail_drop` (lossy priority over `queue_limit_bytes`), `buffer_full` (the shared buffer had no room) or
    /// `no_route` (the destination is not connected to this switch).
    pub reason: &'static str,
}

/// Counts over the whole run, for sanity checks and the simulator's speed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Frames serialized onto links (each hop counts once).
    pub frames_transmitted: u64,
    /// Packets made by hosts and ports.
    pub packets_created: u64,
    /// Packets a host received.
    pub packets_delivered: u64,
    /// Packets a switch dropped.
    pub packets_dropped: u64,
    /// Frames the taps recorded, over all capture files.
    pub captured_frames: u64,
    /// CE marks the switches made.
    pub ce_marked: u64,
    /// Events the simulator ran.
    pub events: u64,
}
