//! Which tracepoints to record and, once their format files are read, what the recorder copies of each.

use std::collections::BTreeMap;

use tracer_common::kevents::{
    BYTES_LEN, FIELD_DATA_LOC, FIELD_SIGNED, FieldSpec, MODE_COUNT, MODE_EVENT, NO_FIELD,
    TraceConfig,
};

use super::format::{FormatError, parse_fields, parse_id, parse_symbolics};

/// A `--tracepoint` argument that is not `SYSTEM:EVENT[:FIELD,...]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--tracepoint {0:?}: expected SYSTEM:EVENT or SYSTEM:EVENT:FIELD,FIELD...")]
pub struct BadSpec(pub String);

/// A tracepoint to record, and which of its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSpec {
    /// The tracepoint's system (`rdma_cma`).
    pub system: String,
    /// The event in it (`cm_qp_create`).
    pub event: String,
    /// Fields to copy, in order. Numbers and byte arrays are told apart by the format file; at most
    /// [`MAX_FIELDS`](tracer_common::kevents::MAX_FIELDS) numbers and
    /// [`MAX_BYTE_FIELDS`](tracer_common::kevents::MAX_BYTE_FIELDS) byte arrays are kept. Empty: the first ones the
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

    /// `system:event`, the name in the tracer's messages and the records.
    pub fn name(&self) -> String {
        format!("{}:{}", self.system, self.event)
    }

    /// Parses `--tracepoint SYSTEM:EVENT[:FIELD,FIELD...]`.
    pub fn parse(arg: &str) -> Result<TraceSpec, BadSpec> {
        let bad = || BadSpec(arg.to_string());
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
    /// The field's kernel name.
    pub name: String,
    /// Size in bytes: 1, 2, 4 or 8.
    pub size: u32,
    /// Shown signed.
    pub signed: bool,
    /// Stored in network byte order: swapped before showing.
    pub big_endian: bool,
    /// The kernel's names for its values, from the print format.
    pub symbols: BTreeMap<u64, String>,
}

/// How one copied byte array is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesField {
    /// The field's kernel name.
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
    /// What the recorder program copies, stored in its slot of the configuration map.
    pub config: TraceConfig,
    /// How to show each copied number, in record order.
    pub ints: Vec<IntField>,
    /// How to show each copied byte field, in record order.
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

#[cfg(test)]
mod tests {
    use super::*;

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
