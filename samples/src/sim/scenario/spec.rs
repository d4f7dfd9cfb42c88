//! The checked scenario: what the simulator runs. Names are resolved to indices, times are in the units the
//! engine counts, and every value is in its range, so the engine trusts what it reads here.

use crate::sim::rp::RpKnobs;

/// What a flow's requester asks for; it decides which end sends the data and so runs the reaction point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// RDMA WRITE: the requester sends the data.
    Write,
    /// SEND: the requester sends the data.
    Send,
    /// RDMA READ: the responder sends the data, as READ responses.
    Read,
}

impl Op {
    /// The name as scenario and truth files write it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Send => "send",
            Op::Read => "read",
        }
    }
}

/// Which queue depth a switch compares with its marking curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkAt {
    /// The bytes queued ahead of the packet when it arrives, as most switches do.
    Enqueue,
    /// The bytes queued behind the packet when it leaves, as the DCQCN paper recommends (the feedback then
    /// carries no queueing delay).
    Dequeue,
}

impl MarkAt {
    /// The name as scenario and truth files write it.
    pub fn name(self) -> &'static str {
        match self {
            MarkAt::Enqueue => "enqueue",
            MarkAt::Dequeue => "dequeue",
        }
    }

    /// Whether the marking decision is made when a packet is queued (else when it leaves).
    pub fn at_enqueue(self) -> bool {
        self == MarkAt::Enqueue
    }
}

/// A switch: CP marking, shared buffer, PFC thresholds per ingress port and priority. The keys are those of
/// samples/README.md, where each is explained.
#[derive(Debug, Clone)]
pub struct SwitchSpec {
    /// Names it in the truth.
    pub name: String,
    /// The shared buffer: a packet that does not fit is dropped whatever its priority.
    pub buffer_bytes: u64,
    /// Whether the switch marks CE at all.
    pub ecn: bool,
    /// The marking curve: probability 0 up to `kmin_bytes` of queue, rising to `pmax` at `kmax_bytes`, 1 above.
    pub kmin_bytes: u64,
    /// See `kmin_bytes`.
    pub kmax_bytes: u64,
    /// See `kmin_bytes`.
    pub pmax: f64,
    /// Bit n set: priority n is lossless (PFC); the others tail-drop at `queue_limit_bytes`.
    pub pfc_mask: u8,
    /// Bytes of a lossless priority from one ingress port in the buffer above which that port is paused.
    pub xoff_bytes: u64,
    /// ... and at or below which it is let go again.
    pub xon_bytes: u64,
    /// The tail-drop limit of a lossy priority's egress queue.
    pub queue_limit_bytes: u64,
    /// Which depth the marking compares.
    pub mark_at: MarkAt,
}

/// A host whose NIC sends PFC XOFF on its only port for a while, as a stuck receiver does.
#[derive(Debug, Clone, Copy)]
pub struct Storm {
    /// When the NIC starts pausing its link partner.
    pub start_ns: u64,
    /// When it sends XON and stops.
    pub end_ns: u64,
    /// The priority it pauses.
    pub prio: u8,
}

/// A host: one NIC with one port, its reaction and notification points and their knobs.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// Names it in the truth.
    pub name: String,
    /// Whether CNPs slow its senders (off: they are counted as ignored, as `rp_cnp_ignored` would).
    pub rp: bool,
    /// Whether it answers CE with CNPs.
    pub np: bool,
    /// The NP's pacing: at most one CNP per flow per this time (0: one per CE packet).
    pub min_time_between_cnps_ns: u64,
    /// Where its CNPs travel: DSCP ...
    pub cnp_dscp: u8,
    /// ... and priority (VLAN PCP).
    pub cnp_prio: u8,
    /// A pause storm from its NIC, if any.
    pub storm: Option<Storm>,
    /// Up to this much random extra gap after each data packet: real NICs are not phase-locked, and without it
    /// identical senders on a lossy queue always lose the same flow's packets.
    pub jitter_ns: u64,
}

/// A full-duplex link between two nodes (indices: hosts first, then switches).
#[derive(Debug, Clone)]
pub struct LinkSpec {
    /// One end.
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// Its speed in each direction.
    pub gbps: u32,
    /// One-way propagation delay.
    pub delay_ns: u64,
}

