//! The analysis against the teaching samples' ground truth (samples/captures/NAME.truth.json): what the
//! simulator's senders really did, which the analysis must reconstruct from the capture alone.
//!
//! The analysis is given only what a user would know: the link speed, the knob values the scenario set (its
//! `[dcqcn]` section, and `deactivate_at_line`, since the simulated NICs release their limiter at the maximum
//! rate), and the one-way delay from the tap to the senders computed from the topology, never a time taken from
//! the truth.
//!
//! The simulator runs its own reaction point, written apart from the analyzer's, and gives two timelines per
//! flow: `rp`, what the NIC did, its byte counter moved by the bytes really sent, and `rp_backlogged`, the same
//! reaction point fed the same CNPs but counting bytes at Rc all the time, which is what a replay has to assume.
//! Against `rp_backlogged` the analyzer's model must agree to arithmetic noise on every sample; against `rp` it
//! must agree where the senders were backlogged, and the application-limited sample shows where it cannot.

use std::path::Path;

use crate::common::workspace;
use analyzer::analysis::dcqcn::{DcqcnPass, DcqcnReport, FlowDcqcn, FlowId, Options};
use roce_capture::{Capture, CaptureReader};
use roce_core::dcqcn::{Event, Knobs};
use roce_core::decode::Decoder;
use roce_core::frames::Frames;
use roce_core::line::{LineRates, LineSource};
use roce_core::passes::Stats;
use roce_core::passes::brief::Brief;
use roce_core::passes::pairing::Method;
use roce_core::recorded::Recorded;
use serde_json::Value;

/// The samples whose senders run DCQCN and whose tap sees their CNPs.
const DCQCN_SAMPLES: [&str; 5] = [
    "incast_dcqcn",
    "incast_clamp",
    "read_incast",
    "app_limited",
    "rp_release",
];

/// How far apart in time the model's events and the truth's may be: a CNP's arrival at the sender is computed
/// from the topology, but the CNP may have waited at the switch behind a small frame (an ACK or a READ request,
/// at most 29 ns at 25 Gb/s) already on the wire; and the model places byte events on whole nanoseconds.
const TIME_TOL_NS: u64 = 50;
/// How far apart the rates may be: f64 arithmetic, and byte events a few ns apart.
const RATE_TOL: f64 = 1e-3;

fn sample(name: &str) -> (std::path::PathBuf, Value) {
    let dir = workspace().join("samples/captures");
    let truth: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("{name}.truth.json"))).unwrap(),
    )
    .unwrap();
    (dir.join(format!("{name}.pcapng")), truth)
}

/// The scenario's `[dcqcn]` section as knob lines, on top of `deactivate_at_line = 1`: the simulated NICs
/// release the limiter once the rate is back at the maximum.
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

/// The host that sends a flow's data: the requester of a WRITE or SEND, the responder of a READ.
fn data_sender(flow: &Value) -> &Value {
    if flow["data_sender"] == "requester" {
        &flow["src"]
    } else {
        &flow["dst"]
    }
}

/// When a CNP the tap saw reaches the sender's NIC. A tap stamps a frame when its last bit leaves the
/// transmitter. On the sender's own link the CNP arrives one propagation delay later. On the receiver's link it
/// crosses that link and the switch→sender link: two propagation delays, and one more serialization of the
/// 78-byte tagged CNP (plus 24 bytes of preamble, FCS and gap) at the switch (the samples' links are alike).
fn cnp_delay_ns(truth: &Value) -> i64 {
    let tap = &truth["taps"][0];
    let links = truth["links"].as_array().unwrap();
    let link = links
        .iter()
        .find(|l| l["a"] == tap["a"] && l["b"] == tap["b"])
        .unwrap();
    let delay = link["delay_ns"].as_i64().unwrap();
    let at_sender = truth["flows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| *data_sender(f) == tap["a"] || *data_sender(f) == tap["b"]);
    if at_sender {
        return delay;
    }
    let gbps = link["gbps"].as_f64().unwrap();
    2 * delay + ((78.0 + 24.0) * 8.0 / gbps).round() as i64
}

/// The analysis, and every event of every flow's model (the report's `model` series is decimated).
fn analyse(path: &Path, opts: &Options) -> (DcqcnReport, Vec<(FlowId, Event)>) {
    let mut r = CaptureReader::open(path).unwrap();
    let dec = Decoder::default();
    let mut pass = DcqcnPass::new(opts.bin_ns, opts.lines);
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        pass.frame(&Brief::of(&dec.decode(n, &rec)));
    }
    let mut events = Vec::new();
    let (report, _) = pass
        .finish_with_events(opts, &[], Some(&mut |id, e| events.push((*id, *e))))
        .unwrap();
    (report, events)
}

