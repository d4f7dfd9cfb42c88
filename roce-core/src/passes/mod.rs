//! Streaming passes: each folds frames into a table whose size depends on flows, priorities and time,
//! never on the number of packets, so a 100 GB capture needs no more memory than a 1 MB one.

pub mod brief;
pub mod capture;
pub mod cnp;
pub mod flow_index;
pub mod flows;
pub mod hosts;
pub mod nic_side;
pub mod occupancy;
pub mod pairing;
pub mod pfc;
pub mod psn;
pub mod rates;
pub mod threads;

use serde::Serialize;

use crate::decode::Frame;
use crate::line::LineRates;
use crate::recorded::Recorded;
use roce_capture::Capture;

/// Everything `stats` reports, with the top-level keys of its JSON output.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatsReport {
    /// The capture as a whole: span, counts by kind, files, taps, drops.
    pub capture: capture::CaptureRow,
    /// One row per (tap, flow).
    pub flows: Vec<flows::FlowRow>,
    /// One row per (tap, CNP stream).
    pub cnps: Vec<cnp::CnpRow>,
    /// One row per (tap, PFC source, priority).
    pub pfc: Vec<pfc::PfcRow>,
    /// NIC counters the tracer sampled (`--counters`): how much each moved during the capture.
    pub counters: Vec<crate::recorded::CounterDelta>,
    /// The same counters by meaning, per RDMA port, beside what the capture holds of its host's packets.
    pub nic_counters: Vec<crate::nic_counters::check::NicCheck>,
    /// Kernel drops the tracer counted (`--kernel-events`).
    pub kernel_drops: Vec<crate::recorded::KernelDrop>,
    /// How untagged frames got their priority (see `flows[].priority_source`).
    pub priority_map: crate::priority::PriorityMap,
}

/// The passes behind `stats`, run together over one decode of each frame.
#[derive(Debug)]
pub struct Stats {
    capture: capture::CapturePass,
    flows: flows::FlowsPass,
    cnps: cnp::CnpPass,
    pfc: pfc::PfcPass,
    nic_side: nic_side::NicSidePass,
    lines: LineRates,
    priorities: crate::priority::PriorityMap,
}

impl Stats {
    /// `lines` gives each tap the line rate that converts its pause quanta into time.
    pub fn new(lines: LineRates) -> Self {
        Stats {
            capture: capture::CapturePass::default(),
            flows: flows::FlowsPass::default(),
            cnps: cnp::CnpPass::default(),
            pfc: pfc::PfcPass::new(lines),
            nic_side: nic_side::NicSidePass::default(),
            lines,
            priorities: crate::priority::PriorityMap::default(),
        }
    }

    /// Frames without a VLAN tag take their priority from their DSCP through `map` (unless the capture
    /// holds a map the tracer recorded, which wins).
    pub fn with_priorities(mut self, map: crate::priority::PriorityMap) -> Self {
        self.priorities = map;
        self
    }

    /// Feeds one decoded frame to every pass.
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.capture.frame(f);
        let psn = self.flows.observe(f);
        self.nic_side.frame(f, psn);
        self.cnps.frame(f);
        self.pfc.frame(f);
    }

    /// The tables; a damaged file's part ends at its damage (named in `capture.error`). `recorded` is what
    /// the capture's blocks hold: its priority map, counters and drops join the tables.
    pub fn finish(self, capture: &Capture, recorded: &Recorded) -> StatsReport {
        self.finish_with_intervals(capture, recorded).0
    }

    /// The report and every PFC/PAUSE interval behind its `paused_ns`.
    pub fn finish_with_intervals(
        self,
        capture: &Capture,
        recorded: &Recorded,
    ) -> (StatsReport, Vec<pfc::PauseInterval>) {
        let end = self.capture.last_ns();
        let (mut pfc, intervals) = self.pfc.finish_with_intervals(end);
        let mut flows = self.flows.finish();
        let mut cnps = self.cnps.finish();
        let taps = capture.taps();
        let name = |iface: u32| {
            taps.get(iface as usize)
                .map(|t| t.name.clone())
                .unwrap_or_default()
        };
        flows.iter_mut().for_each(|r| r.tap = name(r.iface));
        cnps.iter_mut().for_each(|r| r.tap = name(r.iface));
        pfc.iter_mut().for_each(|r| r.tap = name(r.iface));
        let map = self.priorities.effective(recorded.priorities.as_ref());
        for r in &mut flows {
            let p = map.resolve(r.pcp, Some(r.dscp));
            (r.priority, r.priority_source) = (p.map(|p| p.0), p.map(|p| p.1));
        }
        for r in &mut cnps {
            let p = map.resolve(r.pcp, Some(r.dscp));
            (r.priority, r.priority_source) = (p.map(|p| p.0), p.map(|p| p.1));
        }
        let nic_counters = crate::nic_counters::check::compare(
            &recorded.nics,
            &nic_side::Packets {
                pass: &self.nic_side,
                flows: &flows,
                cnps: &cnps,
            },
        );
        let report = StatsReport {
            capture: self.capture.finish(capture, self.lines),
            flows,
            cnps,
            pfc,
            counters: recorded.counters.clone(),
            nic_counters,
            kernel_drops: recorded.kernel_drops.clone(),
            priority_map: map,
        };
        (report, intervals)
    }
}
