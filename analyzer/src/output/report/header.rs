//! The top of the page: what was captured, how the model was set up, and what limited the analysis.

use super::axis::fmt_duration;
use super::headline::headline;
use super::{Report, html};
use roce_core::line::describe_lines;

pub(super) fn write(r: &mut Report<'_>) {
    let input = r.input;
    let cap = &input.stats.capture;
    let page = &mut r.page;
    page.h1("RoCE congestion report");
    let h = headline(input);
    let facts: Vec<String> = h
        .facts
        .iter()
        .map(|(k, v)| {
            format!(
                "<span><b>{}</b> {}</span>",
                html::escape(k),
                html::escape(v)
            )
        })
        .collect();
    page.raw(&format!(
        "<div class=\"headline\"><p class=\"verdict\">{}</p><p class=\"facts\">{}</p></div>",
        html::escape(&h.verdict),
        facts.join(" ")
    ));
    page.para(
        "meta",
        &format!(
            "Capture {} ({}): {} frames, {} bytes over {}. DCQCN model: {} profile, knobs from {}, {}.",
            cap.file,
            cap.format,
            cap.frames,
            cap.bytes,
            fmt_duration(cap.duration_ns),
            input.dcqcn.profile,
            input.dcqcn.knob_source,
            describe_lines(input.dcqcn.lines.iter().copied())
        ),
    );
    page.raw(
        "<p class=\"note\">The timeline, microsecond by microsecond: <a href=\"trace.json\">trace.json</a> \
         (drop it on ui.perfetto.dev, or merge it with a PyTorch profiler trace of the same run: see \
         docs/report.md).</p>",
    );
    if let Some(err) = &cap.error {
        page.para("note", &format!("Reading stopped early: {err}"));
    }
    for limit in input.dcqcn.limits() {
        page.para("note", &format!("Limit reached: {limit}."));
    }
    // One silence longer than a second that is most of the span is rarely traffic: usually a record whose
    // timestamp was corrupted, which stretches every time axis below.
    if let Some(n) = cap.largest_gap_frame
        && cap.largest_gap_ns >= 1_000_000_000
        && cap.largest_gap_ns >= cap.duration_ns / 2
    {
        page.para(
            "note",
            &format!(
                "Frame {n} comes {} after the frame before it, most of the capture's span: check its timestamp \
                 (`roce-analyzer decode -c {n}` shows it last).",
                fmt_duration(cap.largest_gap_ns)
            ),
        );
    }
}
