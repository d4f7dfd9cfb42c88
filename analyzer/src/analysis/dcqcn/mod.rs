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

use std::net::IpAddr;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use roce_core::dcqcn::{DcqcnError, Event, EventKind, Knobs, Profile, Rp, replay_with, step_guard};
use roce_core::decode::Frame;
use roce_core::line::{LineRate, LineRates};

use super::on_disk::{DiskVec, Store};
use super::tap_preference;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::{Pair, Pairing, PairingPass};
use roce_core::passes::pfc::PauseInterval;
use roce_core::passes::rates::{Bin, FlowSeries, RatesPass, gbps, within_line};

mod cnp_streams;
mod grid;
mod np_checks;
mod options;
mod report;
mod traffic;

use cnp_streams::CnpStreams;
use grid::Grid;
use np_checks::NpChecks;
pub use options::{DEFAULT_FIT_FLOWS, HostEcn, KnobsOf, Options};
use options::{model_knobs, np_gap};
pub use report::{
    AggregateBin, BusyFlow, Cut, DcqcnReport, Fit, FlowDcqcn, FlowId, FlowSummary, LinkPeak,
    ModelPoint, NpPort, NpStream, Observed, ObservedCut, RateBin, Traffic, UnpairedCnps,
};
use traffic::Aggregate;
pub use traffic::BUSIEST_FLOWS;

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

/// CNPs of a flow the fit looks at, from its first: the model and the observed rate are compared up to the
/// last of them. Beyond some thousands of cuts more CNPs do not move the fit, and the candidates' replays stay
/// bounded however long a flow was congested.
pub const FIT_CNPS: usize = 50_000;

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
