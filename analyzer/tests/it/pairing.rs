//! CNP ↔ data-flow pairing on real handshakes and traffic, and the timing fallback on crafted frames.

use std::net::IpAddr;
use std::path::Path;

use crate::common::shared_capture;
use roce_capture::{CaptureReader, LinkType, Record};
use roce_core::decode::Decoder;
use roce_core::passes::brief::Brief;
use roce_core::passes::flows::FlowKey;
use roce_core::passes::pairing::{Method, Pairing, PairingPass};
use roce_wire::{BthRepr, ExtHeaders, Opcode};

fn pair_file(path: &Path) -> Pairing {
    let mut r = CaptureReader::open(path).unwrap();
    let dec = Decoder::default();
    let mut pass = PairingPass::default();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        pass.frame(&Brief::of(&dec.decode(n, &rec)));
    }
    pass.finish()
}

fn key(src: &str, dst: &str, dest_qp: u32) -> FlowKey {
    FlowKey {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        dest_qp,
    }
}

#[test]
fn cm_handshake_pairs_both_directions() {
    // test.pcap: REQ from .25, REP from .24, then RDMA WRITE .25→.24 to QP 0x11 and ACKs back to QP 0x17.
    let Some(cap_test) = shared_capture("test.pcap") else {
        return;
    };
    let p = pair_file(&cap_test);
    let fwd = p
        .of_flow(&key("192.168.2.25", "192.168.2.24", 0x11))
        .expect("paired");
    assert_eq!((fwd.sender_qp, fwd.method), (0x17, Method::CmMad));
    let rev = p
        .of_flow(&key("192.168.2.24", "192.168.2.25", 0x17))
        .expect("paired");
    assert_eq!((rev.sender_qp, rev.method), (0x11, Method::CmMad));
}

#[test]
fn acks_pair_a_connection_without_cm() {
    // roce.pcap has no CM exchange: .6 sends to QP 0x45 on .4, .4 acknowledges to QP 0x48 on .6.
    let Some(cap_roce) = shared_capture("roce.pcap") else {
        return;
    };
    let p = pair_file(&cap_roce);
    let fwd = p
        .of_flow(&key("192.168.70.6", "192.168.70.4", 0x45))
        .expect("paired");
    assert_eq!((fwd.sender_qp, fwd.method), (0x48, Method::ReverseTraffic));
    assert!(fwd.evidence >= 30, "{fwd:?}");
    let cnp_to_sender = key("192.168.70.4", "192.168.70.6", 0x48);
    assert_eq!(p.of_cnp(&cnp_to_sender).map(|x| x.receiver_qp), Some(0x45));
}

fn frame(src: u8, dst: u8, ecn: u8, bth: BthRepr, payload: &[u8]) -> Vec<u8> {
    crate::common::v4_frame(src, dst, ecn, bth, ExtHeaders::default(), payload)
}

fn send(qp: u32, psn: u32) -> BthRepr {
    BthRepr::new(Opcode::UC_SEND_ONLY, qp, psn)
}

/// Hands the pass frame number `n`, `bytes` seen at tap and time `at`.
fn feed_frame(pass: &mut PairingPass, dec: &Decoder, n: u64, at: (u32, u64), bytes: &[u8]) {
    let rec = Record {
        iface: at.0,
        link: LinkType::ETHERNET,
        speed_bps: None,
        ts_ns: at.1,
        caplen: bytes.len() as u32,
        len: bytes.len() as u32,
        data: bytes,
        offset: 0,
    };
    pass.frame(&Brief::of(&dec.decode(n, &rec)));
}

