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

#[test]
fn findings_per_sample() {
    let cases: [(&str, u64, &[&str]); 9] = [
        ("clean_line_rate", 100, &[]),
        ("incast_dcqcn", 25, &[]),
        // The model's Rc stays under 1 Gb/s here, less than one 4 KiB frame per 10 µs bin: compared bin by
        // bin, every bin that held a frame read as above it, and cnps_without_cuts fired on obedient senders.
        ("incast_clamp", 25, &[]),
        ("read_incast", 25, &[]),
        ("ce_no_cnp", 25, &["ce_without_cnps"]),
        ("cnp_ignored", 25, &["cnps_without_cuts"]),
        ("pfc_only", 25, &[]),
        // The storm also holds a->r's ACKs long enough for one transport timeout and go-back-N (in the truth),
        // with nothing lost: a timeout, not a loss.
        (
            "pfc_storm_hol",
            25,
            &["pfc_storm", "hol_blocking", "timeout_retransmission"],
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
