//! What DCQCN did in a capture: the model fed with each sender's CNP arrivals, next to what the sender was
//! seen to send.
//!
//! [`DcqcnPass`] streams the capture once (pairing evidence, per-flow rate bins, CNP arrival times per sender
//! QP); [`DcqcnPass::finish`] then replays the reaction-point model per paired flow, finds the observed rate
//! change after each burst of CNPs, and fits the two knobs that shape a cut most (alpha gain and cut factor).

use std::net::IpAddr;

use rustc_hash::FxHashMap;
use serde::Serialize;

use roce_core::dcqcn::{DcqcnError, Event, EventKind, Knobs, Profile, Replay, Rp, replay_within};
use roce_core::decode::{Frame, Kind};
use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::{Method, Pair, Pairing, PairingPass};
use roce_core::passes::rates::{Bin, FlowSeries, RatesPass, gbps};

/// How the analysis runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub profile: Profile,
    pub knobs: Knobs,
    /// Where the knob values came from, shown next to the results (dcqcn.md: disagreement usually means
    /// different knobs).
    pub knob_source: String,
    pub line_mbps: f64,
    /// Added to every CNP time before it reaches the model: the one-way delay from the capture point to the
    /// sender NIC when the capture was not taken at the sender (negative if it was taken behind it).
    pub cnp_delay_ns: i64,
    /// A fixed bin width, or automatic.
    pub bin_ns: Option<u64>,
    /// CNPs closer together than this belong to one burst.
    pub burst_gap_ns: u64,
    /// How long after a burst's first CNP the observed rate is searched for its low point.
    pub reaction_window_ns: u64,
    /// Fit the alpha gain and the cut factor.
    pub fit: bool,
    /// Fit only this many flows, those with the most CNPs: each fit replays the model 41 times over the
    /// flow's whole span, which for thousands of flows would take far longer than the rest of the analysis.
    pub fit_flows: usize,
    /// Use the knobs the tracer recorded in the capture, when it did (set false when the user gave knobs).
    pub recorded_knobs: bool,
    /// Model events kept over all flows, shared out evenly (at most [`MAX_FLOW_MODEL_EVENTS`] a flow); what
    /// the flows that need less leave over is shared out again between those that needed more. A flow whose
    /// model would go beyond its share stops there, and says so in `model_stopped_ns`.
    pub max_model_events: usize,
}

impl Options {
    /// Takes the knobs recorded in the capture's custom blocks, when allowed and present. A recorded value the
    /// model rejects leaves the knobs as they were and says so in `knob_source`.
    pub fn apply_recorded_knobs(&mut self, blocks: &[roce_capture::CustomBlock]) {
        if !self.recorded_knobs {
            return;
        }
        let Some((iface, text)) = roce_core::recorded::recorded_rp_knobs(blocks) else {
            return;
        };
        let mut knobs = self.knobs.clone();
        match knobs.apply_kv_text(&text) {
            Ok(()) => {
                self.knobs = knobs;
                self.knob_source =
                    format!("the capture ({iface}/roce_rp, recorded by roce-tracer)");
            }
            Err(e) => {
                self.knob_source = format!(
                    "{} (the capture's recorded knobs were refused: {e})",
                    self.knob_source
                );
            }
        }
    }
}

/// Enough for every flow of a small test, and for the heaviest ones of a large capture, whose findings
/// lead the report anyway.
pub const DEFAULT_FIT_FLOWS: usize = 32;

/// About 1 GB of events. The benchmark capture (4,096 flows with CNPs over 387 ms) needs 7 M.
pub const DEFAULT_MAX_MODEL_EVENTS: usize = 20_000_000;

/// No flow gets more, however few there are: at line rate the ConnectX timers make about 10,000 events per
/// second, so this is minutes of model time, and the knob fit replays it 41 times more.
pub const MAX_FLOW_MODEL_EVENTS: usize = 1_000_000;

