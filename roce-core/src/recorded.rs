//! What the tracer recorded beside the packets, read back from the capture's custom blocks: the DCQCN knobs,
//! how each sampled NIC counter moved, the kernel's drops and events, and which process owns which QP. The
//! block format itself lives in [`roce_capture::blocks`]; this module gives it meaning. It knows nothing of
//! the flows: tying the QPs' processes to the flow table is the job of the `processes` module, which stands on this one.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use roce_capture::blocks::read;
use roce_capture::blocks::records::{self, IpDrops};
use roce_capture::{Capture, CustomBlock};
use serde::Serialize;
use serde_json::Value;

use crate::priority::{PriorityMap, PriorityMapError, is_priority_file};

/// Everything the tracer recorded beside the packets, read from the blocks in one go.
///
/// Every command that looks at the blocks (`stats` and `report` at their end, `dcqcn` for its knobs) reads
/// them into this one value and hands it to whatever needs a part of it, so that no consumer parses the
/// capture's block list again, and each part means the same to all of them. It is read after the frames:
/// a block may come after the first frames, or with a later file of the capture.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// Every NIC's DCQCN configuration and QoS files (`KNOB`), the captured interfaces first
    /// ([`RecordedEcn`] says how they are ordered and which one speaks for the model).
    pub ecn: Vec<RecordedEcn>,
    /// The DSCP → priority map of the first NIC in `ecn` whose QoS setup was recorded, or why it was
    /// refused; `None` when none was. The analysis lays `--dscp-map` over it ([`PriorityMap::effective`]).
    pub priorities: Option<Result<PriorityMap, PriorityMapError>>,
    /// How each sampled NIC counter moved (`CTRS`), by name.
    pub counters: Vec<CounterDelta>,
    /// The same counters by meaning, per RDMA port the tracer described or counted (`KNOB` and `CTRS`).
    pub nics: Vec<crate::nic_counters::ports::NicPort>,
    /// The kernel's drops summed over the `DROP` blocks.
    pub kernel_drops: Vec<KernelDrop>,
    /// The `EVNT` blocks merged over the capture (empty without `--kernel-events`).
    pub kernel_events: KernelEvents,
}

impl Recorded {
    /// Reads every record of `blocks` (blocks of another PEN, or not ours, are skipped).
    pub fn read(blocks: &[CustomBlock]) -> Recorded {
        let ecn = recorded_ecn(blocks);
        let priorities = ecn
            .iter()
            .find_map(|r| PriorityMap::from_files(&r.iface, &r.files));
        Recorded {
            priorities,
            ecn,
            counters: counter_deltas(blocks),
            nics: crate::nic_counters::ports::nic_ports(
                &read::<records::Knobs>(blocks).collect::<Vec<_>>(),
                &read::<records::Counters>(blocks).collect::<Vec<_>>(),
            ),
            kernel_drops: kernel_drops(blocks),
            kernel_events: kernel_events(blocks),
        }
    }

    /// What `capture` recorded, once it has been read to its end (the blocks come with the files).
    pub fn of(capture: &Capture) -> Recorded {
        Recorded::read(capture.custom_blocks())
    }
}

/// One NIC's DCQCN configuration as the tracer recorded it in the capture's first `KNOB` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEcn {
    /// The interface the knobs belong to.
    pub iface: String,
    /// Whether the tracer captured on that interface (its NIC is then likely a sender or receiver of the
    /// captured traffic, not merely present on the host).
    pub captured: bool,
    /// Each file of its `ecn/` directory (`roce_rp/NAME`, `roce_np/enable/3`, ...) with its value, by path.
    pub files: Vec<(String, String)>,
    /// The addresses of the host the NIC is in (its RoCE GIDs), which tell whose knobs these are; empty when
    /// the record does not say (written before it could), or an address did not parse.
    pub addrs: Vec<IpAddr>,
}

