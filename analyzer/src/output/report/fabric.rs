//! The fabric section: the hosts side by side. Two host × host heatmaps (each pair's rate, and its CE-marked
//! share), the slow pairs with their reasons, and the hosts' own numbers, so that the pair a collective waits
//! for stands out before any per-QP chart is read.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::charts::{Cell, Chart, Heatmap, PALETTE};
use super::{Report, ReportError, html};
use crate::analysis::fabric::{FabricReport, PairRow};
use crate::output::fabric::NO_PAIRS;
use roce_core::units::fmt_rate;

/// Hosts a heatmap has rows and columns for: past this the cells would be too small to read, and the
/// fabric_pairs table has every pair.
pub const MAX_HEATMAP_HOSTS: usize = 32;

/// Rows of the slow pairs' and the hosts' tables on the page (the tables' files have them all).
const MAX_ROWS: usize = 32;

pub(super) fn write(r: &mut Report<'_>) -> Result<(), ReportError> {
    r.page.section("fabric", "Fabric: host pairs side by side");
    let f = r.input.fabric;
    if f.pairs.is_empty() {
        r.page.para("note", NO_PAIRS);
        return Ok(());
    }
    r.page.para("sentence", &sentence(f));
    let (hosts, left_out) = shown_hosts(f);
    r.chart(
        "fabric_rate",
        &rate_map(f, &hosts),
        "Each pair's data rate over the capture's span, sender by row, receiver by column; grey: no data.",
    )?;
    r.chart(
        "fabric_ce",
        &ce_map(f, &hosts),
        "The CE-marked share of each pair's data packets (as the tap furthest along saw them).",
    )?;
    if left_out > 0 {
        r.page.para(
            "note",
            &format!(
                "The heatmaps show the {MAX_HEATMAP_HOSTS} hosts that sent and received most, and the ends of \
                 the slow pairs; {left_out} more are in fabric_hosts.csv and fabric_pairs.csv."
            ),
        );
    }
    if !f.slowest.is_empty() {
        r.page.raw(&slowest_table(f));
    }
    r.page.raw(&hosts_table(f));
    r.page.para(
        "note",
        "Each packet counts once however many taps saw it. A pause is tied to a host only where the capture \
         shows whom it stopped (a host's own MAC, or the switch at the other end of a tap on the host's link); \
         a dash where it cannot tell. Definitions: docs/fabric.md.",
    );
    Ok(())
}

/// What the section says in one sentence: the median pair, and the slow ones with their first reasons.
pub fn sentence(f: &FabricReport) -> String {
    let median = f.median_gbps.map_or("-".into(), |m| fmt_rate(m * 1e9));
    let head = format!(
        "{} host pairs carried data among {} hosts; the median pair ran at {median}",
        f.pairs.len(),
        f.hosts.len()
    );
    let below = format!("{:.0} %", 100.0 * f.slow_below);
    match &f.slowest[..] {
        [] => format!("{head}, and no pair ran below {below} of it."),
        [s, rest @ ..] => {
            let why: Vec<&str> = s.reasons.iter().map(|r| r.code).collect();
            let more = if rest.is_empty() {
                String::new()
            } else {
                format!(" ({} more below {below})", rest.len())
            };
            format!(
                "{head}; the slowest, {} → {}, ran at {} ({:.0} % of it): {}{more}.",
                s.src,
                s.dst,
                fmt_rate(s.gbps * 1e9),
                100.0 * s.share_of_median,
                reason_words(&why)
            )
        }
    }
}

/// The reason codes as a reader says them.
fn reason_words(codes: &[&str]) -> String {
    let words: Vec<&str> = codes
        .iter()
        .map(|c| match *c {
            "ce_marked" => "CE-marked",
            "cnps" => "throttled by CNPs",
            "pfc_paused" => "paused by PFC",
            "retransmitting" => "losing and retransmitting",
            _ => "not held back by the network the capture saw",
        })
        .collect();
    words.join(", ")
}

/// The hosts the heatmaps show, in address order: the ends of the slow pairs first, then the busiest, up to
/// [`MAX_HEATMAP_HOSTS`]; and how many were left out.
fn shown_hosts(f: &FabricReport) -> (Vec<IpAddr>, usize) {
    let mut bytes: BTreeMap<IpAddr, u64> = BTreeMap::new();
    for p in &f.pairs {
        *bytes.entry(p.src).or_default() += p.bytes;
        *bytes.entry(p.dst).or_default() += p.bytes;
    }
    let all = bytes.len();
    let mut order: Vec<IpAddr> = Vec::new();
    for s in &f.slowest {
        for h in [s.src, s.dst] {
            if !order.contains(&h) {
                order.push(h);
            }
        }
    }
    let mut busiest: Vec<(IpAddr, u64)> = bytes.into_iter().collect();
    busiest.sort_by_key(|&(h, b)| (std::cmp::Reverse(b), h));
    for (h, _) in busiest {
        if !order.contains(&h) {
            order.push(h);
        }
    }
    order.truncate(MAX_HEATMAP_HOSTS);
    order.sort();
    let shown = order.len();
    (order, all - shown)
}

