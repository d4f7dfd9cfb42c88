//! `hops` against the simulator's truth: the two hop samples (marking_curve: one switch, the egress tap on a
//! clock 1.234567 ms ahead; queue_moves: four taps over two switches, one file drifting 25 ppm), a capture
//! with packets deliberately removed between the taps, and the JSON's keys.
//!
//! A generated capture whose receiver-side clock drifts checks that the drift is followed. The issue's queue
//! simulated standing (never empty after its first clock window) and emptying, with and without drift, both
//! ways between the two files and one way (the ACKs cut out of the egress capture), checks that a standing
//! queue is not read as drift, that a drift is followed, and that the hop says when it cannot tell.
//!
//! Tolerances, and why. Queue depths within 5 % of the truth, or within two full frames (2 × 4,220 B) for
//! values near zero or where the depth distribution is sparse: the truth counts the bytes queued ahead of a
//! packet without the frame being sent at that instant, while delay × drain rate counts what was left of that
//! frame too (up to one frame per packet); in queue_moves' first queue the median falls where under one packet
//! per KB of depth lies, so that per-packet difference moves the median by up to about 7 KB. The marking
//! curve: the truth inside each 95 % interval, and each estimate near it, with depths allowed the same one
//! frame more. On the issue's queue (Kmin 60 KB, Kmax 240 KB, Pmax 0.25, 74 k packets) Kmin and Kmax within
//! 5 % (plus that frame), Pmax within 0.02; marking_curve's 2,112 packets (1,490 between Kmin and Kmax) pin
//! Kmin only to about ±10 %, so Kmin within 15 % there. A single flow of 4 KB frames fills the queue in steps
//! of about 3.2 KB, and every sweep repeats the same depths: no fit can place Kmin more finely than that.
//! queue_moves' queues put about a hundred packets between Kmin and Kmax at Pmax 0.1, too few to pin a curve
//! (tested: marks happen, and the fit error is reported).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::{analyzer, run, workspace};
use analyzer::analysis::hops::{self, HopsOptions, HopsReport};
use roce_capture::{Capture, CaptureReader, inputs};
use roce_core::decode::Decoder;
use serde_json::Value;

/// One MTU frame on the wire: 4,096 B of payload, the headers, and the 24 B of preamble, FCS and gap.
const FRAME: f64 = 4_220.0;

fn files(name: &str) -> (Vec<PathBuf>, Value) {
    let dir = workspace().join("samples/captures");
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{name}.truth.json"))).unwrap(),
    )
    .unwrap();
    let list = truth["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| dir.join(f["name"].as_str().unwrap()))
        .collect();
    (list, truth)
}

/// The same captures written again without their interfaces' `if_speed`, as a capture from a tool that does not
/// record it: the drain rate must then be measured.
fn without_if_speed(paths: &[PathBuf], dir: &Path) -> Vec<PathBuf> {
    use roce_capture::write::{PcapngWriter, SectionInfo};
    paths
        .iter()
        .map(|p| {
            let out = dir.join(p.file_name().unwrap());
            let mut r = CaptureReader::open(p).unwrap();
            let mut w = PcapngWriter::new(Vec::new(), &SectionInfo::default()).unwrap();
            let mut declared = 0;
            while let Some(rec) = r.next_record().unwrap() {
                let (iface, ts, data, len) = (rec.iface, rec.ts_ns, rec.data.to_vec(), rec.len);
                for i in &r.interfaces()[declared..] {
                    w.add_interface(i.link, i.snaplen, i.name.as_deref(), None)
                        .unwrap();
                }
                declared = r.interfaces().len();
                w.write_packet(iface, ts, &data, len).unwrap();
            }
            std::fs::write(&out, w.into_inner().unwrap()).unwrap();
            out
        })
        .collect()
}

fn analyse(paths: &[PathBuf], opts: HopsOptions) -> HopsReport {
    let mut capture = Capture::open(inputs::resolve(paths).unwrap()).unwrap();
    hops::run(&mut capture, Decoder::default(), opts)
}

/// The simulator's tap name from ours (`FILE:IFACE`, the interface named after the tap).
fn short(tap: &str) -> &str {
    tap.rsplit(':').next().unwrap()
}

fn close(what: &str, got: f64, want: f64, rel: f64, floor: f64) {
    let tol = (want.abs() * rel).max(floor);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got:.0}, truth {want:.0} (tolerance {tol:.0})"
    );
}

/// Every packet the truth says crossed a pair of taps is matched there, in the right order.
fn every_packet_matched(r: &HopsReport, truth: &Value) {
    let mut want: BTreeMap<(String, String), u64> = BTreeMap::new();
    for h in truth["hops"].as_array().unwrap() {
        *want
            .entry((
                h["from"].as_str().unwrap().to_string(),
                h["to"].as_str().unwrap().to_string(),
            ))
            .or_default() += h["packets"].as_u64().unwrap();
    }
    let got: BTreeMap<(String, String), u64> = r
        .hops
        .iter()
        .map(|h| {
            (
                (short(&h.from).to_string(), short(&h.to).to_string()),
                h.matched,
            )
        })
        .collect();
    assert_eq!(got, want);
    for h in &r.hops {
        assert_eq!(h.unmatched, 0, "{} → {}", h.from, h.to);
        assert_eq!(h.retransmitted, 0);
    }
}

