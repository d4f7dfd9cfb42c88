//! What DCQCN did in a capture: the model fed with each sender's CNP arrivals, next to what the sender was
//! seen to send.
//!
//! [`DcqcnPass`] streams the capture once (pairing evidence, per-flow rate bins, and the CNPs' arrival times per
//! sender QP and tap, which wait in the pairing's logs on disk); [`DcqcnPass::finish`] then replays the reaction-point model per paired flow, finds the observed rate
//! change after each burst of CNPs, and fits the two knobs that shape a cut most (alpha gain and cut factor).
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

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::Serialize;

use roce_core::dcqcn::{
    DcqcnError, Event, EventKind, Knobs, NpKnobs, PriorityEnable, Profile, Rp, replay_with,
    step_guard,
};
use roce_core::decode::Frame;
use roce_core::line::{LineRate, LineRates};

use super::on_disk::{DiskVec, Fixed, Store};
use super::tap_preference;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::occupancy::Peak;
use roce_core::passes::pairing::{Candidate, Method, Pair, Pairing, PairingPass};
use roce_core::passes::pfc::PauseInterval;
use roce_core::passes::rates::{Bin, FlowSeries, RatesPass, gbps, within_line};
use roce_core::priority::{PriorityMap, PrioritySource};

mod options;

pub use options::{DEFAULT_FIT_FLOWS, HostEcn, KnobsOf, Options};
use options::{model_knobs, np_gap};

/// Columns over the capture's span in which the model series of a flow that may be charted is decimated: one
/// per pixel of a report chart, so that the series draws as every event would, in a size that does not grow
/// with the capture.
pub const MODEL_COLUMNS: u64 = 1200;

/// Flows whose model keeps [`MODEL_COLUMNS`] columns: those with the most CNPs (then CE marks), well beyond the
/// report's eight charts and 32 fitted flows, so that every flow a chart or a fit shows is among them.
pub const CHART_FLOWS: usize = 64;

/// Columns shared by the models of all other flows, each getting an equal part (at least
/// [`MIN_MODEL_COLUMNS`], at most [`MODEL_COLUMNS`]). With a column holding at most eight events, the series of
/// thousands of flows stay within some tens of MB however long the capture, where a full resolution for each
/// grew with every second of it. Every event of every flow is in `report --model-table`'s table.
pub const SHARED_MODEL_COLUMNS: u64 = 1 << 16;

/// The coarsest a flow's model series gets: its envelope over a sixteenth of the capture at a time.
pub const MIN_MODEL_COLUMNS: u64 = 16;

/// Which flow a model event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct FlowId {
    /// The data's sender (the reaction point the model stands for).
    pub sender: IpAddr,
    /// The data's receiver (the notification point, which sends the CNPs).
    pub receiver: IpAddr,
    /// The receiver's QP, which names the flow on the wire (data carries no source QP).
    pub receiver_qp: u32,
}

/// CNPs of a flow the fit looks at, from its first: the model and the observed rate are compared up to the
/// last of them. Beyond some thousands of cuts more CNPs do not move the fit, and the candidates' replays stay
/// bounded however long a flow was congested.
pub const FIT_CNPS: usize = 50_000;

/// One rate cut the model made on a CNP, for the chart's markers and the comparison with the observed cuts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cut {
    /// When the model cut, on the capture's clock.
    pub t_ns: u64,
    /// The model's rate limit just before the cut, to show its depth.
    pub rc_before_gbps: f64,
    /// The rate limit the cut left.
    pub rc_after_gbps: f64,
    /// The model's alpha after the cut, which sets how deep the next one goes.
    pub alpha: f64,
}

impl Fixed for Cut {
    const SIZE: usize = 32;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.t_ns.to_le_bytes());
        for v in [self.rc_before_gbps, self.rc_after_gbps, self.alpha] {
            out.extend_from_slice(&v.to_bits().to_le_bytes());
        }
    }
    fn get(b: &[u8]) -> Self {
        let f = |i: usize| f64::from_bits(u64::get(&b[i * 8..]));
        Cut {
            t_ns: u64::get(b),
            rc_before_gbps: f(1),
            rc_after_gbps: f(2),
            alpha: f(3),
        }
    }
}

/// The state of the model at one of its events, kept for the charts of Rc, Rt and alpha.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ModelPoint {
    /// When the event happened, on the capture's clock.
    pub t_ns: u64,
    /// What moved the model (CNP, timer, byte counter...), so a chart can tell cuts from increases.
    pub event: EventKind,
    /// The current rate (Rc), the limit the sender obeys.
    pub rc_gbps: f64,
    /// The target rate (Rt), what the increases climb back towards.
    pub rt_gbps: f64,
    /// The congestion estimate that scales each cut.
    pub alpha: f64,
}

/// What the sender was seen to send in one busy bin, the evidence the model is held against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observed {
    /// Start of the bin.
    pub t_ns: u64,
    /// The flow's mean rate over the bin.
    pub gbps: f64,
    /// Share of the flow's packets in the bin that arrived CE-marked, to show where marking began.
    pub ce_fraction: f64,
    /// The rate implied by the gaps between the flow's packets in this bin (bytes over gap time), which shows
    /// the sender's rate limiter even when the flow was idle part of the bin; null without consecutive packets.
    pub pacing_gbps: Option<f64>,
    /// PFC paused the flow's priority (or PAUSE the link) during some of the bin: left out of every
    /// comparison with the model.
    pub paused: bool,
}

/// The rate change seen after a burst of CNPs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ObservedCut {
    /// The burst's first CNP (as the model sees it, delay applied).
    pub t_ns: u64,
    /// CNPs in the burst, so a lone CNP can be told from a storm.
    pub cnps: u64,
    /// From the first CNP to the start of the lowest bin in the reaction window.
    pub lag_ns: u64,
    /// Mean rate in the unpaused bins just before the burst.
    pub before_gbps: f64,
    /// The lowest unpaused bin rate in the reaction window.
    pub after_gbps: f64,
    /// after / before.
    pub ratio: f64,
}

/// The knob values that make the model follow the observed rate best, by the mean absolute error between
/// what the flow sent and what the model allowed over the stretches after its first CNP (each long enough to
/// hold several frames at the model's rate, none paused; see `FlowSummary::stretches_compared`), up to its
/// [`FIT_CNPS`]th CNP.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fit {
    /// The alpha gain (`dce_tcp_g`) that fitted best.
    pub dce_tcp_g: u32,
    /// The cut factor (`rpg_gd`) that fitted best.
    pub rpg_gd: u32,
    /// The fitted knobs' mean absolute error between model and observation.
    pub error_gbps: f64,
    /// The same error with the knobs the analysis was given, for comparison.
    pub given_error_gbps: f64,
    /// How many stretches the given knobs' error is averaged over, so a fit on few can be discounted.
    pub stretches_compared: usize,
    /// Knob pairs replayed to find it.
    pub candidates: usize,
}

/// One flow DCQCN acted on: the flow in a few numbers, and its series over time. Summaries (the report's
/// `summary.json` and `dcqcn_flows` table) carry the numbers without the series; the series are what the
/// charts draw. The numbers sit in [`FlowSummary`], which the summaries write on their own.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowDcqcn {
    #[serde(flatten)]
    /// The flow's numbers, flattened into the same JSON object as its series.
    pub summary: FlowSummary,
    /// Every CNP the model was fed (delay applied), for the charts' CNP marks; in a temporary file until the
    /// report is written ([`on_disk`]).
    pub cnp_ts_ns: DiskVec<u64>,
    /// The model's cuts, each one a CNP it acted on; in the same file.
    pub cuts: DiskVec<Cut>,
    /// The model's events, decimated: in each column of the report's [`DcqcnReport::model_column_ns`] grid,
    /// the first and last event and those at which Rc, Rt and alpha are lowest and highest, in time order. A
    /// step chart drawn through these looks as one drawn through every event at that resolution.
    pub model: Vec<ModelPoint>,
    /// Width of the columns `model` is decimated in: the report's [`DcqcnReport::model_column_ns`] for the
    /// flows a chart may show, wider for the others when there are many (see [`SHARED_MODEL_COLUMNS`]).
    pub model_column_ns: u64,
    /// The flow's busy bins (a bin that is not here carried no data).
    pub observed: Vec<Observed>,
    /// The rate drops seen after each CNP burst, to set beside the model's cuts.
    pub observed_cuts: Vec<ObservedCut>,
    /// The flow's frame in bits (the largest mean frame of a bin), which sizes the stretches the model is
    /// compared over; the fit needs it after the bins are gone.
    #[serde(skip)]
    pub frame_bits: f64,
}

