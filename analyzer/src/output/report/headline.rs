//! The headline: the capture in a few numbers and one sentence, at the top of the page, of the text the
//! `report` command prints, and in `summary.json`. It says what the analysis knows and, where it cannot tell,
//! says so.
//!
//! Every packet counts once: a flow seen at two taps (its sender's and its receiver's) is counted at the tap
//! that saw most of it, as every other table of the report does ([`tap_preference`]); so are CNP streams and
//! pauses. Data packets are those that carry payload, never ACKs or CNPs. The peak rate is the busiest bin of
//! the busiest link direction with each frame spread over its serialization time, so it never exceeds the
//! line it was measured on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use super::ReportInput;
use super::axis::fmt_duration;
use crate::analysis::dcqcn::FlowDcqcn;
use crate::analysis::findings::Severity;
use crate::analysis::tap_preference;
use roce_core::line::LineRate;
use roce_core::units::fmt_rate;

/// The numbers and the verdict; `summary.json` carries them as its `headline`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Headline {
    /// (what, value), in the order shown.
    #[serde(skip)]
    pub facts: Vec<(&'static str, String)>,
    /// One sentence.
    pub verdict: String,
    /// The capture's span, first frame to last.
    pub span_ns: u64,
    /// Data packets (those that carry payload), each counted once.
    pub data_packets: u64,
    /// The data's throughput over the bins from its first busy one to its last (idle bins inside count as
    /// zero), every flow counted once; null without data.
    pub mean_gbps: Option<f64>,
    /// The busiest bin of the busiest link direction; never above `line_gbps`; null without data.
    pub peak_gbps: Option<f64>,
    /// The line rate of the tap the peak was measured at (without data, the capture's): `line_gbps`, and
    /// `line_rate_source` (`if_speed`, `flag` or `assumed`).
    #[serde(flatten)]
    pub line: LineRate,
    /// CE-marked data packets over data packets, 0 without data.
    pub ce_fraction: f64,
    /// CNPs, each counted once.
    pub cnps: u64,
    /// PFC and PAUSE time summed over sources and priorities, each pause counted once.
    pub paused_ns: u64,
}

impl fmt::Display for Headline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.verdict)?;
        let facts: Vec<String> = self.facts.iter().map(|(k, v)| format!("{k} {v}")).collect();
        write!(f, "  {}", facts.join(" · "))
    }
}

/// The data's throughput, Gb/s: the mean over the bins it was busy from first to last, every flow counted
/// once, and the busiest link direction's peak with that link's line rate.
struct Throughput {
    mean: f64,
    peak: f64,
    line: LineRate,
}

fn throughput(input: &ReportInput<'_>) -> Option<Throughput> {
    let t = &input.dcqcn.traffic;
    let (first, last) = (t.aggregate.first()?, t.aggregate.last()?);
    let peak = t.peak.as_ref()?;
    let bin = input.dcqcn.bin_ns.max(1);
    // Over the data's span, idle bins inside it counting as zero.
    let bins = (last.t_ns - first.t_ns) / bin + 1;
    let mean = t.aggregate.iter().map(|b| b.gbps).sum::<f64>() / bins as f64;
    Some(Throughput {
        mean,
        peak: peak.gbps,
        line: peak.line,
    })
}

/// `value` summed over `rows`, each thing (`key`) counted once, at the tap that saw most of it (`seen`: the
/// tap and how much it saw there).
fn sum_once<'a, T, K: Ord>(
    rows: &'a [T],
    key: impl Fn(&'a T) -> K,
    seen: impl Fn(&T) -> (u32, u64),
    value: impl Fn(&T) -> u64,
) -> u64 {
    let mut once: BTreeMap<K, &T> = BTreeMap::new();
    for r in rows {
        let e = once.entry(key(r)).or_insert(r);
        let ((a, n), (b, m)) = (seen(r), seen(e));
        if tap_preference(a, n) > tap_preference(b, m) {
            *e = r;
        }
    }
    once.values().map(|r| value(r)).sum()
}

