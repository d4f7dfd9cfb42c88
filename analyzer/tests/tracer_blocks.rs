//! What `roce-tracer` records beside the frames (counter samples, kernel drops) shows up in `stats` and in the
//! findings.

mod common;

use analyzer::blocks::{self, COUNTERS, DROPS, PEN};
use analyzer::pipeline::{self, PipelineOptions};
use analyzer::sink::{PcapngWriter, SectionInfo};
use analyzer::source::{CaptureReader, LinkType};
use common::{analyzer, run};
use roce_wire::{BthRepr, ExtHeaders, IpSpec, RoceFrame};
use serde_json::{Value, json};

/// Three CNPs on the wire, while the NIC counted ten: the tap missed some.
fn capture() -> Vec<u8> {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    let ctr = |ts: u64, sent: u64| {
        blocks::encode(
            COUNTERS,
            &json!({"ts_ns": ts, "counters": {
                "class/infiniband/mlx5_0/ports/1/hw_counters/np_cnp_sent": sent,
                "class/infiniband/mlx5_0/ports/1/hw_counters/out_of_sequence": 5,
            }}),
        )
        .unwrap()
    };
    w.write_custom(PEN, &ctr(1_000, 100), true).unwrap();
    for i in 0..3u64 {
        let f = RoceFrame {
            src_mac: [2, 0, 0, 0, 0, 2],
            dst_mac: [2, 0, 0, 0, 0, 1],
            vlan: None,
            ip: IpSpec::V4 {
                src: [10, 0, 0, 2],
                dst: [10, 0, 0, 1],
                dscp: 48,
                ecn: 0,
                ttl: 64,
                ident: 0,
            },
            sport: 0,
            bth: BthRepr::cnp(0x42),
            ext: ExtHeaders::default(),
            payload: &[0; 16],
        };
        let mut buf = vec![0; f.len()];
        let n = f.emit(&mut buf).unwrap();
        w.write_packet(0, 2_000 + i * 1_000, &buf[..n], n as u32)
            .unwrap();
    }
    w.write_custom(PEN, &ctr(9_000, 110), true).unwrap();
    let drops =
        json!({"ts_ns": 9_000, "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": 4}]});
    w.write_custom(PEN, &blocks::encode(DROPS, &drops).unwrap(), true)
        .unwrap();
    w.into_inner().unwrap()
}

#[test]
fn stats_show_counter_deltas_and_kernel_drops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traced.pcapng");
    std::fs::write(&path, capture()).unwrap();
    let out = run(analyzer().args(["stats", "--json"]).arg(&path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let counters = v["counters"].as_array().unwrap();
    let sent = counters
        .iter()
        .find(|c| c["name"].as_str().unwrap().ends_with("np_cnp_sent"))
        .unwrap();
    assert_eq!(
        (sent["delta"].as_u64(), sent["samples"].as_u64()),
        (Some(10), Some(2))
    );
    assert_eq!(v["kernel_drops"][0]["count"], 4);
    assert_eq!(v["kernel_drops"][0]["reason"], "NO_SOCKET");
    let text = run(analyzer().arg("stats").arg(&path));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("np_cnp_sent") && text.contains("NO_SOCKET"),
        "{text}"
    );
}

#[test]
fn fewer_cnps_captured_than_sent_is_a_finding() {
    let mut reader =
        CaptureReader::from_reader("traced", Box::new(std::io::Cursor::new(capture()))).unwrap();
    let (a, _) = pipeline::run(&mut reader, &PipelineOptions::default(), |_| {}).unwrap();
    let f = a
        .findings
        .iter()
        .find(|f| f.code == "cnp_count_mismatch")
        .expect("the mismatch is reported");
    assert!(
        f.title.contains("10") && f.title.contains('3'),
        "{}",
        f.title
    );
}
