//! The comment on the first packet of each flow: the flow's line of the `stats` table, and what DCQCN did to
//! it when the analysis modeled it. A flow is what the flows table counts (addresses and destination QP, at
//! one tap), so its first packet is the first frame the table filed under it at that tap.

use rustc_hash::FxHashMap;

use roce_core::decode::{Frame, Kind};
use roce_core::passes::StatsReport;
use roce_core::passes::flows::{FlowKey, FlowRow};
use roce_core::units::fmt_rate;

use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn};

/// The summaries still waiting for their flow's first packet, by tap and flow.
#[derive(Debug)]
pub(super) struct FirstPackets {
    waiting: FxHashMap<(u32, FlowKey), String>,
    /// Summaries written.
    pub(super) commented: u64,
}

impl FirstPackets {
    pub(super) fn new(stats: &StatsReport, dcqcn: &DcqcnReport, taps: usize) -> Self {
        let mut modeled: FxHashMap<(u32, FlowKey), &FlowDcqcn> = FxHashMap::default();
        for f in &dcqcn.flows {
            let s = &f.summary;
            let key = FlowKey {
                src: s.sender,
                dst: s.receiver,
                dest_qp: s.receiver_qp,
            };
            modeled.insert((s.iface, key), f);
        }
        let waiting = stats
            .flows
            .iter()
            .map(|r| {
                let key = r.key();
                let at = (taps > 1).then_some(r.tap.as_str());
                let text = summary(r, at, modeled.get(&(r.iface, key)).copied());
                ((r.iface, key), text)
            })
            .collect();
        FirstPackets {
            waiting,
            commented: 0,
        }
    }

    /// The summary, when `f` is the first packet of its flow at its tap.
    pub(super) fn comment(&mut self, f: &Frame<'_>, key: Option<FlowKey>) -> Option<String> {
        if f.kind != Kind::Roce {
            return None;
        }
        let text = self.waiting.remove(&(f.iface, key?))?;
        self.commented += 1;
        Some(text)
    }

    /// Flows of the table whose first packet the second read never met (it should meet every one).
    pub(super) fn missed(&self) -> usize {
        self.waiting.len()
    }
}

/// A flow in one line: its row of the flows table, and its DCQCN model in brief.
fn summary(r: &FlowRow, tap: Option<&str>, modeled: Option<&FlowDcqcn>) -> String {
    let at = tap.map_or(String::new(), |t| format!(" at {t}"));
    // The unit `stats` writes the flow's rate in, so that a slow flow does not read `0.00 Gb/s`.
    let rate = r
        .mean_gbps
        .map_or(String::new(), |g| format!(", {} mean", fmt_rate(g * 1e9)));
    let mut text = format!(
        "rocetrace: flow {} → {} QP 0x{:06x}{at}, first packet: {} packets, {} bytes{rate}, CE {}, PSN gaps {}, \
         sent again {}, late {}, NAKs {}",
        r.src,
        r.dst,
        r.dest_qp,
        r.packets,
        r.bytes,
        r.ce_packets,
        r.psn_gaps,
        r.retransmissions,
        r.out_of_order,
        r.naks.total()
    );
    if let Some(f) = modeled {
        let s = &f.summary;
        match (s.sender_qp, s.pairing) {
            (Some(qp), Some(m)) => {
                text.push_str(&format!(
                    "; DCQCN: {} CNPs to QP 0x{qp:06x} (paired by {}), {} model cuts",
                    s.cnps,
                    m.key(),
                    f.cuts.len()
                ));
                if let Some(min) = s.min_rc_gbps {
                    text.push_str(&format!(", lowest Rc {min:.2} Gb/s"));
                }
            }
            _ => text.push_str("; DCQCN: CE-marked, and no CNP stream was paired with it"),
        }
    }
    text
}
