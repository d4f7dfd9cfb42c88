//! The records themselves: one type per block, written by `roce-tracer` and read back by `roce-core`, so
//! that a field exists on both sides or on neither.
//!
//! Reading is forgiving in the way a capture from another version needs: a field a record lacks takes its
//! default (an older tracer did not write it), a field the reader does not know is ignored (a newer tracer
//! added it), and a malformed row of a list is dropped without losing the rest of the block. The
//! [`version`](Knobs::version) field says which layout the writer followed: 0 for the blocks written before
//! records carried one.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use super::{COUNTERS, DROPS, EVENTS, KNOBS, PROBE};

/// The layout version the writer puts in every record. History:
/// - 0: no `version` field (every tracer before it was added). `DROP` blocks may lack `ip`.
/// - 1: `version` in every record.
pub const VERSION: u32 = 1;

/// A custom-block record of one type: what ties a struct to its 4-byte tag.
pub trait Record: Serialize + DeserializeOwned {
    /// The record type in the block's first four bytes.
    const KIND: [u8; 4];
}

/// A list whose malformed entries are dropped rather than failing the whole record; `null` reads as empty.
fn lenient_list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let raw: Option<Vec<serde_json::Value>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect())
}

/// A map whose entries of the wrong type are dropped; `null` reads as empty.
fn lenient_map<'de, D, T>(d: D) -> Result<BTreeMap<String, T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let raw: Option<BTreeMap<String, serde_json::Value>> = Option::deserialize(d)?;
    Ok(raw
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| Some((k, serde_json::from_value(v).ok()?)))
        .collect())
}

/// `KNOB`, once at the start of each file: the DCQCN configuration of every interface that has one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Knobs {
    /// [`VERSION`] of the writer; 0 for a record written before there was one.
    pub version: u32,
    /// Wall-clock ns when the knobs were read.
    pub ts_ns: u64,
    /// `<iface>/<roce_np|roce_rp>/<file>` (mlx5 nests `enable/<priority>`) → the file's text.
    #[serde(deserialize_with = "lenient_map")]
    pub knobs: BTreeMap<String, String>,
    /// The interfaces captured, so that the reader can prefer their knobs when several NICs have some
    /// (a mirror port has none). Absent from the oldest blocks.
    #[serde(deserialize_with = "lenient_list")]
    pub captured: Vec<String>,
    /// `<iface>` → the addresses its RoCE GIDs stand for, so that the reader can tell whose knobs are whose: a
    /// check of the notification point wants the receiver's, a model of the reaction point the sender's.
    /// Absent from blocks written before it (the reader then cannot tell).
    #[serde(
        deserialize_with = "lenient_map",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub addrs: BTreeMap<String, Vec<String>>,
    /// The traced host's name, which ties this host's `CTRS` samples to its ports when the captures of several
    /// hosts are read together (their devices are all `mlx5_0`). Absent from older blocks.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
    /// Every RDMA port of the host, with what the analyzer needs to set its counters beside the packets: whose
    /// driver names them, the netdev whose ethtool statistics are its own, and the MAC and addresses its frames
    /// carry. Absent from older blocks (the analyzer then cannot tie a device's counters to its packets).
    #[serde(
        deserialize_with = "lenient_list",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ports: Vec<RdmaPortRecord>,
}

/// One RDMA port as the tracer found it in sysfs at the start.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RdmaPortRecord {
    /// The RDMA device (`mlx5_0`, `bnxt_re0`, `irdma1`, `ionic_0`).
    pub device: String,
    /// The port number.
    pub port: u32,
    /// The name of the device's driver (`class/infiniband/DEV/device/driver`'s link: `mlx5_core`, `bnxt_en`,
    /// `ice`, `ionic`), which says whose counter names the device has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The port's netdev, whose ethtool statistics (`ethtool/NETDEV/...` in `CTRS`) are the port's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
    /// The netdev's MAC address (`aa:bb:...`): PFC frames the port sends carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The addresses its RoCE GIDs stand for: the packets of this port's host.
    #[serde(deserialize_with = "lenient_list")]
    pub addrs: Vec<String>,
}

/// `CTRS`, every `--interval`: one reading of every NIC counter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counters {
    /// [`VERSION`] of the writer; 0 for a record written before there was one.
    pub version: u32,
    /// Wall-clock ns of the reading.
    pub ts_ns: u64,
    /// Sysfs paths relative to the sysfs root (`class/infiniband/<dev>/ports/<n>/hw_counters/<name>`) and
    /// `ethtool/<iface>/<statistic>` → value.
    #[serde(deserialize_with = "lenient_map")]
    pub counters: BTreeMap<String, u64>,
    /// The traced host's name, as in its `KNOB` block. Absent from older blocks.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub host: String,
}

