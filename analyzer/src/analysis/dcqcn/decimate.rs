//! The model series kept for the charts, in a size that does not grow with the capture: each flow's events
//! decimated into columns over the capture's span (fine for the flows a chart may show, shared among the
//! others), keeping in each column only the events a step chart of Rc, Rt and alpha needs.

use roce_core::dcqcn::Event;

use super::grid::Grid;
use super::report::ModelPoint;
use super::work::Work;

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

/// Width of the columns that cut the span from `start` to `end` into `columns`.
pub(super) fn column_width(start: u64, end: u64, columns: u64) -> u64 {
    (end.saturating_sub(start) / columns).saturating_add(1)
}

/// Each flow's model column width: [`MODEL_COLUMNS`] for the [`CHART_FLOWS`] with most CNPs, then CE marks
/// (then the flow key, for a stable choice); the other flows share [`SHARED_MODEL_COLUMNS`].
pub(super) fn model_columns(work: &[Work<'_>], start: u64, end: u64) -> Vec<u64> {
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

/// The model series, decimated as it is made: per column, the events a chart needs.
#[derive(Debug)]
pub(super) struct Decimator {
    columns: Grid,
    column: Option<u64>,
    /// (order of arrival, event): the first and last of the column, and where Rc, Rt and alpha are lowest and
    /// highest.
    picks: [Option<(u64, Event)>; 8],
    seen: u64,
    out: Vec<ModelPoint>,
}

impl Decimator {
    pub(super) fn new(columns: Grid) -> Decimator {
        Decimator {
            columns,
            column: None,
            picks: [None; 8],
            seen: 0,
            out: Vec::new(),
        }
    }

    /// Takes the model's next event; they come in time order, so a new column closes the last one.
    pub(super) fn push(&mut self, e: Event) {
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

    /// The series, once the model has run.
    pub(super) fn finish(mut self) -> Vec<ModelPoint> {
        self.flush();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use roce_core::passes::flows::FlowKey;
    use roce_core::passes::rates::FlowSeries;

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
