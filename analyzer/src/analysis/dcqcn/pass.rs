//! The DCQCN pass: what it keeps while the capture streams by (pairing evidence, per-flow rate bins, the CNPs'
//! times), and what it does after the read, in order: the CNP streams paired with their flows, each flow's
//! model run, the fit of the flows with most CNPs, the unpaired streams and the NP checks, into one report.

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use roce_core::dcqcn::{DcqcnError, Event, Rp};
use roce_core::line::{LineRate, LineRates};
use roce_core::passes::brief::Brief;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::{Pair, Pairing, PairingPass};
use roce_core::passes::pfc::PauseInterval;
use roce_core::passes::rates::{FlowSeries, RatesPass};

use crate::analysis::on_disk::Store;
use crate::analysis::tap_preference;

use super::cnp_streams::CnpStreams;
use super::decimate::{MODEL_COLUMNS, column_width, model_columns};
use super::fit::fit_knobs;
use super::flow::{FlowContext, analyse_flow};
use super::grid::Grid;
use super::np_checks::NpChecks;
use super::observed::Paused;
use super::report::{DcqcnReport, FlowDcqcn, FlowId, Traffic, UnpairedCnps};
use super::traffic::Aggregate;
use super::work::Work;
use roce_core::dcqcn_options::{Options, model_knobs, np_gap};

/// What takes every event of every flow's model, in the order the models make them.
pub type OnEvent<'a> = &'a mut dyn FnMut(&FlowId, &Event);

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

    /// Feeds one frame, in brief, to the pairing (which also logs every CNP's time) and the rates.
    pub fn frame(&mut self, f: &Brief) {
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
        self.finish_with_events(opts, pauses, None)
    }

    /// [`DcqcnPass::finish_with_series`], handing every event of every flow's model to `on_event` as the model
    /// makes it (a flow's events in time order, one flow after another).
    pub fn finish_with_events(
        self,
        opts: &Options,
        pauses: &[PauseInterval],
        on_event: Option<OnEvent<'_>>,
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
        // One series per flow: the tap that saw most of it (a flow mirrored twice is not twice as fast). Two
        // taps at the ends of a link see the same packets; of those, the one further along the path (more
        // CE marks: the receiver's side) shows what the flow met, where the sender's shows no mark at all.
        let mut best: FxHashMap<FlowKey, &FlowSeries> = FxHashMap::default();
        let rank = |s: &FlowSeries| (s.packets(), tap_preference(s.iface, s.ce_marked()));
        for s in &series {
            let e = best.entry(s.key).or_insert(s);
            if rank(s) > rank(e) {
                *e = s;
            }
        }
        let mut chosen: Vec<&FlowSeries> = best.into_values().collect();
        chosen.sort_by_key(|s| (s.key, s.iface));
        let grid = Grid { start, width };
        let paused = Paused::new(pauses);
        let mut np = NpChecks::new(opts);
        let mut aggregate = Aggregate::default();
        let traffic = Traffic::of(&chosen, &series, grid, peak, |i| opts.line_of(i));
        // The flows DCQCN acted on, with their CNP streams, in the order their models run.
        let mut work = Vec::new();
        for s in chosen {
            let pair = pairing.of_flow(&s.key);
            let cnp_key = pair.map(Pair::stream);
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
        let context = |width| FlowContext {
            grid,
            columns: Grid { start, width },
            end,
            paused: &paused,
            opts,
            kept: &kept,
        };
        let mut flows = Vec::with_capacity(work.len());
        // Each flow's CNP times, read from the pairing's logs (which feeds the NP checks too) one flow at a
        // time and in order, on this thread.
        let mut ready = work.into_iter().zip(column_widths).map(|(w, width)| {
            let cnp_ts = w.cnp.map_or_else(Vec::new, |(k, iface, _)| {
                let times = pairing.cnp_times(iface, &k);
                let (min_gap_ns, _) = np_gap(opts, k.src);
                let answers = pairing.ce_triggers(iface, &k, &w.series.key, min_gap_ns);
                np.stream(k, Some(w.series.key.dest_qp), iface, &times, &answers);
                times
            });
            (w, cnp_ts, width)
        });
        match on_event {
            // The events go out one flow after another, in order: the models run in turn.
            Some(on_event) => {
                for (w, cnp_ts, width) in ready {
                    flows.push(analyse_flow(w, cnp_ts, context(width), &mut *on_event)?);
                }
            }
            // The models need nothing of each other: a batch of flows at a time over the threads of the
            // caller's rayon pool, the batch small enough that only its flows' CNP times are held at once
            // (two batches': the next one's times are read while the models of this one run, since
            // reading them in between left every other thread waiting).
            None => {
                let size = rayon::current_num_threads() * 16;
                let mut next: Vec<_> = ready.by_ref().take(size).collect();
                while !next.is_empty() {
                    let batch = std::mem::take(&mut next);
                    let (done, following) = rayon::join(
                        || {
                            batch
                                .into_par_iter()
                                .map(|(w, cnp_ts, width)| {
                                    analyse_flow(w, cnp_ts, context(width), &mut |_, _| {})
                                })
                                .collect::<Vec<_>>()
                        },
                        || ready.by_ref().take(size).collect::<Vec<_>>(),
                    );
                    next = following;
                    for f in done {
                        flows.push(f?);
                    }
                }
            }
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
            // Each fit is its own: over the pool's threads too, the first error in the flows' order.
            let fitted: Vec<Result<(), DcqcnError>> = flows
                .par_iter_mut()
                .take(opts.fit_flows)
                .map(|f| {
                    if f.summary.rp_enabled == Some(false) {
                        return Ok(());
                    }
                    let times = opts.model_times(&f.cnp_ts_ns.to_vec());
                    if !times.is_empty() {
                        let line_mbps = opts.line_of(f.summary.iface).mbps();
                        let (knobs, _) = model_knobs(opts, f.summary.sender, line_mbps);
                        f.summary.fit = fit_knobs(&times, f, grid, end, (opts, knobs))?;
                    }
                    Ok(())
                })
                .collect();
            fitted.into_iter().collect::<Result<(), _>>()?;
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
