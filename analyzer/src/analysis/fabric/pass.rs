//! The `fabric` command's read: the passes its tables come from, and nothing more (no DCQCN model, no hops),
//! so that it costs what `stats` costs plus the rates pass that tells data packets from the rest.

use roce_capture::Capture;
use roce_core::decode::Decoder;
use roce_core::line::LineRates;
use roce_core::passes::Stats;
use roce_core::passes::brief::Brief;
use roce_core::passes::hosts::HostsPass;
use roce_core::passes::rates::RatesPass;
use roce_core::priority::PriorityMap;
use roce_core::recorded::Recorded;

use super::{FabricInputs, FabricReport, analyse};
use crate::analysis::{InOrder, read_with};

/// The passes that need every frame in order: the rates pass (each flow's data packets per tap; its bins
/// widen under one budget shared by all flows, so memory stays bounded by flows) and the MAC → host map.
struct InOrderPasses {
    rates: RatesPass,
    hosts: HostsPass,
}

impl InOrder for InOrderPasses {
    #[inline]
    fn brief(&mut self, b: &Brief) {
        self.rates.frame(b);
        self.hosts.frame(b);
    }
}

/// The fabric view of `capture`, read on `threads` threads (the same whatever their number, as for
/// `report`): the statistics (flows, CNPs, PFC) spread over them, the rates and hosts passes beside or on
/// the tail. `lines` gives each tap the line rate that converts its pause quanta into time; `priorities`
/// how untagged frames get their priority. `progress` hears the bytes read so far.
pub fn read(
    capture: &mut Capture,
    decoder: Decoder,
    threads: usize,
    lines: LineRates,
    priorities: PriorityMap,
    progress: impl FnMut(u64),
) -> FabricReport {
    let make = || Stats::new(lines).with_priorities(priorities.clone());
    let passes = InOrderPasses {
        rates: RatesPass::new(None, lines),
        hosts: HostsPass::default(),
    };
    let (stats, passes) = read_with(capture, decoder, threads, make, passes, progress);
    let (stats, intervals) = stats.finish_with_intervals(capture, &Recorded::of(capture));
    let series = passes.rates.finish();
    let hosts = passes.hosts.finish();
    analyse(FabricInputs {
        stats: &stats,
        intervals: &intervals,
        hosts: &hosts,
        series: &series,
    })
}