/// What a [`FlowDcqcn`] is in numbers, without its series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowSummary {
    /// The data's sender (the reaction point).
    pub sender: IpAddr,
    /// The data's receiver (the notification point, which sent the CNPs).
    pub receiver: IpAddr,
    /// The sender's QP as the CNPs name it; null when no CNP stream was paired to the flow.
    pub sender_qp: Option<u32>,
    /// The QP the data is sent to, which names the flow on the wire.
    pub receiver_qp: u32,
    /// The tap the flow's rates come from (the one that saw most of its packets) and its name.
    pub iface: u32,
    /// Name of the tap in `iface`, for people (`FILE:IFACE`).
    pub tap: String,
    /// The line rate of that tap (`line_gbps`, and `line_rate_source`: `if_speed`, `flag` for `--link-speed`,
    /// or `assumed`): the model starts at it and never exceeds it.
    #[serde(flatten)]
    pub line: LineRate,
    /// The tap the model's CNPs come from (the one that saw most of the stream; the rates' tap on a tie) and
    /// its name: a CNP seen at two taps is one CNP.
    pub cnp_iface: Option<u32>,
    /// Name of the tap in `cnp_iface`, for people.
    pub cnp_tap: Option<String>,
    /// How the CNP stream was tied to this flow; null when no CNP stream could be.
    pub pairing: Option<Method>,
    /// The priority of the flow's frames, which decides the PFC pauses that stop it; null when unknown.
    pub priority: Option<u8>,
    /// Where `priority` came from: `pcp` (the VLAN tag) or `dscp` (through the DSCP → priority map).
    pub priority_source: Option<PrioritySource>,
    /// Whether the sender's reaction point is enabled on that priority (`roce_rp/enable/N`); null when
    /// unknown (not recorded, or recorded only for other hosts). A flow whose RP is off ignores its CNPs, and
    /// its model stays at the line rate.
    pub rp_enabled: Option<bool>,
    /// Whether the receiver's notification point is enabled on that priority (`roce_np/enable/N`); null when
    /// unknown, as for `rp_enabled`. Off, the receiver answers no CE mark with a CNP.
    pub np_enabled: Option<bool>,
    /// Whose reaction-point knobs the flow's model (and its fit) ran with: the sender's own when the capture
    /// recorded them (`10.0.0.1's own (eth0)`), else the analysis' knobs and whose those are.
    pub knobs_of: String,
    /// CNPs the model was fed for this flow.
    pub cnps: u64,
    /// CE-marked data packets of the flow (at the tap its rates come from).
    pub ce_packets: u64,
    /// Share of the compared stretches (see `stretches_compared`) in which the flow sent more than 1.2 times
    /// what the modeled Rc allowed plus one frame. Rc is a ceiling, so a sender that obeys its limiter stays
    /// low here, at any rate.
    pub above_model_fraction: f64,
    /// Stretches after the first CNP compared with the model: each starts at a busy bin and holds whole bins
    /// until the model allows 8 of the flow's frames, so that a rate of less than a frame per bin is not
    /// misread; those with a paused bin are left out.
    pub stretches_compared: usize,
    /// Bins with traffic after the first CNP left out of the comparisons because PFC paused the flow.
    pub paused_bins: usize,
    /// Over every event of the model (not only those the decimated series keeps): how many there were, the
    /// lowest Rc and the highest alpha; null without events.
    pub model_events: u64,
    /// The lowest rate limit the model reached: how hard DCQCN squeezed the flow.
    pub min_rc_gbps: Option<f64>,
    /// The highest alpha the model reached: how congested it believed the path to be.
    pub max_alpha: Option<f64>,
    /// The fitted knobs; null when the fit was off, the flow was not among those fitted, or it had nothing to fit.
    pub fit: Option<Fit>,
    /// Null when the model ran to the end of the capture. Otherwise its guard stopped it here (see
    /// [`step_guard`]): `model` and `cuts` stop at this instant, and the comparisons with the observed rate use
    /// only the bins that end before it.
    pub model_stopped_ns: Option<u64>,
}

/// A CNP stream no data flow could be tied to: reported, never dropped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnpairedCnps {
    /// The CNP's sender (the data's receiver).
    pub src: IpAddr,
    /// Where the CNPs went (the data's sender, whose flow could not be found).
    pub dst: IpAddr,
    /// The QP the CNPs are addressed to, the sender's side of the unknown flow.
    pub dest_qp: u32,
    /// The tap the stream is counted at (the one that saw most of its CNPs) and its name.
    pub iface: u32,
    /// Name of the tap in `iface`, for people.
    pub tap: String,
    /// CNPs in the stream, which says how much congestion went unmodelled.
    pub cnps: u64,
    /// The stream's first CNP, to find it in the capture.
    pub first_ns: u64,
    /// The stream's last CNP.
    pub last_ns: u64,
    /// Why it is unpaired: `no_evidence` (no data flow the other way was a candidate), or, when flows were,
    /// `too_few_cnps` (the best candidate's hits could be chance; more CNPs would tell), `all_active` (the
    /// candidates send or are marked nearly all the time, so CNPs after them prove nothing), `tie` (another
    /// candidate's evidence is no chance either), `weak` (enough CNPs, too few hits) or `contested` (another
    /// stream claimed the flow on equal evidence). A wrong pairing would model cuts on a flow that was never
    /// marked, so the analysis reports the candidates instead of guessing (docs/pairing.md).
    pub reason: &'static str,
    /// The evidence compared last (`cm_mad`, `reverse_traffic`, `timing`, `activity`); null without candidates.
    pub basis: Option<&'static str>,
    /// With `too_few_cnps`: the CNPs the best candidate would need, every one after its marks (or while it
    /// sent), to beat chance.
    pub cnps_needed: Option<u64>,
    /// The candidate data flows (from `dst` to `src`, to `receiver_qp`) with their evidence and scores, best
    /// first.
    pub candidates: Vec<Candidate>,
}

impl UnpairedCnps {
    /// Why the stream is unpaired and its candidates' scores, in one line for the console, the report and the
    /// findings.
    pub fn describe(&self) -> String {
        let pct = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{:.0} %", 100.0 * s));
        let cands: Vec<String> = self
            .candidates
            .iter()
            .map(|c| {
                let e = &c.evidence;
                let chance = c
                    .chance
                    .map_or(String::new(), |p| format!(", chance {p:.1e}"));
                format!(
                    "QP 0x{:06x} (CM {}, DETH {}, responses fitted {}, CNPs after its CE {}, CNPs while it sent {}{chance})",
                    c.receiver_qp,
                    e.cm,
                    e.deth,
                    pct(c.reverse_share),
                    pct(c.ce_share),
                    pct(c.active_share)
                )
            })
            .collect();
        match self.basis {
            None => "no data flow the other way to tie it to".into(),
            Some(basis) => format!(
                "{} (by {basis}); candidates: {}",
                match (self.reason, self.cnps_needed) {
                    ("too_few_cnps", Some(n)) => format!(
                        "too few CNPs to rule out chance ({} of the {n} the best candidate would need)",
                        self.cnps
                    ),
                    ("too_few_cnps", None) => "too few CNPs to rule out chance".to_string(),
                    ("all_active", _) =>
                        "the candidates send or are marked nearly all the time, so CNPs \
                                          after them prove nothing"
                            .to_string(),
                    ("weak", _) => "too little evidence".to_string(),
                    ("contested", _) => "another stream claimed the same flow".to_string(),
                    _ => "another candidate answers the CNPs as well".to_string(),
                },
                cands.join(", ")
            ),
        }
    }
}

/// The notification point's check of one CNP stream (receiver → sender, to the sender's QP) at the tap that
/// saw most of it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NpStream {
    /// The NP (the data's receiver), where the CNPs go (the data's sender) and to which QP.
    pub receiver: IpAddr,
    /// Where the CNPs go: the data's sender.
    pub sender: IpAddr,
    /// The sender's QP the CNPs are addressed to.
    pub sender_qp: u32,
    /// The data flow the stream was paired with; null when unpaired (then only the spacing is checked).
    pub receiver_qp: Option<u32>,
    /// The tap the stream is checked at (the one that saw most of it).
    pub iface: u32,
    /// Name of that tap, for people.
    pub tap: String,
    /// Whose `min_time_between_cnps` the stream is checked against: the NP's own when the capture recorded
    /// them (`10.0.0.5's own (eth0)`), else the analysis' knobs and whose those are (a tap at the sender
    /// records the sender's knobs, not the receiver's).
    pub knobs_of: String,
    #[serde(flatten)]
    /// What the check found, flattened into this object.
    pub check: crate::analysis::np::StreamCheck,
}

/// The notification point's check of one receiver port (every CNP one host sent, at one tap).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NpPort {
    /// The host whose CNPs are checked (a notification point).
    pub receiver: IpAddr,
    /// The tap the port is checked at.
    pub iface: u32,
    /// Name of that tap, for people.
    pub tap: String,
    /// Whose `min_time_between_cnps` the port is checked against, as for a stream.
    pub knobs_of: String,
    /// That least gap.
    pub min_gap_ns: u64,
    #[serde(flatten)]
    /// What the check found, flattened into this object.
    pub check: crate::analysis::np::PortCheck,
}

