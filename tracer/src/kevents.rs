//! Kernel events (`--kernel-events`): the `skb:kfree_skb` tracepoint counts the kernel's drops of IPv4,
//! IPv6, RoCEv1 and MAC Control packets per drop reason, and the counts go into the capture as `DROP`
//! blocks. The other tracepoints the issue names (`rdma_cma`, `ib_mad`, `rdma_core`) are looked up and
//! listed at start, but nothing is attached to them yet.
//!
//! The tracepoint record differs between kernels, so the field offsets and the names of the drop reasons
//! are read from the event's `format` file in tracefs at run time and handed to the program through its
//! `DROP_CONFIG` map.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};

use aya::Ebpf;
use aya::maps::{Array, MapData, PerCpuHashMap};
use aya::programs::TracePoint;
use serde::Serialize;
use tracer_common::{DropConfig, DropKey, KFREE_SKB_PROGRAM, NO_REASON, maps};

use crate::engine::ebpf::{EbpfStartError, probe_object};

/// The tracepoints `--kernel-events` asks for, as `(system, event)`; `*` stands for every event of the
/// system.
pub const REQUESTED: [(&str, &str); 5] = [
    ("skb", "kfree_skb"),
    ("rdma_cma", "cm_qp_create"),
    ("rdma_cma", "cm_event_handler"),
    ("ib_mad", "*"),
    ("rdma_core", "cq_poll"),
];

/// Where tracefs is usually mounted, newest convention first.
const TRACEFS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

#[derive(Debug, thiserror::Error)]
pub enum KernelEventsError {
    #[error(
        "tracefs is not mounted and could not be mounted at /sys/kernel/tracing (try `mount -t tracefs \
         nodev /sys/kernel/tracing`)"
    )]
    NoTracefs(#[source] std::io::Error),
    #[error("this kernel has no skb:kfree_skb tracepoint, which --kernel-events needs")]
    NoKfreeSkb,
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
    #[error("eBPF program {KFREE_SKB_PROGRAM}")]
    Program(#[source] aya::programs::ProgramError),
    #[error("eBPF map {name}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

/// What is wrong with a tracepoint format file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("no field {0:?}")]
    MissingField(&'static str),
    #[error("field {name:?} is {size} bytes, expected {expected}")]
    FieldSize {
        name: &'static str,
        size: u32,
        expected: u32,
    },
}

/// One `field:` line of a format file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: u32,
    pub size: u32,
}

/// What the tracer needs from `skb/kfree_skb/format`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KfreeSkbFormat {
    pub protocol_offset: u32,
    /// `None` on kernels before drop reasons (5.17).
    pub reason_offset: Option<u32>,
    /// The reason names of the `__print_symbolic` list in the print format, by value.
    pub reasons: BTreeMap<u32, String>,
}

/// Reads the `field:` lines of a format file. Lines that do not parse are skipped: the format of the
/// format file is informal, and only two fields matter.
pub fn parse_fields(text: &str) -> Vec<Field> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("field:") else {
            continue;
        };
        let mut decl = None;
        let mut offset = None;
        let mut size = None;
        for part in rest.split(';') {
            let part = part.trim();
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.trim().parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.trim().parse().ok();
            } else if decl.is_none() && !part.is_empty() && !part.contains(':') {
                decl = Some(part);
            }
        }
        // The name is the declaration's last word, without an array suffix (`char name[16]`).
        let name = decl
            .and_then(|d| d.split_whitespace().last())
            .map(|n| n.split('[').next().unwrap_or(n).trim_start_matches('*'));
        if let (Some(name), Some(offset), Some(size)) = (name, offset, size) {
            out.push(Field {
                name: name.to_string(),
                offset,
                size,
            });
        }
    }
    out
}

/// Reads the `{ value, "NAME" }` pairs of the first `__print_symbolic(` in the print format.
pub fn parse_symbolic(text: &str) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    let Some(start) = text.find("__print_symbolic(") else {
        return out;
    };
    let mut rest = text.get(start..).unwrap_or("");
    while let Some(open) = rest.find('{') {
        rest = rest.get(open + 1..).unwrap_or("");
        let Some(close) = rest.find('}') else {
            break;
        };
        let pair = rest.get(..close).unwrap_or("");
        rest = rest.get(close + 1..).unwrap_or("");
        let Some((value, name)) = pair.split_once(',') else {
            continue;
        };
        let value = value.trim();
        let value = match value.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => value.parse().ok(),
        };
        let name = name.trim().trim_matches('"');
        if let Some(v) = value
            && !name.is_empty()
        {
            out.insert(v, name.to_string());
        }
    }
    out
}

