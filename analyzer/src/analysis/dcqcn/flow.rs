//! One flow's analysis: its model fed with its CNPs, under the guard, and set beside what it sent. The events
//! are consumed as the model makes them (cuts kept, the series decimated, the stretches integrated, each
//! handed to the caller), so that no flow holds its every event.

use std::net::IpAddr;
use std::sync::Arc;

use roce_core::dcqcn::{DcqcnError, Event, EventKind};
use roce_core::dcqcn_options::{Options, model_knobs};
use roce_core::passes::rates::within_line;

use crate::analysis::on_disk::{DiskVec, Store};

use super::decimate::Decimator;
use super::grid::Grid;
use super::observed::{Paused, observed_cuts, observed_series};
use super::report::{Cut, FlowDcqcn, FlowId, FlowSummary};
use super::stretches::{Stretches, Tally};
use super::window::Window;
use super::work::Work;

/// What every flow's analysis shares.
#[derive(Clone, Copy)]
pub(super) struct FlowContext<'a> {
    /// The rate grid of the flow's bins.
    pub(super) grid: Grid,
    /// The columns of the decimated model series.
    pub(super) columns: Grid,
    /// The capture's last frame: every model runs until then.
    pub(super) end: u64,
    /// When PFC or PAUSE held the flow's priority back.
    pub(super) paused: &'a Paused,
    pub(super) opts: &'a Options,
    /// Where the flow's CNP times and cuts go once its model has run.
    pub(super) kept: &'a Arc<Store>,
}

/// The flow `w` analysed with its CNP times (`cnp_ts`, as captured, in any order): its summary without the
/// fit (which [`super::fit`] adds for the flows with most CNPs, once all are known), its model series and
/// observation; every model event goes to `on_event` as it is made.
pub(super) fn analyse_flow(
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
    let enabled = |host: IpAddr, np: bool| opts.enabled(host, s.priority, np);
    // The line of the tap the flow's data was taken from: what its sender's NIC could send at.
    let line = opts.line_of(s.iface);
    let rp_enabled = enabled(s.key.src, false);
    let np_enabled = enabled(s.key.dst, true);
    // A reaction point that is off on the flow's priority ignores its CNPs (the NIC counts them in
    // rp_cnp_ignored): the model has none to act on.
    let times = if rp_enabled == Some(false) {
        Vec::new()
    } else {
        opts.model_times(&cnp_ts)
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
    let stopped_ns = opts.run_model((knobs, line.mbps()), &times, end, |e| {
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