/// Everything the DCQCN analysis found, with the settings it ran with, so a reader can judge the results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DcqcnReport {
    /// `connectx`, `connectx-fixed` (the NIC's integer alpha) or `paper`.
    pub profile: &'static str,
    /// Where the knob values came from: disagreement with the observation usually means different knobs.
    pub knob_source: String,
    /// The values the model ran with.
    pub knobs: Knobs,
    /// The priorities on which the reaction point is on (`roce_rp/enable/N`).
    pub rp_enable: PriorityEnable,
    /// The notification point's knobs from the same source.
    pub np: NpKnobs,
    /// The priorities on which the notification point is on (`roce_np/enable/N`).
    pub np_enable: PriorityEnable,
    /// Knob files the source held that this version does not read.
    pub ignored_knobs: Vec<String>,
    /// The line rate the models ran at (`line_gbps` and `line_rate_source`): every flow's when they agree,
    /// else the fastest of them (each flow states its own); without flows, that of the capture's taps. The
    /// ceiling of the charts. An assumed one makes every output ask for `--link-speed`.
    #[serde(flatten)]
    pub line: LineRate,
    /// Every distinct line rate behind `line`, for the headers that state them.
    #[serde(skip)]
    pub lines: Vec<LineRate>,
    /// Width of the rate bins the observation is measured in.
    pub bin_ns: u64,
    /// Width of the columns in which the `model` series of the flows a chart may show is decimated
    /// ([`MODEL_COLUMNS`] over the capture's span); each flow says its own in `model_column_ns`.
    pub model_column_ns: u64,
    /// The `--bin` width asked for, when the capture's span or its flows needed more bins than the grid may
    /// hold (see [`roce_core::passes::rates::MAX_TOTAL_BINS`]) and `bin_ns` had to be wider; null otherwise.
    pub requested_bin_ns: Option<u64>,
    /// The CNP delay that was applied, which shifts every cut in time.
    pub cnp_delay_ns: i64,
    /// The flows DCQCN acted on, each with its model and observation.
    pub flows: Vec<FlowDcqcn>,
    /// CNP streams no flow could be tied to, so their congestion is not silently lost.
    pub unpaired_cnps: Vec<UnpairedCnps>,
    /// How untagged frames got their priority.
    pub priority_map: PriorityMap,
    /// The NP check per CNP stream (against `np.min_time_between_cnps`), and per receiver port.
    pub np_streams: Vec<NpStream>,
    /// The NP check per receiver port.
    pub np_ports: Vec<NpPort>,
    /// The flows above together, per bin of the rate grid in which any of them sent.
    pub aggregate: Vec<AggregateBin>,
    /// Every data flow on the same grid, congested or not: a saturation test that ran clean still has its
    /// throughput to show.
    pub traffic: Traffic,
}

/// Flows the [`Traffic`] view keeps a series of, the busiest by bytes.
pub const BUSIEST_FLOWS: usize = 8;

/// Every data flow of the capture on the rate grid, each at the tap that saw most of it (so that a packet seen
/// at two taps counts once).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Traffic {
    /// Data flows on the grid.
    pub flows: usize,
    /// Their data packets (those that carry payload), each counted once.
    pub data_packets: u64,
    /// Of them, CE-marked.
    pub ce_packets: u64,
    /// The busiest bin of the busiest link direction, when there was data: each frame's serialization time at
    /// its tap's line rate spread over the bins it spans, so never above that line.
    pub peak: Option<LinkPeak>,
    /// All of them together per busy bin, with the share of their packets that was CE-marked.
    pub aggregate: Vec<AggregateBin>,
    /// The [`BUSIEST_FLOWS`] flows that sent the most bytes, most first.
    pub busiest: Vec<BusyFlow>,
}

/// The busiest bin of one link direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LinkPeak {
    /// The tap it was measured at, and its name.
    pub iface: u32,
    /// Name of the tap in `iface`, for people.
    pub tap: String,
    /// Start of the bin.
    pub t_ns: u64,
    /// The rate over the bin, Gb/s.
    pub gbps: f64,
    /// The tap's line rate, which `gbps` never exceeds.
    #[serde(flatten)]
    pub line: LineRate,
}

/// One of the busiest flows and its rate per busy bin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BusyFlow {
    /// The flow's sender.
    pub sender: IpAddr,
    /// The flow's receiver.
    pub receiver: IpAddr,
    /// The receiver's QP, which names the flow on the wire.
    pub receiver_qp: u32,
    /// The tap its rates come from (the one that saw most of it).
    pub iface: u32,
    /// Bytes the flow sent at its tap, the measure that ranked it.
    pub bytes: u64,
    /// The flow's rate per busy bin, for the throughput chart.
    pub observed: Vec<RateBin>,
}

/// A flow's rate in one busy bin.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RateBin {
    /// Start of the bin.
    pub t_ns: u64,
    /// The flow's mean rate over the bin.
    pub gbps: f64,
}

impl Traffic {
    fn of(
        chosen: &[&FlowSeries],
        grid: Grid,
        peak: Option<Peak>,
        line_of: impl Fn(u32) -> LineRate,
    ) -> Traffic {
        let mut all = Aggregate::default();
        let (mut data_packets, mut ce_packets) = (0u64, 0u64);
        for s in chosen {
            all.add(s);
            data_packets += s.packets();
            ce_packets += s.bins.iter().map(|b| u64::from(b.ce)).sum::<u64>();
        }
        let bytes = |s: &FlowSeries| s.bins.iter().map(|b| b.bytes).sum::<u64>();
        let mut by_bytes: Vec<(u64, &FlowSeries)> = chosen.iter().map(|s| (bytes(s), *s)).collect();
        // Most bytes first; the flow key breaks ties, so the choice is stable.
        by_bytes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.key.cmp(&b.1.key)));
        let busiest = by_bytes
            .into_iter()
            .take(BUSIEST_FLOWS)
            .map(|(bytes, s)| BusyFlow {
                sender: s.key.src,
                receiver: s.key.dst,
                receiver_qp: s.key.dest_qp,
                iface: s.iface,
                bytes,
                observed: within_line(&s.bins, grid.capacity(line_of(s.iface)))
                    .iter()
                    .map(|b| RateBin {
                        t_ns: grid.bin_start(b.index as usize),
                        gbps: gbps(b.bytes, grid.width),
                    })
                    .collect(),
            })
            .collect();
        Traffic {
            flows: chosen.len(),
            data_packets,
            ce_packets,
            peak: peak.map(|p| LinkPeak {
                iface: p.iface,
                tap: String::new(),
                t_ns: grid.bin_start(p.index as usize),
                gbps: p.gbps,
                line: p.line,
            }),
            aggregate: all.finish(grid, &line_of),
            busiest,
        }
    }
}

/// The flows of the report together in one bin of the rate grid.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AggregateBin {
    /// Start of the bin.
    pub t_ns: u64,
    /// The flows' summed rate over the bin.
    pub gbps: f64,
    /// CE-marked packets over packets.
    pub ce_fraction: f64,
}

impl DcqcnReport {
    /// Fills in the taps' names (`FILE:IFACE`) from their indexes.
    pub fn name_taps(&mut self, name: impl Fn(u32) -> String) {
        for f in &mut self.flows {
            f.summary.tap = name(f.summary.iface);
            f.summary.cnp_tap = f.summary.cnp_iface.map(&name);
        }
        for u in &mut self.unpaired_cnps {
            u.tap = name(u.iface);
        }
        for n in &mut self.np_streams {
            n.tap = name(n.iface);
        }
        for n in &mut self.np_ports {
            n.tap = name(n.iface);
        }
        if let Some(p) = &mut self.traffic.peak {
            p.tap = name(p.iface);
        }
    }

    /// The first failure to read a flow's CNP times or cuts back from their temporary file since the last
    /// call: an output written since may lack some of them. All flows share one file.
    pub fn kept_read_error(&self) -> Option<std::io::Error> {
        self.flows
            .iter()
            .find_map(|f| f.cnp_ts_ns.take_error().or_else(|| f.cuts.take_error()))
    }

    /// What the analysis could not do as asked, in words for the console and the report: a bin width that
    /// had to widen, models stopped by their guard.
    pub fn limits(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(asked) = self.requested_bin_ns {
            out.push(format!(
                "the capture's span and flows need more rate bins of the requested {} ns than the grid holds \
                 ({} busy bins over all flows, 2^32 over the span), so the bins are {} ns wide",
                asked,
                roce_core::passes::rates::MAX_TOTAL_BINS,
                self.bin_ns
            ));
        }
        let stopped: Vec<&FlowDcqcn> = self
            .flows
            .iter()
            .filter(|f| f.summary.model_stopped_ns.is_some())
            .collect();
        if let Some(first) = stopped
            .iter()
            .filter_map(|f| f.summary.model_stopped_ns)
            .min()
        {
            out.push(format!(
                "THE DCQCN MODEL OF {} OF {} FLOWS WAS CUT SHORT by its guard, the earliest at {}.{:09} s: their \
                 model, cuts and fit cover only the time before. No real capture needs that many model steps: \
                 look for a timestamp far from the others, or knobs whose increases never reach the maximum \
                 rate (rpg_ai_rate = 0)",
                stopped.len(),
                self.flows.len(),
                first / 1_000_000_000,
                first % 1_000_000_000
            ));
        }
        out
    }
}

/// The streaming part: one decode per frame, state per flow and per CNP stream.
#[derive(Debug)]
pub struct DcqcnPass {
    pairing: PairingPass,
    rates: RatesPass,
    last_ns: u64,
}

