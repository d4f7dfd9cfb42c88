//! `summary.json`: the numbers behind the page without the long time series, for a script that wants the
//! verdict and not the evidence.

use std::path::PathBuf;

use serde::Serialize;

use super::headline::{Headline, headline};
use super::{Report, ReportError, ReportInput, html};
use crate::analysis::dcqcn::{FlowDcqcn, FlowSummary, UnpairedCnps};
use crate::analysis::fabric::FabricReport;
use crate::analysis::findings::Finding;
use crate::analysis::pauses::PauseReport;
use crate::output::tables::{TableRow, examples};
use roce_core::line::LineRate;
use roce_core::passes::StatsReport;
use roce_core::processes::KernelSummary;

/// A DCQCN flow as `summary.json` and `dcqcn_flows.*` carry it: its numbers, and its series in a few more
/// (their counts, the first and last CNP, the mean observed cut).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DcqcnFlowRow {
    #[serde(flatten)]
    pub flow: FlowSummary,
    pub first_cnp_ns: Option<u64>,
    pub last_cnp_ns: Option<u64>,
    pub cuts: usize,
    pub observed_cuts: usize,
    /// Mean of the observed after/before ratios; null without observed cuts.
    pub mean_observed_cut_ratio: Option<f64>,
}

impl DcqcnFlowRow {
    pub fn of(f: &FlowDcqcn) -> Self {
        let n_obs = f.observed_cuts.len();
        DcqcnFlowRow {
            flow: f.summary.clone(),
            first_cnp_ns: f.cnp_ts_ns.first(),
            last_cnp_ns: f.cnp_ts_ns.last(),
            cuts: f.cuts.len(),
            observed_cuts: n_obs,
            mean_observed_cut_ratio: (n_obs > 0)
                .then(|| f.observed_cuts.iter().map(|c| c.ratio).sum::<f64>() / n_obs as f64),
        }
    }
}

#[derive(Debug, Serialize)]
struct DcqcnSummary<'a> {
    profile: &'static str,
    knob_source: &'a str,
    #[serde(flatten)]
    line: LineRate,
    bin_ns: u64,
    cnp_delay_ns: i64,
    flows: Vec<DcqcnFlowRow>,
    unpaired_cnps: &'a [UnpairedCnps],
}

#[derive(Debug, Serialize)]
struct Summary<'a> {
    /// The page's headline in numbers, each packet counted once: what a script checks first.
    headline: Headline,
    stats: &'a StatsReport,
    dcqcn: DcqcnSummary<'a>,
    pauses: &'a PauseReport,
    findings: &'a [Finding],
    /// The hosts side by side: hosts, pairs and the slow pairs with their reasons.
    fabric: &'a FabricReport,
    /// File names (not paths: the directory may be moved).
    charts: Vec<String>,
    tables: Vec<String>,
    /// Captures made with `roce-tracer --kernel-events` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel_events: Option<&'a KernelSummary>,
}

fn file_names(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .filter_map(|p| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect()
}

fn summary<'a>(input: &ReportInput<'a>, charts: &[PathBuf], tables: &[PathBuf]) -> Summary<'a> {
    let d = input.dcqcn;
    Summary {
        headline: headline(input),
        stats: input.stats,
        dcqcn: DcqcnSummary {
            profile: d.profile,
            knob_source: &d.knob_source,
            line: d.line,
            bin_ns: d.bin_ns,
            cnp_delay_ns: d.cnp_delay_ns,
            flows: d.flows.iter().map(DcqcnFlowRow::of).collect(),
            unpaired_cnps: &d.unpaired_cnps,
        },
        pauses: input.pauses,
        findings: input.findings,
        fabric: input.fabric,
        charts: file_names(charts),
        tables: file_names(tables),
        kernel_events: None,
    }
}

/// The Files section: every file of the directory, linked.
pub(super) fn write_files_section(r: &mut Report<'_>, tables: &[PathBuf]) {
    r.page.section("files", "Files");
    let mut listed: Vec<String> = vec!["summary.json".into(), "trace.json".into()];
    listed.extend(file_names(&r.charts));
    listed.extend(file_names(tables));
    let links: Vec<String> = listed
        .iter()
        .map(|n| format!("<a href=\"{0}\">{0}</a>", html::escape(n)))
        .collect();
    r.page
        .raw(&format!("<p class=\"note\">{}</p>", links.join(" · ")));
}

/// Writes `summary.json` and returns its path.
pub(super) fn write_json(r: &Report<'_>, tables: &[PathBuf]) -> Result<PathBuf, ReportError> {
    let path = r.dir.join(super::SUMMARY);
    let mut summary = summary(r.input, &r.charts, tables);
    summary.kernel_events = r.kernel_summary;
    // Streamed: for thousands of flows the text is tens of MB, and a whole copy in memory raised the peak.
    let io = |source| ReportError::Io {
        path: path.clone(),
        source,
    };
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
    serde_json::to_writer_pretty(&mut out, &summary)?;
    std::io::Write::flush(&mut out).map_err(io)?;
    Ok(path)
}

impl TableRow for DcqcnFlowRow {
    fn example() -> Self {
        DcqcnFlowRow {
            flow: examples::flow_summary(),
            first_cnp_ns: Some(0),
            last_cnp_ns: Some(0),
            cuts: 0,
            observed_cuts: 0,
            mean_observed_cut_ratio: Some(0.0),
        }
    }
}
