//! Each finding fires on the teaching sample that shows it, and on no clean sample.

use crate::common::workspace;
use analyzer::analysis::findings::Severity;
use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use roce_capture::Capture;
use roce_core::dcqcn::Knobs;

/// Runs the whole analysis on a sample, with the link speed and knobs its scenario uses (25 Gb/s links,
/// the simulator's deactivate_at_line).
fn analyse(name: &str, gbps: u64) -> Analysis {
    let path = workspace().join(format!("samples/captures/{name}.pcapng"));
    let mut reader = Capture::open_file(&path).unwrap();
    let mut opts = PipelineOptions {
        link_bps: gbps * 1_000_000_000,
        ..PipelineOptions::default()
    };
    opts.dcqcn.line_mbps = gbps as f64 * 1000.0;
    opts.dcqcn.knobs = Knobs::from_kv_text("deactivate_at_line = 1").unwrap();
    // The receivers' CNP pacing, as the scenario set it (the simulator's default is 4 µs, NVIDIA's).
    let scenario =
        std::fs::read_to_string(workspace().join(format!("samples/scenarios/{name}.toml")))
            .unwrap_or_default();
    opts.dcqcn.np.min_time_between_cnps = scenario
        .lines()
        .find_map(|l| l.trim().strip_prefix("min_time_between_cnps_us = "))
        .map_or(4, |v| v.trim().parse().unwrap());
    let a = pipeline::run(&mut reader, &opts, |_| {}).unwrap();
    assert_eq!(reader.errors().count(), 0);
    a
}

/// Codes of the findings at warning level or above.
fn codes(a: &Analysis) -> Vec<&'static str> {
    a.findings
        .iter()
        .filter(|f| f.severity >= Severity::Warning)
        .map(|f| f.code)
        .collect()
}

#[test]
fn findings_per_sample() {
    let cases: [(&str, u64, &[&str]); 9] = [
        ("clean_line_rate", 100, &[]),
        ("incast_dcqcn", 25, &[]),
        ("incast_clamp", 25, &[]),
        ("read_incast", 25, &[]),
        ("ce_no_cnp", 25, &["ce_without_cnps"]),
        ("cnp_ignored", 25, &["cnps_without_cuts"]),
        ("pfc_only", 25, &[]),
        // The storm also holds a->r's ACKs long enough for one transport timeout and go-back-N (in the truth).
        (
            "pfc_storm_hol",
            25,
            &["pfc_storm", "hol_blocking", "go_back_n_loss"],
        ),
        ("lossy_gbn", 25, &["go_back_n_loss", "network_loss"]),
    ];
    let mut report = String::new();
    let mut ok = true;
    for (name, gbps, expected) in cases {
        let a = analyse(name, gbps);
        let got = codes(&a);
        let missing: Vec<_> = expected.iter().filter(|c| !got.contains(c)).collect();
        let extra: Vec<_> = got.iter().filter(|c| !expected.contains(c)).collect();
        if !missing.is_empty() || !extra.is_empty() {
            ok = false;
        }
        report.push_str(&format!(
            "{name}: got {got:?}, missing {missing:?}, unexpected {extra:?}\n"
        ));
        for f in &a.findings {
            report.push_str(&format!(
                "    {:?} {}: {} {:?}\n",
                f.severity,
                f.code,
                f.title,
                f.evidence.first()
            ));
        }
    }
    assert!(ok, "{report}");
}