/// Parses `events/skb/kfree_skb/format`.
pub fn parse_kfree_skb(text: &str) -> Result<KfreeSkbFormat, FormatError> {
    let fields = parse_fields(text);
    let find = |name: &str| fields.iter().find(|f| f.name == name);
    let protocol = find("protocol").ok_or(FormatError::MissingField("protocol"))?;
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
        reason_offset,
        reasons: parse_symbolic(text),
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

/// Whether each requested tracepoint exists under `tracefs`, in [`REQUESTED`] order.
pub fn availability(tracefs: &Path) -> Vec<(String, bool)> {
    REQUESTED
        .iter()
        .map(|&(system, event)| {
            let dir = tracefs.join("events").join(system);
            let present = if event == "*" {
                dir.is_dir()
            } else {
                dir.join(event).is_dir()
            };
            (format!("{system}:{event}"), present)
        })
        .collect()
}

/// The start-up line about the tracepoints.
pub fn describe(avail: &[(String, bool)]) -> String {
    let pick = |want: bool| -> Vec<&str> {
        avail
            .iter()
            .filter(|(_, p)| *p == want)
            .map(|(n, _)| n.as_str())
            .collect()
    };
    let (present, missing) = (pick(true), pick(false));
    let mut line = format!(
        "roce-tracer: kernel events: attached skb:kfree_skb; requested {}",
        avail
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let others: Vec<&str> = present
        .into_iter()
        .filter(|n| *n != "skb:kfree_skb")
        .collect();
    if !others.is_empty() {
        line.push_str(&format!(
            "; present but not recorded yet: {}",
            others.join(", ")
        ));
    }
    if !missing.is_empty() {
        line.push_str(&format!(
            "; unavailable on this kernel: {}",
            missing.join(", ")
        ));
    }
    line
}

/// The `DROP` custom block.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct DropBlock {
    pub ts_ns: u64,
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

fn protocol_name(ethertype: u16) -> String {
    match ethertype {
        0x0800 => "ipv4".into(),
        0x86dd => "ipv6".into(),
        0x8915 => "roce_v1".into(),
        0x8808 => "mac_control".into(),
        other => format!("0x{other:04x}"),
    }
}

/// The attached tracepoint and what has been reported of its counts.
#[derive(Debug)]
pub struct KernelEvents {
    ebpf: Ebpf,
    format: KfreeSkbFormat,
    /// The line listing the tracepoints, for the caller to print.
    pub description: String,
    /// Counts already written into earlier files: each `DROP` block holds what happened during its file.
    reported: BTreeMap<DropKey, u64>,
}

impl KernelEvents {
    /// Finds tracefs, reads the `kfree_skb` format, loads a copy of the probe object and attaches its
    /// tracepoint program.
    pub fn start() -> Result<KernelEvents, KernelEventsError> {
        let root = tracefs()?;
        let avail = availability(&root);
        if !avail.first().is_some_and(|(_, p)| *p) {
            return Err(KernelEventsError::NoKfreeSkb);
        }
        let path = root.join("events/skb/kfree_skb/format");
        let text = std::fs::read_to_string(&path).map_err(|source| KernelEventsError::Read {
            path: path.clone(),
            source,
        })?;
        let format =
            parse_kfree_skb(&text).map_err(|source| KernelEventsError::Format { path, source })?;
        // A separate instance of the object: its packet ring is shrunk to a page, since only the drop
        // maps and the tracepoint program are used here.
        let mut ebpf = aya::EbpfLoader::new()
            .map_max_entries(maps::EVENTS, 4096)
            .load(probe_object()?)
            .map_err(EbpfStartError::from)?;
        {
            let map = ebpf
                .map_mut(maps::DROP_CONFIG)
                .ok_or(EbpfStartError::MissingMap(maps::DROP_CONFIG))?;
            let mut array: Array<&mut MapData, DropConfig> =
                Array::try_from(map).map_err(|source| KernelEventsError::Map {
                    name: maps::DROP_CONFIG,
                    source,
                })?;
            let config = DropConfig {
                protocol_offset: format.protocol_offset,
                reason_offset: format.reason_offset.unwrap_or(NO_REASON),
            };
            array
                .set(0, config, 0)
                .map_err(|source| KernelEventsError::Map {
                    name: maps::DROP_CONFIG,
                    source,
                })?;
        }
        let prog: &mut TracePoint = ebpf
            .program_mut(KFREE_SKB_PROGRAM)
            .ok_or(EbpfStartError::MissingProgram(KFREE_SKB_PROGRAM))?
            .try_into()
            .map_err(KernelEventsError::Program)?;
        prog.load().map_err(KernelEventsError::Program)?;
        prog.attach("skb", "kfree_skb")
            .map_err(KernelEventsError::Program)?;
        Ok(KernelEvents {
            ebpf,
            format,
            description: describe(&avail),
            reported: BTreeMap::new(),
        })
    }

    /// Current totals per key, summed over CPUs.
    fn totals(&self) -> Result<BTreeMap<DropKey, u64>, KernelEventsError> {
        let err = |source| KernelEventsError::Map {
            name: maps::DROPS,
            source,
        };
        let map = self
            .ebpf
            .map(maps::DROPS)
            .ok_or(EbpfStartError::MissingMap(maps::DROPS))?;
        let drops: PerCpuHashMap<&MapData, DropKey, u64> =
            PerCpuHashMap::try_from(map).map_err(err)?;
        let mut out = BTreeMap::new();
        for item in drops.iter() {
            let (key, per_cpu) = item.map_err(err)?;
            out.insert(key, per_cpu.iter().sum());
        }
        Ok(out)
    }

    /// The drops since the previous call (since the start for the first), as a `DROP` record.
    pub fn take_block(&mut self) -> Option<Vec<u8>> {
        let totals = self.totals().ok()?;
        let mut block = DropBlock {
            ts_ns: crate::sys::now_ns(),
            drops: Vec::new(),
        };
        for (key, &total) in &totals {
            let count = total.saturating_sub(self.reported.get(key).copied().unwrap_or(0));
            if count == 0 {
                continue;
            }
            block.drops.push(DropRow {
                protocol: protocol_name(key.protocol),
                reason: self
                    .format
                    .reasons
                    .get(&key.reason)
                    .cloned()
                    .unwrap_or_else(|| key.reason.to_string()),
                count,
            });
        }
        self.reported = totals;
        crate::blocks::encode(crate::blocks::DROPS, &block).ok()
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
            Err(FormatError::MissingField("protocol"))
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
        let avail = vec![
            ("skb:kfree_skb".to_string(), true),
            ("rdma_cma:cm_qp_create".to_string(), false),
            ("ib_mad:*".to_string(), true),
        ];
        let line = describe(&avail);
        assert!(line.contains("unavailable on this kernel: rdma_cma:cm_qp_create"));
        assert!(line.contains("present but not recorded yet: ib_mad:*"));
    }
}
