//! Kernel events (`--kernel-events`).
//!
//! Two eBPF programs feed the capture's custom blocks:
//! - `skb:kfree_skb` counts the kernel's drops of IPv4, IPv6, RoCEv1 and MAC Control packets per drop
//!   reason. Every `--interval` the drops since the previous interval go into an `EVNT` block (with the
//!   interval's start and end, so they can be placed on a timeline), and each file ends with a `DROP` block
//!   holding what was dropped while it was open.
//! - A generic recorder is attached to the RDMA tracepoints this kernel has (`rdma_cma:cm_qp_create`,
//!   `rdma_cma:cm_event_handler`, the `ib_mad` send and receive events; see [`rdma_specs`]) and to any
//!   `--tracepoint`. Each event travels with its time, the process and thread it fired in and that thread's
//!   name, and the fields asked for; `rdma_core:cq_poll`, which can fire millions of times a second, is
//!   only counted in the kernel, per CQ. Tracepoints the kernel lacks are listed at start and skipped.
//! - At start and every `--interval`, the QPs `rdma res show qp` lists that the previous snapshot did not
//!   (see [`crate::qp_owners`]) join the events as `rdma_res:qp`: owners of QPs no tracepoint sees.
//!
//! Record layouts differ between kernels, so every offset, size and enum name is read at run time from the
//! event's `format` file in tracefs and handed to the programs through their configuration maps.
//!
//! Times: the programs stamp events with `bpf_ktime_get_ns()` (CLOCK_MONOTONIC). Packets carry wall-clock
//! time (libpcap's, or the eBPF engine's monotonic stamp plus the offset it sampled at start), so events get
//! the same treatment: the monotonic-to-wall-clock offset is sampled once at start and added, which puts
//! them on the packets' time axis.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aya::Ebpf;
use aya::maps::{Array, MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use aya::programs::TracePoint;
use serde::Serialize;
use tracer_common::kevents::{
    self as shared, BYTES_LEN, CountKey, CountValue, FIELD_DATA_LOC, FIELD_SIGNED, FieldSpec,
    MAX_FIELDS, MAX_TRACEPOINTS, MODE_COUNT, MODE_EVENT, NO_FIELD, TRACE_EVENT_LEN,
    TRACE_PROGRAM_PREFIX, TraceConfig, stat,
};
use tracer_common::{DropConfig, DropKey, KFREE_SKB_PROGRAM, NO_LAYOUT, NO_REASON, maps};

use crate::engine::ebpf::{EbpfStartError, probe_object};

/// Where tracefs is usually mounted, newest convention first.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Size of the recorder's ring: about 27 000 events between two reads.
const RING_BYTES: u32 = 4 << 20;
/// The ring is emptied at least this often, so a burst of MADs does not have to fit in it for a whole
/// interval.
const POLL_EVERY: Duration = Duration::from_millis(50);
/// Events kept between two `EVNT` blocks; past this they are counted as lost rather than kept in memory.
/// About 16 MiB of JSON per interval: the analyzer keeps at most 64 MiB of custom blocks per file.
const MAX_PENDING: usize = 1 << 16;

#[derive(Debug, thiserror::Error)]
pub enum KernelEventsError {
    #[error(
        "tracefs is not mounted and could not be mounted at /sys/kernel/tracing (try `mount -t tracefs \
         nodev /sys/kernel/tracing`)"
    )]
    NoTracefs(#[source] std::io::Error),
    #[error("this kernel has no skb:kfree_skb tracepoint, which --kernel-events needs")]
    NoKfreeSkb,
    #[error(
        "{path} is not readable by this user: tracefs belongs to root unless mounted otherwise (run as root, \
         or mount tracefs with `-o gid=GROUP,mode=0750` for a group of this user)"
    )]
    Unreadable { path: PathBuf },
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Format {
        path: PathBuf,
        #[source]
        source: FormatError,
    },
    #[error(transparent)]
    Load(#[from] EbpfStartError),
    #[error("eBPF program {name}")]
    Program {
        name: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("eBPF map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("--tracepoint {0:?}: expected SYSTEM:EVENT or SYSTEM:EVENT:FIELD,FIELD...")]
    BadSpec(String),
}

/// What is wrong with a tracepoint format file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no field {0:?}")]
    MissingField(String),
    #[error("field {name:?} is {size} bytes, expected {expected}")]
    FieldSize {
        name: &'static str,
        size: u32,
        expected: u32,
    },
    #[error("no `ID:` line")]
    MissingId,
}

/// One `field:` line of a format file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
    /// Declared as an array (`unsigned char srcaddr[28]`): bytes, not a number.
    pub array: bool,
    /// Declared `__data_loc`: a locator of bytes stored after the fixed fields (a string).
    pub data_loc: bool,
}

/// What the tracer needs from `skb/kfree_skb/format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfreeSkbFormat {
    pub protocol_offset: u32,
    /// Offset of the 8-byte `skbaddr`, `None` when the record lacks it (then IP drops cannot be told apart).
    pub skbaddr_offset: Option<u32>,
    /// `None` on kernels before drop reasons (5.17).
    pub reason_offset: Option<u32>,
    /// The reason names of the `__print_symbolic` list in the print format, by value.
    pub reasons: BTreeMap<u32, String>,
}

/// Reads the `field:` lines of a format file. Lines that do not parse are skipped: the format of the
/// format file is informal.
pub fn parse_fields(text: &str) -> Vec<Field> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        let mut signed = false;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("signed:") {
                signed = v.trim() == "1";
            } else if decl.is_none() && !part.is_empty() && !part.contains(':') {
                decl = Some(part);
            }
        }
        let Some(decl) = decl else {
            continue;
        };
        // The name is the declaration's last word, without an array suffix (`char name[16]`).
        let last = decl.split_whitespace().last();
        let name = last.map(|n| n.split('[').next().unwrap_or(n).trim_start_matches('*'));
        let data_loc = decl.starts_with("__data_loc") || decl.starts_with("__rel_loc");
        let array = !data_loc && last.is_some_and(|n| n.contains('['));
        if let (Some(name), Some(offset), Some(size)) = (name, offset, size)
            && !name.is_empty()
        {
            out.push(Field {
                name: name.to_string(),
                offset,
                size,
                signed,
                array,
                data_loc,
            });
        }
    }
    out
}

/// The event id (`ID: 1520`), which is also the `common_type` at the start of each of its records.
pub fn parse_id(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("ID:"))
        .and_then(|v| v.trim().parse().ok())
}

