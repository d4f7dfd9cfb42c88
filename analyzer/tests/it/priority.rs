//! NVIDIA's standard lossless setup, untagged with DSCP trust (issue 19, item 3): data with DSCP 26 on
//! priority 3 with PFC, CNPs with DSCP 48 on priority 6 without. Priorities come from the DSCP, so the
//! receiver's pauses of priority 3 stop the data (a stall), and neither they nor the CNPs are a finding.

use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use roce_capture::write::{PcapngWriter, SectionInfo};
use roce_capture::{LinkType, blocks};
use roce_core::priority::{PriorityMap, PrioritySource};
use roce_wire::{BthRepr, ExtHeaders, IpSpec, Opcode, RoceFrame};

const US: u64 = 1_000;
const T0: u64 = 1_000_000_000;

/// A CNP from 10.0.0.`src` to QP `qp` on 10.0.0.`dst`, untagged, DSCP 48.
fn cnp(src: u8, dst: u8, qp: u32) -> Vec<u8> {
    let f = RoceFrame {
        src_mac: [2, 0, 0, 0, 0, src],
        dst_mac: [2, 0, 0, 0, 0, dst],
        vlan: None,
        ip: IpSpec::V4 {
            src: [10, 0, 0, src],
            dst: [10, 0, 0, dst],
            dscp: 48,
            ecn: 1,
            ttl: 64,
            ident: 0,
        },
        sport: 50000,
        bth: BthRepr::cnp(qp),
        ext: ExtHeaders::default(),
        payload: &[0; 16],
    };
    let mut buf = vec![0; f.len()];
    let n = f.emit(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// PFC from host 2 (the receiver) on priority 3: `quanta` 0 resumes.
fn pfc3(quanta: u16) -> Vec<u8> {
    crate::common::pfc_frame([2, 0, 0, 0, 0, 2], 3, quanta)
}

/// 1 → 2 to QP 0x100 (from QP 0x10), untagged DSCP 26, a packet every µs for 1 ms, CE-marked from 100 µs
/// on; CNPs back every 50 µs from 101 µs; an ACK every 8 packets; host 2 pauses priority 3 from 404.5 to
/// 594.5 µs, and the sender sends nothing meanwhile.
fn frames() -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut psn = 0u32;
    for us in 0..1_000u64 {
        if (405..595).contains(&us) {
            continue;
        }
        let ecn = if us >= 100 { 3 } else { 2 };
        let bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x100, psn);
        let data = crate::common::v4_frame(1, 2, ecn, bth, ExtHeaders::default(), &[0; 1024]);
        out.push((T0 + us * US, data));
        if psn % 8 == 7 {
            let ack = ExtHeaders {
                aeth: Some(roce_wire::ext::AethRepr {
                    syndrome: 0x1f,
                    msn: psn,
                }),
                ..ExtHeaders::default()
            };
            let bth = BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0x10, psn);
            out.push((
                T0 + us * US + 500,
                crate::common::v4_frame(2, 1, 2, bth, ack, &[]),
            ));
        }
        if us >= 101 && us % 50 == 1 {
            out.push((T0 + us * US + 300, cnp(2, 1, 0x10)));
        }
        psn += 1;
    }
    out.push((T0 + 405 * US - 500, pfc3(0xffff)));
    out.push((T0 + 595 * US - 500, pfc3(0)));
    out.sort_by_key(|(t, _)| *t);
    out
}

/// The frames as a pcapng on `eth0`, after a `KNOB` block holding `recorded` when given.
fn analyse(recorded: Option<serde_json::Value>, opts: &PipelineOptions) -> Analysis {
    let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
    w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
        .unwrap();
    if let Some(knobs) = recorded {
        let block = blocks::encode(
            blocks::KNOBS,
            &serde_json::json!({"ts_ns": 0, "captured": ["eth0"], "knobs": knobs}),
        )
        .unwrap();
        w.write_custom(blocks::PEN, &block, true).unwrap();
    }
    for (t, f) in frames() {
        w.write_packet(0, t, &f, f.len() as u32).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvidia.pcapng");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let mut c = roce_capture::Capture::open_file(&path).unwrap();
    pipeline::run(&mut c, opts, |_| {}).unwrap()
}

fn codes(a: &Analysis) -> Vec<&'static str> {
    a.findings.iter().map(|f| f.code).collect()
}

