//! The aligned text tables `stats` and `dcqcn` print when no `--json` is asked for: what an engineer reads
//! in a terminal first. The JSON and the CSV/Parquet tables carry the same numbers for machines.

use std::io::{self, Write};
use std::net::IpAddr;

use crate::analysis::dcqcn::DcqcnReport;
use crate::output::empty;
use roce_capture::blocks::records::IpDrops;
use roce_core::line::describe_lines;
use roce_core::passes::StatsReport;
use roce_core::processes;
use roce_core::recorded as blocks;
use roce_core::text::escape_control as esc;
use roce_core::units::fmt_rate;

/// `dcqcn`'s per-flow table: what the model saw and cut, and the knob fit.
pub fn print_dcqcn(out: &mut impl Write, r: &DcqcnReport) -> io::Result<()> {
    writeln!(
        out,
        "DCQCN  profile {}, knobs from {}, {}, bins {} µs, CNP delay {} ns",
        r.profile,
        esc(&r.knob_source),
        describe_lines(r.lines.iter().copied()),
        r.bin_ns as f64 / 1000.0,
        r.cnp_delay_ns
    )?;
    if r.flows.is_empty() {
        writeln!(out, "{}", empty::NO_RATE_CONTROL)?;
    } else {
        print_dcqcn_flows(out, r)?;
    }
    if !r.unpaired_cnps.is_empty() {
        writeln!(
            out,
            "\nCNP streams not tied to any data flow ({})",
            r.unpaired_cnps.len()
        )?;
        for u in &r.unpaired_cnps {
            writeln!(
                out,
                "  {} → {} QP 0x{:06x}: {} CNPs; {}",
                u.src,
                u.dst,
                u.dest_qp,
                u.cnps,
                u.describe()
            )?;
        }
    }
    print_np(out, r)
}

/// The per-flow table of `dcqcn`, and whose knobs modeled which sender.
fn print_dcqcn_flows(out: &mut impl Write, r: &DcqcnReport) -> io::Result<()> {
    let rows: Vec<Vec<String>> = r
        .flows
        .iter()
        .map(|f| {
            let ratios: Vec<f64> = f.observed_cuts.iter().map(|c| c.ratio).collect();
            let median = if ratios.is_empty() {
                "-".to_string()
            } else {
                let mut v = ratios.clone();
                v.sort_by(f64::total_cmp);
                format!("{:.2}", v[v.len() / 2])
            };
            let ce: f64 = f.observed.iter().map(|o| o.ce_fraction).sum::<f64>()
                / f.observed.len().max(1) as f64;
            vec![
                f.summary.sender.to_string(),
                f.summary.receiver.to_string(),
                format!("0x{:06x}", f.summary.receiver_qp),
                f.summary
                    .sender_qp
                    .map_or("?".into(), |q| format!("0x{q:06x}")),
                f.summary
                    .pairing
                    .map_or("unpaired".into(), |m| format!("{m:?}")),
                f.summary.cnps.to_string(),
                format!("{:.3}", ce),
                f.cuts.len().to_string(),
                f.cuts
                    .last()
                    .map_or("-".into(), |c| fmt_rate(c.rc_after_gbps * 1e9)),
                median,
                f.summary.fit.map_or("-".into(), |x| {
                    format!(
                        "G={} gd={} ({:.2} vs {:.2} Gb/s)",
                        x.dce_tcp_g, x.rpg_gd, x.error_gbps, x.given_error_gbps
                    )
                }),
            ]
        })
        .collect();
    table(
        out,
        &[
            "sender",
            "receiver",
            "rcv_qp",
            "snd_qp",
            "pairing",
            "CNPs",
            "CE frac",
            "cuts",
            "last Rc",
            "obs ratio",
            "fit (error: fitted vs given)",
        ],
        &rows,
    )?;
    // A sender whose own knobs the capture recorded is modeled with them, not with the ones named above.
    let mut own: Vec<(IpAddr, &str)> = r
        .flows
        .iter()
        .filter(|f| f.summary.knobs_of.contains("'s own ("))
        .map(|f| (f.summary.sender, f.summary.knobs_of.as_str()))
        .collect();
    own.sort_unstable();
    own.dedup();
    for (sender, knobs_of) in own {
        writeln!(out, "  model of {sender}: knobs {}", esc(knobs_of))?;
    }
    if r.flows.iter().all(|f| f.summary.cnps == 0) {
        writeln!(out, "{}", empty::NO_PAIRED_CNP)?;
    }
    Ok(())
}

