//! The per-QP table: every data flow, the congested ones first.

use std::net::IpAddr;

use super::kernel::flow_processes_text;
use super::{Report, ReportInput, html};
use crate::analysis::dcqcn::{DcqcnReport, FlowDcqcn};
use roce_core::passes::pairing::Method;
use roce_core::processes::FlowProcess;

/// Rows of the per-QP table before the remainder is summarized in one row.
pub const MAX_TABLE_ROWS: usize = 50;

pub(super) fn write(r: &mut Report<'_>) {
    r.page.section("table", "Per-QP table");
    let table = qp_table(r.input, r.labels());
    r.page.raw(&table);
}

fn dcqcn_of(d: &DcqcnReport, src: IpAddr, dst: IpAddr, qp: u32) -> Option<&FlowDcqcn> {
    d.flows.iter().find(|f| {
        f.summary.sender == src && f.summary.receiver == dst && f.summary.receiver_qp == qp
    })
}

fn method_name(m: Option<Method>) -> &'static str {
    match m {
        Some(Method::CmMad) => "CM MAD",
        Some(Method::ReverseTraffic) => "reverse traffic",
        Some(Method::UdDeth) => "UD DETH",
        Some(Method::Timing) => "timing",
        Some(Method::Activity) => "activity",
        None => "",
    }
}

/// Every data flow, the congested ones first; past [`MAX_TABLE_ROWS`] the rest are summed in one row. With
/// several taps a first column names the tap (a flow seen at two taps is two rows that would otherwise look
/// alike); with kernel events, a last column names the processes at the flow's ends.
fn qp_table(input: &ReportInput<'_>, labels: &[FlowProcess]) -> String {
    let d = input.dcqcn;
    let mut flows: Vec<_> = input
        .stats
        .flows
        .iter()
        .map(|r| (r, dcqcn_of(d, r.src, r.dst, r.dest_qp)))
        .collect();
    flows.sort_by(|a, b| {
        let cnps = |x: &Option<&FlowDcqcn>| x.map_or(0, |f| f.summary.cnps);
        cnps(&b.1)
            .cmp(&cnps(&a.1))
            .then(b.0.ce_packets.cmp(&a.0.ce_packets))
            .then(b.0.bytes.cmp(&a.0.bytes))
            .then((a.0.src, a.0.dst, a.0.dest_qp).cmp(&(b.0.src, b.0.dst, b.0.dest_qp)))
    });
    let mut header = vec![
        "source",
        "destination",
        "dest QP",
        "prio",
        "packets",
        "bytes",
        "mean Gb/s",
        "CE packets",
        "CE %",
        "CNPs",
        "pairing",
        "model cuts",
        "retransmitted",
        "PSN gaps",
        "NAKs",
    ];
    if !labels.is_empty() {
        header.push("processes");
    }
    let rows: Vec<Vec<String>> = flows
        .iter()
        .take(MAX_TABLE_ROWS)
        .map(|(r, f)| {
            let mut row = vec![
                r.src.to_string(),
                r.dst.to_string(),
                format!("{:#x}", r.dest_qp),
                r.priority.map_or("-".into(), |p| match r.priority_source {
                    Some(roce_core::priority::PrioritySource::Dscp) => {
                        format!("{p} (DSCP {})", r.dscp)
                    }
                    _ => p.to_string(),
                }),
                r.packets.to_string(),
                r.bytes.to_string(),
                r.mean_gbps.map_or("-".into(), |g| format!("{g:.2}")),
                r.ce_packets.to_string(),
                format!(
                    "{:.2}",
                    100.0 * r.ce_packets as f64 / r.packets.max(1) as f64
                ),
                f.map_or("0".into(), |f| f.summary.cnps.to_string()),
                method_name(f.and_then(|f| f.summary.pairing)).into(),
                f.map_or("-".into(), |f| f.cuts.len().to_string()),
                r.retransmissions.to_string(),
                r.psn_gaps.to_string(),
                r.naks.total().to_string(),
            ];
            if !labels.is_empty() {
                row.push(
                    labels
                        .iter()
                        .find(|l| {
                            l.iface == r.iface
                                && l.src == r.src
                                && l.dst == r.dst
                                && l.dest_qp == r.dest_qp
                        })
                        .map_or(String::new(), flow_processes_text),
                );
            }
            row
        })
        .collect();
    let rest: Option<Vec<String>> = (flows.len() > MAX_TABLE_ROWS).then(|| {
        let others = &flows[MAX_TABLE_ROWS.min(flows.len())..];
        let sum = |g: &dyn Fn(&roce_core::passes::flows::FlowRow) -> u64| -> u64 {
            others.iter().map(|(r, _)| g(r)).sum()
        };
        let packets = sum(&|r| r.packets);
        let ce = sum(&|r| r.ce_packets);
        vec![
            format!("{} more flows", others.len()),
            String::new(),
            String::new(),
            String::new(),
            packets.to_string(),
            sum(&|r| r.bytes).to_string(),
            String::new(),
            ce.to_string(),
            format!("{:.2}", 100.0 * ce as f64 / packets.max(1) as f64),
            others
                .iter()
                .map(|(_, f)| f.map_or(0, |f| f.summary.cnps))
                .sum::<u64>()
                .to_string(),
            String::new(),
            others
                .iter()
                .map(|(_, f)| f.map_or(0, |f| f.cuts.len()))
                .sum::<usize>()
                .to_string(),
            sum(&|r| r.retransmissions).to_string(),
            sum(&|r| r.psn_gaps).to_string(),
            sum(&|r| r.naks.total()).to_string(),
        ]
        .into_iter()
        .chain((!labels.is_empty()).then(String::new))
        .collect()
    });
    if rows.is_empty() {
        return "<p class=\"note\">No RoCE data flow in this capture.</p>".into();
    }
    if input.stats.capture.interfaces.len() < 2 {
        return html::table(&header, &rows, &[0, 1, 2], rest.as_deref());
    }
    header.insert(0, "tap");
    let rows: Vec<Vec<String>> = flows
        .iter()
        .zip(rows)
        .map(|((r, _), mut row)| {
            row.insert(0, r.tap.clone());
            row
        })
        .collect();
    // The summary row keeps its label first.
    let rest = rest.map(|mut cells| {
        cells.insert(1, String::new());
        cells
    });
    html::table(&header, &rows, &[0, 1, 2, 3], rest.as_deref())
}