fn parse_value(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => v
            .parse::<u64>()
            .ok()
            .or_else(|| v.parse::<i64>().ok().map(|x| x as u64)),
    }
}

/// The `{ value, "NAME" }` pairs of one `__print_symbolic(` list, from just after its field argument to
/// its closing parenthesis; returns the pairs and the rest of the text.
fn symbolic_pairs(mut rest: &str) -> (BTreeMap<u64, String>, &str) {
    let mut out = BTreeMap::new();
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if !rest.starts_with('{') {
            let end = rest.find(')').map_or(rest.len(), |i| i + 1);
            return (out, rest.get(end..).unwrap_or(""));
        }
        let Some(close) = rest.find('}') else {
            return (out, "");
        };
        let pair = rest.get(1..close).unwrap_or("");
        rest = rest.get(close + 1..).unwrap_or("");
        let Some((value, name)) = pair.split_once(',') else {
            continue;
        };
        let name = name.trim().trim_matches('"');
        if let Some(v) = parse_value(value)
            && !name.is_empty()
        {
            out.insert(v, name.to_string());
        }
    }
}

/// Reads the `{ value, "NAME" }` pairs of the first `__print_symbolic(` in the print format.
pub fn parse_symbolic(text: &str) -> BTreeMap<u32, String> {
    let Some(start) = text.find("__print_symbolic(") else {
        return BTreeMap::new();
    };
    let rest = text.get(start + "__print_symbolic(".len()..).unwrap_or("");
    let rest = rest.split_once(',').map_or("", |(_, r)| r);
    symbolic_pairs(rest)
        .0
        .into_iter()
        .filter_map(|(v, n)| Some((u32::try_from(v).ok()?, n)))
        .collect()
}

/// Every `__print_symbolic(REC->field, ...)` of the print format, by field name: the names the kernel gives
/// the field's values (`qp_type` 2 is `RC`, `event` 9 is `ESTABLISHED`).
pub fn parse_symbolics(text: &str) -> BTreeMap<String, BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while let Some(start) = rest.find("__print_symbolic(") {
        rest = rest.get(start + "__print_symbolic(".len()..).unwrap_or("");
        let Some((arg, after)) = rest.split_once(',') else {
            break;
        };
        let field = arg
            .trim()
            .trim_start_matches('(')
            .trim_start_matches("REC->")
            .trim_end_matches(')')
            .to_string();
        let (pairs, next) = symbolic_pairs(after);
        if !pairs.is_empty() {
            out.entry(field).or_insert(pairs);
        }
        rest = next;
    }
    out
}

/// Parses `events/skb/kfree_skb/format`.
pub fn parse_kfree_skb(text: &str) -> Result<KfreeSkbFormat, FormatError> {
    let fields = parse_fields(text);
    let find = |name: &str| fields.iter().find(|f| f.name == name);
    let protocol = find("protocol").ok_or(FormatError::MissingField("protocol".into()))?;
    if protocol.size != 2 {
        return Err(FormatError::FieldSize {
            name: "protocol",
            size: protocol.size,
            expected: 2,
        });
    }
    let reason_offset = match find("reason") {
        Some(f) if f.size == 4 => Some(f.offset),
        Some(f) => {
            return Err(FormatError::FieldSize {
                name: "reason",
                size: f.size,
                expected: 4,
            });
        }
        None => None,
    };
    Ok(KfreeSkbFormat {
        protocol_offset: protocol.offset,
        skbaddr_offset: find("skbaddr").filter(|f| f.size == 8).map(|f| f.offset),
        reason_offset,
        reasons: parse_symbolic(text),
    })
}

/// A tracepoint to record, and which of its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSpec {
    pub system: String,
    pub event: String,
    /// Fields to copy, in order. Numbers and byte arrays are told apart by the format file; at most
    /// [`MAX_FIELDS`] numbers and [`MAX_BYTE_FIELDS`] byte arrays are kept. Empty: the first ones the
    /// format lists.
    pub fields: Vec<String>,
    /// Numeric fields the kernel stores in network byte order (the MAD header's), shown swapped.
    pub big_endian: Vec<String>,
    /// Count in the kernel per value of the first field, summing the second (if any), instead of sending
    /// each event.
    pub count: bool,
}

impl TraceSpec {
    fn new(system: &str, event: &str, fields: &[&str]) -> Self {
        TraceSpec {
            system: system.into(),
            event: event.into(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
            big_endian: Vec::new(),
            count: false,
        }
    }

    pub fn name(&self) -> String {
        format!("{}:{}", self.system, self.event)
    }

    /// Parses `--tracepoint SYSTEM:EVENT[:FIELD,FIELD...]`.
    pub fn parse(arg: &str) -> Result<TraceSpec, KernelEventsError> {
        let bad = || KernelEventsError::BadSpec(arg.to_string());
        let mut parts = arg.splitn(3, ':');
        let (Some(system), Some(event)) = (parts.next(), parts.next()) else {
            return Err(bad());
        };
        let ok = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        if !ok(system) || !ok(event) {
            return Err(bad());
        }
        let fields: Vec<&str> = parts
            .next()
            .map(|f| {
                f.split(',')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        if !fields.iter().all(|f| ok(f)) {
            return Err(bad());
        }
        Ok(TraceSpec::new(system, event, &fields))
    }
}

/// The RDMA tracepoints `--kernel-events` records where the kernel has them: QP creation with the creating
/// process and the connection's addresses, connection-manager events, MAD traffic, and completion-queue
/// polling (counted per CQ).
pub fn rdma_specs() -> Vec<TraceSpec> {
    let mad = |event: &str, fields: &[&str]| TraceSpec {
        big_endian: vec!["attr_id".into(), "status".into()],
        ..TraceSpec::new("ib_mad", event, fields)
    };
    vec![
        TraceSpec::new(
            "rdma_cma",
            "cm_qp_create",
            &[
                "qp_num", "qp_type", "rc", "cm_id", "tos", "pd_id", "srcaddr", "dstaddr",
            ],
        ),
        // A process connecting (rdma_connect) or accepting (rdma_accept) through the connection manager
        // hands its QP number over: these fire in that process, also for QPs it created with verbs.
        TraceSpec::new(
            "rdma_cma",
            "cm_send_req",
            &["qp_num", "cm_id", "tos", "srcaddr", "dstaddr"],
        ),
        TraceSpec::new(
            "rdma_cma",
            "cm_send_rep",
            &["qp_num", "cm_id", "tos", "srcaddr", "dstaddr"],
        ),
        TraceSpec::new(
            "rdma_cma",
            "cm_event_handler",
            &["event", "status", "cm_id", "tos", "srcaddr", "dstaddr"],
        ),
        mad(
            "ib_mad_ib_send_mad",
            &[
                "mgmt_class",
                "method",
                "attr_id",
                "status",
                "qp_num",
                "rqpn",
            ],
        ),
        mad(
            "ib_mad_recv_done_handler",
            &[
                "mgmt_class",
                "method",
                "attr_id",
                "status",
                "src_qp",
                "wc_status",
            ],
        ),
        mad(
            "ib_mad_send_done_handler",
            &["mgmt_class", "method", "status", "wc_status", "qp_num"],
        ),
        mad(
            "ib_mad_error_handler",
            &["mgmt_class", "method", "attr_id", "status", "qp_num"],
        ),
        TraceSpec {
            count: true,
            ..TraceSpec::new("rdma_core", "cq_poll", &["cq_id", "rc"])
        },
    ]
}

/// How one copied number is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntField {
    pub name: String,
    pub size: u32,
    pub signed: bool,
    pub big_endian: bool,
    /// The kernel's names for its values, from the print format.
    pub symbols: BTreeMap<u64, String>,
}

/// How one copied byte array is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesField {
    pub name: String,
    /// Bytes of the field that were copied (at most [`BYTES_LEN`]).
    pub size: usize,
    /// A `struct sockaddr` (`srcaddr`, `dstaddr`), shown as `address:port`; otherwise NUL-terminated text.
    pub sockaddr: bool,
}

/// A tracepoint whose format file has been read: the program's configuration and how to read its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// `system:event`.
    pub name: String,
    /// The event id, under which the configuration is stored.
    pub id: u32,
    pub config: TraceConfig,
    pub ints: Vec<IntField>,
    pub bytes: Vec<BytesField>,
    /// Asked-for fields this kernel's record does not have (or that did not fit), as `name (why)`.
    pub missing: Vec<String>,
}

