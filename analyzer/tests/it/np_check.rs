//! The notification point checked against `min_time_between_cnps` (issue 19, item 7): a receiver that sends
//! CNPs to one QP faster than its least gap is reported; one that keeps the gap is not.

use analyzer::analysis::np::Pacing;
use analyzer::analysis::{self as pipeline, Analysis, PipelineOptions};
use roce_capture::write::{PcapWriter, PcapngWriter, SectionInfo};
use roce_capture::{LinkType, blocks};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

const US: u64 = 1_000;
const T0: u64 = 1_000_000_000;

/// An RC flow 10.0.0.1 → 10.0.0.2 to QP 0x100, a packet every 100 ns for 500 µs, every one CE-marked (a tap
/// at the receiver), acknowledged every 16th packet to the sender's QP 0x10 (so the CNPs are tied to the flow
/// by its PSNs: a flow marked all the time gives timing nothing to go by), and the receiver's CNPs to QP 0x10
/// at `cnps` (ns after the start).
fn capture(cnps: impl Fn(&[u64]) -> Vec<u64>) -> Analysis {
    capture_with(cnps, &PipelineOptions::default())
}

fn capture_with(cnps: impl Fn(&[u64]) -> Vec<u64>, opts: &PipelineOptions) -> Analysis {
    capture_recorded(cnps, opts, None)
}

/// [`capture_with`], as a pcapng on `eth0` whose `KNOB` record is `knob` when given.
fn capture_recorded(
    cnps: impl Fn(&[u64]) -> Vec<u64>,
    opts: &PipelineOptions,
    knob: Option<serde_json::Value>,
) -> Analysis {
    let data: Vec<u64> = (0..5_000u64).map(|i| i * 100).collect();
    let mut frames: Vec<(u64, Vec<u8>)> = Vec::new();
    for (i, &t) in data.iter().enumerate() {
        let bth = BthRepr::new(Opcode::RC_SEND_ONLY, 0x100, i as u32);
        let f = crate::common::v4_frame(1, 2, 3, bth, ExtHeaders::default(), &[0; 256]);
        frames.push((T0 + t, f));
        if i % 16 == 15 {
            let aeth = roce_wire::ext::AethRepr {
                syndrome: 0x1f,
                msn: i as u32,
            };
            let ext = ExtHeaders {
                aeth: Some(aeth),
                ..ExtHeaders::default()
            };
            let ack = BthRepr::new(Opcode::RC_ACKNOWLEDGE, 0x10, i as u32);
            frames.push((T0 + t + 50, crate::common::v4_frame(2, 1, 2, ack, ext, &[])));
        }
    }
    for t in cnps(&data) {
        let f =
            crate::common::v4_frame(2, 1, 2, BthRepr::cnp(0x10), ExtHeaders::default(), &[0; 16]);
        frames.push((T0 + t, f));
    }
    frames.sort_by_key(|(t, _)| *t);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("np.pcapng");
    let bytes = match knob {
        None => {
            let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
            for (t, f) in &frames {
                w.write_packet(*t, f, f.len() as u32).unwrap();
            }
            w.into_inner().unwrap()
        }
        Some(knob) => {
            let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
            w.add_interface(LinkType::ETHERNET, 65535, Some("eth0"), None)
                .unwrap();
            let block = blocks::encode(blocks::KNOBS, &knob).unwrap();
            w.write_custom(blocks::PEN, &block, true).unwrap();
            for (t, f) in &frames {
                w.write_packet(0, *t, f, f.len() as u32).unwrap();
            }
            w.into_inner().unwrap()
        }
    };
    std::fs::write(&path, bytes).unwrap();
    let mut c = roce_capture::Capture::open_file(&path).unwrap();
    pipeline::run(&mut c, opts, |_| {}).unwrap()
}

/// An NP that keeps a least gap of `gap` and answers the first mark after it `delay` later.
fn conforming(gap: u64, delay: u64) -> impl Fn(&[u64]) -> Vec<u64> {
    move |marks| {
        let mut out: Vec<u64> = Vec::new();
        for &m in marks {
            if out.last().is_none_or(|&last| m >= last + gap) && out.last().is_none_or(|&l| m > l) {
                let t = m + delay;
                if out.last().is_none_or(|&l| t >= l + gap) {
                    out.push(t);
                }
            }
        }
        out
    }
}

#[test]
fn an_np_sending_cnps_1_us_apart_is_reported() {
    let a = capture(|_| (0..400u64).map(|i| US + i * US).collect());
    let s = &a.dcqcn.np_streams[0];
    assert_eq!(s.receiver_qp, Some(0x100), "paired by the ACKs");
    assert_eq!(s.check.pacing, Pacing::Faster);
    assert_eq!(s.check.min_gap_ns, 4 * US);
    assert!(s.check.below_min_gap >= 390, "{:?}", s.check);
    let f = a
        .findings
        .iter()
        .find(|f| f.code == "np_pacing")
        .expect("the fast NP is a finding");
    assert!(f.evidence[0].contains("QP 0x000010"), "{:?}", f.evidence);
}