/// A truth timeline as (t_ns, kind, rc_mbps).
fn timeline(flow: &Value, key: &str) -> Vec<(u64, String, f64)> {
    flow[key]
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

/// Whether the step function takes a value within `tol` of `want` somewhere in `[t − w, t + w]`.
fn rc_near(points: &[(u64, f64)], t: u64, w: u64, line: f64, want: f64, tol: f64) -> bool {
    let close = |rc: f64| (rc - want).abs() <= tol * want;
    close(rc_at(points, t.saturating_sub(w), line))
        || points
            .iter()
            .skip_while(|p| p.0 <= t.saturating_sub(w))
            .take_while(|p| p.0 <= t + w)
            .any(|p| close(p.1))
}

/// One data flow of a sample: its truth, and what the analyzer made of it.
struct Replayed {
    name: String,
    truth: Value,
    model: FlowDcqcn,
    /// Every event of the model of this flow.
    events: Vec<Event>,
    line: f64,
    end: u64,
}

impl Replayed {
    fn cuts(&self, key: &str) -> Vec<(u64, f64)> {
        timeline(&self.truth, key)
            .into_iter()
            .filter(|e| e.1 == "cut")
            .map(|e| (e.0, e.2))
            .collect()
    }
    fn model_cuts(&self) -> Vec<(u64, f64)> {
        self.model
            .cuts
            .iter()
            .map(|c| (c.t_ns, c.rc_after_gbps * 1000.0))
            .collect()
    }
    fn model_rc(&self) -> Vec<(u64, f64)> {
        self.events.iter().map(|e| (e.t_ns, e.rc_mbps)).collect()
    }
    /// Compares Rc with the truth's `key` timeline every 100 ns from the first CNP to the end: the share of
    /// instants at which the model's Rc is within `RATE_TOL` (`TIME_TOL_NS` either side, for the edges), and
    /// the first instant at which it is not, with both rates.
    fn rc_agreement(&self, key: &str) -> (f64, Option<(u64, f64, f64)>) {
        let truth: Vec<(u64, f64)> = timeline(&self.truth, key)
            .into_iter()
            .map(|e| (e.0, e.2))
            .collect();
        let model = self.model_rc();
        let (mut good, mut all, mut first_bad) = (0u64, 0u64, None);
        let mut t = self.truth["rp"][0][0].as_u64().unwrap();
        while t < self.end {
            let want = rc_at(&truth, t, self.line);
            all += 1;
            if rc_near(&model, t, TIME_TOL_NS, self.line, want, RATE_TOL) {
                good += 1;
            } else if first_bad.is_none() {
                first_bad = Some((t, want, rc_at(&model, t, self.line)));
            }
            t += 100;
        }
        (good as f64 / all as f64, first_bad)
    }
}

/// Runs the analysis on a sample and pairs each flow that received CNPs with the analyzer's flow, checking the
/// pairing and the CNP count on the way.
fn replay(name: &str) -> Vec<Replayed> {
    let (path, truth) = sample(name);
    let line = truth["flows"][0]["line_mbps"].as_f64().unwrap();
    let opts = Options {
        knobs: scenario_knobs(name),
        lines: LineRates::flag(Some((line * 1e6) as u64)),
        cnp_delay_ns: cnp_delay_ns(&truth),
        fit: false,
        ..Options::default()
    };
    let (report, events) = analyse(&path, &opts);
    let tapped = &truth["taps"][0];
    let mut out = Vec::new();
    for tf in truth["flows"].as_array().unwrap() {
        let received = tf["cnps_received"].as_u64().unwrap();
        // A tap on a sender's link sees that sender's CNPs only; one on the receiver's side sees them all.
        let on_tap = |f: &Value| *data_sender(f) == tapped["a"] || *data_sender(f) == tapped["b"];
        let at_senders = truth["flows"].as_array().unwrap().iter().any(on_tap);
        if received == 0 || (at_senders && !on_tap(tf)) {
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
        let flow = format!("{name} {}", tf["name"].as_str().unwrap());
        let ours = report
            .flows
            .iter()
            .find(|f| f.summary.sender_qp == Some(sender_qp as u32))
            .unwrap_or_else(|| panic!("{flow}: no flow paired with QP {sender_qp:#x}"));
        assert_eq!(
            ours.summary.receiver_qp as u64, receiver_qp,
            "{flow}: pairing"
        );
        assert_eq!(ours.summary.pairing, Some(Method::ReverseTraffic), "{flow}");
        assert_eq!(ours.summary.cnps, received, "{flow}: CNPs");
        out.push(Replayed {
            name: flow,
            truth: tf.clone(),
            model: ours.clone(),
            events: events
                .iter()
                .filter(|(id, _)| {
                    id.sender == ours.summary.sender && id.receiver_qp == ours.summary.receiver_qp
                })
                .map(|(_, e)| *e)
                .collect(),
            line,
            end: truth["duration_ns"].as_u64().unwrap(),
        });
    }
    assert!(!out.is_empty(), "{name}: no flow to compare");
    out
}

/// Every cut of `truth` has one of `model` within `TIME_TOL_NS` with Rc within `RATE_TOL`, and the counts agree.
fn assert_same_cuts(flow: &str, truth: &[(u64, f64)], model: &[(u64, f64)]) {
    assert_eq!(
        truth.len(),
        model.len(),
        "{flow}: cuts {truth:?} vs the model's {model:?}"
    );
    for (t, m) in truth.iter().zip(model) {
        assert!(
            t.0.abs_diff(m.0) <= TIME_TOL_NS && (t.1 - m.1).abs() <= RATE_TOL * t.1,
            "{flow}: the cut at {} ns to {:.3} Mb/s is at {} ns to {:.3} Mb/s in the model",
            t.0,
            t.1,
            m.0,
            m.1
        );
    }
}

/// The analyzer's model is the simulator's reaction point under the same assumption: with the byte counter
/// moving at Rc, the two must agree on every cut and, every 100 ns from the first CNP to the end, on Rc (within
/// `RATE_TOL`, and `TIME_TOL_NS` either side for the edges). A disagreement here is an error in one of the two
/// implementations of dcqcn.md, not a sender that was not backlogged.
#[test]
fn the_model_replays_the_backlogged_reaction_point() {
    for name in DCQCN_SAMPLES {
        for f in replay(name) {
            assert_same_cuts(&f.name, &f.cuts("rp_backlogged"), &f.model_cuts());
            let (_, bad) = f.rc_agreement("rp_backlogged");
            if let Some((t, want, got)) = bad {
                panic!(
                    "{}: at {t} ns Rc is {want:.3} Mb/s, the model has {got:.3}",
                    f.name
                );
            }
        }
    }
}

/// Where the senders were backlogged, the model reconstructs what their NICs really did (`rp`): the same cuts,
/// and Rc within `RATE_TOL` for 99 % of the time from the first CNP. The real byte counter counts whole frames
/// when they start, so its increases come up to a frame's time (1.4 µs at 25 Gb/s) away from the model's.
#[test]
fn the_model_reconstructs_backlogged_senders() {
    for name in ["incast_dcqcn", "incast_clamp", "read_incast", "rp_release"] {
        for f in replay(name) {
            assert_same_cuts(&f.name, &f.cuts("rp"), &f.model_cuts());
            let (share, bad) = f.rc_agreement("rp");
            assert!(
                share >= 0.99,
                "{}: Rc agrees for {:.2} % of the time; first apart: {bad:?}",
                f.name,
                share * 100.0
            );
        }
    }
}

/// The limiter's release (`rp_release`): the truth's NIC lets go once Rc is back at line rate, and the next CNP
/// is a first CNP with a cut of about half. The model, told the NIC releases, makes the same cut.
#[test]
fn a_released_limiter_cuts_by_half_again() {
    let flows = replay("rp_release");
    let f = &flows[0];
    let rp = timeline(&f.truth, "rp");
    let released = rp
        .iter()
        .position(|e| e.1 == "released")
        .expect("the limiter is released");
    let again = rp[released..]
        .iter()
        .position(|e| e.1 == "first_cnp")
        .expect("a first CNP again")
        + released;
    let cut = &rp[again + 1];
    assert_eq!(cut.1, "cut");
    assert!(cut.2 < 0.52 * f.line, "{cut:?}");
    let model = f.model_cuts();
    assert!(
        model
            .iter()
            .any(|m| m.0.abs_diff(cut.0) <= TIME_TOL_NS && (m.1 - cut.2).abs() <= RATE_TOL * cut.2),
        "the model does not cut to {:.3} Mb/s at {} ns: {model:?}",
        cut.2,
        cut.0
    );
}

/// Where the replay's assumption bends (`app_limited`): f2 sends 10 Gb/s on a 100 Gb/s link, so its NIC's byte
/// counter earns an increase every 1.7 ms, where the replay credits one every 0.2 ms. The model agrees with the
/// NIC through the first congestion (its cuts), then recovers faster (its Rc never below the NIC's), releases
/// the limiter the NIC still holds, and at the second congestion expects a first CNP's cut of about half where
/// the NIC cut less than 1 %. This is the documented limit of a replay, kept visible: the model is not wrong
/// here (it matches `rp_backlogged`), its input is.
#[test]
fn an_application_limited_sender_is_where_the_replay_bends() {
    let flows = replay("app_limited");
    let f = flows
        .iter()
        .find(|f| f.name.ends_with("f2"))
        .expect("f2 is tapped");
    let rp = timeline(&f.truth, "rp");
    let shadow = timeline(&f.truth, "rp_backlogged");
    let byte_increases = |tl: &Value| {
        tl.as_array()
            .unwrap()
            .iter()
            .map(|e| e[6].as_u64().unwrap())
            .max()
            .unwrap_or(0)
    };
    assert!(
        byte_increases(&f.truth["rp"]) * 3 < byte_increases(&f.truth["rp_backlogged"]),
        "the NIC earned as many byte increases as a backlogged sender"
    );
    // The first congestion: the same cuts.
    let second = 3_600_000;
    let early = |v: Vec<(u64, f64)>| v.into_iter().filter(|c| c.0 < second).collect::<Vec<_>>();
    assert_same_cuts(&f.name, &early(f.cuts("rp")), &early(f.model_cuts()));
    // The recovery: the model above the NIC, never below.
    let truth: Vec<(u64, f64)> = rp.iter().map(|e| (e.0, e.2)).collect();
    let model = f.model_rc();
    let last_cut = early(f.cuts("rp")).last().unwrap().0;
    let mut t = last_cut + TIME_TOL_NS;
    while t < second {
        assert!(
            rc_at(&model, t, f.line) >= rc_at(&truth, t, f.line) * (1.0 - RATE_TOL),
            "at {t} ns"
        );
        t += 1_000;
    }
    assert!(shadow.iter().any(|e| e.1 == "released" && e.0 < second));
    assert!(!rp.iter().any(|e| e.1 == "released" && e.0 < second));
    // The second congestion: a deep cut in the model, a shallow one in the NIC.
    let nic = f.cuts("rp").into_iter().find(|c| c.0 >= second).unwrap();
    let modeled = f.model_cuts().into_iter().find(|c| c.0 >= second).unwrap();
    assert!(nic.1 > 0.99 * f.line, "the NIC cut to {:.0} Mb/s", nic.1);
    assert!(
        modeled.1 < 0.52 * f.line,
        "the model cut to {:.0} Mb/s",
        modeled.1
    );
}

/// Paused time per PFC source, against the truth's pause intervals of the tapped links. The truth rounds each
/// interval's start and end to ns separately, so each interval may differ by 1 ns. The truth's intervals are
/// at the paused node, one propagation delay and one PFC frame's serialization (60 bytes + 24) after the tap;
/// wire.md counts paused time only up to the capture's last frame, so the truth is clipped there too. That
/// clip point is known only up to how long the PFC frame waited behind a data frame already on the wire (at
/// most one 4 KiB frame, 1.4 µs at 25 Gb/s), so a clipped total gets that much slack; every other total must
/// agree to the ns (one ns per interval for the truth's rounding). No line rate is given: each tap's quanta
/// are converted at the line rate its interface block records, as a run without `--link-speed` does.
fn check_pauses(name: &str) {
    let (path, truth) = sample(name);
    let gbps = truth["links"][0]["gbps"].as_u64().unwrap();
    let mut r = Capture::open_file(&path).unwrap();
    let mut stats = Stats::new(LineRates::default());
    let mut frames = Frames::new(&mut r, Decoder::default());
    while let Some(f) = frames.next_frame() {
        stats.frame(&f);
    }
    let report = stats.finish(&r, &Recorded::of(&r));
    assert!(
        report
            .capture
            .interfaces
            .iter()
            .all(|i| i.line.source == LineSource::IfSpeed),
        "{name}: every tap records its line"
    );
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
    let mut opts = analyzer::analysis::PipelineOptions::default();
    opts.dcqcn.lines = LineRates::flag(Some(25_000_000_000));
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