/// PFC and PAUSE time, each pause counted once: a pause seen at both ends of a link counts at the tap that saw
/// most of its frames.
fn paused_once(input: &ReportInput<'_>) -> u64 {
    sum_once(
        &input.stats.pfc,
        |p| (p.src_mac.as_str(), p.kind, p.priority),
        |p| (p.iface, p.frames),
        |p| p.paused_ns,
    )
}

/// Retransmitted packets, each flow counted at the tap that saw most of it.
fn retransmitted_once(input: &ReportInput<'_>) -> u64 {
    sum_once(
        &input.stats.flows,
        |f| (f.src, f.dst, f.dest_qp),
        |f| (f.iface, f.packets),
        |f| f.retransmissions,
    )
}

/// A share of the line in percent, to a tenth: a link at 99.6 % is not full, and a trickle is not nothing.
fn pct(v: f64, line: LineRate) -> String {
    match 100.0 * v / line.gbps() {
        p if p > 0.0 && p < 0.05 => "under 0.1 %".into(),
        p => format!("{p:.1} %"),
    }
}

/// Computes the headline of a report.
pub fn headline(input: &ReportInput<'_>) -> Headline {
    let s = input.stats;
    let d = input.dcqcn;
    let t = &d.traffic;
    let packets = t.data_packets;
    let ce_fraction = t.ce_packets as f64 / packets.max(1) as f64;
    let cnps: u64 = d.flows.iter().map(|f| f.summary.cnps).sum::<u64>()
        + d.unpaired_cnps.iter().map(|u| u.cnps).sum::<u64>();
    let paused_ns = paused_once(input);
    let tput = throughput(input);
    let line = tput.as_ref().map_or(d.line, |t| t.line);
    let mut facts = vec![("span", fmt_duration(s.capture.duration_ns))];
    facts.push((
        "throughput",
        match &tput {
            Some(t) => format!(
                "{} mean over all flows, {} peak on one link ({} of its {} line)",
                fmt_rate(t.mean * 1e9),
                fmt_rate(t.peak * 1e9),
                pct(t.peak, line),
                fmt_rate(line.bps as f64)
            ),
            None => "no RoCE data".into(),
        },
    ));
    facts.push(("line rate", line.value()));
    facts.push((
        "CE",
        format!("{:.2} % of {packets} data packets", 100.0 * ce_fraction),
    ));
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
        verdict: verdict(input, tput.as_ref(), t.ce_packets, cnps, paused_ns),
        span_ns: s.capture.duration_ns,
        data_packets: packets,
        mean_gbps: tput.as_ref().map(|t| t.mean),
        peak_gbps: tput.as_ref().map(|t| t.peak),
        line,
        ce_fraction,
        cnps,
        paused_ns,
    }
}

fn verdict(
    input: &ReportInput<'_>,
    tput: Option<&Throughput>,
    ce: u64,
    cnps: u64,
    paused_ns: u64,
) -> String {
    let d = input.dcqcn;
    let Some(tput) = tput else {
        // RoCE frames with no payload among them (atomics, READ requests, ACKs) are traffic all the same: say
        // they were seen, and why no rate is judged.
        let kinds = &input.stats.capture.frames_by_kind;
        let roce = kinds.get("roce").copied().unwrap_or(0) + kinds.get("cnp").copied().unwrap_or(0);
        return if roce > 0 {
            let frames = if roce == 1 { "frame" } else { "frames" };
            format!(
                "No RoCE packet with payload in this capture ({roce} RoCE {frames}, none with a payload: \
                 requests, acknowledgements, atomics or CNPs): no data rate to judge."
            )
        } else {
            "No RoCE data traffic in this capture: nothing to judge.".into()
        };
    };
    let mean = fmt_rate(tput.mean * 1e9);
    let mut parts = Vec::new();
    let congested: Vec<&FlowDcqcn> = d
        .flows
        .iter()
        .filter(|f| f.summary.cnps > 0 || f.summary.ce_packets > 0)
        .collect();
    if congested.is_empty() {
        if paused_ns == 0 {
            let retx = retransmitted_once(input);
            let mut v = format!("clean at {mean}");
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
                "congestion on {} flow{} at {mean}",
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
    // The shares of the line, the pause times and the model all rest on it: a guess is said with the verdict.
    if tput.line.assumed() {
        parts.push(tput.line.to_string());
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
