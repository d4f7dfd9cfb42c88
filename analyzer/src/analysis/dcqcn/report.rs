//! What the DCQCN analysis reports, as `dcqcn --json`, `summary.json` and the tables write it: the report
//! with the settings it ran with, each modeled flow's numbers and series, the CNP streams no flow could be tied
//! to, the notification points' checks and the traffic view. The types only; each is filled in by the file
//! whose job it is.

use std::net::IpAddr;

use serde::Serialize;

use roce_core::dcqcn::{EventKind, Knobs, NpKnobs, PriorityEnable};
use roce_core::line::LineRate;
use roce_core::passes::pairing::{Candidate, Method};
use roce_core::priority::{PriorityMap, PrioritySource};

use crate::analysis::on_disk::{DiskVec, Fixed};

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
/// [`FIT_CNPS`](super::FIT_CNPS)th CNP.
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
    /// Every CNP the model was fed, at its capture time (the CNP delay is added only where the model is run,
    /// so the charts mark each CNP where the capture saw it); in a temporary file until the report is written
    /// ([`on_disk`](crate::analysis::on_disk)).
    pub cnp_ts_ns: DiskVec<u64>,
    /// The model's cuts, each one a CNP it acted on; in the same file.
    pub cuts: DiskVec<Cut>,
    /// The model's events, decimated: in each column of the report's [`DcqcnReport::model_column_ns`] grid,
    /// the first and last event and those at which Rc, Rt and alpha are lowest and highest, in time order. A
    /// step chart drawn through these looks as one drawn through every event at that resolution.
    pub model: Vec<ModelPoint>,
    /// Width of the columns `model` is decimated in: the report's [`DcqcnReport::model_column_ns`] for the
    /// flows a chart may show, wider for the others when there are many (see
    /// [`SHARED_MODEL_COLUMNS`](super::SHARED_MODEL_COLUMNS)).
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
    /// [`step_guard`](roce_core::dcqcn::step_guard)): `model` and `cuts` stop at this instant, and the
    /// comparisons with the observed rate use only the bins that end before it.
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
    /// ([`MODEL_COLUMNS`](super::MODEL_COLUMNS) over the capture's span); each flow says its own in
    /// `model_column_ns`.
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
    /// The [`BUSIEST_FLOWS`](super::BUSIEST_FLOWS) flows that sent the most bytes, most first.
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
