//! `hops` as text: the taps, the hops with their delays and losses, the queues with their depth and marking
//! curve, the NP check and the findings.

use std::io::{self, Write};

use crate::analysis::hist::Percentiles;
use crate::analysis::hops::{HopReport, HopsReport, QueueReport};
use crate::output::empty;
use crate::output::text::table;
use roce_core::text::escape_control as esc;

fn ns(p: &Percentiles) -> [String; 3] {
    [p.p50, p.p99, p.max].map(|v| format!("{:.0}", v))
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// A queue's numbers as the text table and the report's table both show them: packets, drain rate, bytes
/// ahead (p50, p99, max), CE/ECT and the fitted curve, each parameter with its 95 % interval.
pub fn queue_cells(q: &QueueReport) -> Vec<String> {
    let b = q.queue_bytes.unwrap_or_default();
    let m = &q.marking;
    vec![
        q.packets.to_string(),
        format!(
            "{}{}",
            opt(q.drain_gbps, 2),
            if q.drain_measured { " (measured)" } else { "" }
        ),
        format!("{:.0}", b.p50),
        format!("{:.0}", b.p99),
        format!("{:.0}", b.max),
        format!("{}/{}", m.marked, m.ect_in),
    ]
    .into_iter()
    .chain(
        m.describe(1.0, 0)
            .unwrap_or_else(|| ["-".into(), "-".into(), "-".into()]),
    )
    .chain([opt(m.fit_rmse, 3)])
    .collect()
}

/// A hop's drift as the text table and the report's table both show it: `shared` for taps of one file, the
/// drift in ppm where the clock windows pinned it, and otherwise the range of drifts that fit, `? (LOW…HIGH)`
/// (`unknown` if the hop never had a packet measured across its two clocks). The drift the delays assume is
/// then only the value of that range nearest zero, and printed alone it would read as a measurement.
pub fn drift_cell(h: &HopReport) -> String {
    match (h.shared_clock, h.drift_known, h.drift_range_ppm) {
        (true, ..) => "shared".into(),
        (false, true, Some(_)) => format!("{:+.1}", h.drift_ppm),
        (false, _, Some([low, high])) => format!("? ({low:+.1}…{high:+.1})"),
        (false, _, None) => "unknown".into(),
    }
}

/// Writes the `hops` command's answer as aligned text tables, for a terminal.
pub fn print_hops(out: &mut impl Write, r: &HopsReport) -> io::Result<()> {
    writeln!(out, "Taps")?;
    let rows: Vec<Vec<String>> = r
        .taps
        .iter()
        .map(|t| {
            vec![
                t.tap.clone(),
                t.packets.to_string(),
                t.psn_gaps.to_string(),
                t.isb_dropped.map_or("-".into(), |d| d.to_string()),
            ]
        })
        .collect();
    table(out, &["tap", "roce pkts", "psn gaps", "isb drops"], &rows)?;
    if r.hops.is_empty() {
        writeln!(out, "\n{}", empty::no_hops(r.taps.len()))?;
    } else {
        print_hops_and_queues(out, r)?;
    }
    if !r.np.is_empty() {
        writeln!(out, "\nNotification point (CNPs per tap)")?;
        let rows: Vec<Vec<String>> =
            r.np.iter()
                .map(|n| {
                    let [p50, p99, max] = n
                        .ce_to_cnp_ns
                        .as_ref()
                        .map_or(["-".into(), "-".into(), "-".into()], ns);
                    vec![
                        n.tap.clone(),
                        n.cnps.to_string(),
                        n.qps.to_string(),
                        p50,
                        p99,
                        max,
                        n.min_spacing_ns.map_or("-".into(), |v| v.to_string()),
                        format!("{} (< {} ns)", n.below_min_gap, n.min_gap_ns),
                    ]
                })
                .collect();
        table(
            out,
            &[
                "tap",
                "cnps",
                "qps",
                "ce→cnp p50",
                "p99",
                "max",
                "min spacing",
                "too close",
            ],
            &rows,
        )?;
    }
    if !r.findings.is_empty() {
        writeln!(out, "\nFindings")?;
        for f in &r.findings {
            writeln!(out, "- {}: {}", esc(&f.title), esc(&f.detail))?;
            for e in &f.evidence {
                writeln!(out, "    {}", esc(e))?;
            }
        }
    }
    Ok(())
}

/// The hops with their delays, and the queues with their depth and marking curve.
fn print_hops_and_queues(out: &mut impl Write, r: &HopsReport) -> io::Result<()> {
    writeln!(out, "\nHops (queue delay = delay beyond the least, in ns)")?;
    let rows: Vec<Vec<String>> = r
        .hops
        .iter()
        .map(|h| {
            let [p50, p99, max] = ns(&h.queue_delay_ns);
            vec![
                format!("{} → {}", h.from, h.to),
                h.matched.to_string(),
                h.unmatched.to_string(),
                format!(
                    "{}{}",
                    h.clock_offset_ns,
                    if h.order_assumed {
                        " (order assumed)"
                    } else {
                        ""
                    }
                ),
                drift_cell(h),
                p50,
                p99,
                max,
            ]
        })
        .collect();
    table(
        out,
        &[
            "hop",
            "matched",
            "unmatched",
            "offset+base",
            "drift ppm",
            "q p50",
            "q p99",
            "q max",
        ],
        &rows,
    )?;
    writeln!(out, "\nQueues (bytes ahead of a packet as it entered)")?;
    let rows: Vec<Vec<String>> = r
        .queues
        .iter()
        .map(|q| {
            let mut row = vec![format!("{} prio {}", q.tap, q.priority), q.from.join(",")];
            row.extend(queue_cells(q));
            row
        })
        .collect();
    table(
        out,
        &[
            "queue",
            "from",
            "packets",
            "drain Gb/s",
            "B p50",
            "B p99",
            "B max",
            "CE/ECT",
            "Kmin B (95 %)",
            "Kmax B (95 %)",
            "Pmax (95 %)",
            "rmse",
        ],
        &rows,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::drift_cell;
    use crate::analysis::hops::{HopReport, Series};

    fn hop(shared: bool, known: bool, drift_ppm: f64, range: Option<[f64; 2]>) -> HopReport {
        HopReport {
            from: "a.pcapng:in".into(),
            to: "b.pcapng:out".into(),
            matched: 10,
            unmatched: 0,
            only_from: 0,
            only_to: 0,
            outside_capture: 0,
            retransmitted: 0,
            loss: None,
            clock_offset_ns: 1_000,
            drift_ppm,
            drift_known: known,
            drift_range_ppm: range,
            clock_error_ns: 0.0,
            frame_time: (0.0, 0.0),
            shared_clock: shared,
            order_assumed: false,
            queue_delay_ns: Default::default(),
            series: Series {
                start_ns: 0,
                bin_ns: 1_000,
                bins: Vec::new(),
            },
        }
    }

    /// Only a drift the windows pinned is written as a number; an assumed one shows the range that fits,
    /// never the `+0.0` it was measured with.
    #[test]
    fn a_drift_looks_exact_only_when_it_is_known() {
        assert_eq!(drift_cell(&hop(true, true, 0.0, None)), "shared");
        assert_eq!(
            drift_cell(&hop(false, true, 19.987, Some([19.987, 19.987]))),
            "+20.0"
        );
        assert_eq!(
            drift_cell(&hop(false, false, 0.0, Some([-100.0, 73.94]))),
            "? (-100.0…+73.9)"
        );
        // A hop whose packets were all retransmissions: no line was ever laid between its clocks.
        assert_eq!(drift_cell(&hop(false, true, 0.0, None)), "unknown");
    }
}
