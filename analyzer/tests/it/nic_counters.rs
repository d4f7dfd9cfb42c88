//! The NIC counters beside the packets: a host (10.0.0.5, `mlx5_0`) whose counters say it sent 200 CNPs, 20
//! pause frames on priority 3 and received 50 CE-marked packets while it was sampled, captured once whole and
//! once with a quarter of its CNPs lost. The verdict, the finding, `stats`, the report's section, its
//! `summary.json` and its `nic_counters` table must tell the two apart, with the right share.

use std::path::{Path, PathBuf};

use crate::common::{analyzer, report_of, run};
use analyzer::analysis::{self as pipeline, PipelineOptions};
use roce_capture::blocks::records::{Counters, Knobs, RdmaPortRecord};
use roce_capture::blocks::{PEN, encode_record};
use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_capture::{Capture, LinkType};
use roce_wire::{BthRepr, ExtHeaders, Opcode};
use serde_json::Value;
use testkit::frames::{pfc_frame, v4_frame};

const BASE: u64 = 1_700_000_000_000_000_000;
const MS: u64 = 1_000_000;

/// The host's counters at a sample: CNPs sent, CE-marked packets received, pause frames sent on priority 3.
fn sample(ts: u64, cnps: u64, ce: u64, pauses: u64) -> Vec<u8> {
    let hw = "class/infiniband/mlx5_0/ports/1/hw_counters";
    encode_record(&Counters {
        version: 1,
        ts_ns: ts,
        counters: [
            (format!("{hw}/np_cnp_sent"), 5_000 + cnps),
            (format!("{hw}/rp_cnp_handled"), 7),
            (format!("{hw}/np_ecn_marked_roce_packets"), 900 + ce),
            (format!("{hw}/out_of_sequence"), 0),
            ("ethtool/eth2/tx_prio3_pause".to_string(), 10 + pauses),
            ("ethtool/eth2/rx_prio3_pause".to_string(), 0),
        ]
        .into(),
        host: "node5".into(),
    })
    .unwrap()
}

/// The capture: ten CNPs before the first counter sample and five after the last (outside what the counters
/// cover), and between them 200 CNPs from 10.0.0.5, 50 CE-marked packets to it and 20 PFC frames from its
/// MAC, with every fourth CNP left out when `lossy`.
pub(crate) fn capture(dir: &Path, lossy: bool) -> PathBuf {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("mirror0"), None)
        .unwrap();
    let knobs = Knobs {
        version: 1,
        ts_ns: BASE,
        host: "node5".into(),
        ports: vec![RdmaPortRecord {
            device: "mlx5_0".into(),
            port: 1,
            driver: Some("mlx5_core".into()),
            netdev: Some("eth2".into()),
            mac: Some("02:00:00:00:00:05".into()),
            addrs: vec!["10.0.0.5".into(), "fe80::5".into()],
        }],
        ..Knobs::default()
    };
    w.write_custom(PEN, &encode_record(&knobs).unwrap(), true)
        .unwrap();
    let cnp = v4_frame(5, 1, 0, BthRepr::cnp(0x42), ExtHeaders::default(), &[0; 16]);
    let put = |w: &mut PcapngWriter<Vec<u8>>, ts: u64, f: &[u8]| {
        w.write_packet(0, ts, f, f.len() as u32).unwrap();
    };
    for i in 0..10 {
        put(&mut w, BASE + i * MS, &cnp);
    }
    w.write_custom(PEN, &sample(BASE + 20 * MS, 0, 0, 0), true)
        .unwrap();
    for i in 0..200u64 {
        let t = BASE + 30 * MS + i * MS;
        if !(lossy && i % 4 == 3) {
            put(&mut w, t, &cnp);
        }
        if i < 50 {
            let bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x77, i as u32);
            let ce = v4_frame(1, 5, 3, bth, ExtHeaders::default(), &[0; 64]);
            put(&mut w, t + MS / 2, &ce);
        }
        if i % 10 == 5 {
            put(
                &mut w,
                t + MS / 4,
                &pfc_frame([2, 0, 0, 0, 0, 5], 3, 0xffff),
            );
        }
        if i == 100 {
            w.write_custom(PEN, &sample(t + MS / 3, 100, 25, 10), true)
                .unwrap();
        }
    }
    w.write_custom(PEN, &sample(BASE + 240 * MS, 200, 50, 20), true)
        .unwrap();
    for i in 0..5 {
        put(&mut w, BASE + 250 * MS + i * MS, &cnp);
    }
    let path = dir.join(if lossy {
        "lossy.pcapng"
    } else {
        "whole.pcapng"
    });
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    path
}