impl Default for Options {
    fn default() -> Self {
        Options {
            profile: Profile::ConnectX,
            knobs: Knobs::default(),
            knob_source: "defaults".into(),
            line_mbps: 100_000.0,
            cnp_delay_ns: 0,
            bin_ns: None,
            burst_gap_ns: 100_000,
            reaction_window_ns: 200_000,
            fit: true,
            fit_flows: DEFAULT_FIT_FLOWS,
            recorded_knobs: true,
            max_model_events: DEFAULT_MAX_MODEL_EVENTS,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cut {
    pub t_ns: u64,
    pub rc_before_gbps: f64,
    pub rc_after_gbps: f64,
    pub alpha: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ModelPoint {
    pub t_ns: u64,
    pub event: EventKind,
    pub rc_gbps: f64,
    pub rt_gbps: f64,
    pub alpha: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Observed {
    /// Start of the bin.
    pub t_ns: u64,
    pub gbps: f64,
    pub ce_fraction: f64,
    /// The rate implied by the gaps between the flow's packets in this bin (bytes over gap time), which shows
    /// the sender's rate limiter even when the flow was idle part of the bin; null without consecutive packets.
    pub pacing_gbps: Option<f64>,
}

/// The rate change seen after a burst of CNPs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ObservedCut {
    /// The burst's first CNP (as the model sees it, delay applied).
    pub t_ns: u64,
    pub cnps: u64,
    /// From the first CNP to the start of the lowest bin in the reaction window.
    pub lag_ns: u64,
    /// Mean rate in the bins just before the burst.
    pub before_gbps: f64,
    /// The lowest bin rate in the reaction window.
    pub after_gbps: f64,
    /// after / before.
    pub ratio: f64,
}

/// The knob values that make the model follow the observed rate best, by mean absolute error over the bins
/// where the flow sent something after its first CNP.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Fit {
    pub dce_tcp_g: u32,
    pub rpg_gd: u32,
    pub error_gbps: f64,
    /// The same error with the knobs the analysis was given, for comparison.
    pub given_error_gbps: f64,
    pub bins_compared: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlowDcqcn {
    pub sender: IpAddr,
    pub receiver: IpAddr,
    pub sender_qp: Option<u32>,
    pub receiver_qp: u32,
    /// How the CNP stream was tied to this flow; null when no CNP stream could be.
    pub pairing: Option<Method>,
    pub cnps: u64,
    pub cnp_ts_ns: Vec<u64>,
    pub cuts: Vec<Cut>,
    /// Every model event but the alpha ticks (their alpha shows in the events that follow).
    pub model: Vec<ModelPoint>,
    pub observed: Vec<Observed>,
    pub observed_cuts: Vec<ObservedCut>,
    /// Share of the bins with traffic after the first CNP in which the observed rate exceeded the modeled Rc
    /// by more than 20 %. Rc is a ceiling, so a sender that obeys its limiter stays low here.
    pub above_model_fraction: f64,
    pub fit: Option<Fit>,
    /// Null when the model ran to the end of the capture. Otherwise the flow's share of the event budget
    /// ran out here: `model` and `cuts` stop at this instant, and the comparisons with the observed rate
    /// (`above_model_fraction`, `fit`) use only the bins that end before it.
    pub model_stopped_ns: Option<u64>,
}

/// A CNP stream no data flow could be tied to: reported, never dropped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnpairedCnps {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dest_qp: u32,
    pub cnps: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DcqcnReport {
    pub profile: &'static str,
    pub knob_source: String,
    pub line_gbps: f64,
    pub bin_ns: u64,
    /// The `--bin` width asked for, when the capture spans more than that width's grid could hold (see
    /// [`roce_core::passes::rates::MAX_FIXED_BINS`]) and `bin_ns` had to be wider; null otherwise.
    pub requested_bin_ns: Option<u64>,
    pub cnp_delay_ns: i64,
    pub flows: Vec<FlowDcqcn>,
    pub unpaired_cnps: Vec<UnpairedCnps>,
}

impl DcqcnReport {
    /// What the analysis could not do as asked, in words for the console and the report: a bin width that
    /// had to widen, models that stopped at their event budget.
    pub fn limits(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(asked) = self.requested_bin_ns {
            out.push(format!(
                "all flows together would need more than {} rate bins of the requested {} ns over the capture's \
                 span, so the bins are {} ns wide",
                roce_core::passes::rates::MAX_FIXED_BINS,
                asked,
                self.bin_ns
            ));
        }
        let stopped: Vec<&FlowDcqcn> = self
            .flows
            .iter()
            .filter(|f| f.model_stopped_ns.is_some())
            .collect();
        if let Some(first) = stopped.iter().filter_map(|f| f.model_stopped_ns).min() {
            out.push(format!(
                "the DCQCN model of {} of {} flows stopped early, at its share of the event budget \
                 (--model-events), the earliest at {}.{:09} s: their model, cuts and fit cover only the time \
                 before (a long capture, or a record whose timestamp lies far beyond the others, does this)",
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
    /// CNP arrival times per CNP stream (receiver → sender, sender's QP).
    cnps: FxHashMap<FlowKey, Vec<u64>>,
    last_ns: u64,
}

impl DcqcnPass {
    pub fn new(bin_ns: Option<u64>) -> Self {
        DcqcnPass {
            pairing: PairingPass::default(),
            rates: RatesPass::new(bin_ns),
            cnps: FxHashMap::default(),
            last_ns: 0,
        }
    }

    pub fn frame(&mut self, f: &Frame<'_>) {
        self.last_ns = self.last_ns.max(f.ts_ns);
        self.pairing.frame(f);
        self.rates.frame(f);
        if f.kind == Kind::Cnp
            && let (Some(ip), Some(bth)) = (f.ip, f.bth())
        {
            let key = FlowKey {
                src: ip.src,
                dst: ip.dst,
                dest_qp: bth.dest_qp,
            };
            self.cnps.entry(key).or_default().push(f.ts_ns);
        }
    }

    pub fn finish(self, opts: &Options) -> Result<DcqcnReport, DcqcnError> {
        Ok(self.finish_with_series(opts)?.0)
    }

    /// The report, plus every flow's rate series with the bin grid's start and width, for the analyses that
    /// look at flows without CNPs (PFC stalls).
    pub fn finish_with_series(
        self,
        opts: &Options,
    ) -> Result<(DcqcnReport, Vec<FlowSeries>, u64, u64), DcqcnError> {
        let pairing = self.pairing.finish();
        let start = self.rates.start_ns();
        let width = self.rates.width_ns();
        let requested_bin_ns = self.rates.requested_width_ns();
        let end = self.last_ns;
        let series = self.rates.finish();
        let mut cnp_streams = self.cnps;
        let mut flows = Vec::new();
        // One series per flow: the tap that saw most of it (a flow mirrored twice is not twice as fast).
        let mut best: FxHashMap<FlowKey, &FlowSeries> = FxHashMap::default();
        for s in &series {
            let n: u64 = s.bins.iter().map(|b| b.packets).sum();
            let e = best.entry(s.key).or_insert(s);
            let m: u64 = e.bins.iter().map(|b| b.packets).sum();
            if n > m || (n == m && s.iface < e.iface) {
                *e = s;
            }
        }
        let mut chosen: Vec<&FlowSeries> = best.into_values().collect();
        chosen.sort_by_key(|s| (s.key, s.iface));
        let mut todo = Vec::new();
        for s in chosen {
            let pair = pairing.of_flow(&s.key);
            let cnp_key = pair.map(|p| FlowKey {
                src: p.receiver,
                dst: p.sender,
                dest_qp: p.sender_qp,
            });
            let cnp_times: Vec<u64> = cnp_key
                .and_then(|k| cnp_streams.remove(&k))
                .unwrap_or_default();
            let ce: u64 = s.bins.iter().map(|b| b.ce).sum();
            if !cnp_times.is_empty() || ce > 0 {
                todo.push((s, pair, cnp_times));
            }
        }
        let share = (opts.max_model_events / todo.len().max(1)).clamp(1, MAX_FLOW_MODEL_EVENTS);
        let grid = Grid { start, width };
        let analyse = |(s, pair, cnp_times): &(&FlowSeries, Option<&Pair>, Vec<u64>), budget| {
            analyse_flow(
                &s.key,
                pair.map(|p| (p.sender_qp, p.method)),
                cnp_times,
                &s.bins,
                grid,
                end,
                budget,
                opts,
            )
        };
        for item in &todo {
            flows.push(analyse(item, share)?);
        }
        // What the flows that finished within their share left over goes, in equal parts, to those that
        // stopped, which are run again with the larger budget: a few long-congested flows among many short
        // ones then get the events the short ones did not need, and the total stays within the bound.
        let used: usize = flows.iter().map(|f| f.model.len()).sum();
        let stopped: Vec<usize> = (0..flows.len())
            .filter(|&i| flows[i].model_stopped_ns.is_some())
            .collect();
        // A second run costs as much as the first; it is only worth it for at least an eighth more.
        let extra = opts.max_model_events.saturating_sub(used) / stopped.len().max(1);
        let larger = share.saturating_add(extra).min(MAX_FLOW_MODEL_EVENTS);
        if larger - share >= share.div_ceil(8) {
            for i in stopped {
                flows[i] = analyse(&todo[i], larger)?;
            }
        }
        flows.sort_by(|a, b| {
            b.cnps
                .cmp(&a.cnps)
                .then((a.sender, a.receiver, a.receiver_qp).cmp(&(
                    b.sender,
                    b.receiver,
                    b.receiver_qp,
                )))
        });
        if opts.fit {
            for f in flows.iter_mut().take(opts.fit_flows) {
                let model_times = model_times(&f.cnp_ts_ns, opts);
                if !model_times.is_empty() {
                    let horizon = Horizon {
                        end: f.model_stopped_ns.unwrap_or(end),
                        until: f.model_stopped_ns,
                        // Other knobs make about as many events as the given ones (the model's length,
                        // or the share when that was less); the margin keeps them all comparable.
                        budget: f.model.len().max(share).saturating_mul(4),
                    };
                    f.fit = fit_knobs(&model_times, &f.observed, width, horizon, opts)?;
                }
            }
        }
        let mut unpaired_cnps: Vec<UnpairedCnps> = cnp_streams
            .into_iter()
            .map(|(k, t)| UnpairedCnps {
                src: k.src,
                dst: k.dst,
                dest_qp: k.dest_qp,
                cnps: t.len() as u64,
                first_ns: t.iter().copied().min().unwrap_or(0),
                last_ns: t.iter().copied().max().unwrap_or(0),
            })
            .collect();
        unpaired_cnps.sort_by_key(|u| (std::cmp::Reverse(u.cnps), u.src, u.dst, u.dest_qp));
        let report = DcqcnReport {
            profile: opts.profile.name(),
            knob_source: opts.knob_source.clone(),
            line_gbps: opts.line_mbps / 1000.0,
            bin_ns: width,
            requested_bin_ns,
            cnp_delay_ns: opts.cnp_delay_ns,
            flows,
            unpaired_cnps,
        };
        Ok((report, series, start, width))
    }

    /// The pairing found so far is only final after [`DcqcnPass::finish`]; this is for callers that need the
    /// pairing alone.
    pub fn into_pairing(self) -> Pairing {
        self.pairing.finish()
    }
}

/// The model's events but its alpha ticks, which nothing here reads: without them a replay costs a
/// multiplication per tick (a tick per µs at the ConnectX default) instead of an event per tick.
fn model_events(
    opts: &Options,
    knobs: &Knobs,
    cnps: &[u64],
    end: u64,
    budget: usize,
) -> Result<Replay, DcqcnError> {
    let rp = Rp::new(opts.profile, knobs, opts.line_mbps)?.without_alpha_ticks();
    Ok(replay_within(rp, cnps, end, budget))
}

/// The shared bin grid: where it starts and how wide each bin is.
#[derive(Debug, Clone, Copy)]
struct Grid {
    start: u64,
    width: u64,
}

/// How far a fit's replays run: to `end` with at most `budget` events, compared with the observed rate in
/// the bins that end by `until` (all of them when `None`).
#[derive(Debug, Clone, Copy)]
struct Horizon {
    end: u64,
    until: Option<u64>,
    budget: usize,
}

/// The sorted CNP arrival times as the sender's reaction point sees them.
fn model_times(cnp_ts: &[u64], opts: &Options) -> Vec<u64> {
    cnp_ts
        .iter()
        .map(|&t| t.saturating_add_signed(opts.cnp_delay_ns))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn analyse_flow(
    key: &FlowKey,
    pair: Option<(u32, Method)>,
    cnp_times: &[u64],
    bins: &[Bin],
    grid: Grid,
    end: u64,
    budget: usize,
    opts: &Options,
) -> Result<FlowDcqcn, DcqcnError> {
    let Grid { start, width } = grid;
    let mut cnp_ts: Vec<u64> = cnp_times.to_vec();
    cnp_ts.sort_unstable();
    let model_times = model_times(&cnp_ts, opts);
    let Replay { events, stopped_ns } = model_events(opts, &opts.knobs, &model_times, end, budget)?;
    let cuts = events
        .iter()
        .filter(|e| e.kind == EventKind::Cut)
        .map(|e| Cut {
            t_ns: e.t_ns,
            rc_before_gbps: e.rc_before_mbps / 1000.0,
            rc_after_gbps: e.rc_mbps / 1000.0,
            alpha: e.alpha,
        })
        .collect();
    let model = events
        .iter()
        .filter(|e| e.kind != EventKind::AlphaTick)
        .map(|e| ModelPoint {
            t_ns: e.t_ns,
            event: e.kind,
            rc_gbps: e.rc_mbps / 1000.0,
            rt_gbps: e.rt_mbps / 1000.0,
            alpha: e.alpha,
        })
        .collect();
    let observed: Vec<Observed> = bins
        .iter()
        .enumerate()
        .map(|(i, b)| Observed {
            t_ns: start + i as u64 * width,
            gbps: gbps(b.bytes, width),
            ce_fraction: if b.packets > 0 {
                b.ce as f64 / b.packets as f64
            } else {
                0.0
            },
            pacing_gbps: (b.gap_ns > 0).then(|| gbps(b.paced_bytes, b.gap_ns)),
        })
        .collect();
    let observed_cuts = observed_cuts(&model_times, &observed, width, opts);
    let above_model_fraction = match model_times.first() {
        Some(&first) => above_model(
            &events,
            &observed,
            Window {
                width,
                first_cnp: first,
                until: stopped_ns,
            },
            opts.line_mbps,
        ),
        None => 0.0,
    };
    Ok(FlowDcqcn {
        sender: key.src,
        receiver: key.dst,
        sender_qp: pair.map(|p| p.0),
        receiver_qp: key.dest_qp,
        pairing: pair.map(|p| p.1),
        cnps: cnp_ts.len() as u64,
        cnp_ts_ns: cnp_ts,
        cuts,
        model,
        observed,
        observed_cuts,
        above_model_fraction,
        // Filled in for the flows with the most CNPs, once they are known.
        fit: None,
        model_stopped_ns: stopped_ns,
    })
}

/// Which bins a comparison of model and observation uses: those with traffic from the first CNP on, and
/// when the model stopped early, only those that end by then.
#[derive(Debug, Clone, Copy)]
struct Window {
    width: u64,
    first_cnp: u64,
    until: Option<u64>,
}

/// Rc averaged over each bin of the window, paired with the observed rate.
fn model_vs_observed(
    events: &[Event],
    observed: &[Observed],
    window: Window,
    line_mbps: f64,
) -> Vec<(f64, f64)> {
    let Window {
        width,
        first_cnp,
        until,
    } = window;
    let mut out = Vec::new();
    let mut k = 0;
    let mut rc = line_mbps;
    for o in observed.iter().filter(|o| {
        o.t_ns >= first_cnp
            && o.gbps > 0.0
            && until.is_none_or(|u| o.t_ns.saturating_add(width) <= u)
    }) {
        let (t0, t1) = (o.t_ns, o.t_ns.saturating_add(width));
        // Advance to the rate in force at t0, then integrate the piecewise-constant Rc over the bin.
        while k < events.len() && events[k].t_ns <= t0 {
            rc = events[k].rc_mbps;
            k += 1;
        }
        let mut acc = 0.0;
        let mut t = t0;
        let mut r = rc;
        let mut m = k;
        while m < events.len() && events[m].t_ns < t1 {
            acc += r * (events[m].t_ns - t) as f64;
            t = events[m].t_ns;
            r = events[m].rc_mbps;
            m += 1;
        }
        acc += r * (t1 - t) as f64;
        out.push((acc / width as f64 / 1000.0, o.gbps));
    }
    out
}

fn above_model(events: &[Event], observed: &[Observed], window: Window, line_mbps: f64) -> f64 {
    let pairs = model_vs_observed(events, observed, window, line_mbps);
    if pairs.is_empty() {
        return 0.0;
    }
    pairs.iter().filter(|(rc, obs)| *obs > 1.2 * rc).count() as f64 / pairs.len() as f64
}

/// Groups CNPs into bursts and measures the rate before each burst and its low point after it.
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
        let before: Vec<f64> = observed
            .iter()
            .filter(|o| {
                // Saturating: a corrupt timestamp can put a bin at the very end of the u64 range.
                o.t_ns.saturating_add(width) <= first
                    && o.t_ns.saturating_add(width.saturating_mul(4)) > first
                    && o.gbps > 0.0
            })
            .map(|o| o.gbps)
            .collect();
        let after = observed
            .iter()
            // Idle bins say nothing about the rate limiter (dcqcn.md: leave out idle and paused periods).
            .filter(|o| {
                o.t_ns >= first
                    && o.t_ns < first.saturating_add(opts.reaction_window_ns)
                    && o.gbps > 0.0
            })
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

/// Mean |Rc − observed| (Gb/s) over the bins with traffic after the first CNP, Rc averaged over each bin.
fn model_error(
    events: &[Event],
    observed: &[Observed],
    window: Window,
    line_mbps: f64,
) -> (f64, usize) {
    let pairs = model_vs_observed(events, observed, window, line_mbps);
    let n = pairs.len();
    let err: f64 = pairs.iter().map(|(rc, obs)| (rc - obs).abs()).sum();
    (if n > 0 { err / n as f64 } else { 0.0 }, n)
}

/// Alpha gains and cut factors the fit tries: the ConnectX defaults and their neighbours.
const FIT_G: [u32; 8] = [1023, 1021, 1019, 1015, 1007, 991, 959, 895];
const FIT_GD: [u32; 5] = [9, 10, 11, 12, 13];

fn fit_knobs(
    cnps: &[u64],
    observed: &[Observed],
    width: u64,
    horizon: Horizon,
    opts: &Options,
) -> Result<Option<Fit>, DcqcnError> {
    let window = Window {
        width,
        first_cnp: cnps[0],
        until: horizon.until,
    };
    let given = model_events(opts, &opts.knobs, cnps, horizon.end, horizon.budget)?;
    let (given_error, n) = model_error(&given.events, observed, window, opts.line_mbps);
    if n == 0 || !matches!(opts.profile, Profile::ConnectX) {
        return Ok(None);
    }
    let mut best = (given_error, opts.knobs.dce_tcp_g, opts.knobs.rpg_gd);
    for g in FIT_G {
        for gd in FIT_GD {
            let knobs = Knobs {
                dce_tcp_g: g,
                rpg_gd: gd,
                ..opts.knobs.clone()
            };
            let ev = model_events(opts, &knobs, cnps, horizon.end, horizon.budget)?;
            if ev.stopped_ns.is_some() {
                // Not modeled over the same bins as the others, so its error would not compare.
                continue;
            }
            let (e, _) = model_error(&ev.events, observed, window, opts.line_mbps);
            if e < best.0 - 1e-12 {
                best = (e, g, gd);
            }
        }
    }
    Ok(Some(Fit {
        dce_tcp_g: best.1,
        rpg_gd: best.2,
        error_gbps: best.0,
        given_error_gbps: given_error,
        bins_compared: n,
    }))
}
