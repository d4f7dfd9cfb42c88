//! The screen: a header (source, speed or uptime, frames/s, drops, and whether frames still come), the flows
//! of the last bin sorted as asked, the selected flow's pairing in full, the share of the bin each priority
//! was paused, the latest notices, and the keys. Every number is of the last closed bin of capture time, the
//! one `roce-analyzer` gives for that window; the units are on every column.
//!
//! It fits 80×24: the columns that do not fit (the sparkline, then the pairing) are left out rather than
//! squeezed, and a larger terminal gets longer sparklines and more flows and notices.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};
use roce_core::passes::flows::FlowKey;

use super::keys::{Sort, Ui};
use super::notice::{Level, gbps};
use super::state::{FlowBin, PairingNote, State};

/// What the header says beside the state's numbers.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// `live eth2` or `replay FILE`.
    pub source: String,
    /// The engine, or `replay`.
    pub engine: String,
    /// Wall seconds since the start (live).
    pub uptime_s: Option<u64>,
    /// The replay's speed, and whether it is paused.
    pub speed: Option<(f64, bool)>,
    /// Frames the capture lost so far.
    pub dropped: u64,
    /// Frames the view did not get because it fell behind (the file has them).
    pub unseen: u64,
    /// Wall seconds since the last frame arrived, once that is long enough to say.
    pub quiet_s: Option<u64>,
}

/// One listed flow.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The flow.
    pub key: FlowKey,
    /// Its row in the last bin, `None` when it was idle there.
    pub now: Option<FlowBin>,
    /// Its Gb/s in each bin kept, oldest first.
    pub history: Vec<f64>,
    /// Its model's rate in the bin before the last, for the trend.
    pub model_before: Option<f64>,
    /// The line its sparkline is scaled to, Gb/s.
    pub line_gbps: f64,
    /// The bins' width, s: what the counts are per.
    pub bin_secs: f64,
}

impl Listed {
    fn gbps(&self) -> f64 {
        self.history.last().copied().unwrap_or(0.0)
    }
}

/// The flows to list, filtered and sorted: those of the last bin, then those seen in the bins kept that
/// were idle in it.
pub fn listed(state: &State, sort: Sort) -> Vec<Listed> {
    let bins = state.bins();
    let Some(last) = bins.back() else {
        return Vec::new();
    };
    let mut keys: Vec<FlowKey> = Vec::new();
    let mut seen = rustc_hash::FxHashSet::default();
    for b in bins.iter().rev() {
        for f in &b.flows {
            if state.shows(f) && seen.insert(f.key) {
                keys.push(f.key);
            }
        }
    }
    let mut out: Vec<Listed> = keys
        .into_iter()
        .map(|key| {
            let now = last.flows.iter().find(|f| f.key == key).cloned();
            let history = bins
                .iter()
                .map(|b| {
                    b.flows
                        .iter()
                        .find(|f| f.key == key)
                        .map_or(0.0, |f| f.bytes as f64 * 8.0 / b.secs() / 1e9)
                })
                .collect();
            let model_before = bins
                .iter()
                .rev()
                .nth(1)
                .and_then(|b| b.flows.iter().find(|f| f.key == key))
                .and_then(|f| f.model_mbps);
            let iface = now.as_ref().map_or(0, |f| f.iface);
            let line_gbps = state.options().line_of(iface).mbps() / 1000.0;
            Listed {
                key,
                now,
                history,
                model_before,
                line_gbps,
                bin_secs: last.secs(),
            }
        })
        .collect();
    let model = |l: &Listed| {
        l.now
            .as_ref()
            .and_then(|f| f.model_mbps)
            .unwrap_or(f64::INFINITY)
    };
    let cnps = |l: &Listed| l.now.as_ref().map_or(0, |f| f.cnps);
    let ce = |l: &Listed| l.now.as_ref().map_or(0.0, ce_pct);
    match sort {
        Sort::Rate => out.sort_by(|a, b| b.gbps().total_cmp(&a.gbps()).then(a.key.cmp(&b.key))),
        Sort::Cnps => out.sort_by(|a, b| cnps(b).cmp(&cnps(a)).then(a.key.cmp(&b.key))),
        Sort::Ce => out.sort_by(|a, b| ce(b).total_cmp(&ce(a)).then(a.key.cmp(&b.key))),
        Sort::Model => out.sort_by(|a, b| model(a).total_cmp(&model(b)).then(a.key.cmp(&b.key))),
        Sort::Flow => out.sort_by_key(|l| l.key),
    }
    out
}

fn ce_pct(f: &FlowBin) -> f64 {
    if f.packets == 0 {
        0.0
    } else {
        f.ce_packets as f64 * 100.0 / f.packets as f64
    }
}

