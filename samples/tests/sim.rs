//! The simulator keeps its invariants on every scenario, the committed samples are what the scenarios make, and
//! the captures are valid for tshark and for our own decoder.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use roce_capture::CaptureReader;
use roce_core::decode::{Decoder, Icrc, Kind};
use samples::sim::rp::RpEventKind;
use samples::sim::{self, LogKind, PacketKind, Run, Scenario, ScenarioError};

fn scenario_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")
}

fn capture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("captures")
}

fn scenarios() -> Vec<Scenario> {
    let files = sim::scenario_files(&scenario_dir()).unwrap();
    assert!(
        files.len() >= 13,
        "expected the thirteen teaching scenarios"
    );
    files.iter().map(|p| Scenario::load(p).unwrap()).collect()
}

fn run_logged(sc: &Scenario) -> Run {
    sim::run::<Vec<u8>>(sc, Vec::new(), true).unwrap()
}

fn run_quiet(sc: &Scenario) -> Run {
    sim::run::<Vec<u8>>(sc, Vec::new(), false).unwrap()
}

/// Runs a scenario into memory: the truth and one byte vector per capture file, the main one first.
fn run_captured(sc: &Scenario) -> (Run, Vec<Vec<u8>>) {
    let mut files = vec![Vec::new(); sc.files.len()];
    let r = sim::run(sc, files.iter_mut().collect(), false).unwrap();
    (r, files)
}

/// Every packet follows a legal path (created at a node, then sent out of a port and received at the port at the
/// other end of that link, queued or dropped at a switch, consumed at the end) with one length throughout, and
/// the bytes created equal the bytes consumed, dropped and still inside the network.
fn check_paths(name: &str, r: &Run) {
    let i = &r.internals;
    let mut by_packet: HashMap<u64, Vec<usize>> = HashMap::new();
    for (n, e) in i.log.iter().enumerate() {
        by_packet.entry(e.packet).or_default().push(n);
    }
    let resident: HashMap<u64, u32> = i.in_network.iter().copied().collect();
    let (mut created, mut consumed, mut dropped, mut inside) = (0u64, 0u64, 0u64, 0u64);
    for (id, steps) in &by_packet {
        let first = &i.log[steps[0]];
        assert_eq!(
            first.kind,
            LogKind::Create,
            "{name}: packet {id} starts with {first:?}"
        );
        created += u64::from(first.len);
        let mut port = first.port as usize;
        let mut expect = LogKind::TxStart;
        let mut ended = false;
        for &s in &steps[1..] {
            let e = &i.log[s];
            assert_eq!(e.len, first.len, "{name}: packet {id} changed length");
            assert!(!ended, "{name}: packet {id} moved after it ended");
            match (expect, e.kind) {
                (LogKind::TxStart, LogKind::TxStart) => {
                    assert_eq!(
                        e.port as usize, port,
                        "{name}: packet {id} left by another port"
                    );
                    expect = LogKind::Arrive;
                }
                (LogKind::Arrive, LogKind::Arrive) => {
                    assert_eq!(
                        e.port as usize, i.port_peer[port],
                        "{name}: packet {id} arrived at a port its link does not reach"
                    );
                    port = e.port as usize;
                    expect = if (e.node as usize) < i.hosts || e.packet_kind == PacketKind::Pfc {
                        LogKind::Consume
                    } else {
                        LogKind::Enqueue
                    };
                }
                (LogKind::Enqueue, LogKind::Enqueue) => {
                    assert_eq!(i.port_node[e.port as usize], e.node as usize);
                    port = e.port as usize;
                    expect = LogKind::TxStart;
                }
                (LogKind::Enqueue, LogKind::Drop) => {
                    dropped += u64::from(e.len);
                    ended = true;
                }
                (LogKind::Consume, LogKind::Consume) => {
                    consumed += u64::from(e.len);
                    ended = true;
                }
                (want, got) => panic!("{name}: packet {id}: expected {want:?}, got {got:?}"),
            }
        }
        if !ended {
            let len = resident.get(id).copied();
            assert_eq!(
                len,
                Some(first.len),
                "{name}: packet {id} vanished (last step {:?})",
                i.log[*steps.last().unwrap()].kind
            );
            inside += u64::from(first.len);
        }
    }
    assert!(
        i.in_network
            .iter()
            .all(|(id, _)| by_packet.contains_key(id)),
        "{name}: packets inside the network that were never created"
    );
    assert_eq!(
        created,
        consumed + dropped + inside,
        "{name}: bytes appeared or vanished"
    );
    assert!(consumed > 0, "{name}: nothing was delivered");
}

