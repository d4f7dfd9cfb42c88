//! The NIC counters by meaning as people read them, in `stats`' text and in the report's section alike: per
//! RDMA port what it is, its verdict on the capture, a row per meaning that moved or has packets beside it,
//! and what its vendor does not count (named as such, never shown as 0).

use std::io::{self, Write};

use crate::output::text::table;
use roce_core::nic_counters::check::{CheckedRow, NicCheck, Relation, counted_text, percent};
use roce_core::nic_counters::{Meaning, Status, not_counted};
use roce_core::text::escape_control as esc;

/// The columns of [`rows`].
pub const HEADER: [&str; 7] = [
    "meaning",
    "priority",
    "counter",
    "NIC counted",
    "capture holds",
    "share",
    "of",
];

/// The port's vendor, netdev, host and MAC in a line.
pub fn about(c: &NicCheck) -> String {
    let i = &c.info;
    let mut about = vec![match i.vendor {
        Some(v) => format!("{} (by its {})", v.name(), i.vendor_from),
        None => format!("vendor unknown ({})", i.vendor_from),
    }];
    if let Some(n) = &i.netdev {
        about.push(format!("netdev {n}"));
    }
    if !i.addrs.is_empty() {
        let addrs: Vec<String> = i.addrs.iter().map(ToString::to_string).collect();
        about.push(format!("host {}", addrs.join(", ")));
    }
    if let Some(m) = &i.mac {
        about.push(format!("MAC {m}"));
    }
    about.join(" · ")
}

/// Rows worth a line: every counted meaning that moved or has packets beside it; a per-priority one only
/// for a priority that moved or was seen.
fn shown(r: &CheckedRow) -> bool {
    if r.row.status != Status::Counted {
        return false;
    }
    let moved = r.row.movement.is_some_and(|m| m.delta > 0);
    let captured = r.compared.as_ref().is_some_and(|c| c.captured.count > 0);
    if r.row.priority.is_some() {
        moved || captured
    } else {
        moved || r.compared.is_some()
    }
}

/// The cells of each meaning worth a line, in [`HEADER`]'s order.
pub fn rows(c: &NicCheck) -> Vec<Vec<String>> {
    c.meanings.iter().filter(|r| shown(r)).map(cells).collect()
}

fn cells(r: &CheckedRow) -> Vec<String> {
    let counted = r.row.movement.map_or("-".into(), |m| {
        let mut t = counted_text(&m);
        if m.wraps > 0 {
            t.push_str(&format!(" ({} wraps)", m.wraps));
        }
        t
    });
    let (captured, share, of) = match &r.compared {
        Some(c) => (
            if c.captured.edge > 0 {
                format!("{} (±{})", c.captured.count, c.captured.edge)
            } else {
                c.captured.count.to_string()
            },
            match (c.relation, c.fraction) {
                (Relation::Related, _) => "not the same events".into(),
                (_, Some(f)) => percent(f),
                (_, None) => "-".into(),
            },
            c.with.clone(),
        ),
        None => ("-".into(), "-".into(), "not in the capture".into()),
    };
    vec![
        r.row.meaning.words().to_string(),
        r.row.priority.map_or(String::new(), |p| p.to_string()),
        r.row.counters.join(" + "),
        counted,
        captured,
        share,
        of,
    ]
}

/// The meanings the vendor has no counter for, and those it has that were not in the samples.
pub fn lacks(c: &NicCheck) -> Option<String> {
    let v = c.info.vendor?;
    let mut parts = Vec::new();
    let none: Vec<&str> = not_counted(v).into_iter().map(Meaning::words).collect();
    if !none.is_empty() {
        parts.push(format!("Not counted by {}: {}.", v.name(), none.join(", ")));
    }
    let missing: Vec<String> = c
        .meanings
        .iter()
        .filter(|r| r.row.status == Status::NotRecorded)
        .map(|r| {
            format!(
                "{} ({})",
                r.row.meaning.words(),
                r.row.counters.join(" or ")
            )
        })
        .collect();
    if !missing.is_empty() {
        parts.push(format!(
            "Counted by {} but not in the samples (another driver version, or the netdev's ethtool statistics \
             were not read): {}.",
            v.name(),
            missing.join(", ")
        ));
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// `stats`' text: every port with its verdict, its rows and what it lacks.
pub fn print(out: &mut impl Write, checks: &[NicCheck]) -> io::Result<()> {
    if checks.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nNIC counters by meaning, beside the capture's packets of each port's host (docs/nic-counters.md)"
    )?;
    for c in checks {
        writeln!(out, "\n{}  {}", esc(&c.name()), esc(&about(c)))?;
        writeln!(out, "  {}", esc(&c.verdict))?;
        let rows = rows(c);
        if !rows.is_empty() {
            table(out, &HEADER, &rows)?;
        }
        if let Some(l) = lacks(c) {
            writeln!(out, "  {}", esc(&l))?;
        }
    }
    Ok(())
}