#[test]
fn cnps_after_ce_pair_by_timing() {
    // Two UC flows from .1 to .2 (no ACKs to learn from); CE only on QP 0x200, whose sender QP is 0x99.
    let dec = Decoder::default();
    let mut pass = PairingPass::default();
    let mut t = 1_000_000u64;
    let mut n = 0;
    let mut feed = |bytes: Vec<u8>, t: u64, pass: &mut PairingPass| {
        n += 1;
        feed_frame(pass, &dec, n, (0, t), &bytes);
    };
    for i in 0..50u32 {
        feed(frame(1, 2, 2, send(0x100, i), &[0; 64]), t, &mut pass);
        feed(frame(1, 2, 3, send(0x200, i), &[0; 64]), t + 10, &mut pass);
        // The NP answers the CE mark 3 µs later.
        feed(
            frame(2, 1, 2, BthRepr::cnp(0x99), &[0; 16]),
            t + 3_010,
            &mut pass,
        );
        t += 100_000;
    }
    let p = pass.finish();
    let pair = p
        .of_flow(&key("10.0.0.1", "10.0.0.2", 0x200))
        .expect("paired");
    assert_eq!((pair.sender_qp, pair.method), (0x99, Method::Timing));
    assert_eq!(pair.evidence, 50);
    assert!(p.of_flow(&key("10.0.0.1", "10.0.0.2", 0x100)).is_none());
    let ip: IpAddr = "10.0.0.2".parse().unwrap();
    assert_eq!(
        p.of_cnp(&FlowKey {
            src: ip,
            dst: "10.0.0.1".parse().unwrap(),
            dest_qp: 0x99
        })
        .map(|x| x.receiver_qp),
        Some(0x200)
    );
}

// ---- Pairing on evidence (issue 19, item 1): ties are reported, never broken by QP number. ----

/// The pairing of `frames` (time, bytes), fed in time order at one tap.
fn pair_frames(mut frames: Vec<(u64, Vec<u8>)>) -> Pairing {
    frames.sort_by_key(|(t, _)| *t);
    let dec = Decoder::default();
    let mut pass = PairingPass::default();
    for (n, (t, bytes)) in frames.iter().enumerate() {
        let rec = Record {
            iface: 0,
            link: LinkType::ETHERNET,
            speed_bps: None,
            ts_ns: *t,
            caplen: bytes.len() as u32,
            len: bytes.len() as u32,
            data: bytes,
            offset: 0,
        };
        pass.frame(&Brief::of(&dec.decode(n as u64 + 1, &rec)));
    }
    pass.finish()
}

fn write(qp: u32, psn: u32) -> BthRepr {
    BthRepr::new(Opcode::RC_SEND_ONLY, qp, psn)
}

fn ack(src: u8, dst: u8, qp: u32, psn: u32) -> Vec<u8> {
    let ext = ExtHeaders {
        aeth: Some(roce_wire::ext::AethRepr {
            syndrome: 0x1f,
            msn: psn,
        }),
        ..ExtHeaders::default()
    };
    crate::common::v4_frame(
        src,
        dst,
        2,
        BthRepr::new(Opcode::RC_ACKNOWLEDGE, qp, psn),
        ext,
        &[],
    )
}

fn cnp(src: u8, dst: u8, qp: u32) -> Vec<u8> {
    frame(src, dst, 2, BthRepr::cnp(qp), &[0; 16])
}

/// The stream of CNPs (or responses) from 10.0.0.`src` to QP `qp` on 10.0.0.`dst`.
fn stream(src: u8, dst: u8, qp: u32) -> FlowKey {
    key(&format!("10.0.0.{src}"), &format!("10.0.0.{dst}"), qp)
}

/// Two RC QPs between the same hosts, both from PSN 0, in lockstep: every ACK's PSN fits both flows. Only the
/// flow to QP 0x200 (sent from QP 0x10) is CE-marked, and its receiver answers with CNPs to 0x10. The
/// unmarked flow to 0x100 (from 0x20) has the lower QP number, and a tie broken by QP number gave it all the
/// CNPs: the marked flow must get them, or nobody.
#[test]
fn lockstep_qps_from_psn_0_never_pair_the_marked_flows_cnps_to_the_unmarked_one() {
    let mut frames = Vec::new();
    for i in 0..200u32 {
        let t = 1_000_000 + u64::from(i) * 20_000;
        frames.push((
            t,
            crate::common::v4_frame(1, 2, 2, write(0x100, i), ExtHeaders::default(), &[0; 64]),
        ));
        frames.push((
            t + 100,
            crate::common::v4_frame(1, 2, 3, write(0x200, i), ExtHeaders::default(), &[0; 64]),
        ));
        if i % 4 == 3 {
            frames.push((t + 2_000, ack(2, 1, 0x20, i)));
            frames.push((t + 2_100, ack(2, 1, 0x10, i)));
        }
        if i % 4 == 0 {
            frames.push((t + 3_100, cnp(2, 1, 0x10)));
        }
    }
    let p = pair_frames(frames);
    let marked_cnps = stream(2, 1, 0x10);
    let to = p.of_cnp(&marked_cnps).map(|x| x.receiver_qp);
    assert_ne!(
        to,
        Some(0x100),
        "the marked flow's CNPs went to the unmarked flow"
    );
    // Here the CE marks settle it: reverse traffic fits both, the CNPs follow only 0x200's marks.
    assert_eq!(to, Some(0x200));
    assert_eq!(p.of_cnp(&marked_cnps).unwrap().method, Method::Timing);
    // The unmarked flow's sender is not known (its ACKs fit both flows): no guess.
    let unmarked = p.of_flow(&key("10.0.0.1", "10.0.0.2", 0x100));
    assert!(unmarked.is_none_or(|x| x.sender_qp == 0x20), "{unmarked:?}");
    assert!(p.ambiguous(&stream(2, 1, 0x20)).is_some());
}

