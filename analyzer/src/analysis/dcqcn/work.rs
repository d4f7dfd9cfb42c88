//! A flow the analysis works on after the read: its bins, its pairing and its CNP stream, handed from the pass
//! to the model run and to the model series' choice of columns.

use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::Pair;
use roce_core::passes::rates::FlowSeries;

/// A flow DCQCN acted on, with its CNP stream, waiting for its model to run.
pub(super) struct Work<'a> {
    /// The flow's bins at the tap that saw most of it.
    pub(super) series: &'a FlowSeries,
    /// How its CNP stream was tied to it, if one was.
    pub(super) pair: Option<&'a Pair>,
    /// Its CNP stream, the tap the CNPs are taken from, and how many there are.
    pub(super) cnp: Option<(FlowKey, u32, u64)>,
    /// CE-marked packets in the flow's bins.
    pub(super) ce: u64,
}