/// A flow: an RC queue pair between two hosts and the messages its requester posts.
#[derive(Debug, Clone)]
pub struct FlowSpec {
    /// Names it in the truth.
    pub name: String,
    /// The requester (host index).
    pub src: usize,
    /// The responder (host index).
    pub dst: usize,
    /// What the requester asks for.
    pub op: Op,
    /// Each message's size; the MTU splits it into packets.
    pub message_bytes: u32,
    /// 0: as many as fit before `stop_ns`.
    pub messages: u64,
    /// When the first message is posted.
    pub start_ns: u64,
    /// No message starts after this (in-flight ones complete).
    pub stop_ns: u64,
    /// The path MTU: payload bytes per packet.
    pub mtu: u32,
    /// The priority (VLAN PCP) of its data, ACKs and requests.
    pub prio: u8,
    /// Their DSCP.
    pub dscp: u8,
    /// ACK coalescing: one ACK per this many packets, and at every message end.
    pub ack_every: u32,
    /// Unacknowledged packets the requester allows before it waits.
    pub window_packets: u32,
    /// The transport timeout: without progress for this long the requester goes back.
    pub timeout_ns: u64,
    /// READ requests the requester keeps outstanding.
    pub max_reads: u32,
    /// An application-limited sender: message k is posted `k × post_interval_ps` after the start, and cannot be
    /// sent before (0: every message is there from the start, a backlogged sender).
    pub post_interval_ps: u64,
}

/// A mirror of one link, both directions, into one pcapng interface.
#[derive(Debug, Clone)]
pub struct TapSpec {
    /// The interface's name in the capture, and the tap's in the truth.
    pub name: String,
    /// Index into [`Scenario::links`].
    pub link: usize,
    /// Index into [`Scenario::files`].
    pub file: usize,
}

/// A capture file: the taps of one capturing host, which share its clock.
#[derive(Debug, Clone)]
pub struct FileSpec {
    /// Empty for the scenario's main file, `NAME.pcapng`; else the file is `NAME.<name>.pcapng`.
    pub name: String,
    /// The host's clock reads the true time plus this (ns) plus the drift.
    pub clock_offset_ns: u64,
    /// The host's clock runs this many ppm fast (negative: slow).
    pub clock_drift_ppm: f64,
}

impl FileSpec {
    /// What the capturing host's clock reads at true time `t_ns`.
    pub fn local_ns(&self, t_ns: u64) -> u64 {
        let drift = (t_ns as f64 * self.clock_drift_ppm * 1e-6).round() as i64;
        (t_ns + self.clock_offset_ns).saturating_add_signed(drift)
    }
}

/// A checked scenario. Nodes are numbered hosts first, then switches.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file's stem: names the outputs (`NAME.pcapng`, `NAME.truth.json`).
    pub name: String,
    /// One line, copied into the truth.
    pub description: String,
    /// The codes of the findings a report of the captures with default flags must raise, and no others;
    /// copied into the truth.
    pub expect_findings: Vec<String>,
    /// Seeds every random choice: the same scenario and seed give the same bytes.
    pub seed: u64,
    /// Simulated time; the run stops there, whatever is still in flight.
    pub duration_ns: u64,
    /// Bytes a tap keeps of each frame (`None`: whole frames).
    pub snaplen: Option<u32>,
    /// The VLAN of RoCE frames, whose PCP carries the priority.
    pub vlan: u16,
    /// How often the truth samples queue depths.
    pub queue_sample_ns: u64,
    /// The reaction point's knobs, the same for every host.
    pub knobs: RpKnobs,
    /// Hosts, numbered from 0.
    pub hosts: Vec<HostSpec>,
    /// Switches, numbered after the hosts.
    pub switches: Vec<SwitchSpec>,
    /// Links between them.
    pub links: Vec<LinkSpec>,
    /// The traffic.
    pub flows: Vec<FlowSpec>,
    /// The mirrors.
    pub taps: Vec<TapSpec>,
    /// The capture files; the first is the main one, `NAME.pcapng`, which is always written.
    pub files: Vec<FileSpec>,
}

impl Scenario {
    /// The name of capture file `i`: `NAME.pcapng` for the main one, `NAME.<file>.pcapng` for the others.
    pub fn file_name(&self, i: usize) -> String {
        match self.files.get(i) {
            Some(f) if !f.name.is_empty() => format!("{}.{}.pcapng", self.name, f.name),
            _ => format!("{}.pcapng", self.name),
        }
    }

    /// Node name by index (hosts first, then switches).
    pub fn node_name(&self, n: usize) -> &str {
        if let Some(h) = self.hosts.get(n) {
            &h.name
        } else {
            self.switches
                .get(n - self.hosts.len())
                .map_or("?", |s| s.name.as_str())
        }
    }
}