/// A long flow (0x100 from 0x10) seen at one packet in 1024 (a sampled capture) climbs past PSN 2^23 while it
/// is acknowledged only now and then; a short flow (0x200 from 0x20) starts at a random PSN just below the
/// long one's and is acknowledged packet by packet. The long flow's PSN window, taken as everything it ever
/// covered, took in the short flow's ACKs as well, and the tie went to the lower QP: the short flow's CNPs were
/// given to the long flow. A window of the PSNs still outstanding keeps them apart.
#[test]
fn a_flow_past_psn_2_23_does_not_take_another_flows_acks() {
    let mut frames = Vec::new();
    let mut t = 1_000_000u64;
    let steps = 9_216u32; // 9,216 × 1,024 PSNs: past 2^23 (8,388,608).
    for i in 0..steps {
        let psn = (i * 1024) & 0xff_ffff;
        frames.push((
            t,
            crate::common::v4_frame(1, 2, 2, write(0x100, psn), ExtHeaders::default(), &[0; 64]),
        ));
        if i % 256 == 255 {
            frames.push((t + 2_000, ack(2, 1, 0x10, psn)));
        }
        t += 10_000;
    }
    // The short flow, near the end: PSNs 9,000,000.. while the long one is at 9.4 M.
    let start = t - 2_000_000;
    for i in 0..200u32 {
        let ts = start + u64::from(i) * 5_000;
        let psn = 9_000_000 + i;
        frames.push((
            ts,
            crate::common::v4_frame(1, 2, 3, write(0x200, psn), ExtHeaders::default(), &[0; 64]),
        ));
        frames.push((ts + 2_000, ack(2, 1, 0x20, psn)));
        if i % 10 == 0 {
            frames.push((ts + 3_000, cnp(2, 1, 0x20)));
        }
    }
    let p = pair_frames(frames);
    let short = p.of_cnp(&stream(2, 1, 0x20)).map(|x| x.receiver_qp);
    assert_ne!(
        short,
        Some(0x100),
        "the short flow's CNPs went to the long flow"
    );
    assert_eq!(short, Some(0x200));
    let long = p.of_flow(&key("10.0.0.1", "10.0.0.2", 0x100));
    assert_eq!(
        long.map(|x| (x.sender_qp, x.method)),
        Some((0x10, Method::ReverseTraffic))
    );
}

/// Two UC flows 1 → 2, both CE-marked at every packet: 0x100 from QP 0x20 and 0x200 from QP 0x10, each
/// answered by a CNP 3 µs later; in time order.
pub(crate) fn two_marked_flows() -> Vec<(u64, Vec<u8>)> {
    let mut frames = Vec::new();
    for i in 0..100u32 {
        let t = 1_000_000 + u64::from(i) * 10_000;
        frames.push((t, frame(1, 2, 3, send(0x100, i), &[0; 64])));
        frames.push((t + 50, frame(1, 2, 3, send(0x200, i), &[0; 64])));
        frames.push((t + 3_000, cnp(2, 1, 0x20)));
        frames.push((t + 3_200, cnp(2, 1, 0x10)));
    }
    frames.sort_by_key(|(t, _)| *t);
    frames
}

