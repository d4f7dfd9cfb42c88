//! The analysis against the teaching samples' ground truth (samples/captures/NAME.truth.json): what the
//! simulator's senders really did, which the analysis must reconstruct from the capture alone.
//!
//! The analysis is given only what a user would know: the link speed, the knob values the scenario set (its
//! `[dcqcn]` section, and `deactivate_at_line`, which the simulator turns on), and the one-way delay from the tap
//! to the senders computed from the topology (propagation on two links plus the CNP's serialization), never a
//! time taken from the truth.

use std::path::Path;

use crate::common::workspace;
use analyzer::analysis::dcqcn::{DcqcnPass, DcqcnReport, FlowDcqcn, Options};
use roce_capture::{Capture, CaptureReader};
use roce_core::dcqcn::Knobs;
use roce_core::decode::Decoder;
use roce_core::frames::Frames;
use roce_core::passes::Stats;
use roce_core::passes::pairing::Method;
use serde_json::Value;

fn sample(name: &str) -> (std::path::PathBuf, Value) {
    let dir = workspace().join("samples/captures");
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{name}.truth.json"))).unwrap(),
    )
    .unwrap();
    (dir.join(format!("{name}.pcapng")), truth)
}

/// The scenario's `[dcqcn]` section as knob lines, on top of the simulator's `deactivate_at_line = 1`.
fn scenario_knobs(name: &str) -> Knobs {
    let text = std::fs::read_to_string(workspace().join(format!("samples/scenarios/{name}.toml")))
        .unwrap();
    let mut lines = String::from("deactivate_at_line = 1\n");
    let mut inside = false;
    for l in text.lines() {
        let t = l.trim();
        if t.starts_with('[') {
            inside = t == "[dcqcn]";
        } else if inside && !t.is_empty() && !t.starts_with('#') {
            lines.push_str(t);
            lines.push('\n');
        }
    }
    let mut k = Knobs::default();
    k.apply_kv_text(&lines).unwrap();
    k
}

/// Tap on the receiver's link; a CNP then crosses the receiver→switch and switch→sender links: two
/// propagation delays, and one more serialization of the 78-byte tagged CNP (plus 24 bytes of preamble, FCS
/// and gap) at the switch.
fn cnp_delay_ns(truth: &Value) -> i64 {
    let link = &truth["links"][0];
    let delay = link["delay_ns"].as_i64().unwrap();
    let gbps = link["gbps"].as_f64().unwrap();
    2 * delay + ((78.0 + 24.0) * 8.0 / gbps).round() as i64
}

fn analyse(path: &Path, opts: &Options) -> DcqcnReport {
    let mut r = CaptureReader::open(path).unwrap();
    let dec = Decoder::default();
    let mut pass = DcqcnPass::new(opts.bin_ns);
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        pass.frame(&dec.decode(n, &rec));
    }
    pass.finish(opts).unwrap()
}

/// A truth RP timeline as (t_ns, kind, rc_mbps).
fn truth_rp(flow: &Value) -> Vec<(u64, String, f64)> {
    flow["rp"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e[0].as_u64().unwrap(),
                e[1].as_str().unwrap().to_string(),
                e[2].as_f64().unwrap(),
            )
        })
        .collect()
}

/// Rc of a step function at t (the last point at or before t), `line` before the first.
fn rc_at(points: &[(u64, f64)], t: u64, line: f64) -> f64 {
    match points.partition_point(|p| p.0 <= t) {
        0 => line,
        i => points[i - 1].1,
    }
}