/// Our queue for a truth `tap_queues` entry: same downstream tap and priority, same upstream taps.
fn queue_for<'a>(r: &'a HopsReport, tq: &Value) -> &'a hops::QueueReport {
    let from: Vec<&str> = tq["from"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    r.queues
        .iter()
        .find(|q| {
            short(&q.tap) == tq["tap"].as_str().unwrap()
                && q.priority as u64 == tq["prio"].as_u64().unwrap()
                && q.from.iter().map(|f| short(f)).collect::<Vec<_>>() == from
        })
        .unwrap_or_else(|| panic!("no queue for {tq}"))
}

fn depths_agree(q: &hops::QueueReport, tq: &Value) {
    let b = q.queue_bytes.expect("a drain rate");
    let t = &tq["queue_bytes"];
    let label = format!("{} prio {}", q.tap, q.priority);
    close(
        &format!("{label} p50"),
        b.p50,
        t["p50"].as_f64().unwrap(),
        0.05,
        2.0 * FRAME,
    );
    close(
        &format!("{label} p99"),
        b.p99,
        t["p99"].as_f64().unwrap(),
        0.05,
        2.0 * FRAME,
    );
    close(
        &format!("{label} max"),
        b.max,
        t["max"].as_f64().unwrap(),
        0.05,
        2.0 * FRAME,
    );
    assert_eq!(q.packets, tq["packets"].as_u64().unwrap(), "{label}");
    assert_eq!(
        q.marking.ect_in,
        tq["marking"]["ect_in"].as_u64().unwrap(),
        "{label}"
    );
    assert_eq!(
        q.marking.marked,
        tq["marking"]["marked"].as_u64().unwrap(),
        "{label}"
    );
    let drain = tq["drain_gbps"].as_f64().unwrap();
    assert!(q.drain_gbps.is_some(), "{label}");
    close(
        &format!("{label} drain"),
        q.drain_gbps.unwrap(),
        drain,
        0.01,
        0.0,
    );
}

#[test]
fn marking_curve_against_truth() {
    let (paths, truth) = files("marking_curve");
    let r = analyse(&paths, HopsOptions::default());
    every_packet_matched(&r, &truth);
    for th in truth["hops"].as_array().unwrap() {
        let h = r
            .hops
            .iter()
            .find(|h| short(&h.from) == th["from"] && short(&h.to) == th["to"])
            .unwrap();
        assert_eq!(
            h.clock_offset_ns,
            th["clock_offset_ns"].as_i64().unwrap(),
            "{} → {}",
            h.from,
            h.to
        );
        assert!(!h.shared_clock && !h.order_assumed);
    }
    for tq in truth["tap_queues"].as_array().unwrap() {
        let q = queue_for(&r, tq);
        if tq["queue_bytes"]["max"].as_u64().unwrap() > 0 {
            depths_agree(q, tq);
        }
    }
    // 2,112 packets: Kmin is known to about ±10 %, and the truth must lie in what the fit says it knows.
    let (q, (kmin, kmax, pmax)) = egress_curve_agrees(&r, &truth, 0.15, 0.05, 0.05);
    let m = &q.marking;
    assert!(m.fit_rmse.unwrap() < 0.1, "{:?}", m.fit_rmse);
    assert!(m.between > 1000, "{}", m.between);
    // The egress tap records its line rate: that is the drain rate. Without it, the rate is measured from
    // back-to-back departures, and the depths agree with the truth all the same.
    assert!(!q.drain_measured);
    let tmp = tempfile::tempdir().unwrap();
    let measured = analyse(
        &without_if_speed(&paths, tmp.path()),
        HopsOptions::default(),
    );
    for tq in truth["tap_queues"].as_array().unwrap() {
        let q = queue_for(&measured, tq);
        if tq["queue_bytes"]["max"].as_u64().unwrap() > 0 {
            assert!(q.drain_measured, "{}", q.tap);
            depths_agree(q, tq);
        }
    }
    // The switch's own values agree with the fit: no finding. Values far from it: one.
    let agree = analyse(
        &paths,
        HopsOptions {
            switch_ecn: Some((kmin, kmax, pmax)),
            ..HopsOptions::default()
        },
    );
    assert!(agree.findings.is_empty(), "{:?}", agree.findings);
    let disagree = analyse(
        &paths,
        HopsOptions {
            switch_ecn: Some((100_000.0, 400_000.0, 0.2)),
            ..HopsOptions::default()
        },
    );
    assert_eq!(disagree.findings.len(), 1, "{:?}", disagree.findings);
    assert_eq!(disagree.findings[0].code, "ecn_curve_mismatch");
    // The PFC threshold (176 KB) is above Kmin: marking is not late.
    let pfc = q.pfc_depth_bytes.expect("the ingress tap saw PFC");
    assert!(pfc > m.kmin_bytes.unwrap(), "{pfc}");
}

