//! The Grafana dashboard only uses metrics the tracer exports.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use analyzer::passes::cnp::CnpRow;
use analyzer::passes::pfc::PfcRow;
use tracer::metrics::Metrics;

#[test]
fn dashboard_metrics_exist() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../dashboards/rocetrace-live.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut used = BTreeSet::new();
    for panel in dash["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("rocetrace_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                used.insert(name);
            }
        }
    }
    assert!(used.len() >= 8, "{used:?}");

    let m = Metrics::new();
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let cnp = CnpRow {
        src: ip,
        dst: ip,
        dest_qp: 1,
        count: 2,
        first_ns: 0,
        last_ns: 1,
        pcp: Some(6),
        dscp: 48,
    };
    let pfc = PfcRow {
        src_mac: "02:00:00:00:00:01".into(),
        kind: "pfc",
        priority: Some(3),
        frames: 1,
        xoff: 1,
        xon: 0,
        pauses: 1,
        paused_ns: 10,
    };
    let pause = PfcRow {
        kind: "pause",
        priority: None,
        ..pfc.clone()
    };
    m.update(&[("roce", 1)], &[], &[cnp], &[pfc, pause], 1.0, 0);
    let rendered = m.render();
    // Flows are covered by the unit tests; their names appear in the HELP/TYPE lines even without samples.
    for name in used {
        assert!(
            rendered.contains(&format!("# TYPE {name} ")),
            "the dashboard uses {name}, which the tracer does not export:\n{rendered}"
        );
    }
}

/// What the endpoint serves passes Prometheus' own linter.
#[test]
fn promtool_accepts_the_metrics() {
    let have = std::process::Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok();
    if !have {
        println!(
            "SKIP-REASON: promtool_accepts_the_metrics: needs promtool (Debian package prometheus)"
        );
        assert!(
            std::env::var("ROCETRACE_ALLOW_SKIP").is_ok_and(|v| v == "1"),
            "promtool is missing (cargo xtask install); set ROCETRACE_ALLOW_SKIP=1 to accept the skip"
        );
        return;
    }
    let m = Metrics::new();
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let cnp = CnpRow {
        src: ip,
        dst: ip,
        dest_qp: 1,
        count: 2,
        first_ns: 0,
        last_ns: 1,
        pcp: Some(6),
        dscp: 48,
    };
    m.update(&[("roce", 3), ("cnp", 2)], &[], &[cnp], &[], 2.5, 1);
    let text = m.render();
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