/// Two CE-marked UC flows in one queue, no reverse traffic: every CNP follows marks of both flows. Timing
/// cannot tell them apart, and splitting them by QP order paired each stream with the other's flow (0x100 is
/// sent from 0x20, 0x200 from 0x10). Both flows are marked so often that a CNP follows a mark of each
/// whatever it answers: both streams are ambiguous (`all_active`), with both candidates and their scores.
#[test]
fn two_marked_flows_in_one_queue_are_ambiguous_not_split_by_qp_order() {
    let p = pair_frames(two_marked_flows());
    for (cnp_qp, truth) in [(0x20, 0x100), (0x10, 0x200)] {
        let s = stream(2, 1, cnp_qp);
        let got = p.of_cnp(&s).map(|x| x.receiver_qp);
        assert!(
            got.is_none_or(|q| q == truth),
            "stream to 0x{cnp_qp:x} paired with 0x{got:x?}"
        );
        let a = p.ambiguous(&s).expect("reported as ambiguous");
        assert_eq!((a.reason, a.basis), ("all_active", "timing"));
        assert_eq!(a.cnps, 100);
        let mut qps: Vec<u32> = a.candidates.iter().map(|c| c.receiver_qp).collect();
        qps.sort_unstable();
        assert_eq!(qps, [0x100, 0x200]);
        assert!(a.candidates.iter().all(|c| c.ce_share == Some(1.0)));
        assert!(a.candidates.iter().all(|c| c.ce_null == Some(1.0)));
    }
}

/// At 100 Gb/s a heavily marked flow puts far more than 32 CE packets between another flow's single mark and
/// the CNP that answers it. A ring of the last 32 marks lost the single mark, and the CNP was given to the
/// heavy flow; each flow's last mark is kept now, so the stream is at worst ambiguous.
#[test]
fn many_marks_of_one_flow_do_not_push_out_another_flows_mark() {
    let mut frames = Vec::new();
    for i in 0..50u32 {
        let t = 1_000_000 + u64::from(i) * 50_000;
        // The light flow (0x100, sender 0x10): one mark, answered 2 µs later.
        frames.push((t, frame(1, 2, 3, send(0x100, i), &[0; 64])));
        frames.push((t + 2_000, cnp(2, 1, 0x10)));
        // The heavy flow (0x200, sender 0x20): 100 marked packets, 10 ns apart, between the two; its own
        // CNPs come 20 µs later, after its marks stopped.
        for k in 0..100u32 {
            frames.push((
                t + 500 + u64::from(k) * 10,
                frame(1, 2, 3, send(0x200, i * 100 + k), &[0; 64]),
            ));
        }
        frames.push((t + 22_000, cnp(2, 1, 0x20)));
    }
    let p = pair_frames(frames);
    let light = p.of_cnp(&stream(2, 1, 0x10)).map(|x| x.receiver_qp);
    assert_ne!(
        light,
        Some(0x200),
        "the light flow's CNPs went to the heavy flow"
    );
}

/// A tap at the sender sees no CE mark (the switch marks after it). Flow 0x100 (from 0x10) sends a 50 µs
/// burst every millisecond, flow 0x200 (from 0x20) likewise half a millisecond later, and each burst brings a
/// CNP to its sender: the CNPs' timing against the flows' activity ties each stream to its flow, because each
/// flow is idle most of the time. Without CE marks nothing was paired.
#[test]
fn a_tap_at_the_sender_pairs_cnps_by_the_flows_activity() {
    let mut frames = Vec::new();
    for burst in 0..12u32 {
        let t = 1_000_000 + u64::from(burst) * 1_000_000;
        for i in 0..10u32 {
            let psn = burst * 10 + i;
            let at = t + u64::from(i) * 5_000;
            frames.push((at, frame(1, 2, 2, send(0x100, psn), &[0; 64])));
            frames.push((at + 500_000, frame(1, 2, 2, send(0x200, psn), &[0; 64])));
        }
        frames.push((t + 58_000, cnp(2, 1, 0x10)));
        frames.push((t + 558_000, cnp(2, 1, 0x20)));
    }
    let p = pair_frames(frames);
    for (cnp_qp, truth) in [(0x10, 0x100), (0x20, 0x200)] {
        let pair = p.of_cnp(&stream(2, 1, cnp_qp)).expect("paired");
        assert_eq!((pair.receiver_qp, pair.method), (truth, Method::Activity));
    }
}

