//! What `roce-tracer` records beside the frames (counter samples, kernel drops, kernel events) shows up in
//! `stats`, the findings and the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::{analyzer, run};
use analyzer::analysis::{self as pipeline, PipelineOptions};
use analyzer::output::report::TimeAxis;
use analyzer::output::report::charts::Chart;
use roce_capture::blocks::{self, COUNTERS, DROPS, EVENTS, PEN};
use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_capture::{Capture, LinkType};
use roce_core::recorded::Recorded;
use roce_wire::{BthRepr, ExtHeaders, IpSpec, RoceFrame};
use serde_json::{Value, json};
use testkit::frames::{emit, for_each_frame};

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
        let buf = emit(&f);
        w.write_packet(0, 2_000 + i * 1_000, &buf, buf.len() as u32)
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

/// A current tracer's `DROP` record says whether its IP rows are RoCEv2's alone; `stats` says so beside them.
#[test]
fn stats_say_what_ip_drop_rows_count() {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    let drops = blocks::records::Drops {
        version: blocks::VERSION,
        ts_ns: 1,
        ip: Some(blocks::records::IpDrops::Rocev2),
        drops: vec![blocks::records::DropRow {
            protocol: "ipv4".into(),
            reason: "NO_SOCKET".into(),
            count: 3,
        }],
    };
    w.write_custom(PEN, &blocks::encode_record(&drops).unwrap(), true)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("drops.pcapng");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let json = run(analyzer().args(["stats", "--json"]).arg(&path));
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["kernel_drops"][0]["ip"], "rocev2", "{v}");
    let text = run(analyzer().arg("stats").arg(&path));
    let text = String::from_utf8_lossy(&text.stdout);
    let row = text.lines().find(|l| l.contains("NO_SOCKET")).unwrap_or("");
    assert!(row.contains("RoCEv2 only"), "{text}");
}

