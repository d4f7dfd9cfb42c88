//! The processes behind the flows: the QPs whose owners the kernel events name ([`crate::recorded`]) matched
//! to the two ends of each flow of the flow table ([`crate::passes::flows`]), and the summary of the kernel
//! events that `stats` and the report give with those labels. It stands above both modules so that neither
//! needs the other: what the tracer recorded is read without knowing the flows, and the flows are counted
//! without knowing what was recorded.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

use crate::passes::flows::FlowRow;
use crate::recorded::{
    DropInterval, EventCount, KernelEvents, QpProcess, TracepointStatus, qp_processes,
};

/// The owner of a QP at one end of a flow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QpOwner {
    /// The QP number.
    pub qp_num: u32,
    /// The owning process.
    pub pid: u32,
    /// The process's name.
    pub comm: String,
    /// For the sender: how its QP was found (`cm_mad`, `reverse_traffic`, ... from the DCQCN pairing, or
    /// `reverse_flow`: the only flow the other way between the two hosts).
    pub pairing: Option<String>,
}

/// A data flow labelled with the processes at its ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowProcess {
    /// The tap the flow was seen at.
    pub iface: u32,
    /// The data's sender.
    pub src: IpAddr,
    /// The data's receiver.
    pub dst: IpAddr,
    /// The receiver's QP (the BTH destination QP).
    pub dest_qp: u32,
    /// The process owning the destination QP, on the receiving host.
    pub receiver: Option<QpOwner>,
    /// The process owning the sender's QP (the flow's pair), on the sending host.
    pub sender: Option<QpOwner>,
}

/// The sender's QP of `f` when it is certain from the flows alone: the one flow going the other way between
/// the same hosts on the same tap (an RC sender's ACKs and read responses come back to its own QP).
pub fn reverse_flow_qp(flows: &[FlowRow], f: &FlowRow) -> Option<u32> {
    let mut back = flows
        .iter()
        .filter(|r| r.iface == f.iface && r.src == f.dst && r.dst == f.src);
    let first = back.next()?;
    back.next().is_none().then_some(first.dest_qp)
}

/// The QP `qp` on `host` while a flow ending at `until_ns` ran: the latest one seen before then. A QP
/// whose host is unknown matches any host.
fn owner_of(qps: &[QpProcess], qp: u32, host: IpAddr, until_ns: u64) -> Option<&QpProcess> {
    qps.iter()
        .filter(|q| q.qp_num == qp && q.may_be_on(host) && q.seen_ns <= until_ns)
        .max_by_key(|q| q.seen_ns)
}

/// Labels each flow whose destination QP, or whose sender's QP, is in `qps`. `sender_qp` gives the
/// sender's QP of a flow and how it was found (the DCQCN pairing in the report, [`reverse_flow_qp`] in
/// `stats`). Flows with neither end known are left out.
pub fn label_flows(
    flows: &[FlowRow],
    sender_qp: &dyn Fn(&FlowRow) -> Option<(u32, String)>,
    qps: &[QpProcess],
) -> Vec<FlowProcess> {
    if qps.is_empty() {
        return Vec::new();
    }
    flows
        .iter()
        .filter_map(|f| {
            let receiver = owner_of(qps, f.dest_qp, f.dst, f.last_ns).map(|q| QpOwner {
                qp_num: q.qp_num,
                pid: q.pid,
                comm: q.comm.clone(),
                pairing: None,
            });
            let sender = sender_qp(f).and_then(|(qp, how)| {
                owner_of(qps, qp, f.src, f.last_ns).map(|q| QpOwner {
                    qp_num: q.qp_num,
                    pid: q.pid,
                    comm: q.comm.clone(),
                    pairing: Some(how),
                })
            });
            (receiver.is_some() || sender.is_some()).then_some(FlowProcess {
                iface: f.iface,
                src: f.src,
                dst: f.dst,
                dest_qp: f.dest_qp,
                receiver,
                sender,
            })
        })
        .collect()
}

/// What `stats` and the report say about the kernel events: everything but the events themselves.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KernelSummary {
    /// Which tracepoints were attached, and which could not be.
    pub tracepoints: TracepointStatus,
    /// `EVNT` blocks read.
    pub blocks: u64,
    /// Events per tracepoint.
    pub events_per_tracepoint: BTreeMap<String, u64>,
    /// Events the tracer's ring lost.
    pub lost: u64,
    /// Every QP whose owner the events name.
    pub qp_processes: Vec<QpProcess>,
    /// The flows labelled with the processes at their ends.
    pub flow_processes: Vec<FlowProcess>,
    /// Every interval the tracer reported, quiet ones included.
    pub drop_intervals: Vec<DropInterval>,
    /// Per-key totals of the counted tracepoints.
    pub counts: Vec<EventCount>,
}

impl KernelSummary {
    /// Summarizes `k`, labelling `flows` (see [`label_flows`] for `sender_qp`).
    pub fn of(
        k: &KernelEvents,
        flows: &[FlowRow],
        sender_qp: &dyn Fn(&FlowRow) -> Option<(u32, String)>,
    ) -> Self {
        let qps = qp_processes(k);
        KernelSummary {
            tracepoints: k.tracepoints.clone(),
            blocks: k.blocks,
            events_per_tracepoint: k.per_tracepoint(),
            lost: k.lost,
            flow_processes: label_flows(flows, sender_qp, &qps),
            qp_processes: qps,
            drop_intervals: k.drop_intervals.clone(),
            counts: k.counts.clone(),
        }
    }
}

/// A labelled flow as a table row (no nested columns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FlowProcessRow {
    /// The tap the flow was seen at.
    pub iface: u32,
    /// The data's sender.
    pub src: IpAddr,
    /// The data's receiver.
    pub dst: IpAddr,
    /// The receiver's QP.
    pub dest_qp: u32,
    /// The sender's QP, when the pairing found it.
    pub sender_qp: Option<u32>,
    /// The process owning the sender's QP.
    pub sender_pid: Option<u32>,
    /// Its name.
    pub sender_comm: Option<String>,
    /// How the sender's QP was found.
    pub sender_pairing: Option<String>,
    /// The process owning the receiver's QP.
    pub receiver_pid: Option<u32>,
    /// Its name.
    pub receiver_comm: Option<String>,
}

/// Flattens labelled flows into table rows.
pub fn flow_process_rows(flows: &[FlowProcess]) -> Vec<FlowProcessRow> {
    flows
        .iter()
        .map(|f| FlowProcessRow {
            iface: f.iface,
            src: f.src,
            dst: f.dst,
            dest_qp: f.dest_qp,
            sender_qp: f.sender.as_ref().map(|o| o.qp_num),
            sender_pid: f.sender.as_ref().map(|o| o.pid),
            sender_comm: f.sender.as_ref().map(|o| o.comm.clone()),
            sender_pairing: f.sender.as_ref().and_then(|o| o.pairing.clone()),
            receiver_pid: f.receiver.as_ref().map(|o| o.pid),
            receiver_comm: f.receiver.as_ref().map(|o| o.comm.clone()),
        })
        .collect()
}