/// The curve fitted to the egress tap's queue against the simulator's: each estimate within `kmin_rel`,
/// `kmax_rel` (relative) and `pmax_abs` of the truth, and the truth inside each 95 % interval. The estimates
/// are allowed one frame more: the simulator's switch compares the bytes queued ahead without the frame it is
/// sending, while delay × drain rate counts what was left of that frame (see the module's note); the intervals
/// say so themselves. Gives the queue and the true curve (Kmin, Kmax, Pmax).
fn egress_curve_agrees<'a>(
    r: &'a HopsReport,
    truth: &Value,
    kmin_rel: f64,
    kmax_rel: f64,
    pmax_abs: f64,
) -> (&'a hops::QueueReport, (f64, f64, f64)) {
    let q = r.queues.iter().find(|q| short(&q.tap) == "egress").unwrap();
    let m = &q.marking;
    let truth = &truth["tap_queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["tap"] == "egress")
        .unwrap()["marking"];
    let want_of = |k: &str| truth[k].as_f64().unwrap();
    for (what, got, interval, want, rel) in [
        (
            "Kmin",
            m.kmin_bytes,
            m.kmin_interval,
            want_of("kmin_bytes"),
            kmin_rel,
        ),
        (
            "Kmax",
            m.kmax_bytes,
            m.kmax_interval,
            want_of("kmax_bytes"),
            kmax_rel,
        ),
    ] {
        let got = got.unwrap_or_else(|| panic!("{what} bounded: {m:?}"));
        let i = interval.unwrap();
        assert!(
            got >= want * (1.0 - rel) && got <= want * (1.0 + rel) + FRAME,
            "{what}: got {got:.0}, truth {want:.0}"
        );
        let high = i.high.unwrap_or_else(|| panic!("{what} bounded: {i:?}"));
        // The interval itself allows for the frame on the wire (RedFit::allow_for_frame_on_wire).
        assert!(
            i.low <= want && want <= high,
            "{what}: truth {want:.0} outside {i:?}"
        );
    }
    let (got, i, want) = (m.pmax.unwrap(), m.pmax_interval.unwrap(), want_of("pmax"));
    assert!((got - want).abs() <= pmax_abs, "Pmax {got} vs {want}");
    assert!(
        i.low <= want && i.high.is_some_and(|h| want <= h),
        "Pmax: truth {want} outside {i:?}"
    );
    (q, (want_of("kmin_bytes"), want_of("kmax_bytes"), want))
}

/// The marking_curve scenario with each (from, to) replaced in its text, simulated and analysed: the report
/// and the truth.
fn marking_curve_with(name: &str, changes: &[(&str, &str)]) -> (HopsReport, Value) {
    let sim = simulate(name, changes);
    (analyse(&sim.captures, HopsOptions::default()), sim.truth)
}

/// A simulated run: its capture files (main, then rx) in a directory that lives as long as it, and its truth.
struct Sim {
    dir: tempfile::TempDir,
    captures: Vec<PathBuf>,
    truth: Value,
}

/// The marking_curve scenario with each (from, to) replaced in its text, simulated.
fn simulate(name: &str, changes: &[(&str, &str)]) -> Sim {
    let mut text =
        std::fs::read_to_string(workspace().join("samples/scenarios/marking_curve.toml")).unwrap();
    for (from, to) in changes {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let sc = samples::sim::scenario::Scenario::from_toml(name, &text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let written = samples::sim::write_run(&sc, dir.path()).unwrap();
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&written.truth_file).unwrap()).unwrap();
    Sim {
        dir,
        captures: written.captures,
        truth,
    }
}

/// The queue of the issue that asked for the likelihood fit: marking_curve with the curve Kmin 60 KB, Kmax
/// 240 KB, Pmax 0.25, PFC letting the queue reach 300 KB before it pauses the sender, for 100 ms. What PFC
/// resumes at (`xon_bytes`, 24 KB in marking_curve) is left to each test.
const ISSUE_QUEUE: [(&str, &str); 6] = [
    ("kmin_bytes = 40_000", "kmin_bytes = 60_000"),
    ("kmax_bytes = 160_000", "kmax_bytes = 240_000"),
    ("pmax = 0.5", "pmax = 0.25"),
    ("xoff_bytes = 176_000", "xoff_bytes = 300_000"),
    ("duration_us = 3000", "duration_us = 100000"),
    ("stop_us = 2800", "stop_us = 99000"),
];

/// The issue's queue with PFC resuming the sender only once the queue is empty (`xon_bytes` 0), so that every
/// clock window holds an empty queue, and the egress file's clock drifting `drift_ppm`.
fn emptying_queue(drift_ppm: f64) -> Sim {
    let drift = format!("clock_offset_ns = 1_234_567\nclock_drift_ppm = {drift_ppm}");
    let mut changes = ISSUE_QUEUE.to_vec();
    changes.push(("xon_bytes = 24_000", "xon_bytes = 0"));
    changes.push(("clock_offset_ns = 1_234_567", &drift));
    simulate("emptying_queue", &changes)
}

/// The issue's curve, swept past Kmax over and over by a queue that empties, 74 k ECN-capable packets.
#[test]
fn the_issue_curve_against_truth() {
    let sim = emptying_queue(0.0);
    let r = analyse(&sim.captures, HopsOptions::default());
    let (q, _) = egress_curve_agrees(&r, &sim.truth, 0.05, 0.05, 0.02);
    assert!(q.marking.ect_in > 70_000, "{}", q.marking.ect_in);
}

/// The issue's queue with PFC resuming the sender at 24 KB, as in marking_curve: after its first clock window
/// the queue stands (about 20 KB at the least) until the flow stops, and no packet of those windows finds it
/// empty. The egress file's clock drifts `drift_ppm`.
fn standing_queue(drift_ppm: f64) -> Sim {
    let drift = format!("clock_offset_ns = 1_234_567\nclock_drift_ppm = {drift_ppm}");
    let mut changes = ISSUE_QUEUE.to_vec();
    changes.push(("clock_offset_ns = 1_234_567", &drift));
    simulate("standing_queue", &changes)
}

/// The least depth of sw1's queue to r between `from_ns` and `to_ns` (true time), from the truth's samples,
/// checking that none is missing: the truth samples a queue only while it holds something.
fn least_queued(truth: &Value, from_ns: u64, to_ns: u64) -> u64 {
    let period = truth["queue_sample_ns"].as_u64().unwrap_or(2_000);
    let q = truth["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["switch"] == "sw1" && q["port"] == "r")
        .unwrap();
    let samples: Vec<(u64, u64)> = q["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s[0].as_u64().unwrap(), s[1].as_u64().unwrap()))
        .filter(|&(t, _)| (from_ns..to_ns).contains(&t))
        .collect();
    assert!(
        samples.len() as u64 >= (to_ns - from_ns) / period - 1,
        "{}",
        samples.len()
    );
    samples.iter().map(|&(_, b)| b).min().unwrap()
}

/// The receiver's address, as the capture writes it.
fn receiver_ip(truth: &Value) -> String {
    let r = truth["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "r")
        .unwrap();
    r["ip"].as_str().unwrap().to_string()
}

/// The run's two files with the egress capture cut down to the frames towards the receiver: the ACKs cross
/// the ingress tap only, so no hop runs back between the two files.
fn one_way(sim: &Sim) -> Vec<PathBuf> {
    let rx = sim.dir.path().join("one_way.rx.pcapng");
    let r = receiver_ip(&sim.truth);
    let removed = rewrite(&sim.captures[1], &rx, None, |f| {
        f.ip.is_none_or(|ip| ip.dst.to_string() == r)
    });
    assert!(removed > 1_000, "{removed}");
    vec![sim.captures[0].clone(), rx]
}

/// A queue that stands is not drift. The ACKs come back through a queue that stays empty, between the same two
/// files: together the two directions pin the drift (to 0.1 ppm: their least delays are exact to the ns, and
/// 0.1 ppm is 10 ns over the capture), and the issue's curve comes out within 5 % and 0.02, as on a queue that
/// empties. (Before, this queue's 20 KB read as +74 ppm of drift without one, and Kmin came out at 49 KB.)
/// With clock windows of 1 ms the capture spans ten segments: the window in which the queue was empty is
/// forgotten after the third, and its floor must be carried forward by the known drift.
#[test]
fn a_standing_queue_is_not_drift() {
    for drift in [0.0, 20.0] {
        let sim = standing_queue(drift);
        let least = least_queued(&sim.truth, 10_000_000, 90_000_000);
        assert!(least >= 20_000, "the queue stands: {least}");
        for window in [10_000_000, 1_000_000] {
            let opts = HopsOptions {
                clock_window_ns: window,
                ..HopsOptions::default()
            };
            let r = analyse(&sim.captures, opts);
            every_packet_matched(&r, &sim.truth);
            assert_eq!(r.hops.len(), 2);
            for h in &r.hops {
                let want = if short(&h.to) == "egress" {
                    drift
                } else {
                    -drift
                };
                let label = format!(
                    "{drift} ppm, windows of {window} ns, {} → {}",
                    short(&h.from),
                    short(&h.to)
                );
                assert!(h.drift_known, "{label}: {h:?}");
                assert!(
                    (h.drift_ppm - want).abs() <= 0.1,
                    "{label}: {}",
                    h.drift_ppm
                );
                assert_eq!(h.clock_error_ns, 0.0, "{label}");
            }
            for tq in sim.truth["tap_queues"].as_array().unwrap() {
                if tq["queue_bytes"]["max"].as_u64().unwrap() > 0 {
                    depths_agree(queue_for(&r, tq), tq);
                } else {
                    // The ACKs' queue: empty, and measured so.
                    assert!(queue_for(&r, tq).queue_delay_ns.max <= 2.0, "{tq}");
                }
            }
            egress_curve_agrees(&r, &sim.truth, 0.05, 0.05, 0.02);
            assert!(r.findings.is_empty(), "{:?}", r.findings);
        }
    }
}

/// The same standing queue seen one way only: nothing in the least delays tells the queue's rise from a
/// drift, and the hop says so rather than give a number. It measures against no drift, gives the range of
/// drifts that fit (the truth's lies in it) and the error that may cost (at least what it does cost: the
/// drift times the 99 ms the packets span), and raises a finding that the text, the JSON and the report carry.
#[test]
fn a_standing_queue_seen_one_way_is_said_to_be_unknown() {
    for drift in [0.0, 20.0] {
        let sim = standing_queue(drift);
        let paths = one_way(&sim);
        let r = analyse(&paths, HopsOptions::default());
        let [h] = &r.hops[..] else {
            panic!("one hop: {:?}", r.hops)
        };
        assert_eq!((short(&h.from), short(&h.to)), ("ingress", "egress"));
        assert!(!h.drift_known && h.drift_ppm == 0.0, "{h:?}");
        let [low, high] = h.drift_range_ppm.unwrap();
        assert!(
            low <= drift && drift <= high && high - low > 50.0,
            "{low}..{high}"
        );
        assert!(
            h.clock_error_ns >= drift * 1e-6 * 99e6,
            "{}",
            h.clock_error_ns
        );
        let codes: Vec<&str> = r.findings.iter().map(|f| f.code).collect();
        assert_eq!(codes, ["clock_drift_unknown"]);
        assert!(
            r.findings[0].detail.contains("ppm fits"),
            "{:?}",
            r.findings
        );
        if drift == 0.0 {
            continue;
        }
        let out = run(analyzer().arg("hops").args(&paths));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("cannot be told from a standing queue"),
            "{text}"
        );
        // The hops' table gives that range in place of the drift assumed.
        assert!(
            text.contains(&format!("? ({low:+.1}…{high:+.1})")),
            "{text}"
        );
        let out = run(analyzer().arg("hops").arg("--json").args(&paths));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["hops"][0]["drift_known"], false);
        assert_eq!(v["findings"][0]["code"], "clock_drift_unknown");
        let mut capture = Capture::open(inputs::resolve(&paths).unwrap()).unwrap();
        let a = analyzer::analysis::run(&mut capture, &Default::default(), |_| {}).unwrap();
        assert!(a.findings.iter().any(|f| f.code == "clock_drift_unknown"));
    }
}

/// One way only but a queue that empties in every clock window: the drift (20 ppm) is known and followed to
/// 0.1 ppm, and the curve is as good as without one.
#[test]
fn a_drift_is_followed_one_way_under_a_queue_that_empties() {
    let sim = emptying_queue(20.0);
    let r = analyse(&one_way(&sim), HopsOptions::default());
    let [h] = &r.hops[..] else {
        panic!("one hop: {:?}", r.hops)
    };
    assert!(h.drift_known, "{h:?}");
    assert!((h.drift_ppm - 20.0).abs() <= 0.1, "{}", h.drift_ppm);
    egress_curve_agrees(&r, &sim.truth, 0.05, 0.05, 0.02);
    assert!(r.findings.is_empty(), "{:?}", r.findings);
}

#[test]
fn queue_moves_against_truth() {
    let (paths, truth) = files("queue_moves");
    let r = analyse(&paths, HopsOptions::default());
    every_packet_matched(&r, &truth);
    for tq in truth["tap_queues"].as_array().unwrap() {
        let q = queue_for(&r, tq);
        if tq["queue_bytes"]["max"].as_u64().unwrap() > 0 {
            depths_agree(q, tq);
            assert!(q.marking.marked > 0 && q.marking.fit_rmse.is_some());
        } else {
            assert!(
                q.queue_delay_ns.max < 100.0,
                "{} {:?}",
                q.tap,
                q.queue_delay_ns
            );
        }
    }
    // The other file's clock: 52.5 µs ahead, so its hops' least delays carry the offset.
    for h in &r.hops {
        let other_file = h.from.contains(".rx.") != h.to.contains(".rx.");
        assert_eq!(h.shared_clock, !other_file, "{} → {}", h.from, h.to);
    }
    // The receiver's tap sees CE marks and the CNPs they caused, never closer than the NP's 4 µs.
    let np = r.np.iter().find(|n| short(&n.tap) == "sw2-r").unwrap();
    assert_eq!(np.below_min_gap, 0);
    assert!(np.answered > 0 && np.ce_to_cnp_ns.is_some());
    assert!(np.min_spacing_ns.unwrap() >= 4_000);
}

/// Writes a copy of `src` without the data packets whose 0-based RoCE index is a multiple of `every`, with an
/// interface statistics block counting `isb_drops` drops when given; returns how many were left out.
fn without_packets(src: &Path, dst: &Path, every: u64, isb_drops: Option<u64>) -> u64 {
    let mut roce = 0u64;
    rewrite(src, dst, isb_drops, |f| {
        let data = f.kind == roce_core::decode::Kind::Roce
            && f.roce
                .as_ref()
                .is_some_and(|r| r.packet.payload_len.unwrap_or(0) > 0);
        roce += u64::from(data);
        !data || !roce.is_multiple_of(every)
    })
}

/// Writes a copy of `src` with only the frames `keep` keeps, and an interface statistics block counting
/// `isb_drops` drops when given; returns how many were left out.
fn rewrite(
    src: &Path,
    dst: &Path,
    isb_drops: Option<u64>,
    mut keep: impl FnMut(&roce_core::decode::Frame<'_>) -> bool,
) -> u64 {
    use roce_capture::write::{PcapngWriter, SectionInfo};
    let mut reader = CaptureReader::open(src).unwrap();
    let mut w = PcapngWriter::new(
        std::io::BufWriter::new(std::fs::File::create(dst).unwrap()),
        &SectionInfo::application("hops test"),
    )
    .unwrap();
    let mut declared = 0;
    let (mut removed, mut last_ts) = (0u64, 0u64);
    let decoder = Decoder::default();
    while let Some(rec) = reader.next_record().unwrap() {
        let kept = keep(&decoder.decode(0, &rec));
        let (iface, ts, bytes, len) = (rec.iface, rec.ts_ns, rec.data.to_vec(), rec.len);
        while declared <= iface {
            let i = &reader.interfaces()[declared as usize];
            w.add_interface(i.link, i.snaplen, i.name.as_deref(), None)
                .unwrap();
            declared += 1;
        }
        if !kept {
            removed += 1;
            continue;
        }
        last_ts = ts;
        w.write_packet(iface, ts, &bytes, len).unwrap();
    }
    if let Some(d) = isb_drops {
        w.write_stats(0, last_ts, None, Some(d)).unwrap();
    }
    w.flush().unwrap();
    removed
}

#[test]
fn loss_between_taps_is_counted_and_explained() {
    let (paths, _) = files("marking_curve");
    let dir = tempfile::tempdir().unwrap();
    let rx = dir.path().join("marking_curve.rx.pcapng");
    let removed = without_packets(&paths[1], &rx, 50, None);
    assert!(removed > 10);
    let lossy = [paths[0].clone(), rx.clone()];
    let r = analyse(&lossy, HopsOptions::default());
    let h = r.hops.iter().find(|h| short(&h.from) == "ingress").unwrap();
    // A packet removed in the last queue's worth of time before the capture ends could also have been still
    // queued when it ended: such copies count apart, as outside the other capture.
    assert_eq!(h.only_from + h.outside_capture, removed);
    assert!(h.outside_capture <= 1, "{}", h.outside_capture);
    assert_eq!(h.unmatched, h.only_from);
    assert_eq!(h.matched, 2112 - removed);
    let loss = h.loss.as_deref().unwrap();
    assert!(loss.contains("lost between the taps"), "{loss}");
    // The downstream capture's PSNs show the gaps too; the upstream ones do not.
    let tap = |n: &str| r.taps.iter().find(|t| short(&t.tap) == n).unwrap();
    assert_eq!(tap("ingress").psn_gaps, 0);
    assert_eq!(tap("egress").psn_gaps, removed);
    // The same loss with the downstream capture admitting to as many drops: capture loss.
    let removed2 = without_packets(&paths[1], &rx, 50, Some(removed));
    assert_eq!(removed2, removed);
    let r = analyse(&lossy, HopsOptions::default());
    let h = r.hops.iter().find(|h| short(&h.from) == "ingress").unwrap();
    assert!(
        h.loss.as_deref().unwrap().contains("capture loss"),
        "{:?}",
        h.loss
    );
    // And the queue is still measured from what was matched.
    assert!(
        r.queues
            .iter()
            .any(|q| q.queue_bytes.is_some_and(|b| b.max > 100_000.0))
    );
}

#[test]
fn json_keys() {
    let (paths, _) = files("marking_curve");
    let out = run(analyzer().arg("hops").arg("--json").args(&paths));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let has = |o: &Value, keys: &[&str]| {
        for k in keys {
            assert!(o.get(k).is_some(), "missing {k} in {o}");
        }
    };
    has(&v, &["taps", "hops", "queues"]);
    for t in v["taps"].as_array().unwrap() {
        has(t, &["tap", "file", "interface", "name"]);
    }
    for h in v["hops"].as_array().unwrap() {
        has(
            h,
            &[
                "from",
                "to",
                "matched",
                "unmatched",
                "clock_offset_ns",
                "drift_ppm",
                "drift_known",
                "drift_range_ppm",
                "clock_error_ns",
                "queue_delay_ns",
            ],
        );
        has(&h["queue_delay_ns"], &["p50", "p99", "max"]);
    }
    for q in v["queues"].as_array().unwrap() {
        has(
            q,
            &[
                "tap",
                "priority",
                "packets",
                "drain_gbps",
                "queue_bytes",
                "marking",
            ],
        );
        // Null only when no drain rate is known (a port never busy enough to show its rate).
        if !q["drain_gbps"].is_null() {
            has(&q["queue_bytes"], &["p50", "p99", "max"]);
        }
        has(
            &q["marking"],
            &[
                "ect_in",
                "marked",
                "kmin_bytes",
                "kmin_interval",
                "kmax_bytes",
                "kmax_interval",
                "pmax",
                "pmax_interval",
                "fit_rmse",
            ],
        );
    }
    // The text form names the hop and the fitted curve. The capture is shorter than a clock window, so its
    // drift is not known: the table gives the range that fits, not the +0.0 the delays assume.
    let out = run(analyzer().arg("hops").args(&paths));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ingress → ") && text.contains("Kmin"),
        "{text}"
    );
    assert_eq!(v["hops"][0]["drift_known"], false);
    assert!(text.contains("? (-100.0…+100.0)"), "{text}");
    assert!(!text.contains("+0.0"), "{text}");
}

/// marking_curve with the PFC threshold (12 KB) far below Kmin (50 KB) and 3 µs of cable to the sender: the
/// switch pauses the sender long before the queue reaches the marking range, and only the overshoot while
/// the pause travels is marked. The finding says marking starts too late: the whole 95 % interval of Kmin
/// lies above the depth at which the pause passed the sender's tap.
#[test]
fn marking_above_the_pfc_threshold_is_a_finding() {
    let (r, _) = marking_curve_with(
        "late_marking",
        &[
            ("kmin_bytes = 40_000", "kmin_bytes = 50_000"),
            ("kmax_bytes = 160_000", "kmax_bytes = 80_000"),
            ("pmax = 0.5", "pmax = 1.0"),
            ("xoff_bytes = 176_000", "xoff_bytes = 12_000"),
            ("xon_bytes = 24_000", "xon_bytes = 4_000"),
            ("gbps = 100", "gbps = 100\ndelay_ns = 3000"),
            ("duration_us = 3000", "duration_us = 1100"),
            ("stop_us = 2800", "stop_us = 1000"),
        ],
    );
    let q = r.queues.iter().find(|q| short(&q.tap) == "egress").unwrap();
    assert!(q.marking.marked > 10, "{:?}", q.marking);
    let late: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.code == "marking_above_pfc")
        .collect();
    assert_eq!(late.len(), 1, "{:?}", r.findings);
    // In the teaching sample the threshold (176 KB) is far above Kmin: no such finding.
    let (paths, _) = files("marking_curve");
    let r = analyse(&paths, HopsOptions::default());
    assert!(r.findings.iter().all(|f| f.code != "marking_above_pfc"));
}

/// The report of both marking_curve files has the queue section with its three charts, and the findings of
/// `--switch-ecn` at the top; a capture of one tap says why the section is empty.
#[test]
fn report_has_the_queue_section() {
    use analyzer::output::report::{ReportInput, write_report};
    let (paths, _) = files("marking_curve");
    let mut capture = Capture::open(inputs::resolve(&paths).unwrap()).unwrap();
    let mut opts = analyzer::analysis::PipelineOptions::default();
    opts.hops.switch_ecn = Some((100_000.0, 400_000.0, 0.2));
    let a = analyzer::analysis::run(&mut capture, &opts, |_| {}).unwrap();
    assert!(a.findings.iter().any(|f| f.code == "ecn_curve_mismatch"));
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        stats: &a.stats,
        dcqcn: &a.dcqcn,
        pauses: &a.pauses,
        findings: &a.findings,
        hops: a.hops.as_ref(),
        fabric: &a.fabric,
    };
    let files = write_report(dir.path(), &input).unwrap();
    let html = std::fs::read_to_string(&files.index).unwrap();
    assert!(html.contains("Queues and ECN marking"));
    // The hops' table, as the text: a drift the capture could not pin is given as the range that fits.
    assert!(a.hops.as_ref().unwrap().hops.iter().all(|h| !h.drift_known));
    assert!(html.contains("? (-100.0…+100.0)"));
    assert!(!html.contains("+0.0"));
    for chart in ["hop_delay.png", "queue_depth_1.png", "queue_marking_1.png"] {
        assert!(dir.path().join(chart).exists(), "{chart}");
    }
    let mut one = Capture::open(inputs::resolve(&paths[..1]).unwrap()).unwrap();
    let a = analyzer::analysis::run(&mut one, &opts, |_| {}).unwrap();
    assert!(a.hops.is_none());
    let dir = tempfile::tempdir().unwrap();
    let input = ReportInput {
        stats: &a.stats,
        dcqcn: &a.dcqcn,
        pauses: &a.pauses,
        findings: &a.findings,
        hops: None,
        fabric: &a.fabric,
    };
    let files = write_report(dir.path(), &input).unwrap();
    let html = std::fs::read_to_string(&files.index).unwrap();
    assert_eq!(a.stats.capture.interfaces.len(), 1);
    assert!(html.contains(&analyzer::output::empty::no_hops(1)));
    assert!(html.contains("Only one tap was read"));
}

