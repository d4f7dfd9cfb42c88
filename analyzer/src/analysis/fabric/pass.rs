//! The `fabric` command's read: the passes its tables come from, and nothing more (no DCQCN model, no hops),
//! so that it costs what `stats` costs plus the rates pass that tells data packets from the rest.

use roce_capture::Capture;
use roce_core::decode::Frame;
use roce_core::line::LineRates;
use roce_core::passes::Stats;
use roce_core::passes::brief::Brief;
use roce_core::passes::hosts::HostsPass;
use roce_core::passes::rates::RatesPass;
use roce_core::priority::PriorityMap;
use roce_core::recorded::Recorded;

use super::{FabricInputs, FabricReport, analyse};

/// The streaming passes behind [`FabricReport`]: the statistics (flows, CNPs, PFC), the rates pass (each
/// flow's data packets per tap; its bins widen under one budget, so memory stays bounded by flows) and the
/// MAC → host map.
#[derive(Debug)]
pub struct FabricPass {
    stats: Stats,
    rates: RatesPass,
    hosts: HostsPass,
}

impl FabricPass {
    /// `lines` gives each tap the line rate that converts its pause quanta into time; `priorities` how
    /// untagged frames get their priority.
    pub fn new(lines: LineRates, priorities: PriorityMap) -> Self {
        FabricPass {
            stats: Stats::new(lines).with_priorities(priorities),
            rates: RatesPass::new(None, lines),
            hosts: HostsPass::default(),
        }
    }

    /// Feeds one decoded frame to every pass.
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.stats.frame(f);
        let brief = Brief::of(f);
        self.rates.frame(&brief);
        self.hosts.frame(&brief);
    }

    /// The fabric view of everything read from `capture`.
    pub fn finish(self, capture: &Capture) -> FabricReport {
        let (stats, intervals) = self
            .stats
            .finish_with_intervals(capture, &Recorded::of(capture));
        let series = self.rates.finish();
        let hosts = self.hosts.finish();
        analyse(FabricInputs {
            stats: &stats,
            intervals: &intervals,
            hosts: &hosts,
            series: &series,
        })
    }
}