/// What [`DcqcnPass::finish_with_series`] gives besides the report: every flow's rate series on the shared
/// grid, for the analyses that look at flows without CNPs (PFC stalls).
#[derive(Debug)]
pub struct Series {
    /// Every data flow's busy bins, CNPs or not.
    pub flows: Vec<FlowSeries>,
    /// Start of the grid's first bin, to turn bin indexes into times.
    pub start_ns: u64,
    /// Width of the grid's bins.
    pub bin_ns: u64,
}

impl DcqcnPass {
    /// A pass with a fixed rate-bin width, or `None` for one chosen from the capture's span; `lines` gives
    /// each tap its line rate, which bounds the links' peak rates.
    pub fn new(bin_ns: Option<u64>, lines: LineRates) -> Self {
        DcqcnPass {
            pairing: PairingPass::default(),
            rates: RatesPass::new(bin_ns, lines),
            last_ns: 0,
        }
    }

    /// Feeds one decoded frame to the pairing (which also logs every CNP's time) and the rates.
    pub fn frame(&mut self, f: &Frame<'_>) {
        self.last_ns = self.last_ns.max(f.ts_ns);
        self.pairing.frame(f);
        self.rates.frame(f);
    }

    /// The report, with `pauses` (the PFC pass's intervals) left out of the comparisons.
    pub fn finish(
        self,
        opts: &Options,
        pauses: &[PauseInterval],
    ) -> Result<DcqcnReport, DcqcnError> {
        Ok(self.finish_with_series(opts, pauses)?.0)
    }

    /// The report, plus every flow's rate series.
    pub fn finish_with_series(
        self,
        opts: &Options,
        pauses: &[PauseInterval],
    ) -> Result<(DcqcnReport, Series), DcqcnError> {
        self.finish_with_events(opts, pauses, &mut |_, _| {})
    }

    /// [`DcqcnPass::finish_with_series`], handing every event of every flow's model to `on_event` as the model
    /// makes it (a flow's events in time order, one flow after another).
    pub fn finish_with_events(
        self,
        opts: &Options,
        pauses: &[PauseInterval],
        on_event: &mut dyn FnMut(&FlowId, &Event),
    ) -> Result<(DcqcnReport, Series), DcqcnError> {
        // Refuse bad knobs before any work (any line rate will do: every one the rule gives is valid).
        Rp::new(opts.profile, &opts.knobs, opts.lines.of(None).mbps())?;
        let pairing = self.pairing.finish();
        let start = self.rates.start_ns();
        let width = self.rates.width_ns();
        let requested_bin_ns = self.rates.requested_width_ns();
        let end = self.last_ns;
        let peak = self.rates.peaks().into_iter().next();
        let mut series = self.rates.finish();
        for s in &mut series {
            s.resolve_priority(&opts.priorities);
        }
        let mut cnp_streams = CnpStreams::new(&pairing);
        // One series per flow: the tap that saw most of it (a flow mirrored twice is not twice as fast).
        let mut best: FxHashMap<FlowKey, &FlowSeries> = FxHashMap::default();
        for s in &series {
            let e = best.entry(s.key).or_insert(s);
            if tap_preference(s.iface, s.packets()) > tap_preference(e.iface, e.packets()) {
                *e = s;
            }
        }
        let mut chosen: Vec<&FlowSeries> = best.into_values().collect();
        chosen.sort_by_key(|s| (s.key, s.iface));
        let grid = Grid { start, width };
        let paused = Paused::new(pauses);
        let mut np = NpChecks::new(opts);
        let mut aggregate = Aggregate::default();
        let traffic = Traffic::of(&chosen, grid, peak, |i| opts.line_of(i));
        // The flows DCQCN acted on, with their CNP streams, in the order their models run.
        let mut work = Vec::new();
        for s in chosen {
            let pair = pairing.of_flow(&s.key);
            let cnp_key = pair.map(|p| FlowKey {
                src: p.receiver,
                dst: p.sender,
                dest_qp: p.sender_qp,
            });
            // Which tap's copy of the stream, and how many CNPs: the times are read from the pairing's logs
            // one flow at a time, below.
            let cnp = cnp_key.and_then(|k| cnp_streams.take(&k, s.iface).map(|(i, n)| (k, i, n)));
            let ce: u64 = s.bins.iter().map(|b| u64::from(b.ce)).sum();
            if cnp.is_some() || ce > 0 {
                aggregate.add(s);
                work.push(Work {
                    series: s,
                    pair,
                    cnp,
                    ce,
                });
            }
        }
        let column_widths = model_columns(&work, start, end);
        let kept = Store::new();
        let mut flows = Vec::with_capacity(work.len());
        for (w, width) in work.into_iter().zip(column_widths) {
            let cnp_ts = w.cnp.map_or_else(Vec::new, |(k, iface, _)| {
                let times = pairing.cnp_times(iface, &k);
                let (min_gap_ns, _) = np_gap(opts, k.src);
                let answers = pairing.ce_triggers(iface, &k, &w.series.key, min_gap_ns);
                np.stream(k, Some(w.series.key.dest_qp), iface, &times, &answers);
                times
            });
            flows.push(analyse_flow(
                w,
                cnp_ts,
                FlowContext {
                    grid,
                    columns: Grid { start, width },
                    end,
                    paused: &paused,
                    opts,
                    kept: &kept,
                },
                &mut *on_event,
            )?);
        }
        if let Some(e) = pairing.spill_error() {
            return Err(DcqcnError::Spill(e.to_string()));
        }
        flows.sort_by(|a, b| {
            b.summary.cnps.cmp(&a.summary.cnps).then(
                (a.summary.sender, a.summary.receiver, a.summary.receiver_qp).cmp(&(
                    b.summary.sender,
                    b.summary.receiver,
                    b.summary.receiver_qp,
                )),
            )
        });
        if opts.fit {
            for f in flows.iter_mut().take(opts.fit_flows) {
                if f.summary.rp_enabled == Some(false) {
                    continue;
                }
                let times = model_times(&f.cnp_ts_ns.to_vec(), opts);
                if !times.is_empty() {
                    let line_mbps = opts.line_of(f.summary.iface).mbps();
                    let (knobs, _) = model_knobs(opts, f.summary.sender, line_mbps);
                    f.summary.fit = fit_knobs(&times, f, grid, end, (opts, knobs))?;
                }
            }
        }
        let mut unpaired_cnps: Vec<UnpairedCnps> = cnp_streams
            .rest()
            .map(|(k, iface, t)| {
                np.stream(k, None, iface, &t, &[]);
                let why = pairing.ambiguous(&k);
                UnpairedCnps {
                    src: k.src,
                    dst: k.dst,
                    dest_qp: k.dest_qp,
                    iface,
                    tap: String::new(),
                    cnps: t.len() as u64,
                    first_ns: t.iter().copied().min().unwrap_or(0),
                    last_ns: t.iter().copied().max().unwrap_or(0),
                    reason: why.map_or("no_evidence", |a| a.reason),
                    basis: why.map(|a| a.basis),
                    cnps_needed: why.and_then(|a| a.cnps_needed),
                    candidates: why.map(|a| a.candidates.clone()).unwrap_or_default(),
                }
            })
            .collect();
        unpaired_cnps.sort_by_key(|u| (std::cmp::Reverse(u.cnps), u.src, u.dst, u.dest_qp));
        let (np_streams, np_ports) = np.finish();
        let lines = lines_used(&flows, opts);
        let line = lines
            .iter()
            .copied()
            .max_by_key(|l| l.bps)
            .unwrap_or(opts.lines.of(None));
        let report = DcqcnReport {
            profile: opts.profile.label(&opts.knobs),
            knob_source: opts.knob_source.clone(),
            knobs: opts.knobs.clone(),
            rp_enable: opts.rp_enable,
            np: opts.np.clone(),
            np_enable: opts.np_enable,
            ignored_knobs: opts.ignored_knobs.clone(),
            line,
            lines,
            bin_ns: width,
            model_column_ns: column_width(start, end, MODEL_COLUMNS),
            requested_bin_ns,
            cnp_delay_ns: opts.cnp_delay_ns,
            flows,
            unpaired_cnps,
            aggregate: aggregate.finish(grid, |i| opts.line_of(i)),
            np_streams,
            np_ports,
            traffic,
            priority_map: opts.priorities.clone(),
        };
        Ok((
            report,
            Series {
                flows: series,
                start_ns: start,
                bin_ns: width,
            },
        ))
    }

    /// The pairing found so far is only final after [`DcqcnPass::finish`]; this is for callers that need the
    /// pairing alone.
    pub fn into_pairing(self) -> Pairing {
        self.pairing.finish()
    }
}

/// The NP checks as the streams are taken: each stream's, and its CNPs gathered per (tap, receiver) for the
/// port checks.
struct NpChecks<'a> {
    opts: &'a Options,
    streams: Vec<NpStream>,
    ports: FxHashMap<(u32, IpAddr), Vec<(u64, u32)>>,
}