/// A sender never skips a PSN: each data packet it puts on the wire is the next one, or an earlier one after a
/// go-back-N that the truth records.
fn check_psns(name: &str, sc: &Scenario, r: &Run) {
    let i = &r.internals;
    let mut last: HashMap<u32, u64> = HashMap::new();
    let mut high: HashMap<u32, u64> = HashMap::new();
    let mut rewinds: HashMap<u32, usize> = HashMap::new();
    for e in &i.log {
        if e.kind != LogKind::TxStart
            || e.packet_kind != PacketKind::Data
            || (e.node as usize) >= i.hosts
        {
            continue;
        }
        let h = high.entry(e.flow).or_insert(0);
        assert!(
            e.seq <= *h,
            "{name}: flow {} skipped from {} to {}",
            e.flow,
            *h,
            e.seq
        );
        if e.seq == *h {
            *h += 1;
        }
        // A forward jump is only allowed inside what was sent before: an ACK that arrives during a go-back-N
        // moves the sender past packets the receiver already has. New PSNs are checked above.
        if let Some(&prev) = last.get(&e.flow)
            && e.seq <= prev
        {
            *rewinds.entry(e.flow).or_default() += 1;
        }
        last.insert(e.flow, e.seq);
    }
    for (f, flow) in r.truth.flows.iter().enumerate() {
        let seen = rewinds.get(&(f as u32)).copied().unwrap_or(0);
        assert!(
            seen <= flow.go_back_n.len(),
            "{name}: flow {} went back {seen} times but the truth has {} go-back-N episodes",
            flow.name,
            flow.go_back_n.len()
        );
        if flow.retransmitted_packets > 0 {
            assert!(
                seen > 0,
                "{name}: {} retransmitted without going back",
                flow.name
            );
        }
        assert!(
            high.contains_key(&(f as u32)),
            "{name}: flow {f} never sent"
        );
    }
    assert_eq!(r.truth.flows.len(), sc.flows.len());
}

/// Nothing starts on a priority while a PFC pause holds it, and no switch buffer ever overflows.
fn check_pauses_and_buffers(name: &str, sc: &Scenario, r: &Run) {
    let i = &r.internals;
    let mut pauses: HashMap<(usize, u8), Vec<(u64, u64)>> = HashMap::new();
    for &(port, prio, start, end) in &i.pauses {
        assert!(end >= start);
        pauses.entry((port, prio)).or_default().push((start, end));
    }
    for e in &i.log {
        match e.kind {
            LogKind::TxStart if e.packet_kind != PacketKind::Pfc => {
                if let Some(v) = pauses.get(&(e.port as usize, e.prio)) {
                    for &(s, end) in v {
                        assert!(
                            !(s < e.t_ps && e.t_ps < end),
                            "{name}: port {} sent priority {} at {} ps inside a pause {s}..{end}",
                            e.port,
                            e.prio,
                            e.t_ps
                        );
                    }
                }
            }
            LogKind::Enqueue => {
                let sw = &sc.switches[e.node as usize - i.hosts];
                assert!(
                    e.buffer_bytes <= sw.buffer_bytes,
                    "{name}: {} holds {} bytes in a {}-byte buffer",
                    sw.name,
                    e.buffer_bytes,
                    sw.buffer_bytes
                );
            }
            _ => {}
        }
    }
    for (sw, size, peak) in &i.buffer_peak {
        assert!(peak <= size, "{name}: {sw} peaked at {peak} of {size}");
    }
    for q in &r.truth.queues {
        assert!(q.samples.iter().all(|s| s[1] <= q.max_bytes));
    }
}

#[test]
fn every_scenario_keeps_the_invariants() {
    for sc in scenarios() {
        let r = run_logged(&sc);
        check_paths(&sc.name, &r);
        check_psns(&sc.name, &sc, &r);
        check_pauses_and_buffers(&sc.name, &sc, &r);
    }
}

fn sample(name: &str) -> &'static str {
    match name {
        "clean_line_rate"
        | "incast_dcqcn"
        | "incast_clamp"
        | "pfc_only"
        | "pfc_storm_hol"
        | "lossy_gbn"
        | "cnp_ignored"
        | "ce_no_cnp"
        | "read_incast"
        | "app_limited"
        | "rp_release"
        | "marking_curve"
        | "queue_moves"
        | "all_to_all_slow_pair" => "ok",
        _ => "unknown",
    }
}

#[test]
fn committed_samples_are_what_the_scenarios_make() {
    for sc in scenarios() {
        assert_eq!(sample(&sc.name), "ok", "unexpected scenario {}", sc.name);
        let (ra, a) = run_captured(&sc);
        let (rb, b) = run_captured(&sc);
        assert!(a == b, "{}: two runs wrote different captures", sc.name);
        assert_eq!(sim::truth_json(&ra.truth), sim::truth_json(&rb.truth));
        let size: usize = a.iter().map(Vec::len).sum();
        assert!(size <= 2 << 20, "{}: captures over 2 MB", sc.name);
        for (i, bytes) in a.iter().enumerate() {
            let pcap = capture_dir().join(sc.file_name(i));
            let stale = format!("{} is stale: run `cargo xtask samples`", pcap.display());
            assert!(std::fs::read(&pcap).expect(&stale) == *bytes, "{stale}");
        }
        let json = capture_dir().join(format!("{}.truth.json", sc.name));
        let stale = format!("{} is stale: run `cargo xtask samples`", json.display());
        assert!(
            std::fs::read_to_string(&json).expect(&stale) == sim::truth_json(&ra.truth),
            "{stale}"
        );
    }
}

