//! `trace.json`, the report's timeline for Perfetto: it loads as a Chrome trace, holds every CNP and every
//! pause of the capture, and stays bounded on a long one.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::workspace;
use analyzer::analysis::dcqcn::Options;
use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use analyzer::output::report::trace::{TraceLimits, write_trace_with};
use analyzer::output::report::{ReportInput, write_report};
use roce_capture::Capture;
use roce_core::line::LineRates;
use roce_core::recorded::KernelEvents;
use serde_json::Value;

fn analyse(path: &Path, link_gbps: u64) -> Analysis {
    let mut capture = Capture::open_file(path).unwrap();
    let opts = PipelineOptions {
        dcqcn: Options {
            lines: LineRates::flag(Some(link_gbps * 1_000_000_000)),
            fit: false,
            ..Options::default()
        },
        ..PipelineOptions::default()
    };
    pipeline::run(&mut capture, &opts, |_| {}).unwrap()
}

fn input(a: &Analysis) -> ReportInput<'_> {
    ReportInput {
        stats: &a.stats,
        dcqcn: &a.dcqcn,
        pauses: &a.pauses,
        findings: &a.findings,
        hops: a.hops.as_ref(),
        fabric: &a.fabric,
    }
}

/// The report of a bundled sample, and its trace parsed.
fn trace_of(name: &str) -> (Analysis, Value, tempfile::TempDir) {
    let a = analyse(
        &workspace().join(format!("samples/captures/{name}.pcapng")),
        25,
    );
    let dir = tempfile::tempdir().unwrap();
    let files = write_report(dir.path(), &input(&a)).unwrap();
    assert_eq!(files.trace, dir.path().join("trace.json"));
    let trace: Value =
        serde_json::from_slice(&std::fs::read(&files.trace).unwrap()).expect("trace.json is JSON");
    (a, trace, dir)
}

fn events(trace: &Value) -> &Vec<Value> {
    trace["traceEvents"].as_array().expect("a traceEvents list")
}

fn count(trace: &Value, ph: &str, cat: &str) -> usize {
    events(trace)
        .iter()
        .filter(|e| e["ph"] == ph && e["cat"] == cat)
        .count()
}

#[test]
fn every_cnp_is_an_instant_and_the_page_links_the_trace() {
    let (a, trace, dir) = trace_of("incast_dcqcn");
    let cnps: u64 = a.stats.cnps.iter().map(|c| c.count).sum();
    assert!(cnps > 100);
    assert_eq!(count(&trace, "i", "cnp") as u64, cnps);
    let cuts: usize = a.dcqcn.flows.iter().map(|f| f.cuts.len()).sum();
    assert_eq!(count(&trace, "i", "cut"), cuts);
    // Every event is well-formed for the viewers: a phase, a process, and a time for all but the names.
    for e in events(&trace) {
        assert!(e["ph"].is_string() && e["pid"].is_u64(), "{e}");
        assert!(
            e["ph"] == "M" || e["ts"].is_f64() || e["ts"].is_u64(),
            "{e}"
        );
    }
    // Counter tracks per flow: observed rate, Rc, Rt, alpha.
    let counters: BTreeMap<(u64, String), usize> = events(&trace)
        .iter()
        .filter(|e| e["ph"] == "C")
        .fold(BTreeMap::new(), |mut m, e| {
            *m.entry((
                e["pid"].as_u64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
            ))
            .or_default() += 1;
            m
        });
    for name in ["observed", "model Rc", "model Rt", "alpha"] {
        assert_eq!(
            counters.keys().filter(|(_, n)| n == name).count(),
            a.dcqcn.flows.len(),
            "{name}"
        );
    }
    // Wall-clock µs: the first CNP where the capture put it.
    let first_cnp = a
        .dcqcn
        .flows
        .iter()
        .filter_map(|f| f.cnp_ts_ns.first())
        .min()
        .unwrap();
    let earliest = events(&trace)
        .iter()
        .filter(|e| e["cat"] == "cnp")
        .filter_map(|e| e["ts"].as_f64())
        .fold(f64::INFINITY, f64::min);
    assert!((earliest - first_cnp as f64 / 1e3).abs() < 0.001);
    assert!(
        trace["otherData"]["left_out"]
            .as_object()
            .unwrap()
            .is_empty()
    );
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("<a href=\"trace.json\">trace.json</a>"));
}

#[test]
fn pause_slices_add_up_to_the_paused_time() {
    let (a, trace, _dir) = trace_of("pfc_storm_hol");
    let paused: u64 = a.stats.pfc.iter().map(|p| p.paused_ns).sum();
    assert!(paused > 0);
    let slices: Vec<&Value> = events(&trace)
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "pfc")
        .collect();
    assert_eq!(slices.len(), a.pauses.intervals.len());
    let exact: u64 = slices
        .iter()
        .map(|e| e["args"]["paused_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(exact, paused);
    let dur_us: f64 = slices.iter().map(|e| e["dur"].as_f64().unwrap()).sum();
    assert!(
        (dur_us * 1e3 - paused as f64).abs() < 1.0,
        "{dur_us} µs vs {paused} ns"
    );
    // Findings are instants too.
    assert_eq!(count(&trace, "i", "finding"), a.findings.len());
}

/// A long saturation test: thousands of CNPs and pauses, and the limits hold.
#[test]
fn a_long_capture_gives_a_bounded_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.pcap");
    let spec = samples::bulk::BulkSpec {
        frames: 200_000,
        qps: 64,
        ..samples::bulk::BulkSpec::saturation(200_000)
    };
    let written = samples::bulk::write(std::fs::File::create(&path).unwrap(), &spec).unwrap();
    let a = analyse(&path, 100);
    let limits = TraceLimits {
        counter_flows: 4,
        points_per_track: 100,
        cnps: 500,
        cuts: 200,
        pauses: 20,
        kernel_events: 10,
    };
    let paired: u64 = a.dcqcn.flows.iter().map(|f| f.summary.cnps).sum();
    assert!(
        paired > 2 * limits.cnps as u64,
        "{paired} CNPs of {} written",
        written.cnps
    );
    assert!(a.pauses.intervals.len() > limits.pauses);
    let out = write_trace_with(dir.path(), &input(&a), &KernelEvents::default(), &limits).unwrap();
    let trace: Value = serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap();
    assert_eq!(count(&trace, "i", "cnp"), limits.cnps);
    assert_eq!(count(&trace, "i", "cut"), limits.cuts);
    assert_eq!(count(&trace, "X", "pfc"), limits.pauses);
    let left = &trace["otherData"]["left_out"];
    assert_eq!(left["cnp"].as_u64().unwrap(), paired - limits.cnps as u64);
    // Counter tracks: four per flow for the first four flows, and the all-flows track, each decimated.
    let mut per_track: BTreeMap<(u64, String), usize> = BTreeMap::new();
    for e in events(&trace).iter().filter(|e| e["ph"] == "C") {
        *per_track
            .entry((
                e["pid"].as_u64().unwrap(),
                e["name"].as_str().unwrap().to_string(),
            ))
            .or_default() += 1;
    }
    assert_eq!(per_track.len(), 4 * limits.counter_flows + 1);
    // Decimation keeps up to four points per slice of time, and may round up by a slice.
    assert!(
        per_track
            .values()
            .all(|&n| n <= limits.points_per_track + 4),
        "{per_track:?}"
    );
    let all = events(&trace).len();
    assert!(all <= limits.max_events(), "{all} events");
    assert!(
        trace["otherData"]["flows_without_counters"]
            .as_u64()
            .unwrap()
            == (a.dcqcn.flows.len() - limits.counter_flows) as u64
    );
}
