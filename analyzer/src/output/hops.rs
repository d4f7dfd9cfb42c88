//! `hops` as text: the taps, the hops with their delays and losses, the queues with their depth and marking
//! curve, the NP check and the findings.

use std::io::{self, Write};

use crate::analysis::hist::Percentiles;
use crate::analysis::hops::{HopsReport, QueueReport};
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
                if h.shared_clock {
                    "shared".into()
                } else {
                    format!("{:+.1}", h.drift_ppm)
                },
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