/// Works out, from the event's format file, what the recorder copies of `spec`'s records. Fields the
/// record lacks are listed in [`Resolved::missing`]; only a counted tracepoint without its key field, or a
/// format file without an id, cannot be recorded at all.
pub fn resolve(spec: &TraceSpec, text: &str, slot: u32) -> Result<Resolved, FormatError> {
    let id = parse_id(text).ok_or(FormatError::MissingId)?;
    let fields = parse_fields(text);
    let symbols = parse_symbolics(text);
    let wanted: Vec<String> = if spec.fields.is_empty() {
        fields
            .iter()
            .filter(|f| !f.name.starts_with("common_"))
            .map(|f| f.name.clone())
            .collect()
    } else {
        spec.fields.clone()
    };
    let mut config = TraceConfig {
        slot,
        mode: if spec.count { MODE_COUNT } else { MODE_EVENT },
        count_key: NO_FIELD,
        count_sum: NO_FIELD,
        ..TraceConfig::default()
    };
    let mut out = Resolved {
        name: spec.name(),
        id,
        config,
        ints: Vec::new(),
        bytes: Vec::new(),
        missing: Vec::new(),
    };
    for name in &wanted {
        let Some(f) = fields.iter().find(|f| &f.name == name) else {
            out.missing
                .push(format!("{name} (not in this kernel's record)"));
            continue;
        };
        let Ok(offset) = u16::try_from(f.offset) else {
            out.missing.push(format!("{name} (offset {})", f.offset));
            continue;
        };
        if f.array || f.data_loc {
            if spec.count {
                out.missing.push(format!("{name} (not a number)"));
                continue;
            }
            let Some(slot) = config.bytes.get_mut(out.bytes.len()) else {
                out.missing.push(format!("{name} (no room)"));
                continue;
            };
            let size = if f.data_loc {
                BYTES_LEN
            } else {
                (f.size as usize).min(BYTES_LEN)
            };
            *slot = FieldSpec {
                offset,
                size: size as u8,
                flags: if f.data_loc { FIELD_DATA_LOC } else { 0 },
            };
            out.bytes.push(BytesField {
                name: name.clone(),
                size,
                sockaddr: name.ends_with("addr") && f.size >= 16,
            });
        } else if matches!(f.size, 1 | 2 | 4 | 8) {
            let Some(slot) = config.fields.get_mut(out.ints.len()) else {
                out.missing.push(format!("{name} (no room)"));
                continue;
            };
            *slot = FieldSpec {
                offset,
                size: f.size as u8,
                flags: if f.signed { FIELD_SIGNED } else { 0 },
            };
            out.ints.push(IntField {
                name: name.clone(),
                size: f.size,
                signed: f.signed,
                big_endian: spec.big_endian.contains(name),
                symbols: symbols.get(name).cloned().unwrap_or_default(),
            });
        } else {
            out.missing.push(format!("{name} ({} bytes)", f.size));
        }
    }
    if spec.count {
        let key = spec.fields.first().cloned().unwrap_or_default();
        let index = |n: &str| out.ints.iter().position(|f| f.name == n);
        config.count_key = index(&key).ok_or(FormatError::MissingField(key))? as u32;
        config.count_sum = spec
            .fields
            .get(1)
            .and_then(|n| index(n))
            .map_or(NO_FIELD, |i| i as u32);
    }
    out.config = config;
    Ok(out)
}

/// One recorded event, as it goes into an `EVNT` block.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EventRow {
    /// Wall-clock ns, the packets' clock.
    pub ts_ns: u64,
    /// `system:event`.
    pub tracepoint: String,
    /// The process (thread group) the event fired in, and the thread.
    pub pid: u32,
    pub tid: u32,
    /// The thread's name.
    pub comm: String,
    /// Each copied field by name: numbers, `<field>_name` beside a number the kernel names, addresses as
    /// `ip:port`, text as text.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(bytes.get(..end).unwrap_or(bytes)).into_owned()
}

/// A `struct sockaddr_in` / `sockaddr_in6` as the kernel keeps it (family in host order, port and address
/// in network order); `None` for an unset one.
pub fn sockaddr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    match family {
        2 => {
            let a: [u8; 4] = b.get(4..8)?.try_into().ok()?;
            Some(SocketAddr::new(Ipv4Addr::from(a).into(), port))
        }
        10 => {
            let a: [u8; 16] = b.get(8..24)?.try_into().ok()?;
            let ip = Ipv6Addr::from(a);
            // RoCE addresses IPv4 hosts through IPv4-mapped GIDs; show those as IPv4 so they match the
            // packets' addresses.
            Some(SocketAddr::new(
                ip.to_ipv4_mapped().map_or(ip.into(), Into::into),
                port,
            ))
        }
        _ => None,
    }
}