/// `PROB`, once at the end of an eBPF capture: the probe's own counters, summed over CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Probe {
    /// [`VERSION`] of the writer; 0 for a record written before there was one.
    pub version: u32,
    /// Wall-clock ns when the counters were read.
    pub ts_ns: u64,
    /// Frames the probe looked at.
    pub seen: u64,
    /// Frames it selected (RoCE, CNP, PFC, PAUSE, or all with `--all-frames`).
    pub matched: u64,
    /// Selected frames it put in the ring.
    pub emitted: u64,
    /// Selected frames lost to a full ring.
    pub ring_full: u64,
    /// Per destination QP, counted in the kernel whether or not the frame reached the ring.
    #[serde(deserialize_with = "lenient_list")]
    pub qps: Vec<ProbeQp>,
    /// Per 802.1p priority.
    #[serde(deserialize_with = "lenient_list")]
    pub prios: Vec<ProbePrio>,
    /// Per ring buffer (one per CPU); absent from captures of tracers that had one ring for all CPUs.
    #[serde(deserialize_with = "lenient_list")]
    pub rings: Vec<ProbeRing>,
}

/// One of the probe's ring buffers, as the probe and the tracer's reader counted its frames: `emitted`
/// = `read`, and `lost` are the frames it had no room for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProbeRing {
    /// The ring's number.
    pub ring: u32,
    /// The CPUs that write into it (one, unless CPUs were offline at the start).
    pub cpus: Vec<u32>,
    /// Its size in bytes.
    pub bytes: u64,
    /// Frames the probe put in it.
    pub emitted: u64,
    /// Frames lost because it was full.
    pub lost: u64,
    /// Frames the tracer read from it.
    pub read: u64,
    /// Of those, frames written after a later frame of another ring or of its own: they arrived more than
    /// the tracer's reordering window late (the file's order is by time otherwise).
    pub late: u64,
}

/// One destination QP's traffic as the probe counted it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProbeQp {
    /// The BTH destination QP.
    pub dest_qp: u32,
    /// RoCE packets to it.
    pub packets: u64,
    /// Their bytes on the wire.
    pub bytes: u64,
    /// Of those, marked CE.
    pub ce: u64,
    /// CNPs to it.
    pub cnps: u64,
}

/// One priority's traffic as the probe counted it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProbePrio {
    /// 0–7, or `None` for untagged frames and PAUSE.
    pub priority: Option<u8>,
    /// RoCE packets at this priority.
    pub roce_packets: u64,
    /// Their bytes on the wire.
    pub roce_bytes: u64,
    /// Of those, marked CE.
    pub ce: u64,
    /// PFC frames naming this priority.
    pub pfc_frames: u64,
    /// Of those, with a nonzero pause time.
    pub pfc_xoff: u64,
    /// Of those, with a zero pause time.
    pub pfc_xon: u64,
    /// 802.3x PAUSE frames (untagged row only).
    pub pause_frames: u64,
}

/// What the `ipv4` and `ipv6` rows of a drop record count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IpDrops {
    /// Only UDP to port 4791: the tracer read the dropped packet through the kernel's sk_buff layout.
    Rocev2,
    /// Every dropped IP packet, RoCEv2 or not (an upper bound on RoCEv2's): the kernel's sk_buff layout
    /// could not be read, and the tracepoint alone gives the ethertype only.
    Any,
    /// A value this reader does not know (a newer tracer's).
    #[serde(other)]
    Unknown,
}

/// `DROP`, at the end of each file (`--kernel-events`): the kernel's packet drops (`skb:kfree_skb`)
/// while the file was open.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Drops {
    /// [`VERSION`] of the writer; 0 for a record written before there was one.
    pub version: u32,
    /// Wall-clock ns when the totals were read.
    pub ts_ns: u64,
    /// What the IP rows count; `None` in records from tracers that always counted every IP drop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpDrops>,
    /// One row per protocol and reason that dropped anything.
    #[serde(deserialize_with = "lenient_list")]
    pub drops: Vec<DropRow>,
}

/// Drops of one protocol for one reason.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropRow {
    /// `ipv4`, `ipv6`, `roce_v1`, `mac_control`, or the ethertype as `0x....`.
    pub protocol: String,
    /// The kernel's name for the reason, or its number when the kernel's format file did not name it.
    pub reason: String,
    /// Packets dropped.
    pub count: u64,
}