impl RecordedEcn {
    /// `base` with every recorded file applied on top (so that model options set elsewhere survive), or the
    /// first value the model refuses, naming its file.
    pub fn config(
        &self,
        base: &crate::dcqcn::EcnConfig,
    ) -> Result<crate::dcqcn::EcnConfig, crate::dcqcn::DcqcnError> {
        let mut c = base.clone();
        for (file, value) in self.files.iter().filter(|(f, _)| !is_priority_file(f)) {
            c.set(file, value).map_err(|e| {
                crate::dcqcn::DcqcnError::Invalid(format!("{}/{file}: {e}", self.iface))
            })?;
        }
        Ok(c)
    }
}

/// Every interface's DCQCN configuration (`roce_rp/`, `roce_np/` and their `enable/N`) recorded in the
/// capture's `KNOB` blocks (one per file: merged captures from several hosts bring each host's): the captured
/// interfaces first, then the others, each group in the order of the blocks and by name within one. A NIC
/// recorded again alike (a rotated file repeats its knobs) is listed once. Several NICs may have been
/// configured differently; the RP model takes the first, and a check of the receiver's CNPs picks the
/// receiver's by its addresses.
fn recorded_ecn(blocks: &[CustomBlock]) -> Vec<RecordedEcn> {
    let mut out: Vec<RecordedEcn> = Vec::new();
    for record in read::<records::Knobs>(blocks) {
        let mut by_iface: BTreeMap<&str, Vec<(String, String)>> = BTreeMap::new();
        for (path, v) in &record.knobs {
            if let Some((iface, file)) = path.split_once('/') {
                by_iface
                    .entry(iface)
                    .or_default()
                    .push((file.to_string(), v.clone()));
            }
        }
        for (iface, files) in by_iface {
            let r = RecordedEcn {
                iface: iface.to_string(),
                captured: record.captured.iter().any(|c| c == iface),
                addrs: record
                    .addrs
                    .get(iface)
                    .map(|v| v.iter().filter_map(|a| a.trim().parse().ok()).collect())
                    .unwrap_or_default(),
                files,
            };
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    // Stable: block and name order within each group.
    out.sort_by_key(|r| !r.captured);
    out
}

/// How much one NIC counter moved while the capture ran: the first and last samples the tracer recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterDelta {
    /// The counter's path under the sysfs root, e.g. `class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent`.
    pub name: String,
    /// The counter's value in the first sample.
    pub first: u64,
    /// The counter's value in the last sample.
    pub last: u64,
    /// last − first; 0 when the counter went backwards (a reset), with `reset` set.
    pub delta: u64,
    /// The counter went backwards between two samples (a driver reload or a reset).
    pub reset: bool,
    /// Samples the tracer recorded for this counter.
    pub samples: u64,
    /// When the first sample was taken (the packets' clock).
    pub first_ns: u64,
    /// When the last sample was taken.
    pub last_ns: u64,
}

/// The deltas of every counter sampled in the capture's `CTRS` blocks, by name.
fn counter_deltas(blocks: &[CustomBlock]) -> Vec<CounterDelta> {
    let mut out: std::collections::BTreeMap<String, CounterDelta> =
        std::collections::BTreeMap::new();
    for sample in read::<records::Counters>(blocks) {
        let ts = sample.ts_ns;
        for (name, value) in sample.counters {
            let e = out.entry(name.clone()).or_insert(CounterDelta {
                name: name.clone(),
                first: value,
                last: value,
                delta: 0,
                reset: false,
                samples: 0,
                first_ns: ts,
                last_ns: ts,
            });
            e.reset |= value < e.last;
            e.last = value;
            e.last_ns = ts;
            e.samples += 1;
        }
    }
    out.into_values()
        .map(|mut d| {
            d.delta = if d.reset { 0 } else { d.last - d.first };
            d
        })
        .collect()
}

/// Kernel drops recorded by `roce-tracer --kernel-events`, summed over the capture's `DROP` blocks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelDrop {
    /// `ipv4`, `ipv6`, `roce_v1`, `mac_control`.
    pub protocol: String,
    /// The kernel's drop reason.
    pub reason: String,
    /// Packets dropped.
    pub count: u64,
    /// For the `ipv4` and `ipv6` rows, what they count: RoCEv2 only, or every IP drop (an upper bound on
    /// RoCEv2's); `None` for other protocols and for tracers that did not say.
    pub ip: Option<IpDrops>,
}

