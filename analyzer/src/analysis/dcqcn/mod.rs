//! What DCQCN did in a capture: the model fed with each sender's CNP arrivals, next to what the sender was
//! seen to send.
//!
//! [`DcqcnPass`] streams the capture once (pairing evidence, per-flow rate bins, and the CNPs' arrival times per
//! sender QP and tap, which wait in the pairing's logs on disk); [`DcqcnPass::finish`] then replays the
//! reaction-point model per paired flow, finds the observed rate change after each burst of CNPs, and fits the
//! two knobs that shape a cut most (alpha gain and cut factor).
//! The model's events are consumed as they are made: the cuts are kept, Rc is integrated over stretches long
//! enough to hold several of the flow's frames (to tell a sender above its limiter from a rate quantised by
//! the bins), and the model series keeps, in each of [`MODEL_COLUMNS`] columns over the capture, only the events a
//! chart of Rc, Rt and alpha needs (the first, the last, and those where each of the three is lowest and
//! highest); every event can also be handed to a caller, who writes them to disk (`report --model-table`).
//! The fit's replays keep nothing but the same stretches' tallies.
//!
//! Bins in which the flow's priority was paused by PFC (or the link by PAUSE) say nothing about the rate
//! limiter: the sender may not send whatever its rate. They are left out of every comparison of model and
//! observation, of the fit, and of the observed cuts.
//!
//! The files, in the order the work happens (how the analysis runs, and whose knobs speak for a host, is
//! `roce_core::dcqcn_options`, shared with `roce-tracer top`): `pass.rs` (the streaming part, and after the read the steps below in order), `cnp_streams.rs`
//! (which tap each CNP stream is taken from), `np_checks.rs` (the notification points' rows), `traffic.rs`
//! (flows summed on the grid), `flow.rs` (one flow's model run beside what it sent, standing on `grid.rs`,
//! `observed.rs`, `window.rs`, `stretches.rs` and `decimate.rs`), `fit.rs` (the knob fit); `work.rs` is a flow
//! waiting for its model, `report.rs` holds the result types every output reads; `read.rs` is the `dcqcn`
//! command's read of a capture, with the PFC pauses.

mod cnp_streams;
mod decimate;
mod fit;
mod flow;
mod grid;
mod np_checks;
mod observed;
mod pass;
mod read;
mod report;
mod stretches;
mod traffic;
mod window;
mod work;

pub use decimate::{CHART_FLOWS, MIN_MODEL_COLUMNS, MODEL_COLUMNS, SHARED_MODEL_COLUMNS};
pub use fit::FIT_CNPS;
pub use pass::{DcqcnPass, OnEvent, Series};
pub use read::read;
pub use report::{
    AggregateBin, BusyFlow, Cut, DcqcnReport, Fit, FlowDcqcn, FlowId, FlowSummary, LinkPeak,
    ModelPoint, NpPort, NpStream, Observed, ObservedCut, RateBin, Traffic, UnpairedCnps,
};
pub use roce_core::dcqcn_options::{DEFAULT_FIT_FLOWS, HostEcn, KnobsOf, Options};
pub use stretches::{ABOVE_MODEL_FACTOR, RESOLVE_FRAMES};
pub use traffic::BUSIEST_FLOWS;