/// `EVNT`, every `--interval` and at the end of each file (`--kernel-events`): what happened in the
/// kernel during `[from_ns, to_ns)` of the packets' clock.
///
/// A busy interval is split over several records with the same `from_ns`/`to_ns` so that none passes the
/// reader's block limit; only the first carries `tracepoints`, `drops`, `counts` and `lost`, so that
/// merging them counts each once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Events {
    /// [`VERSION`] of the writer; 0 for a record written before there was one.
    pub version: u32,
    /// Wall-clock ns when the record was made.
    pub ts_ns: u64,
    /// Start of the interval.
    pub from_ns: u64,
    /// End of the interval (exclusive).
    pub to_ns: u64,
    /// What the tracer could record on that host: in each file's first record only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracepoints: Option<Tracepoints>,
    /// One per event, in time order.
    #[serde(deserialize_with = "lenient_list")]
    pub events: Vec<Event>,
    /// The `skb:kfree_skb` drops during the interval, rows as in [`Drops`].
    #[serde(deserialize_with = "lenient_list")]
    pub drops: Vec<DropRow>,
    /// What the IP rows of `drops` count, as in [`Drops::ip`]; `None` before version 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpDrops>,
    /// Tracepoints counted in the kernel rather than sent one by one (`rdma_core:cq_poll`).
    #[serde(deserialize_with = "lenient_list")]
    pub counts: Vec<CountRow>,
    /// Events the tracer could not keep during the interval (ring or count map full, too many pending).
    pub lost: u64,
}

/// What became of each tracepoint asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tracepoints {
    /// `system:event` of each attached tracepoint.
    #[serde(deserialize_with = "lenient_list")]
    pub attached: Vec<String>,
    /// Not on that kernel, or not attachable: `name` or `name (why)`.
    #[serde(deserialize_with = "lenient_list")]
    pub unavailable: Vec<String>,
    /// Attached, but without some of the fields asked for: tracepoint → `field (why)`.
    #[serde(deserialize_with = "lenient_map")]
    pub incomplete: BTreeMap<String, Vec<String>>,
}

/// One kernel event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Wall-clock ns, the packets' clock.
    pub ts_ns: u64,
    /// `system:event` (`rdma_cma:cm_qp_create`), or `rdma_res:qp` for the tracer's QP snapshots.
    pub tracepoint: String,
    /// The process (thread group) the event fired in.
    #[serde(default)]
    pub pid: u32,
    /// The thread it fired in.
    #[serde(default)]
    pub tid: u32,
    /// The thread's name.
    #[serde(default)]
    pub comm: String,
    /// The copied fields by their kernel names, as each tracepoint has its own: numbers, `<field>_name`
    /// where the kernel names the value (`qp_type_name: "RC"`), socket addresses as `"ip:port"`, text as
    /// text. Fields a kernel lacks are absent.
    #[serde(default, deserialize_with = "lenient_map_json")]
    pub fields: serde_json::Map<String, serde_json::Value>,
}

/// An event's fields; anything but an object reads as none.
fn lenient_map_json<'de, D>(d: D) -> Result<serde_json::Map<String, serde_json::Value>, D::Error>
where
    D: Deserializer<'de>,
{
    let raw = serde_json::Value::deserialize(d)?;
    Ok(match raw {
        serde_json::Value::Object(m) => m,
        _ => serde_json::Map::new(),
    })
}

/// A counted tracepoint's tally for one key during one interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountRow {
    /// `system:event`.
    pub tracepoint: String,
    /// `{"<key field>": value}` (`cq_id`).
    #[serde(default, deserialize_with = "lenient_map")]
    pub key: BTreeMap<String, u64>,
    /// Events counted.
    #[serde(default)]
    pub events: u64,
    /// `{"<summed field>": total}` (`rc`: completions polled), empty when nothing is summed.
    #[serde(default, deserialize_with = "lenient_map")]
    pub sum: BTreeMap<String, u64>,
}

impl Record for Knobs {
    const KIND: [u8; 4] = KNOBS;
}
impl Record for Counters {
    const KIND: [u8; 4] = COUNTERS;
}
impl Record for Probe {
    const KIND: [u8; 4] = PROBE;
}
impl Record for Drops {
    const KIND: [u8; 4] = DROPS;
}
impl Record for Events {
    const KIND: [u8; 4] = EVENTS;
}