impl KernelDrop {
    fn of(row: records::DropRow, ip: Option<IpDrops>) -> Self {
        let is_ip = matches!(row.protocol.as_str(), "ipv4" | "ipv6");
        KernelDrop {
            protocol: row.protocol,
            reason: row.reason,
            count: row.count,
            ip: ip.filter(|_| is_ip),
        }
    }
}

/// The drops of every `DROP` block, summed per protocol, reason and what IP rows count.
fn kernel_drops(blocks: &[CustomBlock]) -> Vec<KernelDrop> {
    let mut sums: BTreeMap<(String, String, Option<IpDrops>), u64> = BTreeMap::new();
    for record in read::<records::Drops>(blocks) {
        for row in record.drops {
            let d = KernelDrop::of(row, record.ip);
            *sums.entry((d.protocol, d.reason, d.ip)).or_insert(0) += d.count;
        }
    }
    sums.into_iter()
        .map(|((protocol, reason, ip), count)| KernelDrop {
            protocol,
            reason,
            count,
            ip,
        })
        .collect()
}

/// What `roce-tracer --kernel-events` could record on the traced host: the record's own type.
pub type TracepointStatus = records::Tracepoints;

/// One event of an `EVNT` block.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelEvent {
    /// The packets' clock.
    pub ts_ns: u64,
    /// `system:event`.
    pub tracepoint: String,
    /// The process and thread the tracepoint fired in, and the thread's name.
    pub pid: u32,
    /// The thread id (equal to `pid` for a process's main thread).
    pub tid: u32,
    /// The thread's name when the event fired.
    pub comm: String,
    /// The tracepoint's own fields, by the names its tracefs format gives them.
    pub fields: serde_json::Map<String, Value>,
}

impl KernelEvent {
    /// A numeric field, if the event has it (a QP number, a return code).
    pub fn number(&self, field: &str) -> Option<u64> {
        self.fields.get(field)?.as_u64()
    }

    /// A signed field (return codes are negative errnos).
    pub fn signed(&self, field: &str) -> Option<i64> {
        self.fields.get(field)?.as_i64()
    }

    /// A text field (device and reason names).
    pub fn text(&self, field: &str) -> Option<&str> {
        self.fields.get(field)?.as_str()
    }

    /// The IP address of a socket-address field (`srcaddr`, `dstaddr`).
    pub fn ip(&self, field: &str) -> Option<IpAddr> {
        let text = self.text(field)?;
        text.parse::<SocketAddr>()
            .map(|a| a.ip())
            .or_else(|_| text.parse::<IpAddr>())
            .ok()
    }

    /// The addresses of a field holding a list of them as text (`addrs`), IPv4-mapped IPv6 ones as IPv4;
    /// entries that are not addresses, and the unspecified address, are skipped.
    pub fn ips(&self, field: &str) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = Vec::new();
        let texts = self.fields.get(field).and_then(Value::as_array);
        for t in texts.into_iter().flatten().filter_map(Value::as_str) {
            if let Ok(ip) = t.parse::<IpAddr>().map(|ip| ip.to_canonical())
                && !ip.is_unspecified()
                && !out.contains(&ip)
            {
                out.push(ip);
            }
        }
        out
    }

    /// The kernel's name for a field's value (`event_name`), or the number.
    pub fn named(&self, field: &str) -> Option<String> {
        self.text(&format!("{field}_name"))
            .map(str::to_string)
            .or_else(|| self.fields.get(field).map(|v| v.to_string()))
    }

    /// The process as `comm[pid]`.
    pub fn process(&self) -> String {
        format!("{}[{}]", self.comm, self.pid)
    }

    /// One line saying what happened: the QP, the CM event, the MAD.
    pub fn summary(&self) -> String {
        let (_, event) = self
            .tracepoint
            .split_once(':')
            .unwrap_or(("", &self.tracepoint));
        let mut parts = vec![event.to_string()];
        if let Some(q) = self.number("qp_num").or_else(|| self.number("lqpn")) {
            parts.push(format!("QP {q:#08x}"));
        }
        if let Some(t) = self.text("qp_type_name").or_else(|| self.text("type")) {
            parts.push(t.to_string());
        }
        if let Some(s) = self.text("state") {
            parts.push(s.to_string());
        }
        if self.fields.contains_key("event") {
            parts.push(self.named("event").unwrap_or_default());
        }
        if let Some(s) = self.signed("status").filter(|&s| s != 0) {
            parts.push(format!("status {s}"));
        }
        if let Some(c) = self.number("mgmt_class") {
            parts.push(format!(
                "class {c:#04x} method {:#04x}",
                self.number("method").unwrap_or(0)
            ));
            if let Some(a) = self.number("attr_id") {
                parts.push(format!("attr {a:#06x}"));
            }
        }
        if let (Some(s), Some(d)) = (self.text("srcaddr"), self.text("dstaddr")) {
            parts.push(format!("{s} → {d}"));
        }
        parts.retain(|p| !p.is_empty());
        parts.join(" ")
    }
}

