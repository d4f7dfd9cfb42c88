//! The NIC counters section, for captures made with `roce-tracer --counters`: per RDMA port, what it counted
//! by meaning over the capture, beside what the capture holds of its host's packets, and the verdict on the
//! capture that follows (how much of the port's traffic the mirror saw). The rows are those `stats` prints
//! ([`crate::output::nic`]).

use super::axis::{TimeAxis, fmt_duration};
use super::{Report, html};
use crate::output::nic::{HEADER, about, lacks, rows};
use roce_core::nic_counters::check::NicCheck;

pub(super) fn write(r: &mut Report<'_>) {
    let checks = &r.input.stats.nic_counters;
    if checks.is_empty() {
        return;
    }
    r.page.section("nic-counters", "NIC counters");
    r.page.para(
        "note",
        "What each RDMA port of the traced hosts counted while the capture ran, read by meaning whoever named \
         the counters (docs/nic-counters.md), beside the packets the capture holds of the port's host over the \
         same stretch of time: between the first and the last counter sample, each packet counted once. A \
         complete capture of the port's traffic holds as many CNPs, NAKs, retransmissions and pause frames as \
         the port counted; CE marks may be set by a switch past the tap.",
    );
    for c in checks {
        r.page.raw(&port_html(c, &r.axis));
    }
}

/// One port: what it is, its verdict, its counters table, and what it does not count.
fn port_html(c: &NicCheck, axis: &TimeAxis) -> String {
    let mut s = format!(
        "<h3>{}</h3>\n<p class=\"note\">{}</p>\n<p><b>{}</b></p>\n",
        html::escape(&c.name()),
        html::escape(&about(c)),
        html::escape(&capitalised(&c.verdict))
    );
    if let Some(stretch) = stretch(c, axis) {
        s.push_str(&format!(
            "<p class=\"note\">{}</p>\n",
            html::escape(&stretch)
        ));
    }
    let rows = rows(c);
    if !rows.is_empty() {
        s.push_str(&html::table(&HEADER, &rows, &[0, 2, 6], None));
        s.push('\n');
    }
    if let Some(lacks) = lacks(c) {
        s.push_str(&format!("<p class=\"note\">{}</p>\n", html::escape(&lacks)));
    }
    s
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|f| f.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// When the counters were sampled, on the page's time axis.
fn stretch(c: &NicCheck, axis: &TimeAxis) -> Option<String> {
    let m = c
        .meanings
        .iter()
        .filter_map(|r| r.row.movement)
        .max_by_key(|m| m.samples)?;
    Some(format!(
        "Counters sampled {} times, from {:.3} to {:.3} {} on the page's time axis ({}).",
        m.samples,
        axis.x(m.first_ns),
        axis.x(m.last_ns),
        axis.unit,
        fmt_duration(m.last_ns.saturating_sub(m.first_ns))
    ))
}