#[test]
fn an_np_keeping_its_gap_is_not_reported() {
    let a = capture(conforming(4 * US, US));
    let s = &a.dcqcn.np_streams[0];
    assert_eq!(s.receiver_qp, Some(0x100));
    assert_eq!(s.check.pacing, Pacing::Conforms, "{:?}", s.check);
    assert_eq!(s.check.below_min_gap, 0);
    // Each CNP answers the first mark after the 4 µs gap, 1 µs later.
    let wait = s.check.ce_to_cnp_ns.expect("marks answered");
    assert!((800.0..1_300.0).contains(&wait.p50), "{wait:?}");
    assert!(
        a.findings.iter().all(|f| !f.code.starts_with("np_")),
        "{:?}",
        a.findings.iter().map(|f| f.code).collect::<Vec<_>>()
    );
}

/// An NP that waits 50 µs between CNPs (the paper's value) where the knobs say 4 µs: marks wait long past the
/// gap for their CNP.
#[test]
fn an_np_slower_than_its_knob_is_reported() {
    let a = capture(conforming(50 * US, US));
    let s = &a.dcqcn.np_streams[0];
    assert_eq!(s.check.pacing, Pacing::Slower, "{:?}", s.check);
    assert!(a.findings.iter().any(|f| f.code == "np_pacing"));
    // With the receiver's real value (`--set roce_np/min_time_between_cnps=50`) the same NP conforms.
    let mut opts = PipelineOptions::default();
    opts.dcqcn.np.min_time_between_cnps = 50;
    let a = capture_with(conforming(50 * US, US), &opts);
    assert_eq!(a.dcqcn.np_streams[0].check.pacing, Pacing::Conforms);
    assert!(a.findings.iter().all(|f| f.code != "np_pacing"));
}

/// A tap at the sender (10.0.0.1) records the sender's knobs, 4 µs between CNPs, not those of the receiver
/// (10.0.0.2), whose NP keeps 50 µs. The check used to hold the receiver's CNPs against the sender's knob and
/// call its NP slower than configured. With the receiver's knobs recorded too it is held against its own 50 µs
/// and conforms; with the sender's alone the output says whose knob stood in.
#[test]
fn the_np_is_checked_against_the_knob_of_the_host_that_sends_the_cnps() {
    let opts = PipelineOptions::default();
    let sender_only = serde_json::json!({
        "ts_ns": 0,
        "captured": ["eth0"],
        "knobs": {"eth0/roce_np/min_time_between_cnps": "4", "eth0/roce_rp/rpg_gd": "11"},
        "addrs": {"eth0": ["10.0.0.1"]},
    });
    let a = capture_recorded(conforming(50 * US, US), &opts, Some(sender_only));
    let s = &a.dcqcn.np_streams[0];
    assert_eq!(s.receiver.to_string(), "10.0.0.2");
    assert_eq!(s.check.min_gap_ns, 4 * US);
    assert!(
        s.knobs_of.contains("another host's (eth0, 10.0.0.1)")
            && s.knobs_of.contains("none recorded for 10.0.0.2"),
        "{}",
        s.knobs_of
    );
    let f = a.findings.iter().find(|f| f.code == "np_pacing").unwrap();
    assert!(
        f.evidence[0].contains("none recorded for 10.0.0.2"),
        "{:?}",
        f.evidence
    );
    let both = serde_json::json!({
        "ts_ns": 0,
        "captured": ["eth0"],
        "knobs": {
            "eth0/roce_np/min_time_between_cnps": "4",
            "eth1/roce_np/min_time_between_cnps": "50",
        },
        "addrs": {"eth0": ["10.0.0.1"], "eth1": ["fe80::2", "10.0.0.2"]},
    });
    let a = capture_recorded(conforming(50 * US, US), &opts, Some(both));
    let s = &a.dcqcn.np_streams[0];
    assert_eq!(s.check.min_gap_ns, 50 * US);
    assert_eq!(s.knobs_of, "10.0.0.2's own (eth1)");
    assert_eq!(s.check.pacing, Pacing::Conforms, "{:?}", s.check);
    assert!(a.findings.iter().all(|f| f.code != "np_pacing"));
    let port = &a.dcqcn.np_ports[0];
    assert_eq!(
        (port.min_gap_ns, port.knobs_of.as_str()),
        (50 * US, "10.0.0.2's own (eth1)")
    );
    // The model's RP knobs are still the first captured interface's (the sender's here).
    assert!(
        a.dcqcn.knob_source.contains("eth0"),
        "{}",
        a.dcqcn.knob_source
    );
}