/// The `skb:kfree_skb` drops of one interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DropInterval {
    /// Where the interval starts (the packets' clock).
    pub from_ns: u64,
    /// Where it ends.
    pub to_ns: u64,
    /// All protocols and reasons.
    pub count: u64,
    /// The counts per protocol and reason.
    pub drops: Vec<KernelDrop>,
}

/// A counted tracepoint's total over the capture, per key (`rdma_core:cq_poll` per CQ).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventCount {
    /// `system:event`.
    pub tracepoint: String,
    /// `cq_id=5`.
    pub key: String,
    /// Times it fired for this key.
    pub events: u64,
    /// The summed field (`rc`: completions polled) and its total.
    pub sum_field: Option<String>,
    /// The summed field's total over the capture.
    pub sum: u64,
}

/// Everything the capture's `EVNT` blocks hold, merged over the blocks (and the files, for a rotated capture
/// read as one).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KernelEvents {
    /// Which tracepoints were attached, and which could not be.
    pub tracepoints: TracepointStatus,
    /// `EVNT` blocks read.
    pub blocks: u64,
    /// In time order.
    pub events: Vec<KernelEvent>,
    /// In time order; one per interval the tracer reported, quiet ones included.
    pub drop_intervals: Vec<DropInterval>,
    /// Per-key totals of the tracepoints the tracer counts rather than records one by one.
    pub counts: Vec<EventCount>,
    /// Events the tracer's ring lost before they reached the file.
    pub lost: u64,
}

impl KernelEvents {
    /// No `EVNT` block at all: the capture was not made with `--kernel-events`.
    pub fn is_empty(&self) -> bool {
        self.blocks == 0
    }

    /// Events per tracepoint.
    pub fn per_tracepoint(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in &self.events {
            *out.entry(e.tracepoint.clone()).or_insert(0) += 1;
        }
        out
    }
}

fn push_unique(into: &mut Vec<String>, items: Vec<String>) {
    for i in items {
        if !into.contains(&i) {
            into.push(i);
        }
    }
}

impl From<records::Event> for KernelEvent {
    fn from(e: records::Event) -> Self {
        KernelEvent {
            ts_ns: e.ts_ns,
            tracepoint: e.tracepoint,
            pid: e.pid,
            tid: e.tid,
            comm: e.comm,
            fields: e.fields,
        }
    }
}

