//! The headline: the capture in six numbers and one sentence, at the top of the page and of the text the
//! `report` command prints. It says what the analysis knows and, where it cannot tell, says so.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use super::ReportInput;
use super::axis::{fmt_duration, fmt_num};
use crate::analysis::dcqcn::FlowDcqcn;
use crate::analysis::findings::Severity;

/// The numbers and the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Headline {
    /// (what, value), in the order shown.
    pub facts: Vec<(&'static str, String)>,
    /// One sentence.
    pub verdict: String,
}

impl fmt::Display for Headline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.verdict)?;
        let facts: Vec<String> = self.facts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        write!(f, "  {}", facts.join(" · "))
    }
}

/// The traffic's throughput over the bins it was busy in: mean and peak, Gb/s.
fn throughput(input: &ReportInput<'_>) -> Option<(f64, f64)> {
    let agg = &input.dcqcn.traffic.aggregate;
    let (first, last) = (agg.first()?, agg.last()?);
    let bin = input.dcqcn.bin_ns.max(1);
    // Over the data's span, idle bins inside it counting as zero.
    let bins = (last.t_ns - first.t_ns) / bin + 1;
    let mean = agg.iter().map(|b| b.gbps).sum::<f64>() / bins as f64;
    let peak = agg.iter().map(|b| b.gbps).fold(0.0, f64::max);
    Some((mean, peak))
}

/// Computes the headline of a report.
pub fn headline(input: &ReportInput<'_>) -> Headline {
    let s = input.stats;
    let d = input.dcqcn;
    let packets: u64 = s.flows.iter().map(|f| f.packets).sum();
    let ce: u64 = s.flows.iter().map(|f| f.ce_packets).sum();
    let cnps: u64 = s.cnps.iter().map(|c| c.count).sum();
    let paused_ns: u64 = s.pfc.iter().map(|p| p.paused_ns).sum();
    let ce_pct = 100.0 * ce as f64 / packets.max(1) as f64;
    let line = d.line_gbps;
    let tput = throughput(input);
    let mut facts = vec![("span", fmt_duration(s.capture.duration_ns))];
    facts.push((
        "throughput",
        match tput {
            Some((mean, peak)) => format!(
                "{:.1} Gb/s mean, {:.1} Gb/s peak ({:.0} % and {:.0} % of one {} Gb/s line)",
                mean,
                peak,
                100.0 * mean / line,
                100.0 * peak / line,
                fmt_num(line)
            ),
            None => "no RoCE data".into(),
        },
    ));
    facts.push(("CE", format!("{ce_pct:.2} % of {packets} data packets")));
    facts.push(("CNPs", cnps.to_string()));
    facts.push((
        "PFC pause",
        if paused_ns == 0 {
            "none".into()
        } else {
            format!(
                "{} (summed over sources and priorities)",
                fmt_duration(paused_ns)
            )
        },
    ));
    Headline {
        facts,
        verdict: verdict(input, tput, ce, cnps, paused_ns),
    }
}

fn verdict(
    input: &ReportInput<'_>,
    tput: Option<(f64, f64)>,
    ce: u64,
    cnps: u64,
    paused_ns: u64,
) -> String {
    let d = input.dcqcn;
    let Some((mean, _)) = tput else {
        return "No RoCE data traffic in this capture: nothing to judge.".into();
    };
    let mut parts = Vec::new();
    let congested: Vec<&FlowDcqcn> = d
        .flows
        .iter()
        .filter(|f| f.summary.cnps > 0 || f.summary.ce_packets > 0)
        .collect();
    if congested.is_empty() {
        if paused_ns == 0 {
            let retx: u64 = input.stats.flows.iter().map(|f| f.retransmissions).sum();
            let mut v = format!(
                "clean at {mean:.1} Gb/s ({:.0} % of one line)",
                100.0 * mean / d.line_gbps
            );
            if retx > 0 {
                v.push_str(&format!(", but {retx} packets were retransmitted"));
            }
            parts.push(v);
        }
    } else {
        // The receiver most senders were congested towards: two or more make an incast.
        let mut senders: BTreeMap<IpAddr, BTreeSet<IpAddr>> = BTreeMap::new();
        for f in &congested {
            senders
                .entry(f.summary.receiver)
                .or_default()
                .insert(f.summary.sender);
        }
        let (receiver, n) = senders
            .iter()
            .map(|(r, s)| (*r, s.len()))
            .max_by_key(|&(r, n)| (n, std::cmp::Reverse(r)))
            .unwrap_or((congested[0].summary.receiver, 1));
        let group: Vec<&FlowDcqcn> = if n > 1 {
            congested
                .iter()
                .copied()
                .filter(|f| f.summary.receiver == receiver)
                .collect()
        } else {
            congested.clone()
        };
        let mut v = if n > 1 {
            format!("{n}:1 incast at {receiver}")
        } else {
            format!(
                "congestion on {} flow{} at {mean:.1} Gb/s",
                congested.len(),
                if congested.len() == 1 { "" } else { "s" }
            )
        };
        v.push_str(&convergence(input, &group));
        parts.push(v);
    }
    if paused_ns > 0 {
        let storms = input.pauses.storms.len();
        parts.push(if storms > 0 {
            format!(
                "{storms} PFC storm{} ({} paused in all)",
                if storms == 1 { "" } else { "s" },
                fmt_duration(paused_ns)
            )
        } else {
            format!("PFC paused traffic for {}", fmt_duration(paused_ns))
        });
    }
    if ce == 0 && cnps > 0 && d.flows.is_empty() {
        parts.push(format!("{cnps} CNPs that no data flow could be tied to"));
    }
    let problems = input
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Problem)
        .count();
    if problems > 0 {
        parts.push(format!(
            "{problems} problem{} found (see Findings)",
            if problems == 1 { "" } else { "s" }
        ));
    }
    let mut v = parts.join("; ");
    if let Some(c) = v.get(..1) {
        v = c.to_uppercase() + &v[1..];
    }
    v.push('.');
    v
}

/// Whether DCQCN settled the congestion of `flows`, judged by their CNPs: they stop once the queue no longer
/// marks. The clause says how long the CNPs lasted, or that they went on to the end of the capture (then the
/// capture cannot tell whether it settled).
fn convergence(input: &ReportInput<'_>, flows: &[&FlowDcqcn]) -> String {
    let first = flows.iter().filter_map(|f| f.cnp_ts_ns.first()).min();
    let last = flows.iter().filter_map(|f| f.cnp_ts_ns.last()).max();
    let (Some(first), Some(last)) = (first, last) else {
        return ", CE-marked but no CNP came back".into();
    };
    let d = input.dcqcn;
    let end = d
        .traffic
        .aggregate
        .last()
        .map_or(last, |b| b.t_ns.saturating_add(d.bin_ns));
    let start = d.traffic.aggregate.first().map_or(first, |b| b.t_ns);
    // Quiet for a tenth of the traffic's span (at least two bins) before it ended: settled.
    let quiet = ((end.saturating_sub(start)) / 10).max(2 * d.bin_ns);
    if last.saturating_add(quiet) <= end {
        format!(", DCQCN converged in {}", fmt_duration(last - first))
    } else {
        format!(
            ", CNPs still arriving at the end of the capture ({} after the first): it cannot tell whether DCQCN converged",
            fmt_duration(last - first)
        )
    }
}
