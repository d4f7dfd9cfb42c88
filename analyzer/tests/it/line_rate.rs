//! The line rate: `--link-speed` read as people write it, and refused with the accepted forms when it is a
//! slip.

use crate::common::{analyzer, report_of, run, workspace};
use serde_json::Value;

fn stats_json(args: &[&str], sample: &str) -> Value {
    let path = workspace().join(format!("samples/captures/{sample}.pcapng"));
    let out = run(analyzer().arg("stats").arg("--json").args(args).arg(&path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every tap's line and the pause time it gave, in tap order.
fn lines_and_pauses(v: &Value) -> (Vec<(f64, String)>, Vec<u64>) {
    let lines = v["capture"]["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["line_gbps"].as_f64().unwrap(),
                i["line_rate_source"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let paused = v["pfc"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["paused_ns"].as_u64().unwrap())
        .collect();
    (lines, paused)
}

#[test]
fn a_bare_number_is_gigabits() {
    let bare = stats_json(&["--link-speed", "25"], "pfc_only");
    let unit = stats_json(&["--link-speed", "25G"], "pfc_only");
    let (lines, paused) = lines_and_pauses(&bare);
    assert!(!lines.is_empty() && !paused.is_empty());
    assert!(
        lines.iter().all(|(g, s)| *g == 25.0 && s == "flag"),
        "{lines:?}"
    );
    assert_eq!((lines, paused), lines_and_pauses(&unit));
}

#[test]
fn a_slip_is_refused_with_the_accepted_forms() {
    let path = workspace().join("samples/captures/pfc_only.pcapng");
    for slip in ["25000000000", "fast", "25bps"] {
        let out = run(analyzer().args(["stats", "--link-speed", slip]).arg(&path));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{slip}: {err}");
        assert!(
            err.contains("is not a link speed") && err.contains("25G") && err.contains("100000M"),
            "{slip}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
}

/// `report` on a sample, without `--link-speed` unless `args` gives it.
fn report(sample: &str, args: &[&str]) -> (String, Value, tempfile::TempDir) {
    report_of(
        &workspace().join(format!("samples/captures/{sample}.pcapng")),
        args,
    )
}

fn finding_codes(summary: &Value) -> Vec<String> {
    summary["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_owned())
        .collect()
}

/// The 25 Gb/s samples read at 100 Gb/s raised `cut_mismatch`: the model started four times too high. Their
/// interface blocks now say 25 Gb/s, and a run without the flag finds what a run with it finds.
#[test]
fn a_sample_needs_no_flag_its_line_comes_from_if_speed() {
    for sample in ["incast_dcqcn", "incast_clamp", "read_incast"] {
        let (_, summary, dir) = report(sample, &[]);
        let (_, flagged, _) = report(sample, &["--link-speed", "25G"]);
        let codes = finding_codes(&summary);
        assert!(
            !codes.iter().any(|c| c == "cut_mismatch"),
            "{sample}: {codes:?}"
        );
        assert_eq!(codes, finding_codes(&flagged), "{sample}");
        let d = &summary["dcqcn"];
        assert_eq!(d["line_gbps"], 25.0, "{sample}");
        assert_eq!(d["line_rate_source"], "if_speed", "{sample}");
        for f in d["flows"].as_array().unwrap() {
            assert_eq!(
                (&f["line_gbps"], &f["line_rate_source"]),
                (&Value::from(25.0), &Value::from("if_speed")),
                "{sample}"
            );
        }
        assert_eq!(flagged["dcqcn"]["line_rate_source"], "flag");
        let page = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
        assert!(
            page.contains("line rate 25 Gb/s (the capture&#39;s if_speed)"),
            "{sample}: the page states the line and where it came from"
        );
    }
}