/// A duration in the unit that reads best.
pub fn duration(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 && n % 1_000_000_000 == 0 => format!("{} s", n / 1_000_000_000),
        n if n >= 1_000_000_000 => format!("{:.3} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{} ms", trim(n as f64 / 1e6)),
        n if n >= 1_000 => format!("{} µs", trim(n as f64 / 1e3)),
        n => format!("{n} ns"),
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A capture time as an offset from the first frame, to the µs.
pub fn offset(ns: u64) -> String {
    format!(
        "+{}.{:06} s",
        ns / 1_000_000_000,
        (ns % 1_000_000_000) / 1_000
    )
}

/// A count per second in few characters.
fn per_s(v: f64) -> String {
    match v {
        v if v >= 1e6 => format!("{:.1}M", v / 1e6),
        v if v >= 1e4 => format!("{:.0}k", v / 1e3),
        v if v >= 1e3 => format!("{:.1}k", v / 1e3),
        v => format!("{v:.0}"),
    }
}

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values as bars, scaled to `top`; a bin without traffic is a blank.
pub fn sparkline(values: &[f64], top: f64, width: usize) -> String {
    let from = values.len().saturating_sub(width);
    let mut s: String = values[from..]
        .iter()
        .map(|&v| {
            if v <= 0.0 || top <= 0.0 {
                ' '
            } else {
                let i = ((v / top) * 8.0).ceil().clamp(1.0, 8.0) as usize - 1;
                BARS[i]
            }
        })
        .collect();
    while s.chars().count() < width {
        s.insert(0, ' ');
    }
    s
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, state: &State, ui: &mut Ui, header: &Header) {
    let area = frame.area();
    let rows = listed(state, ui.sort);
    ui.selected = ui.selected.min(rows.len().saturating_sub(1));
    let notices = if area.height >= 30 { 6 } else { 3 };
    let [top, table, detail, pauses, events, help] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(4),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(notices),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header_lines(state, ui, header)), top);
    draw_table(frame, table, state, &rows, ui);
    let selected = rows.get(ui.selected);
    frame.render_widget(Paragraph::new(detail_line(state, selected)), detail);
    frame.render_widget(Paragraph::new(pause_line(state)), pauses);
    frame.render_widget(
        Paragraph::new(notice_lines(state, notices as usize)),
        events,
    );
    frame.render_widget(Paragraph::new(help_line(ui, header)), help);
}

fn header_lines(state: &State, ui: &Ui, h: &Header) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let first = state.first_ns().unwrap_or(0);
    let (word, colour) = if let Some(why) = &state.ended {
        (format!("ENDED ({why})"), Color::Cyan)
    } else if h.speed.is_some_and(|(_, p)| p) {
        ("PAUSED".to_string(), Color::Yellow)
    } else if let Some(q) = h.quiet_s {
        (format!("NO FRAMES for {q} s"), Color::Yellow)
    } else if state.first_ns().is_none() {
        ("waiting for frames".to_string(), Color::Yellow)
    } else {
        ("running".to_string(), Color::Green)
    };
    // What changes and what must be seen first, the source's name (long) last.
    let mut one = vec![
        Span::styled("roce-tracer top ", bold),
        Span::styled(word, bold.fg(colour)),
    ];
    match (h.speed, h.uptime_s) {
        (Some((speed, _)), _) => one.push(Span::raw(format!("  ×{}", speed_text(speed)))),
        (None, Some(up)) => one.push(Span::raw(format!(
            "  up {:02}:{:02}:{:02}",
            up / 3600,
            up / 60 % 60,
            up % 60
        ))),
        _ => {}
    }
    if state.first_ns().is_some() {
        one.push(Span::raw(format!(
            "  at {}",
            offset(state.now_ns().saturating_sub(first))
        )));
    }
    one.push(Span::raw(format!("  {}", h.source)));
    let last = state.bins().back();
    let fps = last.map_or(0.0, |b| b.interval.frames as f64 / b.secs());
    let taps: Vec<String> = state
        .taps()
        .iter()
        .map(|t| match t.speed_bps {
            Some(bps) => format!("{} {}", t.name, gbps(bps as f64 / 1e9)),
            None => t.name.clone(),
        })
        .collect();
    let mut two = vec![Span::raw(format!(
        "{} · {} frames/s · bin {} · sort {} · filter {}",
        h.engine,
        per_s(fps),
        duration(state.bin_ns()),
        ui.sort.name(),
        state.filter_text().unwrap_or("none"),
    ))];
    let drops = if h.dropped > 0 {
        Span::styled(
            format!(" · DROPS {}", h.dropped),
            bold.fg(Color::White).bg(Color::Red),
        )
    } else {
        Span::raw(" · drops 0")
    };
    two.push(drops);
    if h.unseen > 0 {
        two.push(Span::styled(
            format!(
                " · view behind: {} frames not shown (the file has them)",
                h.unseen
            ),
            bold.fg(Color::Yellow),
        ));
    }
    if state.late > 0 {
        two.push(Span::raw(format!(" · late {}", state.late)));
    }
    two.push(Span::raw(format!(" · taps {}", taps.join(", "))));
    vec![Line::from(one), Line::from(two)]
}