#[test]
fn nvidias_standard_setup_takes_priorities_from_dscp_and_raises_no_false_findings() {
    let a = analyse(None, &PipelineOptions::default());
    let data = a.stats.flows.iter().find(|f| f.dest_qp == 0x100).unwrap();
    assert_eq!(
        (data.pcp, data.priority, data.priority_source),
        (None, Some(3), Some(PrioritySource::Dscp))
    );
    let c = &a.stats.cnps[0];
    assert_eq!(
        (c.priority, c.priority_source),
        (Some(6), Some(PrioritySource::Dscp))
    );
    let codes = codes(&a);
    assert!(!codes.contains(&"pause_without_roce"), "{codes:?}");
    assert!(!codes.contains(&"cnps_on_lossy_priority"), "{codes:?}");
    assert!(a.pauses.paused_without_roce.is_empty());
    // Stall detection is on: the flow on priority 3 went quiet while host 2 paused it.
    let stall = a.pauses.stalls.first().expect("the paused flow stalls");
    assert_eq!(stall.priority, Some(3));
    assert_eq!(stall.flows[0].dest_qp, 0x100);
    let f = &a.dcqcn.flows[0];
    assert_eq!(
        (f.summary.priority, f.summary.priority_source),
        (Some(3), Some(PrioritySource::Dscp))
    );
    assert!(
        f.summary.paused_bins > 0,
        "the pause is left out of the model comparison"
    );
    assert_eq!(a.stats.priority_map.source, "default");
}

/// `--dscp-map 26=5`: the data is on priority 5 now, so the pauses of priority 3 stop nothing RoCE.
#[test]
fn a_given_dscp_map_moves_the_data() {
    let mut opts = PipelineOptions::default();
    opts.dcqcn.priorities = PriorityMap::parse("26=5").unwrap();
    let a = analyse(None, &opts);
    let data = a.stats.flows.iter().find(|f| f.dest_qp == 0x100).unwrap();
    assert_eq!(data.priority, Some(5));
    assert!(codes(&a).contains(&"pause_without_roce"));
    assert!(a.pauses.stalls.is_empty());
}

/// The map the tracer recorded (`eth0/dscp2prio/26` = 5, off the DSCP/8 default) wins over the default, and
/// stays out of the ECN knobs (which would have refused the whole recorded set); `--dscp-map` wins over both,
/// laid over the recorded map (whose trust and other entries stay).
#[test]
fn the_recorded_map_wins_over_the_default_and_a_given_one_over_both() {
    let recorded = serde_json::json!({
        "eth0/trust": "dscp",
        "eth0/dscp2prio/26": "5",
        "eth0/dscp2prio/48": "7",
        "eth0/roce_np/min_time_between_cnps": "4",
    });
    let a = analyse(Some(recorded.clone()), &PipelineOptions::default());
    let data = a.stats.flows.iter().find(|f| f.dest_qp == 0x100).unwrap();
    assert_eq!(data.priority, Some(5));
    assert_eq!(a.stats.priority_map.source, "recorded (eth0)");
    assert!(codes(&a).contains(&"pause_without_roce"));
    let mut opts = PipelineOptions::default();
    opts.dcqcn.priorities = PriorityMap::parse("26=3").unwrap();
    let a = analyse(Some(recorded), &opts);
    let data = a.stats.flows.iter().find(|f| f.dest_qp == 0x100).unwrap();
    assert_eq!(data.priority, Some(3));
    assert_eq!(
        a.stats.priority_map.source,
        "--dscp-map over recorded (eth0)"
    );
    assert_eq!(a.stats.priority_map.changes, [(48, 7)]);
    assert!(
        a.dcqcn.knob_source.contains("recorded"),
        "{}",
        a.dcqcn.knob_source
    );
    assert!(
        a.dcqcn.ignored_knobs.is_empty(),
        "{:?}",
        a.dcqcn.ignored_knobs
    );
    assert!(!codes(&a).contains(&"pause_without_roce"));
}