/// Decodes a ring record of the recorder (a [`shared::TraceEvent`], read by offset rather than by pointer
/// cast). `offset_ns` turns its monotonic time into wall-clock time.
pub fn decode_event(traced: &[Resolved], rec: &[u8], offset_ns: u64) -> Option<EventRow> {
    if rec.len() < TRACE_EVENT_LEN {
        return None;
    }
    let u64_at = |at: usize| Some(u64::from_ne_bytes(rec.get(at..at + 8)?.try_into().ok()?));
    let ts = u64_at(0)?;
    let pid_tgid = u64_at(8)?;
    let slot = u32::from_ne_bytes(rec.get(16..20)?.try_into().ok()?);
    let t = traced.get(slot as usize)?;
    let mut fields = serde_json::Map::new();
    for (i, f) in t.ints.iter().enumerate() {
        let raw = u64_at(40 + 8 * i)?;
        let v = if f.big_endian {
            match f.size {
                2 => u64::from((raw as u16).swap_bytes()),
                4 => u64::from((raw as u32).swap_bytes()),
                8 => raw.swap_bytes(),
                _ => raw,
            }
        } else {
            raw
        };
        let value = if f.signed {
            serde_json::Value::from(v as i64)
        } else {
            serde_json::Value::from(v)
        };
        fields.insert(f.name.clone(), value);
        if let Some(name) = f.symbols.get(&v) {
            fields.insert(format!("{}_name", f.name), name.clone().into());
        }
    }
    for (i, f) in t.bytes.iter().enumerate() {
        let at = 40 + 8 * MAX_FIELDS + BYTES_LEN * i;
        let b = rec.get(at..at + f.size.min(BYTES_LEN))?;
        let value = if f.sockaddr {
            sockaddr(b).map_or(serde_json::Value::Null, |a| a.to_string().into())
        } else {
            text(b).into()
        };
        fields.insert(f.name.clone(), value);
    }
    Some(EventRow {
        ts_ns: ts.saturating_add(offset_ns),
        tracepoint: t.name.clone(),
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        comm: text(rec.get(24..40)?),
        fields,
    })
}

/// The mounted tracefs, mounting it at the usual place when it is not (aya looks for it there as well).
pub fn tracefs() -> Result<PathBuf, KernelEventsError> {
    let mounted = |p: &Path| p.join("events").is_dir();
    if let Some(p) = TRACEFS.iter().map(Path::new).find(|p| mounted(p)) {
        return Ok(p.to_path_buf());
    }
    let target = Path::new(TRACEFS[0]);
    let c = |s: &str| CString::new(s).map_err(std::io::Error::other);
    let (src, dst, fs) = (
        c("nodev").map_err(KernelEventsError::NoTracefs)?,
        c(TRACEFS[0]).map_err(KernelEventsError::NoTracefs)?,
        c("tracefs").map_err(KernelEventsError::NoTracefs)?,
    );
    // SAFETY: three NUL-terminated strings that live across the call, and no data argument.
    let rc = unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(KernelEventsError::NoTracefs(std::io::Error::last_os_error()));
    }
    eprintln!("roce-tracer: mounted tracefs at {}", target.display());
    Ok(target.to_path_buf())
}

/// The format file of a tracepoint, `None` when this kernel does not have it.
fn format_path(tracefs: &Path, system: &str, event: &str) -> Option<PathBuf> {
    let p = tracefs
        .join("events")
        .join(system)
        .join(event)
        .join("format");
    p.is_file().then_some(p)
}

/// What became of each tracepoint asked for: the start-up line and every file's first `EVNT` block say it.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TracepointReport {
    pub attached: Vec<String>,
    /// Not on this kernel, or not attachable: `name` or `name (why)`.
    pub unavailable: Vec<String>,
    /// Attached, but without some of the fields asked for.
    pub incomplete: BTreeMap<String, Vec<String>>,
}

/// The start-up line about the tracepoints.
pub fn describe(report: &TracepointReport) -> String {
    let mut line = format!(
        "roce-tracer: kernel events: attached {}",
        report.attached.join(", ")
    );
    if !report.unavailable.is_empty() {
        line.push_str(&format!(
            "; unavailable on this kernel: {}",
            report.unavailable.join(", ")
        ));
    }
    for (name, fields) in &report.incomplete {
        line.push_str(&format!("; {name} without {}", fields.join(", ")));
    }
    line
}

/// The `DROP` custom block.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct DropBlock {
    pub ts_ns: u64,
    /// What the `ipv4` and `ipv6` rows count: `rocev2` (UDP to port 4791 only) or `any` (every IP drop,
    /// on a kernel whose sk_buff layout could not be read).
    pub ip: &'static str,
    pub drops: Vec<DropRow>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct DropRow {
    /// `ipv4`, `ipv6`, `roce_v1`, `mac_control`.
    pub protocol: String,
    /// The kernel's name for the reason, or its number when the format file did not name it.
    pub reason: String,
    pub count: u64,
}

/// A counted tracepoint's tally for one key during one interval.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct CountRow {
    pub tracepoint: String,
    /// `{"<key field>": value}`.
    pub key: BTreeMap<String, u64>,
    pub events: u64,
    /// `{"<summed field>": total}`, empty when nothing is summed.
    pub sum: BTreeMap<String, u64>,
}

/// The `EVNT` custom block: what happened in the kernel during `[from_ns, to_ns)`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct EventsBlock {
    pub ts_ns: u64,
    pub from_ns: u64,
    pub to_ns: u64,
    /// In each file's first block only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracepoints: Option<TracepointReport>,
    pub events: Vec<EventRow>,
    pub drops: Vec<DropRow>,
    pub counts: Vec<CountRow>,
    /// Events lost during the interval (ring buffer or count map full).
    pub lost: u64,
}

/// The largest `EVNT` record written: the analyzer reads custom blocks of up to 1 MiB whole and skips
/// larger ones.
pub const MAX_BLOCK_BYTES: usize = 960 << 10;

