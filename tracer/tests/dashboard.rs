//! The Grafana dashboard only uses metrics the tracer exports.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use roce_core::passes::cnp::CnpRow;
use roce_core::passes::flows::FlowRow;
use roce_core::passes::pfc::PfcRow;
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
        iface: 0,
        tap: String::new(),
        src: ip,
        dst: ip,
        dest_qp: 1,
        count: 2,
        first_ns: 0,
        last_ns: 1,
        pcp: Some(6),
        priority: Some(6),
        priority_source: Some(roce_core::priority::PrioritySource::Pcp),
        dscp: 48,
    };
    let pfc = PfcRow {
        iface: 0,
        tap: String::new(),
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
    m.update_flows(&[(ip, ip, 1, 2.0, Some(1.5))]);
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
    // Missing, it fails, or with ROCETRACE_ALLOW_SKIP=1 says it did not run, like every other skip.
    if !common::require(
        "promtool_accepts_the_metrics",
        common::have("promtool"),
        "needs promtool (Debian package prometheus; cargo xtask install)",
    ) {
        return;
    }
    // One row of every table, so that each labelled family has a sample line to lint: an IPv6 flow (its
    // address brings colons into a label value), a CNP, and PFC and PAUSE rows (a priority and `all`).
    let m = Metrics::new();
    let (a, b): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
    let flow = FlowRow {
        iface: 0,
        tap: String::new(),
        src: a,
        dst: b,
        dest_qp: 7,
        packets: 3,
        bytes: 3000,
        first_ns: 0,
        last_ns: 1,
        mean_gbps: None,
        opcodes: BTreeMap::from([("RC_SEND_ONLY", 3)]),
        ect_packets: 2,
        ce_packets: 1,
        psn_gaps: 1,
        retransmissions: 0,
        out_of_order: 0,
        naks: Default::default(),
        icrc_failures: 0,
        truncated: 0,
        pcp: Some(3),
        priority: Some(3),
        priority_source: Some(roce_core::priority::PrioritySource::Pcp),
        dscp: 26,
    };
    let cnp = CnpRow {
        iface: 0,
        tap: String::new(),
        src: b,
        dst: a,
        dest_qp: 9,
        count: 2,
        first_ns: 0,
        last_ns: 1,
        pcp: Some(6),
        priority: Some(6),
        priority_source: Some(roce_core::priority::PrioritySource::Pcp),
        dscp: 48,
    };
    let pfc = PfcRow {
        iface: 0,
        tap: String::new(),
        src_mac: "02:00:00:00:00:01".into(),
        kind: "pfc",
        priority: Some(3),
        frames: 4,
        xoff: 3,
        xon: 1,
        pauses: 1,
        paused_ns: 10,
    };
    let pause = PfcRow {
        kind: "pause",
        priority: None,
        frames: 5,
        ..pfc.clone()
    };
    m.update(
        &[("roce", 3), ("cnp", 2), ("pfc", 4), ("pause", 5)],
        &[flow],
        &[cnp],
        &[pfc, pause],
        2.5,
        1,
    );
    // top's gauges: the model's rate beside the observed one.
    m.update_flows(&[(a, b, 7, 2.5, Some(1.25))]);
    let text = m.render();
    let qp = r#"{src="fd00::1",dst="fd00::2",qp="7"}"#;
    let prio = r#"{src_mac="02:00:00:00:00:01",priority="3"}"#;
    for series in [
        format!("rocetrace_qp_packets_total{qp} 3"),
        format!("rocetrace_qp_bytes_total{qp} 3000"),
        format!("rocetrace_qp_ce_packets_total{qp} 1"),
        format!("rocetrace_qp_psn_gaps_total{qp} 1"),
        r#"rocetrace_cnps_total{src="fd00::2",dst="fd00::1",qp="9"} 2"#.to_owned(),
        format!("rocetrace_pfc_frames_total{prio} 4"),
        format!("rocetrace_pfc_xoff_total{prio} 3"),
        r#"rocetrace_pause_frames_total{src_mac="02:00:00:00:00:01",priority="all"} 5"#.to_owned(),
        format!("rocetrace_model_gbps{qp} 1.25"),
        format!("rocetrace_flow_gbps{qp} 2.5"),
    ] {
        assert!(
            text.lines().any(|l| l == series),
            "no line `{series}` to lint in:\n{text}"
        );
    }
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