/// The same flows, but each sends all the time while its stream's CNPs come: "it sent before every CNP" is
/// then what any flow would score, and nothing is paired (the reason says why).
#[test]
fn a_flow_that_always_sends_is_not_singled_out_by_activity() {
    let mut frames = Vec::new();
    for i in 0..100u32 {
        let t = 1_000_000 + u64::from(i) * 10_000;
        frames.push((t, frame(1, 2, 2, send(0x100, i), &[0; 64])));
        frames.push((t + 1_000_000, frame(1, 2, 2, send(0x200, i), &[0; 64])));
        if i % 5 == 1 {
            frames.push((t + 8_000, cnp(2, 1, 0x10)));
            frames.push((t + 1_008_000, cnp(2, 1, 0x20)));
        }
    }
    let p = pair_frames(frames);
    for cnp_qp in [0x10, 0x20] {
        let s = stream(2, 1, cnp_qp);
        assert!(p.of_cnp(&s).is_none());
        let a = p.ambiguous(&s).expect("reported as ambiguous");
        assert_eq!((a.reason, a.basis), ("all_active", "activity"));
    }
}

/// One CNP, one candidate of many that happened to send just before it: it scores "100 % against 0 %", which
/// any of them would have with some luck. Never a pair; the reason says more CNPs would tell.
#[test]
fn one_cnp_among_many_candidates_is_too_few() {
    let p = pair_frames(one_cnp_among_many_flows());
    let s = stream(2, 1, 0x77);
    assert!(p.of_cnp(&s).is_none());
    let a = p.ambiguous(&s).expect("reported as ambiguous");
    assert_eq!((a.reason, a.basis, a.cnps), ("too_few_cnps", "activity", 1));
    assert_eq!(a.candidates[0].receiver_qp, 0x1000 + 63);
}

/// 64 flows 1 → 2, each sending once, 200 µs apart; one CNP to QP 0x77 comes 10 µs after the last one.
pub(crate) fn one_cnp_among_many_flows() -> Vec<(u64, Vec<u8>)> {
    let mut frames = Vec::new();
    for q in 0..64u32 {
        let t = 1_000_000 + u64::from(q) * 200_000;
        frames.push((t, frame(1, 2, 2, send(0x1000 + q, 7), &[0; 64])));
    }
    frames.push((1_000_000 + 63 * 200_000 + 10_000, cnp(2, 1, 0x77)));
    frames
}

/// The whole analysis on the two marked flows above: neither flow's model gets the CNPs, the streams are listed
/// as unpaired with their reason and candidates, and a finding says why.
#[test]
fn an_ambiguous_stream_is_reported_with_its_candidates_and_a_finding() {
    use analyzer::analysis::{self as pipeline, PipelineOptions};
    let frames = two_marked_flows();
    let dir = std::env::temp_dir().join(format!("rocetrace-pairing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ambiguous.pcap");
    let mut w =
        roce_capture::write::PcapWriter::new(Vec::new(), LinkType::ETHERNET, 65535).unwrap();
    for (t, f) in &frames {
        w.write_packet(*t, f, f.len() as u32).unwrap();
    }
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let mut capture = roce_capture::Capture::open_file(&path).unwrap();
    let a = pipeline::run(&mut capture, &PipelineOptions::default(), |_| {}).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        a.dcqcn
            .flows
            .iter()
            .all(|f| f.summary.cnps == 0 && f.summary.pairing.is_none())
    );
    assert_eq!(a.dcqcn.unpaired_cnps.len(), 2);
    for u in &a.dcqcn.unpaired_cnps {
        assert_eq!((u.reason, u.basis), ("all_active", Some("timing")));
        assert_eq!(u.candidates.len(), 2);
        assert!(u.describe().contains("QP 0x000100"), "{}", u.describe());
    }
    let f = a
        .findings
        .iter()
        .find(|f| f.code == "ambiguous_pairing")
        .expect("a finding");
    assert_eq!(f.evidence.len(), 2);
    let json = serde_json::to_value(&a.dcqcn).unwrap();
    assert_eq!(json["unpaired_cnps"][0]["candidates"][0]["ce_share"], 1.0);
}

// ---- The NP check's logs on disk (issue 14, bounded memory). ----