/// Encodes an `EVNT` block, halving its events over several blocks until each fits in
/// [`MAX_BLOCK_BYTES`]. Only the first keeps the drops, counts and tracepoint list, so that merging the
/// blocks counts them once. An event too large on its own is dropped (none comes close: a record holds six
/// numbers and two short byte fields).
pub fn encode_split(block: EventsBlock) -> Vec<Vec<u8>> {
    let Ok(bytes) = roce_capture::blocks::encode(roce_capture::blocks::EVENTS, &block) else {
        return Vec::new();
    };
    if bytes.len() <= MAX_BLOCK_BYTES {
        return vec![bytes];
    }
    if block.events.len() <= 1 {
        return Vec::new();
    }
    let mut first = block;
    let second_events = first.events.split_off(first.events.len() / 2);
    let second = EventsBlock {
        ts_ns: first.ts_ns,
        from_ns: first.from_ns,
        to_ns: first.to_ns,
        tracepoints: None,
        events: second_events,
        drops: Vec::new(),
        counts: Vec::new(),
        lost: 0,
    };
    let mut out = encode_split(first);
    out.extend(encode_split(second));
    out
}

fn protocol_name(ethertype: u16) -> String {
    match ethertype {
        0x0800 => "ipv4".into(),
        0x86dd => "ipv6".into(),
        0x8915 => "roce_v1".into(),
        0x8808 => "mac_control".into(),
        other => format!("0x{other:04x}"),
    }
}

/// Drop rows for the increase from `before` to `now`.
fn drop_rows(
    now: &BTreeMap<DropKey, u64>,
    before: &BTreeMap<DropKey, u64>,
    reasons: &BTreeMap<u32, String>,
) -> Vec<DropRow> {
    now.iter()
        .filter_map(|(key, &total)| {
            let count = total.saturating_sub(before.get(key).copied().unwrap_or(0));
            (count > 0).then(|| DropRow {
                protocol: protocol_name(key.protocol),
                reason: reasons
                    .get(&key.reason)
                    .cloned()
                    .unwrap_or_else(|| key.reason.to_string()),
                count,
            })
        })
        .collect()
}

fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> KernelEventsError {
    move |source| KernelEventsError::Map { name, source }
}

fn prog_err(name: &'static str) -> impl Fn(aya::programs::ProgramError) -> KernelEventsError {
    move |source| KernelEventsError::Program { name, source }
}

/// The attached programs and what has been reported of their counts.
pub struct KernelEvents {
    ebpf: Ebpf,
    ring: RingBuf<MapData>,
    format: KfreeSkbFormat,
    /// Recorded tracepoints, by slot.
    traced: Vec<Resolved>,
    offset_ns: u64,
    report: TracepointReport,
    /// The line listing the tracepoints, for the caller to print.
    pub description: String,
    /// Drop counts already written into earlier files: each `DROP` block holds what happened during its file.
    reported: BTreeMap<DropKey, u64>,
    /// Drop counts as of the previous `EVNT` block.
    interval_drops: BTreeMap<DropKey, u64>,
    interval_counts: BTreeMap<CountKey, CountValue>,
    interval_lost: u64,
    interval_start_ns: u64,
    pending: Vec<EventRow>,
    /// Events read but not kept, [`MAX_PENDING`] being reached.
    overflow: u64,
    header_due: bool,
    last_poll: Instant,
    /// QP owners from `rdma res show qp`, as `rdma_res:qp` events.
    qp_owners: crate::qp_owners::QpSnapshots,
    /// Whether IP drops are counted for RoCEv2 only (the sk_buff layout was found).
    rocev2_only: bool,
}

/// The name of the recorder program of `slot`.
pub fn trace_program(slot: u32) -> String {
    format!("{TRACE_PROGRAM_PREFIX}{slot}")
}

/// Loads the recorder program of `slot` and attaches it to `system:event`. An error names what failed, for
/// the list of unavailable tracepoints.
fn attach_slot(ebpf: &mut Ebpf, slot: u32, system: &str, event: &str) -> Result<(), String> {
    let name = trace_program(slot);
    let prog: &mut TracePoint = ebpf
        .program_mut(&name)
        .ok_or_else(|| format!("no program {name} in the eBPF object"))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| e.to_string())?;
    prog.load().map_err(|e| format!("loading {name}: {e}"))?;
    prog.attach(system, event)
        .map(|_| ())
        .map_err(|e| format!("attaching: {e}"))
}

