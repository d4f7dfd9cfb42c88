//! Scenario files: the TOML a user writes, and the checked [`Scenario`] the simulator runs.
//!
//! Parsing is two steps, like ripgrep's low-level and high-level arguments: serde reads the file into plain
//! structs that refuse unknown keys, then `Scenario::build` resolves names, checks ranges and cross-references,
//! and fills in defaults. Every error names the key (and the table it sits in) so that a typo in a teaching file
//! is found without reading the simulator.

use std::path::Path;

use serde::Deserialize;
use thiserror::Error;

use super::rp::{KnobError, RpKnobs};

/// Why a scenario was refused. Each message is whole (a cause is said in it, not chained as a source):
/// a scenario's error is shown by its `Display`, and must name the key at fault there.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Io {
        /// As given.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// TOML syntax, an unknown key or a value of the wrong type (the message names the key and line).
    #[error("{file}: {message}")]
    Toml {
        /// The scenario's name.
        file: String,
        /// The TOML parser's message.
        message: String,
    },
    /// A value that parses but makes no sense: `key` is a dotted path such as `flow[2].mtu`.
    #[error("{file}: `{key}`: {message}")]
    Invalid {
        /// The scenario's name.
        file: String,
        /// Where, so a typo is found without reading the simulator.
        key: String,
        /// What the key accepts.
        message: String,
    },
    /// A `[dcqcn]` knob the reaction point does not know, or a value outside its range.
    #[error("{file}: `dcqcn`: {error}")]
    Knob {
        /// The scenario's name.
        file: String,
        /// Which knob and why.
        error: KnobError,
    },
}

fn default_true() -> bool {
    true
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    description: Option<String>,
    #[serde(default)]
    expect_findings: Vec<String>,
    #[serde(default)]
    seed: u64,
    duration_us: u64,
    snaplen: Option<u32>,
    #[serde(default = "default_vlan")]
    vlan: u16,
    #[serde(default = "default_sample_ns")]
    queue_sample_ns: u64,
    #[serde(default)]
    dcqcn: toml::Table,
    #[serde(default, rename = "switch")]
    switches: Vec<RawSwitch>,
    #[serde(default, rename = "host")]
    hosts: Vec<RawHost>,
    #[serde(default, rename = "link")]
    links: Vec<RawLink>,
    #[serde(default, rename = "flow")]
    flows: Vec<RawFlow>,
    #[serde(default, rename = "tap")]
    taps: Vec<RawTap>,
    #[serde(default, rename = "file")]
    files: Vec<RawFile>,
}