/// Reads the capture's `EVNT` blocks. Malformed parts are skipped, never fatal.
fn kernel_events(blocks: &[CustomBlock]) -> KernelEvents {
    let mut out = KernelEvents::default();
    let mut drops: BTreeMap<(u64, u64), DropInterval> = BTreeMap::new();
    let mut counts: BTreeMap<(String, String, Option<String>), (u64, u64)> = BTreeMap::new();
    for record in read::<records::Events>(blocks) {
        out.blocks += 1;
        let (from, to) = (record.from_ns, record.to_ns);
        out.lost += record.lost;
        if let Some(t) = record.tracepoints {
            push_unique(&mut out.tracepoints.attached, t.attached);
            push_unique(&mut out.tracepoints.unavailable, t.unavailable);
            for (name, fields) in t.incomplete {
                out.tracepoints.incomplete.entry(name).or_insert(fields);
            }
        }
        out.events
            .extend(record.events.into_iter().map(KernelEvent::from));
        // Continuation blocks of a busy interval carry no drops: an interval counts once either way.
        let interval = drops.entry((from, to)).or_insert(DropInterval {
            from_ns: from,
            to_ns: to,
            count: 0,
            drops: Vec::new(),
        });
        for d in record
            .drops
            .into_iter()
            .map(|r| KernelDrop::of(r, record.ip))
        {
            interval.count += d.count;
            match interval
                .drops
                .iter_mut()
                .find(|x| x.protocol == d.protocol && x.reason == d.reason)
            {
                Some(x) => x.count += d.count,
                None => interval.drops.push(d),
            }
        }
        for c in record.counts {
            let key = c
                .key
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let sum = c.sum.into_iter().next();
            let e = counts
                .entry((
                    c.tracepoint,
                    key,
                    sum.as_ref().map(|(name, _)| name.clone()),
                ))
                .or_insert((0, 0));
            e.0 += c.events;
            e.1 += sum.map_or(0, |(_, v)| v);
        }
    }
    out.events.sort_by_key(|e| e.ts_ns);
    out.drop_intervals = drops.into_values().collect();
    out.counts = counts
        .into_iter()
        .map(|((tracepoint, key, sum_field), (events, sum))| EventCount {
            tracepoint,
            key,
            events,
            sum_field,
            sum,
        })
        .collect();
    out
}

/// Tracepoints whose events name a QP the process they fire in owns: the kernel creating a QP for a
/// kernel consumer (`cm_qp_create`), and a process connecting (`cm_send_req`) or accepting
/// (`cm_send_rep`) through the RDMA connection manager with its QP.
pub const QP_TRACEPOINTS: [&str; 3] = [
    "rdma_cma:cm_qp_create",
    "rdma_cma:cm_send_req",
    "rdma_cma:cm_send_rep",
];

/// The pseudo tracepoint of `roce-tracer`'s snapshots of `rdma res show qp`: every QP the kernel tracks, with
/// the process that created it (`fields`: `device`, `port`, `lqpn`, `rqpn`, `type`, `state`, and `pid`,
/// `comm` for a user QP, `addrs` for the addresses of the QP's port from its GID table), taken at start and
/// every interval. Unlike the tracepoints it also sees QPs made with verbs alone and QPs made before the
/// capture; the event's time is the snapshot's.
pub const RDMA_RES_QP: &str = "rdma_res:qp";

/// A QP and the process that owns it, from the kernel events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QpProcess {
    /// The QP number the process owns.
    pub qp_num: u32,
    /// The owning process.
    pub pid: u32,
    /// The process's name.
    pub comm: String,
    /// When the QP was first seen (created, or connected for a QP created before the capture).
    pub seen_ns: u64,
    /// Which tracepoint saw it first.
    pub tracepoint: String,
    /// `RC`, `UD`, ... when the tracepoint said.
    pub qp_type: Option<String>,
    /// The host the QP is on, and its peer, from the connection's addresses when the kernel gave them. For
    /// a snapshot QP, `local` is one of its port's addresses, an IPv4 one first.
    pub local: Option<IpAddr>,
    /// The connection's peer address, when known.
    pub remote: Option<IpAddr>,
    /// Every address the QP's host is known by: the connection's local address, or all of a snapshot
    /// port's addresses (a RoCE port has several: IPv4, link-local and global IPv6). A flow's end matches
    /// the QP only at one of them; empty, the host is unknown and any matches.
    pub addrs: Vec<IpAddr>,
}

impl QpProcess {
    /// `comm[pid]`, how the tables and the report name a process.
    pub fn process(&self) -> String {
        format!("{}[{}]", self.comm, self.pid)
    }

    /// Whether the QP can be on the host at `ip`: one of its addresses, or any host when they are unknown.
    pub fn may_be_on(&self, ip: IpAddr) -> bool {
        same_host(&self.addrs, &[ip])
    }
}

