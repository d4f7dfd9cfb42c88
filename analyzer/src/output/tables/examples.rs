//! One example row of every table the analyzer writes, so that a table without rows still has its columns.
//!
//! serde learns a struct's fields only by serializing a value of it, and a table with no rows has no value to
//! serialize. Each example is a struct literal naming every field, so a field added to a row type fails to
//! compile here until its example says what it holds. Options are `Some` (a nested struct then gives its
//! nested columns, and every column gets the type a real row would give it); maps are empty, as their keys
//! come from the data.

use std::net::{IpAddr, Ipv4Addr};

use super::TableRow;
use crate::analysis::dcqcn::{Fit, FlowSummary, NpPort, NpStream, UnpairedCnps};
use crate::analysis::fabric::{HostRow, PairRow};
use crate::analysis::findings::{Finding, Severity};
use crate::analysis::hist::Percentiles;
use crate::analysis::model_log::ModelEventRow;
use crate::analysis::np::{Pacing, PortCheck, StreamCheck};
use crate::analysis::pauses::Storm;
use roce_core::dcqcn::{Cause, EventKind};
use roce_core::line::{LineRate, LineSource};
use roce_core::nic_counters::check::NicCounterRow;
use roce_core::nic_counters::{Meaning, Status, Vendor};
use roce_core::passes::cnp::CnpRow;
use roce_core::passes::flows::{FlowRow, Naks};
use roce_core::passes::pairing::Method;
use roce_core::passes::pfc::{PauseInterval, PfcRow};
use roce_core::priority::PrioritySource;
use roce_core::processes::FlowProcessRow;
use roce_core::recorded::{CounterDelta, DropInterval, KernelDrop, KernelEventRow, QpProcess};

const IP: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

impl TableRow for FlowRow {
    fn example() -> Self {
        FlowRow {
            iface: 0,
            tap: String::new(),
            src: IP,
            dst: IP,
            dest_qp: 0,
            packets: 0,
            bytes: 0,
            first_ns: 0,
            last_ns: 0,
            mean_gbps: Some(0.0),
            opcodes: Default::default(),
            ect_packets: 0,
            ce_packets: 0,
            psn_gaps: 0,
            retransmissions: 0,
            out_of_order: 0,
            naks: Naks::default(),
            icrc_failures: 0,
            truncated: 0,
            pcp: Some(0),
            dscp: 0,
            priority: Some(0),
            priority_source: Some(PrioritySource::Pcp),
        }
    }
}

impl TableRow for PairRow {
    fn example() -> Self {
        PairRow {
            src: IP,
            dst: IP,
            flows: 0,
            packets: 0,
            bytes: 0,
            gbps: Some(0.0),
            ce_packets: 0,
            ce_fraction: 0.0,
            cnps: 0,
            psn_gaps: 0,
            retransmitted: 0,
            priority: Some(0),
            paused_ns: Some(0),
        }
    }
}

impl TableRow for HostRow {
    fn example() -> Self {
        HostRow {
            host: IP,
            mac: Some(String::new()),
            tx_gbps: Some(0.0),
            rx_gbps: Some(0.0),
            cnps_sent: 0,
            cnps_received: 0,
            pauses_sent: Some(0),
            paused_ns: Some(0),
            retransmitted: 0,
        }
    }
}

impl TableRow for CnpRow {
    fn example() -> Self {
        CnpRow {
            iface: 0,
            tap: String::new(),
            src: IP,
            dst: IP,
            dest_qp: 0,
            count: 0,
            first_ns: 0,
            last_ns: 0,
            pcp: Some(0),
            dscp: 0,
            priority: Some(0),
            priority_source: Some(PrioritySource::Pcp),
        }
    }
}

impl TableRow for PfcRow {
    fn example() -> Self {
        PfcRow {
            iface: 0,
            tap: String::new(),
            src_mac: String::new(),
            kind: "pfc",
            priority: Some(0),
            frames: 0,
            xoff: 0,
            xon: 0,
            pauses: 0,
            paused_ns: 0,
        }
    }
}

impl TableRow for PauseInterval {
    fn example() -> Self {
        PauseInterval {
            iface: 0,
            src_mac: String::new(),
            priority: Some(0),
            start_ns: 0,
            end_ns: 0,
        }
    }
}

impl TableRow for CounterDelta {
    fn example() -> Self {
        CounterDelta {
            name: String::new(),
            first: 0,
            last: 0,
            delta: 0,
            reset: false,
            samples: 0,
            first_ns: 0,
            last_ns: 0,
        }
    }
}

impl TableRow for NicCounterRow {
    fn example() -> Self {
        NicCounterRow {
            host: String::new(),
            device: String::new(),
            port: 0,
            vendor: Some(Vendor::Mlx5),
            netdev: Some(String::new()),
            meaning: Meaning::CnpSent,
            priority: Some(0),
            status: Status::Counted,
            counters: Vec::new(),
            first: Some(0),
            last: Some(0),
            delta: Some(0),
            at_least: Some(false),
            wraps: Some(0),
            samples: Some(0),
            first_ns: Some(0),
            last_ns: Some(0),
            compared_with: Some(String::new()),
            captured: Some(0),
            captured_edge: Some(0),
            captured_fraction: Some(0.0),
        }
    }
}