/// The distinct line rates the flows' models ran at; without flows, those of every tap of the capture.
fn lines_used(flows: &[FlowDcqcn], opts: &Options) -> Vec<LineRate> {
    let mut lines: Vec<LineRate> = if flows.is_empty() {
        (0..opts.tap_speeds.len() as u32)
            .map(|i| opts.line_of(i))
            .collect()
    } else {
        flows
            .iter()
            .map(|f| opts.line_of(f.summary.iface))
            .collect()
    };
    if lines.is_empty() {
        lines.push(opts.lines.of(None));
    }
    lines.sort_by_key(|l| (l.bps, l.source));
    lines.dedup();
    lines
}

impl<'a> NpChecks<'a> {
    fn new(opts: &'a Options) -> NpChecks<'a> {
        NpChecks {
            opts,
            streams: Vec::new(),
            ports: FxHashMap::default(),
        }
    }

    fn stream(
        &mut self,
        k: FlowKey,
        receiver_qp: Option<u32>,
        iface: u32,
        times: &[u64],
        answers: &[(u64, u64)],
    ) {
        let mut sorted = times.to_vec();
        sorted.sort_unstable();
        self.ports
            .entry((iface, k.src))
            .or_default()
            .extend(sorted.iter().map(|&t| (t, k.dest_qp)));
        let (min_gap_ns, knobs_of) = np_gap(self.opts, k.src);
        self.streams.push(NpStream {
            receiver: k.src,
            sender: k.dst,
            sender_qp: k.dest_qp,
            receiver_qp,
            iface,
            tap: String::new(),
            knobs_of,
            check: crate::analysis::np::check_stream(&sorted, answers, min_gap_ns),
        });
    }

    fn finish(mut self) -> (Vec<NpStream>, Vec<NpPort>) {
        self.streams
            .sort_by_key(|n| (n.receiver, n.sender, n.sender_qp, n.iface));
        let opts = self.opts;
        let mut out: Vec<NpPort> = self
            .ports
            .into_iter()
            .map(|((iface, receiver), mut cnps)| {
                cnps.sort_unstable();
                let (min_gap_ns, knobs_of) = np_gap(opts, receiver);
                NpPort {
                    receiver,
                    iface,
                    tap: String::new(),
                    knobs_of,
                    min_gap_ns,
                    check: crate::analysis::np::check_port(&cnps, min_gap_ns),
                }
            })
            .collect();
        out.sort_by_key(|p| (p.receiver, p.iface));
        (self.streams, out)
    }
}

/// The CNP streams by tap: each stream is taken from one tap, so that a CNP seen at two taps (a switch's
/// ingress and egress, say) is one CNP. The times come from the pairing's logs, which waited on disk while the
/// capture was read, one stream at a time.
#[derive(Debug)]
struct CnpStreams<'a> {
    pairing: &'a Pairing,
    /// Stream → (tap, CNPs there).
    by_key: FxHashMap<FlowKey, Vec<(u32, u64)>>,
}

impl<'a> CnpStreams<'a> {
    fn new(pairing: &'a Pairing) -> CnpStreams<'a> {
        let mut by_key: FxHashMap<FlowKey, Vec<(u32, u64)>> = FxHashMap::default();
        for ((iface, key), n) in pairing.cnp_streams() {
            by_key.entry(key).or_default().push((iface, n));
        }
        CnpStreams { pairing, by_key }
    }

    /// The stream `key` at the tap that saw most of its CNPs (`prefer` on a tie, else the lowest index), and
    /// its CNPs there; the copies at other taps go with it.
    fn take(&mut self, key: &FlowKey, prefer: u32) -> Option<(u32, u64)> {
        let taps = self.by_key.remove(key)?;
        taps.into_iter()
            .max_by_key(|&(iface, n)| (n, iface == prefer, std::cmp::Reverse(iface)))
    }

    /// The streams no flow took, each at its tap with most CNPs.
    fn rest(self) -> impl Iterator<Item = (FlowKey, u32, Vec<u64>)> + 'a {
        let pairing = self.pairing;
        self.by_key.into_iter().filter_map(move |(key, taps)| {
            taps.into_iter()
                .max_by_key(|&(iface, n)| tap_preference(iface, n))
                .map(|(iface, _)| (key, iface, pairing.cnp_times(iface, &key)))
        })
    }
}

/// Bytes, CE marks and packets of many flows per bin index (a map: the busy bins are sparse). Flows to one receiver seen at one tap cross one link direction, whose line bounds
/// their sum: each such group is kept within its line ([`within_line`]) before the groups are added up, so that
/// no bin reads more than the links could carry.
#[derive(Debug, Default)]
struct Aggregate {
    /// (tap, receiver) → the group's bins.
    groups: BTreeMap<(u32, IpAddr), Sums>,
}

/// Per bin index: bytes, CE packets, packets.
type Sums = BTreeMap<u32, (u64, u64, u64)>;

impl Aggregate {
    fn add(&mut self, s: &FlowSeries) {
        let group = self.groups.entry((s.iface, s.key.dst)).or_default();
        for b in &s.bins {
            let e = group.entry(b.index).or_default();
            e.0 = e.0.saturating_add(b.bytes);
            e.1 += u64::from(b.ce);
            e.2 += u64::from(b.packets);
        }
    }

    fn finish(self, grid: Grid, line_of: impl Fn(u32) -> LineRate) -> Vec<AggregateBin> {
        let mut all = Sums::new();
        for ((iface, _), group) in self.groups {
            let bins: Vec<Bin> = group
                .iter()
                .map(|(&index, &(bytes, ce, packets))| Bin {
                    index,
                    bytes,
                    ce: u32::try_from(ce).unwrap_or(u32::MAX),
                    packets: u32::try_from(packets).unwrap_or(u32::MAX),
                    ..Bin::default()
                })
                .collect();
            for b in within_line(&bins, grid.capacity(line_of(iface))) {
                let e = all.entry(b.index).or_default();
                e.0 = e.0.saturating_add(b.bytes);
                e.1 += group.get(&b.index).map_or(0, |g| g.1);
                e.2 += group.get(&b.index).map_or(0, |g| g.2);
            }
        }
        all.into_iter()
            .map(|(i, (bytes, ce, packets))| AggregateBin {
                t_ns: grid.bin_start(i as usize),
                gbps: gbps(bytes, grid.width),
                ce_fraction: ce as f64 / packets.max(1) as f64,
            })
            .collect()
    }
}

/// The shared bin grid: where it starts and how wide each bin is.
#[derive(Debug, Clone, Copy)]
struct Grid {
    start: u64,
    width: u64,
}

impl Grid {
    /// Bytes a link at `line` carries in one bin.
    fn capacity(&self, line: LineRate) -> u64 {
        u64::try_from(u128::from(line.bps) * u128::from(self.width) / 8_000_000_000)
            .unwrap_or(u64::MAX)
    }

    fn bin_start(&self, i: usize) -> u64 {
        self.start
            .saturating_add((i as u64).saturating_mul(self.width))
    }
}

/// The time PFC paused each priority (index 0–7) and 802.3x PAUSE the whole link (index 8), as disjoint
/// sorted spans. Every pause counts, from any source at any tap: a pause anywhere on a priority can hold its
/// senders back through the switches between, and leaving out a bin too many costs a comparison, where
/// keeping a paused one blames the rate limiter for PFC.
#[derive(Debug, Default)]
struct Paused {
    spans: [Vec<(u64, u64)>; 9],
}

impl Paused {
    fn new(pauses: &[PauseInterval]) -> Paused {
        let mut p = Paused::default();
        for i in pauses.iter().filter(|i| i.end_ns > i.start_ns) {
            let k = i.priority.map_or(8, |q| usize::from(q.min(7)));
            p.spans[k].push((i.start_ns, i.end_ns));
        }
        for v in &mut p.spans {
            v.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
            for &(a, b) in v.iter() {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            *v = merged;
        }
        p
    }

    /// Whether a flow on `priority` (any priority when unknown) was paused at some time in `[a, b)`.
    fn during(&self, priority: Option<u8>, a: u64, b: u64) -> bool {
        let hits = |v: &Vec<(u64, u64)>| {
            let k = v.partition_point(|s| s.1 <= a);
            v.get(k).is_some_and(|s| s.0 < b)
        };
        match priority {
            Some(q) => hits(&self.spans[usize::from(q.min(7))]) || hits(&self.spans[8]),
            None => self.spans.iter().any(hits),
        }
    }
}

/// What every flow's analysis shares.
#[derive(Clone, Copy)]
struct FlowContext<'a> {
    grid: Grid,
    /// The columns of the decimated model series.
    columns: Grid,
    end: u64,
    paused: &'a Paused,
    opts: &'a Options,
    /// Where the flow's CNP times and cuts go once its model has run.
    kept: &'a Arc<Store>,
}

/// Width of the columns that cut the span from `start` to `end` into `columns`.
fn column_width(start: u64, end: u64, columns: u64) -> u64 {
    (end.saturating_sub(start) / columns).saturating_add(1)
}

