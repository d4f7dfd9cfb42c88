//! The comments on the packets a finding names. Most findings are about flows, streams or hosts as a whole,
//! and their evidence is a line of numbers, not a frame; these point at packets, and only at packets the
//! analysis itself singled out:
//!
//! - `go_back_n_loss` and `timeout_retransmission`: each packet of the flows they name whose PSN the flow
//!   had already sent (the flows table's `retransmissions`, frame by frame);
//! - `network_loss`: each packet whose PSN came late and filled a gap (the table's `out_of_order`);
//! - `ce_without_cnps`: the first CE-marked packet of each flow it names, at the tap its rates come from;
//! - `pfc_storm`: each PFC or PAUSE frame that started or renewed the pause of a storm, at the tap that saw it.
//!
//! The per-frame verdicts come from the flows pass itself, run again over the same frames
//! ([`FlowsPass::observe`]); its counts are held against the first read's at the end, so that a file that
//! changed in between cannot leave comments that disagree with the findings.

use rustc_hash::FxHashMap;

use roce_core::decode::{ECN_CE, Frame, Kind, mac_to_string};
use roce_core::passes::flows::{FlowKey, FlowsPass};
use roce_core::passes::psn::PsnEvent;
use roce_wire::pfc::MacControlRepr;

use crate::analysis::Analysis;
use crate::analysis::findings::{filled_gaps, retransmitted, storm_evidence, unanswered_ce};

/// One storm's pause, at the tap that saw it.
#[derive(Debug)]
struct Storm {
    iface: u32,
    src_mac: String,
    priority: Option<u8>,
    start_ns: u64,
    end_ns: u64,
    text: String,
}

/// The packets the findings point at, found frame by frame.
#[derive(Debug)]
pub(super) struct Marks {
    psn: FlowsPass,
    /// By tap and flow, the finding and the comment of its packets.
    sent_again: FxHashMap<(u32, FlowKey), (&'static str, String)>,
    late: FxHashMap<(u32, FlowKey), String>,
    first_ce: FxHashMap<(u32, FlowKey), String>,
    storms: Vec<Storm>,
    /// Comments written, by finding.
    pub(super) commented: std::collections::BTreeMap<&'static str, u64>,
}

/// ` at TAP` when the capture has several taps: the one a comment is about.
fn at(taps: usize, tap: &str) -> String {
    if taps > 1 {
        format!(" at {tap}")
    } else {
        String::new()
    }
}

impl Marks {
    /// The marks of analysis `a` of a capture of `taps` taps.
    pub(super) fn new(a: &Analysis, taps: usize) -> Self {
        let raised = |code: &str| a.findings.iter().any(|f| f.code == code);
        let key = |src, dst, dest_qp| FlowKey { src, dst, dest_qp };
        let mut sent_again = FxHashMap::default();
        let mut late = FxHashMap::default();
        for r in &a.stats.flows {
            let k = (r.iface, key(r.src, r.dst, r.dest_qp));
            if let Some((code, line)) = retransmitted(&a.stats, r).filter(|(c, _)| raised(c)) {
                let text = format!(
                    "rocetrace: {code}: {line}; this packet carries a PSN the flow had already sent"
                );
                sent_again.insert(k, (code, text));
            }
            if let Some(line) = filled_gaps(r).filter(|_| raised("network_loss")) {
                late.insert(
                    k,
                    format!(
                        "rocetrace: network_loss: {line}; this packet's PSN came late and fills one of them"
                    ),
                );
            }
        }
        let mut first_ce = FxHashMap::default();
        if raised("ce_without_cnps") {
            for (f, line) in unanswered_ce(&a.stats, &a.dcqcn) {
                let s = &f.summary;
                first_ce.insert(
                    (s.iface, key(s.sender, s.receiver, s.receiver_qp)),
                    format!(
                        "rocetrace: ce_without_cnps: {line}; this is the flow's first CE-marked packet{}",
                        at(taps, &s.tap)
                    ),
                );
            }
        }
        let mut storms = Vec::new();
        if raised("pfc_storm") {
            for s in &a.pauses.storms {
                // The storm is one of the pause intervals; its tap is the interval's.
                for i in a.pauses.intervals.iter().filter(|i| {
                    i.src_mac == s.src_mac
                        && i.priority == s.priority
                        && i.start_ns == s.start_ns
                        && i.end_ns == s.end_ns
                }) {
                    storms.push(Storm {
                        iface: i.iface,
                        src_mac: s.src_mac.clone(),
                        priority: s.priority,
                        start_ns: s.start_ns,
                        end_ns: s.end_ns,
                        text: format!(
                            "rocetrace: pfc_storm: {}; this frame started or renewed that pause",
                            storm_evidence(s)
                        ),
                    });
                }
            }
        }
        Marks {
            psn: FlowsPass::default(),
            sent_again,
            late,
            first_ce,
            storms,
            commented: Default::default(),
        }
    }