/// A host × host heatmap of `value` for each pair that carried data.
fn host_map(
    f: &FabricReport,
    hosts: &[IpAddr],
    value: impl Fn(&PairRow) -> Option<Cell>,
) -> Vec<Vec<Option<Cell>>> {
    let by: BTreeMap<(IpAddr, IpAddr), &PairRow> =
        f.pairs.iter().map(|p| ((p.src, p.dst), p)).collect();
    hosts
        .iter()
        .map(|src| {
            hosts
                .iter()
                .map(|dst| by.get(&(*src, *dst)).and_then(|p| value(p)))
                .collect()
        })
        .collect()
}

fn names(hosts: &[IpAddr]) -> Vec<String> {
    hosts.iter().map(IpAddr::to_string).collect()
}

/// Each pair's rate, from white (nothing) to the fastest pair's.
pub fn rate_map(f: &FabricReport, hosts: &[IpAddr]) -> Chart {
    let max = f.pairs.iter().filter_map(|p| p.gbps).fold(0.0f64, f64::max);
    Chart::Heatmap(Heatmap {
        title: "Rate per host pair (Gb/s)".into(),
        x_label: "receiver".into(),
        y_label: "sender".into(),
        columns: names(hosts),
        rows: names(hosts),
        cells: host_map(f, hosts, |p| {
            p.gbps.map(|g| Cell {
                value: g,
                text: fmt_rate(g * 1e9),
            })
        }),
        max,
        color: PALETTE[0],
        scale: ("0".into(), fmt_rate(max * 1e9)),
    })
}

/// Each pair's CE-marked share, from white (none) to the most marked pair's.
pub fn ce_map(f: &FabricReport, hosts: &[IpAddr]) -> Chart {
    let max = f.pairs.iter().map(|p| p.ce_fraction).fold(0.0f64, f64::max);
    Chart::Heatmap(Heatmap {
        title: "CE-marked share of each pair's packets".into(),
        x_label: "receiver".into(),
        y_label: "sender".into(),
        columns: names(hosts),
        rows: names(hosts),
        cells: host_map(f, hosts, |p| {
            Some(Cell {
                value: p.ce_fraction,
                text: format!("{:.1} %", 100.0 * p.ce_fraction),
            })
        }),
        max,
        color: PALETTE[5],
        scale: ("0 %".into(), format!("{:.1} %", 100.0 * max)),
    })
}

fn slowest_table(f: &FabricReport) -> String {
    let rows: Vec<Vec<String>> = f
        .slowest
        .iter()
        .take(MAX_ROWS)
        .enumerate()
        .map(|(i, s)| {
            // The reasons' words, short enough for a table cell; their full texts with the numbers are in
            // summary.json, and the numbers in the hosts' table and the heatmaps.
            let why: Vec<&str> = s.reasons.iter().map(|r| r.code).collect();
            vec![
                (i + 1).to_string(),
                s.src.to_string(),
                s.dst.to_string(),
                fmt_rate(s.gbps * 1e9),
                format!("{:.0} %", 100.0 * s.share_of_median),
                reason_words(&why),
            ]
        })
        .collect();
    let rest = rest_row(f.slowest.len(), 6, "slow pairs");
    html::table(
        &["", "sender", "receiver", "rate", "of the median", "why"],
        &rows,
        &[1, 2, 5],
        rest.as_deref(),
    )
}

fn hosts_table(f: &FabricReport) -> String {
    let dash = || "-".to_string();
    let rows: Vec<Vec<String>> = f
        .hosts
        .iter()
        .take(MAX_ROWS)
        .map(|h| {
            vec![
                h.host.to_string(),
                h.tx_gbps.map_or_else(dash, |g| fmt_rate(g * 1e9)),
                h.rx_gbps.map_or_else(dash, |g| fmt_rate(g * 1e9)),
                h.cnps_sent.to_string(),
                h.cnps_received.to_string(),
                h.pauses_sent.map_or_else(dash, |n| n.to_string()),
                h.paused_ns
                    .map_or_else(dash, |n| format!("{:.1}", n as f64 / 1e3)),
                h.retransmitted.to_string(),
            ]
        })
        .collect();
    let rest = rest_row(f.hosts.len(), 8, "hosts");
    html::table(
        &[
            "host",
            "sent",
            "received",
            "CNPs sent",
            "CNPs received",
            "pauses sent",
            "paused (µs)",
            "retransmitted",
        ],
        &rows,
        &[0],
        rest.as_deref(),
    )
}

/// The last row of a table cut at [`MAX_ROWS`]: how many more there are, and where.
fn rest_row(total: usize, columns: usize, what: &str) -> Option<Vec<String>> {
    (total > MAX_ROWS).then(|| {
        let mut row = vec![String::new(); columns];
        row[0] = format!("{} more {what} in the fabric tables", total - MAX_ROWS);
        row
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_codes_read_as_words() {
        assert_eq!(
            reason_words(&["ce_marked", "cnps"]),
            "CE-marked, throttled by CNPs"
        );
        assert_eq!(
            reason_words(&["not_the_network"]),
            "not held back by the network the capture saw"
        );
    }
}