#[test]
fn the_np_marks_read_back_from_the_temporary_file_are_those_kept_in_memory() {
    // A saturation mix over few QPs: thousands of CE marks and CNPs per flow, so the logs go to the file.
    let spec = samples::bulk::BulkSpec {
        qps: 32,
        ..samples::bulk::BulkSpec::saturation(300_000)
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("saturation.pcap");
    let counts = samples::bulk::write(std::fs::File::create(&path).unwrap(), &spec).unwrap();
    assert!(counts.cnps > 1_000, "{counts:?}");
    let (mut on_disk, mut in_memory) = (PairingPass::default(), PairingPass::in_memory());
    let dec = Decoder::default();
    let mut r = CaptureReader::open(&path).unwrap();
    let mut n = 0;
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        let f = Brief::of(&dec.decode(n, &rec));
        on_disk.frame(&f);
        in_memory.frame(&f);
    }
    let (written, held) = on_disk.spilled();
    assert!(written > 0, "the logs stayed in memory ({held} bytes)");
    assert_eq!(in_memory.spilled().0, 0);
    let (a, b) = (on_disk.finish(), in_memory.finish());
    let mut answered = 0;
    for p in a.pairs() {
        let (stream, flow) = (p.stream(), p.flow());
        for gap_ns in [0, 4_000, 50_000] {
            let marks = a.ce_triggers(0, &stream, &flow, gap_ns);
            assert_eq!(marks, b.ce_triggers(0, &stream, &flow, gap_ns), "{p:?}");
            answered += marks.len();
        }
    }
    assert!(a.spill_error().is_none());
    assert!(
        answered as u64 > counts.cnps,
        "{answered} marks for {} CNPs",
        counts.cnps
    );
}

/// The DCQCN analysis takes every stream's CNP times from the pairing's logs, which wait on disk: they come back
/// exact and in order, per tap, for a paired stream and for one no flow took, however long the log (thousands
/// of CNPs go far past the few hundred bytes a log keeps in memory, and the blocks past the file's first
/// write), and for both kinds of pass.
#[test]
fn cnp_times_come_back_from_the_logs_per_tap_and_stream() {
    let dec = Decoder::default();
    for (mut pass, on_disk) in [
        (PairingPass::default(), true),
        (PairingPass::in_memory(), false),
    ] {
        let mut n = 0;
        let mut feed = |bytes: Vec<u8>, iface: u32, t: u64, pass: &mut PairingPass| {
            n += 1;
            feed_frame(pass, &dec, n, (iface, t), &bytes);
        };
        let (mut paired, mut lone, mut second_tap) = (Vec::new(), Vec::new(), Vec::new());
        let mut t = 1_000_000u64;
        for i in 0..6_000u32 {
            // CE-marked data 1 → 2 to QP 0x200, answered by a CNP to QP 0x99 3 µs later; irregular gaps.
            feed(frame(1, 2, 3, send(0x200, i), &[0; 64]), 0, t, &mut pass);
            let c = t + 3_000 + u64::from(i % 7) * 13;
            feed(cnp(2, 1, 0x99), 0, c, &mut pass);
            paired.push(c);
            // The same CNP seen 300 ns later at a second tap.
            feed(cnp(2, 1, 0x99), 1, c + 300, &mut pass);
            second_tap.push(c + 300);
            // CNPs to a QP no flow answers to, now and then.
            if i % 3 == 0 {
                feed(cnp(4, 3, 0x55), 0, c + 1_000, &mut pass);
                lone.push(c + 1_000);
            }
            t += 50_000 + u64::from(i % 11) * 1_000;
        }
        assert_eq!(pass.spilled().0 > 0, on_disk, "{:?}", pass.spilled());
        let p = pass.finish();
        assert!(p.of_cnp(&stream(2, 1, 0x99)).is_some());
        assert_eq!(p.cnp_times(0, &stream(2, 1, 0x99)), paired);
        assert_eq!(p.cnp_times(1, &stream(2, 1, 0x99)), second_tap);
        assert_eq!(p.cnp_times(0, &stream(4, 3, 0x55)), lone);
        assert!(p.cnp_times(1, &stream(4, 3, 0x55)).is_empty());
        let mut streams: Vec<((u32, FlowKey), u64)> = p.cnp_streams().collect();
        streams.sort_by_key(|&((iface, k), _)| (k, iface));
        assert_eq!(
            streams,
            [
                ((0, stream(2, 1, 0x99)), 6_000),
                ((1, stream(2, 1, 0x99)), 6_000),
                ((0, stream(4, 3, 0x55)), 2_000),
            ]
        );
        assert!(p.spill_error().is_none());
    }
}