    /// The finding comments of frame `f` (whose flow is `key`), into `out`.
    pub(super) fn comments(&mut self, f: &Frame<'_>, key: Option<FlowKey>, out: &mut Vec<String>) {
        let verdict = self.psn.observe(f);
        if let Some(key) = key.filter(|_| f.kind == Kind::Roce) {
            let k = (f.iface, key);
            let found = match verdict {
                Some(PsnEvent::Retransmission) => self.sent_again.get(&k).map(|(c, t)| (*c, t)),
                Some(PsnEvent::OutOfOrder) => self.late.get(&k).map(|t| ("network_loss", t)),
                _ => None,
            };
            if let Some((code, text)) = found {
                out.push(text.clone());
                *self.commented.entry(code).or_default() += 1;
            }
            if f.ip.is_some_and(|ip| ip.ecn == ECN_CE)
                && let Some(text) = self.first_ce.remove(&k)
            {
                out.push(text);
                *self.commented.entry("ce_without_cnps").or_default() += 1;
            }
        }
        if let Some(ctl) = &f.mac_control
            && !self.storms.is_empty()
        {
            let mac = f.src_mac.map(|m| mac_to_string(&m));
            for s in &self.storms {
                let pausing = match ctl {
                    MacControlRepr::Pfc(p) => s.priority.is_some_and(|q| {
                        p.enabled(q) && p.quanta.get(usize::from(q)).is_some_and(|&t| t > 0)
                    }),
                    MacControlRepr::Pause { quanta } => s.priority.is_none() && *quanta > 0,
                    MacControlRepr::Other { .. } => false,
                };
                // A frame inside the interval that pauses its priority found it paused and renewed it (or,
                // at its start, began it): docs/report.md's rule of the PFC pass.
                if pausing
                    && s.iface == f.iface
                    && mac.as_deref() == Some(s.src_mac.as_str())
                    && (s.start_ns..s.end_ns).contains(&f.ts_ns)
                {
                    out.push(s.text.clone());
                    *self.commented.entry("pfc_storm").or_default() += 1;
                }
            }
        }
    }

    /// Whether the second read's flows pass counted what the first one did, for every flow the comments
    /// point into: sent-again and late PSNs alike. `None` when they agree, else the first flow that does not.
    pub(super) fn disagreement(self, a: &Analysis) -> Option<String> {
        let again: FxHashMap<(u32, FlowKey), (u64, u64)> = self
            .psn
            .finish()
            .into_iter()
            .map(|r| ((r.iface, r.key()), (r.retransmissions, r.out_of_order)))
            .collect();
        a.stats.flows.iter().find_map(|r| {
            let k = (r.iface, r.key());
            let now = again.get(&k).copied().unwrap_or((0, 0));
            (now != (r.retransmissions, r.out_of_order)).then(|| {
                format!(
                    "{} → {} QP 0x{:06x} at {}: {} sent again and {} late in the analysis, {} and {} when read again",
                    r.src, r.dst, r.dest_qp, r.tap, r.retransmissions, r.out_of_order, now.0, now.1
                )
            })
        })
    }
}
