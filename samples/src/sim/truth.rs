//! What really happened in a run: written beside each capture as `NAME.truth.json` (documented in
//! samples/README.md), so that the analysis of the capture can be checked against it.
//!
//! Times are nanoseconds since the start of the run, which is also the capture's epoch.

use super::rp::RpEvent;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    pub scenario: String,
    pub description: String,
    pub seed: u64,
    pub duration_ns: u64,
    pub hosts: Vec<HostTruth>,
    pub links: Vec<LinkTruth>,
    pub files: Vec<FileTruth>,
    pub taps: Vec<TapTruth>,
    pub hops: Vec<HopTruth>,
    pub tap_queues: Vec<TapQueueTruth>,
    pub flows: Vec<FlowTruth>,
    pub queues: Vec<QueueTruth>,
    pub pauses: Vec<PauseTruth>,
    pub pfc_frames: Vec<PfcSent>,
    pub drops: Vec<DropTruth>,
    pub totals: Totals,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostTruth {
    pub name: String,
    pub ip: String,
    pub mac: String,
    pub rp: bool,
    pub np: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LinkTruth {
    pub a: String,
    pub b: String,
    pub gbps: u32,
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
    pub clock_drift_ppm: f64,
    /// Its taps, in interface order.
    pub taps: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TapTruth {
    pub name: String,
    /// The capture file it writes to, and its pcapng interface id in that file.
    pub file: String,
    pub interface: u32,
    pub a: String,
    pub b: String,
    /// Frames it recorded.
    pub frames: u64,
    /// Frames of packets that no other tap recorded (delivered or dropped): a matcher must leave them unmatched.
    pub alone: u64,
}

/// p50, p99 and max of a set of values, nearest rank (the value at rank ⌈p·n/100⌉ of the sorted values).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
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
    pub to: String,
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
    /// The downstream tap, and the upstream taps whose packets it measures.
    pub tap: String,
    pub prio: u8,
    pub from: Vec<String>,
    /// The switch whose egress queue onto the tapped link it is.
    pub switch: String,
    /// Whether every packet crossed that switch alone since its upstream tap; if not, a delay measured between
    /// the taps holds other queues' waits too.
    pub one_switch: bool,
    /// The speed of the tapped link, which drains the queue.
    pub drain_gbps: u32,
    pub packets: u64,
    #[serde(flatten)]
    pub queue: QueueStats,
}

/// A switch queue's ECN marking: the configured curve and what it did.
#[derive(Debug, Clone, Serialize)]
pub struct MarkingTruth {
    /// `enqueue` (the depth ahead of the packet when it arrived) or `dequeue` (the depth behind it when it left).
    pub at: &'static str,
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub pmax: f64,
    /// Packets that arrived ECT (ECT(0) or ECT(1)), and those of them that left CE.
    pub ect_in: u64,
    pub marked: u64,
    /// ECT packets whose compared depth lay strictly between Kmin and Kmax: the ones that reveal the curve.
    pub between: u64,
    /// The ECT packets by compared depth, in bins of `bin_bytes` (`depth_bytes` is a bin's lower edge).
    pub bin_bytes: u64,
    pub bins: Vec<MarkingBin>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MarkingBin {
    pub depth_bytes: u64,
    pub ect_in: u64,
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
    pub t_ns: u64,
    pub from_psn: u32,
    /// `nak` (a NAK sequence error arrived), `timeout` (the transport timer expired) or `read_gap` (a READ
    /// requester saw a response PSN gap and asked again).
    pub cause: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct FlowTruth {
    pub name: String,
    pub op: &'static str,
    pub src: String,
    pub dst: String,
    pub src_ip: String,
    pub dst_ip: String,
    pub requester_qp: u32,
    pub responder_qp: u32,
    pub start_psn: u32,
    pub mtu: u32,
    pub prio: u8,
    pub dscp: u8,
    /// Which end sends the data and therefore runs the reaction point: `requester` (WRITE, SEND) or
    /// `responder` (READ).
    pub data_sender: &'static str,
    /// Data packets put on the wire by the data sender, retransmissions included.
    pub data_packets_sent: u64,
    pub data_payload_bytes_sent: u64,
    pub retransmitted_packets: u64,
    pub go_back_n: Vec<GoBack>,
    pub messages_completed: u64,
    pub naks_sent: u64,
    pub acks_sent: u64,
    pub ce_received: u64,
    pub cnps_sent: u64,
    pub cnps_received: u64,
    /// CNPs that reached a sender whose reaction point is switched off.
    pub cnps_ignored: u64,
    pub rp_enabled: bool,
    pub line_mbps: f64,
    /// Every reaction-point event but alpha updates, `[t_ns, kind, rc_mbps, rt_mbps, alpha, T, BC]`.
    pub rp: Vec<RpEvent>,
    /// The same reaction point fed the same CNPs, its byte counter moving at Rc all the time: what a replay that
    /// assumes a backlogged sender computes. Where it parts from `rp`, the sender was not backlogged.
    pub rp_backlogged: Vec<RpEvent>,
    pub cuts: u64,
}

/// Depth of one egress queue, sampled every `queue_sample_ns` while it is not empty (plus the sample at which it
/// became empty again): `[t_ns, bytes]` pairs.
#[derive(Debug, Clone, Serialize)]
pub struct QueueTruth {
    pub switch: String,
    /// The node at the other end of the egress port.
    pub port: String,
    pub prio: u8,
    pub max_bytes: u64,
    pub samples: Vec<[u64; 2]>,
}

/// A transmitter held by PFC: `node`'s port towards `port` could not send `prio` from `start_ns` to `end_ns`.
#[derive(Debug, Clone, Serialize)]
pub struct PauseTruth {
    pub node: String,
    pub port: String,
    pub prio: u8,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// PFC frames a node sent on one port for one priority.
#[derive(Debug, Clone, Serialize)]
pub struct PfcSent {
    pub node: String,
    pub port: String,
    pub prio: u8,
    pub xoff: u64,
    pub xon: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DropTruth {
    pub t_ns: u64,
    pub switch: String,
    /// Egress port (the node at its other end).
    pub port: String,
    pub prio: u8,
    pub flow: String,
    pub kind: &'static str,
    pub psn: u32,
    /// `tail_drop` (lossy priority over `queue_limit_bytes`), `buffer_full` (the shared buffer had no room) or
    /// `no_route` (the destination is not connected to this switch).
    pub reason: &'static str,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Frames serialized onto links (each hop counts once).
    pub frames_transmitted: u64,
    pub packets_created: u64,
    pub packets_delivered: u64,
    pub packets_dropped: u64,
    pub captured_frames: u64,
    pub ce_marked: u64,
    pub events: u64,
}