/// Every QP the kernel events tie to a process, in the order they were first seen. A QP number seen again
/// with another process (numbers are reused after a QP is destroyed) is a new row.
pub fn qp_processes(events: &KernelEvents) -> Vec<QpProcess> {
    let mut out: Vec<QpProcess> = Vec::new();
    for e in &events.events {
        let snapshot = e.tracepoint == RDMA_RES_QP;
        if !snapshot && !QP_TRACEPOINTS.contains(&e.tracepoint.as_str()) {
            continue;
        }
        let (qp_field, type_field) = if snapshot {
            ("lqpn", "type")
        } else {
            ("qp_num", "qp_type_name")
        };
        // A failed creation reports QP 0.
        let Some(qp) = e.number(qp_field).and_then(|q| u32::try_from(q).ok()) else {
            continue;
        };
        if qp == 0 || e.signed("rc").is_some_and(|rc| rc != 0) {
            continue;
        }
        let (local, addrs) = if snapshot {
            let addrs = e.ips("addrs");
            let local = addrs
                .iter()
                .find(|a| a.is_ipv4())
                .or(addrs.first())
                .copied();
            (local, addrs)
        } else {
            let local = e.ip("srcaddr").map(|ip| ip.to_canonical());
            let local = local.filter(|ip| !ip.is_unspecified());
            (local, local.into_iter().collect())
        };
        let known = out
            .iter_mut()
            .rev()
            .find(|q| q.qp_num == qp && same_host(&q.addrs, &addrs));
        match known {
            Some(q) if q.pid == e.pid => {
                // The same QP seen again: fill in what the first event lacked.
                q.local = q.local.or(local);
                q.remote = q.remote.or(e.ip("dstaddr"));
                q.qp_type = q.qp_type.take().or(e.text(type_field).map(str::to_string));
                for a in addrs {
                    if !q.addrs.contains(&a) {
                        q.addrs.push(a);
                    }
                }
            }
            _ => out.push(QpProcess {
                qp_num: qp,
                pid: e.pid,
                comm: e.comm.clone(),
                seen_ns: e.ts_ns,
                tracepoint: e.tracepoint.clone(),
                qp_type: e.text(type_field).map(str::to_string),
                local,
                remote: e.ip("dstaddr").filter(|ip| !ip.is_unspecified()),
                addrs,
            }),
        }
    }
    out
}

/// Whether two sets of a host's addresses can be the same host: they share one, or either is unknown
/// (empty). The one test of a QP's host, for events of the same QP and for a flow's end alike.
fn same_host(a: &[IpAddr], b: &[IpAddr]) -> bool {
    a.is_empty() || b.is_empty() || a.iter().any(|x| b.contains(x))
}

/// A kernel event as a table row: the fields as JSON text, since every tracepoint has its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelEventRow {
    /// The packets' clock.
    pub ts_ns: u64,
    /// `system:event`.
    pub tracepoint: String,
    /// The process the event fired in.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The thread's name.
    pub comm: String,
    /// The QP the event names, if any (`qp_num` or `lqpn`).
    pub qp_num: Option<u64>,
    /// One line a person reads.
    pub summary: String,
    /// Every field, as a JSON object.
    pub fields: String,
}

