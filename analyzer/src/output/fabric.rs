//! `fabric` as text: the hosts, the pairs, and the slow pairs with their reasons, for a terminal. `--json`
//! carries the same numbers (docs/fabric.md).

use std::io::{self, Write};

use crate::analysis::fabric::FabricReport;
use crate::output::text::table;
use roce_core::text::escape_control as esc;
use roce_core::units::fmt_rate;

/// A rate in Gb/s as the tables write rates, `-` when there is none (a capture of one instant).
fn rate(gbps: Option<f64>) -> String {
    gbps.map_or("-".into(), |g| fmt_rate(g * 1e9))
}

/// A time in µs, `-` when the capture cannot tell.
fn micros(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |n| format!("{:.1}", n as f64 / 1e3))
}

fn count(n: Option<u64>) -> String {
    n.map_or("-".into(), |n| n.to_string())
}

/// Why the tables are empty, in words the report uses too.
pub const NO_PAIRS: &str = "No RoCE packet with payload in this capture: no host pair carried data, so there is nothing to compare.";

/// Writes the `fabric` command's answer as aligned text tables.
pub fn print_fabric(out: &mut impl Write, r: &FabricReport) -> io::Result<()> {
    writeln!(
        out,
        "Fabric  {} hosts, {} pairs with data over {:.6} s; median pair {}",
        r.hosts.len(),
        r.pairs.len(),
        r.span_ns as f64 / 1e9,
        rate(r.median_gbps)
    )?;
    writeln!(out, "\nHosts")?;
    let rows: Vec<Vec<String>> = r
        .hosts
        .iter()
        .map(|h| {
            vec![
                h.host.to_string(),
                h.mac.clone().unwrap_or_else(|| "-".into()),
                rate(h.tx_gbps),
                rate(h.rx_gbps),
                h.cnps_sent.to_string(),
                h.cnps_received.to_string(),
                count(h.pauses_sent),
                micros(h.paused_ns),
                h.retransmitted.to_string(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "host",
            "mac",
            "tx",
            "rx",
            "CNPs sent",
            "CNPs rcvd",
            "pauses sent",
            "paused µs",
            "retx",
        ],
        &rows,
    )?;
    if r.pairs.is_empty() {
        return writeln!(out, "\n{NO_PAIRS}");
    }
    writeln!(out, "\nPairs (src sends to dst)")?;
    let rows: Vec<Vec<String>> = r
        .pairs
        .iter()
        .map(|p| {
            vec![
                p.src.to_string(),
                p.dst.to_string(),
                p.flows.to_string(),
                p.packets.to_string(),
                p.bytes.to_string(),
                rate(p.gbps),
                format!("{:.3}", p.ce_fraction),
                p.cnps.to_string(),
                p.psn_gaps.to_string(),
                p.retransmitted.to_string(),
                p.priority.map_or("-".into(), |p| p.to_string()),
                micros(p.paused_ns),
            ]
        })
        .collect();
    table(
        out,
        &[
            "src",
            "dst",
            "flows",
            "packets",
            "bytes",
            "rate",
            "CE frac",
            "CNPs",
            "gaps",
            "retx",
            "prio",
            "paused µs",
        ],
        &rows,
    )?;
    print_slowest(out, r)?;
    if !r.links.is_empty() {
        writeln!(out, "\nHost links (where pauses are tied to hosts)")?;
        for l in &r.links {
            writeln!(out, "  {}: {}", esc(&l.tap), l.host)?;
        }
    }
    if !r.unplaced_pauses.is_empty() {
        writeln!(
            out,
            "\nPauses between switches, which no host pair can be tied to (pairs on these priorities show `-`)"
        )?;
        for u in &r.unplaced_pauses {
            writeln!(
                out,
                "  {} from {} on {}: {} pauses, {} µs",
                esc(&u.tap),
                esc(&u.src_mac),
                u.priority
                    .map_or("every priority (PAUSE)".into(), |p| format!("priority {p}")),
                u.pauses,
                micros(Some(u.paused_ns))
            )?;
        }
    }
    Ok(())
}

/// The slow pairs, each with its rate against the median and its reasons, one per line.
fn print_slowest(out: &mut impl Write, r: &FabricReport) -> io::Result<()> {
    let below = format!("{:.0} %", 100.0 * r.slow_below);
    if r.slowest.is_empty() {
        return writeln!(
            out,
            "\nNo pair runs below {below} of the median pair: the pairs run alike."
        );
    }
    writeln!(out, "\nSlowest pairs (below {below} of the median)")?;
    for (i, s) in r.slowest.iter().enumerate() {
        writeln!(
            out,
            "{:>3}. {} → {}  {}, {:.0} % of the median {}",
            i + 1,
            s.src,
            s.dst,
            fmt_rate(s.gbps * 1e9),
            100.0 * s.share_of_median,
            fmt_rate(s.median_gbps * 1e9)
        )?;
        for reason in &s.reasons {
            writeln!(out, "       {}", reason.text)?;
        }
    }
    Ok(())
}
