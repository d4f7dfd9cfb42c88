//! Each finding fires on the teaching sample that shows it, and on no clean sample.

use crate::common::workspace;
use analyzer::analysis::findings::Severity;
use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use roce_capture::Capture;
use roce_core::line::LineRates;

/// Runs the whole analysis on a sample at the link speed its scenario uses, with the knobs the sample records
/// (the simulator writes its hosts' `KNOB` block, as the tracer would): the receivers' CNP pacing and the
/// senders' reaction point come from the capture, not from the test.
fn analyse(name: &str, gbps: u64) -> Analysis {
    let path = workspace().join(format!("samples/captures/{name}.pcapng"));
    let mut reader = Capture::open_file(&path).unwrap();
    let mut opts = PipelineOptions::default();
    opts.dcqcn.lines = LineRates::flag(Some(gbps * 1_000_000_000));
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

/// Every teaching sample, reported as a user would (`roce-analyzer report FILES -o DIR`, no flag: the line
/// rate, knobs and priorities come from the capture), raises exactly the findings its truth file lists, at any
/// severity, and no other. The truth's list is the scenario's `expect_findings`: what really happened there.
#[test]
fn every_sample_reported_with_default_flags_raises_the_findings_of_its_truth() {
    let dir = workspace().join("samples/captures");
    let mut truths: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".truth.json"))
        .collect();
    truths.sort();
    assert!(truths.len() >= 13, "{truths:?}");
    let mut report = String::new();
    let mut ok = true;
    for truth in truths {
        let t: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&truth).unwrap()).unwrap();
        let name = t["scenario"].as_str().unwrap();
        let mut want: Vec<String> = t["findings"]
            .as_array()
            .expect("the truth lists the findings")
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        want.sort();
        // The scenario's files: NAME.pcapng and NAME.<file>.pcapng, as the samples README names them.
        let files: Vec<std::path::PathBuf> = t["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| dir.join(f["name"].as_str().unwrap()))
            .collect();
        let out = tempfile::tempdir().unwrap();
        let res = crate::common::run(
            crate::common::analyzer()
                .arg("report")
                .args(&files)
                .arg("-o")
                .arg(out.path()),
        );
        assert!(
            res.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&res.stderr)
        );
        let summary: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.path().join("summary.json")).unwrap(),
        )
        .unwrap();
        let found = summary["findings"].as_array().unwrap();
        let mut got: Vec<String> = found
            .iter()
            .map(|f| f["code"].as_str().unwrap().to_string())
            .collect();
        got.sort();
        got.dedup();
        if got != want {
            ok = false;
        }
        report.push_str(&format!("{name}: want {want:?}, got {got:?}\n"));
        for f in found {
            report.push_str(&format!(
                "    {} {}: {}\n",
                f["severity"], f["code"], f["title"]
            ));
        }
    }
    assert!(ok, "{report}");
}

/// The simulator records each tapped host's `roce_rp/enable/N` and `roce_np/enable/N` with its address, and the
/// analysis reads them as that host's: `ce_no_cnp`'s receiver (tapped) has its NP off, which
/// `ce_without_cnps` cites; `cnp_ignored`'s senders are not tapped, so the receiver's RP knobs say nothing of
/// them (`rp_enabled` unknown) and they are found from the traffic.
#[test]
fn recorded_enable_knobs_are_read_as_their_hosts() {
    let a = analyse("ce_no_cnp", 25);
    assert!(!a.dcqcn.flows.is_empty());
    for f in &a.dcqcn.flows {
        assert_eq!(
            (f.summary.rp_enabled, f.summary.np_enabled),
            (None, Some(false)),
            "{f:?}"
        );
    }
    let f = a
        .findings
        .iter()
        .find(|f| f.code == "ce_without_cnps")
        .unwrap();
    assert!(
        f.evidence
            .iter()
            .all(|e| e.contains("roce_np/enable/3 is recorded 0")),
        "{:?}",
        f.evidence
    );
    let a = analyse("cnp_ignored", 25);
    for f in &a.dcqcn.flows {
        assert_eq!(
            (f.summary.rp_enabled, f.summary.np_enabled),
            (None, Some(true)),
            "{f:?}"
        );
    }
    assert!(codes(&a).contains(&"cnps_without_cuts"));
}