#[test]
fn a_run_does_not_depend_on_logging() {
    let sc = Scenario::load(&scenario_dir().join("lossy_gbn.toml")).unwrap();
    let a = run_logged(&sc);
    let b = run_quiet(&sc);
    assert_eq!(sim::truth_json(&a.truth), sim::truth_json(&b.truth));
    let mut other = sc.clone();
    other.seed += 1;
    let c = run_quiet(&other);
    assert_ne!(
        sim::truth_json(&a.truth),
        sim::truth_json(&c.truth),
        "the seed must matter"
    );
}

#[test]
fn samples_decode_in_tshark_without_malformed_frames() {
    let ok = std::process::Command::new("tshark")
        .arg("--version")
        .output();
    assert!(
        ok.is_ok_and(|o| o.status.success()),
        "tshark is missing: run `cargo xtask test`, which installs it"
    );
    for sc in scenarios() {
        let mut lines = 0;
        for i in 0..sc.files.len() {
            let pcap = capture_dir().join(sc.file_name(i));
            let out = std::process::Command::new("tshark")
                .arg("-r")
                .arg(&pcap)
                .args(["-Y", "_ws.malformed or _ws.expert.severity >= error"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: tshark failed: {out:?}",
                pcap.display()
            );
            assert!(
                out.stdout.is_empty(),
                "{}: malformed frames:\n{}",
                pcap.display(),
                String::from_utf8_lossy(&out.stdout)
            );
            // tshark lists the `KNOB` custom block as a frame too; every packet the taps write is Ethernet.
            let count = std::process::Command::new("tshark")
                .arg("-r")
                .arg(&pcap)
                .args(["-Y", "eth"])
                .output()
                .unwrap();
            lines += count.stdout.iter().filter(|&&b| b == b'\n').count();
        }
        let truth = run_quiet(&sc).truth;
        assert_eq!(lines as u64, truth.totals.captured_frames, "{}", sc.name);
    }
}

/// Our decoder sees what the simulator says it sent: every ICRC valid (full frames), CNPs and PFC where the
/// truth has them, one interface per tap.
#[test]
fn the_analyzer_reads_back_the_taps() {
    for sc in scenarios() {
        let mut full = sc.clone();
        full.snaplen = None;
        let (run, files) = run_captured(&full);
        let truth = run.truth;
        let dec = Decoder::default();
        let (mut n, mut cnp, mut pfc, mut ce, mut interfaces) = (0u64, 0u64, 0u64, 0u64, 0);
        for (file, bytes) in files.into_iter().enumerate() {
            let mut r = CaptureReader::from_reader(&sc.name, Box::new(std::io::Cursor::new(bytes)))
                .unwrap();
            while let Some(rec) = r.next_record().unwrap() {
                n += 1;
                let f = dec.decode(n, &rec);
                match f.kind {
                    Kind::Roce | Kind::Cnp => {
                        let roce = f.roce.unwrap();
                        assert_eq!(roce.icrc, Icrc::Ok, "{} frame {n}", sc.name);
                        assert!(
                            roce.packet.stop.is_none(),
                            "{} frame {n}: {:?}",
                            sc.name,
                            roce.packet.stop
                        );
                        if f.kind == Kind::Cnp {
                            cnp += 1;
                        } else if f.ip.is_some_and(|ip| ip.ecn == 3) {
                            ce += 1;
                        }
                    }
                    Kind::Pfc => pfc += 1,
                    other => panic!("{} frame {n}: unexpected {other:?}", sc.name),
                }
            }
            // Each interface records the speed of the link it mirrors, which the analyzer takes as its line.
            let speeds: Vec<(Option<&str>, Option<u64>)> = r
                .interfaces()
                .iter()
                .map(|i| (i.name.as_deref(), i.speed_bps))
                .collect();
            let want: Vec<(Option<&str>, Option<u64>)> = sc
                .taps
                .iter()
                .filter(|t| t.file == file)
                .map(|t| {
                    let gbps = u64::from(sc.links[t.link].gbps);
                    (Some(t.name.as_str()), Some(gbps * 1_000_000_000))
                })
                .collect();
            assert_eq!(speeds, want, "{} file {file}", sc.name);
            interfaces += r.interfaces().len();
        }
        assert_eq!(n, truth.totals.captured_frames, "{}", sc.name);
        assert_eq!(interfaces, sc.taps.len());
        let cnps: u64 = truth.flows.iter().map(|f| f.cnps_sent).sum();
        // PFC never leaves its link, so only frames sent on a tapped link can be in the capture.
        let tapped = |a: &str, b: &str| {
            truth
                .taps
                .iter()
                .any(|t| (t.a == a && t.b == b) || (t.a == b && t.b == a))
        };
        let pfcs: u64 = truth
            .pfc_frames
            .iter()
            .filter(|p| tapped(&p.node, &p.port))
            .map(|p| p.xoff + p.xon)
            .sum();
        assert_eq!(cnps > 0, cnp > 0, "{}: CNPs in truth vs capture", sc.name);
        assert_eq!(pfcs, pfc, "{}: PFC frames in truth vs capture", sc.name);
        // A switch marks as a packet leaves it, so CE shows only on taps downstream of one: the samples' taps
        // that see marks are on a data receiver's link.
        let downstream = truth.flows.iter().any(|f| {
            let receiver = if f.op == "read" { &f.src } else { &f.dst };
            truth
                .taps
                .iter()
                .any(|t| &t.a == receiver || &t.b == receiver)
        });
        assert_eq!(
            truth.totals.ce_marked > 0 && downstream,
            ce > 0,
            "{}: CE in truth vs capture",
            sc.name
        );
    }
}

/// Each sample shows the behaviour it is named after.
#[test]
fn each_sample_shows_its_behaviour() {
    let runs: HashMap<String, Run> = scenarios()
        .into_iter()
        .map(|sc| (sc.name.clone(), run_quiet(&sc)))
        .collect();
    let t = |n: &str| &runs[n].truth;
    let sum = |n: &str, f: fn(&sim::truth::FlowTruth) -> u64| t(n).flows.iter().map(f).sum::<u64>();

    let clean = t("clean_line_rate");
    assert_eq!(clean.totals.ce_marked + clean.totals.packets_dropped, 0);
    assert!(clean.pauses.is_empty());
    let sent = clean.flows[0].data_payload_bytes_sent as f64 * 8.0;
    let gbps = sent / clean.duration_ns as f64;
    assert!(gbps > 90.0, "clean flow ran at {gbps:.1} Gb/s");

    for n in ["incast_dcqcn", "incast_clamp", "read_incast"] {
        assert!(sum(n, |f| f.cuts) > 0, "{n}: no cuts");
        assert_eq!(t(n).totals.packets_dropped, 0, "{n}");
    }
    // After the other flows stop at 1.5 ms, f1 recovers; with clamp_tgt_rate it recovers much more slowly.
    let final_rc = |n: &str| t(n).flows[0].rp.last().unwrap().rc_mbps;
    assert!(final_rc("incast_dcqcn") > 4.0 * final_rc("incast_clamp"));
    assert!(
        t("read_incast")
            .flows
            .iter()
            .all(|f| f.data_sender == "responder")
    );

    // An application-limited sender sends what it offers, and its NIC's byte counter earns far fewer increases
    // than a backlogged sender's would: the backlogged shadow releases the limiter before the second
    // congestion at 3.6 ms, the NIC does not, and cuts by less than 1 % where the shadow cuts by half.
    let app = t("app_limited");
    let f2 = &app.flows[0];
    let gbps = f2.data_payload_bytes_sent as f64 * 8.0 / app.duration_ns as f64;
    assert!(
        (gbps - 10.0).abs() < 0.5,
        "f2 offered 10 Gb/s and sent {gbps:.2}"
    );
    let max_bc = |rp: &[sim::rp::RpEvent]| rp.iter().map(|e| e.byte_count).max().unwrap_or(0);
    assert!(max_bc(&f2.rp) * 3 < max_bc(&f2.rp_backlogged));
    let released_before = |rp: &[sim::rp::RpEvent], t: u64| {
        rp.iter()
            .any(|e| e.kind == RpEventKind::Released && e.t_ps < t * 1_000)
    };
    assert!(released_before(&f2.rp_backlogged, 3_600_000));
    assert!(!released_before(&f2.rp, 3_600_000));
    let second_cut = |rp: &[sim::rp::RpEvent]| {
        rp.iter()
            .find(|e| e.kind == RpEventKind::Cut && e.t_ps > 3_600_000_000)
            .map(|e| e.rc_mbps)
            .unwrap()
    };
    assert!(second_cut(&f2.rp) > 99_000.0);
    assert!(second_cut(&f2.rp_backlogged) < 52_000.0);

    // The limiter lets go at line rate; the next CNP is a first CNP and cuts by about half.
    let rel = &t("rp_release").flows[0].rp;
    let r = rel
        .iter()
        .position(|e| e.kind == RpEventKind::Released)
        .unwrap();
    assert!(rel[r - 1].rc_mbps >= 25_000.0 - 0.5);
    assert_eq!(rel[r + 1].kind, RpEventKind::FirstCnp);
    assert_eq!(rel[r + 2].kind, RpEventKind::Cut);
    assert!(rel[r + 2].rc_mbps < 0.52 * 25_000.0);
    for k in [
        RpEventKind::FastRecovery,
        RpEventKind::AdditiveIncrease,
        RpEventKind::HyperIncrease,
    ] {
        assert!(rel.iter().any(|e| e.kind == k), "rp_release: no {k}");
    }
    // A backlogged sender's NIC and its backlogged shadow make the same cuts.
    for n in ["incast_dcqcn", "read_incast", "rp_release"] {
        for f in &t(n).flows {
            let cuts = |rp: &[sim::rp::RpEvent]| {
                rp.iter()
                    .filter(|e| e.kind == RpEventKind::Cut)
                    .map(|e| e.t_ps)
                    .collect::<Vec<_>>()
            };
            assert_eq!(cuts(&f.rp), cuts(&f.rp_backlogged), "{n} {}", f.name);
        }
    }

    // The marking curve: the queue sweeps the range between Kmin and Kmax, where the marked share follows the
    // curve; below Kmin nothing is marked, above Kmax everything.
    let mc = t("marking_curve");
    let hop = mc
        .hops
        .iter()
        .find(|h| h.from == "ingress" && h.to == "egress" && h.prio == 3)
        .unwrap();
    let m = hop.queue.marking.as_ref().unwrap();
    assert_eq!(m.at, "enqueue");
    assert!(
        m.between >= 1000,
        "{} packets between Kmin and Kmax",
        m.between
    );
    let (mut expected, mut marked) = (0.0f64, 0.0f64);
    for b in &m.bins {
        let (lo, hi) = (b.depth_bytes, b.depth_bytes + m.bin_bytes);
        if hi <= m.kmin_bytes {
            assert_eq!(b.marked, 0, "{b:?}");
        } else if lo >= m.kmax_bytes {
            assert_eq!(b.marked, b.ect_in, "{b:?}");
        } else if lo >= m.kmin_bytes && hi <= m.kmax_bytes {
            let mid = (lo + hi) as f64 / 2.0;
            let p = m.pmax * (mid - m.kmin_bytes as f64) / (m.kmax_bytes - m.kmin_bytes) as f64;
            expected += p * b.ect_in as f64;
            marked += b.marked as f64;
        }
    }
    assert!(
        (marked - expected).abs() < 0.1 * expected,
        "{marked} marked between Kmin and Kmax, the curve expects {expected:.0}"
    );
    assert!(hop.queue.queue_bytes.unwrap().p50 > m.kmin_bytes);
    assert_eq!(mc.files[1].clock_offset_ns, 1_234_567);

    // The queue moves: sw1's uplink queue holds until f2 stops at 500 µs and is gone by 700 µs; sw2's queue to
    // r is empty until then and holds after.
    let qm = t("queue_moves");
    let peak = |sw: &str, port: &str, from: u64, to: u64| {
        qm.queues
            .iter()
            .filter(|q| q.switch == sw && q.port == port && q.prio == 3)
            .flat_map(|q| q.samples.iter())
            .filter(|s| (from..to).contains(&s[0]))
            .map(|s| s[1])
            .max()
            .unwrap_or(0)
    };
    let kmin = sc_kmin(&qm.hops);
    assert!(peak("sw1", "sw2", 0, 500_000) > kmin);
    assert!(peak("sw1", "sw2", 700_000, 1_300_000) < 10_000);
    assert!(peak("sw2", "r", 0, 500_000) < 10_000);
    assert!(peak("sw2", "r", 550_000, 1_100_000) > kmin);
    let hop = |from: &str, to: &str| {
        qm.hops
            .iter()
            .find(|h| h.from == from && h.to == to && h.prio == 3)
            .unwrap()
    };
    assert!(hop("s1-sw1", "uplink").queue.queue_bytes.unwrap().p99 > kmin);
    assert!(hop("s3-sw2", "sw2-r").queue.queue_bytes.unwrap().p50 > 0);
    assert!(qm.files[1].clock_drift_ppm > 0.0);
    // The queue to r, as the tap on r's link measures it, gathers the packets of both upstream taps.
    let q = qm
        .tap_queues
        .iter()
        .find(|q| q.tap == "sw2-r" && q.prio == 3)
        .unwrap();
    assert_eq!(q.from, ["uplink", "s3-sw2"]);
    assert_eq!(q.switch, "sw2");
    assert!(q.one_switch);
    assert_eq!(q.drain_gbps, 25);
    assert_eq!(
        q.packets,
        hop("uplink", "sw2-r").packets + hop("s3-sw2", "sw2-r").packets
    );

    let ign = t("cnp_ignored");
    assert!(sum("cnp_ignored", |f| f.cnps_ignored) > 0);
    assert_eq!(sum("cnp_ignored", |f| f.cuts), 0);
    assert!(ign.flows.iter().all(|f| f.rp.is_empty()));

    assert!(sum("ce_no_cnp", |f| f.ce_received) > 0);
    assert_eq!(sum("ce_no_cnp", |f| f.cnps_sent), 0);

    let lossy = t("lossy_gbn");
    assert!(lossy.totals.packets_dropped > 0);
    assert!(lossy.drops.iter().all(|d| d.reason == "tail_drop"));
    assert!(sum("lossy_gbn", |f| f.naks_sent) > 0);
    assert!(sum("lossy_gbn", |f| f.retransmitted_packets) > 0);
    assert!(
        lossy
            .flows
            .iter()
            .any(|f| f.go_back_n.iter().any(|g| g.cause == "nak"))
    );
    assert!(lossy.pauses.is_empty());

    // PFC only: sw2 pauses the uplink, and sw1 pauses its hosts in turn.
    let pfc = t("pfc_only");
    assert_eq!(pfc.totals.ce_marked, 0);
    assert!(
        pfc.pauses
            .iter()
            .any(|p| p.node == "sw1" && p.port == "sw2")
    );
    assert!(
        pfc.pauses
            .iter()
            .any(|p| p.node.starts_with('s') && p.port == "sw1")
    );

    // The storm: the victim's own host gets paused although nothing is wrong between v and w.
    let storm = t("pfc_storm_hol");
    assert!(
        storm
            .pauses
            .iter()
            .any(|p| p.node == "sw2" && p.port == "r")
    );
    assert!(storm.pauses.iter().any(|p| p.node == "v" && p.prio == 3));

    // The all-to-all: every pair sends what it offered but h1 -> h4, whose queue drains at what priority 3
    // leaves of h4's link; it alone is marked and cut, and nothing is lost or paused.
    let a2a = t("all_to_all_slow_pair");
    let sent = |name: &str| {
        a2a.flows
            .iter()
            .find(|f| f.name == name)
            .unwrap()
            .data_payload_bytes_sent
    };
    let job: Vec<&sim::truth::FlowTruth> = a2a.flows.iter().filter(|f| f.name != "st-h4").collect();
    assert_eq!(job.len(), 12);
    for f in &job {
        let slow = f.name == "h1-h4";
        assert_eq!(f.ce_received > 0, slow, "{}", f.name);
        assert_eq!(f.cuts > 0, slow, "{}", f.name);
        if !slow {
            assert_eq!(f.data_payload_bytes_sent, sent("h2-h4"), "{}", f.name);
        }
    }
    assert!(2 * sent("h1-h4") < sent("h1-h2") + sent("h1-h2") / 10);
    assert_eq!(a2a.totals.packets_dropped, 0);
    assert!(a2a.pauses.is_empty());
}

fn err(text: &str) -> String {
    match Scenario::from_toml("t", text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

const MINIMAL: &str = r#"
duration_us = 100
[[switch]]
name = "sw"
[[host]]
name = "a"
[[host]]
name = "b"
[[link]]
a = "a"
b = "sw"
[[link]]
a = "sw"
b = "b"
"#;

#[test]
fn scenario_errors_name_the_key() {
    assert!(Scenario::from_toml("t", MINIMAL).is_ok());
    let e = err(&format!("colour = 3\n{MINIMAL}"));
    assert!(e.contains("colour"), "{e}");
    let e = err(&format!(
        "{MINIMAL}[[flow]]\nsrc = \"a\"\ndst = \"b\"\nmtu_bytes = 9\n"
    ));
    assert!(e.contains("mtu_bytes"), "{e}");
    let e = err(&format!(
        "{MINIMAL}[[flow]]\nsrc = \"a\"\ndst = \"b\"\nmtu = 1000\n"
    ));
    assert!(e.contains("flow[0].mtu"), "{e}");
    let e = err(&format!("{MINIMAL}[[flow]]\nsrc = \"a\"\ndst = \"c\"\n"));
    assert!(e.contains("flow[0].dst") && e.contains("`c`"), "{e}");
    let e = err(&format!(
        "{MINIMAL}[[flow]]\nsrc = \"a\"\ndst = \"b\"\nop = \"atomic\"\n"
    ));
    assert!(e.contains("flow[0].op"), "{e}");
    let e = err(&format!("{MINIMAL}[dcqcn]\nrpg_gd = 99\n"));
    assert!(e.contains("rpg_gd"), "{e}");
    let e = err(&format!("{MINIMAL}[dcqcn]\nno_such_knob = 1\n"));
    assert!(e.contains("no_such_knob"), "{e}");
    let e = err(&format!("{MINIMAL}[dcqcn]\nrpg_time_reset = 0\n"));
    assert!(e.contains("rpg_time_reset"), "{e}");
    let e = err(&format!(
        "{MINIMAL}[[flow]]\nsrc = \"a\"\ndst = \"b\"\nop = \"read\"\noffered_gbps = 5.0\n"
    ));
    assert!(e.contains("flow[0].offered_gbps"), "{e}");
    let e = err(&format!(
        "{MINIMAL}[[tap]]\na = \"a\"\nb = \"sw\"\nfile = \"rx\"\n"
    ));
    assert!(e.contains("tap[0].file") && e.contains("`rx`"), "{e}");
    let e = err(&format!("{MINIMAL}[[file]]\nname = \"rx\"\n"));
    assert!(e.contains("file[0]") && e.contains("no tap"), "{e}");
    let e = err(&format!(
        "{MINIMAL}[[file]]\nname = \"rx\"\nclock_drift_ppm = 5000.0\n[[tap]]\na = \"a\"\nb = \"sw\"\nfile = \"rx\"\n"
    ));
    assert!(e.contains("file[0].clock_drift_ppm"), "{e}");
    let e = err(&format!("{MINIMAL}[[file]]\nname = \"r/x\"\n"));
    assert!(e.contains("file[0].name"), "{e}");
    let e = err(&MINIMAL.replace("name = \"sw\"", "name = \"sw\"\nmark_at = \"never\""));
    assert!(e.contains("switch[0].mark_at"), "{e}");
    let e = err(&MINIMAL.replace("duration_us = 100", "duration_us = \"long\""));
    assert!(e.contains("duration_us"), "{e}");
    let e = err(&MINIMAL.replace("name = \"sw\"", "name = \"sw\"\nxon_bytes = 900000"));
    assert!(e.contains("switch[0].xon_bytes"), "{e}");
    let e = err(&format!("{MINIMAL}[[tap]]\na = \"a\"\nb = \"b\"\n"));
    assert!(e.contains("tap[0]"), "{e}");
    let e = err(&format!("{MINIMAL}[[link]]\na = \"a\"\nb = \"b\"\n"));
    assert!(
        e.contains("host `a` has 2 links") || e.contains("link"),
        "{e}"
    );
    assert!(matches!(
        Scenario::from_toml(
            "t",
            "duration_us = 5\n[[host]]\nname = \"x\"\nname = \"y\"\n"
        ),
        Err(ScenarioError::Toml { .. })
    ));
}

/// What identifies a RoCE packet at every tap: addresses, destination QP, PSN, opcode and payload length (what a
/// switch does not change).
type PacketKey = (std::net::IpAddr, std::net::IpAddr, u32, u32, u8, usize);

/// One RoCE frame as a tap recorded it: the packet, its priority (VLAN PCP) and the tap's own clock.
struct Seen {
    key: PacketKey,
    prio: u8,
    local_ns: u64,
}

/// The RoCE frames of each tap, by tap name, from the committed capture files of a scenario.
fn frames_by_tap(sc: &Scenario) -> HashMap<String, Vec<Seen>> {
    let dec = Decoder::default();
    let mut by_tap: HashMap<String, Vec<Seen>> = HashMap::new();
    for i in 0..sc.files.len() {
        let mut r = CaptureReader::open(&capture_dir().join(sc.file_name(i))).unwrap();
        let mut seen: Vec<(u32, Seen)> = Vec::new();
        let mut n = 0;
        while let Some(rec) = r.next_record().unwrap() {
            n += 1;
            let f = dec.decode(n, &rec);
            let (Some(ip), Some(roce)) = (f.ip, f.roce.as_ref()) else {
                continue;
            };
            let bth = roce.packet.bth.unwrap();
            seen.push((
                f.iface,
                Seen {
                    key: (
                        ip.src,
                        ip.dst,
                        bth.dest_qp,
                        bth.psn,
                        bth.opcode.0,
                        roce.packet.payload_len.unwrap(),
                    ),
                    prio: f.pcp.unwrap(),
                    local_ns: f.ts_ns,
                },
            ));
        }
        // Interface blocks are read as the file goes, so names are known at the end.
        for (iface, s) in seen {
            let name = r.interfaces()[iface as usize].name.clone().unwrap();
            by_tap.entry(name).or_default().push(s);
        }
    }
    by_tap
}

/// The hops' truth is what the capture files show: matching each packet of a hop's first tap with its earliest
/// unmatched copy at the second (same key and priority, later on the true clock) gives as many packets as the
/// truth says, the same least delay between the two taps' clocks (`clock_offset_ns`) and the same transit
/// times; every file's clock runs as its `[[file]]` says; and a tap's frames that no hop matched are what the
/// truth calls `alone`.
#[test]
fn the_hop_truth_is_what_the_taps_recorded() {
    for name in ["marking_curve", "queue_moves"] {
        let sc = Scenario::load(&scenario_dir().join(format!("{name}.toml"))).unwrap();
        let truth = run_quiet(&sc).truth;
        let taps = frames_by_tap(&sc);
        let clock = |tap: &str| {
            let t = truth.taps.iter().find(|t| t.name == tap).unwrap();
            truth.files.iter().find(|f| f.name == t.file).unwrap()
        };
        // The true time of a local stamp (the clock is monotonic, so this inverts it to within a ns).
        let true_ns = |tap: &str, local: u64| {
            let f = clock(tap);
            ((local - f.clock_offset_ns) as f64 / (1.0 + f.clock_drift_ppm * 1e-6)).round() as u64
        };
        assert!(truth.hops.len() >= 2, "{name}: {} hops", truth.hops.len());
        let mut matched_at: HashMap<String, u64> = HashMap::new();
        for h in &truth.hops {
            let from = &taps[&h.from];
            let to = &taps[&h.to];
            let mut waiting: HashMap<PacketKey, std::collections::VecDeque<u64>> = HashMap::new();
            let mut pending: Vec<(u64, PacketKey, u64)> = from
                .iter()
                .filter(|s| s.prio == h.prio)
                .map(|s| (true_ns(&h.from, s.local_ns), s.key, s.local_ns))
                .collect();
            pending.sort_by_key(|p| p.0);
            let mut arrivals: Vec<(u64, PacketKey, u64)> = to
                .iter()
                .filter(|s| s.prio == h.prio)
                .map(|s| (true_ns(&h.to, s.local_ns), s.key, s.local_ns))
                .collect();
            arrivals.sort_by_key(|p| p.0);
            let (mut i, mut matched, mut min_local) = (0, 0u64, i64::MAX);
            let mut transits = Vec::new();
            for (t_to, key, local_to) in arrivals {
                while i < pending.len() && pending[i].0 < t_to {
                    waiting.entry(pending[i].1).or_default().push_back(i as u64);
                    i += 1;
                }
                if let Some(j) = waiting.get_mut(&key).and_then(|q| q.pop_front()) {
                    let (t_from, _, local_from) = pending[j as usize];
                    matched += 1;
                    min_local = min_local.min(local_to as i64 - local_from as i64);
                    transits.push(t_to - t_from);
                }
            }
            let hop = format!("{name} {}→{} prio {}", h.from, h.to, h.prio);
            assert_eq!(matched, h.packets, "{hop}: matched");
            assert_eq!(
                min_local, h.clock_offset_ns,
                "{hop}: least delay between the clocks"
            );
            let t = sim::truth::Percentiles::of(transits);
            for (got, want) in [
                (t.p50, h.transit_ns.p50),
                (t.p99, h.transit_ns.p99),
                (t.max, h.transit_ns.max),
            ] {
                assert!(
                    got.abs_diff(want) <= 1,
                    "{hop}: transit {t:?} vs {:?}",
                    h.transit_ns
                );
            }
            *matched_at.entry(h.from.clone()).or_default() += matched;
            *matched_at.entry(h.to.clone()).or_default() += matched;
        }
        // A packet that crosses three taps is in two hops, counted at its middle tap twice: count each frame
        // once by requiring only that every frame is in some hop, unless the truth says it is alone.
        for t in &truth.taps {
            let roce = taps.get(&t.name).map_or(0, Vec::len) as u64;
            assert!(
                matched_at.get(&t.name).copied().unwrap_or(0) + t.alone >= roce,
                "{name} {}: {roce} RoCE frames, fewer in hops",
                t.name
            );
        }
    }
}

/// Kmin of the switches on a sample's hops (the samples give all their switches one curve).
fn sc_kmin(hops: &[sim::truth::HopTruth]) -> u64 {
    hops.iter()
        .filter_map(|h| h.queue.marking.as_ref())
        .map(|m| m.kmin_bytes)
        .min()
        .unwrap()
}

/// Each committed capture carries the knobs its hosts ran with, as the tracer records them, and the
/// analyzer's reading of them gives back the scenario's values: a sample's receiver that keeps 20 µs between
/// CNPs is checked against 20 µs, not against the 4 µs default.
#[test]
fn samples_record_the_knobs_their_hosts_ran_with() {
    for sc in scenarios() {
        for i in 0..sc.files.len() {
            let mut r = CaptureReader::open(&capture_dir().join(sc.file_name(i))).unwrap();
            // The block sits before the first packet; reading one makes the reader take it.
            r.next_record().unwrap();
            let recorded = roce_core::recorded::Recorded::read(r.custom_blocks()).ecn;
            let taps: Vec<_> = sc.taps.iter().filter(|t| t.file == i).collect();
            let with_host: Vec<_> = taps
                .iter()
                .filter_map(|t| {
                    let l = &sc.links[t.link];
                    let (n, h) = [l.a, l.b]
                        .into_iter()
                        .find_map(|n| Some((n, sc.hosts.get(n)?)))?;
                    Some((t.name.as_str(), n, h))
                })
                .collect();
            let what = sc.file_name(i);
            assert_eq!(recorded.len(), with_host.len(), "{what}: {recorded:?}");
            for (tap, n, host) in with_host {
                let rec = recorded.iter().find(|r| r.iface == tap).unwrap();
                assert!(rec.captured, "{what}: {tap}");
                // Host n is 10.0.0.n+1 (samples/README.md), and its NIC's knobs say so.
                let ip: std::net::IpAddr = format!("10.0.0.{}", n + 1).parse().unwrap();
                assert_eq!(rec.addrs, [ip], "{what}: {tap}");
                let c = rec
                    .config(&roce_core::dcqcn::EcnConfig::default())
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(
                    u64::from(c.np.min_time_between_cnps) * 1_000,
                    host.min_time_between_cnps_ns,
                    "{what}: {tap}"
                );
                assert_eq!(c.np.cnp_dscp, u32::from(host.cnp_dscp), "{what}: {tap}");
                assert_eq!(
                    c.np.cnp_802p_prio,
                    u32::from(host.cnp_prio),
                    "{what}: {tap}"
                );
                let read: HashMap<&str, u64> = c.rp.list().map(|e| (e.name, e.value)).collect();
                for (name, value) in sc.knobs.sysfs() {
                    assert_eq!(read[name], u64::from(value), "{what}: {tap} {name}");
                }
                assert!(c.ignored.is_empty(), "{what}: {:?}", c.ignored);
                // The scenario's rp/np switches act on every priority: all eight enable/N files say so.
                for p in 0..8 {
                    assert_eq!(c.rp_enable.get(p), Some(host.rp), "{what}: {tap} rp {p}");
                    assert_eq!(c.np_enable.get(p), Some(host.np), "{what}: {tap} np {p}");
                }
            }
        }
    }
}