fn check_dcqcn_sample(name: &str) {
    let (path, truth) = sample(name);
    let line = truth["flows"][0]["line_mbps"].as_f64().unwrap();
    let opts = Options {
        knobs: scenario_knobs(name),
        line_mbps: line,
        cnp_delay_ns: cnp_delay_ns(&truth),
        fit: false,
        ..Options::default()
    };
    let report = analyse(&path, &opts);
    let end = truth["duration_ns"].as_u64().unwrap();
    for tf in truth["flows"].as_array().unwrap() {
        let received = tf["cnps_received"].as_u64().unwrap();
        if received == 0 {
            continue;
        }
        let (sender_qp, receiver_qp) = match tf["data_sender"].as_str().unwrap() {
            "requester" => (
                tf["requester_qp"].as_u64().unwrap(),
                tf["responder_qp"].as_u64().unwrap(),
            ),
            _ => (
                tf["responder_qp"].as_u64().unwrap(),
                tf["requester_qp"].as_u64().unwrap(),
            ),
        };
        let ours: &FlowDcqcn = report
            .flows
            .iter()
            .find(|f| f.sender_qp == Some(sender_qp as u32))
            .unwrap_or_else(|| {
                panic!(
                    "{name} {}: no flow paired with QP {sender_qp:#x}",
                    tf["name"]
                )
            });
        assert_eq!(
            ours.receiver_qp as u64, receiver_qp,
            "{name} {}: pairing",
            tf["name"]
        );
        assert_eq!(ours.pairing, Some(Method::ReverseTraffic));
        assert_eq!(ours.cnps, received, "{name} {}: CNPs", tf["name"]);

        let rp = truth_rp(tf);
        // Cuts: matched when within 100 ns of each other.
        let true_cuts: Vec<u64> = rp.iter().filter(|e| e.1 == "cut").map(|e| e.0).collect();
        let model_cuts: Vec<u64> = ours.cuts.iter().map(|c| c.t_ns).collect();
        let near = |a: &[u64], t: u64| a.iter().any(|&x| x.abs_diff(t) <= 100);
        let precision = model_cuts.iter().filter(|&&t| near(&true_cuts, t)).count() as f64
            / model_cuts.len().max(1) as f64;
        let recall = true_cuts.iter().filter(|&&t| near(&model_cuts, t)).count() as f64
            / true_cuts.len().max(1) as f64;
        assert!(
            precision >= 0.95 && recall >= 0.95,
            "{name} {}: precision {precision:.3} recall {recall:.3} ({} model, {} true cuts)",
            tf["name"],
            model_cuts.len(),
            true_cuts.len()
        );
        // Rc within 5 % for at least 95 % of the active time (first CNP to the end), sampled every 100 ns.
        let truth_rc: Vec<(u64, f64)> = rp.iter().map(|e| (e.0, e.2)).collect();
        let model_rc: Vec<(u64, f64)> = ours
            .model
            .iter()
            .map(|m| (m.t_ns, m.rc_gbps * 1000.0))
            .collect();
        let start = rp[0].0;
        let (mut good, mut all) = (0u64, 0u64);
        let mut t = start;
        while t < end {
            let a = rc_at(&truth_rc, t, line);
            let b = rc_at(&model_rc, t, line);
            all += 1;
            good += u64::from((a - b).abs() <= 0.05 * a);
            t += 100;
        }
        let share = good as f64 / all as f64;
        assert!(
            share >= 0.95,
            "{name} {}: Rc within 5 % for {:.1} % of the active time",
            tf["name"],
            share * 100.0
        );
    }
}

#[test]
fn incast_dcqcn_matches_truth() {
    check_dcqcn_sample("incast_dcqcn");
}

#[test]
fn incast_clamp_matches_truth() {
    check_dcqcn_sample("incast_clamp");
}

#[test]
fn read_incast_matches_truth() {
    // The READ responder is the reaction point; the requester sends the CNPs.
    check_dcqcn_sample("read_incast");
}

