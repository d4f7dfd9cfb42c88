//! The findings section, first on the page because it is what a reader came for.

use super::{Report, html};
use crate::analysis::findings::{Finding, Severity};

pub(super) fn write(r: &mut Report<'_>) {
    r.page.section("findings", "Findings");
    r.page.raw(&findings_html(r.input.findings));
}

fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Problem => "problem",
    }
}

fn severity_rank(s: Severity) -> u8 {
    match s {
        Severity::Problem => 0,
        Severity::Warning => 1,
        Severity::Info => 2,
    }
}

fn findings_html(findings: &[Finding]) -> String {
    if findings.is_empty() {
        return "<p class=\"note\">No findings: nothing in this capture matched a known congestion-control \
                or PFC problem.</p>"
            .into();
    }
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    // Stable, so findings of one severity keep the order the analysis gave them.
    sorted.sort_by_key(|f| severity_rank(f.severity));
    let mut s = String::new();
    for f in sorted {
        let sev = severity_name(f.severity);
        s.push_str(&format!(
            "<div class=\"finding {sev}\"><h3><span class=\"sev\">{sev}</span> {} <span class=\"code\">{}</span></h3>\n<p>{}</p>",
            html::escape(&f.title),
            html::escape(f.code),
            html::escape(&f.detail)
        ));
        if !f.evidence.is_empty() {
            s.push_str("<ul>");
            for e in &f.evidence {
                s.push_str(&format!("<li>{}</li>", html::escape(e)));
            }
            s.push_str("</ul>");
        }
        s.push_str("</div>\n");
    }
    s
}