fn default_vlan() -> u16 {
    100
}
fn default_sample_ns() -> u64 {
    2_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSwitch {
    name: String,
    #[serde(default = "default_buffer")]
    buffer_bytes: u64,
    #[serde(default = "default_true")]
    ecn: bool,
    #[serde(default = "default_kmin")]
    kmin_bytes: u64,
    #[serde(default = "default_kmax")]
    kmax_bytes: u64,
    #[serde(default = "default_pmax")]
    pmax: f64,
    #[serde(default = "default_pfc")]
    pfc_priorities: Vec<u8>,
    #[serde(default = "default_xoff")]
    xoff_bytes: u64,
    #[serde(default = "default_xon")]
    xon_bytes: u64,
    #[serde(default = "default_queue_limit")]
    queue_limit_bytes: u64,
    #[serde(default = "default_mark_at")]
    mark_at: String,
}

fn default_mark_at() -> String {
    "dequeue".into()
}

fn default_buffer() -> u64 {
    4_000_000
}
fn default_kmin() -> u64 {
    20_000
}
fn default_kmax() -> u64 {
    200_000
}
fn default_pmax() -> f64 {
    0.01
}
fn default_pfc() -> Vec<u8> {
    vec![3, 6]
}
fn default_xoff() -> u64 {
    150_000
}
fn default_xon() -> u64 {
    100_000
}
fn default_queue_limit() -> u64 {
    400_000
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStorm {
    start_us: u64,
    end_us: u64,
    #[serde(default = "default_prio")]
    prio: u8,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    name: String,
    #[serde(default = "default_true")]
    rp: bool,
    #[serde(default = "default_true")]
    np: bool,
    #[serde(default = "default_min_cnp")]
    min_time_between_cnps_us: u64,
    #[serde(default = "default_cnp_dscp")]
    cnp_dscp: u8,
    #[serde(default = "default_cnp_prio")]
    cnp_prio: u8,
    storm: Option<RawStorm>,
    #[serde(default)]
    jitter_ns: u64,
}

fn default_min_cnp() -> u64 {
    4
}
fn default_cnp_dscp() -> u8 {
    48
}
fn default_cnp_prio() -> u8 {
    6
}
fn default_prio() -> u8 {
    3
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    a: String,
    b: String,
    #[serde(default = "default_gbps")]
    gbps: u32,
    #[serde(default = "default_delay")]
    delay_ns: u64,
}

fn default_gbps() -> u32 {
    25
}
fn default_delay() -> u64 {
    500
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlow {
    name: Option<String>,
    src: String,
    dst: String,
    #[serde(default = "default_op")]
    op: String,
    #[serde(default = "default_msg")]
    message_bytes: u32,
    #[serde(default)]
    messages: u64,
    #[serde(default)]
    start_us: u64,
    stop_us: Option<u64>,
    #[serde(default = "default_mtu")]
    mtu: u32,
    #[serde(default = "default_prio")]
    prio: u8,
    #[serde(default = "default_dscp")]
    dscp: u8,
    #[serde(default = "default_ack_every")]
    ack_every: u32,
    #[serde(default = "default_window")]
    window_packets: u32,
    #[serde(default = "default_timeout")]
    timeout_us: u64,
    #[serde(default = "default_reads")]
    max_reads: u32,
    offered_gbps: Option<f64>,
}

fn default_op() -> String {
    "write".into()
}
fn default_msg() -> u32 {
    65_536
}
fn default_mtu() -> u32 {
    4096
}
fn default_dscp() -> u8 {
    26
}
fn default_ack_every() -> u32 {
    16
}
fn default_window() -> u32 {
    512
}
fn default_timeout() -> u64 {
    1000
}
fn default_reads() -> u32 {
    8
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTap {
    name: Option<String>,
    a: String,
    b: String,
    file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    name: String,
    #[serde(default)]
    clock_offset_ns: u64,
    #[serde(default)]
    clock_drift_ppm: f64,
}

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

/// Longest simulated time a scenario may ask for: the samples are meant to be short.
const MAX_DURATION_US: u64 = 10_000_000;

impl Scenario {
    /// Reads and checks a scenario file; the scenario is named after the file stem.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|error| ScenarioError::Io {
            path: path.display().to_string(),
            error,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into());
        Scenario::from_toml(&name, &text)
    }

    /// Parses and checks scenario text; `name` names the scenario in errors and in the output.
    pub fn from_toml(name: &str, text: &str) -> Result<Scenario, ScenarioError> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| ScenarioError::Toml {
            file: name.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        Scenario::build(name, raw)
    }

    fn build(name: &str, raw: RawScenario) -> Result<Scenario, ScenarioError> {
        let bad = |key: String, message: String| ScenarioError::Invalid {
            file: name.to_string(),
            key,
            message,
        };
        if raw.duration_us == 0 || raw.duration_us > MAX_DURATION_US {
            return Err(bad(
                "duration_us".into(),
                format!("must be in 1..={MAX_DURATION_US}"),
            ));
        }
        if raw.vlan == 0 || raw.vlan > 4094 {
            return Err(bad("vlan".into(), "must be in 1..=4094".into()));
        }
        if raw.queue_sample_ns < 100 || raw.queue_sample_ns > MAX_DURATION_US * 1_000 {
            return Err(bad(
                "queue_sample_ns".into(),
                "must be at least 100 and at most the longest duration".into(),
            ));
        }
        if let Some(s) = raw.snaplen
            && !(64..=65_535).contains(&s)
        {
            return Err(bad("snaplen".into(), "must be in 64..=65535".into()));
        }
        let mut knobs = RpKnobs::default();
        for (k, v) in &raw.dcqcn {
            let value = match v {
                toml::Value::Integer(i) => *i,
                toml::Value::Boolean(b) => i64::from(*b),
                other => {
                    return Err(bad(
                        format!("dcqcn.{k}"),
                        format!("expected an integer, found {}", other.type_str()),
                    ));
                }
            };
            knobs.set(k, value).map_err(|error| ScenarioError::Knob {
                file: name.to_string(),
                error,
            })?;
        }

        let mut names: Vec<String> = Vec::new();
        let mut hosts = Vec::new();
        for (i, h) in raw.hosts.into_iter().enumerate() {
            let key = |f: &str| format!("host[{i}].{f}");
            check_name(&names, &h.name).map_err(|m| bad(key("name"), m))?;
            if h.cnp_dscp > 63 {
                return Err(bad(key("cnp_dscp"), "must be in 0..=63".into()));
            }
            if h.cnp_prio > 7 {
                return Err(bad(key("cnp_prio"), "must be in 0..=7".into()));
            }
            if h.min_time_between_cnps_us > MAX_DURATION_US {
                return Err(bad(
                    key("min_time_between_cnps_us"),
                    format!("must be at most {MAX_DURATION_US}"),
                ));
            }
            if h.jitter_ns > 100_000 {
                return Err(bad(key("jitter_ns"), "must be at most 100000".into()));
            }
            let storm = match h.storm {
                None => None,
                Some(s) => {
                    if s.end_us > MAX_DURATION_US {
                        return Err(bad(
                            key("storm.end_us"),
                            format!("must be at most {MAX_DURATION_US}"),
                        ));
                    }
                    if s.end_us <= s.start_us {
                        return Err(bad(key("storm.end_us"), "must be after start_us".into()));
                    }
                    if s.prio > 7 {
                        return Err(bad(key("storm.prio"), "must be in 0..=7".into()));
                    }
                    Some(Storm {
                        start_ns: s.start_us * 1_000,
                        end_ns: s.end_us * 1_000,
                        prio: s.prio,
                    })
                }
            };
            names.push(h.name.clone());
            hosts.push(HostSpec {
                name: h.name,
                rp: h.rp,
                np: h.np,
                min_time_between_cnps_ns: h.min_time_between_cnps_us * 1_000,
                cnp_dscp: h.cnp_dscp,
                cnp_prio: h.cnp_prio,
                storm,
                jitter_ns: h.jitter_ns,
            });
        }
        if hosts.is_empty() {
            return Err(bad("host".into(), "at least one [[host]] is needed".into()));
        }
        let mut switches = Vec::new();
        for (i, s) in raw.switches.into_iter().enumerate() {
            let key = |f: &str| format!("switch[{i}].{f}");
            check_name(&names, &s.name).map_err(|m| bad(key("name"), m))?;
            if s.buffer_bytes < 16_384 {
                return Err(bad(key("buffer_bytes"), "must be at least 16384".into()));
            }
            if s.kmax_bytes <= s.kmin_bytes {
                return Err(bad(key("kmax_bytes"), "must be above kmin_bytes".into()));
            }
            if !(s.pmax > 0.0 && s.pmax <= 1.0) {
                return Err(bad(key("pmax"), "must be in (0, 1]".into()));
            }
            if s.xon_bytes >= s.xoff_bytes {
                return Err(bad(key("xon_bytes"), "must be below xoff_bytes".into()));
            }
            if s.xoff_bytes >= s.buffer_bytes {
                return Err(bad(key("xoff_bytes"), "must be below buffer_bytes".into()));
            }
            if s.queue_limit_bytes == 0 {
                return Err(bad(key("queue_limit_bytes"), "must be positive".into()));
            }
            let mark_at = match s.mark_at.as_str() {
                "enqueue" => MarkAt::Enqueue,
                "dequeue" => MarkAt::Dequeue,
                other => {
                    return Err(bad(
                        key("mark_at"),
                        format!("`{other}` is not one of enqueue, dequeue"),
                    ));
                }
            };
            let mut pfc_mask = 0u8;
            for &p in &s.pfc_priorities {
                if p > 7 {
                    return Err(bad(
                        key("pfc_priorities"),
                        format!("priority {p} is not in 0..=7"),
                    ));
                }
                pfc_mask |= 1 << p;
            }
            names.push(s.name.clone());
            switches.push(SwitchSpec {
                name: s.name,
                buffer_bytes: s.buffer_bytes,
                ecn: s.ecn,
                kmin_bytes: s.kmin_bytes,
                kmax_bytes: s.kmax_bytes,
                pmax: s.pmax,
                pfc_mask,
                xoff_bytes: s.xoff_bytes,
                xon_bytes: s.xon_bytes,
                queue_limit_bytes: s.queue_limit_bytes,
                mark_at,
            });
        }
        let node = |key: String, n: &str| {
            names
                .iter()
                .position(|x| x == n)
                .ok_or_else(|| bad(key, format!("no host or switch is named `{n}`")))
        };
        let mut links: Vec<LinkSpec> = Vec::new();
        for (i, l) in raw.links.iter().enumerate() {
            let a = node(format!("link[{i}].a"), &l.a)?;
            let b = node(format!("link[{i}].b"), &l.b)?;
            if a == b {
                return Err(bad(format!("link[{i}].b"), "a link needs two nodes".into()));
            }
            if links
                .iter()
                .any(|x| (x.a, x.b) == (a, b) || (x.a, x.b) == (b, a))
            {
                return Err(bad(
                    format!("link[{i}]"),
                    "these two nodes are already linked".into(),
                ));
            }
            if !(1..=800).contains(&l.gbps) {
                return Err(bad(format!("link[{i}].gbps"), "must be in 1..=800".into()));
            }
            if l.delay_ns > 1_000_000 {
                return Err(bad(
                    format!("link[{i}].delay_ns"),
                    "must be at most 1000000".into(),
                ));
            }
            links.push(LinkSpec {
                a,
                b,
                gbps: l.gbps,
                delay_ns: l.delay_ns,
            });
        }
        for (h, spec) in hosts.iter().enumerate() {
            let n = links.iter().filter(|l| l.a == h || l.b == h).count();
            if n != 1 {
                return Err(bad(
                    "link".into(),
                    format!(
                        "host `{}` has {n} links; a host needs exactly one",
                        spec.name
                    ),
                ));
            }
        }
        let duration_ns = raw.duration_us * 1_000;
        let mut flows = Vec::new();
        for (i, f) in raw.flows.into_iter().enumerate() {
            let key = |x: &str| format!("flow[{i}].{x}");
            let src = node(key("src"), &f.src)?;
            let dst = node(key("dst"), &f.dst)?;
            if src >= hosts.len() {
                return Err(bad(key("src"), format!("`{}` is not a host", f.src)));
            }
            if dst >= hosts.len() {
                return Err(bad(key("dst"), format!("`{}` is not a host", f.dst)));
            }
            if src == dst {
                return Err(bad(key("dst"), "must differ from src".into()));
            }
            let op = match f.op.as_str() {
                "write" => Op::Write,
                "send" => Op::Send,
                "read" => Op::Read,
                other => {
                    return Err(bad(
                        key("op"),
                        format!("`{other}` is not one of write, send, read"),
                    ));
                }
            };
            if f.mtu != 1024 && f.mtu != 4096 && f.mtu != 256 && f.mtu != 512 && f.mtu != 2048 {
                return Err(bad(
                    key("mtu"),
                    "must be an IB MTU: 256, 512, 1024, 2048 or 4096".into(),
                ));
            }
            if f.message_bytes == 0 || f.message_bytes > (1 << 30) {
                return Err(bad(key("message_bytes"), "must be in 1..=2^30".into()));
            }
            if f.prio > 7 {
                return Err(bad(key("prio"), "must be in 0..=7".into()));
            }
            if f.dscp > 63 {
                return Err(bad(key("dscp"), "must be in 0..=63".into()));
            }
            if f.ack_every == 0 {
                return Err(bad(key("ack_every"), "must be at least 1".into()));
            }
            if f.window_packets == 0 || f.window_packets > (1 << 22) {
                return Err(bad(key("window_packets"), "must be in 1..=4194304".into()));
            }
            if f.timeout_us == 0 || f.timeout_us > MAX_DURATION_US {
                return Err(bad(
                    key("timeout_us"),
                    format!("must be in 1..={MAX_DURATION_US}"),
                ));
            }
            if f.start_us > MAX_DURATION_US || f.stop_us.is_some_and(|s| s > MAX_DURATION_US) {
                return Err(bad(
                    key("start_us"),
                    format!("start_us and stop_us must be at most {MAX_DURATION_US}"),
                ));
            }
            if f.max_reads == 0 || f.max_reads > 1024 {
                return Err(bad(key("max_reads"), "must be in 1..=1024".into()));
            }
            let post_interval_ps = match f.offered_gbps {
                None => 0,
                Some(_) if op == Op::Read => {
                    return Err(bad(
                        key("offered_gbps"),
                        "only for write and send: a READ's data is paced by its requests".into(),
                    ));
                }
                Some(g) if g > 0.0 && g <= 800.0 => {
                    (f64::from(f.message_bytes) * 8.0 * 1_000.0 / g).round() as u64
                }
                Some(_) => return Err(bad(key("offered_gbps"), "must be in (0, 800]".into())),
            };
            let stop_ns = f.stop_us.map_or(duration_ns, |s| s * 1_000);
            if f.start_us * 1_000 >= duration_ns || stop_ns <= f.start_us * 1_000 {
                return Err(bad(
                    key("start_us"),
                    "must be before stop_us and duration_us".into(),
                ));
            }
            flows.push(FlowSpec {
                name: f.name.unwrap_or_else(|| format!("flow{i}")),
                src,
                dst,
                op,
                message_bytes: f.message_bytes,
                messages: f.messages,
                start_ns: f.start_us * 1_000,
                stop_ns,
                mtu: f.mtu,
                prio: f.prio,
                dscp: f.dscp,
                ack_every: f.ack_every,
                window_packets: f.window_packets,
                timeout_ns: f.timeout_us * 1_000,
                max_reads: f.max_reads,
                post_interval_ps,
            });
        }
        let mut files = vec![FileSpec {
            name: String::new(),
            clock_offset_ns: 0,
            clock_drift_ppm: 0.0,
        }];
        for (i, f) in raw.files.into_iter().enumerate() {
            let key = |x: &str| format!("file[{i}].{x}");
            if f.name.is_empty()
                || !f
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(bad(
                    key("name"),
                    "must be letters, digits, `-` and `_` (it names the file)".into(),
                ));
            }
            if files.iter().any(|x| x.name == f.name) {
                return Err(bad(key("name"), format!("`{}` is used twice", f.name)));
            }
            if f.clock_offset_ns > 1_000_000_000_000 {
                return Err(bad(
                    key("clock_offset_ns"),
                    "must be at most 10^12 (1000 s)".into(),
                ));
            }
            if !(-1000.0..=1000.0).contains(&f.clock_drift_ppm) {
                return Err(bad(
                    key("clock_drift_ppm"),
                    "must be in -1000..=1000".into(),
                ));
            }
            files.push(FileSpec {
                name: f.name,
                clock_offset_ns: f.clock_offset_ns,
                clock_drift_ppm: f.clock_drift_ppm,
            });
        }
        let mut taps = Vec::new();
        for (i, t) in raw.taps.into_iter().enumerate() {
            let a = node(format!("tap[{i}].a"), &t.a)?;
            let b = node(format!("tap[{i}].b"), &t.b)?;
            let link = links
                .iter()
                .position(|l| (l.a, l.b) == (a, b) || (l.a, l.b) == (b, a))
                .ok_or_else(|| {
                    bad(
                        format!("tap[{i}]"),
                        format!("no link joins `{}` and `{}`", t.a, t.b),
                    )
                })?;
            let file = match &t.file {
                None => 0,
                Some(n) => files.iter().position(|f| &f.name == n).ok_or_else(|| {
                    bad(
                        format!("tap[{i}].file"),
                        format!("no [[file]] is named `{n}`"),
                    )
                })?,
            };
            let name = t.name.unwrap_or_else(|| format!("{}-{}", t.a, t.b));
            if taps.iter().any(|x: &TapSpec| x.name == name) {
                return Err(bad(
                    format!("tap[{i}].name"),
                    format!("`{name}` is used twice"),
                ));
            }
            taps.push(TapSpec { name, link, file });
        }
        for (i, f) in files.iter().enumerate().skip(1) {
            if !taps.iter().any(|t| t.file == i) {
                return Err(bad(
                    format!("file[{}]", i - 1),
                    format!("no tap writes to `{}`", f.name),
                ));
            }
        }
        Ok(Scenario {
            name: name.to_string(),
            description: raw.description.unwrap_or_default(),
            expect_findings: raw.expect_findings,
            seed: raw.seed,
            duration_ns,
            snaplen: raw.snaplen,
            vlan: raw.vlan,
            queue_sample_ns: raw.queue_sample_ns,
            knobs,
            hosts,
            switches,
            links,
            flows,
            taps,
            files,
        })
    }

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

fn check_name(taken: &[String], name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if taken.iter().any(|t| t == name) {
        return Err(format!("`{name}` is used twice"));
    }
    Ok(())
}
