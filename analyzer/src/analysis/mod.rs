//! Everything the report needs from one read of a capture: each frame is decoded once and handed to the
//! statistics and DCQCN passes; the PFC and findings analyses then run on their tables.

pub mod dcqcn;
pub mod findings;
pub mod hops;
pub mod model_log;
pub mod np;
pub mod pauses;

use serde::Serialize;

use dcqcn::{DcqcnPass, DcqcnReport, Options};
use findings::{Finding, Rules};
use pauses::{PauseInputs, PauseReport};
use roce_capture::Capture;
use roce_core::dcqcn::DcqcnError;
use roce_core::decode::Decoder;
use roce_core::frames::Frames;
use roce_core::passes::hosts::HostsPass;
use roce_core::passes::{Stats, StatsReport};

/// How the whole analysis runs.
#[derive(Debug, Clone)]
pub struct PipelineOptions {
    /// How frames are decoded: whether the ICRC is checked, which extra UDP port carries RoCE.
    pub decoder: Decoder,
    /// The link speed, against which utilization and the flow table's rates are read.
    pub link_bps: u64,
    /// How the DCQCN analysis runs: knobs, bins, fit.
    pub dcqcn: Options,
    /// A pause at least this long is a storm (what a PFC watchdog would act on).
    pub storm_threshold_ns: u64,
    /// Thresholds of the findings' rules.
    pub rules: Rules,
    /// The hops pass (it finds nothing in a capture of one tap).
    pub hops: hops::HopsOptions,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            decoder: Decoder::default(),
            link_bps: 100_000_000_000,
            dcqcn: Options::default(),
            storm_threshold_ns: pauses::DEFAULT_STORM_THRESHOLD_NS,
            rules: Rules::default(),
            hops: hops::HopsOptions::default(),
        }
    }
}

/// The results of one read of a capture, everything the outputs draw from.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// Counts, the flow table, and per-file summaries.
    pub stats: StatsReport,
    /// What DCQCN did: model, observation and fit per flow.
    pub dcqcn: DcqcnReport,
    /// What PFC did: pauses, storms, stalls.
    pub pauses: PauseReport,
    /// The problems worth a reader's attention, most serious first.
    pub findings: Vec<Finding>,
    /// Hops, queues and marking, when some packet was seen at two taps.
    pub hops: Option<hops::HopsReport>,
}

/// Runs every analysis over `capture`. A damaged file still yields the analysis of everything before the
/// damage; its error stays in the capture (and in `stats.capture.error`). `progress` hears the bytes read
/// from the files so far, every 65,536 frames.
pub fn run(
    capture: &mut Capture,
    opts: &PipelineOptions,
    progress: impl FnMut(u64),
) -> Result<Analysis, DcqcnError> {
    run_with_model_events(capture, opts, progress, &mut |_, _| {})
}

/// [`run`], handing every event of every flow's DCQCN model to `on_event` as the model makes it (the
/// report's per-event table goes to disk this way, never whole in memory).
pub fn run_with_model_events(
    capture: &mut Capture,
    opts: &PipelineOptions,
    mut progress: impl FnMut(u64),
    on_event: &mut dyn FnMut(&dcqcn::FlowId, &roce_core::dcqcn::Event),
) -> Result<Analysis, DcqcnError> {
    let mut stats = Stats::new(opts.link_bps).with_priorities(opts.dcqcn.priorities.clone());
    let mut dcqcn = DcqcnPass::new(opts.dcqcn.bin_ns);
    let mut hosts = HostsPass::default();
    let mut hops = hops::HopsPass::new(opts.hops.clone());
    let mut frames = Frames::new(capture, opts.decoder);
    let mut number = 0u64;
    while let Some(f) = frames.next_frame() {
        stats.frame(&f);
        dcqcn.frame(&f);
        hosts.frame(&f);
        hops.frame(&f);
        hops.learn_taps(frames.capture());
        number += 1;
        if number.is_multiple_of(65_536) {
            progress(frames.capture().progress().0);
        }
    }
    let (stats, intervals) = stats.finish_with_intervals(capture);
    let mut dcqcn_opts = opts.dcqcn.clone();
    dcqcn_opts.apply_recorded_knobs(capture.custom_blocks());
    let (mut dcqcn, series) = dcqcn.finish_with_events(&dcqcn_opts, &intervals, on_event)?;
    dcqcn.name_taps(|i| tap_name(capture, i));
    let hosts = hosts.finish();
    let pauses = pauses::analyse(PauseInputs {
        hosts: &hosts,
        intervals,
        flows: &stats.flows,
        series: &series.flows,
        bins_start_ns: series.start_ns,
        bin_ns: series.bin_ns,
        start_ns: stats.capture.first_ns.unwrap_or(0),
        end_ns: stats.capture.last_ns.unwrap_or(0),
        storm_threshold_ns: opts.storm_threshold_ns,
    });
    let mut findings = findings::diagnose(&stats, &dcqcn, &pauses, &opts.rules);
    let hops = Some(hops.finish(capture)).filter(|h| !h.hops.is_empty());
    if let Some(h) = &hops {
        findings.extend(h.findings.iter().cloned());
    }
    Ok(Analysis {
        stats,
        dcqcn,
        pauses,
        findings,
        hops,
    })
}

/// A tap's name (`FILE:IFACE`) by its index over the capture.
pub fn tap_name(capture: &Capture, iface: u32) -> String {
    capture
        .taps()
        .get(iface as usize)
        .map(|t| t.name.clone())
        .unwrap_or_default()
}
