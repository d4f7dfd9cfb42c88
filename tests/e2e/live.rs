//! A teaching sample sent through a veth pair at the pace it was captured, captured there by `roce-tracer` and
//! reported by `roce-analyzer`, reports as the sample itself does: what the tracer writes is a capture the
//! analyzer reads as the original.
//!
//! The frames, their order and every count must be the same; times shift by the replay's jitter (tcpreplay
//! paces in microseconds, the kernel schedules it), so the comparison keeps what does not depend on the exact
//! instants: the tables of `stats`, the pairing of every CNP stream with its flow, the CNPs and CE marks each
//! flow's model was fed, and the findings that do not weigh timing. The pfc pass's pause count and the DCQCN
//! model's rates depend on spacing a replay cannot keep to the nanosecond, and are left to the tracer's own
//! tests (frames and `stats`) and the analyzer's (the model against the simulator's truth).

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;
use testkit::live::{Netns, require_netns, stop, write_replay};

use crate::common::analyzer;

/// The findings that count and compare, not time: a replay keeps them. The others weigh instants or spacing
/// (a CNP 20.1 µs after the last against a 20 µs knob, a cut's depth over a 10 µs bin, a pause's length from
/// frame to frame) that a replay shifts by its jitter.
const UNTIMED: [&str; 9] = [
    "ce_without_cnps",
    "ambiguous_pairing",
    "go_back_n_loss",
    "timeout_retransmission",
    "capture_loss",
    "unseen_psns",
    "network_loss",
    "cnps_on_lossy_priority",
    "roce_on_unpaused_priority",
];

/// `roce-analyzer report` of `files` with `args`: summary.json.
fn summary(files: &[&Path], args: &[&str]) -> Value {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.extend(files.iter().map(|f| f.as_os_str()));
    testkit::report(analyzer(), &all).1
}

/// What of a report a replay must give back: the stats tables' counts, each paired flow with its sender's QP
/// and evidence kind and the CNPs and CE marks its model saw, the unpaired streams, and the findings.
fn comparable(s: &Value) -> Value {
    let keep = |row: &Value, keys: &[&str]| -> Value {
        keys.iter()
            .map(|k| (k.to_string(), row[*k].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let rows = |v: &Value, keys: &[&str]| -> Vec<Value> {
        v.as_array()
            .map(|a| a.iter().map(|r| keep(r, keys)).collect())
            .unwrap_or_default()
    };
    serde_json::json!({
        "frames": s["stats"]["capture"]["frames"],
        "kinds": s["stats"]["capture"]["frames_by_kind"],
        "bytes": s["stats"]["capture"]["bytes"],
        "flows": rows(&s["stats"]["flows"], &[
            "src", "dst", "dest_qp", "packets", "bytes", "ect_packets", "ce_packets", "psn_gaps",
            "retransmissions", "out_of_order", "naks",
        ]),
        "cnps": rows(&s["stats"]["cnps"], &["src", "dst", "dest_qp", "count"]),
        "pfc": rows(&s["stats"]["pfc"], &["src_mac", "kind", "priority", "frames", "xoff", "xon"]),
        "dcqcn": rows(&s["dcqcn"]["flows"], &[
            "sender", "receiver", "receiver_qp", "sender_qp", "pairing", "cnps", "ce_packets",
        ]),
        "unpaired": rows(&s["dcqcn"]["unpaired_cnps"], &["src", "dst", "dest_qp", "cnps", "reason"]),
        "findings": s["findings"]
            .as_array()
            .map(|f| {
                f.iter()
                    .map(|x| x["code"].clone())
                    .filter(|c| c.as_str().is_some_and(|c| UNTIMED.contains(&c)))
                    .collect::<Vec<_>>()
            }),
    })
}

#[test]
fn a_sample_captured_by_the_tracer_reports_as_the_sample() {
    if !require_netns("a_sample_captured_by_the_tracer_reports_as_the_sample") {
        return;
    }
    let tracer = end_to_end::binary("tracer", "roce-tracer");
    // Single-tap samples (one veth is one tap), each showing a different part of the report: DCQCN cuts
    // and pairing by ACKs, READ responses, loss and go-back-N, CNPs a sender ignores.
    for name in ["incast_dcqcn", "read_incast", "lossy_gbn", "cnp_ignored"] {
        let sample = testkit::sample(name);
        let dir = tempfile::tempdir().unwrap();
        let replay = dir.path().join("replay.pcap");
        let sent = write_replay(&sample, &replay, true, |_, _| true);
        assert!(sent > 1000, "{name}: {sent} frames to replay");
        let ns = Netns::new(&format!("e2{}", &name[..3]), &tracer);
        // The sample's frames were 4 KiB and more on the wire: they are sent at that length again.
        ns.set_mtu(9000);
        let out = dir.path().join("cap.pcapng");
        let child = ns.capture_on_vb(dir.path(), &out, &[]);
        ns.replay_paced(&replay);
        stop(child, 30);
        // The veth says 10 Gb/s; the sample's link ran at 25, and a user gives the analyzer the real line.
        let want = comparable(&summary(&[&sample], &[]));
        let got = comparable(&summary(&[&out], &["--link-speed", "25G"]));
        assert_eq!(
            got,
            want,
            "{name}: the report of its capture through the tracer differs from its own:\n got {}\nwant {}",
            serde_json::to_string_pretty(&got).unwrap(),
            serde_json::to_string_pretty(&want).unwrap()
        );
    }
}