#[test]
fn fewer_cnps_captured_than_sent_is_a_finding() {
    let mut reader =
        Capture::from_reader("traced", Box::new(std::io::Cursor::new(capture()))).unwrap();
    let a = pipeline::run(&mut reader, &PipelineOptions::default(), |_| {}).unwrap();
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

/// The sample `incast_dcqcn` (senders 10.0.0.1–4 to 10.0.0.5) with the `EVNT` blocks a tracer on the hosts
/// would have written: processes connecting three of the flows' QPs, two decoys that must label nothing (a
/// QP number of the capture on another host, a failed creation), a connection event, a MAD, drops in two of
/// three intervals and CQ polls counted in the kernel. Returns the file and the first frame's time.
pub(crate) fn traced_incast(dir: &Path) -> (PathBuf, u64) {
    let sample = crate::common::workspace().join("samples/captures/incast_dcqcn.pcapng");
    // The simulator's clock starts at 0; a tracer's is the wall clock.
    const WALL: u64 = 1_700_000_000_000_000_000;
    let mut frames = Vec::new();
    let reader = for_each_frame(&sample, |r| {
        frames.push((r.iface, WALL + r.ts_ns, r.data.to_vec(), r.len))
    });
    let first = frames[0].1;
    let at = |us: u64| first + us * 1_000;
    let ev = |t: u64, tp: &str, pid: u32, comm: &str, fields: Value| json!({"ts_ns": t, "tracepoint": tp, "pid": pid, "tid": pid + 1, "comm": comm, "fields": fields});
    let qp_event = |t, tp, pid, comm, qp: u32, src: &str, dst: &str| {
        ev(
            t,
            tp,
            pid,
            comm,
            json!({"qp_num": qp, "cm_id": 1, "tos": 106, "srcaddr": src, "dstaddr": dst}),
        )
    };
    let interval_a = json!({
        "ts_ns": at(1000), "from_ns": first - 1_000_000, "to_ns": at(1000),
        "tracepoints": {"attached": ["skb:kfree_skb", "rdma_cma:cm_send_req", "rdma_cma:cm_send_rep",
            "rdma_cma:cm_qp_create", "rdma_cma:cm_event_handler", "ib_mad:ib_mad_recv_done_handler",
            "rdma_core:cq_poll"], "unavailable": ["ib_mad:ib_mad_error_handler"], "incomplete": {}},
        "events": [
            ev(at(90), "ib_mad:ib_mad_recv_done_handler", 0, "kworker/u8:2",
                json!({"mgmt_class": 7, "method": 3, "attr_id": 0x10, "status": 0, "src_qp": 1, "wc_status": 0})),
            qp_event(at(100), "rdma_cma:cm_send_rep", 5005, "ib_write_bw", 0x01bab0, "10.0.0.5:4791", "10.0.0.1:4791"),
            qp_event(at(150), "rdma_cma:cm_send_req", 1001, "nccl-test", 0x037d80, "10.0.0.1:4791", "10.0.0.5:4791"),
            qp_event(at(200), "rdma_cma:cm_send_rep", 5005, "ib_write_bw", 0x0164f3, "10.0.0.5:4791", "10.0.0.4:4791"),
        ],
        "drops": [{"protocol": "ipv4", "reason": "NO_SOCKET", "count": 10}],
        "counts": [{"tracepoint": "rdma_core:cq_poll", "key": {"cq_id": 3}, "events": 1000, "sum": {"rc": 800}}],
        "lost": 0,
    });
    // The same interval's second block (a busy interval is split): events only.
    let interval_a_more = json!({
        "ts_ns": at(1000), "from_ns": first - 1_000_000, "to_ns": at(1000),
        "events": [
            ev(at(250), "rdma_cma:cm_qp_create", 77, "kworker/3:1",
                json!({"qp_num": 0x026c7d, "qp_type": 2, "qp_type_name": "RC", "rc": 0,
                       "srcaddr": "10.0.0.9:0", "dstaddr": "10.0.0.5:0"})),
            ev(at(260), "rdma_cma:cm_qp_create", 88, "nvme",
                json!({"qp_num": 0x023d4a, "rc": -12, "srcaddr": "10.0.0.5:0", "dstaddr": "10.0.0.3:0"})),
            ev(at(300), "rdma_cma:cm_event_handler", 5005, "ib_write_bw",
                json!({"event": 9, "event_name": "ESTABLISHED", "status": 0})),
        ],
        "drops": [], "counts": [], "lost": 0,
    });
    let interval_b = json!({
        "ts_ns": at(2000), "from_ns": at(1000), "to_ns": at(2000),
        "events": [], "drops": [], "counts": [], "lost": 0,
    });
    let interval_c = json!({
        "ts_ns": at(3500), "from_ns": at(2000), "to_ns": at(3500),
        "events": [], "drops": [{"protocol": "mac_control", "reason": "NOT_SPECIFIED", "count": 3}],
        "counts": [{"tracepoint": "rdma_core:cq_poll", "key": {"cq_id": 3}, "events": 500, "sum": {"rc": 400}}],
        "lost": 2,
    });
    let mut pending = vec![interval_a, interval_a_more, interval_b, interval_c];
    pending.reverse();
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    for i in reader.interfaces() {
        w.add_interface(i.link, i.snaplen, i.name.as_deref(), None)
            .unwrap();
    }
    let mut write_due = |w: &mut PcapngWriter<Vec<u8>>, before: u64| {
        while pending
            .last()
            .is_some_and(|b| b["to_ns"].as_u64().unwrap() <= before)
        {
            let b = pending.pop().unwrap();
            w.write_custom(PEN, &blocks::encode(EVENTS, &b).unwrap(), true)
                .unwrap();
        }
    };
    // Each block goes in when its interval is over, as the tracer writes them.
    for (iface, ts, data, len) in &frames {
        write_due(&mut w, *ts);
        w.write_packet(*iface, *ts, data, *len).unwrap();
    }
    write_due(&mut w, u64::MAX);
    let path = dir.join("traced_incast.pcapng");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    (path, first)
}

/// (src, dst, dest QP) → (sender pid, receiver pid) of the labelled flows.
type Labels = BTreeMap<(String, String, u64), (Option<u64>, Option<u64>)>;

fn labelled(v: &Value) -> Labels {
    v.as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                (
                    f["src"].as_str().unwrap().to_string(),
                    f["dst"].as_str().unwrap().to_string(),
                    f["dest_qp"].as_u64().unwrap(),
                ),
                (f["sender"]["pid"].as_u64(), f["receiver"]["pid"].as_u64()),
            )
        })
        .collect()
}