/// A flow DCQCN acted on, with its CNP stream, waiting for its model to run.
struct Work<'a> {
    series: &'a FlowSeries,
    pair: Option<&'a Pair>,
    /// Its CNP stream, the tap the CNPs are taken from, and how many there are.
    cnp: Option<(FlowKey, u32, u64)>,
    /// CE-marked packets in the flow's bins.
    ce: u64,
}

/// Each flow's model column width: [`MODEL_COLUMNS`] for the [`CHART_FLOWS`] with most CNPs, then CE marks
/// (then the flow key, for a stable choice); the other flows share [`SHARED_MODEL_COLUMNS`].
fn model_columns(work: &[Work<'_>], start: u64, end: u64) -> Vec<u64> {
    let rest = work.len().saturating_sub(CHART_FLOWS).max(1) as u64;
    let shared = (SHARED_MODEL_COLUMNS / rest).clamp(MIN_MODEL_COLUMNS, MODEL_COLUMNS);
    let mut widths = vec![column_width(start, end, shared); work.len()];
    let mut rank: Vec<usize> = (0..work.len()).collect();
    rank.sort_by_key(|&i| {
        let w = &work[i];
        (
            std::cmp::Reverse(w.cnp.map_or(0, |c| c.2)),
            std::cmp::Reverse(w.ce),
            w.series.key,
        )
    });
    for i in rank.into_iter().take(CHART_FLOWS) {
        widths[i] = column_width(start, end, MODEL_COLUMNS);
    }
    widths
}

/// The sorted CNP arrival times as the sender's reaction point sees them.
fn model_times(cnp_ts: &[u64], opts: &Options) -> Vec<u64> {
    cnp_ts
        .iter()
        .map(|&t| t.saturating_add_signed(opts.cnp_delay_ns))
        .collect()
}

/// Frames of the flow's size the model must allow in a stretch before the stretch is compared: below a few
/// frames per stretch the observed rate is quantised (one 4 KiB frame in a 10 µs bin reads 3.3 Gb/s whatever
/// the sender's rate), and a sender paced exactly at Rc would read as above it.
pub const RESOLVE_FRAMES: f64 = 8.0;

/// How far above the model's allowance a stretch's bytes must be to count as above it: Rc is a ceiling, and a
/// sender that obeys it stays under it except for the frame straddling the stretch's start (the allowance
/// adds one frame for it) and the jitter of the queues on the way to the tap.
pub const ABOVE_MODEL_FACTOR: f64 = 1.2;

/// Model versus observation over stretches the capture can resolve, built as the model's events come.
///
/// A stretch starts at a busy bin and runs over whole bins (idle ones included) until the model's Rc,
/// integrated over it, allows [`RESOLVE_FRAMES`] of the flow's frames; the next one starts at the next busy bin.
/// A stretch counts as above the model when the flow sent more than [`ABOVE_MODEL_FACTOR`] × that allowance
/// plus one frame: an obedient sender sends at most the allowance plus the frame it had started at the
/// stretch's start, whatever its rate, where a sender ignoring its CNPs sends far more at any rate. A sender
/// that has sent that much before the model allows the full count is above whatever follows, so its stretch
/// ends there (a model squeezed to a few Mb/s would otherwise take longer than the capture to allow it).
/// Stretches that hold a PFC-paused bin or end after a guard stop are left out, as bins are.
#[derive(Debug)]
struct Stretches<'a> {
    observed: &'a [Observed],
    window: Window,
    /// The flow's frame, bits.
    frame_bits: f64,
    /// The first bin not yet in a stretch or passed over.
    next: usize,
    open: Option<Stretch>,
    t: u64,
    rc: f64,
    tally: Tally,
}

/// A stretch being built.
#[derive(Debug, Clone, Copy)]
struct Stretch {
    start: u64,
    /// What the model allowed in it so far.
    model_bits: f64,
    /// What the flow sent in the bins of it that have ended.
    sent_bits: f64,
    /// Its end, once the model has allowed enough.
    end: Option<u64>,
    /// A bin of it was paused or ends after the guard stop.
    spoiled: bool,
}

/// What the stretches came to.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    compared: usize,
    above: usize,
    /// |sent − allowed| summed over the compared stretches, bits, and their length, ns: their ratio is the
    /// mean error in Gb/s the fit minimises.
    error_bits: f64,
    span_ns: u64,
}

impl<'a> Stretches<'a> {
    fn new(observed: &'a [Observed], window: Window, frame_bits: f64, line_mbps: f64) -> Self {
        Stretches {
            observed,
            window,
            frame_bits,
            next: 0,
            open: None,
            t: 0,
            rc: line_mbps,
            tally: Tally::default(),
        }
    }

    /// An event at `t` set Rc to `rc`.
    fn at(&mut self, t: u64, rc: f64) {
        self.advance(t);
        self.rc = rc;
    }

    /// Integrates the current Rc up to `to`, opening and closing stretches on the way.
    fn advance(&mut self, to: u64) {
        let need = RESOLVE_FRAMES * self.frame_bits;
        let decisive = ABOVE_MODEL_FACTOR * need + self.frame_bits;
        let width = self.window.width.max(1);
        // Mb/s is bits per µs: bits per ns is a thousandth of it.
        let per_ns = self.rc / 1000.0;
        while self.t < to {
            let Some(mut st) = self.open else {
                while self
                    .observed
                    .get(self.next)
                    .is_some_and(|o| !self.window.admits(o, true))
                {
                    self.next += 1;
                }
                match self.observed.get(self.next) {
                    Some(o) if o.t_ns < to => {
                        self.t = self.t.max(o.t_ns);
                        self.open = Some(Stretch {
                            start: o.t_ns,
                            model_bits: 0.0,
                            sent_bits: 0.0,
                            end: None,
                            spoiled: false,
                        });
                    }
                    _ => self.t = to,
                }
                continue;
            };
            if st.end.is_none() && per_ns > 0.0 {
                let cross = self
                    .t
                    .saturating_add(((need - st.model_bits) / per_ns).ceil().max(1.0) as u64);
                // Reached before Rc changes again: the stretch ends with the bin it is reached in.
                if cross <= to {
                    let bins = cross.saturating_sub(st.start).div_ceil(width).max(1);
                    st.end = Some(st.start.saturating_add(bins.saturating_mul(width)));
                }
            }
            // The next instant something is decided: the end of the stretch's next busy bin, or its end.
            let bin = self
                .observed
                .get(self.next)
                .filter(|o| st.end.is_none_or(|e| o.t_ns < e));
            let bin_end = bin.map(|o| o.t_ns.saturating_add(width));
            let stop = [Some(to), st.end, bin_end]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(to);
            st.model_bits += (stop - self.t) as f64 * per_ns;
            self.t = stop;
            if let (Some(o), true) = (bin, bin_end == Some(stop)) {
                st.spoiled |= !self.window.admits(o, true);
                st.sent_bits += o.gbps * width as f64;
                self.next += 1;
                if st.spoiled || st.sent_bits > decisive {
                    self.close(st, stop);
                    continue;
                }
            }
            if st.end == Some(stop) {
                self.close(st, stop);
            } else {
                self.open = Some(st);
            }
        }
    }

    fn close(&mut self, st: Stretch, end: u64) {
        self.open = None;
        if st.spoiled || self.window.until.is_some_and(|u| end > u) {
            return;
        }
        let t = &mut self.tally;
        t.compared += 1;
        if st.sent_bits > ABOVE_MODEL_FACTOR * st.model_bits + self.frame_bits {
            t.above += 1;
        }
        t.error_bits += (st.sent_bits - st.model_bits).abs();
        t.span_ns += end - st.start;
    }

    /// The tally once the model has been integrated up to `end`; a stretch still open there never reached
    /// its allowance and is not compared.
    fn finish(mut self, end: u64) -> Tally {
        self.advance(end);
        self.tally
    }
}

/// A replay of `cnps` with `knobs` on a line of `line_mbps` up to `end` under the guard, each event handed to
/// `emit`; the instant the guard stopped it, if it did.
fn run_model(
    opts: &Options,
    (knobs, line_mbps): (&Knobs, f64),
    cnps: &[u64],
    end: u64,
    emit: impl FnMut(Event),
) -> Result<Option<u64>, DcqcnError> {
    let rp = Rp::new(opts.profile, knobs, line_mbps)?;
    let guard = opts
        .max_model_steps
        .unwrap_or_else(|| step_guard(cnps.len()));
    Ok(replay_with(rp, cnps, end, guard, emit))
}