/// Paused time per PFC source, against the truth's pause intervals of the tapped links. The truth rounds each
/// interval's start and end to ns separately, so each interval may differ by 1 ns. The truth's intervals are
/// at the paused node, one propagation delay and one PFC frame's serialization (60 bytes + 24) after the tap;
/// wire.md counts paused time only up to the capture's last frame, so the truth is clipped there too. That
/// clip point is known only up to how long the PFC frame waited behind a data frame already on the wire (at
/// most one 4 KiB frame, 1.4 µs at 25 Gb/s), so a clipped total gets that much slack; every other total must
/// agree to the ns (one ns per interval for the truth's rounding).
fn check_pauses(name: &str) {
    let (path, truth) = sample(name);
    let gbps = truth["links"][0]["gbps"].as_u64().unwrap();
    let mut r = Capture::open_file(&path).unwrap();
    let mut stats = Stats::new(gbps * 1_000_000_000);
    let mut frames = Frames::new(&mut r, Decoder::default());
    while let Some(f) = frames.next_frame() {
        stats.frame(&f);
    }
    let report = stats.finish(&r);
    let delay = truth["links"][0]["delay_ns"].as_u64().unwrap();
    let tap_to_node = delay + ((60.0 + 24.0) * 8.0 / gbps as f64).round() as u64;
    let clip = report.capture.last_ns.unwrap() + tap_to_node;
    // Total paused time per (paused node, port, priority) in the truth.
    let mut totals: Vec<(String, u64, u64)> = Vec::new();
    let mut clipped: Vec<String> = Vec::new();
    for p in truth["pauses"].as_array().unwrap() {
        let k = format!("{}/{}/{}", p["node"], p["port"], p["prio"]);
        let start = p["start_ns"].as_u64().unwrap();
        let end = p["end_ns"].as_u64().unwrap();
        if end > clip {
            clipped.push(k.clone());
        }
        let d = end.min(clip).saturating_sub(start);
        match totals.iter_mut().find(|x| x.0 == k) {
            Some(x) => {
                x.1 += d;
                x.2 += 1;
            }
            None => totals.push((k, d, 1)),
        }
    }
    assert!(!report.pfc.is_empty(), "{name}: no PFC seen");
    for row in &report.pfc {
        let hit = totals.iter().find(|(k, d, count)| {
            let slack = if clipped.contains(k) { 1_400 } else { 0 };
            row.paused_ns.abs_diff(*d) <= *count + slack
        });
        assert!(
            hit.is_some(),
            "{name}: {} prio {:?} paused {} ns matches no truth total {totals:?}",
            row.src_mac,
            row.priority,
            row.paused_ns
        );
    }
}

#[test]
fn pfc_storm_paused_time_matches_truth() {
    check_pauses("pfc_storm_hol");
}

#[test]
fn pfc_only_paused_time_matches_truth() {
    check_pauses("pfc_only");
}

#[test]
fn pfc_storm_paused_fraction_over_time() {
    // The storm pauses priority 3 from 400 µs to 1400 µs (the scenario), and the switches propagate it until
    // about 1429 µs; nothing else pauses. Bins wholly inside are paused throughout, bins well outside not at all.
    let path = workspace().join("samples/captures/pfc_storm_hol.pcapng");
    let mut reader = Capture::open_file(&path).unwrap();
    let opts = analyzer::analysis::PipelineOptions {
        link_bps: 25_000_000_000,
        ..Default::default()
    };
    let a = analyzer::analysis::run(&mut reader, &opts, |_| {}).unwrap();
    let bins: Vec<_> = a
        .pauses
        .paused_fraction
        .iter()
        .filter(|b| b.priority == Some(3))
        .collect();
    assert!(!bins.is_empty());
    assert!(
        a.pauses
            .paused_fraction
            .iter()
            .all(|b| b.priority == Some(3))
    );
    let first = a.stats.capture.first_ns.unwrap();
    let w = a.dcqcn.bin_ns;
    for b in &bins {
        let t = b.t_ns - first;
        if t >= 410_000 && t + w <= 1_390_000 {
            assert!(
                (b.fraction - 1.0).abs() < 1e-9,
                "bin at {t} ns: {}",
                b.fraction
            );
        }
        if t + w <= 390_000 || t >= 1_440_000 {
            assert_eq!(b.fraction, 0.0, "bin at {t} ns");
        }
    }
}