impl TableRow for KernelDrop {
    fn example() -> Self {
        KernelDrop {
            protocol: String::new(),
            reason: String::new(),
            count: 0,
            ip: Some(roce_capture::blocks::records::IpDrops::Rocev2),
        }
    }
}

impl TableRow for DropInterval {
    fn example() -> Self {
        DropInterval {
            from_ns: 0,
            to_ns: 0,
            count: 0,
            drops: Vec::new(),
        }
    }
}

impl TableRow for QpProcess {
    fn example() -> Self {
        QpProcess {
            qp_num: 0,
            pid: 0,
            comm: String::new(),
            seen_ns: 0,
            tracepoint: String::new(),
            qp_type: Some(String::new()),
            local: Some(IP),
            remote: Some(IP),
            addrs: Vec::new(),
        }
    }
}

impl TableRow for KernelEventRow {
    fn example() -> Self {
        KernelEventRow {
            ts_ns: 0,
            tracepoint: String::new(),
            pid: 0,
            tid: 0,
            comm: String::new(),
            qp_num: Some(0),
            summary: String::new(),
            fields: String::new(),
        }
    }
}

impl TableRow for FlowProcessRow {
    fn example() -> Self {
        FlowProcessRow {
            iface: 0,
            src: IP,
            dst: IP,
            dest_qp: 0,
            sender_qp: Some(0),
            sender_pid: Some(0),
            sender_comm: Some(String::new()),
            sender_pairing: Some(String::new()),
            receiver_pid: Some(0),
            receiver_comm: Some(String::new()),
        }
    }
}

impl TableRow for UnpairedCnps {
    fn example() -> Self {
        UnpairedCnps {
            src: IP,
            dst: IP,
            dest_qp: 0,
            iface: 0,
            tap: String::new(),
            cnps: 0,
            first_ns: 0,
            last_ns: 0,
            reason: "",
            basis: Some(""),
            cnps_needed: Some(0),
            // A list is one text column (JSON), whatever it holds.
            candidates: Vec::new(),
        }
    }
}

impl TableRow for NpStream {
    fn example() -> Self {
        NpStream {
            receiver: IP,
            sender: IP,
            sender_qp: 0,
            receiver_qp: Some(0),
            iface: 0,
            tap: String::new(),
            knobs_of: String::new(),
            check: StreamCheck {
                cnps: 0,
                min_gap_ns: 0,
                min_spacing_ns: Some(0),
                spacing_ns: Some(Percentiles::default()),
                below_min_gap: 0,
                answered: 0,
                ce_to_cnp_ns: Some(Percentiles::default()),
                pacing: Pacing::Unknown,
            },
        }
    }
}

impl TableRow for NpPort {
    fn example() -> Self {
        NpPort {
            receiver: IP,
            iface: 0,
            tap: String::new(),
            knobs_of: String::new(),
            min_gap_ns: 0,
            check: PortCheck {
                cnps: 0,
                qps: 0,
                interleaved: 0,
                below_min_gap: 0,
                per_port: false,
            },
        }
    }
}

impl TableRow for Storm {
    fn example() -> Self {
        Storm {
            src_mac: String::new(),
            priority: Some(0),
            start_ns: 0,
            end_ns: 0,
        }
    }
}

impl TableRow for Finding {
    fn example() -> Self {
        Finding {
            code: "",
            severity: Severity::Info,
            title: String::new(),
            detail: String::new(),
            evidence: Vec::new(),
        }
    }
}

impl TableRow for ModelEventRow {
    fn example() -> Self {
        ModelEventRow {
            sender: IP,
            receiver: IP,
            receiver_qp: 0,
            t_ns: 0,
            event: EventKind::Cnp,
            cause: Cause::Cnp,
            rc_before_gbps: 0.0,
            rc_gbps: 0.0,
            rt_gbps: 0.0,
            alpha: 0.0,
        }
    }
}

/// A DCQCN flow's numbers, for the examples of the tables that carry them.
pub fn flow_summary() -> FlowSummary {
    FlowSummary {
        sender: IP,
        receiver: IP,
        sender_qp: Some(0),
        receiver_qp: 0,
        iface: 0,
        tap: String::new(),
        line: LineRate {
            bps: 0,
            source: LineSource::IfSpeed,
        },
        cnp_iface: Some(0),
        cnp_tap: Some(String::new()),
        pairing: Some(Method::CmMad),
        priority: Some(0),
        priority_source: Some(PrioritySource::Pcp),
        rp_enabled: Some(true),
        np_enabled: Some(true),
        knobs_of: String::new(),
        cnps: 0,
        ce_packets: 0,
        above_model_fraction: 0.0,
        stretches_compared: 12,
        paused_bins: 0,
        model_events: 0,
        min_rc_gbps: Some(0.0),
        max_alpha: Some(0.0),
        fit: Some(Fit {
            dce_tcp_g: 0,
            rpg_gd: 0,
            error_gbps: 0.0,
            given_error_gbps: 0.0,
            stretches_compared: 0,
            candidates: 0,
        }),
        model_stopped_ns: Some(0),
    }
}