fn expected_labels() -> Labels {
    let k = |s: &str, d: &str, q: u64| (s.to_string(), d.to_string(), q);
    BTreeMap::from([
        // Data 10.0.0.1 → .5: ib_write_bw owns the destination QP, nccl-test the sender's (its pair).
        (
            k("10.0.0.1", "10.0.0.5", 0x01bab0),
            (Some(1001), Some(5005)),
        ),
        // ... and the ACKs coming back, the other way round.
        (
            k("10.0.0.5", "10.0.0.1", 0x037d80),
            (Some(5005), Some(1001)),
        ),
        // 10.0.0.4's QP is unknown: only the .5 end is labelled, in both directions.
        (k("10.0.0.4", "10.0.0.5", 0x0164f3), (None, Some(5005))),
        (k("10.0.0.5", "10.0.0.4", 0x00319b), (Some(5005), None)),
    ])
}

#[test]
fn stats_from_stdin_label_senders_by_the_only_flow_back() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = traced_incast(dir.path());
    let out = run(analyzer()
        .args(["stats", "--json", "-"])
        .stdin(std::fs::File::open(&path).unwrap()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let k = &v["kernel_events"];
    // Standard input cannot be read twice: the same labels, found through the one flow coming back.
    assert_eq!(labelled(&k["flow_processes"]), expected_labels());
    let senders: Vec<&Value> = k["flow_processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| !f["sender"].is_null())
        .collect();
    assert!(!senders.is_empty());
    for f in senders {
        assert_eq!(f["sender"]["pairing"], "reverse_flow");
    }
}

#[test]
fn stats_label_flows_with_their_processes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = traced_incast(dir.path());
    let out = run(analyzer().args(["stats", "--json"]).arg(&path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The keys stats always had are still there, untouched.
    assert_eq!(v["flows"].as_array().unwrap().len(), 8);
    let k = &v["kernel_events"];
    assert_eq!(k["blocks"], 4);
    assert_eq!(labelled(&k["flow_processes"]), expected_labels());
    // Read from a file, stats pairs the flows in a second read: the sender's QP comes from the pairing.
    for f in k["flow_processes"].as_array().unwrap() {
        if !f["sender"].is_null() {
            assert_eq!(f["sender"]["pairing"], "reverse_traffic");
        }
    }
    // The QPs: three connected by processes, one created on another host; the failed one is not a QP.
    let qps: Vec<(u64, u64)> = k["qp_processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| (q["qp_num"].as_u64().unwrap(), q["pid"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        qps,
        [
            (0x01bab0, 5005),
            (0x037d80, 1001),
            (0x0164f3, 5005),
            (0x026c7d, 77)
        ]
    );
    assert_eq!(k["qp_processes"][3]["local"], "10.0.0.9");
    assert_eq!(k["qp_processes"][3]["qp_type"], "RC");
    // Every event, in time order and on the capture's clock.
    let times: Vec<u64> = k["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["ts_ns"].as_u64().unwrap() - first)
        .collect();
    assert_eq!(
        times,
        [90_000, 100_000, 150_000, 200_000, 250_000, 260_000, 300_000]
    );
    assert_eq!(k["events_per_tracepoint"]["rdma_cma:cm_send_rep"], 2);
    // Drops per interval: the split interval counted once, the quiet one kept.
    let drops: Vec<u64> = k["drop_intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["count"].as_u64().unwrap())
        .collect();
    assert_eq!(drops, [10, 0, 3]);
    assert_eq!(k["counts"][0]["key"], "cq_id=3");
    assert_eq!(
        (
            k["counts"][0]["events"].as_u64(),
            k["counts"][0]["sum"].as_u64()
        ),
        (Some(1500), Some(1200))
    );
    assert_eq!(k["lost"], 2);
    assert_eq!(
        k["tracepoints"]["unavailable"][0],
        "ib_mad:ib_mad_error_handler"
    );

    let text = run(analyzer().arg("stats").arg(&path));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Flows with their processes (4)"), "{text}");
    let row = text
        .lines()
        .find(|l| l.starts_with("10.0.0.1") && l.contains("0x01bab0") && l.contains("["))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.contains("nccl-test[1001] QP 0x037d80")
            && row.contains("ib_write_bw[5005] QP 0x01bab0"),
        "{row}"
    );
    assert!(text.contains("ESTABLISHED"), "{text}");
    let qp_table = text
        .split("QPs and their processes (4)")
        .nth(1)
        .and_then(|t| t.split("\n\n").next())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(qp_table.contains("kworker/3:1[77]"), "{qp_table}");
    assert!(
        !qp_table.contains("nvme[88]"),
        "a failed creation owns no QP: {qp_table}"
    );

    // A capture without EVNT blocks has no kernel_events key at all.
    let plain = crate::common::workspace().join("samples/captures/incast_dcqcn.pcapng");
    let out = run(analyzer().args(["stats", "--json"]).arg(&plain));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("kernel_events").is_none());
}

#[test]
fn report_puts_kernel_events_on_the_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first) = traced_incast(dir.path());
    let out_dir = dir.path().join("report");
    let out = run(analyzer().arg("report").arg(&path).arg("-o").arg(&out_dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("summary.json")).unwrap()).unwrap();
    let k = &summary["kernel_events"];
    assert_eq!(labelled(&k["flow_processes"]), expected_labels());
    // The report pairs data flows through the DCQCN pairing (ACKs answering the sender's PSNs here).
    let data = k["flow_processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["dest_qp"] == 0x01bab0)
        .unwrap();
    assert_eq!(data["sender"]["pairing"], "reverse_traffic");
    assert!(
        summary["charts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "kernel_events.png")
    );
    for table in [
        "kernel_events.csv",
        "qp_processes.csv",
        "flow_processes.csv",
        "kernel_drop_intervals.csv",
    ] {
        assert!(out_dir.join(table).is_file(), "{table}");
    }
    let csv = std::fs::read_to_string(out_dir.join("kernel_events.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 7, "{csv}");
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(html.contains("id=\"kernel\""), "a kernel events section");
    assert!(
        html.contains("nccl-test[1001] → ib_write_bw[5005]"),
        "flow labelled in the per-QP table"
    );

    // The chart, as described before drawing: marks at the events' times on the report's axis.
    let mut last = first;
    let reader = for_each_frame(&path, |r| last = r.ts_ns);
    let kernel = Recorded::read(reader.custom_blocks()).kernel_events;
    let axis = TimeAxis::new(first, last - first);
    let Some(Chart::Line(chart)) = analyzer::output::report::kernel_chart(&kernel, &axis) else {
        panic!("a kernel chart");
    };
    let xs = |label: &str| -> Vec<f64> {
        chart
            .marks
            .iter()
            .find(|m| m.label.starts_with(label))
            .unwrap_or_else(|| {
                panic!(
                    "{label} in {:?}",
                    chart.marks.iter().map(|m| &m.label).collect::<Vec<_>>()
                )
            })
            .points
            .iter()
            .map(|p| p.0)
            .collect()
    };
    let x = |us: u64| axis.x(first + us * 1_000);
    assert_eq!(
        xs("QP created or connected"),
        [x(100), x(150), x(200), x(250), x(260)]
    );
    assert_eq!(xs("connection events"), [x(300)]);
    assert_eq!(xs("MADs"), [x(90)]);
    // Drops per second, a step per interval, the first one cut at the first frame.
    let drops = &chart.lines[0].points;
    assert_eq!(drops[0], (0.0, 10.0 * 1e9 / 2e6));
    assert_eq!(drops[1], (x(1000), 10.0 * 1e9 / 2e6));
    assert_eq!((drops[2].1, drops[3].1), (0.0, 0.0));
    assert_eq!(drops[4], (x(2000), 3.0 * 1e9 / 1.5e6));
    assert!(chart.title.contains("13 drops"), "{}", chart.title);
}

/// The sample `incast_dcqcn` with `EVNT` blocks holding only `rdma_res:qp` events, as a tracer that found
/// no RDMA tracepoint would write them: the start snapshot (before the first frame) names the owners of
/// the 10.0.0.1 ↔ .5 pair's QPs, a kernel QP and a QP that carries no traffic; a snapshot taken after the
/// last frame names the owner of .4's destination QP, too late to own it while the flow ran.
fn snapshot_only_incast(dir: &Path) -> PathBuf {
    let sample = crate::common::workspace().join("samples/captures/incast_dcqcn.pcapng");
    const WALL: u64 = 1_700_000_000_000_000_000;
    let mut frames = Vec::new();
    let reader = for_each_frame(&sample, |r| {
        frames.push((r.iface, WALL + r.ts_ns, r.data.to_vec(), r.len))
    });
    let first = frames[0].1;
    let last = frames.last().unwrap().1;
    let qp = |t: u64,
              dev: &str,
              lqpn: u32,
              rqpn: Option<u32>,
              typ: &str,
              owner: Option<(u32, &str)>| {
        let mut fields =
            json!({"device": dev, "port": 1, "lqpn": lqpn, "type": typ, "state": "RTS"});
        if let Some(r) = rqpn {
            fields["rqpn"] = r.into();
        }
        let (pid, comm) = owner.unwrap_or((0, "ib_core"));
        if owner.is_some() {
            fields["pid"] = pid.into();
        }
        fields["comm"] = comm.into();
        json!({"ts_ns": t, "tracepoint": "rdma_res:qp", "pid": pid, "tid": pid, "comm": comm, "fields": fields})
    };
    let start = first - 500_000;
    let blocks = [
        json!({
            "ts_ns": first + 1_000_000, "from_ns": first - 1_000_000, "to_ns": first + 1_000_000,
            "tracepoints": {"attached": ["skb:kfree_skb"], "unavailable": ["rdma_cma:cm_qp_create"],
                "incomplete": {}},
            "events": [
                qp(start, "mlx5_0", 1, None, "GSI", None),
                qp(start, "mlx5_0", 0x01bab0, Some(0x037d80), "RC", Some((5005, "ib_write_bw"))),
                qp(start, "mlx5_0", 0x037d80, Some(0x01bab0), "RC", Some((1001, "nccl-test"))),
                qp(start, "mlx5_1", 0x0aaaaa, None, "UD", Some((7, "opensm"))),
            ],
            "drops": [], "counts": [], "lost": 0,
        }),
        json!({
            "ts_ns": last + 2_000_000, "from_ns": last, "to_ns": last + 2_000_000,
            "events": [qp(last + 1_000_000, "mlx5_0", 0x0164f3, Some(0x00319b), "RC", Some((5005, "ib_write_bw")))],
            "drops": [], "counts": [], "lost": 0,
        }),
    ];
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    for i in reader.interfaces() {
        w.add_interface(i.link, i.snaplen, i.name.as_deref(), None)
            .unwrap();
    }
    let [head, tail] = blocks;
    let write = |w: &mut PcapngWriter<Vec<u8>>, b: &Value| {
        w.write_custom(PEN, &blocks::encode(EVENTS, b).unwrap(), true)
            .unwrap();
    };
    write(&mut w, &head);
    for (iface, ts, data, len) in &frames {
        w.write_packet(*iface, *ts, data, *len).unwrap();
    }
    write(&mut w, &tail);
    let path = dir.join("snapshot_only.pcapng");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    path
}

#[test]
fn rdma_snapshots_alone_label_flows() {
    let dir = tempfile::tempdir().unwrap();
    let path = snapshot_only_incast(dir.path());
    let k = |v: &Value, key: &str| v["kernel_events"][key].clone();
    let want = {
        let k = |s: &str, d: &str, q: u64| (s.to_string(), d.to_string(), q);
        BTreeMap::from([
            (
                k("10.0.0.1", "10.0.0.5", 0x01bab0),
                (Some(1001), Some(5005)),
            ),
            (
                k("10.0.0.5", "10.0.0.1", 0x037d80),
                (Some(5005), Some(1001)),
            ),
        ])
    };

    let out = run(analyzer().args(["stats", "--json"]).arg(&path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(labelled(&k(&v, "flow_processes")), want);
    // Every QP of the snapshots is an owner, the kernel's with pid 0, seen at its snapshot's time.
    let qps: Vec<(u64, u64, String, String)> = k(&v, "qp_processes")
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["qp_num"].as_u64().unwrap(),
                q["pid"].as_u64().unwrap(),
                q["comm"].as_str().unwrap().to_string(),
                q["tracepoint"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let own =
        |qp: u64, pid: u64, comm: &str| (qp, pid, comm.to_string(), "rdma_res:qp".to_string());
    assert_eq!(
        qps,
        [
            own(1, 0, "ib_core"),
            own(0x01bab0, 5005, "ib_write_bw"),
            own(0x037d80, 1001, "nccl-test"),
            own(0x0aaaaa, 7, "opensm"),
            own(0x0164f3, 5005, "ib_write_bw"),
        ]
    );
    assert_eq!(k(&v, "qp_processes")[1]["qp_type"], "RC");
    let seen: Vec<u64> = k(&v, "qp_processes")
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["seen_ns"].as_u64().unwrap())
        .collect();
    assert!(seen[..4].iter().all(|&s| s == seen[0]) && seen[4] > seen[0]);

    let text = run(analyzer().arg("stats").arg(&path));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Flows with their processes (2)"), "{text}");

    let out_dir = dir.path().join("report");
    let out = run(analyzer().arg("report").arg(&path).arg("-o").arg(&out_dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(labelled(&k(&summary, "flow_processes")), want);
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(
        html.contains("nccl-test[1001] → ib_write_bw[5005]"),
        "flow labelled in the per-QP table"
    );
}

/// A capture taken on 10.0.0.1 (mlx5_0; mlx5_1 is 10.0.1.1) where QP numbers repeat across hosts: QP 0x123
/// is ib_write_bw's on mlx5_0, rping's on mlx5_1, and some unknown process's on 10.0.0.3. The snapshot
/// events carry each port's addresses (mlx5_1's as the IPv4-mapped GID text), so each QP labels only the
/// flows at its own host. A `cm_send_req` for the same QP adds its connection to the snapshot's row.
///
/// The flows (dest QP): .2 → .1 (0x123, into ib_write_bw's QP) with its ACKs .1 → .2 (0x456), .1 → .3
/// (0x123, .3's QP) with its ACKs .3 → .1 (0x789, perf2's QP on .1), and 10.0.1.7 → 10.0.1.1 (0x123, rping's).
fn same_qp_on_two_hosts(dir: &Path) -> PathBuf {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    let qp = |dev: &str, lqpn: u32, pid: u32, comm: &str, addrs: &[&str]| {
        json!({"ts_ns": 1_000, "tracepoint": "rdma_res:qp", "pid": pid, "tid": pid, "comm": comm,
               "fields": {"device": dev, "port": 1, "lqpn": lqpn, "type": "RC", "state": "RTS",
                          "pid": pid, "comm": comm, "addrs": addrs}})
    };
    let mlx5_0 = ["fe80::a00:ff:fe00:1", "10.0.0.1"];
    let events = json!({
        "ts_ns": 1_500, "from_ns": 0, "to_ns": 1_500,
        "tracepoints": {"attached": ["skb:kfree_skb", "rdma_cma:cm_send_req"], "unavailable": [],
            "incomplete": {}},
        "events": [
            qp("mlx5_0", 0x123, 4242, "ib_write_bw", &mlx5_0),
            qp("mlx5_0", 0x789, 4243, "perf2", &mlx5_0),
            qp("mlx5_1", 0x123, 6000, "rping", &["::ffff:10.0.1.1", "not an address"]),
            {"ts_ns": 1_200, "tracepoint": "rdma_cma:cm_send_req", "pid": 4242, "tid": 4242,
             "comm": "ib_write_bw", "fields": {"qp_num": 0x123, "srcaddr": "10.0.0.1:4791",
             "dstaddr": "10.0.0.2:4791"}},
        ],
        "drops": [], "counts": [], "lost": 0,
    });
    w.write_custom(PEN, &blocks::encode(EVENTS, &events).unwrap(), true)
        .unwrap();
    let flows: [([u8; 4], [u8; 4], u32); 5] = [
        ([10, 0, 0, 2], [10, 0, 0, 1], 0x123),
        ([10, 0, 0, 1], [10, 0, 0, 2], 0x456),
        ([10, 0, 0, 1], [10, 0, 0, 3], 0x123),
        ([10, 0, 0, 3], [10, 0, 0, 1], 0x789),
        ([10, 0, 1, 7], [10, 0, 1, 1], 0x123),
    ];
    let mut ts = 2_000;
    for (i, (src, dst, qp)) in flows.into_iter().enumerate() {
        for psn in 0..2 {
            let f = RoceFrame {
                src_mac: [2, 0, 0, 0, 0, src[3]],
                dst_mac: [2, 0, 0, 0, 0, dst[3]],
                vlan: None,
                ip: IpSpec::V4 {
                    src,
                    dst,
                    dscp: 26,
                    ecn: 2,
                    ttl: 64,
                    ident: i as u16,
                },
                sport: 49152,
                bth: BthRepr::new(roce_wire::Opcode::RC_SEND_ONLY, qp, psn),
                ext: ExtHeaders::default(),
                payload: &[0; 64],
            };
            let buf = emit(&f);
            w.write_packet(0, ts, &buf, buf.len() as u32).unwrap();
            ts += 1_000;
        }
    }
    let path = dir.join("same_qp_on_two_hosts.pcapng");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    path
}

#[test]
fn snapshot_qps_label_only_flows_at_their_host() {
    let dir = tempfile::tempdir().unwrap();
    let path = same_qp_on_two_hosts(dir.path());
    let out = run(analyzer().args(["stats", "--json"]).arg(&path));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["flows"].as_array().unwrap().len(), 5);
    let k = &v["kernel_events"];
    let key = |s: &str, d: &str, q: u64| (s.to_string(), d.to_string(), q);
    assert_eq!(
        labelled(&k["flow_processes"]),
        BTreeMap::from([
            // Into ib_write_bw's QP, not rping's, though both are 0x123 and rping's was listed last.
            (key("10.0.0.2", "10.0.0.1", 0x123), (None, Some(4242))),
            // .3's QP 0x123 is nobody's here: only perf2's end, found through the ACKs' flow.
            (key("10.0.0.1", "10.0.0.3", 0x123), (Some(4243), None)),
            (key("10.0.0.1", "10.0.0.2", 0x456), (Some(4242), None)),
            // The sender's QP is .3's 0x123: not ib_write_bw's.
            (key("10.0.0.3", "10.0.0.1", 0x789), (None, Some(4243))),
            // mlx5_1's 0x123, from its IPv4-mapped GID.
            (key("10.0.1.7", "10.0.1.1", 0x123), (None, Some(6000))),
        ])
    );
    // Three QPs: the connection event joins ib_write_bw's snapshot row, filling in its peer.
    let qps = k["qp_processes"].as_array().unwrap();
    let rows: Vec<(u64, u64, Value)> = qps
        .iter()
        .map(|q| {
            (
                q["qp_num"].as_u64().unwrap(),
                q["pid"].as_u64().unwrap(),
                q["addrs"].clone(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (0x123, 4242, json!(["fe80::a00:ff:fe00:1", "10.0.0.1"])),
            (0x789, 4243, json!(["fe80::a00:ff:fe00:1", "10.0.0.1"])),
            (0x123, 6000, json!(["10.0.1.1"])),
        ]
    );
    assert_eq!(
        (&qps[0]["local"], &qps[0]["remote"]),
        (&json!("10.0.0.1"), &json!("10.0.0.2"))
    );
    assert_eq!(qps[0]["tracepoint"], "rdma_res:qp");
}

/// One frame from 10.0.0.`src` to 10.0.0.`dst`.
fn rc_frame(src: u8, dst: u8, bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
    crate::common::v4_frame(src, dst, 2, bth, ext, payload)
}

#[test]
fn stats_label_senders_of_several_qps_between_two_hosts() {
    // Two connections from 10.0.0.1 to 10.0.0.5 (as NCCL opens several per peer): QP 0x111 writes to
    // 0x100 and QP 0x222 to 0x200, each acknowledged back to its own QP. Only the senders' QPs have
    // known owners. With two flows coming back, "the only flow back" cannot say which sender is which:
    // the labels need the pairing, from the PSNs the ACKs echo.
    use roce_wire::Opcode;
    use roce_wire::ext::AethRepr;
    let ack = |qp: u32, psn: u32| {
        let ext = ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: 0,
                msn: psn,
            }),
            ..ExtHeaders::default()
        };
        rc_frame(
            5,
            1,
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, qp, psn),
            ext,
            &[],
        )
    };
    let t0 = 1_700_000_000_000_000_000u64;
    let mut frames = Vec::new();
    for i in 0..20u32 {
        let t = t0 + u64::from(i) * 10_000;
        let (psn_a, psn_b) = (1_000 + i, 500_000 + i);
        let send = |qp, psn| BthRepr::new(Opcode::RC_SEND_ONLY, qp, psn);
        frames.push((
            t,
            rc_frame(1, 5, send(0x100, psn_a), ExtHeaders::default(), &[0; 64]),
        ));
        frames.push((
            t + 1_000,
            rc_frame(1, 5, send(0x200, psn_b), ExtHeaders::default(), &[0; 64]),
        ));
        frames.push((t + 3_000, ack(0x111, psn_a)));
        frames.push((t + 4_000, ack(0x222, psn_b)));
    }
    let owner = |qp: u32, pid: u32, comm: &str| {
        json!({"ts_ns": t0 - 1_000, "tracepoint": "rdma_res:qp", "pid": pid, "tid": pid, "comm": comm,
               "fields": {"device": "mlx5_0", "port": 1, "lqpn": qp, "type": "RC", "state": "RTS",
                          "pid": pid, "comm": comm, "addrs": "10.0.0.1"}})
    };
    let block = json!({
        "ts_ns": t0, "from_ns": t0 - 1_000_000, "to_ns": t0,
        "tracepoints": {"attached": ["skb:kfree_skb"], "unavailable": [], "incomplete": {}},
        "events": [owner(0x111, 11, "rank0"), owner(0x222, 22, "rank1")],
        "drops": [], "counts": [], "lost": 0,
    });
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    w.write_custom(PEN, &blocks::encode(EVENTS, &block).unwrap(), true)
        .unwrap();
    for (t, data) in &frames {
        w.write_packet(0, *t, data, data.len() as u32).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two_qps.pcapng");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();

    let labels_of = |out: std::process::Output| -> Vec<(String, u64, Value, Value)> {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["kernel_events"]["flow_processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let who = |end: &Value| end.get("comm").cloned().unwrap_or(Value::Null);
                (
                    f["dst"].as_str().unwrap().to_string(),
                    f["dest_qp"].as_u64().unwrap(),
                    who(&f["sender"]),
                    who(&f["receiver"]),
                )
            })
            .collect()
    };
    let mut from_file = labels_of(run(analyzer().args(["stats", "--json"]).arg(&path)));
    from_file.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    assert_eq!(
        from_file,
        vec![
            // The ACK flows go to the owners' QPs: their receivers are known from the QP itself.
            ("10.0.0.1".into(), 0x111, Value::Null, json!("rank0")),
            ("10.0.0.1".into(), 0x222, Value::Null, json!("rank1")),
            // The data flows' senders, through the pairing.
            ("10.0.0.5".into(), 0x100, json!("rank0"), Value::Null),
            ("10.0.0.5".into(), 0x200, json!("rank1"), Value::Null),
        ]
    );
    // From standard input there is no second read, and two flows come back: no data flow's sender is named.
    let piped = labels_of(run(analyzer()
        .args(["stats", "--json", "-"])
        .stdin(std::fs::File::open(&path).unwrap())));
    assert!(
        piped
            .iter()
            .all(|(dst, _, sender, _)| dst != "10.0.0.5" || sender.is_null()),
        "{piped:?}"
    );
}