impl std::fmt::Debug for KernelEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelEvents")
            .field("report", &self.report)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl KernelEvents {
    /// Finds tracefs, reads the format files, loads a copy of the probe object, attaches the drop counter
    /// to `skb:kfree_skb` and the recorder to each of [`rdma_specs`] and `extra` this kernel has. The QP
    /// snapshots read the ports' GID tables under `sysfs_root` (`/sys` when `None`).
    pub fn start(
        extra: &[TraceSpec],
        sysfs_root: Option<&std::path::Path>,
    ) -> Result<KernelEvents, KernelEventsError> {
        let started_ns = crate::sys::now_ns();
        let root = tracefs()?;
        let path = format_path(&root, "skb", "kfree_skb").ok_or(KernelEventsError::NoKfreeSkb)?;
        let text = std::fs::read_to_string(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                KernelEventsError::Unreadable { path: path.clone() }
            } else {
                KernelEventsError::Read {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        let format =
            parse_kfree_skb(&text).map_err(|source| KernelEventsError::Format { path, source })?;
        // To count RoCEv2 drops rather than every IP drop, the counter reads the packet's UDP port, which
        // needs the buffer's address in the record and sk_buff's layout from the kernel's BTF.
        let (layout, ip_drops) = match (format.skbaddr_offset, crate::btf::running_kernel()) {
            (Some(_), Ok(l)) => (
                Some(l),
                "IPv4/IPv6 drops counted for RoCEv2 (UDP 4791) only".to_string(),
            ),
            (None, _) => (
                None,
                "every IPv4/IPv6 drop counted, RoCEv2 or not: the tracepoint has no skbaddr"
                    .to_string(),
            ),
            (_, Err(why)) => (
                None,
                format!("every IPv4/IPv6 drop counted, RoCEv2 or not: no sk_buff layout ({why})"),
            ),
        };
        // A separate instance of the object: its packet ring is shrunk to a page, since only the
        // tracepoint programs and their maps are used here.
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries(maps::EVENTS, 4096)
            .map_max_entries(shared::maps::TRACE_EVENTS, RING_BYTES)
            .load(probe_object()?)
            .map_err(EbpfStartError::from)?;
        {
            let map = ebpf
                .map_mut(maps::DROP_CONFIG)
                .ok_or(EbpfStartError::MissingMap(maps::DROP_CONFIG))?;
            let mut array: Array<&mut MapData, DropConfig> =
                Array::try_from(map).map_err(map_err(maps::DROP_CONFIG))?;
            let config = DropConfig {
                protocol_offset: format.protocol_offset,
                reason_offset: format.reason_offset.unwrap_or(NO_REASON),
                skbaddr_offset: format.skbaddr_offset.unwrap_or(NO_LAYOUT),
                skb_head: layout.map_or(NO_LAYOUT, |l| l.head),
                skb_network_header: layout.map_or(NO_LAYOUT, |l| l.network_header),
            };
            array
                .set(0, config, 0)
                .map_err(map_err(maps::DROP_CONFIG))?;
        }
        let prog: &mut TracePoint = ebpf
            .program_mut(KFREE_SKB_PROGRAM)
            .ok_or(EbpfStartError::MissingProgram(KFREE_SKB_PROGRAM))?
            .try_into()
            .map_err(prog_err(KFREE_SKB_PROGRAM))?;
        prog.load().map_err(prog_err(KFREE_SKB_PROGRAM))?;
        prog.attach("skb", "kfree_skb")
            .map_err(prog_err(KFREE_SKB_PROGRAM))?;
        let mut report = TracepointReport {
            attached: vec!["skb:kfree_skb".into()],
            ..TracepointReport::default()
        };

        // Each spec this kernel has, with its configuration; the rest are listed as unavailable.
        let mut traced: Vec<Resolved> = Vec::new();
        for spec in rdma_specs().iter().chain(extra) {
            let name = spec.name();
            let Some(path) = format_path(&root, &spec.system, &spec.event) else {
                report.unavailable.push(name);
                continue;
            };
            if traced.len() >= MAX_TRACEPOINTS as usize {
                report
                    .unavailable
                    .push(format!("{name} (more than {MAX_TRACEPOINTS} tracepoints)"));
                continue;
            }
            let resolved = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| resolve(spec, &t, traced.len() as u32).map_err(|e| e.to_string()));
            match resolved {
                Ok(r) => traced.push(r),
                Err(why) => report.unavailable.push(format!("{name} ({why})")),
            }
        }
        if !traced.is_empty() {
            let map = ebpf
                .map_mut(shared::maps::TRACE_CONFIG)
                .ok_or(EbpfStartError::MissingMap(shared::maps::TRACE_CONFIG))?;
            let mut configs: Array<&mut MapData, TraceConfig> =
                Array::try_from(map).map_err(map_err(shared::maps::TRACE_CONFIG))?;
            for t in &traced {
                configs
                    .set(t.config.slot, t.config, 0)
                    .map_err(map_err(shared::maps::TRACE_CONFIG))?;
            }
        }
        for t in &traced {
            let (system, event) = t.name.split_once(':').unwrap_or((&t.name, ""));
            match attach_slot(&mut ebpf, t.config.slot, system, event) {
                Ok(()) => {
                    report.attached.push(t.name.clone());
                    if !t.missing.is_empty() {
                        report.incomplete.insert(t.name.clone(), t.missing.clone());
                    }
                }
                Err(e) => report.unavailable.push(format!("{} ({e})", t.name)),
            }
        }
        let ring = ebpf
            .take_map(shared::maps::TRACE_EVENTS)
            .ok_or(EbpfStartError::MissingMap(shared::maps::TRACE_EVENTS))?;
        let ring = RingBuf::try_from(ring).map_err(map_err(shared::maps::TRACE_EVENTS))?;
        let offset_ns = crate::sys::monotonic_to_realtime_offset();
        let (qp_owners, owners, warning) =
            crate::qp_owners::QpSnapshots::start_default(started_ns, sysfs_root);
        let mut description = describe(&report);
        description.push_str(&format!("\nroce-tracer: kernel drops: {ip_drops}"));
        if let Some(w) = warning {
            description.push('\n');
            description.push_str(&w);
        }
        Ok(KernelEvents {
            ebpf,
            ring,
            format,
            traced,
            offset_ns,
            description,
            report,
            rocev2_only: layout.is_some(),
            reported: BTreeMap::new(),
            interval_drops: BTreeMap::new(),
            interval_counts: BTreeMap::new(),
            interval_lost: 0,
            interval_start_ns: started_ns,
            pending: owners,
            overflow: 0,
            header_due: true,
            last_poll: Instant::now(),
            qp_owners,
        })
    }

    /// What became of each tracepoint.
    pub fn report(&self) -> &TracepointReport {
        &self.report
    }

    /// Moves the events waiting in the ring into memory.
    pub fn poll(&mut self) {
        self.last_poll = Instant::now();
        while let Some(item) = self.ring.next() {
            if self.pending.len() >= MAX_PENDING {
                self.overflow += 1;
                continue;
            }
            if let Some(row) = decode_event(&self.traced, &item, self.offset_ns) {
                self.pending.push(row);
            }
        }
    }

    /// [`KernelEvents::poll`] when the last one is older than [`POLL_EVERY`]; cheap enough to call per frame.
    pub fn poll_if_due(&mut self) {
        if self.last_poll.elapsed() >= POLL_EVERY {
            self.poll();
        }
    }

    /// Current drop totals per key, summed over CPUs.
    fn drop_totals(&self) -> Result<BTreeMap<DropKey, u64>, KernelEventsError> {
        let map = self
            .ebpf
            .map(maps::DROPS)
            .ok_or(EbpfStartError::MissingMap(maps::DROPS))?;
        let drops: PerCpuHashMap<&MapData, DropKey, u64> =
            PerCpuHashMap::try_from(map).map_err(map_err(maps::DROPS))?;
        let mut out = BTreeMap::new();
        for item in drops.iter() {
            let (key, per_cpu) = item.map_err(map_err(maps::DROPS))?;
            out.insert(key, per_cpu.iter().sum());
        }
        Ok(out)
    }

    fn count_totals(&self) -> Result<BTreeMap<CountKey, CountValue>, KernelEventsError> {
        let name = shared::maps::TRACE_COUNTS;
        let map = self
            .ebpf
            .map(name)
            .ok_or(EbpfStartError::MissingMap(name))?;
        let counts: PerCpuHashMap<&MapData, CountKey, CountValue> =
            PerCpuHashMap::try_from(map).map_err(map_err(name))?;
        let mut out = BTreeMap::new();
        for item in counts.iter() {
            let (key, per_cpu) = item.map_err(map_err(name))?;
            let mut v = CountValue::default();
            for c in per_cpu.iter() {
                v.events += c.events;
                v.sum += c.sum;
            }
            out.insert(key, v);
        }
        Ok(out)
    }

    /// Events the kernel side could not keep: ring full, count map full.
    fn lost_total(&self) -> Result<u64, KernelEventsError> {
        let name = shared::maps::TRACE_STATS;
        let map = self
            .ebpf
            .map(name)
            .ok_or(EbpfStartError::MissingMap(name))?;
        let stats: PerCpuArray<&MapData, u64> =
            PerCpuArray::try_from(map).map_err(map_err(name))?;
        let mut lost = self.overflow;
        for i in [stat::RING_FULL, stat::COUNT_FULL] {
            lost += stats.get(&i, 0).map_err(map_err(name))?.iter().sum::<u64>();
        }
        Ok(lost)
    }

    fn count_rows(&self, now: &BTreeMap<CountKey, CountValue>) -> Vec<CountRow> {
        now.iter()
            .filter_map(|(key, v)| {
                let before = self.interval_counts.get(key).copied().unwrap_or_default();
                let events = v.events.saturating_sub(before.events);
                let t = self.traced.get(key.slot as usize)?;
                let field = |i: u32| t.ints.get(i as usize).map(|f| f.name.clone());
                let key_name = field(t.config.count_key)?;
                let mut sum = BTreeMap::new();
                if let Some(s) = field(t.config.count_sum) {
                    sum.insert(s, v.sum.saturating_sub(before.sum));
                }
                (events > 0).then(|| CountRow {
                    tracepoint: t.name.clone(),
                    key: BTreeMap::from([(key_name, key.key)]),
                    events,
                    sum,
                })
            })
            .collect()
    }

    /// Everything since the previous call (since the start for the first), as `EVNT` records: one, or
    /// several when the events would make a block larger than the analyzer reads ([`MAX_BLOCK_BYTES`]).
    /// Written every `--interval`, even when empty, so a reader can tell a quiet interval from a missing one.
    pub fn interval_blocks(&mut self) -> Vec<Vec<u8>> {
        let owners = self.qp_owners.snapshot(crate::sys::now_ns());
        self.pending.extend(owners);
        let now_ns = crate::sys::now_ns();
        let drops = self.drop_totals().unwrap_or_default();
        let counts = self.count_totals().unwrap_or_default();
        let lost = self.lost_total().unwrap_or(self.interval_lost);
        self.poll();
        // Events stamped after the interval's end wait for the next block, so each block's events fall
        // inside its interval (but for one still being written when the interval closed).
        let (mut events, later): (Vec<EventRow>, Vec<EventRow>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|e| e.ts_ns < now_ns);
        self.pending = later;
        events.sort_by_key(|e| e.ts_ns);
        let block = EventsBlock {
            ts_ns: now_ns,
            from_ns: self.interval_start_ns,
            to_ns: now_ns,
            tracepoints: self.header_due.then(|| self.report.clone()),
            events,
            drops: drop_rows(&drops, &self.interval_drops, &self.format.reasons),
            counts: self.count_rows(&counts),
            lost: lost.saturating_sub(self.interval_lost),
        };
        self.header_due = false;
        self.interval_drops = drops;
        self.interval_counts = counts;
        self.interval_lost = lost;
        self.interval_start_ns = now_ns;
        encode_split(block)
    }

    /// The drops since the previous call (since the start for the first), as a `DROP` record.
    pub fn take_block(&mut self) -> Option<Vec<u8>> {
        let totals = self.drop_totals().ok()?;
        let block = DropBlock {
            ts_ns: crate::sys::now_ns(),
            ip: if self.rocev2_only { "rocev2" } else { "any" },
            drops: drop_rows(&totals, &self.reported, &self.format.reasons),
        };
        self.reported = totals;
        roce_capture::blocks::encode(roce_capture::blocks::DROPS, &block).ok()
    }

    /// What a closing file gets last: the events since the last `EVNT` block, then its `DROP` totals. The
    /// next file's first `EVNT` block repeats the tracepoint list.
    pub fn closing_blocks(&mut self) -> Vec<Vec<u8>> {
        let mut blocks = self.interval_blocks();
        blocks.extend(self.take_block());
        self.header_due = true;
        self.qp_owners.forget();
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout of a 6.8+ kernel (with `rx_sk`), abridged reason list.
    const FORMAT_6_8: &str = r#"name: kfree_skb
ID: 1520
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:void * skbaddr;	offset:8;	size:8;	signed:0;
	field:void * location;	offset:16;	size:8;	signed:0;
	field:void * rx_sk;	offset:24;	size:8;	signed:0;
	field:unsigned short protocol;	offset:32;	size:2;	signed:0;
	field:enum skb_drop_reason reason;	offset:36;	size:4;	signed:0;

print fmt: "skbaddr=%p rx_sk=%p protocol=%u location=%pS reason: %s", REC->skbaddr, REC->rx_sk, REC->protocol, REC->location, __print_symbolic(REC->reason, { 2, "NOT_SPECIFIED" }, { 3, "NO_SOCKET" }, { 0x1b, "OTHER_HEX" }, { 77, "IPV6DISABLED" })
"#;

    /// A 5.10-era layout: no reason at all.
    const FORMAT_5_10: &str = "name: kfree_skb\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;\n\
        \tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;\n\
        \tfield:unsigned short protocol;\toffset:24;\tsize:2;\tsigned:0;\n\n\
        print fmt: \"skbaddr=%p protocol=%u location=%p\", REC->skbaddr, REC->protocol, REC->location\n";

    #[test]
    fn offsets_and_reasons_of_a_recent_kernel() {
        let f = parse_kfree_skb(FORMAT_6_8).unwrap();
        assert_eq!(f.protocol_offset, 32);
        assert_eq!(f.reason_offset, Some(36));
        assert_eq!(f.reasons.get(&3).map(String::as_str), Some("NO_SOCKET"));
        assert_eq!(f.reasons.get(&0x1b).map(String::as_str), Some("OTHER_HEX"));
        assert_eq!(f.reasons.get(&77).map(String::as_str), Some("IPV6DISABLED"));
        assert_eq!(f.reasons.len(), 4);
        let fields = parse_fields(FORMAT_6_8);
        assert_eq!(fields.len(), 9);
        assert!(fields.iter().any(|f| f.name == "skbaddr" && f.offset == 8));
    }

    #[test]
    fn old_kernel_without_reasons() {
        let f = parse_kfree_skb(FORMAT_5_10).unwrap();
        assert_eq!((f.protocol_offset, f.reason_offset), (24, None));
        assert!(f.reasons.is_empty());
    }

    #[test]
    fn broken_formats_are_errors() {
        assert_eq!(
            parse_kfree_skb("format:\n"),
            Err(FormatError::MissingField("protocol".into()))
        );
        let wide = FORMAT_6_8.replace(
            "protocol;\toffset:32;\tsize:2",
            "protocol;\toffset:32;\tsize:4",
        );
        assert!(matches!(
            parse_kfree_skb(&wide),
            Err(FormatError::FieldSize {
                name: "protocol",
                ..
            })
        ));
        // Garbage never panics.
        let _ = parse_kfree_skb("field:;offset:x;size:\u{0}\n{ , }__print_symbolic({ 1 }");
    }

    #[test]
    fn the_start_line_names_what_is_missing() {
        let report = TracepointReport {
            attached: vec!["skb:kfree_skb".into(), "ib_mad:ib_mad_ib_send_mad".into()],
            unavailable: vec!["rdma_cma:cm_qp_create".into()],
            incomplete: BTreeMap::from([(
                "ib_mad:ib_mad_ib_send_mad".to_string(),
                vec!["rqpn (not in this kernel's record)".to_string()],
            )]),
        };
        let line = describe(&report);
        assert!(line.contains("attached skb:kfree_skb, ib_mad:ib_mad_ib_send_mad"));
        assert!(line.contains("unavailable on this kernel: rdma_cma:cm_qp_create"));
        assert!(line.contains("ib_mad:ib_mad_ib_send_mad without rqpn"));
    }

    #[test]
    fn field_kinds_and_ids() {
        let text = "name: x\nID: 77\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\
            \tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n\
            \tfield:char comm[16];\toffset:16;\tsize:16;\tsigned:0;\n";
        assert_eq!(parse_id(text), Some(77));
        let f = parse_fields(text);
        assert_eq!(f.len(), 4);
        assert!(f[1].data_loc && !f[1].array && f[1].name == "filename");
        assert!(f[2].signed && !f[2].array);
        assert!(f[3].array && f[3].name == "comm" && f[3].size == 16);
        assert_eq!(parse_id("ID: x"), None);
    }

    #[test]
    fn symbolic_lists_per_field() {
        let text = r#"print fmt: "a=%s b=%s", __print_symbolic(REC->event, { 0, "ADDR_RESOLVED" }, { 9, "ESTABLISHED" }), __print_symbolic(REC->qp_type, { 0x2, "RC" }, { 4, "UD" })"#;
        let s = parse_symbolics(text);
        assert_eq!(s["event"][&9], "ESTABLISHED");
        assert_eq!(s["event"].len(), 2);
        assert_eq!(s["qp_type"][&2], "RC");
        assert_eq!(s["qp_type"][&4], "UD");
        // Garbage never panics.
        let _ = parse_symbolics("__print_symbolic(REC->x, { 1, \"A\" ");
        let _ = parse_symbolics("__print_symbolic(");
    }

    #[test]
    fn socket_addresses() {
        let mut v4 = [0u8; 28];
        v4[..2].copy_from_slice(&2u16.to_ne_bytes());
        v4[2..4].copy_from_slice(&4791u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(sockaddr(&v4).unwrap().to_string(), "10.0.0.7:4791");
        let mut v6 = [0u8; 28];
        v6[..2].copy_from_slice(&10u16.to_ne_bytes());
        v6[8..24].copy_from_slice(&"::ffff:10.0.0.9".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(sockaddr(&v6).unwrap().to_string(), "10.0.0.9:0");
        assert_eq!(sockaddr(&[0u8; 28]), None);
        assert_eq!(sockaddr(&[2, 0]), None);
    }

    #[test]
    fn a_busy_interval_is_split_under_the_block_limit() {
        let event = |i: u64| {
            EventRow {
            ts_ns: 1_000 + i,
            tracepoint: "ib_mad:ib_mad_recv_done_handler".into(),
            pid: 7,
            tid: 8,
            comm: "kworker/u8:1".into(),
            fields: serde_json::json!({"mgmt_class": 7, "method": 3, "attr_id": 16, "pad": "x".repeat(200)})
                .as_object()
                .cloned()
                .unwrap(),
        }
        };
        let n = 12_000u64;
        let block = EventsBlock {
            ts_ns: 9,
            from_ns: 1,
            to_ns: 9,
            tracepoints: Some(TracepointReport::default()),
            events: (0..n).map(event).collect(),
            drops: vec![DropRow {
                protocol: "ipv4".into(),
                reason: "NO_SOCKET".into(),
                count: 5,
            }],
            counts: Vec::new(),
            lost: 3,
        };
        let blocks = encode_split(block);
        assert!(blocks.len() >= 3, "{} blocks", blocks.len());
        assert!(blocks.iter().all(|b| b.len() <= MAX_BLOCK_BYTES));
        // Read back the way the analyzer reads them: every event once, in order, the drops and losses once.
        let custom: Vec<roce_capture::CustomBlock> = blocks
            .into_iter()
            .map(|data| roce_capture::CustomBlock {
                pen: roce_capture::blocks::PEN,
                data,
            })
            .collect();
        let k = roce_core::recorded::kernel_events(&custom);
        assert_eq!(k.events.len() as u64, n);
        assert!(k.events.windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
        assert_eq!(k.drop_intervals.len(), 1);
        assert_eq!(k.drop_intervals[0].count, 5);
        assert_eq!(k.lost, 3);
        assert_eq!(k.blocks, custom.len() as u64);
    }

    #[test]
    fn tracepoint_arguments() {
        let s = TraceSpec::parse("task:task_newtask:pid,comm").unwrap();
        assert_eq!(
            (s.system.as_str(), s.event.as_str()),
            ("task", "task_newtask")
        );
        assert_eq!(s.fields, ["pid", "comm"]);
        assert!(
            TraceSpec::parse("task:task_newtask")
                .unwrap()
                .fields
                .is_empty()
        );
        for bad in ["task", ":x", "a:b:c d", "../x:y", "a:b/c"] {
            assert!(TraceSpec::parse(bad).is_err(), "{bad}");
        }
    }
}
