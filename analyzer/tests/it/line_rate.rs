//! The line rate: `--link-speed` read as people write it, and refused with the accepted forms when it is a
//! slip.

use crate::common::{analyzer, run, workspace};
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