/// The NP check: one row per CNP stream, then the ports that seem to moderate all their QPs together.
fn print_np(out: &mut impl Write, r: &DcqcnReport) -> io::Result<()> {
    if r.np_streams.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nNotification point (each stream against its receiver's min_time_between_cnps)"
    )?;
    let us = |v: f64| format!("{:.1}", v / 1000.0);
    let rows: Vec<Vec<String>> = r
        .np_streams
        .iter()
        .map(|n| {
            let c = &n.check;
            vec![
                n.receiver.to_string(),
                n.sender.to_string(),
                format!("0x{:06x}", n.sender_qp),
                us(c.min_gap_ns as f64),
                c.cnps.to_string(),
                c.min_spacing_ns.map_or("-".into(), |v| us(v as f64)),
                c.spacing_ns.map_or("-".into(), |p| us(p.p50)),
                c.below_min_gap.to_string(),
                c.ce_to_cnp_ns
                    .map_or("-".into(), |p| format!("{} / {}", us(p.p50), us(p.p99))),
                format!("{:?}", c.pacing).to_lowercase(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "NP",
            "to",
            "snd_qp",
            "knob gap µs",
            "CNPs",
            "min gap µs",
            "gap p50",
            "< min",
            "CE→CNP p50/p99 µs",
            "pacing",
        ],
        &rows,
    )?;
    // Whose knob each receiver was checked against, once per receiver.
    let mut whose: Vec<(IpAddr, &str)> = r
        .np_streams
        .iter()
        .map(|n| (n.receiver, n.knobs_of.as_str()))
        .collect();
    whose.dedup();
    for (np, knobs_of) in whose {
        writeln!(out, "  {np}: min_time_between_cnps from {}", esc(knobs_of))?;
    }
    for p in r.np_ports.iter().filter(|p| p.check.per_port) {
        writeln!(
            out,
            "  {} paces its CNPs per port: {} CNPs to {} QPs, never closer than the least gap",
            p.receiver, p.check.cnps, p.check.qps
        )?;
    }
    Ok(())
}

/// Left-aligned first columns, right-aligned numbers, widths from the content. Every cell is escaped here
/// ([`esc`]): names in the cells come from the capture.
pub(crate) fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(esc(c).chars().count());
        }
    }
    // One line buffer for the whole table: a capture with thousands of flows made an allocation per padded
    // cell show up in `stats`'s run time.
    let mut s = String::new();
    let mut line = |out: &mut dyn Write, cells: &[String]| -> io::Result<()> {
        s.clear();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            let c = esc(c);
            if i > 0 {
                s.push_str("  ");
            }
            let pad = std::iter::repeat_n(' ', w.saturating_sub(c.chars().count()));
            if i < 3 {
                s.push_str(&c);
                s.extend(pad);
            } else {
                s.extend(pad);
                s.push_str(&c);
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    line(out, &head)?;
    for r in rows {
        line(out, r)?;
    }
    Ok(())
}

/// Kernel events shown in full before the list is cut: the QP and connection events matter, and a busy
/// fabric's MADs would bury them.
const MAX_PRINTED_EVENTS: usize = 50;

fn owner(o: &Option<processes::QpOwner>) -> String {
    o.as_ref().map_or("-".into(), |o| {
        format!("{}[{}] QP 0x{:06x}", o.comm, o.pid, o.qp_num)
    })
}

/// The kernel events a capture made with `roce-tracer --kernel-events` carries, and the processes behind
/// its QPs and flows.
pub fn print_kernel_events(
    out: &mut impl Write,
    k: &processes::KernelSummary,
    events: &[blocks::KernelEvent],
) -> io::Result<()> {
    writeln!(
        out,
        "\nKernel events (roce-tracer --kernel-events): {} events in {} intervals, {} lost",
        events.len(),
        k.blocks,
        k.lost
    )?;
    let t = &k.tracepoints;
    if !t.attached.is_empty() {
        writeln!(out, "  attached: {}", esc(&t.attached.join(", ")))?;
    }
    if !t.unavailable.is_empty() {
        writeln!(
            out,
            "  unavailable on the traced host: {}",
            esc(&t.unavailable.join(", "))
        )?;
    }
    for (name, n) in &k.events_per_tracepoint {
        writeln!(out, "  {}: {n}", esc(name))?;
    }
    if !k.qp_processes.is_empty() {
        writeln!(out, "\nQPs and their processes ({})", k.qp_processes.len())?;
        let rows: Vec<Vec<String>> = k
            .qp_processes
            .iter()
            .map(|q| {
                vec![
                    format!("0x{:06x}", q.qp_num),
                    q.process(),
                    q.local.map_or("-".into(), |a| a.to_string()),
                    q.remote.map_or("-".into(), |a| a.to_string()),
                    q.qp_type.clone().unwrap_or_else(|| "-".into()),
                    q.tracepoint.clone(),
                    ns_to_s(q.seen_ns),
                ]
            })
            .collect();
        table(
            out,
            &["qp", "process", "host", "peer", "type", "seen by", "at"],
            &rows,
        )?;
    }
    if !k.flow_processes.is_empty() {
        writeln!(
            out,
            "\nFlows with their processes ({})",
            k.flow_processes.len()
        )?;
        let rows: Vec<Vec<String>> = k
            .flow_processes
            .iter()
            .map(|f| {
                vec![
                    f.src.to_string(),
                    f.dst.to_string(),
                    format!("0x{:06x}", f.dest_qp),
                    owner(&f.sender),
                    owner(&f.receiver),
                ]
            })
            .collect();
        table(
            out,
            &[
                "src",
                "dst",
                "dest_qp",
                "sender process",
                "receiver process",
            ],
            &rows,
        )?;
    }
    if !events.is_empty() {
        writeln!(
            out,
            "\nEvents{}",
            if events.len() > MAX_PRINTED_EVENTS {
                format!(
                    " (first {MAX_PRINTED_EVENTS} of {}; --json has them all)",
                    events.len()
                )
            } else {
                String::new()
            }
        )?;
        let rows: Vec<Vec<String>> = events
            .iter()
            .take(MAX_PRINTED_EVENTS)
            .map(|e| vec![ns_to_s(e.ts_ns), e.process(), e.summary()])
            .collect();
        table(out, &["at", "process", "event"], &rows)?;
    }
    let busy: Vec<&blocks::DropInterval> =
        k.drop_intervals.iter().filter(|d| d.count > 0).collect();
    if !busy.is_empty() {
        writeln!(out, "\nKernel drops per interval")?;
        let rows: Vec<Vec<String>> = busy
            .iter()
            .map(|d| {
                vec![
                    ns_to_s(d.from_ns),
                    ns_to_s(d.to_ns),
                    d.drops
                        .iter()
                        .map(|x| format!("{}/{} {}", x.protocol, x.reason, x.count))
                        .collect::<Vec<_>>()
                        .join(", "),
                    d.count.to_string(),
                ]
            })
            .collect();
        table(out, &["from", "to", "reasons", "drops"], &rows)?;
    }
    if !k.counts.is_empty() {
        writeln!(out, "\nCounted in the kernel")?;
        let rows: Vec<Vec<String>> = k
            .counts
            .iter()
            .map(|c| {
                vec![
                    c.tracepoint.clone(),
                    c.key.clone(),
                    c.sum_field.clone().unwrap_or_default(),
                    c.events.to_string(),
                    c.sum.to_string(),
                ]
            })
            .collect();
        table(
            out,
            &["tracepoint", "key", "summed", "events", "sum"],
            &rows,
        )?;
    }
    Ok(())
}

fn ns_to_s(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// A table of `stats` whose rows may come from several taps: with several, a first column names each row's
/// tap (the same flow, CNP stream or pause source seen at two taps is two rows that would otherwise look
/// alike); with one, there is nothing to tell apart.
struct TapTable<'a> {
    several: bool,
    header: Vec<&'a str>,
    rows: Vec<Vec<String>>,
}

impl<'a> TapTable<'a> {
    fn new(r: &StatsReport, header: &[&'a str]) -> Self {
        let several = r.capture.interfaces.len() > 1;
        let tap = several.then_some("tap");
        TapTable {
            several,
            header: tap.into_iter().chain(header.iter().copied()).collect(),
            rows: Vec::new(),
        }
    }

    fn row(&mut self, tap: &str, cells: Vec<String>) {
        let tap = self.several.then(|| tap.to_owned());
        self.rows.push(tap.into_iter().chain(cells).collect());
    }

    fn print(&self, out: &mut impl Write) -> io::Result<()> {
        table(out, &self.header, &self.rows)
    }
}

/// `stats`'s capture summary and its flow, CNP, PFC, counter and kernel-drop tables.
pub fn print_stats(out: &mut impl Write, r: &StatsReport) -> io::Result<()> {
    let c = &r.capture;
    writeln!(out, "Capture  {} ({})", esc(&c.file), esc(&c.format))?;
    let kinds: Vec<String> = c
        .frames_by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    writeln!(
        out,
        "  frames {} ({}), {} bytes, span {} s, truncated {}",
        c.frames,
        kinds.join(", "),
        c.bytes,
        ns_to_s(c.duration_ns),
        c.truncated_frames
    )?;
    if let Some(n) = c.largest_gap_frame {
        writeln!(
            out,
            "  largest gap {} s, before frame {n}; {} frames stamped earlier than their predecessor",
            ns_to_s(c.largest_gap_ns),
            c.timestamps_backwards
        )?;
    }
    // With several taps the tables name each row's tap: here is what each tap is.
    let several = c.interfaces.len() > 1;
    for i in &c.interfaces {
        writeln!(
            out,
            "  interface {} {} {} snaplen {} ts {}, {}{}",
            i.id,
            esc(if several {
                &i.tap
            } else {
                i.name.as_deref().unwrap_or("-")
            }),
            i.link_type,
            i.snaplen,
            i.ts_resolution,
            i.line,
            match (i.received, i.dropped) {
                (r, Some(d)) => format!(
                    ", recorder dropped {d} of {}",
                    r.map_or("?".into(), |r| r.to_string())
                ),
                _ => String::new(),
            }
        )?;
    }
    writeln!(out, "\nFlows ({})", r.flows.len())?;
    let mut flows = TapTable::new(
        r,
        &[
            "src", "dst", "dest_qp", "packets", "bytes", "rate", "ECT", "CE", "gaps", "retx",
            "ooo", "NAKs", "ICRC bad", "trunc",
        ],
    );
    for f in &r.flows {
        flows.row(
            &f.tap,
            vec![
                f.src.to_string(),
                f.dst.to_string(),
                format!("0x{:06x}", f.dest_qp),
                f.packets.to_string(),
                f.bytes.to_string(),
                f.mean_gbps.map_or("-".into(), |g| fmt_rate(g * 1e9)),
                f.ect_packets.to_string(),
                f.ce_packets.to_string(),
                f.psn_gaps.to_string(),
                f.retransmissions.to_string(),
                f.out_of_order.to_string(),
                f.naks.total().to_string(),
                f.icrc_failures.to_string(),
                f.truncated.to_string(),
            ],
        );
    }
    flows.print(out)?;
    writeln!(out, "\nCNPs ({} streams)", r.cnps.len())?;
    let mut cnps = TapTable::new(r, &["src", "dst", "dest_qp", "count", "first", "last"]);
    for c in &r.cnps {
        cnps.row(
            &c.tap,
            vec![
                c.src.to_string(),
                c.dst.to_string(),
                format!("0x{:06x}", c.dest_qp),
                c.count.to_string(),
                ns_to_s(c.first_ns),
                ns_to_s(c.last_ns),
            ],
        );
    }
    cnps.print(out)?;
    writeln!(out, "\nPFC / PAUSE ({} sources×priorities)", r.pfc.len())?;
    let mut pfc = TapTable::new(
        r,
        &[
            "src_mac",
            "kind",
            "prio",
            "frames",
            "xoff",
            "xon",
            "pauses",
            "paused_ns",
        ],
    );
    for p in &r.pfc {
        pfc.row(
            &p.tap,
            vec![
                p.src_mac.clone(),
                p.kind.to_string(),
                p.priority.map_or("all".into(), |x| x.to_string()),
                p.frames.to_string(),
                p.xoff.to_string(),
                p.xon.to_string(),
                p.pauses.to_string(),
                p.paused_ns.to_string(),
            ],
        );
    }
    pfc.print(out)?;
    let moved: Vec<&blocks::CounterDelta> = r
        .counters
        .iter()
        .filter(|d| d.delta > 0 || d.reset)
        .collect();
    if !r.counters.is_empty() {
        writeln!(
            out,
            "\nNIC counters sampled by roce-tracer ({} counters, {} moved)",
            r.counters.len(),
            moved.len()
        )?;
        let rows: Vec<Vec<String>> = moved
            .iter()
            .map(|d| {
                vec![
                    d.name.clone(),
                    if d.reset {
                        "reset".into()
                    } else {
                        d.delta.to_string()
                    },
                    d.samples.to_string(),
                ]
            })
            .collect();
        table(out, &["counter", "delta", "samples"], &rows)?;
    }
    if !r.kernel_drops.is_empty() {
        writeln!(out, "\nKernel drops (roce-tracer --kernel-events)")?;
        let rows: Vec<Vec<String>> = r
            .kernel_drops
            .iter()
            .map(|k| {
                // What the tracer's IP rows counted: a RoCEv2 drop, or any IP packet's (an upper bound).
                let counts = match k.ip {
                    Some(IpDrops::Rocev2) => "RoCEv2 only",
                    Some(IpDrops::Any) => "any IP packet",
                    Some(IpDrops::Unknown) | None => "",
                };
                vec![
                    k.protocol.clone(),
                    k.reason.clone(),
                    counts.to_string(),
                    k.count.to_string(),
                ]
            })
            .collect();
        table(out, &["protocol", "reason", "of", "count"], &rows)?;
    }
    if let Some(e) = &c.error {
        writeln!(out, "\nIncomplete: {}", esc(e))?;
    }
    Ok(())
}