fn findings(path: &Path) -> Vec<analyzer::analysis::findings::Finding> {
    let mut reader = Capture::open_file(path).unwrap();
    pipeline::run(&mut reader, &PipelineOptions::default(), |_| {})
        .unwrap()
        .findings
}

fn stats_json(path: &Path) -> Value {
    let out = run(analyzer().args(["stats", "--json"]).arg(path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The row of a meaning in a port's JSON.
fn meaning<'a>(port: &'a Value, key: &str) -> &'a Value {
    port["meanings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["meaning"] == key)
        .unwrap_or_else(|| panic!("no {key} in {port}"))
}

#[test]
fn a_capture_short_of_the_cnps_its_nic_sent_says_by_how_much() {
    let dir = tempfile::tempdir().unwrap();
    let path = capture(dir.path(), true);
    let v = stats_json(&path);
    let port = &v["nic_counters"][0];
    assert_eq!(port["vendor"], "mlx5");
    assert_eq!(
        port["verdict"],
        "the capture saw 75.0 % of the CNPs mlx5_0 sent (150 of 200)"
    );
    let sent = meaning(port, "cnp_sent");
    assert_eq!(sent["movement"]["delta"], 200);
    assert_eq!(sent["compared"]["captured"]["count"], 150);
    assert_eq!(sent["compared"]["captured"]["edge"], 0);
    // The pause frames and CE marks the capture holds in full.
    let pause = port["meanings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["meaning"] == "pause_frames_tx" && m["priority"] == 3)
        .unwrap();
    assert_eq!(pause["compared"]["fraction"], 1.0, "{pause}");
    assert_eq!(
        meaning(port, "ecn_marked_received")["compared"]["captured"]["count"],
        50
    );
    let f = findings(&path);
    let low = f
        .iter()
        .find(|f| f.code == "capture_below_nic_counters")
        .expect("the missing quarter is a finding");
    assert_eq!(
        low.title,
        "The capture holds 75.0 % of the CNPs mlx5_0 sent"
    );
    assert_eq!(low.evidence.len(), 1, "{:?}", low.evidence);
    assert!(
        low.evidence[0].contains("200 by hw_counters/np_cnp_sent (mlx5); the capture holds 150"),
        "{:?}",
        low.evidence
    );
    // Tied to its host, the port is judged by its host's CNPs, not by the capture's total.
    assert!(!f.iter().any(|f| f.code == "cnp_count_mismatch"), "{f:?}");

    let text = run(analyzer().arg("stats").arg(&path));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("NIC counters by meaning"), "{text}");
    assert!(
        text.contains("the capture saw 75.0 % of the CNPs mlx5_0 sent (150 of 200)"),
        "{text}"
    );
    assert!(
        text.contains("Not counted by mlx5: packets retransmitted."),
        "{text}"
    );
}

#[test]
fn a_whole_capture_agrees_with_its_nic_and_raises_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = capture(dir.path(), false);
    let f = findings(&path);
    assert!(
        !f.iter()
            .any(|f| f.code == "capture_below_nic_counters" || f.code == "cnp_count_mismatch"),
        "{f:?}"
    );
    let (_, summary, report) = report_of(&path, &["--link-speed", "100G"]);
    let port = &summary["stats"]["nic_counters"][0];
    assert_eq!(
        port["verdict"],
        "the capture saw 100.0 % of the CNPs mlx5_0 sent (200 of 200)"
    );
    let page = std::fs::read_to_string(report.path().join("index.html")).unwrap();
    assert!(
        page.contains("<h2 id=\"nic-counters\">NIC counters</h2>"),
        "no NIC counters section"
    );
    assert!(
        page.contains("The capture saw 100.0 % of the CNPs mlx5_0 sent (200 of 200)"),
        "the verdict is not on the page"
    );
    let table = std::fs::read_to_string(report.path().join("nic_counters.csv")).unwrap();
    let sent = table
        .lines()
        .find(|l| l.contains(",cnp_sent,"))
        .expect("a cnp_sent row");
    assert!(sent.contains(",200,") && sent.ends_with(",1.0"), "{sent}");
    assert!(
        table.contains(",retransmitted_packets,,not_counted,"),
        "{table}"
    );
}