fn analyse_flow(
    w: Work<'_>,
    mut cnp_ts: Vec<u64>,
    cx: FlowContext<'_>,
    on_event: &mut dyn FnMut(&FlowId, &Event),
) -> Result<FlowDcqcn, DcqcnError> {
    let FlowContext {
        grid,
        columns,
        end,
        paused,
        opts,
        kept,
    } = cx;
    let Work {
        series: s,
        pair,
        cnp,
        ce,
    } = w;
    let cnp_iface = cnp.map(|c| c.1);
    let id = FlowId {
        sender: s.key.src,
        receiver: s.key.dst,
        receiver_qp: s.key.dest_qp,
    };
    cnp_ts.sort_unstable();
    // Each end's own enable/N when the capture recorded them; another host's say nothing of it.
    let enabled = |host: IpAddr, np: bool| {
        let (of, _) = opts.knobs_of(host);
        let e = if np { of.np_enable } else { of.rp_enable };
        s.priority.and_then(|p| e.get(p)).filter(|_| of.applies)
    };
    // The line of the tap the flow's data was taken from: what its sender's NIC could send at.
    let line = opts.line_of(s.iface);
    let rp_enabled = enabled(s.key.src, false);
    let np_enabled = enabled(s.key.dst, true);
    // A reaction point that is off on the flow's priority ignores its CNPs (the NIC counts them in
    // rp_cnp_ignored): the model has none to act on.
    let times = if rp_enabled == Some(false) {
        Vec::new()
    } else {
        model_times(&cnp_ts, opts)
    };
    // What the flow sent, bin by bin, as its link could carry it.
    let bins = within_line(&s.bins, grid.capacity(line));
    let observed = observed_series(&bins, grid, |a, b| paused.during(s.priority, a, b));
    let mut cuts = Vec::new();
    let (mut model_events, mut min_rc, mut max_alpha) = (0u64, f64::INFINITY, f64::NEG_INFINITY);
    let mut model = Decimator::new(columns);
    // The stretches need the window, which needs the instant the guard stops the model: until then, every bin
    // from the first CNP counts, and a stretch that ends after the stop is dropped at the end.
    let frame_bits = s
        .bins
        .iter()
        .filter(|b| b.packets > 0)
        .map(|b| b.bytes as f64 * 8.0 / f64::from(b.packets))
        .fold(0.0, f64::max);
    let mut stretches = times.first().map(|&first| {
        let w = Window {
            width: grid.width,
            first_cnp: first,
            until: None,
        };
        Stretches::new(&observed, w, frame_bits, line.mbps())
    });
    let (knobs, knobs_of) = model_knobs(opts, s.key.src, line.mbps());
    let stopped_ns = run_model(opts, (knobs, line.mbps()), &times, end, |e| {
        on_event(&id, &e);
        if let Some(s) = stretches.as_mut() {
            s.at(e.t_ns, e.rc_mbps);
        }
        if e.kind == EventKind::Cut {
            cuts.push(Cut {
                t_ns: e.t_ns,
                rc_before_gbps: e.rc_before_mbps / 1000.0,
                rc_after_gbps: e.rc_mbps / 1000.0,
                alpha: e.alpha,
            });
        }
        model_events += 1;
        min_rc = min_rc.min(e.rc_mbps / 1000.0);
        max_alpha = max_alpha.max(e.alpha);
        model.push(e);
    })?;
    // Every flow's model lives until the report is written: keep what it holds, not what it grew to. The CNP
    // times and cuts go to the file.
    let mut model = model.finish();
    model.shrink_to_fit();
    let observed_cuts = observed_cuts(&times, &observed, grid.width, opts);
    let window = times.first().map(|&first| Window {
        width: grid.width,
        first_cnp: first,
        until: stopped_ns,
    });
    let (above_model_fraction, stretches_compared, paused_bins) = match (window, stretches) {
        (Some(w), Some(mut st)) => {
            st.window.until = w.until;
            let last = observed
                .last()
                .map_or(0, |o| o.t_ns.saturating_add(w.width));
            let Tally {
                compared, above, ..
            } = st.finish(w.until.map_or(last, |u| u.min(last)));
            let paused_bins = observed
                .iter()
                .filter(|o| o.paused && w.admits(o, false))
                .count();
            let fraction = if compared == 0 {
                0.0
            } else {
                above as f64 / compared as f64
            };
            (fraction, compared, paused_bins)
        }
        _ => (0.0, 0, 0),
    };
    let summary = FlowSummary {
        sender: s.key.src,
        receiver: s.key.dst,
        sender_qp: pair.map(|p| p.sender_qp),
        receiver_qp: s.key.dest_qp,
        iface: s.iface,
        tap: String::new(),
        line,
        cnp_iface,
        cnp_tap: None,
        pairing: pair.map(|p| p.method),
        priority: s.priority,
        priority_source: s.priority_source,
        rp_enabled,
        np_enabled,
        knobs_of,
        cnps: cnp_ts.len() as u64,
        ce_packets: ce,
        above_model_fraction,
        stretches_compared,
        paused_bins,
        model_events,
        min_rc_gbps: (model_events > 0).then_some(min_rc),
        max_alpha: (model_events > 0).then_some(max_alpha),
        // Filled in for the flows with the most CNPs, once they are known.
        fit: None,
        model_stopped_ns: stopped_ns,
    };
    Ok(FlowDcqcn {
        summary,
        cnp_ts_ns: DiskVec::new(kept, &cnp_ts),
        cuts: DiskVec::new(kept, &cuts),
        model,
        model_column_ns: columns.width,
        observed,
        observed_cuts,
        frame_bits,
    })
}

/// The model series, decimated as it is made: per column, the events a chart needs.
#[derive(Debug)]
struct Decimator {
    columns: Grid,
    column: Option<u64>,
    /// (order of arrival, event): the first and last of the column, and where Rc, Rt and alpha are lowest and
    /// highest.
    picks: [Option<(u64, Event)>; 8],
    seen: u64,
    out: Vec<ModelPoint>,
}

impl Decimator {
    fn new(columns: Grid) -> Decimator {
        Decimator {
            columns,
            column: None,
            picks: [None; 8],
            seen: 0,
            out: Vec::new(),
        }
    }

    fn push(&mut self, e: Event) {
        let col = e.t_ns.saturating_sub(self.columns.start) / self.columns.width.max(1);
        if self.column != Some(col) {
            self.flush();
            self.column = Some(col);
        }
        let n = self.seen;
        self.seen += 1;
        let p = &mut self.picks;
        p[0].get_or_insert((n, e));
        p[1] = Some((n, e));
        let metrics: [fn(&Event) -> f64; 3] = [|e| e.rc_mbps, |e| e.rt_mbps, |e| e.alpha];
        for (m, value) in metrics.iter().enumerate() {
            let v = value(&e);
            if p[2 + 2 * m].is_none_or(|(_, lo)| v < value(&lo)) {
                p[2 + 2 * m] = Some((n, e));
            }
            if p[3 + 2 * m].is_none_or(|(_, hi)| v > value(&hi)) {
                p[3 + 2 * m] = Some((n, e));
            }
        }
    }

    fn flush(&mut self) {
        let mut kept: Vec<(u64, Event)> = self.picks.iter_mut().filter_map(Option::take).collect();
        kept.sort_unstable_by_key(|(n, _)| *n);
        kept.dedup_by_key(|(n, _)| *n);
        self.out.extend(kept.into_iter().map(|(_, e)| ModelPoint {
            t_ns: e.t_ns,
            event: e.kind,
            rc_gbps: e.rc_mbps / 1000.0,
            rt_gbps: e.rt_mbps / 1000.0,
            alpha: e.alpha,
        }));
    }

    fn finish(mut self) -> Vec<ModelPoint> {
        self.flush();
        self.out
    }
}

/// The flow's busy bins as rates, each marked when a pause overlapped it.
fn observed_series(bins: &[Bin], grid: Grid, paused: impl Fn(u64, u64) -> bool) -> Vec<Observed> {
    bins.iter()
        .map(|b| {
            let t = grid.bin_start(b.index as usize);
            Observed {
                t_ns: t,
                gbps: gbps(b.bytes, grid.width),
                ce_fraction: if b.packets > 0 {
                    f64::from(b.ce) / f64::from(b.packets)
                } else {
                    0.0
                },
                pacing_gbps: (b.gap_ns > 0).then(|| gbps(b.paced_bytes, b.gap_ns)),
                paused: paused(t, t.saturating_add(grid.width)),
            }
        })
        .collect()
}

/// Which bins a comparison of model and observation uses: those with traffic from the first CNP on, unpaused,
/// and, when the model stopped early (or the fit looks at part of the flow), only those that end by then.
#[derive(Debug, Clone, Copy)]
struct Window {
    width: u64,
    first_cnp: u64,
    until: Option<u64>,
}

impl Window {
    fn admits(&self, o: &Observed, unpaused: bool) -> bool {
        o.t_ns >= self.first_cnp
            && o.gbps > 0.0
            && !(unpaused && o.paused)
            && self
                .until
                .is_none_or(|u| o.t_ns.saturating_add(self.width) <= u)
    }
}