/// Flattens events into table rows.
pub fn kernel_event_rows(events: &[KernelEvent]) -> Vec<KernelEventRow> {
    events
        .iter()
        .map(|e| KernelEventRow {
            ts_ns: e.ts_ns,
            tracepoint: e.tracepoint.clone(),
            pid: e.pid,
            tid: e.tid,
            comm: e.comm.clone(),
            qp_num: e.number("qp_num").or_else(|| e.number("lqpn")),
            summary: e.summary(),
            fields: Value::Object(e.fields.clone()).to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_capture::blocks::{COUNTERS, DROPS, KNOBS, PEN, encode};

    #[test]
    fn recorded_knobs_prefer_a_captured_interface() {
        let knobs = |captured: serde_json::Value| {
            let v = serde_json::json!({"ts_ns": 1, "captured": captured, "knobs": {
                "eth0/roce_rp/rpg_gd": "9", "eth1/roce_rp/rpg_gd": "11", "eth1/roce_rp/enable/3": "1",
            }});
            [CustomBlock {
                pen: PEN,
                data: encode(KNOBS, &v).unwrap(),
            }]
        };
        let first = |c| {
            let r = recorded_ecn(&knobs(c)).into_iter().next().unwrap();
            let gd = r.config(&Default::default()).unwrap().rp.rpg_gd;
            (r.iface, r.captured, gd)
        };
        assert_eq!(
            first(serde_json::json!(["eth1"])),
            ("eth1".to_string(), true, 11)
        );
        // A mirror port without knobs, or an older tracer's block without the list: the first by name.
        assert_eq!(
            first(serde_json::json!(["mirror0"])),
            ("eth0".to_string(), false, 9)
        );
        assert_eq!(first(serde_json::Value::Null).0, "eth0");
    }

    #[test]
    fn counter_deltas_and_drops() {
        let block = |kind, v: serde_json::Value| CustomBlock {
            pen: PEN,
            data: encode(kind, &v).unwrap(),
        };
        let blocks = [
            block(
                COUNTERS,
                serde_json::json!({"ts_ns": 10, "counters": {"a/np_cnp_sent": 100, "b/x": 9}}),
            ),
            block(
                COUNTERS,
                serde_json::json!({"ts_ns": 20, "counters": {"a/np_cnp_sent": 130, "b/x": 2}}),
            ),
            block(
                DROPS,
                serde_json::json!({"ts_ns": 20, "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": 3}]}),
            ),
            block(
                DROPS,
                serde_json::json!({"ts_ns": 30, "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": 4}]}),
            ),
        ];
        let d = counter_deltas(&blocks);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].name.as_str(), d[0].delta, d[0].samples, d[0].reset),
            ("a/np_cnp_sent", 30, 2, false)
        );
        assert_eq!((d[1].delta, d[1].reset), (0, true));
        let k = kernel_drops(&blocks);
        assert_eq!(k.len(), 1);
        assert_eq!(k[0].count, 7);
    }

    /// The writer says whether its IP rows are RoCEv2's alone; the sums keep that apart, and other
    /// protocols' rows never carry it.
    #[test]
    fn drops_say_what_their_ip_rows_count() {
        let drops = |ip: serde_json::Value| CustomBlock {
            pen: PEN,
            data: encode(
                DROPS,
                &serde_json::json!({"version": 1, "ts_ns": 1, "ip": ip, "drops": [
                    {"protocol": "ipv4", "reason": "NO_SOCKET", "count": 2},
                    {"protocol": "mac_control", "reason": "NOT_SPECIFIED", "count": 1}]}),
            )
            .unwrap(),
        };
        let k = kernel_drops(&[
            drops("rocev2".into()),
            drops("rocev2".into()),
            drops("any".into()),
        ]);
        let row = |p: &str, ip| {
            k.iter()
                .find(|d| d.protocol == p && d.ip == ip)
                .map(|d| d.count)
        };
        assert_eq!(row("ipv4", Some(IpDrops::Rocev2)), Some(4));
        assert_eq!(row("ipv4", Some(IpDrops::Any)), Some(2));
        assert_eq!(row("mac_control", None), Some(3));
        assert_eq!(k.len(), 3, "{k:?}");
        let json = serde_json::to_value(&k[0]).unwrap();
        assert_eq!(json["ip"], "rocev2", "{json}");
    }

    #[test]
    fn recorded_knobs_of_both_ends() {
        let knob = |k: &serde_json::Value| CustomBlock {
            pen: PEN,
            data: encode(KNOBS, k).unwrap(),
        };
        let block = knob(&serde_json::json!({"ts_ns": 1, "knobs": {
            "eth1/roce_rp/rpg_gd": "9",
            "eth0/roce_rp/rpg_gd": "10\n",
            "eth0/roce_rp/clamp_tgt_rate": "1",
            "eth0/roce_rp/rpg_max_rate": "25000",
            "eth0/roce_rp/enable/3": "1",
            "eth0/roce_rp/enable/4": "0",
            "eth0/roce_np/min_time_between_cnps": "8",
            "eth0/roce_np/cnp_802p_prio": "7",
            "eth0/roce_np/enable/3": "1",
            "eth0/roce_rp/new_knob": "5",
            "eth2/roce_np/cnp_dscp": "99",
        }}));
        let all = recorded_ecn(std::slice::from_ref(&block));
        let names: Vec<&str> = all.iter().map(|r| r.iface.as_str()).collect();
        assert_eq!(names, ["eth0", "eth1", "eth2"]);
        let base = crate::dcqcn::EcnConfig::default();
        let c = &all[0].config(&base).unwrap();
        assert_eq!(
            (c.rp.rpg_gd, c.rp.clamp_tgt_rate, c.rp.rpg_max_rate),
            (10, true, 25_000)
        );
        assert_eq!(
            (c.rp_enable.get(3), c.rp_enable.get(4)),
            (Some(true), Some(false))
        );
        assert_eq!((c.np.min_time_between_cnps, c.np.cnp_802p_prio), (8, 7));
        assert_eq!(c.np_enable.get(3), Some(true));
        assert_eq!(c.ignored, ["roce_rp/new_knob"]);
        // A value out of range refuses that interface's set, naming the file.
        let err = all[2].config(&base).unwrap_err().to_string();
        assert!(
            err.contains("eth2/roce_np/cnp_dscp") && err.contains("99"),
            "{err}"
        );
        let other = CustomBlock {
            pen: 1,
            data: b"KNOB{}".to_vec(),
        };
        assert!(recorded_ecn(&[other]).is_empty());
    }

    /// Captures of two hosts merged: each file's `KNOB` block brings its host's NIC, both named `eth0`, told
    /// apart by their addresses; a rotated file repeating one of them adds nothing.
    #[test]
    fn the_knob_blocks_of_several_files_are_all_read() {
        let knob = |addr: &str, gap: &str| CustomBlock {
            pen: PEN,
            data: encode(
                KNOBS,
                &serde_json::json!({"ts_ns": 1, "captured": ["eth0"],
                    "knobs": {"eth0/roce_np/min_time_between_cnps": gap},
                    "addrs": {"eth0": [addr]}}),
            )
            .unwrap(),
        };
        let blocks = [
            knob("10.0.0.1", "4"),
            knob("10.0.0.2", "50"),
            knob("10.0.0.1", "4"),
        ];
        let all = recorded_ecn(&blocks);
        let seen: Vec<(String, &str)> = all
            .iter()
            .map(|r| (r.addrs[0].to_string(), r.files[0].1.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                ("10.0.0.1".to_string(), "4"),
                ("10.0.0.2".to_string(), "50")
            ]
        );
    }

    /// The priority map comes from the first NIC that recorded its QoS setup, even when the NIC whose knobs
    /// the model takes (a captured one) recorded none; a NIC without QoS files gives no map at all.
    #[test]
    fn the_priority_map_is_the_first_recorded_one() {
        let knob = |knobs: serde_json::Value| CustomBlock {
            pen: PEN,
            data: encode(
                KNOBS,
                &serde_json::json!({"ts_ns": 1, "captured": ["eth0"], "knobs": knobs}),
            )
            .unwrap(),
        };
        let r = Recorded::read(&[knob(serde_json::json!({
            "eth0/roce_rp/rpg_gd": "9",
            "eth1/trust": "dscp",
            "eth1/dscp2prio/26": "4",
        }))]);
        assert_eq!(r.ecn[0].iface, "eth0");
        let map = r.priorities.unwrap().unwrap();
        assert_eq!(map.source, "recorded (eth1)");
        assert_eq!(map.changes, [(26, 4)]);
        let without = Recorded::read(&[knob(serde_json::json!({"eth0/roce_rp/rpg_gd": "9"}))]);
        assert!(without.priorities.is_none());
        assert!(Recorded::read(&[]).kernel_events.is_empty());
    }
}