fn speed_text(s: f64) -> String {
    if s.is_infinite() {
        "max".into()
    } else if s >= 1.0 {
        trim(s)
    } else {
        format!("{s:.0e}").replace("e-", "e-")
    }
}

fn draw_table(frame: &mut Frame<'_>, area: Rect, state: &State, rows: &[Listed], ui: &Ui) {
    let addr = |f: fn(&FlowKey) -> String| {
        rows.iter()
            .map(|l| f(&l.key).len())
            .max()
            .unwrap_or(3)
            .max(3) as u16
    };
    let (src_w, dst_w) = (addr(|k| k.src.to_string()), addr(|k| k.dst.to_string()));
    let fixed = src_w + dst_w + 8 + 7 + 5 + 6 + 12 + 7;
    let rest = area.width.saturating_sub(fixed);
    // The pairing first, the sparkline with what is left.
    let pairing_w = rest.clamp(0, 24);
    let spark_w = rest.saturating_sub(pairing_w + 1);
    let mut header = vec!["src", "dst", "QP", "Gb/s", "CE %", "CNP/s", "model Gb/s"];
    let mut widths = vec![
        Constraint::Length(src_w),
        Constraint::Length(dst_w),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Length(12),
    ];
    if pairing_w >= 8 {
        header.push("pairing");
        widths.push(Constraint::Length(pairing_w));
    }
    if spark_w >= 8 {
        header.push("Gb/s, last bins");
        widths.push(Constraint::Length(spark_w));
    }
    let body: Vec<Row<'_>> = rows
        .iter()
        .map(|l| {
            let f = l.now.as_ref();
            let model = f.and_then(|f| f.model_mbps).map(|m| m / 1000.0);
            let trend = match (model, l.model_before.map(|m| m / 1000.0)) {
                (Some(a), Some(b)) if a < b * 0.999 => " ↓",
                (Some(a), Some(b)) if a > b * 1.001 => " ↑",
                _ => "  ",
            };
            let model_cell = match model {
                Some(m) if m < l.line_gbps / 10.0 => Cell::from(format!("{m:.2}{trend}"))
                    .style(Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)),
                Some(m) => {
                    Cell::from(format!("{m:.2}{trend}")).style(Style::new().fg(Color::Green))
                }
                None => Cell::from("-"),
            };
            let mut cells = vec![
                Cell::from(l.key.src.to_string()),
                Cell::from(l.key.dst.to_string()),
                Cell::from(format!("{:#08x}", l.key.dest_qp)),
                Cell::from(format!("{:.2}", l.gbps())),
                Cell::from(f.map_or("-".into(), |f| format!("{:.1}", ce_pct(f)))),
                Cell::from(per_s(f.map_or(0, |f| f.cnps) as f64 / l.bin_secs)),
                model_cell,
            ];
            if pairing_w >= 8 {
                let note = match f {
                    None => "idle".to_string(),
                    // Paired by the connection's evidence, but nothing to throttle it came yet.
                    Some(FlowBin {
                        pairing: PairingNote::Paired { stream, .. },
                        ..
                    }) if state.model(stream).is_none() => "no CNPs yet".to_string(),
                    Some(f) => f.pairing.short(),
                };
                let style = match f.map(|f| &f.pairing) {
                    Some(PairingNote::Unpaired { .. }) => Style::new().fg(Color::Yellow),
                    _ => Style::new(),
                };
                cells.push(Cell::from(note).style(style));
            }
            if spark_w >= 8 {
                let top = if l.line_gbps > 0.0 { l.line_gbps } else { 1.0 };
                cells.push(
                    Cell::from(sparkline(&l.history, top, spark_w as usize))
                        .style(Style::new().fg(Color::Cyan)),
                );
            }
            let row = Row::new(cells);
            if f.is_none() {
                row.style(Style::new().add_modifier(Modifier::DIM))
            } else {
                row
            }
        })
        .collect();
    let table = Table::new(body, widths)
        .header(
            Row::new(header)
                .style(Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)),
        )
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .column_spacing(1);
    let mut st = TableState::default().with_selected((!rows.is_empty()).then_some(ui.selected));
    frame.render_stateful_widget(table, area, &mut st);
}