/// A receiver's host whose clock runs 40 ppm fast and 2 ms ahead, two senders into one switch port for
/// 10 ms: over the capture the offset grows by 400 ns, about 5 KB of queue at 100 Gb/s. Clock windows of
/// 1 ms give the line ten minima to lie under (the queue empties between the senders' rate cuts); the drift
/// it finds is the clock's, and the depths agree with the truth.
#[test]
fn a_drifting_clock_is_followed() {
    let mut text = String::from(
        "description = \"two senders, the receiver's tap on a drifting clock\"\n\
         seed = 7\nduration_us = 10000\nsnaplen = 96\nqueue_sample_ns = 100000\n\
         [[switch]]\nname = \"sw\"\nkmin_bytes = 100_000\nkmax_bytes = 400_000\npmax = 0.2\n\
         mark_at = \"enqueue\"\nbuffer_bytes = 8_000_000\nxoff_bytes = 1_000_000\nxon_bytes = 800_000\n\
         [[host]]\nname = \"r\"\n[[link]]\na = \"sw\"\nb = \"r\"\ngbps = 100\n\
         [[file]]\nname = \"rx\"\nclock_offset_ns = 2_000_000\nclock_drift_ppm = 40.0\n\
         [[tap]]\nname = \"r\"\na = \"sw\"\nb = \"r\"\nfile = \"rx\"\n",
    );
    for i in 1..=2 {
        text.push_str(&format!(
            "[[host]]\nname = \"s{i}\"\n[[link]]\na = \"s{i}\"\nb = \"sw\"\ngbps = 100\n\
             [[tap]]\nname = \"s{i}\"\na = \"s{i}\"\nb = \"sw\"\n\
             [[flow]]\nsrc = \"s{i}\"\ndst = \"r\"\n"
        ));
    }
    let sc = samples::sim::scenario::Scenario::from_toml("drift", &text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let written = samples::sim::write_run(&sc, dir.path()).unwrap();
    let truth: Value =
        serde_json::from_str(&std::fs::read_to_string(&written.truth_file).unwrap()).unwrap();
    let opts = HopsOptions {
        clock_window_ns: 1_000_000,
        ..HopsOptions::default()
    };
    let r = analyse(&written.captures, opts);
    every_packet_matched(&r, &truth);
    for h in &r.hops {
        assert!(!h.shared_clock && !h.order_assumed, "{} → {}", h.from, h.to);
        // Towards the receiver the fast clock adds delay over time; back from it, it takes some away.
        let want = if short(&h.to) == "r" { 40.0 } else { -40.0 };
        assert!(h.drift_known, "{} → {}", h.from, h.to);
        assert!(
            (h.drift_ppm - want).abs() < 2.0,
            "{} → {}: {} ppm",
            h.from,
            h.to,
            h.drift_ppm
        );
    }
    for tq in truth["tap_queues"].as_array().unwrap() {
        if tq["queue_bytes"]["max"].as_u64().unwrap() > 0 {
            depths_agree(queue_for(&r, tq), tq);
        }
    }
}

/// `hops` of one tap, and `dcqcn` of a capture without congestion or without CNPs, say why their tables
/// are empty, in the words the report uses.
#[test]
fn empty_answers_say_why() {
    use analyzer::output::empty;
    let sample = |name: &str| workspace().join(format!("samples/captures/{name}.pcapng"));
    let stdout = |args: &[&str], name: &str| {
        let out = run(analyzer().args(args).arg(sample(name)));
        assert!(out.status.success(), "{args:?} {name}");
        String::from_utf8(out.stdout).unwrap()
    };
    let hops = stdout(&["hops"], "clean_line_rate");
    assert!(hops.contains(&empty::no_hops(1)), "{hops}");
    assert!(!hops.contains("Hops (queue delay"), "{hops}");
    // Two taps of one file, the copies of a packet further apart than the match window allows.
    let hops = stdout(&["hops", "--match-window", "1ns"], "queue_moves");
    assert!(hops.contains(&empty::no_hops(3)), "{hops}");

    let dcqcn = stdout(&["dcqcn"], "clean_line_rate");
    assert!(dcqcn.contains(empty::NO_RATE_CONTROL), "{dcqcn}");
    assert!(!dcqcn.contains("rcv_qp"), "{dcqcn}");
    let dcqcn = stdout(&["dcqcn"], "ce_no_cnp");
    assert!(dcqcn.contains(empty::NO_PAIRED_CNP), "{dcqcn}");
    let dcqcn = stdout(&["dcqcn"], "incast_dcqcn");
    assert!(!dcqcn.contains(empty::NO_PAIRED_CNP) && !dcqcn.contains(empty::NO_RATE_CONTROL));
}