/// Groups CNPs into bursts and measures the rate before each burst and its low point after it, in unpaused
/// bins only.
fn observed_cuts(
    cnps: &[u64],
    observed: &[Observed],
    width: u64,
    opts: &Options,
) -> Vec<ObservedCut> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cnps.len() {
        let first = cnps[i];
        let mut j = i + 1;
        while j < cnps.len() && cnps[j] - cnps[j - 1] < opts.burst_gap_ns {
            j += 1;
        }
        // Bins are in time order: find the neighbourhood of the burst by bisection.
        let from =
            observed.partition_point(|o| o.t_ns.saturating_add(width.saturating_mul(4)) <= first);
        let before: Vec<f64> = observed[from..]
            .iter()
            .take_while(|o| o.t_ns.saturating_add(width) <= first)
            .filter(|o| o.gbps > 0.0 && !o.paused)
            .map(|o| o.gbps)
            .collect();
        let at = observed.partition_point(|o| o.t_ns < first);
        let after = observed[at..]
            .iter()
            .take_while(|o| o.t_ns < first.saturating_add(opts.reaction_window_ns))
            // Idle and paused bins say nothing about the rate limiter (dcqcn.md).
            .filter(|o| o.gbps > 0.0 && !o.paused)
            .min_by(|a, b| a.gbps.total_cmp(&b.gbps));
        if let (false, Some(low)) = (before.is_empty(), after) {
            let before_gbps = before.iter().sum::<f64>() / before.len() as f64;
            out.push(ObservedCut {
                t_ns: first,
                cnps: (j - i) as u64,
                lag_ns: low.t_ns - first,
                before_gbps,
                after_gbps: low.gbps,
                ratio: if before_gbps > 0.0 {
                    low.gbps / before_gbps
                } else {
                    0.0
                },
            });
        }
        i = j;
    }
    out
}

/// Alpha gains and cut factors the fit tries: the ConnectX defaults and their neighbours.
const FIT_G: [u32; 8] = [1023, 1021, 1019, 1015, 1007, 991, 959, 895];
const FIT_GD: [u32; 5] = [9, 10, 11, 12, 13];

/// The knob pair that brings the model closest to the observed rate.
///
/// Coordinate descent over the grid rather than all 40 pairs: from the grid point nearest the given knobs,
/// every cut factor with the gain held, then every gain with the best cut factor held, until neither moves
/// (most flows settle in two sweeps, about 15 replays). Each replay keeps only its stretches' tally, and
/// stops at the flow's [`FIT_CNPS`]th CNP.
fn fit_knobs(
    cnps: &[u64],
    f: &FlowDcqcn,
    grid: Grid,
    end: u64,
    (opts, given): (&Options, &Knobs),
) -> Result<Option<Fit>, DcqcnError> {
    if !matches!(opts.profile, Profile::ConnectX) {
        return Ok(None);
    }
    let cnps = &cnps[..cnps.len().min(FIT_CNPS)];
    // Up to the last CNP looked at, plus the recovery after it; and never past where the model stopped.
    let horizon = if cnps.len() < f.cnp_ts_ns.len() {
        cnps.last()
            .map(|&t| t.saturating_add(opts.reaction_window_ns))
    } else {
        None
    };
    let until = match (horizon, f.summary.model_stopped_ns) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let window = Window {
        width: grid.width,
        first_cnp: cnps[0],
        until,
    };
    let replay_end = until.unwrap_or(end).min(end);
    let last = f
        .observed
        .last()
        .map_or(0, |o| o.t_ns.saturating_add(grid.width));
    let line_mbps = opts.line_of(f.summary.iface).mbps();
    let error = |knobs: &Knobs| -> Result<Option<(f64, usize)>, DcqcnError> {
        let mut st = Stretches::new(&f.observed, window, f.frame_bits, line_mbps);
        let stopped = run_model(opts, (knobs, line_mbps), cnps, replay_end, |e| {
            st.at(e.t_ns, e.rc_mbps)
        })?;
        if stopped.is_some_and(|s| until.is_none_or(|u| s < u)) {
            // Not modeled over the same stretch of time as the others, so its error would not compare.
            return Ok(None);
        }
        let t = st.finish(until.map_or(last, |u| u.min(last)));
        let error = if t.span_ns > 0 {
            t.error_bits / t.span_ns as f64
        } else {
            0.0
        };
        Ok(Some((error, t.compared)))
    };
    let Some((given_error, n)) = error(given)? else {
        return Ok(None);
    };
    if n == 0 {
        return Ok(None);
    }
    let nearest = |grid: &[u32], v: u32| -> usize {
        (0..grid.len())
            .min_by_key(|&i| grid[i].abs_diff(v))
            .unwrap_or(0)
    };
    let mut tried: FxHashMap<(usize, usize), Option<f64>> = FxHashMap::default();
    let mut eval = |gi: usize, di: usize| -> Result<Option<f64>, DcqcnError> {
        if let Some(e) = tried.get(&(gi, di)) {
            return Ok(*e);
        }
        let knobs = Knobs {
            dce_tcp_g: FIT_G[gi],
            rpg_gd: FIT_GD[di],
            ..given.clone()
        };
        let e = error(&knobs)?.map(|(e, _)| e);
        tried.insert((gi, di), e);
        Ok(e)
    };
    let mut at = (
        nearest(&FIT_G, given.dce_tcp_g),
        nearest(&FIT_GD, given.rpg_gd),
    );
    let mut best = (f64::INFINITY, at);
    for _ in 0..FIT_G.len() + FIT_GD.len() {
        let before = best.1;
        for di in 0..FIT_GD.len() {
            if let Some(e) = eval(at.0, di)?
                && e < best.0 - 1e-12
            {
                best = (e, (at.0, di));
            }
        }
        at = best.1;
        for gi in 0..FIT_G.len() {
            if let Some(e) = eval(gi, at.1)?
                && e < best.0 - 1e-12
            {
                best = (e, (gi, at.1));
            }
        }
        at = best.1;
        if at == before {
            break;
        }
    }
    let candidates = tried.len() + 1;
    // The given knobs win ties: a fit only reports a pair that does better.
    let (error_gbps, dce_tcp_g, rpg_gd) = if best.0 < given_error - 1e-12 {
        (best.0, FIT_G[best.1.0], FIT_GD[best.1.1])
    } else {
        (given_error, given.dce_tcp_g, given.rpg_gd)
    };
    Ok(Some(Fit {
        dce_tcp_g,
        rpg_gd,
        error_gbps,
        given_error_gbps: given_error,
        stretches_compared: n,
        candidates,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(n: u32) -> FlowSeries {
        FlowSeries {
            iface: 0,
            key: FlowKey {
                src: IpAddr::from([10, 0, 0, 1]),
                dst: IpAddr::from([10, 0, 0, 2]),
                dest_qp: n,
            },
            bins: Vec::new(),
            pcp: None,
            dscp: None,
            priority: None,
            priority_source: None,
        }
    }

    /// Work items of flows with CE marks only.
    fn ce_marked(all: &[FlowSeries]) -> Vec<Work<'_>> {
        all.iter()
            .map(|s| Work {
                series: s,
                pair: None,
                cnp: None,
                ce: 1,
            })
            .collect()
    }

    /// The flows with most CNPs (then CE marks, then by key) keep the chart's resolution; the many others share
    /// a fixed number of columns, so their series stop growing with the capture.
    #[test]
    fn the_flows_with_most_cnps_keep_full_columns_and_the_rest_share_a_budget() {
        let all: Vec<FlowSeries> = (0..300).map(series).collect();
        let work: Vec<Work<'_>> = all
            .iter()
            .map(|s| {
                let q = s.key.dest_qp as usize;
                Work {
                    series: s,
                    pair: None,
                    // Flows 0..100 have CNPs (more for higher QPs); 100..300 only CE marks, more for lower QPs.
                    cnp: (q < 100).then(|| (s.key, 0, q as u64 + 1)),
                    ce: if q < 100 { 0 } else { (300 - q) as u64 / 2 },
                }
            })
            .collect();
        let (start, end) = (1_000, 1_000 + 60_000_000_000);
        let widths = model_columns(&work, start, end);
        let fine = column_width(start, end, MODEL_COLUMNS);
        let shared = column_width(
            start,
            end,
            SHARED_MODEL_COLUMNS / (300 - CHART_FLOWS as u64),
        );
        assert!(shared > fine, "{shared} {fine}");
        let fine_qps: Vec<u32> = (0..300u32)
            .filter(|&q| widths[q as usize] == fine)
            .collect();
        // 64 flows: QPs 36..100 have the most CNPs.
        assert_eq!(fine_qps, (36..100).collect::<Vec<u32>>());
        assert!(widths.iter().all(|&w| w == fine || w == shared));
        // Without CNPs, the CE marks rank; ties (QPs 101 and 102 both have 99) go to the lower key.
        let ce_only: Vec<Work<'_>> = work.into_iter().skip(100).collect();
        let widths = model_columns(&ce_only, start, end);
        let fine_qps: Vec<u32> = (100..300u32)
            .filter(|&q| widths[q as usize - 100] == fine)
            .collect();
        assert_eq!(fine_qps, (100..164).collect::<Vec<u32>>());
        // Few flows: every one gets the full resolution.
        let few = ce_marked(&all[..10]);
        assert!(model_columns(&few, start, end).iter().all(|&w| w == fine));
        // Thousands: the floor of 16 columns each.
        let many: Vec<FlowSeries> = (0..5000).map(series).collect();
        let many = ce_marked(&many);
        let widths = model_columns(&many, start, end);
        assert_eq!(widths.iter().filter(|&&w| w == fine).count(), CHART_FLOWS);
        assert!(
            widths
                .iter()
                .all(|&w| w == fine || w == column_width(start, end, MIN_MODEL_COLUMNS))
        );
    }
}