fn detail_line(state: &State, l: Option<&Listed>) -> Line<'static> {
    let Some(l) = l else {
        let why = if state.first_ns().is_none() {
            "no frames yet"
        } else if state.filter_text().is_some() {
            "no flow matches the filter (/ and Enter on an empty line clears it)"
        } else {
            "no RoCE flow in the bins kept"
        };
        return Line::from(Span::styled(why, Style::new().add_modifier(Modifier::DIM)));
    };
    let k = l.key;
    let mut text = format!("▸ {} → {} qp {:#08x}", k.src, k.dst, k.dest_qp);
    if let Some(f) = &l.now {
        if let Some(p) = f.priority {
            text.push_str(&format!(" prio {p}"));
        }
        text.push_str(": ");
        text.push_str(&f.pairing.long());
        if let PairingNote::Paired { stream, .. } = &f.pairing
            && let Some(m) = state.model(stream)
        {
            match &m.feed {
                Ok(_) => text.push_str(&format!(
                    "; model at a {} line, knobs: {}",
                    gbps(m.line_mbps / 1000.0),
                    m.whose
                )),
                Err(e) => text.push_str(&format!("; no model: {e}")),
            }
        }
    } else {
        text.push_str(": idle in the last bin");
    }
    Line::from(text)
}

fn pause_line(state: &State) -> Line<'static> {
    let Some(b) = state.bins().back() else {
        return Line::from("");
    };
    let red = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
    let shares = b.pause_shares();
    let mut spans = Vec::new();
    if shares.is_empty() {
        spans.push(Span::raw("paused: no PFC or PAUSE frame in the last bin"));
    } else {
        spans.push(Span::raw("paused (share of the last bin): "));
        for (i, (p, share)) in shares.iter().enumerate() {
            if i > 0 {
                spans.push(Span::raw(" · "));
            }
            let style = if *share >= 0.5 {
                red
            } else if *share > 0.0 {
                Style::new().fg(Color::Yellow)
            } else {
                Style::new()
            };
            spans.push(Span::styled(
                format!("{} {:.1} %", prio(*p), share * 100.0),
                style,
            ));
        }
    }
    // A pause still running says so whatever the bin's frames show: a storm's bins may hold none.
    let end = b.end_ns;
    for (_, mac, p, since) in state.running_pauses() {
        spans.push(Span::styled(
            format!(
                " · {} PAUSED for {} by {mac}",
                prio(*p),
                duration(end.saturating_sub(*since))
            ),
            red,
        ));
    }
    Line::from(spans)
}

fn prio(p: Option<u8>) -> String {
    p.map_or_else(|| "PAUSE".to_string(), |p| format!("prio {p}"))
}

fn notice_lines(state: &State, n: usize) -> Vec<Line<'static>> {
    let first = state.first_ns().unwrap_or(0);
    let mut lines: Vec<Line<'static>> = state
        .latest_notices(n)
        .into_iter()
        .map(|x| {
            let (mark, style) = match x.level {
                Level::Info => ("·", Style::new()),
                Level::Warning => ("!", Style::new().fg(Color::Yellow)),
                Level::Problem => (
                    "‼",
                    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
                ),
            };
            Line::from(Span::styled(
                format!("{} {mark} {}", offset(x.t_ns.saturating_sub(first)), x.text),
                style,
            ))
        })
        .collect();
    if lines.is_empty() {
        lines.push(Line::from(Span::styled(
            "no events yet (PFC storms, cuts below a tenth of the line, pairings, losses show here)",
            Style::new().add_modifier(Modifier::DIM),
        )));
    }
    lines
}

fn help_line(ui: &Ui, h: &Header) -> Line<'static> {
    if let Some(text) = &ui.typing {
        return Line::from(vec![
            Span::styled("filter: ", Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(format!("{text}▏")),
            Span::styled(
                "  (Enter applies, Esc cancels; e.g. ip == 10.0.0.1 or cnp)",
                Style::new().add_modifier(Modifier::DIM),
            ),
        ]);
    }
    if let Some(m) = &ui.message {
        return Line::from(Span::styled(m.clone(), Style::new().fg(Color::Red)));
    }
    let mut text = "q quit · s sort · / filter · ↑↓ select".to_string();
    if h.speed.is_some() {
        text.push_str(" · p pause · + faster · - slower");
    }
    Line::from(Span::styled(text, Style::new().add_modifier(Modifier::DIM)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_well() {
        assert_eq!(duration(250_000), "250 µs");
        assert_eq!(duration(1_000_000_000), "1 s");
        assert_eq!(duration(1_500_000), "1.5 ms");
        assert_eq!(offset(1_234_567_890), "+1.234567 s");
        assert_eq!(per_s(58_000.0), "58k");
        assert_eq!(per_s(1_500.0), "1.5k");
        assert_eq!(sparkline(&[0.0, 12.5, 25.0], 25.0, 5), "   ▄█");
        assert_eq!(sparkline(&[1.0; 10], 25.0, 3), "▁▁▁");
    }
}
